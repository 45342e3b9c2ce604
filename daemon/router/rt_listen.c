/* rt_listen: the ROUTER sockets clients connect to. A client message is one
 * frame (a multi-frame one is refused as ctxd refuses it); its CurveZMQ key
 * comes with it as the frame's User-Id. */
#include "rt_listen.h"

#include "mem.h"
#include "proto.h"
#include "rt_auth.h"
#include "rt_base.h"
#include "rt_loop.h"
#include "rt_msg.h"
#include "rt_out.h"
#include "rt_req.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

static void *routers[2];

static void *new_router(void *zctx)
{
    void *r = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, zero = 0, hwm = RT_HWM;
    int64_t maxmsg = (int64_t)rt_cfg.max_request_bytes * 4;
    zmq_setsockopt(r, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(r, ZMQ_SNDHWM, &hwm, sizeof hwm);
    return r;
}

int rt_listen_open(void *zctx)
{
    for (size_t i = 0; i < rt_cfg.nlisten; i++) {
        int s = strncmp(rt_cfg.listen[i], "tcp://", 6) == 0 ? 1 : 0;
        if (!routers[s]) {
            routers[s] = new_router(zctx);
            if (s == 1 && rt_auth_setup(zctx, routers[1]) < 0)
                return -1;
        }
        if (zmq_bind(routers[s], rt_cfg.listen[i]) < 0) {
            fprintf(stderr, "ctxd-router: cannot listen on %s: %s\n", rt_cfg.listen[i],
                    zmq_strerror(errno));
            return -1;
        }
    }
    if (!routers[1] && rt_auth_setup(zctx, NULL) < 0)
        return -1;
    rt_out_sockets(routers[0], routers[1]);
    for (int s = 0; s < 2; s++)
        if (routers[s])
            rt_loop_watch(routers[s]);
    return 0;
}

/* Hands up to 256 messages of listening socket s to rt_req, one by one; a
 * multi-frame message gets `err bad_frame` instead. */
static void read_client(int s)
{
    for (int budget = 0; budget < 256; budget++) {
        zmq_msg_t route, body;
        zmq_msg_init(&route);
        if (zmq_msg_recv(&route, routers[s], ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&route);
            return;
        }
        zmq_msg_init(&body);
        bool have = zmq_msg_more(&route) && zmq_msg_recv(&body, routers[s], 0) >= 0;
        bool multi = have && zmq_msg_more(&body);
        if (multi) {
            zmq_msg_t extra;
            zmq_msg_init(&extra);
            int more = 1;
            while (more && zmq_msg_recv(&extra, routers[s], 0) >= 0)
                more = zmq_msg_more(&extra);
            zmq_msg_close(&extra);
        }
        const char *key = have ? zmq_msg_gets(&body, "User-Id") : NULL;
        if (have && multi) {
            proto_buf b;
            proto_buf_init(&b);
            rt_msg_err(&b, NULL, 0, "bad_frame", "a message must be exactly one frame");
            zmq_send(routers[s], zmq_msg_data(&route), zmq_msg_size(&route),
                     ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(routers[s], b.data, b.len, ZMQ_DONTWAIT);
            proto_buf_free(&b);
        } else if (have) {
            rt_req_handle(s, zmq_msg_data(&route), zmq_msg_size(&route), key && s == 1 ? key : "",
                          zmq_msg_data(&body), zmq_msg_size(&body));
        }
        zmq_msg_close(&body);
        zmq_msg_close(&route);
    }
}

bool rt_listen_serve(void *unused)
{
    (void)unused;
    bool any = false;
    for (int s = 0; s < 2; s++)
        if (rt_loop_readable(routers[s])) {
            any = true;
            read_client(s);
        }
    return any;
}
