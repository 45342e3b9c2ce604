/* ctx pip: installs packages into one context (pip.install). */
#include "ctx.h"

#include <getopt.h>
#include <stdio.h>

/* ctx pip [-c CTX] PKG...: pip.install into one context. */
int ctx_cmd_pkgs_pip(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ctx", required_argument, NULL, 'c'}, CTX_COMMON_LONGOPTS, {0}};
    const char *ctx = NULL;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:h", longopts, NULL)) != -1) {
        if (opt == 'c')
            ctx = optarg;
        else
            r = ctx_common_opt(cli, cmd, opt, argv);
    }
    if (r == CONTINUE)
        r = ctx_positionals(cmd, argc, argv, 1, 1 << 20);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE)
        r = ctx_ensure_context(cli, ctx);
    if (r != CONTINUE)
        return r;
    const ctxd_package *pkgs;
    size_t n;
    int rc = ctxd_pip_install(cli->client, ctx, (const char *const *)argv + optind,
                              (size_t)(argc - optind), &pkgs, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "packages");
        jw_arr(&w);
        for (size_t i = 0; i < n; i++) {
            jw_obj(&w);
            jw_kstr(&w, "name", pkgs[i].name);
            jw_kbool(&w, "cached", pkgs[i].cached);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s %s\n", pkgs[i].name, pkgs[i].cached ? "cached" : "installed");
    }
    return EX_OK;
}
