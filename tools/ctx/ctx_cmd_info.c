/* The daemon's figures: ctx hello (version, pid, limits, tiers, preloads,
 * packages) and ctx stats
 * (its counters, and totals over the live contexts). */
#include "ctx.h"

#include <stdio.h>
#include <string.h>

/* The limits of a hello reply as a JSON object. */
static void json_limits(jw *w, const ctxd_hello_info *h)
{
    jw_key(w, "limits");
    jw_obj(w);
    jw_kuint(w, "max_request_bytes", h->max_request_bytes);
    jw_kuint(w, "max_code_bytes", h->max_code_bytes);
    jw_kuint(w, "max_queue", h->max_queue);
    jw_kuint(w, "max_contexts", h->max_contexts);
    jw_knum(w, "default_timeout", h->default_timeout);
    jw_knum(w, "kill_grace", h->kill_grace);
    jw_kuint(w, "max_output", h->max_output);
    jw_knum(w, "idle_ttl", h->idle_ttl);
    if (h->on_disconnect[0])
        jw_kstr(w, "on_disconnect", h->on_disconnect);
    jw_obj_end(w);
}

/* An array of strings as a JSON value. */
static void json_strs(jw *w, const char *const *v, size_t n)
{
    jw_arr(w);
    for (size_t i = 0; i < n; i++)
        jw_str(w, v[i]);
    jw_arr_end(w);
}

/* What the daemon offers: tiers, preloads, packages. */
static void json_offers(jw *w, const ctxd_hello_info *h)
{
    jw_key(w, "tiers");
    jw_obj(w);
    for (size_t i = 0; i < h->ntiers; i++) {
        jw_key(w, h->tiers[i].name);
        json_strs(w, h->tiers[i].fields, h->tiers[i].nfields);
    }
    jw_obj_end(w);
    jw_key(w, "preloads");
    jw_obj(w);
    jw_key(w, "loaded");
    json_strs(w, h->preloads_loaded, h->npreloads_loaded);
    jw_key(w, "skipped");
    json_strs(w, h->preloads_skipped, h->npreloads_skipped);
    jw_obj_end(w);
    jw_key(w, "packages");
    jw_obj(w);
    jw_kbool(w, "offered", h->packages_offered);
    jw_key(w, "sources");
    json_strs(w, h->package_sources, h->npackage_sources);
    jw_obj_end(w);
}

