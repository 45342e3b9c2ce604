/* sup_reqdaemon: the requests about the daemon itself (sup_reqdaemon.h):
 * `hello` (what it is and offers) and `stats` (its counters and limits). */
#include "sup_reqdaemon.h"

#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_ctxinfo.h"
#include "sup_hsmon.h"
#include "sup_ident.h"
#include "sup_log.h"
#include "sup_policy.h"
#include "sup_reqarg.h"
#include "sup_send.h"
#include "sup_stats.h"
#include "sup_zygote.h"

#include "proto.h"

#include <unistd.h>

static void put_limits(proto_buf *b);

/* hello: the server, its versions, pid and instance, limits, tiers,
 * preloads, identity, syntaxes and whether it offers packages. */
void sup_reqdaemon_hello(const proto_val *msg, const sup_peer *peer)
{
    (void)msg;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 12);
    proto_put_str(&b, "server");
    proto_put_str(&b, "ctxd");
    proto_put_str(&b, "version");
    proto_put_str(&b, SUP_VERSION);
    proto_put_str(&b, "protocol");
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "versions");
    proto_put_array(&b, 1);
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "pid");
    proto_put_uint(&b, (uint64_t)getpid());
    proto_put_str(&b, "instance");
    proto_put_str(&b, sup_instance);
    proto_put_str(&b, "limits");
    put_limits(&b);
    proto_put_str(&b, "tiers");
    sup_policy_put_tiers(&b);
    proto_put_str(&b, "preloads");
    sup_zygote_put_preloads(&b);
    proto_put_str(&b, "identity");
    sup_ident_put_hello(&b);
    proto_put_str(&b, "syntaxes");
    proto_put_array(&b, sizeof sup_reqarg_syntaxes / sizeof sup_reqarg_syntaxes[0]);
    for (size_t i = 0; i < sizeof sup_reqarg_syntaxes / sizeof sup_reqarg_syntaxes[0]; i++)
        proto_put_str(&b, sup_reqarg_syntaxes[i]);
    /* Whether pip.install and ctx.create {packages} can install anything,
     * and from which kinds of source (no paths or URLs). */
    proto_put_str(&b, "packages");
    proto_put_map(&b, 2);
    proto_put_str(&b, "offered");
    proto_put_bool(&b, sup_cfg.wheelhouse || sup_cfg.package_index);
    proto_put_str(&b, "sources");
    proto_put_array(&b, (sup_cfg.wheelhouse != NULL) + (sup_cfg.package_index != NULL));
    if (sup_cfg.wheelhouse)
        proto_put_str(&b, "wheelhouse");
    if (sup_cfg.package_index)
        proto_put_str(&b, "index");
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* The configured limits, as `hello` and `stats` report them. */
static void put_limits(proto_buf *b)
{
    proto_put_map(b, 15);
    proto_put_str(b, "max_request_bytes");
    proto_put_uint(b, sup_cfg.max_request_bytes);
    proto_put_str(b, "max_code_bytes");
    proto_put_uint(b, sup_cfg.max_code_bytes);
    proto_put_str(b, "max_queue");
    proto_put_uint(b, sup_cfg.max_queue);
    proto_put_str(b, "max_contexts");
    proto_put_uint(b, sup_cfg.max_contexts);
    proto_put_str(b, "max_output");
    proto_put_uint(b, sup_cfg.max_output);
    proto_put_str(b, "default_timeout");
    proto_put_double(b, sup_cfg.default_timeout);
    proto_put_str(b, "kill_grace");
    proto_put_double(b, sup_cfg.kill_grace);
    proto_put_str(b, "idle_ttl");
    proto_put_double(b, sup_cfg.idle_ttl);
    proto_put_str(b, "on_disconnect");
    proto_put_str(b, sup_cfg.interrupt_on_disconnect ? "interrupt" : "finish");
    proto_put_str(b, "max_held");
    proto_put_uint(b, sup_cfg.max_held);
    proto_put_str(b, "max_client_held");
    proto_put_uint(b, sup_cfg.max_client_held);
    proto_put_str(b, "max_chan_held");
    proto_put_uint(b, sup_cfg.max_chan_held);
    proto_put_str(b, "max_snapshot_bytes");
    proto_put_uint(b, sup_cfg.max_snapshot_bytes);
    proto_put_str(b, "max_snapshots");
    proto_put_uint(b, sup_cfg.max_snapshots);
    proto_put_str(b, "max_snapshot_total");
    proto_put_uint(b, sup_cfg.max_snapshot_total);
}

/* stats: the daemon's counters and context counts, its limits and its
 * preloads. */
void sup_reqdaemon_stats(const proto_val *msg, const sup_peer *peer)
{
    (void)msg;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 8);
    size_t live, busy, queued;
    sup_ctxinfo_counts(&live, &busy, &queued);
    sup_stats_put(&b, live, busy, queued);
    proto_put_str(&b, "limits");
    put_limits(&b);
    proto_put_str(&b, "preloads");
    sup_zygote_put_preloads(&b);
    proto_put_str(&b, "handshakes_failed");
    sup_hsmon_put(&b);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}
