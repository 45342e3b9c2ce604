/* ctxd_snap: the snapshot requests of libctxd (ctx.snapshot, ctx.restore,
 * ctx.snapshots, ctx.snapshot_delete, ctx.snapshot_export,
 * ctx.snapshot_import; PROTOCOL.md section 5). Results are
 * owned by the client until its next call, as ctxd_req.c's. */
#include "ctxd_int.h"
#include "mem.h"

#include <stdio.h>
#include <string.h>

/* One snapshot map {id, ctx, name, size, created} into out. */
static int parse_snapshot(ctxd_client *c, const proto_val *m, ctxd_snapshot *out)
{
    static const proto_field fields[] = {
        {"id", PF_STR, true, 200},  {"ctx", PF_STR, true, 64},     {"name", PF_STR, true, 64},
        {"size", PF_UINT, true, 0}, {"created", PF_NUM, false, 0},
    };
    if (!m || m->kind != PROTO_MAP ||
        ctxd_conn_check(c, "snapshot", m, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc ? c->last_rc : ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "no snapshot map");
    const proto_val *cr = proto_map_get(m, "created");
    *out = (ctxd_snapshot){
        .id = ctxd_conn_own_str(c, proto_map_get(m, "id")),
        .ctx = ctxd_conn_own_str(c, proto_map_get(m, "ctx")),
        .name = ctxd_conn_own_str(c, proto_map_get(m, "name")),
        .size = proto_map_get(m, "size")->as.u,
        .created = !cr                       ? 0
                   : cr->kind == PROTO_FLOAT ? cr->as.f
                   : cr->kind == PROTO_UINT  ? (double)cr->as.u
                                             : 0,
    };
    return 0;
}

/* The reply's `unsaved` list, owned by the client. */
static void parse_unsaved(ctxd_client *c, const proto_val *root, const ctxd_unsaved **out,
                          size_t *n)
{
    const proto_val *u = proto_map_get(root, "unsaved");
    size_t count = u && u->kind == PROTO_ARRAY ? u->n : 0;
    ctxd_unsaved *items = ctxd_conn_own(c, mem_calloc(count ? count : 1, sizeof *items));
    for (size_t i = 0; i < count; i++) {
        const proto_val *it = &u->as.items[i];
        items[i].name = ctxd_conn_own_str(c, proto_map_get(it, "name"));
        items[i].reason = ctxd_conn_own_str(c, proto_map_get(it, "reason"));
        if (!items[i].name)
            items[i].name = "";
        if (!items[i].reason)
            items[i].reason = "";
    }
    if (out)
        *out = items;
    if (n)
        *n = count;
}

/* ctx.snapshot of ctx under name (NULL: the daemon names it): the snapshot
 * made in *out, and the globals it could not keep in *unsaved. It waits
 * behind the context's runs without a deadline, as long as the daemon
 * answers liveness checks. */
int ctxd_ctx_snapshot(ctxd_client *c, const char *ctx, const char *name, ctxd_snapshot *out,
                      const ctxd_unsaved **unsaved, size_t *nunsaved)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!ctx)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.snapshot needs a context");
    msg_in *m = NULL;
    /* No deadline: it waits behind the context's runs, and a large state
     * takes its time to write. */
    int r = ctxd_conn_str_request(c, "ctx.snapshot", true, &m, "ctx", ctx, "name", name, NULL);
    if (r < 0)
        return r;
    ctxd_snapshot s;
    r = parse_snapshot(c, proto_map_get(m->root, "snapshot"), &s);
    if (r == 0 && out)
        *out = s;
    if (r == 0)
        parse_unsaved(c, m->root, unsaved, nunsaved);
    ctxd_conn_msg_free(m);
    return r;
}

/* ctx.restore of snapshot into ctx: how many globals came back in
 * *restored, and those that could not in *unsaved. Waits without a
 * deadline, as long as the daemon answers liveness checks. */
