/* sup_main: ctxd's command line, the default runtime directory and start-up. */
#include "sup.h"

#include "mem.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sup_config sup_cfg = {
    .max_contexts = 1024,
    .max_queue = 64,
    .max_code_bytes = 8u * 1024 * 1024,
    .default_timeout = 600,
    .kill_grace = 2,
};

char sup_instance[33];

/* 16 random bytes in hex, different for every daemon start. */
static void make_instance_id(void)
{
    unsigned char r[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, 1, sizeof r, f) != sizeof r)
        fatal("cannot read /dev/urandom");
    fclose(f);
    for (size_t i = 0; i < sizeof r; i++)
        sprintf(sup_instance + 2 * i, "%02x", r[i]);
}

static const char usage[] =
    "usage: ctxd [options]\n"
    "\n"
    "The ctxd supervisor: keeps named Python contexts alive, one worker process\n"
    "each, and serves clients over ZeroMQ (see proto/PROTOCOL.md).\n"
    "\n"
    "  -l, --listen ENDPOINT   bind a ZeroMQ endpoint (repeatable); default\n"
    "                          ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock, or\n"
    "                          ipc:///run/ctxd/ctxd.sock without XDG_RUNTIME_DIR\n"
    "      --worker PATH       the worker executable (default: ctxd-worker next to\n"
    "                          ctxd; also $CTXD_WORKER)\n"
    "      --max-contexts N    contexts alive at once (default 1024)\n"
    "      --max-queue N       runs waiting per context (default 64)\n"
    "      --timeout SECONDS   default run timeout (default 600; 0 = none)\n"
    "      --kill-grace SECONDS  time a timed-out run gets to stop before its\n"
    "                          worker is killed (default 2)\n"
    "  -v, --verbose           log requests and worker events to stderr\n"
    "  -h, --help              this text\n";

/* The default endpoint's directory, made 0700 so only this user connects. */
static char *default_endpoint(void)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ctxd", xdg && *xdg ? xdg : "/run");
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "ctxd: cannot create %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    struct stat st;
    if (stat(dir, &st) < 0 || st.st_uid != geteuid() || chmod(dir, 0700) < 0) {
        fprintf(stderr, "ctxd: %s must be a directory owned by this user\n", dir);
        exit(1);
    }
    char *ep = mem_alloc(strlen(dir) + 32);
    sprintf(ep, "ipc://%s/ctxd.sock", dir);
    return ep;
}

static const char *find_worker(void)
{
    const char *env = getenv("CTXD_WORKER");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        fatal("readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    char *path = mem_alloc(strlen(self) + 16);
    sprintf(path, "%s/ctxd-worker", dirname(self));
    return path;
}

static double parse_seconds(const char *s, const char *opt)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0) || v > 1e9) {
        fprintf(stderr, "ctxd: %s takes a number of seconds, not '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

static size_t parse_count(const char *s, const char *opt)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v == 0 || v > 1000000) {
        fprintf(stderr, "ctxd: %s takes a positive count, not '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    enum { OPT_WORKER = 256, OPT_MAXCTX, OPT_MAXQ, OPT_TIMEOUT, OPT_GRACE };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"worker", required_argument, NULL, OPT_WORKER},
        {"max-contexts", required_argument, NULL, OPT_MAXCTX},
        {"max-queue", required_argument, NULL, OPT_MAXQ},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"kill-grace", required_argument, NULL, OPT_GRACE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char **endpoints = mem_calloc((size_t)argc + 1, sizeof *endpoints);
    size_t nendpoints = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "l:vh", opts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            endpoints[nendpoints++] = optarg;
            break;
        case OPT_WORKER:
            sup_cfg.worker_path = optarg;
            break;
        case OPT_MAXCTX:
            sup_cfg.max_contexts = parse_count(optarg, "--max-contexts");
            break;
        case OPT_MAXQ:
            sup_cfg.max_queue = parse_count(optarg, "--max-queue");
            break;
        case OPT_TIMEOUT:
            sup_cfg.default_timeout = parse_seconds(optarg, "--timeout");
            break;
        case OPT_GRACE:
            sup_cfg.kill_grace = parse_seconds(optarg, "--kill-grace");
            break;
        case 'v':
            sup_cfg.verbose = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ctxd: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    if (!sup_cfg.worker_path)
        sup_cfg.worker_path = find_worker();
    if (access(sup_cfg.worker_path, X_OK) < 0) {
        fprintf(stderr, "ctxd: worker executable %s: %s\n", sup_cfg.worker_path, strerror(errno));
        return 1;
    }
    if (nendpoints == 0)
        endpoints[nendpoints++] = default_endpoint();
    make_instance_id();
    if (sup_loop_open(endpoints, nendpoints) < 0)
        return 1;
    for (size_t i = 0; i < nendpoints; i++)
        fprintf(stderr, "ctxd: listening on %s\n", endpoints[i]);
    sup_loop_run();
    return 0;
}
