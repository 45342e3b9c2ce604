/* sup_snapmac: the writer's mark inside a snapshot file (sup_snapmac.h).
 *
 * The tag, SUP_SNAPMAC_TAG bytes at the file's end (integers
 * little-endian):
 *   0   "CTXDTAG\x01"
 *   8   u64 content length (the bytes before the tag)
 *   16  u8 writer's tier (sup_tier), u8 key (1 the daemon's, 2 export),
 *       u8 origin length, 5 zero bytes
 *   24  origin: the writer's context name, zero-padded to 64 bytes
 *   88  8 zero bytes
 *   96  HMAC-SHA256(key, content || tag[0..96])
 * The keys are files of the state directory, which only root reads:
 * snapshot.key (32 random bytes, made at first use, 0600) and, when the
 * operator puts one there, export.key (16 to 4096 bytes). */
#include "sup_snapmac.h"

#include "sup_auth.h"

#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "CTXDTAG\x01"
#define OWN_KEY "snapshot.key"
#define EXPORT_KEY "export.key"
#define KEY_MIN 16
#define KEY_MAX 4096
#define ORIGIN_MAX 64
#define MAC_AT 96
#define READ_CHUNK (1 << 20)

struct sup_snapmac {
    EVP_MAC_CTX *ctx;
    unsigned char key[KEY_MAX];
    size_t key_len;
    sup_snapmac_key which;
};

static EVP_MAC *hmac;

/* Reads a key file of the state directory into key; its length, or 0
 * with errno. The daemon's own is made (32 random bytes) when missing. */
static size_t read_key(sup_snapmac_key which, unsigned char *key)
{
    const char *state = sup_auth_state_dir();
    int sfd = state ? open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (sfd < 0)
        return 0;
    const char *name = which == SUP_SNAPMAC_OWN ? OWN_KEY : EXPORT_KEY;
    int fd = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && which == SUP_SNAPMAC_OWN) {
        unsigned char fresh[32];
        if (getrandom(fresh, sizeof fresh, 0) != (ssize_t)sizeof fresh)
            fatal("getrandom: %s", strerror(errno));
        int w = openat(sfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (w >= 0) {
            if (write(w, fresh, sizeof fresh) != (ssize_t)sizeof fresh || fsync(w) < 0)
                fatal("cannot write %s/%s: %s", state, name, strerror(errno));
            close(w);
        }
        explicit_bzero(fresh, sizeof fresh);
        fd = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    int e = errno;
    close(sfd);
    if (fd < 0) {
        errno = e;
        return 0;
    }
    struct stat st;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, key, KEY_MAX) : -1;
    close(fd);
    if (n < KEY_MIN) {
        errno = EINVAL;
        return 0;
    }
    return (size_t)n;
}

static void mac_init(sup_snapmac *m)
{
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    if (!EVP_MAC_init(m->ctx, m->key, m->key_len, params))
        fatal("EVP_MAC_init failed");
}

sup_snapmac *sup_snapmac_new(sup_snapmac_key which)
{
    if (!hmac && !(hmac = EVP_MAC_fetch(NULL, "HMAC", NULL)))
        fatal("OpenSSL has no HMAC");
    sup_snapmac *m = mem_calloc(1, sizeof *m);
    m->key_len = read_key(which, m->key);
    if (m->key_len == 0) {
        int e = errno;
        free(m);
        errno = e;
        return NULL;
    }
    m->which = which;
    m->ctx = EVP_MAC_CTX_new(hmac);
    if (!m->ctx)
        fatal("EVP_MAC_CTX_new failed");
    mac_init(m);
    return m;
}

void sup_snapmac_add(sup_snapmac *m, const void *p, uint64_t n)
{
    if (n && !EVP_MAC_update(m->ctx, p, n))
        fatal("EVP_MAC_update failed");
}

void sup_snapmac_reset(sup_snapmac *m)
{
    mac_init(m);
}

void sup_snapmac_free(sup_snapmac *m)
{
    if (!m)
        return;
    EVP_MAC_CTX_free(m->ctx);
    OPENSSL_cleanse(m->key, sizeof m->key);
    free(m);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The tag's first MAC_AT bytes. */
static void tag_head(unsigned char *t, uint64_t content_len, int tier, sup_snapmac_key which,
                     const char *origin)
{
    memset(t, 0, SUP_SNAPMAC_TAG);
    memcpy(t, MAGIC, 8);
    put_u64(t + 8, content_len);
    size_t on = strnlen(origin, ORIGIN_MAX);
    t[16] = (unsigned char)tier;
    t[17] = (unsigned char)which;
    t[18] = (unsigned char)on;
    memcpy(t + 24, origin, on);
}

/* Ends m over the tag's head t, into t's MAC field. */
static void tag_mac(sup_snapmac *m, unsigned char *t)
{
    sup_snapmac_add(m, t, MAC_AT);
    size_t out = 0;
    if (!EVP_MAC_final(m->ctx, t + MAC_AT, &out, SUP_SNAPMAC_TAG - MAC_AT) || out != 32)
        fatal("EVP_MAC_final failed");
}

bool sup_snapmac_seal(sup_snapmac *m, int fd, uint64_t content_len, int tier, const char *origin)
{
    unsigned char t[SUP_SNAPMAC_TAG];
    tag_head(t, content_len, tier, m->which, origin);
    tag_mac(m, t);
    sup_snapmac_free(m);
    ssize_t n = pwrite(fd, t, sizeof t, (off_t)content_len);
    if (n != (ssize_t)sizeof t) {
        if (n >= 0)
            errno = EIO;
        return false;
    }
    return ftruncate(fd, (off_t)(content_len + sizeof t)) == 0;
}

bool sup_snapmac_verify(int fd, sup_snapmac_key which, int *tier, char *origin,
                        uint64_t *content_len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return false;
    uint64_t size = (uint64_t)st.st_size;
    *content_len = size;
    *tier = -1;
    origin[0] = '\0';
    unsigned char t[SUP_SNAPMAC_TAG];
    if (size < sizeof t || pread(fd, t, sizeof t, (off_t)(size - sizeof t)) != (ssize_t)sizeof t ||
        memcmp(t, MAGIC, 8) != 0)
        return false;
    *content_len = size - sizeof t;
    if (get_u64(t + 8) != size - sizeof t || t[17] != which || t[18] > ORIGIN_MAX)
        return false;
    sup_snapmac *m = sup_snapmac_new(which);
    if (!m)
        return false;
    unsigned char *buf = mem_alloc(READ_CHUNK);
    uint64_t off = 0, len = size - sizeof t;
    bool ok = true;
    while (ok && off < len) {
        size_t want = len - off < READ_CHUNK ? (size_t)(len - off) : READ_CHUNK;
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n <= 0) {
            ok = false;
            break;
        }
        sup_snapmac_add(m, buf, (uint64_t)n);
        off += (uint64_t)n;
    }
    free(buf);
    unsigned char want[SUP_SNAPMAC_TAG];
    memcpy(want, t, MAC_AT);
    if (ok)
        tag_mac(m, want);
    sup_snapmac_free(m);
    if (!ok || CRYPTO_memcmp(want + MAC_AT, t + MAC_AT, SUP_SNAPMAC_TAG - MAC_AT) != 0)
        return false;
    *tier = t[16];
    memcpy(origin, t + 24, t[18]);
    origin[t[18]] = '\0';
    return true;
}
