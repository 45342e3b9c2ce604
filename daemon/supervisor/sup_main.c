/* sup_main: ctxd's command line, the default runtime directory and start-up. */
#include "sup_auth.h"
#include "sup_cgroup.h"
#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_life.h"
#include "sup_wexit.h"
#include "sup_ident.h"
#include "sup_loop.h"
#include "sup_notify.h"
#include "sup_persist.h"
#include "sup_pkgs.h"
#include "sup_privdir.h"
#include "sup_reaper.h"
#include "sup_snap.h"
#include "sup_trash.h"
#include "sup_zygote.h"

#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The worker executable: $CTXD_WORKER, else next to ctxd (the build tree),
 * else ../libexec/ctxd/ relative to ctxd (an installed tree). */
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
    const char *dir = dirname(self);
    static const char *const candidates[] = {"%s/ctxd-worker", "%s/../libexec/ctxd/ctxd-worker"};
    char *path = mem_alloc(strlen(dir) + 64);
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        sprintf(path, candidates[i], dir);
        if (access(path, X_OK) == 0)
            break;
    }
    return path;
}

/* The zygote's answers go to the contexts (sup_wexit.c), wired here so the
 * zygote needs no header above its layer. */
static const sup_zygote_answers zygote_answers = {sup_wexit_spawned, sup_wexit_spawn_failed};

/* Unsafe-tier workers are marked mergeable (--no-page-merging), but only
 * a running ksmd merges them: an operator who sees the memory per context
 * is told why it is not smaller, once, at start. */
static void say_page_merging(void)
{
    if (sup_cfg.no_page_merging)
        return;
    char run = '0';
    int fd = open("/sys/kernel/mm/ksm/run", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &run, 1) != 1)
            run = '0';
        close(fd);
    }
    if (run != '1')
        fprintf(stderr,
                "ctxd: page merging: ksmd is %s, so idle workers' identical pages "
                "stay unshared (echo 1 > /sys/kernel/mm/ksm/run; README: Operating it)\n",
                fd < 0 ? "not in this kernel" : "not running");
}

int main(int argc, char **argv)
{
    if (sup_config_parse(argc, argv) < 0)
        return 2;
    if (!sup_cfg.worker_path)
        sup_cfg.worker_path = find_worker();
    if (access(sup_cfg.worker_path, X_OK) < 0) {
        fprintf(stderr, "ctxd: worker executable %s: %s\n", sup_cfg.worker_path, strerror(errno));
        return 1;
    }
    if (sup_cfg.nendpoints == 0)
        sup_cfg.endpoints[sup_cfg.nendpoints++] = default_endpoint();
    make_instance_id();
    const char *state = sup_auth_state_dir();
    if (state) { /* the reaper's: the disk budgets' mounts of this daemon */
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/contexts/%s", state, sup_instance) < (int)sizeof dir)
            sup_reaper_mounts_under(dir);
    }
    sup_cgroup_init(); /* cgroups a killed daemon left behind; the reaper */
    if (state)         /* what killed daemons left behind (into the trash) */
        sup_privdir_sweep(state);
    sup_trash_start();       /* and what is still in the trash */
    if (sup_pkgs_init() < 0) /* after the instance id: it names the sites */
        return 1;
    /* Every worker draws with matplotlib's Agg backend (no display; the
     * worker sends figures as image/png, wrk_display.c): set in the
     * environment the workers inherit, before their Python starts. A
     * context's own env may override it. */
    setenv("MPLBACKEND", "Agg", 1);
    if (sup_loop_open(sup_cfg.endpoints, sup_cfg.nendpoints) < 0)
        return 1;
    /* The worker uid range, once the endpoints are ours (a daemon that
     * cannot listen claims none); before any worker. */
    sup_ident_init();
    sup_zygote_init(&zygote_answers); /* after sup_loop_open: its SIGCHLD goes to the signalfd */
    sup_snap_init();
    sup_life_init();       /* before any context is made */
    sup_persist_restore(); /* the previous daemon's contexts, state lost */
    sup_snap_resume_all(); /* ... unless an autosnapshot kept it */
    say_page_merging();
    for (size_t i = 0; i < sup_cfg.nendpoints; i++)
        fprintf(stderr, "ctxd: listening on %s\n", sup_cfg.endpoints[i]);
    (void)sup_notify("READY=1"); /* systemd Type=notify: the sockets answer now */
    sup_loop_run();
    return 0;
}
