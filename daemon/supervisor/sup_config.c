/* sup_config: ctxd's settings, from the command line and from a config file
 * (`--config FILE`, lines of `key = value` using the long option names). One
 * table describes every option for both, and for --help. */
#include "sup_config.h"

#include "mem.h"
#include "proto.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char sup_instance[33];

sup_config sup_cfg = {
    .max_contexts = 1024,
    .max_queue = 64,
    .max_code_bytes = 8u * 1024 * 1024,
    .max_request_bytes = PROTO_MAX_REQUEST,
    .default_timeout = 600,
    .kill_grace = 2,
    .socket_gid = -1,
    .max_held = (size_t)256 << 20,
    .max_client_held = (size_t)16 << 20,
    .max_chan_held = (size_t)64 << 20,
    .max_snapshot_bytes = (uint64_t)8 << 30,
    .max_snapshots = 16,
    .max_snapshot_total = (uint64_t)64 << 30,
};

typedef enum { ARG_NONE, ARG_STR, ARG_COUNT, ARG_BYTES, ARG_SECONDS } arg_kind;

typedef struct option_def {
    const char *name;
    char letter;
    arg_kind kind;
    const char *metavar;
    const char *help;
    int (*set)(const char *value, char *err, size_t errlen);
} option_def;

static int set_listen(const char *v, char *err, size_t n)
{
    if (sup_cfg.nendpoints >= SUP_MAX_ENDPOINTS) {
        snprintf(err, n, "at most %d endpoints", SUP_MAX_ENDPOINTS);
        return -1;
    }
    sup_cfg.endpoints[sup_cfg.nendpoints++] = mem_strdup(v);
    return 0;
}

/* Parses into *out with the option's kind; the setters below wrap it. */
static int parse_number(const char *v, arg_kind kind, double *out, char *err, size_t n)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    double mult = 1;
    if (kind == ARG_BYTES && *end) {
        static const char units[] = "KMG";
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (u && end[1] == '\0') {
            for (const char *p = units; p <= u; p++)
                mult *= 1024;
            end++;
        }
    }
    if (*v == '\0' || *end != '\0' || errno || !(d >= 0) || d * mult > 1e15 ||
        (kind != ARG_SECONDS && d != (double)(unsigned long long)d)) {
        snprintf(err, n, "'%s' is not a valid %s", v,
                 kind == ARG_SECONDS ? "number of seconds"
                 : kind == ARG_BYTES ? "size (bytes, or with K/M/G)"
                                     : "count");
        return -1;
    }
    *out = d * mult;
    return 0;
}

#define NUMBER_SETTER(fn, kind, field, type, min)                                                  \
    static int fn(const char *v, char *err, size_t n)                                              \
    {                                                                                              \
        double d;                                                                                  \
        if (parse_number(v, kind, &d, err, n) < 0)                                                 \
            return -1;                                                                             \
        if (d < (min)) {                                                                           \
            snprintf(err, n, "must be at least %g", (double)(min));                                \
            return -1;                                                                             \
        }                                                                                          \
        sup_cfg.field = (type)d;                                                                   \
        return 0;                                                                                  \
    }

NUMBER_SETTER(set_max_contexts, ARG_COUNT, max_contexts, size_t, 1)
/* --spare-workers: at most SUP_SPARE_MAX (each is an idle process). */
static int set_spare_workers(const char *v, char *err, size_t n)
{
    double d;
    if (parse_number(v, ARG_COUNT, &d, err, n) < 0)
        return -1;
    if (d > SUP_SPARE_MAX) {
        snprintf(err, n, "must be at most %d", SUP_SPARE_MAX);
        return -1;
    }
    sup_cfg.spare_workers = (size_t)d;
    return 0;
}

