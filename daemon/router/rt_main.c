/* ctxd-router: clients reach many ctxd hosts through it exactly as they
 * reach one ctxd (README.md, "More than one host"). This file reads the
 * command line and starts the loop. */
#include "rt_link.h"

#include "mem.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

rt_config rt_cfg = {
    .liveness = 1.0,
    .liveness_max = 10.0,
    .etcd_prefix = "/ctxd",
    .max_request_bytes = PROTO_MAX_REQUEST,
};
char rt_instance[RT_INSTANCE + 1];

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void rt_log(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ctxd-router: %s\n", text);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ctxd-router --state-dir DIR --listen ENDPOINT... --host ENDPOINT...\n"
            "       [--host-key KEY|FILE] [--tenants FILE] [--etcd http://IP:PORT]\n"
            "       [--etcd-prefix PREFIX] [--liveness S] [--liveness-max S]\n"
            "\n"
            "Clients reach every host's contexts through the router as through one ctxd.\n"
            "  --state-dir DIR     router.key/router.pub (made on first start) and\n"
            "                      authorized_keys (the client keys let in)\n"
            "  --listen ENDPOINT   tcp:// (CurveZMQ, the router's key) or ipc:// (repeatable)\n"
            "  --host ENDPOINT     a ctxd's tcp:// endpoint (repeatable, at most %d); each\n"
            "                      host lists router.pub in its authorized_keys\n"
            "  --host-key KEY      the hosts' server public key (or its server.pub file)\n"
            "  --tenants FILE      lines \"CLIENTKEY TENANT [OPTION...]\": that client's\n"
            "                      context names are TENANT.NAME on the hosts, and it sees\n"
            "                      only those (TENANT - for none, + for the key's own;\n"
            "                      CLIENTKEY - for plaintext clients, * for keys no line\n"
            "                      names). OPTIONs bound its\n"
            "                      ctx.create: tiers=sandbox,local (default sandbox only),\n"
            "                      cwd=/DIR,/DIR (default none), FIELD=MAX (timeout,\n"
            "                      memory_bytes, ...), FIELD=false (network_access, ...)\n"
            "  --etcd URL          keep the catalog in etcd (v3 JSON gateway, IPv4 address)\n"
            "  --liveness S        seconds between hellos to each host (default 1)\n"
            "  --liveness-max S    no answer this long: the host is lost (default 10)\n",
            RT_MAX_HOSTS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"state-dir", required_argument, NULL, 's'},
                                         {"host-key", required_argument, NULL, 'k'},
                                         {"tenants", required_argument, NULL, 't'},
                                         {"etcd", required_argument, NULL, 'e'},
                                         {"etcd-prefix", required_argument, NULL, 'p'},
                                         {"liveness", required_argument, NULL, 'i'},
                                         {"liveness-max", required_argument, NULL, 'm'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'l':
            if (rt_cfg.nlisten < 8)
                rt_cfg.listen[rt_cfg.nlisten++] = optarg;
            break;
        case 'H':
            if (rt_cfg.nhosts >= RT_MAX_HOSTS || strncmp(optarg, "tcp://", 6) != 0) {
                fprintf(stderr, "ctxd-router: --host takes a tcp:// endpoint (at most %d)\n",
                        RT_MAX_HOSTS);
                return 2;
            }
            rt_cfg.hosts[rt_cfg.nhosts++] = optarg;
            break;
        case 's':
            rt_cfg.state_dir = optarg;
            break;
        case 'k':
            rt_cfg.host_key = optarg;
            break;
        case 't':
            rt_cfg.tenants = optarg;
            break;
        case 'e':
            rt_cfg.etcd = optarg;
            break;
        case 'p':
            rt_cfg.etcd_prefix = optarg;
            break;
        case 'i':
            rt_cfg.liveness = atof(optarg);
            break;
        case 'm':
            rt_cfg.liveness_max = atof(optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!rt_cfg.state_dir || !rt_cfg.nlisten || !rt_cfg.nhosts || rt_cfg.liveness <= 0 ||
        rt_cfg.liveness_max < rt_cfg.liveness || strlen(rt_cfg.etcd_prefix) > 64) {
        usage(stderr);
        return 2;
    }
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        fatal("getrandom failed");
    for (int i = 0; i < 16; i++)
        snprintf(rt_instance + 2 * i, 3, "%02x", raw[i]);
    srandom((unsigned)(raw[0] | raw[1] << 8 | raw[2] << 16));
    if (rt_cfg.etcd)
        rt_etcd_open(rt_cfg.etcd);
    if (rt_loop_open() < 0)
        return 1;
    rt_log("instance %s, %zu hosts%s", rt_instance, rt_cfg.nhosts,
           rt_cfg.etcd ? ", catalog in etcd" : "");
    rt_loop_run();
    return 0;
}
