/* zap: the ZAP handler (RFC 27) that ctxd and ctxd-router both run for
 * their CurveZMQ sockets. A client is let in when its public key is listed
 * in an authorized_keys file, read at each handshake so keys are added and
 * removed live; its User-Id is then its Z85 key. */
#ifndef CTXD_ZAP_H
#define CTXD_ZAP_H

#include <stdbool.h>
#include <stdint.h>

#define ZAP_KEY_Z85 40 /* a CurveZMQ key in Z85 */

/* Makes curve_router a CurveZMQ server with secret_z85 and starts the ZAP
 * handler: the REP socket the caller's loop serves (zap_serve), or NULL
 * with errno set. */
void *zap_open(void *zctx, void *curve_router, const char *secret_z85);

/* Whether the 32-byte key is listed in the file at path (one Z85 key at
 * the start of a line; blank lines and # comments skipped). */
bool zap_key_listed(const char *path, const uint8_t key[32]);

/* What zap_serve decided for one handshake. */
typedef struct zap_verdict {
    bool ok;
    char key[ZAP_KEY_Z85 + 1]; /* the client's key, "?" when malformed */
    char addr[64];             /* the client's address */
    const char *reason;        /* "OK", or why not */
} zap_verdict;

/* Answers one ZAP request waiting on sock against the keys in keys_path;
 * false when none was waiting. */
bool zap_serve(void *sock, const char *keys_path, zap_verdict *v);

#endif