NUMBER_SETTER(set_max_queue, ARG_COUNT, max_queue, size_t, 1)
NUMBER_SETTER(set_timeout, ARG_SECONDS, default_timeout, double, 0)
NUMBER_SETTER(set_grace, ARG_SECONDS, kill_grace, double, 0)
NUMBER_SETTER(set_idle_ttl, ARG_SECONDS, idle_ttl, double, 0)
NUMBER_SETTER(set_max_output, ARG_BYTES, max_output, uint64_t, 0)
NUMBER_SETTER(set_max_code, ARG_BYTES, max_code_bytes, size_t, 1)
NUMBER_SETTER(set_max_held, ARG_BYTES, max_held, size_t, 1 << 20)
NUMBER_SETTER(set_max_client_held, ARG_BYTES, max_client_held, size_t, 64 << 10)
NUMBER_SETTER(set_max_chan_held, ARG_BYTES, max_chan_held, size_t, (size_t)PROTO_MAX_FRAME + 4)
NUMBER_SETTER(set_max_snapshot_bytes, ARG_BYTES, max_snapshot_bytes, uint64_t, 4096)
NUMBER_SETTER(set_max_snapshots, ARG_COUNT, max_snapshots, size_t, 1)
NUMBER_SETTER(set_max_snapshot_total, ARG_BYTES, max_snapshot_total, uint64_t, 4096)

static int set_max_request(const char *v, char *err, size_t n)
{
    double d;
    if (parse_number(v, ARG_BYTES, &d, err, n) < 0)
        return -1;
    if (d < 1024 || d > PROTO_MAX_REQUEST_CAP) {
        snprintf(err, n, "must be between 1K and %uM", PROTO_MAX_REQUEST_CAP >> 20);
        return -1;
    }
    sup_cfg.max_request_bytes = (size_t)d;
    return 0;
}

#define STR_SETTER(fn, field)                                                                      \
    static int fn(const char *v, char *err, size_t n)                                              \
    {                                                                                              \
        (void)err, (void)n;                                                                        \
        sup_cfg.field = mem_strdup(v);                                                             \
        return 0;                                                                                  \
    }

STR_SETTER(set_worker, worker_path)
STR_SETTER(set_state_dir, state_dir)
STR_SETTER(set_authorized_keys, authorized_keys)
STR_SETTER(set_log, log_path)
STR_SETTER(set_wheelhouse, wheelhouse)
STR_SETTER(set_package_index, package_index)
STR_SETTER(set_package_cache, package_cache)
STR_SETTER(set_pip_python, pip_python)

/* --preload a,b (repeatable: the lists add up). */
static int set_preload(const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    const char *old = sup_cfg.preload;
    char *joined = mem_alloc((old ? strlen(old) + 1 : 0) + strlen(v) + 1);
    sprintf(joined, "%s%s%s", old ? old : "", old ? "," : "", v);
    sup_cfg.preload = joined;
    return 0;
}

static int set_on_disconnect(const char *v, char *err, size_t n)
{
    if (strcmp(v, "finish") == 0 || strcmp(v, "interrupt") == 0) {
        sup_cfg.interrupt_on_disconnect = v[0] == 'i';
        return 0;
    }
    snprintf(err, n, "must be 'finish' or 'interrupt'");
    return -1;
}

static int set_insecure_tcp(const char *v, char *err, size_t n)
{
    (void)v, (void)err, (void)n;
    sup_cfg.insecure_tcp = true;
    return 0;
}

/* --socket-group NAME (or a numeric gid). */
static int set_socket_group(const char *v, char *err, size_t n)
{
    struct group *g = getgrnam(v);
    char *end;
    long gid = g ? (long)g->gr_gid : strtol(v, &end, 10);
    if (!g && (!*v || *end || gid < 0)) {
        snprintf(err, n, "no group named '%s'", v);
        return -1;
    }
    sup_cfg.socket_gid = gid;
    return 0;
}

static int set_verbose(const char *v, char *err, size_t n)
{
    (void)v, (void)err, (void)n;
    sup_cfg.verbose = true;
    return 0;
}

static int set_config(const char *v, char *err, size_t n);

static int set_no_cgroup_tuning(const char *v, char *err, size_t n)
{
    (void)v, (void)err, (void)n;
    sup_cfg.no_cgroup_tuning = true;
    return 0;
}

static int set_no_page_merging(const char *v, char *err, size_t n)
{
    (void)v, (void)err, (void)n;
    sup_cfg.no_page_merging = true;
    return 0;
}