int ctxd_ctx_restore(ctxd_client *c, const char *ctx, const char *snapshot, uint64_t *restored,
                     const ctxd_unsaved **unsaved, size_t *nunsaved)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!ctx || !snapshot)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.restore needs a context and a snapshot");
    msg_in *m = NULL;
    int r =
        ctxd_conn_str_request(c, "ctx.restore", true, &m, "ctx", ctx, "snapshot", snapshot, NULL);
    if (r < 0)
        return r;
    const proto_val *n = proto_map_get(m->root, "restored");
    if (restored)
        *restored = n && n->kind == PROTO_UINT ? n->as.u : 0;
    parse_unsaved(c, m->root, unsaved, nunsaved);
    ctxd_conn_msg_free(m);
    return 0;
}

/* ctx.snapshots: the snapshots of ctx (NULL: of every context), owned by
 * the client. A malformed entry fails the whole list with CTXD_EPROTOCOL. */
int ctxd_ctx_snapshots(ctxd_client *c, const char *ctx, const ctxd_snapshot **out, size_t *n)
{
    static const proto_field fields[] = {{"snapshots", PF_ARRAY, true, 0}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    msg_in *m = NULL;
    int r = ctxd_conn_str_request(c, "ctx.snapshots", false, &m, "ctx", ctx, NULL);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "ctx.snapshots reply", m->root, fields, 1);
    const proto_val *arr = proto_map_get(m->root, "snapshots");
    size_t count = r == 0 ? arr->n : 0;
    ctxd_snapshot *items = ctxd_conn_own(c, mem_calloc(count ? count : 1, sizeof *items));
    for (size_t i = 0; i < count && r == 0; i++)
        r = parse_snapshot(c, &arr->as.items[i], &items[i]);
    ctxd_conn_msg_free(m);
    if (out)
        *out = r == 0 ? items : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* ctx.snapshot_delete of snapshot: 0 once the daemon removed it, else the
 * daemon's refusal. */
int ctxd_snapshot_delete(ctxd_client *c, const char *snapshot)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!snapshot)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.snapshot_delete needs a snapshot");
    msg_in *m = NULL;
    int r = ctxd_conn_str_request(c, "ctx.snapshot_delete", false, &m, "snapshot", snapshot, NULL);
    if (r < 0)
        return r;
    ctxd_conn_msg_free(m);
    return 0;
}

/* ctx.snapshot_export of snapshot: the exported file's path on the
 * daemon's host and the writer's tier it carries, owned by the client.
 * Waits without a deadline while the file is copied. */
int ctxd_snapshot_export(ctxd_client *c, const char *snapshot, const char **path, const char **tier)
{
    static const proto_field fields[] = {{"path", PF_STR, true, 8192}, {"tier", PF_STR, true, 16}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!snapshot)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.snapshot_export needs a snapshot");
    msg_in *m = NULL;
    /* No deadline: the copy takes as long as the file's size. */
    int r = ctxd_conn_str_request(c, "ctx.snapshot_export", true, &m, "snapshot", snapshot, NULL);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "ctx.snapshot_export reply", m->root, fields, 2);
    if (r == 0 && path)
        *path = ctxd_conn_own_str(c, proto_map_get(m->root, "path"));
    if (r == 0 && tier)
        *tier = ctxd_conn_own_str(c, proto_map_get(m->root, "tier"));
    ctxd_conn_msg_free(m);
    return r;
}

/* ctx.snapshot_import of snapshot (an export placed on the daemon's host):
 * the snapshot made in *out and the writer's tier ("" when not said).
 * Waits without a deadline while the file is read. */
int ctxd_snapshot_import(ctxd_client *c, const char *snapshot, ctxd_snapshot *out,
                         const char **tier)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!snapshot)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.snapshot_import needs a snapshot");
    msg_in *m = NULL;
    int r = ctxd_conn_str_request(c, "ctx.snapshot_import", true, &m, "snapshot", snapshot, NULL);
    if (r < 0)
        return r;
    const proto_val *sm = proto_map_get(m->root, "snapshot");
    ctxd_snapshot s;
    r = parse_snapshot(c, sm, &s);
    if (r == 0 && out)
        *out = s;
    if (r == 0 && tier) {
        const proto_val *t = proto_map_get(sm, "tier");
        *tier = t && t->kind == PROTO_STR ? ctxd_conn_own_str(c, t) : "";
    }
    ctxd_conn_msg_free(m);
    return r;
}
