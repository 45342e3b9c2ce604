/* sup_auth: CurveZMQ for tcp:// endpoints. The daemon's key pair lives in its
 * state directory (made on first start); clients are let in when their public
 * key is in the authorized keys file, checked by a ZAP handler that runs in
 * the supervisor's own loop (RFC 27). */
#include "sup_auth.h"

#include "sup_config.h"

#include "mem.h"
#include "zap.h"
#include "zap_key.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define KEY_Z85 40

static char state_dir[PATH_MAX];
static char server_secret[KEY_Z85 + 1];
static char server_public[KEY_Z85 + 1];
static void *zap;

/* The state directory: --state-dir, else $XDG_STATE_HOME/ctxd, else
 * ~/.local/state/ctxd, else /var/lib/ctxd (root). Made 0700. */
static int make_state_dir(void)
{
    if (state_dir[0])
        return 0;
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (sup_cfg.state_dir)
        snprintf(state_dir, sizeof state_dir, "%s", sup_cfg.state_dir);
    else if (xdg && *xdg)
        snprintf(state_dir, sizeof state_dir, "%s/ctxd", xdg);
    else if (geteuid() != 0 && home && *home)
        snprintf(state_dir, sizeof state_dir, "%s/.local/state/ctxd", home);
    else
        snprintf(state_dir, sizeof state_dir, "/var/lib/ctxd");
    /* mkdir -p, each level 0700 when we create it */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", state_dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
            break;
        *p = '/';
    }
    if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "ctxd: cannot create state directory %s: %s\n", state_dir, strerror(errno));
        state_dir[0] = '\0';
        return -1;
    }
    /* Paths under it are opened without following links (sbx_path.c):
     * use its real path. 0711: a confined worker, of its own uid, passes
     * through to its directory (contexts/NAME.*), lists nothing, and reads
     * no key (server.key is 0600). */
    char real[PATH_MAX];
    if (realpath(state_dir, real))
        snprintf(state_dir, sizeof state_dir, "%s", real);
    struct stat st;
    if (stat(state_dir, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0777) != 0711)
        (void)chmod(state_dir, 0711);
    return 0;
}

const char *sup_auth_state_dir(void)
{
    return make_state_dir() < 0 ? NULL : state_dir;
}

/* Writes a whole file or nothing: a temporary file beside it, fsync'ed,
 * then renamed over path (and the directory fsync'ed), so a full disk or a
 * crash never leaves an empty or partial key that blocks later starts.
 * -1 with errno set; the temporary file is removed. */
static int write_file(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    errno = 0;
    int rc = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0 ? 0 : -1;
    if (rc < 0 && errno == 0)
        errno = ENOSPC; /* a short write */
    int saved = errno;
    if (close(fd) < 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && rename(tmp, path) < 0) {
        rc = -1;
        saved = errno;
    }
    if (rc < 0) {
        unlink(tmp);
        errno = saved;
        return -1;
    }
    int dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* Loads the server key pair, making it on first start. A server.key that
 * holds no valid key (left by an older daemon on a full disk, or damaged)
 * is made again when server.pub is missing too; when server.pub exists,
 * clients may trust it, so the start fails with a message saying what to
 * do rather than silently changing the daemon's identity. */
static int load_server_keys(void)
{
    char sec_path[PATH_MAX + 16], pub_path[PATH_MAX + 16];
    snprintf(sec_path, sizeof sec_path, "%s/server.key", state_dir);
    snprintf(pub_path, sizeof pub_path, "%s/server.pub", state_dir);
    struct stat st;
    char why[128];
    if (zap_key_read(sec_path, server_secret, why, sizeof why) == 0) {
        if (zmq_curve_public(server_public, server_secret) != 0)
            return -1;
        if (lstat(pub_path, &st) < 0) { /* an earlier start could not write it */
            char text[64];
            snprintf(text, sizeof text, "%s\n", server_public);
            if (write_file(pub_path, text, 0644) < 0) {
                fprintf(stderr, "ctxd: cannot write %s: %s\n", pub_path, strerror(errno));
                return -1;
            }
        }
        return 0;
    }
    if (lstat(sec_path, &st) == 0) {
        if (lstat(pub_path, &st) == 0) {
            fprintf(stderr,
                    "ctxd: %s holds no valid key (empty or corrupt) but %s exists: restore "
                    "server.key, or remove both files to make a new key pair (clients must "
                    "then be given the new server.pub)\n",
                    sec_path, pub_path);
            return -1;
        }
        fprintf(stderr,
                "ctxd: %s holds no valid key and there is no server.pub: making a new "
                "key pair\n",
                sec_path);
    }
    if (zmq_curve_keypair(server_public, server_secret) != 0) {
        fprintf(stderr, "ctxd: this libzmq has no CURVE support\n");
        return -1;
    }
    char text[128];
    snprintf(text, sizeof text, "# ctxd server secret key (keep private)\n%s\n", server_secret);
    if (write_file(sec_path, text, 0600) < 0) {
        fprintf(stderr, "ctxd: cannot write %s: %s\n", sec_path, strerror(errno));
        return -1;
    }
    snprintf(text, sizeof text, "%s\n", server_public);
    if (write_file(pub_path, text, 0644) < 0) {
        fprintf(stderr, "ctxd: cannot write %s: %s\n", pub_path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "ctxd: made a new server key pair in %s\n", state_dir);
    return 0;
}

int sup_auth_setup(void *zctx, void *curve_router)
{
    if (make_state_dir() < 0 || load_server_keys() < 0)
        return -1;
    zap = zap_open(zctx, curve_router, server_secret);
    if (!zap) {
        fprintf(stderr, "ctxd: cannot start the ZAP handler: %s\n", zmq_strerror(errno));
        return -1;
    }
    fprintf(stderr, "ctxd: tcp endpoints use CurveZMQ; server public key %s (%s/server.pub)\n",
            server_public, state_dir);
    return 0;
}

void *sup_auth_zap_socket(void)
{
    return zap;
}

/* The authorized keys file: --authorized-keys, else STATE_DIR/authorized_keys. */
static void keys_path(char *path, size_t size)
{
    if (sup_cfg.authorized_keys)
        snprintf(path, size, "%s", sup_cfg.authorized_keys);
    else
        snprintf(path, size, "%s/authorized_keys", state_dir);
}

/* Answers one ZAP request (daemon/zap): a refusal is said on stderr. */
void sup_auth_handle(void)
{
    char path[PATH_MAX + 32];
    keys_path(path, sizeof path);
    zap_verdict v;
    if (zap_serve(zap, path, &v) && !v.ok)
        fprintf(stderr, "ctxd: refused a client from %s with key %s: %s\n", v.addr, v.key,
                v.reason);
}