/* --worker-uids FIRST:COUNT (sup_ident.c hands them out). */
static int set_worker_uids(const char *v, char *err, size_t n)
{
    char *end;
    errno = 0;
    unsigned long first = strtoul(v, &end, 10);
    unsigned long count = *end == ':' ? strtoul(end + 1, &end, 10) : 0;
    if (errno || *end || first < 1000 || count < 2 || count > (1u << 24) ||
        first + count > 0xfffffffeul) {
        snprintf(err, n,
                 "'%s' must be FIRST:COUNT (FIRST >= 1000, 2 <= COUNT <= 16777216, all below "
                 "2^32 - 1)",
                 v);
        return -1;
    }
    sup_cfg.worker_uid_first = (unsigned)first;
    sup_cfg.worker_uid_count = (unsigned)count;
    return 0;
}

/* --uid-registry DIR (sup_uidreg.c): an absolute path. */
static int set_uid_registry(const char *v, char *err, size_t n)
{
    if (v[0] != '/' || strlen(v) > 3000) {
        snprintf(err, n, "'%s' must be an absolute directory path", v);
        return -1;
    }
    sup_cfg.uid_registry = mem_strdup(v);
    return 0;
}

static const option_def options[] = {
    {"listen", 'l', ARG_STR, "ENDPOINT",
     "bind a ZeroMQ endpoint (repeatable); default ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock,\n"
     "or ipc:///run/ctxd/ctxd.sock without XDG_RUNTIME_DIR (directory mode 0700).\n"
     "tcp:// endpoints require CurveZMQ keys (see --state-dir)",
     set_listen},
    {"config", 'c', ARG_STR, "FILE",
     "read options from FILE: `key = value` lines, # comments; a key is a long\n"
     "option name or the name hello reports (max_queue, default_timeout, ...)",
     set_config},
    {"worker", 0, ARG_STR, "PATH",
     "the worker executable (default: ctxd-worker next to ctxd; also $CTXD_WORKER)", set_worker},
    {"max-contexts", 0, ARG_COUNT, "N", "contexts alive at once (default 1024)", set_max_contexts},
    {"spare-workers", 0, ARG_COUNT, "N",
     "workers kept forked, warmed up and ready for new contexts of the unsafe tier (no env; "
     "packages not offered): ctx.create takes one instead of waiting for a fork (default 0, "
     "at most 64)",
     set_spare_workers},
    {"max-queue", 0, ARG_COUNT, "N", "runs waiting per context (default 64)", set_max_queue},
    {"max-request", 0, ARG_BYTES, "SIZE", "largest client message (default 16M)", set_max_request},
    {"max-code", 0, ARG_BYTES, "SIZE", "largest `code` of an execute (default 8M)", set_max_code},
    {"max-output", 0, ARG_BYTES, "SIZE",
     "output per run (stdout + stderr) before it is truncated, visibly (default 0 = no cap)",
     set_max_output},
    {"max-held", 0, ARG_BYTES, "SIZE",
     "messages held for clients that do not read, in total (default 256M)", set_max_held},
    {"max-client-held", 0, ARG_BYTES, "SIZE",
     "messages held for one client that does not read (default 16M); past it its requests "
     "are refused and its runs wait",
     set_max_client_held},
    {"max-chan-held", 0, ARG_BYTES, "SIZE",
     "frames being received from workers, in total (default 64M, at least 20M + 4): a frame "
     "larger than one read waits for room, its worker blocked in its write",
     set_max_chan_held},
    {"max-snapshot-bytes", 0, ARG_BYTES, "SIZE",
     "largest snapshot of a context (default 8G); a larger one is refused with its size",
     set_max_snapshot_bytes},
    {"max-snapshots", 0, ARG_COUNT, "N", "snapshots kept per context (default 16)",
     set_max_snapshots},
    {"max-snapshot-total", 0, ARG_BYTES, "SIZE",
     "bytes of all snapshots in the state directory (default 64G)", set_max_snapshot_total},
    {"timeout", 0, ARG_SECONDS, "SECONDS", "default run timeout (default 600; 0 = none)",
     set_timeout},
    {"kill-grace", 0, ARG_SECONDS, "SECONDS",
     "time a timed-out run gets to stop before its worker is killed, and an ending context's "
     "atexit handlers get to run (default 2)",
     set_grace},
    {"idle-ttl", 0, ARG_SECONDS, "SECONDS",
     "delete contexts (not `default`) idle this long (default 0 = never)", set_idle_ttl},
    {"on-disconnect", 0, ARG_STR, "finish|interrupt",
     "what happens to a run whose client vanished (default finish)", set_on_disconnect},
    {"state-dir", 0, ARG_STR, "DIR",
     "keys for tcp:// (server.key, server.pub, authorized_keys), contexts' private\n"
     "directories (contexts/) and the context table; default\n"
     "$XDG_STATE_HOME/ctxd, ~/.local/state/ctxd, or /var/lib/ctxd for root",
     set_state_dir},
    {"authorized-keys", 0, ARG_STR, "FILE",
     "client public keys (Z85, one per line) allowed on tcp:// (default STATE_DIR/authorized_keys)",
     set_authorized_keys},
    {"insecure-tcp", 0, ARG_NONE, NULL,
     "allow tcp:// without CurveZMQ (anyone who reaches the port runs code!)", set_insecure_tcp},
    {"socket-group", 0, ARG_STR, "GROUP",
     "members of GROUP may connect to the ipc:// sockets: each socket file mode\n"
     "0660 and its directory 0750, both of group GROUP (default: the owner only)",
     set_socket_group},
    {"log", 0, ARG_STR, "FILE", "request log (one logfmt line per request; default stderr)",
     set_log},
    {"preload", 0, ARG_STR, "MODULES",
     "modules (comma-separated, repeatable) the zygote imports once, so new contexts\n"
     "start with them loaded; also $CTXD_PRELOAD. One that is not installed is skipped\n"
     "(hello reports it)",
     set_preload},
    {"wheelhouse", 0, ARG_STR, "DIR",
     "offer packages (pip.install, ctx.create packages) from this directory of wheels\n"
     "(pip --no-index --find-links DIR); default none: packages are not offered",
     set_wheelhouse},
    {"package-index", 0, ARG_STR, "URL",
     "offer packages from this index (pip --index-url URL; with --wheelhouse, both)",
     set_package_index},
    {"package-cache", 0, ARG_STR, "DIR",
     "where installs are cached, per source, and contexts' package directories live\n"
     "(default STATE_DIR/packages)",
     set_package_cache},
    {"pip-python", 0, ARG_STR, "PATH",
     "the Python that runs pip; must be the workers' CPython (default its\n"
     "/usr/bin/python3.X)",
     set_pip_python},
    {"worker-uids", 0, ARG_STR, "FIRST:COUNT",
     "under a root daemon, every local and sandbox context runs as a uid/gid of its own\n"
     "from FIRST+1 .. FIRST+COUNT-1 (FIRST: the workers' shared group). The range is\n"
     "this daemon's alone on the host (--uid-registry): ctxd refuses to start on one\n"
     "another daemon holds, or that a stopped daemon's state directory still owns.\n"
     "Default: the range saved in the state directory, else the first free block of\n"
     "65536 from 524288 up (524288:65536, 589824:65536, ...). Directories given as cwd\n"
     "or write roots must be writable by it (e.g. group FIRST, g+rwx)",
     set_worker_uids},
    {"uid-registry", 0, ARG_STR, "DIR",
     "where a root daemon claims its --worker-uids range host-wide: one file per range,\n"
     "locked while its daemon runs, naming the state directory that owns it "
     "(default\n" SUP_UID_REGISTRY "). Every daemon of the host must use the same one",
     set_uid_registry},
    {"no-cgroup-tuning", 0, ARG_NONE, NULL,
     "do not remount the cgroup v2 tree with favordynmods (a root daemon does, so\n"
     "putting each new worker into its cgroup costs microseconds, not a 5-10 ms RCU wait)",
     set_no_cgroup_tuning},
    {"no-page-merging", 0, ARG_NONE, NULL,
     "do not mark unsafe-tier workers (the daemon's uid, unconfined) mergeable: by default\n"
     "the kernel's same-page merging (KSM), while ksmd runs, shares the pages identical\n"
     "across idle workers (/sys/kernel/mm/ksm/run; confined tiers are never merged)",
     set_no_page_merging},
    {"verbose", 'v', ARG_NONE, NULL, "also log worker events", set_verbose},
};
#define NOPTIONS (sizeof options / sizeof options[0])

