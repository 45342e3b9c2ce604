/* ctxd-router: clients reach many ctxd hosts through it exactly as they
 * reach one ctxd (README.md, "More than one host"). This file reads the
 * command line and wires the parts together: what the loop calls, in which
 * order, and who hears of what. */
#include "rt_auth.h"
#include "rt_base.h"
#include "rt_cat.h"
#include "rt_etcd.h"
#include "rt_host.h"
#include "rt_link.h"
#include "rt_listen.h"
#include "rt_loop.h"
#include "rt_req.h"

#include "zap_key.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Clients wait until the catalog is loaded and each host has answered once
 * or had --liveness-max to do so. */
static struct {
    bool loaded, reconciled, open;
    double start;
} gate;

/* The loop's gate: once the catalog is read, the hosts already live are
 * reconciled with it; clients are read once it is read and every host has
 * answered or had --liveness-max (and half a second) to. */
static bool gate_open(void *unused, double now)
{
    (void)unused;
    if (gate.loaded && !gate.reconciled) {
        gate.reconciled = true;
        rt_host_catalog_loaded();
    }
    if (!gate.open && gate.loaded) {
        bool all = true;
        for (size_t i = 0; i < rt_nhosts; i++)
            all = all && rt_hosts[i].state != RT_HOST_UNKNOWN;
        gate.open = all || now - gate.start > rt_cfg.liveness_max + 0.5;
        if (gate.open)
            rt_log("serving clients (%zu contexts in the catalog)",
                   rt_cat_count(RT_CTX_LIVE) + rt_cat_count(RT_CTX_LOST));
    }
    return gate.open;
}

static void etcd_io(void *unused)
{
    (void)unused;
    rt_etcd_io();
}

static int etcd_fd(void *unused, uint32_t *events)
{
    (void)unused;
    return rt_etcd_fd(events);
}

static bool etcd_busy(void *unused)
{
    (void)unused;
    return rt_etcd_busy();
}

static const rt_loop_fd_ops etcd_ops = {etcd_io, etcd_fd, etcd_busy};

/* Opens every part and registers what the loop calls, in the order it
 * calls them; -1 when the router cannot start (said on stderr). */
static int wire(void)
{
    void *zctx = zmq_ctx_new();
    rt_loop_open();
    if (rt_listen_open(zctx) < 0)
        return -1;
    rt_link_init(zctx, rt_req_default_made);
    rt_host_open(zctx);
    rt_loop_timer(rt_host_tick, NULL);
    rt_loop_timer(rt_req_tick, NULL);
    rt_loop_descriptor(&etcd_ops, NULL);
    rt_loop_gate(gate_open, NULL);
    rt_loop_output(rt_req_flush, NULL);
    rt_loop_output(rt_link_flush, NULL);
    for (size_t i = 0; i < rt_nhosts; i++)
        rt_loop_reader(rt_host_read_ctl, &rt_hosts[i], false);
    for (size_t i = 0; i < rt_nhosts; i++)
        rt_loop_reader(rt_host_read_monitor, &rt_hosts[i], false);
    rt_loop_reader(rt_link_serve, NULL, false);
    rt_loop_reader(rt_auth_serve, NULL, false);
    rt_loop_reader(rt_auth_serve_monitor, NULL, false);
    rt_loop_reader(rt_listen_serve, NULL, true);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ctxd-router --state-dir DIR --listen ENDPOINT... --host ENDPOINT...\n"
            "       [--host-key KEY | --host-key-file FILE] [--tenants FILE]\n"
            "       [--etcd http://IP:PORT]\n"
            "       [--etcd-prefix PREFIX] [--liveness S] [--liveness-max S]\n"
            "\n"
            "Clients reach every host's contexts through the router as through one ctxd.\n"
            "  --state-dir DIR     router.key/router.pub (made on first start) and\n"
            "                      authorized_keys (the client keys let in)\n"
            "  --listen ENDPOINT   tcp:// (CurveZMQ, the router's key) or ipc:// (repeatable)\n"
            "  --host ENDPOINT     a ctxd's tcp:// endpoint (repeatable, at most %d); each\n"
            "                      host lists router.pub in its authorized_keys\n"
            "  --host-key KEY      the hosts' server public key, Z85 (40 characters)\n"
            "  --host-key-file FILE the file holding it (the hosts' server.pub)\n"
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
                                         {"host-key-file", required_argument, NULL, 'K'},
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
        case 'K':
            rt_cfg.host_key_file = optarg;
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
    char why[512];
    if (zap_key_option("--host-key", rt_cfg.host_key, rt_cfg.host_key_file, rt_cfg.host_z85, why,
                       sizeof why) < 0) {
        fprintf(stderr, "ctxd-router: %s\n", why);
        return 2;
    }
    rt_base_start();
    if (rt_cfg.etcd)
        rt_etcd_open(rt_cfg.etcd);
    if (wire() < 0)
        return 1;
    rt_log("instance %s, %zu hosts%s", rt_instance, rt_cfg.nhosts,
           rt_cfg.etcd ? ", catalog in etcd" : "");
    gate.start = rt_now();
    rt_cat_load(&gate.loaded);
    rt_loop_run((int)(rt_cfg.liveness * 1000 / 4) + 1);
    return 0;
}
