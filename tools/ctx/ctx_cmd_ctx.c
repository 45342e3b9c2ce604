/* The context commands: ctx create, ls, rm, restart, fork and interrupt,
 * one control request each (ctx.create, ctx.list, ctx.delete, ctx.restart,
 * ctx.fork, interrupt). */
#include "ctx.h"
#include "mem.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* {"t":"ok","ctx":INFO} for create and restart. */
static void json_ok_ctx(const ctxd_ctx_info *info)
{
    jw w;
    jw_init(&w, stdout);
    jw_obj(&w);
    jw_kstr(&w, "t", "ok");
    jw_key(&w, "ctx");
    jw_ctx_info(&w, info);
    jw_obj_end(&w);
    jw_line(&w);
}

/* ctx create: start a context, print its (possibly generated) name. */
int ctx_cmd_ctx_create(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"cwd", required_argument, NULL, 'C'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"package", required_argument, NULL, 'p'},
                                             {"tier", required_argument, NULL, 't'},
                                             {"policy", required_argument, NULL, 'P'},
                                             {"from-snapshot", required_argument, NULL, 'S'},
                                             {"autosnapshot", required_argument, NULL, 'A'},
                                             CTX_COMMON_LONGOPTS,
                                             {0}};
    ctx_env_list env = {0}, policy = {0};
    const char *tier = NULL;
    const char *cwd = NULL;
    const char *from = NULL, *autosnap = NULL;
    const char **pkgs = NULL;
    size_t npkgs = 0;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":e:p:t:P:h", longopts, NULL)) != -1) {
        if (opt == 'C') {
            cwd = optarg;
        } else if (opt == 'e') {
            r = ctx_env_add(&env, cmd, optarg);
        } else if (opt == 't') {
            tier = optarg;
        } else if (opt == 'S') {
            from = optarg;
        } else if (opt == 'A') {
            autosnap = optarg;
        } else if (opt == 'P') {
            r = ctx_env_add(&policy, cmd, optarg);
        } else if (opt == 'p') {
            pkgs = mem_realloc(pkgs, (npkgs + 1) * sizeof *pkgs);
            pkgs[npkgs++] = optarg;
        } else {
            r = ctx_common_opt(cli, cmd, opt, argv);
        }
    }
    if (r == CONTINUE)
        r = ctx_positionals(cmd, argc, argv, 0, 1);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE) {
        /* The daemon wants an absolute path; resolve a relative one here. */
        char *abs = cwd ? realpath(cwd, NULL) : NULL;
        ctxd_ctx_info info;
        ctxd_create_opts o = {.name = optind < argc ? argv[optind] : NULL,
                              .cwd = abs ? abs : cwd,
                              .env = env.kv,
                              .nenv = env.n,
                              .packages = pkgs,
                              .npackages = npkgs,
                              .tier = tier,
                              .policy = policy.kv,
                              .npolicy = policy.n,
                              .from_snapshot = from,
                              .autosnapshot = autosnap};
        int rc = ctxd_ctx_create_ex(cli->client, &o, &info);
        free(abs);
        if (rc == 0 && cli->json)
            json_ok_ctx(&info);
        else if (rc == 0)
            printf("%s\n", info.name);
        r = rc == 0 ? EX_OK : ctx_report(cli, rc);
    }
    free(env.kv);
    free(policy.kv);
    free(pkgs);
    return r;
}

static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Natural order of names: runs of digits compare as numbers, so exp-2
 * comes before exp-10; otherwise bytewise. */
int ctx_natural_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            const char *za = a, *zb = b;
            while (*za == '0')
                za++;
            while (*zb == '0')
                zb++;
            size_t la = 0, lb = 0;
            while (za[la] >= '0' && za[la] <= '9')
                la++;
            while (zb[lb] >= '0' && zb[lb] <= '9')
                lb++;
            if (la != lb)
                return la < lb ? -1 : 1;
            int c = memcmp(za, zb, la);
            if (c)
                return c;
            size_t da = (size_t)(za - a) + la, db = (size_t)(zb - b) + lb;
            if (da != db) /* equal values: fewer leading zeros first */
                return da < db ? -1 : 1;
            a += da;
            b += db;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int list_print(ctx_cli *cli, const ctxd_ctx_info *infos, size_t n);

