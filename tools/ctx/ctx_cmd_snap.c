/* The snapshot commands: ctx snapshot, restore, snapshots, snapshot-rm,
 * snapshot-export and snapshot-import, one request each (ctx.snapshot,
 * ctx.restore, ctx.snapshots, ctx.snapshot_delete, ctx.snapshot_export,
 * ctx.snapshot_import). */
#include "ctx.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The globals a snapshot or restore left out, on stderr (never silent). */
static void print_unsaved(const ctxd_unsaved *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "not saved: %s: %s\n", u[i].name, u[i].reason);
}

static void jw_unsaved(jw *w, const ctxd_unsaved *u, size_t n)
{
    jw_key(w, "unsaved");
    jw_arr(w);
    for (size_t i = 0; i < n; i++) {
        jw_obj(w);
        jw_kstr(w, "name", u[i].name);
        jw_kstr(w, "reason", u[i].reason);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static void jw_snapshot(jw *w, const ctxd_snapshot *s)
{
    jw_obj(w);
    jw_kstr(w, "id", s->id);
    jw_kstr(w, "ctx", s->ctx);
    jw_kstr(w, "name", s->name);
    jw_kuint(w, "size", s->size);
    jw_knum(w, "created", s->created);
    jw_obj_end(w);
}

/* ctx snapshot CTX [NAME]: prints the snapshot's id and size. */
int ctx_cmd_snap_snapshot(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 2);
    if (r != CONTINUE)
        return r;
    ctxd_snapshot s;
    const ctxd_unsaved *u;
    size_t n;
    int rc = ctxd_ctx_snapshot(cli->client, argv[optind],
                               optind + 1 < argc ? argv[optind + 1] : NULL, &s, &u, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "snapshot");
        jw_snapshot(&w, &s);
        jw_unsaved(&w, u, n);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        printf("%s (%llu bytes)\n", s.id, (unsigned long long)s.size);
        print_unsaved(u, n);
    }
    return EX_OK;
}

/* ctx restore CTX SNAPSHOT: replaces CTX's state. */
int ctx_cmd_snap_restore(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 2, 2);
    if (r != CONTINUE)
        return r;
    uint64_t restored = 0;
    const ctxd_unsaved *u;
    size_t n;
    int rc = ctxd_ctx_restore(cli->client, argv[optind], argv[optind + 1], &restored, &u, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_kuint(&w, "restored", restored);
        jw_unsaved(&w, u, n);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        printf("%s: %llu globals restored from %s\n", argv[optind], (unsigned long long)restored,
               argv[optind + 1]);
        print_unsaved(u, n);
    }
    return EX_OK;
}

/* ctx snapshots [CTX]: one line per snapshot, its id, size and local
 * creation time, under a header on a terminal. */
int ctx_cmd_snap_list(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    const ctxd_snapshot *s;
    size_t n;
    int rc = ctxd_ctx_snapshots(cli->client, optind < argc ? argv[optind] : NULL, &s, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "snapshots");
        jw_arr(&w);
        for (size_t i = 0; i < n; i++)
            jw_snapshot(&w, &s[i]);
        jw_arr_end(&w);
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    int width = 20;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(s[i].id) > width)
            width = (int)strlen(s[i].id);
    if (n > 0 && isatty(STDOUT_FILENO)) /* a pipe gets the rows alone */
        printf("%-*s  %10s  %s\n", width, "ID", "SIZE", "CREATED");
    for (size_t i = 0; i < n; i++) {
        char size[32], when[32] = "-";
        time_t t = (time_t)s[i].created;
        struct tm tm;
        if (s[i].created > 0 && localtime_r(&t, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        printf("%-*s  %10s  %s\n", width, s[i].id, ctx_format_bytes(s[i].size, size, sizeof size),
               when);
    }
    return EX_OK;
}

/* ctx snapshot-rm CTX/NAME. */
int ctx_cmd_snap_rm(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 1);
    if (r != CONTINUE)
        return r;
    int rc = ctxd_snapshot_delete(cli->client, argv[optind]);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        printf("{\"t\":\"ok\"}\n");
    return EX_OK;
}

/* ctx snapshot-export CTX/NAME: prints the exported file's path and tier. */
int ctx_cmd_snap_export(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 1);
    if (r != CONTINUE)
        return r;
    const char *path = NULL, *tier = NULL;
    int rc = ctxd_snapshot_export(cli->client, argv[optind], &path, &tier);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_kstr(&w, "snapshot", argv[optind]);
        jw_kstr(&w, "path", path);
        jw_kstr(&w, "tier", tier);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        printf("%s (written by a %s context)\n", path, tier);
    }
    return EX_OK;
}

/* ctx snapshot-import CTX/NAME: prints the snapshot's id, size and tier. */
int ctx_cmd_snap_import(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 1);
    if (r != CONTINUE)
        return r;
    ctxd_snapshot s;
    const char *tier = NULL;
    int rc = ctxd_snapshot_import(cli->client, argv[optind], &s, &tier);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "snapshot");
        jw_snapshot(&w, &s);
        jw_kstr(&w, "tier", tier);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        printf("%s (%llu bytes, written by a %s context)\n", s.id, (unsigned long long)s.size,
               tier);
    }
    return EX_OK;
}
