/* sup_persist: the context table kept in the state directory
 * (STATE_DIR/contexts-<endpoints hash>.msgpack), so that after a daemon restart a context
 * that existed comes back instead of being silently made anew: at start
 * every remembered context is created again as a new incarnation whose
 * first `accepted` carries previous_death "daemon restarted" (its globals
 * are gone; that is said, never hidden). Kept per context: name, cwd (or
 * that it was a sandbox's private directory), env, tier, policy,
 * incarnation and a confined context's uid (it gets it back). Each change is appended to a journal beside it
 * (contexts-<hash>.msgpack.log: length-prefixed records {put: ENTRY} or
 * {del: NAME}), so a create costs the same at 10 or 5,000 contexts; the
 * table is rewritten whole (temporary file, rename; the journal then
 * removed) at the first save, when the journal grows past the table's
 * size, or after too many changes at once. Both are read only up to
 * SUP_PERSIST_MAX bytes; a torn last record is ignored. */
#include "sup_persist.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_disk.h"
#include "sup_ctx.h"
#include "sup_life.h"
#include "sup_ident.h"
#include "sup_policy.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUP_PERSIST_MAX (64u * 1024 * 1024)
#define RESTART_CAUSE "daemon restarted"

/* The table must be written whole at the next save (first save, journal
 * grown, changes overflowed, a write failed). */
static bool need_table = true;
static size_t table_bytes, journal_bytes;

/* STATE_DIR/contexts-<hash of the endpoints>.msgpack: daemons that share a
 * state directory but listen elsewhere (tests, several instances) keep
 * tables of their own; a restart on the same endpoints finds its own. */
static void path_of(char *out, size_t n, const char *dir, const char *suffix)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sup_cfg.nendpoints; i++) {
        for (const char *p = sup_cfg.endpoints[i]; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
    }
    snprintf(out, n, "%s/contexts-%016llx.msgpack%s", dir, (unsigned long long)h, suffix);
}

/* One context's entry: {name, cwd, own_cwd, env, tier, policy,
 * incarnation, autosnapshot} and, for one with a uid of its own, uid (it
 * gets it back: sup_ident.c). */
static void encode_entry(proto_buf *b, const sup_ctx *c)
{
    proto_map m = proto_map_open(b);
    proto_key(b, &m, "name");
    proto_put_str(b, c->name);
    proto_key(b, &m, "cwd");
    proto_put_str(b, c->cwd);
    proto_key(b, &m, "own_cwd");
    proto_put_bool(b, c->ident && c->ident->dir);
    proto_key(b, &m, "env");
    proto_put_array(b, (uint32_t)c->nenv);
    for (size_t i = 0; i < c->nenv; i++)
        proto_put_str(b, c->env[i]);
    proto_key(b, &m, "tier");
    proto_put_str(b, sup_policy_tier_name(c->policy));
    proto_key(b, &m, "policy");
    sup_policy_put(b, c->policy);
    proto_key(b, &m, "incarnation");
    proto_put_uint(b, c->incarnation);
    proto_key(b, &m, "autosnapshot"); /* sup_snap.c: 0 off, -1 after each run, seconds */
    proto_put_double(b, c->autosnap);
    if (c->ident && c->ident->own_uid) {
        proto_key(b, &m, "uid");
        proto_put_uint(b, c->ident->uid);
    }
    proto_map_close(b, &m);
}

/* The table as msgpack: {v: 1, contexts: [ENTRY...]}. */
static void encode_table(proto_buf *b)
{
    uint32_t n = 0;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        n += !c->deleted;
    proto_put_map(b, 2);
    proto_put_str(b, "v");
    proto_put_uint(b, 1);
    proto_put_str(b, "contexts");
    proto_put_array(b, n);
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        if (!c->deleted)
            encode_entry(b, c);
}

