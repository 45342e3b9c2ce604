/* run_hello: the smallest complete libctxd program. It connects to the
 * daemon ($CTXD_ENDPOINT or the default endpoint, or argv[1]), runs two cells
 * in the "default" context to show that state persists between runs, and
 * prints what comes back.
 *
 *   ctxd --listen ipc:///tmp/ctxd.sock &
 *   ctxd_example_run ipc:///tmp/ctxd.sock */
#include "ctxd.h"

#include <stdio.h>
#include <string.h>

/* Output chunks go straight to the matching local stream. */
static void print_stream(void *user, const char *name, const void *data, size_t len)
{
    (void)user;
    FILE *f = strcmp(name, "stderr") == 0 ? stderr : stdout;
    fwrite(data, 1, len, f);
    fflush(f);
}

/* A trailing expression's value, as a notebook would show it. */
static void print_result(void *user, const char *const *keys, const char *const *values, size_t n,
                         uint64_t execution_count)
{
    (void)user;
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], "text/plain") == 0)
            printf("Out[%llu]: %s\n", (unsigned long long)execution_count, values[i]);
}

/* A run that raised: the exception in one line (traceback has the rest). */
static void print_error(void *user, const char *ename, const char *evalue,
                        const char *const *traceback, size_t n)
{
    (void)user;
    (void)traceback;
    (void)n;
    fprintf(stderr, "%s: %s\n", ename, evalue);
}

/* Runs one cell and reports how it ended; returns the library's result. */
static int run(ctxd_client *c, const char *code)
{
    ctxd_exec_opts opts = {.code = code, .timeout = -1};
    ctxd_callbacks cb = {
        .on_stream = print_stream, .on_result = print_result, .on_error = print_error};
    ctxd_outcome out;
    int rc = ctxd_execute(c, &opts, &cb, NULL, &out);
    if (rc < 0) {
        const char *code_str, *msg;
        ctxd_last_error(c, &code_str, &msg);
        fprintf(stderr, "execute failed: %s: %s\n", code_str, msg);
        return rc;
    }
    printf("[run %llu ended with status %d after %.3f s]\n",
           (unsigned long long)out.execution_count, (int)out.status, out.duration);
    return out.status == CTXD_OK ? 0 : 1;
}

/* Connect, run two cells, close: the whole life cycle of a client. */
int main(int argc, char **argv)
{
    char err[512];
    ctxd_client *c = ctxd_connect(argc > 1 ? argv[1] : NULL, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cannot connect: %s\n", err);
        return 1;
    }
    int rc = run(c, "greeting = 'hello from ctxd'\nprint(greeting)");
    if (rc == 0)
        rc = run(c, "greeting.upper()");
    ctxd_close(c);
    return rc == 0 ? 0 : 1;
}
