/* mem: allocation wrappers that abort on failure, and fatal(). */
#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory is not recoverable for a daemon that must stay consistent:
 * stop loudly instead of limping on with NULLs. */
static int fatal_fd = 2;

void mem_set_fatal_fd(int fd)
{
    fatal_fd = fd;
}

static _Noreturn void out_of_memory(size_t n)
{
    dprintf(fatal_fd, "ctxd: fatal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *mem_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *mem_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *mem_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n);
    return q;
}

char *mem_strndup(const char *s, size_t n)
{
    char *d = mem_alloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *mem_strdup(const char *s)
{
    return mem_strndup(s, strlen(s));
}

void fatal(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dprintf(fatal_fd, "ctxd: fatal: %s\n", msg);
    abort();
}