/* qsort's comparison of two contexts by name. */
static int info_cmp(const void *x, const void *y)
{
    return ctx_natural_cmp(((const ctxd_ctx_info *)x)->name, ((const ctxd_ctx_info *)y)->name);
}

/* ctx ls: one table row per context, names in natural order. */
int ctx_cmd_ctx_ls(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    const ctxd_ctx_info *infos;
    size_t n;
    int rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    ctxd_ctx_info *sorted = mem_alloc((n ? n : 1) * sizeof *sorted);
    memcpy(sorted, infos, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, info_cmp);
    infos = sorted;
    int status = list_print(cli, infos, n);
    free(sorted);
    return status;
}

/* The table (or JSON) of ctx ls. */
static int list_print(ctx_cli *cli, const ctxd_ctx_info *infos, size_t n)
{
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "contexts");
        jw_arr(&w);
        for (size_t i = 0; i < n; i++)
            jw_ctx_info(&w, &infos[i]);
        jw_arr_end(&w);
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    int width = 4;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(infos[i].name) > width)
            width = (int)strlen(infos[i].name);
    double now = unix_now();
    printf("%-*s  %-5s  %-7s  %7s  %4s  %6s  %6s  %9s  %s\n", width, "NAME", "STATE", "TIER", "PID",
           "INC", "RUNS", "QUEUED", "MEMORY", "AGE");
    for (size_t i = 0; i < n; i++) {
        const ctxd_ctx_info *c = &infos[i];
        char pid[24], age[32], mem[32];
        snprintf(pid, sizeof pid, "%llu", (unsigned long long)c->pid);
        printf("%-*s  %-5s  %-7s  %7s  %4llu  %6llu  %6llu  %9s  %s\n", width, c->name, c->state,
               c->tier, c->pid ? pid : "-", (unsigned long long)c->incarnation,
               (unsigned long long)c->execution_count, (unsigned long long)c->queued,
               c->pss ? ctx_format_bytes(c->pss, mem, sizeof mem) : "-",
               ctx_format_age(now - c->created, age, sizeof age));
    }
    return EX_OK;
}

/* ctx rm: delete a context. */
int ctx_cmd_ctx_rm(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 1);
    if (r != CONTINUE)
        return r;
    int rc = ctxd_ctx_delete(cli->client, argv[optind]);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        printf("{\"t\":\"ok\"}\n");
    return EX_OK;
}

/* ctx restart: fresh worker for a context. */
int ctx_cmd_ctx_restart(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    ctxd_ctx_info info;
    int rc = ctxd_ctx_restart(cli->client, optind < argc ? argv[optind] : NULL, &info);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        json_ok_ctx(&info);
    else
        printf("%s: restarted (incarnation %llu, pid %llu)\n", info.name,
               (unsigned long long)info.incarnation, (unsigned long long)info.pid);
    return EX_OK;
}

/* ctx fork: clone a live context. It waits behind SRC's queue, so the
 * reply may take as long as the runs before it. */
int ctx_cmd_ctx_fork(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 1, 2);
    if (r != CONTINUE)
        return r;
    /* No deadline: ctxd_ctx_fork waits behind SRC's runs while the daemon
     * answers liveness checks. */
    ctxd_ctx_info info;
    int rc = ctxd_ctx_fork(cli->client, argv[optind], optind + 1 < argc ? argv[optind + 1] : NULL,
                           &info);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        json_ok_ctx(&info);
    else
        printf("%s\n", info.name);
    return EX_OK;
}

/* ctx interrupt: KeyboardInterrupt in whatever runs on a context. */
int ctx_cmd_ctx_interrupt(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    const char *name = optind < argc ? argv[optind] : "default";
    bool interrupted = false;
    int rc = ctxd_interrupt(cli->client, name, &interrupted);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        printf("{\"t\":\"ok\",\"interrupted\":%s}\n", interrupted ? "true" : "false");
    else
        printf(interrupted ? "%s: interrupted\n" : "%s: nothing was running\n", name);
    return EX_OK;
}
