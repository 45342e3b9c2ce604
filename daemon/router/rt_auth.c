/* rt_auth: CurveZMQ for the router. Its one key pair (STATE_DIR/router.key,
 * router.pub, made on first start) is the server key clients trust and the
 * client key the hosts list in their authorized_keys. Clients are let in
 * when their key is in STATE_DIR/authorized_keys (read at every handshake,
 * as ctxd does); a key may map to a tenant (--tenants FILE), whose name
 * prefixes every context name the client uses, and to bounds on what its
 * ctx.create may ask for (rt_bound.c). */
#include "rt_auth.h"

#include "rt_base.h"
#include "rt_loop.h"

#include "mem.h"
#include "zap.h"
#include "zap_hs.h"
#include "zap_key.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static char secret[RT_KEY_Z85 + 1], public[RT_KEY_Z85 + 1];
static void *zap;
static void *mon;                      /* PAIR: the clients' CurveZMQ socket's handshake events */
static zap_hs chs;                     /* the clients' failed handshakes */
static char mon_endpoint[128] = "tcp"; /* the endpoint its events last named */
static void monitor_tick(void *unused, double now);

/* Writes a small file whole (temporary file, rename). */
static int write_file(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int rc = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0 ? 0 : -1;
    close(fd);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -1;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* Loads the key pair, making it on first start. */
static int load_keys(void)
{
    char sec_path[PATH_MAX], pub_path[PATH_MAX];
    snprintf(sec_path, sizeof sec_path, "%s/router.key", rt_cfg.state_dir);
    snprintf(pub_path, sizeof pub_path, "%s/router.pub", rt_cfg.state_dir);
    if (mkdir(rt_cfg.state_dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "ctxd-router: cannot create %s: %s\n", rt_cfg.state_dir, strerror(errno));
        return -1;
    }
    char why[128];
    if (zap_key_read(sec_path, secret, why, sizeof why) == 0)
        return zmq_curve_public(public, secret) == 0 ? 0 : -1;
    if (zmq_curve_keypair(public, secret) != 0) {
        fprintf(stderr, "ctxd-router: this libzmq has no CURVE support\n");
        return -1;
    }
    char text[128];
    snprintf(text, sizeof text, "# ctxd-router secret key (keep private)\n%s\n", secret);
    if (write_file(sec_path, text, 0600) < 0)
        return -1;
    snprintf(text, sizeof text, "%s\n", public);
    if (write_file(pub_path, text, 0644) < 0)
        return -1;
    fprintf(stderr, "ctxd-router: made a new key pair in %s\n", rt_cfg.state_dir);
    return 0;
}

const char *rt_auth_public(void)
{
    return public;
}

const char *rt_auth_secret(void)
{
    return secret;
}

/* Loads the keys and, for a CurveZMQ listening socket, starts the ZAP
 * handler (served by the loop). */
int rt_auth_setup(void *zctx, void *curve_router)
{
    if (load_keys() < 0)
        return -1;
    if (!curve_router)
        return 0;
    zap = zap_open(zctx, curve_router, secret);
    if (!zap)
        return -1;
    rt_loop_watch(zap);
    zap_hs_init(&chs);
    if (zmq_socket_monitor(curve_router, "inproc://rt-clients-mon", ZAP_HS_EVENTS) < 0)
        return -1;
    mon = zmq_socket(zctx, ZMQ_PAIR);
    zmq_setsockopt(mon, ZMQ_LINGER, &(int){0}, sizeof(int));
    if (zmq_connect(mon, "inproc://rt-clients-mon") < 0)
        return -1;
    rt_loop_watch(mon);
    rt_loop_timer(monitor_tick, NULL);
    fprintf(stderr, "ctxd-router: CurveZMQ; public key %s (%s/router.pub)\n", public,
            rt_cfg.state_dir);
    return 0;
}

/* Answers up to 64 ZAP requests (daemon/zap) against
 * STATE_DIR/authorized_keys: the User-Id is the client key, which rt_req.c
 * reads from each message to find the client's tenant. */
bool rt_auth_serve(void *unused)
{
    (void)unused;
    bool any = false;
    for (int i = 0; i < 64 && rt_loop_readable(zap); i++) {
        any = true;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/authorized_keys", rt_cfg.state_dir);
        zap_verdict v;
        if (zap_serve(zap, path, &v) && !v.ok)
            rt_log("refused a client from %s with key %s: %s", v.addr, v.key, v.reason);
    }
    return any;
}

bool rt_auth_serve_monitor(void *unused)
{
    (void)unused;
    if (!rt_loop_readable(mon))
        return false;
    char endpoint[128] = "tcp";
    for (int i = 0; i < 64; i++) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        zap_hs_decode(zmq_msg_data(&ev), zmq_msg_size(&ev), &event, &value);
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) >= 0) {
            size_t n =
                zmq_msg_size(&ev) < sizeof endpoint - 1 ? zmq_msg_size(&ev) : sizeof endpoint - 1;
            memcpy(endpoint, zmq_msg_data(&ev), n);
            endpoint[n] = '\0';
        }
        zmq_msg_close(&ev);
        zap_hs_server_event(&chs, event, value, endpoint, rt_now(), rt_log);
        snprintf(mon_endpoint, sizeof mon_endpoint, "%s", endpoint);
    }
    return true;
}