/* ctx hello: check the daemon is there and show what it reports. */
int ctx_cmd_info_hello(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    ctxd_hello_info h;
    int rc = ctxd_hello(cli->client, &h);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_kstr(&w, "server", h.server);
        jw_kstr(&w, "version", h.version);
        jw_kuint(&w, "protocol", h.protocol);
        jw_key(&w, "versions");
        jw_arr(&w);
        for (size_t i = 0; i < h.nversions; i++)
            jw_uint(&w, h.versions[i]);
        jw_arr_end(&w);
        jw_kuint(&w, "pid", h.pid);
        jw_kstr(&w, "instance", h.instance);
        json_limits(&w, &h);
        json_offers(&w, &h);
        jw_kstr(&w, "endpoint", ctxd_endpoint(cli->client));
        if (h.hosts[0])
            jw_kstr(&w, "hosts", h.hosts);
        if (h.unavailable[0])
            jw_kstr(&w, "unavailable", h.unavailable);
        jw_obj_end(&w);
        jw_line(&w);
        return h.unavailable[0] ? EX_UNREACHABLE : EX_OK;
    }
    printf("server    %s %s (pid %llu, instance %s)\n", h.server, h.version,
           (unsigned long long)h.pid, h.instance[0] ? h.instance : "?");
    printf("endpoint  %s\n", ctxd_endpoint(cli->client));
    printf("protocol  %llu (speaks", (unsigned long long)h.protocol);
    for (size_t i = 0; i < h.nversions; i++)
        printf(" %llu", (unsigned long long)h.versions[i]);
    printf(")\n");
    if (h.hosts[0])
        printf("hosts     %s\n", h.hosts);
    if (h.unavailable[0]) {
        printf("unavailable  %s\n", h.unavailable);
        return EX_UNREACHABLE;
    }
    printf("limits    max_request_bytes %llu, max_code_bytes %llu, max_queue %llu,\n"
           "          max_contexts %llu, default_timeout %g s, kill_grace %g s\n",
           (unsigned long long)h.max_request_bytes, (unsigned long long)h.max_code_bytes,
           (unsigned long long)h.max_queue, (unsigned long long)h.max_contexts, h.default_timeout,
           h.kill_grace);
    char cap[32], ttl[32];
    snprintf(ttl, sizeof ttl, "%g s", h.idle_ttl);
    printf("          max_output %s, idle_ttl %s, on_disconnect %s\n",
           h.max_output ? ctx_format_bytes(h.max_output, cap, sizeof cap) : "none",
           h.idle_ttl > 0 ? ttl : "never", h.on_disconnect[0] ? h.on_disconnect : "finish");
    printf("tiers    ");
    for (size_t i = 0; i < h.ntiers; i++)
        printf(" %s%s", h.tiers[i].name, i + 1 < h.ntiers ? "," : "");
    printf("%s\npreloads ", h.ntiers ? "" : " (not reported)");
    for (size_t i = 0; i < h.npreloads_loaded; i++)
        printf(" %s%s", h.preloads_loaded[i], i + 1 < h.npreloads_loaded ? "," : "");
    if (!h.npreloads_loaded)
        printf(" none");
    if (h.npreloads_skipped) {
        printf(" (not loaded:");
        for (size_t i = 0; i < h.npreloads_skipped; i++)
            printf(" %s%s", h.preloads_skipped[i], i + 1 < h.npreloads_skipped ? "," : "");
        printf(")");
    }
    printf("\npackages  %s", h.packages_offered ? "offered (from"
                                                : "not offered (no --wheelhouse or "
                                                  "--package-index)");
    for (size_t i = 0; h.packages_offered && i < h.npackage_sources; i++)
        printf(" %s%s", h.package_sources[i], i + 1 < h.npackage_sources ? "," : "");
    printf("%s\n", h.packages_offered ? ")" : "");
    return EX_OK;
}

/* ctx stats: the daemon's `stats` counters when it has the request, and
 * totals over the live contexts from hello and ctx.list. */
