/* rt_info: the router's own answers to hello (a live host's, with the
 * router's pid, instance and its hosts' reach; says why when none is live)
 * and stats (its figures, each host's state and reach, failed
 * handshakes). */
#include "rt_info.h"

#include "rt_auth.h"
#include "rt_cat.h"
#include "rt_host.h"
#include "rt_msg.h"

#include "zap_hs.h"

#include <stdio.h>
#include <unistd.h>

/* Each host's reach: [{endpoint, reach, why}], why "" unless refused. */
static void put_reach(proto_buf *b)
{
    proto_put_array(b, (uint32_t)rt_nhosts);
    for (size_t i = 0; i < rt_nhosts; i++) {
        rt_host *h = &rt_hosts[i];
        proto_put_map(b, 3);
        proto_put_str(b, "endpoint");
        proto_put_str(b, h->endpoint);
        proto_put_str(b, "reach");
        proto_put_str(b, rt_host_reach(h));
        proto_put_str(b, "why");
        proto_put_str(b, h->state != RT_HOST_LIVE && h->refused >= 0 ? h->why : "");
    }
}

/* The failed handshakes of each kind in fails (daemon/zap's kinds). */
static void put_failed(proto_buf *b, const uint64_t *fails)
{
    proto_put_map(b, ZAP_HS_NKINDS);
    for (int k = 0; k < ZAP_HS_NKINDS; k++) {
        proto_put_str(b, zap_hs_kind_names[k]);
        proto_put_uint(b, fails[k]);
    }
}

/* hello: a live host's answer (limits, tiers...) with the router's own pid
 * and instance, and `router` saying how many hosts are behind it. */
void rt_info_hello(rt_client *c, const uint8_t *re_id, size_t re_len)
{
    size_t live = 0;
    rt_host *any = NULL;
    for (size_t i = 0; i < rt_nhosts; i++)
        if (rt_hosts[i].state == RT_HOST_LIVE) {
            live++;
            any = any ? any : &rt_hosts[i];
        }
    proto_buf rb, pid, re;
    proto_buf_init(&rb);
    proto_buf_init(&pid);
    proto_buf_init(&re);
    char summary[900];
    rt_host_summary(summary, sizeof summary);
    proto_put_map(&rb, 5);
    proto_put_str(&rb, "hosts");
    proto_put_uint(&rb, rt_nhosts);
    proto_put_str(&rb, "live");
    proto_put_uint(&rb, live);
    proto_put_str(&rb, "instance");
    proto_put_str(&rb, rt_instance);
    proto_put_str(&rb, "summary");
    proto_put_str(&rb, summary);
    proto_put_str(&rb, "states");
    put_reach(&rb);
    proto_put_uint(&pid, (uint64_t)getpid());
    proto_buf_append(&re, re_id, re_len);
    proto_doc doc;
    proto_error err;
    proto_buf b;
    proto_buf_init(&b);
    if (any && any->hello.len && proto_decode(&doc, any->hello.data, any->hello.len, &err) == 0) {
        rt_sub subs[] = {{.key = "re", .raw = &re},
                         {.key = "pid", .raw = &pid},
                         {.key = "instance", .str = rt_instance},
                         {.key = "router", .raw = &rb}};
        rt_msg_rewrite(&b, &doc.nodes[0], subs, 4);
        proto_doc_free(&doc);
    } else {
        rt_msg_begin(&b, "ok", re_id, re_len, 8);
        proto_put_str(&b, "unavailable");
        proto_put_str(&b, rt_host_why_none());
        proto_put_str(&b, "server");
        proto_put_str(&b, "ctxd");
        proto_put_str(&b, "version");
        proto_put_str(&b, CTXD_VERSION);
        proto_put_str(&b, "protocol");
        proto_put_uint(&b, PROTO_VERSION);
        proto_put_str(&b, "versions");
        proto_put_array(&b, 1);
        proto_put_uint(&b, PROTO_VERSION);
        proto_put_str(&b, "pid");
        proto_put_uint(&b, (uint64_t)getpid());
        proto_put_str(&b, "instance");
        proto_put_str(&b, rt_instance);
        proto_put_str(&b, "router");
        proto_buf_append(&b, rb.data, rb.len);
    }
    rt_out_deliver(c, &c->out, &b);
    proto_buf_free(&b);
    proto_buf_free(&rb);
    proto_buf_free(&pid);
    proto_buf_free(&re);
}

static const char *const host_states[] = {"unknown", "live", "lost"};

/* stats: the router's own figures and each host's state. */
void rt_info_stats(rt_client *c, const uint8_t *re_id, size_t re_len, const uint64_t counters[3])
{
    static double started;
    if (!started)
        started = rt_now();
    proto_buf b;
    proto_buf_init(&b);
    rt_msg_begin(&b, "ok", re_id, re_len, 5);
    uint64_t host_fails[ZAP_HS_NKINDS] = {0};
    for (size_t i = 0; i < rt_nhosts; i++)
        for (int k = 0; k < ZAP_HS_NKINDS; k++)
            host_fails[k] += rt_hosts[i].failed[k];
    proto_put_str(&b, "handshakes_failed");
    proto_put_map(&b, 2);
    proto_put_str(&b, "clients");
    put_failed(&b, rt_auth_failed());
    proto_put_str(&b, "hosts");
    put_failed(&b, host_fails);
    proto_put_str(&b, "uptime");
    proto_put_double(&b, rt_now() - started);
    proto_put_str(&b, "contexts");
    proto_put_map(&b, 3);
    proto_put_str(&b, "live");
    proto_put_uint(&b, rt_cat_count(RT_CTX_LIVE));
    proto_put_str(&b, "pending");
    proto_put_uint(&b, rt_cat_count(RT_CTX_PENDING));
    proto_put_str(&b, "lost");
    proto_put_uint(&b, rt_cat_count(RT_CTX_LOST));
    proto_put_str(&b, "counters");
    proto_put_map(&b, 3);
    proto_put_str(&b, "requests");
    proto_put_uint(&b, counters[0]);
    proto_put_str(&b, "forwarded");
    proto_put_uint(&b, counters[1]);
    proto_put_str(&b, "refused");
    proto_put_uint(&b, counters[2]);
    proto_put_str(&b, "hosts");
    proto_put_array(&b, (uint32_t)rt_nhosts);
    for (size_t i = 0; i < rt_nhosts; i++) {
        rt_host *h = &rt_hosts[i];
        proto_put_map(&b, 7);
        proto_put_str(&b, "endpoint");
        proto_put_str(&b, h->endpoint);
        proto_put_str(&b, "state");
        proto_put_str(&b, host_states[h->state]);
        proto_put_str(&b, "reach");
        proto_put_str(&b, rt_host_reach(h));
        proto_put_str(&b, "why");
        proto_put_str(&b, h->state != RT_HOST_LIVE && h->refused >= 0 ? h->why : "");
        proto_put_str(&b, "handshakes_failed");
        put_failed(&b, h->failed);
        proto_put_str(&b, "instance");
        proto_put_str(&b, h->instance);
        proto_put_str(&b, "contexts");
        proto_put_uint(&b, h->live);
    }
    rt_out_deliver(c, &c->out, &b);
    proto_buf_free(&b);
}
