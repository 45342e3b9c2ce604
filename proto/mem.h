/* mem: the one place where allocation failure is handled (by aborting), and
 * fatal() for broken invariants. Shared by daemon, worker and client. */
#ifndef CTXD_MEM_H
#define CTXD_MEM_H

#include <stddef.h>

void *mem_alloc(size_t n);
void *mem_calloc(size_t count, size_t size);
void *mem_realloc(void *p, size_t n);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t n);

/* Where fatal() writes (default 2). The worker points it at its saved copy
 * of the original stderr, since its fd 2 is the captured output. */
void mem_set_fatal_fd(int fd);

/* Prints "ctxd: fatal: <msg>" to the fatal fd and aborts. For broken invariants
 * only; bad outside input gets an error reply instead. */
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
