/* sbx_host: what the confinement steps need from the program they confine,
 * given once at start (the worker: wrk_main.c). The sandbox includes no
 * header of the worker: it reports its problems and reads its process's
 * memory layout through these. */
#ifndef CTXD_SBX_HOST_H
#define CTXD_SBX_HOST_H

typedef struct sbx_host {
    /* One diagnostic line (no newline), to the program's own log. */
    void (*log)(const char *msg);
    /* Two consecutive numeric fields of /proc/self/stat (1-based, as in
     * proc(5)): the bounds of a memory area. 0, or -1 when unreadable. */
    int (*stat_range)(int first_field, unsigned long long *start, unsigned long long *end);
} sbx_host;

/* Before any other sbx_ call; h is kept (static storage). */
void sbx_host_set(const sbx_host *h);
/* Formats one line and hands it to the host's log (stderr before set). */
void sbx_host_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The host's stat_range; -1 before set. */
int sbx_host_stat_range(int first_field, unsigned long long *start, unsigned long long *end);

#endif