static const option_def *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

/* A config file key: the option's long name, or the name `hello` reports
 * for it (max_queue, default_timeout, max_request_bytes, ...): '_' is read
 * as '-', and hello's names that differ from the option's are aliases. */
static const option_def *find_config_key(const char *key)
{
    static const struct {
        const char *hello, *option;
    } aliases[] = {{"default-timeout", "timeout"},
                   {"max-request-bytes", "max-request"},
                   {"max-code-bytes", "max-code"}};
    char name[64];
    size_t n = strlen(key);
    if (n >= sizeof name)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        name[i] = key[i] == '_' ? '-' : key[i];
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].hello) == 0)
            return find_long(aliases[i].option, strlen(aliases[i].option));
    return find_long(name, n);
}

static const option_def *find_short(char letter)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].letter && options[i].letter == letter)
            return &options[i];
    return NULL;
}

/* Applies one option; prints the problem and returns -1 on a bad value. */
static int apply(const option_def *o, const char *value, const char *where)
{
    char err[256] = "";
    if (o->set(value, err, sizeof err) < 0) {
        fprintf(stderr, "ctxd: %s--%s: %s\n", where, o->name, err);
        return -1;
    }
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int config_depth;

static int set_config(const char *path, char *err, size_t n)
{
    if (config_depth > 4) {
        snprintf(err, n, "config files nest too deeply");
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    config_depth++;
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        char *key = trim(eq ? (*eq = '\0', s) : s);
        char *value = eq ? trim(eq + 1) : (char *)"";
        const option_def *o = find_config_key(key);
        char where[300];
        snprintf(where, sizeof where, "%s:%d: ", path, lineno);
        if (!o) {
            fprintf(stderr, "ctxd: %sunknown option '%s'\n", where, key);
            rc = -1;
        } else if (o->kind != ARG_NONE && !eq) {
            fprintf(stderr, "ctxd: %s'%s' needs '= value'\n", where, key);
            rc = -1;
        } else {
            rc = apply(o, value, where);
        }
    }
    config_depth--;
    fclose(f);
    if (rc < 0)
        snprintf(err, n, "errors in %s", path);
    return rc;
}

/* Prints the command line's options and what each does to out. */
static void usage(FILE *out)
{
    fputs("usage: ctxd [options]\n\n"
          "The ctxd supervisor: keeps named Python contexts alive, one worker process\n"
          "each, and serves clients over ZeroMQ (see proto/PROTOCOL.md).\n\n",
          out);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const option_def *o = &options[i];
        char head[64];
        snprintf(head, sizeof head, "%c%c%s--%s%s%s", o->letter ? '-' : ' ',
                 o->letter ? o->letter : ' ', o->letter ? ", " : "  ", o->name,
                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %s\n", head);
        const char *p = o->help;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            fprintf(out, "        %.*s\n", (int)len, p);
            p += len + (nl ? 1 : 0);
        }
    }
    fputs("  -h, --help\n        this text\n", out);
}

uint64_t sup_config_endpoints_hash(void)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sup_cfg.nendpoints; i++) {
        for (const char *p = sup_cfg.endpoints[i]; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
    }
    return h;
}

int sup_config_parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const option_def *o = NULL;
        const char *value = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            o = find_long(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
            value = eq ? eq + 1 : NULL;
        } else if (a[0] == '-' && a[1] && !a[2]) {
            o = find_short(a[1]);
        }
        if (!o) {
            fprintf(stderr, "ctxd: unknown argument '%s' (see ctxd --help)\n", a);
            return -1;
        }
        if (o->kind == ARG_NONE) {
            if (value) {
                fprintf(stderr, "ctxd: --%s takes no value\n", o->name);
                return -1;
            }
        } else if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctxd: --%s needs a value\n", o->name);
                return -1;
            }
            value = argv[++i];
        }
        if (apply(o, value ? value : "", "") < 0)
            return -1;
    }
    return 0;
}