int ctx_cmd_info_stats(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = ctx_simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    ctxd_hello_info h;
    int rc = ctxd_hello(cli->client, &h);
    if (rc < 0)
        return ctx_report(cli, rc);
    /* The next requests release hello's strings: copy what is shown. */
    char server[64], version[64], instance[64], ondisc[32];
    snprintf(server, sizeof server, "%s", h.server ? h.server : "");
    snprintf(version, sizeof version, "%s", h.version);
    snprintf(instance, sizeof instance, "%s", h.instance);
    snprintf(ondisc, sizeof ondisc, "%s", h.on_disconnect);
    h.server = server, h.version = version, h.instance = instance, h.on_disconnect = ondisc;
    h.versions = NULL;
    ctxd_stats_info st;
    rc = ctxd_stats(cli->client, &st);
    const char *code;
    ctxd_last_error(cli->client, &code, NULL);
    bool have_stats = rc == 0;
    if (rc < 0 && !(rc == CTXD_EREFUSED && strcmp(code, "unknown_type") == 0))
        return ctx_report(cli, rc);
    const ctxd_ctx_info *infos;
    size_t n;
    rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    uint64_t idle = 0, busy = 0, dead = 0, queued = 0, execs = 0, pss = 0, rss = 0;
    for (size_t i = 0; i < n; i++) {
        const ctxd_ctx_info *c = &infos[i];
        idle += strcmp(c->state, "idle") == 0;
        busy += strcmp(c->state, "busy") == 0;
        dead += strcmp(c->state, "dead") == 0;
        queued += c->queued;
        execs += c->execution_count;
        pss += c->pss;
        rss += c->rss;
    }
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "stats");
        jw_kstr(&w, "endpoint", ctxd_endpoint(cli->client));
        jw_kstr(&w, "server", h.server);
        jw_kstr(&w, "version", h.version);
        jw_kuint(&w, "pid", h.pid);
        jw_kstr(&w, "instance", h.instance);
        jw_kuint(&w, "contexts", n);
        jw_kuint(&w, "idle", idle);
        jw_kuint(&w, "busy", busy);
        jw_kuint(&w, "dead", dead);
        jw_kuint(&w, "queued", queued);
        jw_kuint(&w, "executions", execs);
        jw_kuint(&w, "pss", pss);
        jw_kuint(&w, "rss", rss);
        json_limits(&w, &h);
        jw_key(&w, "daemon");
        if (!have_stats) {
            jw_null(&w);
        } else {
            jw_obj(&w);
            jw_knum(&w, "uptime", st.uptime);
            jw_key(&w, "contexts");
            jw_obj(&w);
            jw_kuint(&w, "live", st.live);
            jw_kuint(&w, "busy", st.busy);
            jw_kuint(&w, "queued", st.queued);
            jw_kuint(&w, "created", st.created);
            jw_obj_end(&w);
            jw_key(&w, "counters");
            jw_obj(&w);
            const struct {
                const char *name;
                uint64_t v;
            } cs[] = {{"requests", st.requests},
                      {"refused", st.refused},
                      {"runs", st.runs},
                      {"runs_ok", st.runs_ok},
                      {"runs_error", st.runs_error},
                      {"runs_interrupted", st.runs_interrupted},
                      {"runs_timeout", st.runs_timeout},
                      {"runs_died", st.runs_died},
                      {"runs_aborted", st.runs_aborted},
                      {"runs_shutdown", st.runs_shutdown},
                      {"stdout_bytes", st.stdout_bytes},
                      {"stderr_bytes", st.stderr_bytes},
                      {"truncated_bytes", st.truncated_bytes},
                      {"workers_spawned", st.workers_spawned},
                      {"worker_deaths", st.worker_deaths}};
            for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
                jw_kuint(&w, cs[i].name, cs[i].v);
            jw_obj_end(&w);
            jw_obj_end(&w);
        }
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    char b1[32], b2[32], b3[32];
    printf("daemon      %s %s (pid %llu, instance %s)\n", h.server, h.version,
           (unsigned long long)h.pid, h.instance[0] ? h.instance : "?");
    printf("endpoint    %s\n", ctxd_endpoint(cli->client));
    if (have_stats) {
        char up[32];
        printf("uptime      %s\n", ctx_format_age(st.uptime, up, sizeof up));
    }
    printf("contexts    %zu of at most %llu: %llu idle, %llu busy, %llu dead", n,
           (unsigned long long)h.max_contexts, (unsigned long long)idle, (unsigned long long)busy,
           (unsigned long long)dead);
    if (have_stats)
        printf(" (%llu created since start)", (unsigned long long)st.created);
    printf("\nruns        %llu running, %llu queued (at most %llu per context)\n",
           (unsigned long long)busy, (unsigned long long)queued, (unsigned long long)h.max_queue);
    printf("executions  %llu (counted since each live worker started)\n",
           (unsigned long long)execs);
    printf("memory      %s PSS, %s RSS (workers alive now)\n", ctx_format_bytes(pss, b1, sizeof b1),
           ctx_format_bytes(rss, b2, sizeof b2));
    if (!have_stats) {
        printf("note        computed from 'hello' and 'ctx.list': this daemon has no "
               "'stats' request\n");
        return EX_OK;
    }
    printf("since start %llu runs: %llu ok, %llu error, %llu interrupted, %llu timeout, "
           "%llu died, %llu aborted, %llu shutdown\n",
           (unsigned long long)st.runs, (unsigned long long)st.runs_ok,
           (unsigned long long)st.runs_error, (unsigned long long)st.runs_interrupted,
           (unsigned long long)st.runs_timeout, (unsigned long long)st.runs_died,
           (unsigned long long)st.runs_aborted, (unsigned long long)st.runs_shutdown);
    printf("            %llu requests (%llu refused); workers %llu spawned, %llu died\n",
           (unsigned long long)st.requests, (unsigned long long)st.refused,
           (unsigned long long)st.workers_spawned, (unsigned long long)st.worker_deaths);
    printf("            output %s stdout, %s stderr, %s cut by max_output\n",
           ctx_format_bytes(st.stdout_bytes, b1, sizeof b1),
           ctx_format_bytes(st.stderr_bytes, b2, sizeof b2),
           ctx_format_bytes(st.truncated_bytes, b3, sizeof b3));
    return EX_OK;
}
