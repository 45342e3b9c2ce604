/* ctx cp: copies a file into or out of a context's directory in chunks
 * (file.put / file.get), so a large file is never held whole in memory. */
#include "ctx.h"
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One side of a copy: a context's file (ctx set) or a local one. */
typedef struct cp_end {
    char ctx[80]; /* "" for a local file */
    const char *path;
} cp_end;

/* CTX:PATH when the part before the first ':' is a context name (or empty:
 * 'default'); anything else is local. */
static void cp_parse(const char *arg, cp_end *e)
{
    e->ctx[0] = '\0';
    e->path = arg;
    const char *colon = strchr(arg, ':');
    if (!colon || (size_t)(colon - arg) >= sizeof e->ctx - 1)
        return;
    for (const char *p = arg; p < colon; p++)
        if (!(*p == '_' || *p == '.' || *p == '-' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return;
    if (colon == arg)
        snprintf(e->ctx, sizeof e->ctx, "default");
    else
        snprintf(e->ctx, sizeof e->ctx, "%.*s", (int)(colon - arg), arg);
    e->path = colon + 1;
}

/* The last component of a path ("" for none). */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Reads until buf is full or end of file; -1 on error. */
static ssize_t read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Local file (or stdin) -> the context's file, one file.put per chunk. */
static int cp_in(ctx_cli *cli, const char *local, const char *ctx, const char *path,
                 uint64_t *total)
{
    int fd = strcmp(local, "-") == 0 ? 0 : open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
        return EX_USAGE;
    }
    char *buf = mem_alloc(CTXD_FILE_CHUNK);
    int r = EX_OK;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = read_full(fd, buf, CTXD_FILE_CHUNK);
        if (n < 0) {
            fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
            r = EX_USAGE;
            break;
        }
        /* The first put is sent even for an empty file: it creates it. */
        if (n == 0 && off > 0)
            break;
        int rc = ctxd_file_put(cli->client, ctx, path, off, buf, (size_t)n, NULL);
        if (rc < 0) {
            r = ctx_report(cli, rc);
            break;
        }
        off += (uint64_t)n;
        if ((size_t)n < CTXD_FILE_CHUNK)
            break;
    }
    free(buf);
    if (fd > 0)
        close(fd);
    *total = off;
    return r;
}

/* The context's file -> a local file (or stdout), one file.get per chunk. */
static int cp_out(ctx_cli *cli, const char *ctx, const char *path, const char *local,
                  uint64_t *total)
{
    bool to_stdout = strcmp(local, "-") == 0;
    int fd = -1;
    uint64_t off = 0;
    for (;;) {
        const void *data;
        size_t n;
        bool eof;
        int rc = ctxd_file_get(cli->client, ctx, path, off, CTXD_FILE_CHUNK, &data, &n, NULL, &eof);
        if (rc < 0) {
            if (fd > 1)
                close(fd);
            return ctx_report(cli, rc);
        }
        if (fd < 0) { /* opened once the daemon found the file */
            fd = to_stdout ? 1 : open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) {
                fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
                return EX_USAGE;
            }
        }
        for (size_t done = 0; done < n;) {
            ssize_t w = write(fd, (const char *)data + done, n - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                fprintf(stderr, "ctx: %s: %s\n", to_stdout ? "stdout" : local, strerror(errno));
                if (fd > 1)
                    close(fd);
                return EX_USAGE;
            }
            done += (size_t)w;
        }
        off += n;
        if (eof || n == 0)
            break;
    }
    if (fd > 1 && close(fd) < 0) {
        fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
        return EX_USAGE;
    }
    *total = off;
    return EX_OK;
}

/* ctx cp SRC DST: exactly one side is CTX:PATH. */
int ctx_cmd_files_cp(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 2, 2);
    if (r != CONTINUE)
        return r;
    cp_end src, dst;
    cp_parse(argv[optind], &src);
    cp_parse(argv[optind + 1], &dst);
    if (!src.ctx[0] == !dst.ctx[0])
        return ctx_usage(cmd, "exactly one of SRC and DST must be CTX:PATH");
    char *joined = NULL;
    uint64_t total = 0;
    if (dst.ctx[0]) {
        /* CTX: or CTX:dir/ takes the local file's name. */
        if (dst.path[0] == '\0' || dst.path[strlen(dst.path) - 1] == '/') {
            if (strcmp(src.path, "-") == 0 || !base_name(src.path)[0])
                return ctx_usage(cmd, "'%s' needs a file name", argv[optind + 1]);
            joined = mem_alloc(strlen(dst.path) + strlen(base_name(src.path)) + 1);
            sprintf(joined, "%s%s", dst.path, base_name(src.path));
            dst.path = joined;
        }
        /* Copying in creates the context on first use, as `run -c` does
         * (also 'default', which file.put does not make). */
        int rc = ctxd_ctx_create(cli->client, dst.ctx, NULL, NULL, 0, NULL);
        const char *code;
        ctxd_last_error(cli->client, &code, NULL);
        if (rc < 0 && !(rc == CTXD_EREFUSED && strcmp(code, "exists") == 0))
            r = ctx_report(cli, rc);
        else
            r = cp_in(cli, src.path, dst.ctx, dst.path, &total);
    } else {
        struct stat st;
        if (strcmp(dst.path, "-") != 0 && stat(dst.path, &st) == 0 && S_ISDIR(st.st_mode)) {
            joined = mem_alloc(strlen(dst.path) + strlen(base_name(src.path)) + 2);
            sprintf(joined, "%s/%s", dst.path, base_name(src.path));
            dst.path = joined;
        }
        r = cp_out(cli, src.ctx, src.path, dst.path, &total);
    }
    free(joined);
    if (r == EX_OK && cli->json)
        printf("{\"t\":\"ok\",\"bytes\":%llu}\n", (unsigned long long)total);
    return r;
}