/* Writes all of b to fd; false on any failure. */
static bool write_all(int fd, const proto_buf *b)
{
    size_t done = 0;
    while (fd >= 0 && done < b->len) {
        ssize_t w = write(fd, b->data + done, b->len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        done += (size_t)w;
    }
    return fd >= 0;
}

/* Rewrites the whole table and removes the journal it includes. */
static void save_table(const char *dir)
{
    char path[PATH_MAX + 32], tmp[PATH_MAX + 32], log[PATH_MAX + 32];
    path_of(path, sizeof path, dir, "");
    path_of(tmp, sizeof tmp, dir, ".tmp");
    path_of(log, sizeof log, dir, ".log");
    if (sup_ctx_count() == 0) { /* nothing to keep: no file left behind */
        unlink(path);
        unlink(log);
        need_table = true; /* a journal needs a table before it */
        table_bytes = journal_bytes = 0;
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    encode_table(&b);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = write_all(fd, &b);
    if (fd >= 0 && close(fd) < 0)
        ok = false;
    if (ok && rename(tmp, path) == 0) {
        unlink(log);
        need_table = false;
        table_bytes = b.len;
        journal_bytes = 0;
    } else {
        /* Tried again when the table next changes; the old files stay. */
        sup_stats_event("contexts-save-failed path=%s error=\"%s\"", path,
                        strerror(errno ? errno : ENOSPC));
        unlink(tmp);
    }
    proto_buf_free(&b);
}

/* Appends the changes as journal records; false when it could not. */
static bool append_journal(const char *dir, const sup_ctx_change *ch, size_t n)
{
    proto_buf b;
    proto_buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        if (!ch[i].put && !ch[i].del)
            continue;
        size_t start = proto_frame_begin(&b);
        proto_put_map(&b, 1);
        if (ch[i].del) {
            proto_put_str(&b, "del");
            proto_put_str(&b, ch[i].del);
        } else {
            proto_put_str(&b, "put");
            encode_entry(&b, ch[i].put);
        }
        proto_frame_end(&b, start);
    }
    char log[PATH_MAX + 32];
    path_of(log, sizeof log, dir, ".log");
    int fd = b.len ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    bool ok = !b.len || write_all(fd, &b);
    if (fd >= 0 && close(fd) < 0)
        ok = false;
    journal_bytes += b.len;
    proto_buf_free(&b);
    return ok;
}

void sup_persist_flush(void)
{
    size_t n;
    bool overflow;
    const sup_ctx_change *ch = sup_ctx_changes(&n, &overflow);
    if (n == 0 && !overflow && !need_table)
        return;
    const char *dir = sup_auth_state_dir();
    if (dir) {
        if (overflow || need_table || journal_bytes > table_bytes + 65536 ||
            !append_journal(dir, ch, n))
            save_table(dir); /* a failed append: the whole table instead */
    }
    sup_ctx_changes_clear();
}

/* Frees n env strings and their array. */
static void free_env(char **env, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(env[i]);
    free(env);
}

/* The entry's env array as "KEY=VALUE" strings (NULL-terminated, the
 * context's on success); -1 when malformed. */
static int read_env(const proto_val *v, char ***env, size_t *n)
{
    *env = NULL;
    *n = 0;
    if (!v || v->kind != PROTO_ARRAY)
        return v ? -1 : 0;
    char **e = mem_calloc(v->n + 1, sizeof *e);
    for (uint32_t i = 0; i < v->n; i++) {
        const proto_val *s = &v->as.items[i];
        if (s->kind != PROTO_STR || !proto_utf8_valid(s->as.s, s->n, false) ||
            !memchr(s->as.s, '=', s->n)) {
            free_env(e, i);
            return -1;
        }
        e[i] = proto_strdup(s);
    }
    *env = e;
    *n = v->n;
    return 0;
}

/* Makes one remembered context again; logs and skips it when it cannot. */
static void restore_one(const proto_val *m)
{
    const proto_val *name = proto_map_get(m, "name"), *cwd = proto_map_get(m, "cwd");
    const proto_val *own = proto_map_get(m, "own_cwd"), *inc = proto_map_get(m, "incarnation");
    if (!name || name->kind != PROTO_STR || !proto_name_valid(name->as.s, name->n) || !cwd ||
        cwd->kind != PROTO_STR || cwd->n == 0 || cwd->n >= PATH_MAX ||
        !proto_utf8_valid(cwd->as.s, cwd->n, false) || !inc || inc->kind != PROTO_UINT ||
        inc->as.u >= UINT32_MAX || sup_ctx_find(name->as.s, name->n)) {
        sup_stats_event("contexts-restore-skipped reason=\"malformed or repeated entry\"");
        return;
    }
    char nm[PROTO_MAX_NAME + 1], dir[PATH_MAX];
    snprintf(nm, sizeof nm, "%.*s", (int)name->n, name->as.s);
    snprintf(dir, sizeof dir, "%.*s", (int)cwd->n, cwd->as.s);
    proto_error err;
    sup_policy *p = sup_policy_parse(proto_map_get(m, "tier"), proto_map_get(m, "policy"), &err);
    char **env;
    size_t nenv;
    if (!p || read_env(proto_map_get(m, "env"), &env, &nenv) < 0) {
        sup_stats_event("contexts-restore-skipped ctx=%s reason=\"%s\"", nm,
                        p ? "malformed env" : err.msg);
        sup_policy_free(p);
        return;
    }
    bool own_cwd = own && own->kind == PROTO_BOOL && own->as.b;
    /* Its identity: the uid of its own it had, for a confined tier (what
     * it left as that uid is its own), and a new private directory when it
     * had one (the old one's contents did not survive the daemon). */
    bool confined = p->tier == SUP_TIER_LOCAL || p->tier == SUP_TIER_SANDBOX;
    const proto_val *uid = proto_map_get(m, "uid");
    long uid_was = uid && uid->kind == PROTO_UINT && uid->as.u < UINT32_MAX ? (long)uid->as.u : -1;
    sup_ident *id = sup_ident_restore(confined, nm, own_cwd, uid_was, &err);
    if (!id) {
        sup_stats_event("contexts-restore-skipped ctx=%s reason=\"%s\"", nm, err.msg);
        sup_policy_free(p);
        free_env(env, nenv);
        return;
    }
    if (own_cwd)
        snprintf(dir, sizeof dir, "%s", id->dir);
    if (own_cwd && p->disk_bytes && sup_disk_mount(id->dir, p->disk_bytes, id->uid, id->gid) < 0) {
        sup_stats_event("contexts-restore-skipped ctx=%s reason=\"disk_bytes: %s\"", nm,
                        strerror(errno));
        sup_ident_unref(id);
        sup_policy_free(p);
        free_env(env, nenv);
        return;
    }
    if (p->tier == SUP_TIER_LOCAL && !p->write_roots.set)
        sup_policy_default_write_roots(p, dir);
    sup_ctx_spec spec = {
        .name = nm, .cwd = dir, .env = env, .nenv = nenv, .ident = id, .policy = p};
    sup_ctx *c = sup_life_create(&spec, &err);
    if (!c) {
        sup_stats_event("contexts-restore-failed ctx=%s error=\"%s\"", nm, err.msg);
        sup_ident_unref(id);
        sup_policy_free(p);
        free_env(env, nenv);
        return;
    }
    c->incarnation = (unsigned)inc->as.u + 1;
    const proto_val *autosnap = proto_map_get(m, "autosnapshot");
    if (autosnap && autosnap->kind == PROTO_FLOAT &&
        (autosnap->as.f == -1 || (autosnap->as.f >= 1 && autosnap->as.f <= 1e9)))
        c->autosnap = autosnap->as.f;
    free(c->last_death);
    c->last_death = mem_strdup(RESTART_CAUSE);
    c->death_unshown = true;
    sup_stats_event("context-restored ctx=%s incarnation=%u", nm, c->incarnation);
}

/* Whether a table entry has the name nm. */
static bool entry_named(const proto_val *e, const proto_val *nm)
{
    const proto_val *n = e->kind == PROTO_MAP ? proto_map_get(e, "name") : NULL;
    return n && n->kind == PROTO_STR && n->n == nm->n && memcmp(n->as.s, nm->as.s, nm->n) == 0;
}

/* The journal's bytes (NULL when none or unreadable; at most
 * SUP_PERSIST_MAX are read). */
static uint8_t *read_journal(const char *dir, size_t *len)
{
    char log[PATH_MAX + 32];
    path_of(log, sizeof log, dir, ".log");
    int fd = open(log, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        return NULL;
    }
    size_t cap = (uint64_t)st.st_size > SUP_PERSIST_MAX ? SUP_PERSIST_MAX : (size_t)st.st_size;
    uint8_t *d = mem_alloc(cap);
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, d + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return d;
}

void sup_persist_restore(void)
{
    const char *dir = sup_auth_state_dir();
    if (!dir)
        return;
    char path[PATH_MAX + 32];
    path_of(path, sizeof path, dir, "");
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > SUP_PERSIST_MAX) {
        fprintf(stderr, "ctxd: ignoring %s: not a regular file of at most %u bytes\n", path,
                SUP_PERSIST_MAX);
        close(fd);
        return;
    }
    size_t len = (size_t)st.st_size, got = 0;
    uint8_t *data = mem_alloc(len);
    while (got < len) {
        ssize_t r = read(fd, data + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    proto_doc doc;
    proto_error err;
    const proto_val *list = NULL;
    if (got == len && proto_decode(&doc, data, len, &err) == 0) {
        list = proto_map_get(&doc.nodes[0], "contexts");
        if (!list || list->kind != PROTO_ARRAY) {
            list = NULL;
            proto_doc_free(&doc);
        }
    }
    if (!list) {
        fprintf(stderr, "ctxd: ignoring %s: not a context table\n", path);
        free(data);
        return;
    }
    /* The entries, by name, with the journal's changes applied in order. */
    size_t nent = list->n, cap = list->n + 16;
    const proto_val **ent = mem_alloc(cap * sizeof *ent);
    for (uint32_t i = 0; i < list->n; i++)
        ent[i] = &list->as.items[i];
    size_t nlog = 0;
    uint8_t *logdata = read_journal(dir, &nlog);
    proto_doc *docs = NULL;
    size_t ndocs = 0, off = 0;
    for (;;) {
        const uint8_t *body;
        size_t blen, used;
        if (!logdata ||
            proto_frame_next(logdata + off, nlog - off, SUP_PERSIST_MAX, &body, &blen, &used) <= 0)
            break; /* the end, or a torn last record */
        off += used;
        docs = mem_realloc(docs, (ndocs + 1) * sizeof *docs);
        if (proto_decode(&docs[ndocs], body, blen, &err) < 0)
            break;
        const proto_val *rec = &docs[ndocs++].nodes[0];
        const proto_val *put = proto_map_get(rec, "put"), *del = proto_map_get(rec, "del");
        const proto_val *nm = put && put->kind == PROTO_MAP ? proto_map_get(put, "name") : del;
        if (!nm || nm->kind != PROTO_STR)
            continue;
        size_t j = 0;
        while (j < nent && !entry_named(ent[j], nm))
            j++;
        if (del) {
            if (j < nent)
                ent[j] = ent[--nent];
        } else if (j < nent) {
            ent[j] = put;
        } else {
            if (nent == cap)
                ent = mem_realloc(ent, (cap *= 2) * sizeof *ent);
            ent[nent++] = put;
        }
    }
    for (size_t i = 0; i < nent && sup_ctx_count() < sup_cfg.max_contexts; i++)
        if (ent[i]->kind == PROTO_MAP)
            restore_one(ent[i]);
    if (nent > 0)
        fprintf(stderr,
                "ctxd: %zu of %zu contexts of the previous daemon made again (state lost)\n",
                sup_ctx_count(), nent);
    for (size_t i = 0; i < ndocs; i++)
        proto_doc_free(&docs[i]);
    free(docs);
    free(ent);
    free(logdata);
    proto_doc_free(&doc);
    free(data);
}
