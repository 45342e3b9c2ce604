/* zap: the authorized-keys ZAP handler shared by ctxd and ctxd-router
 * (zap.h). */
#include "zap.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

void *zap_open(void *zctx, void *curve_router, const char *secret_z85)
{
    void *zap = zmq_socket(zctx, ZMQ_REP);
    if (!zap)
        return NULL;
    int zero = 0, one = 1;
    zmq_setsockopt(zap, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(zap, "inproc://zeromq.zap.01") < 0) {
        int e = errno;
        zmq_close(zap);
        errno = e;
        return NULL;
    }
    zmq_setsockopt(curve_router, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(curve_router, ZMQ_CURVE_SECRETKEY, secret_z85, ZAP_KEY_Z85);
    zmq_setsockopt(curve_router, ZMQ_ZAP_DOMAIN, "ctxd", 4);
    return zap;
}

bool zap_key_listed(const char *path, const uint8_t key[32])
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        if (*s == '#' || strlen(s) < ZAP_KEY_Z85)
            continue;
        char z85[ZAP_KEY_Z85 + 1];
        memcpy(z85, s, ZAP_KEY_Z85);
        z85[ZAP_KEY_Z85] = '\0';
        uint8_t raw[32];
        found = zmq_z85_decode(raw, z85) && memcmp(raw, key, 32) == 0;
    }
    fclose(f);
    return found;
}

/* The request's frames: version, request id, domain, address, identity,
 * mechanism, credentials (at most 8 kept; more are read and dropped). */
bool zap_serve(void *sock, const char *keys_path, zap_verdict *v)
{
    zmq_msg_t frames[8];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (n == 0)
                return false;
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 8)
            frames[n++] = m;
        else
            zmq_msg_close(&m);
    }
    v->ok = false;
    v->reason = "malformed ZAP request";
    snprintf(v->key, sizeof v->key, "?");
    v->addr[0] = '\0';
    if (n >= 4)
        snprintf(v->addr, sizeof v->addr, "%.*s", (int)zmq_msg_size(&frames[3]),
                 (const char *)zmq_msg_data(&frames[3]));
    if (n >= 7 && zmq_msg_size(&frames[5]) == 5 &&
        memcmp(zmq_msg_data(&frames[5]), "CURVE", 5) == 0 && zmq_msg_size(&frames[6]) == 32) {
        const uint8_t *key = zmq_msg_data(&frames[6]);
        zmq_z85_encode(v->key, key, 32);
        v->ok = zap_key_listed(keys_path, key);
        v->reason = v->ok ? "OK" : "client key not authorized";
    }
    zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
    if (n >= 2)
        zmq_send(sock, zmq_msg_data(&frames[1]), zmq_msg_size(&frames[1]), ZMQ_SNDMORE);
    else
        zmq_send(sock, "", 0, ZMQ_SNDMORE);
    zmq_send(sock, v->ok ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(sock, v->reason, strlen(v->reason), ZMQ_SNDMORE);
    zmq_send(sock, v->ok ? v->key : "", v->ok ? ZAP_KEY_Z85 : 0, ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    return true;
}