/* Says a client's failed handshake whose DISCONNECTED never came. */
static void monitor_tick(void *unused, double now)
{
    (void)unused;
    zap_hs_flush(&chs, mon_endpoint, now, rt_log);
}

const uint64_t *rt_auth_failed(void)
{
    return chs.failed;
}

/* One line of the tenants file for key: its tenant and bounds; false when
 * the line is bad (logged; the client then gets the defaults). */
static bool parse_line(char *line, const char *key, char tenant[33], rt_bounds *b)
{
    char *save = NULL;
    strtok_r(line, " \t\r\n", &save); /* the key, matched by the caller */
    const char *t = strtok_r(NULL, " \t\r\n", &save);
    if (!t)
        return false;
    size_t n = strlen(t);
    bool ok = n >= 1 && n <= 32;
    for (size_t i = 0; ok && i < n && strcmp(t, "+") != 0; i++)
        ok = isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '-';
    if (!ok) {
        rt_log("tenants file: bad tenant name '%.64s' ignored", t);
        return false;
    }
    if (strcmp(t, "+") == 0) {
        /* A namespace of the key's own: k and 16 hex digits of its hash
         * ("plain" for the clients of a plaintext socket). */
        uint64_t h = 1469598103934665603ull;
        for (const char *k = key; *k; k++)
            h = (h ^ (uint8_t)*k) * 1099511628211ull;
        if (key[0])
            snprintf(tenant, 33, "k%016llx", (unsigned long long)h);
        else
            snprintf(tenant, 33, "plain");
    } else {
        snprintf(tenant, 33, "%.32s", strcmp(t, "-") == 0 ? "" : t); /* n <= 32 */
    }
    for (const char *o; (o = strtok_r(NULL, " \t\r\n", &save));)
        if (!rt_bound_option(b, o)) {
            rt_log("tenants file: bad option '%.128s' (the client gets the defaults)", o);
            return false;
        }
    return true;
}

/* The tenant and bounds of a client key, from --tenants: lines "KEY TENANT
 * [OPTION...]" (a tenant is 1-32 characters of [A-Za-z0-9_-], "-" for
 * none, "+" for a namespace of the key's own; options as rt_bound_option
 * takes). KEY "-" is every client of a
 * plaintext socket (no key), "*" every key no line names. Read at each new
 * client; a client no line names gets the defaults (rt_bound_default). */
void rt_auth_client(const char *key, char tenant[33], rt_bounds *b)
{
    tenant[0] = '\0';
    rt_bound_default(b);
    if (!rt_cfg.tenants)
        return;
    FILE *f = fopen(rt_cfg.tenants, "re");
    if (!f)
        return;
    const char *want = key[0] ? key : "-";
    char line[4096], star[4096] = "";
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char k[RT_KEY_Z85 + 1];
        if (line[0] == '#' || sscanf(line, "%40s", k) != 1)
            continue;
        if (strcmp(k, want) == 0)
            found = true;
        else if (key[0] && strcmp(k, "*") == 0 && !star[0])
            snprintf(star, sizeof star, "%s", line);
    }
    fclose(f);
    if (!found && !star[0])
        return;
    if (!parse_line(found ? line : star, key, tenant, b)) {
        tenant[0] = '\0';
        rt_bound_default(b);
    }
}
