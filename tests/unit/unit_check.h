/* unit_check: the CHECK of the small C unit tests. A failed check is
 * printed with its place and counted in `failures`; the test goes on, and
 * main returns non-zero when any failed. Included once per test program. */
#ifndef CTXD_UNIT_CHECK_H
#define CTXD_UNIT_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
