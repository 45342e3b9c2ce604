/* sup_pkgs: packages for contexts (PROTOCOL.md section 5, pip.install and
 * ctx.create `packages`).
 *
 * pip runs as a child of the supervisor (never in a worker: a confined
 * worker may not start processes nor write outside its roots), one process
 * per requirement, at most PIP_PARALLEL at a time, its output in an
 * unlinked file; the poll loop learns of its end through SIGCHLD, so the
 * supervisor never waits for pip. Each requirement is installed once per
 * package source into
 *
 *     CACHE/<source key>/<requirement>/      (pip install --target)
 *
 * through a temporary directory renamed into place when pip succeeds, so a
 * directory there is always a complete install: a second request for the
 * same requirement finds it and runs no pip. A context sees packages
 * through its own site directory, CACHE/sites/<instance>/<n>, which is on
 * its worker's sys.path from the start (CTXD_SITE, wrk_site.c) and holds
 * symbolic links to the top-level entries of the cached trees: another
 * context's site lacks them, so it cannot import them. */
#include "sup_pkgs.h"

#include "sup_child.h"
#include "sup_config.h"
#include "sup_log.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SUP_PIP_PYTHON
#define SUP_PIP_PYTHON "/usr/bin/python3"
#endif

#define PIP_PARALLEL 2       /* pip processes at once (each is CPU-bound) */
#define PIP_TIMEOUT 600.0    /* seconds before a pip run is killed */
#define PIP_MESSAGE_MAX 3000 /* bytes of pip's output in an error */
#define PIP_LOG_TAIL 16384   /* bytes of pip's output read back */

extern char **environ;

#define DIR_MAX 1024 /* the cache directory's path, at most */
#define SUB_MAX (DIR_MAX + 128)
#define TREE_MAX (SUB_MAX + SUP_PKGS_REQ_MAX + 8)
static char cache_dir[DIR_MAX];  /* CACHE */
static char source_dir[SUB_MAX]; /* CACHE/<source key> */
static char sites_dir[SUB_MAX];  /* CACHE/sites/<instance> */
static bool enabled;
static unsigned site_seq, tmp_seq;

/* One requirement being installed, and the requests waiting for it. */
typedef struct want want;
typedef struct job {
    struct job *next;
    char *req;
    pid_t pid; /* 0 while queued */
    int log_fd;
    char *tmp; /* pip's --target */
    double deadline;
    bool timed_out;
    want **wants;
    size_t nwants;
} job;

/* One request's list of requirements. */
struct want {
    sup_pkgs_cb cb;
    void *arg;
    char **reqs;
    size_t n;
    bool *cached;
    size_t left; /* jobs not finished */
    char *error;
};

static job *jobs; /* FIFO: running ones and queued ones */
static size_t njobs;

bool sup_pkgs_enabled(void)
{
    return enabled;
}

const char *sup_pkgs_source_dir(void)
{
    return enabled ? source_dir : NULL;
}

/* mkdir that accepts an existing directory. 0711 (or 0755 where
 * confined workers, of uids of their own, read what is in it): nobody
 * lists the sites of others, every worker reads the packages it links. */
static int make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0777) != mode)
        (void)chmod(path, mode);
    return 0;
}

/* FNV-1a 64: names the source's cache directory (not a security hash:
 * the directory also holds nothing but what that source offered). */
static unsigned long long source_key(void)
{
    const char *parts[] = {sup_cfg.wheelhouse ? sup_cfg.wheelhouse : "",
                           sup_cfg.package_index ? sup_cfg.package_index : ""};
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < 2; i++)
        for (const char *p = parts[i];; p++) {
            h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
            if (!*p)
                break;
        }
    return h;
}

int sup_pkgs_init(void)
{
    if (!sup_cfg.wheelhouse && !sup_cfg.package_index)
        return 0;
    if (!sup_cfg.pip_python)
        sup_cfg.pip_python = SUP_PIP_PYTHON;
    struct stat st;
    if (sup_cfg.wheelhouse && (sup_cfg.wheelhouse[0] != '/' || stat(sup_cfg.wheelhouse, &st) < 0 ||
                               !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "ctxd: --wheelhouse %s: must be an absolute path of a directory\n",
                sup_cfg.wheelhouse);
        return -1;
    }
    if (access(sup_cfg.pip_python, X_OK) < 0) {
        fprintf(stderr, "ctxd: --pip-python %s: %s\n", sup_cfg.pip_python, strerror(errno));
        return -1;
    }
    if (sup_cfg.package_cache) {
        if (strlen(sup_cfg.package_cache) >= DIR_MAX - 1) {
            fprintf(stderr, "ctxd: --package-cache: a path of at most %d bytes\n", DIR_MAX - 2);
            return -1;
        }
        snprintf(cache_dir, sizeof cache_dir, "%s", sup_cfg.package_cache);
    } else {
        const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        char state[DIR_MAX - 16];
        if (sup_cfg.state_dir)
            snprintf(state, sizeof state, "%s", sup_cfg.state_dir);
        else if (xdg && *xdg)
            snprintf(state, sizeof state, "%s/ctxd", xdg);
        else if (home && *home && geteuid() != 0)
            snprintf(state, sizeof state, "%s/.local/state/ctxd", home);
        else
            snprintf(state, sizeof state, "/var/lib/ctxd");
        if (make_dir(state, 0711) < 0) {
            fprintf(stderr, "ctxd: cannot create %s: %s\n", state, strerror(errno));
            return -1;
        }
        snprintf(cache_dir, sizeof cache_dir, "%s/packages", state);
    }
    snprintf(source_dir, sizeof source_dir, "%s/%016llx", cache_dir, source_key());
    char sites[DIR_MAX + 16];
    snprintf(sites, sizeof sites, "%s/sites", cache_dir);
    snprintf(sites_dir, sizeof sites_dir, "%s/%s", sites, sup_instance);
    const char *dirs[] = {cache_dir, source_dir, sites, sites_dir};
    const mode_t modes[] = {0711, 0755, 0711, 0711};
    for (size_t i = 0; i < 4; i++)
        if (cache_dir[0] != '/' || make_dir(dirs[i], modes[i]) < 0) {
            fprintf(stderr, "ctxd: package cache %s: %s\n", dirs[i],
                    cache_dir[0] != '/' ? "must be an absolute path" : strerror(errno));
            return -1;
        }
    enabled = true;
    return 0;
}

/* ---- requirements ------------------------------------------------------ */

static bool is_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* A requirement is a name with optional extras and version specifiers
 * ("name", "name==1.0", "name[extra]>=1,<2"): pip sees nothing else, so no
 * option ("--index-url=..."), path, URL or environment marker gets through.
 * Returns the normalised form (name lowercased, runs of -_. made one '-';
 * the rest lowercased), or NULL. */
static char *normalise(const proto_val *v)
{
    if (v->kind != PROTO_STR || v->n == 0 || v->n > SUP_PKGS_REQ_MAX || !is_alnum(v->as.s[0]))
        return NULL;
    char *out = mem_alloc(v->n + 1);
    size_t k = 0;
    bool in_name = true;
    for (uint32_t i = 0; i < v->n; i++) {
        char ch = v->as.s[i];
        bool sep = ch == '-' || ch == '_' || ch == '.';
        if (in_name && !is_alnum(ch) && !sep)
            in_name = false;
        if (!is_alnum(ch) && !sep && !strchr("[],<>=!~*", ch)) {
            free(out);
            return NULL;
        }
        if (in_name && sep) {
            if (out[k - 1] != '-')
                out[k++] = '-';
            continue;
        }
        out[k++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    out[k] = '\0';
    return out;
}

void sup_pkgs_free_reqs(char **reqs, size_t n)
{
    for (size_t i = 0; reqs && i < n; i++)
        free(reqs[i]);
    free(reqs);
}

int sup_pkgs_parse(const proto_val *list, const char *field, char ***reqs, size_t *n,
                   proto_error *err)
{
    *reqs = NULL;
    *n = 0;
    if (list->kind != PROTO_ARRAY || list->n > SUP_PKGS_MAX) {
        proto_error_set(err, "bad_field", "field '%s' must be an array of at most %d strings",
                        field, SUP_PKGS_MAX);
        return -1;
    }
    char **out = mem_calloc(list->n + 1, sizeof *out);
    size_t k = 0;
    for (uint32_t i = 0; i < list->n; i++) {
        char *r = normalise(&list->as.items[i]);
        if (!r) {
            proto_error_set(err, "bad_field",
                            "field '%s': item %u must be a requirement of at most %d bytes "
                            "such as name, name==1.0 or name[extra]>=1 (letters, digits and "
                            "._-[],<>=!~*; no options, paths or URLs)",
                            field, (unsigned)i, SUP_PKGS_REQ_MAX);
            sup_pkgs_free_reqs(out, k);
            return -1;
        }
        bool dup = false;
        for (size_t j = 0; j < k && !dup; j++)
            dup = strcmp(out[j], r) == 0;
        if (dup)
            free(r);
        else
            out[k++] = r;
    }
    *reqs = out;
    *n = k;
    return 0;
}

/* ---- removing trees ---------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)f;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Removes a directory tree without following symbolic links (a failed
 * install's temporary target, a context's site of links). */
static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- sites ------------------------------------------------------------- */

sup_site *sup_pkgs_site_new(void)
{
    if (!enabled)
        return NULL;
    char path[SUB_MAX + 16];
    snprintf(path, sizeof path, "%s/%u", sites_dir, ++site_seq);
    if ((make_dir(sites_dir, 0711) < 0) || mkdir(path, 0755) < 0) {
        sup_stats_event("site-failed path=%s error=\"%s\"", path, strerror(errno));
        return NULL;
    }
    sup_site *s = mem_calloc(1, sizeof *s);
    s->path = mem_strdup(path);
    s->refs = 1;
    return s;
}

sup_site *sup_pkgs_site_ref(sup_site *s)
{
    if (s)
        s->refs++;
    return s;
}

void sup_pkgs_site_unref(sup_site *s)
{
    if (!s || --s->refs > 0)
        return;
    remove_tree(s->path);
    rmdir(sites_dir); /* the last site of this daemon: leave no empty dir */
    free(s->path);
    free(s);
}

/* Python notices a changed directory by its mtime (importlib's FileFinder
 * cache). Links made within the same clock tick as the directory's last
 * change would go unseen by a worker that listed it in between, so the
 * mtime is moved on by at least 10 ms. */
static void bump_mtime(const char *dir, const struct timespec *before)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return;
    long long b = (long long)before->tv_sec * 1000000000LL + before->tv_nsec;
    long long a = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (a - b >= 10000000LL)
        return;
    long long t = b + 10000000LL;
    struct timespec ts[2] = {{0, UTIME_OMIT}, {t / 1000000000LL, t % 1000000000LL}};
    utimensat(AT_FDCWD, dir, ts, 0);
}

int sup_pkgs_link(sup_site *site, char **reqs, size_t n, proto_error *err)
{
    if (!site) {
        proto_error_set(err, "install",
                        "this context has no package directory (it was "
                        "created before packages were available)");
        return -1;
    }
    struct stat st;
    if (stat(site->path, &st) < 0) {
        proto_error_set(err, "io", "package directory %s: %s", site->path, strerror(errno));
        return -1;
    }
    int sfd = open(site->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sfd < 0) {
        proto_error_set(err, "io", "package directory %s: %s", site->path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char tree[TREE_MAX], target[TREE_MAX + 260];
        snprintf(tree, sizeof tree, "%s/%s", source_dir, reqs[i]);
        DIR *d = opendir(tree);
        if (!d) {
            proto_error_set(err, "io", "installed tree %s: %s", tree, strerror(errno));
            rc = -1;
            break;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            /* Scripts (bin/) and dot files are not importable. */
            if (e->d_name[0] == '.' || !strcmp(e->d_name, "bin") ||
                !strcmp(e->d_name, "__pycache__"))
                continue;
            snprintf(target, sizeof target, "%s/%s", tree, e->d_name);
            /* Two trees may hold the same dependency: the first one wins. */
            if (symlinkat(target, sfd, e->d_name) < 0 && errno != EEXIST) {
                proto_error_set(err, "io", "link %s: %s", e->d_name, strerror(errno));
                rc = -1;
                break;
            }
        }
        closedir(d);
    }
    close(sfd);
    bump_mtime(site->path, &st.st_mtim);
    return rc;
}

void sup_pkgs_put_result(proto_buf *b, const sup_pkgs_result *res)
{
    proto_put_str(b, "packages");
    proto_put_array(b, (uint32_t)res->n);
    for (size_t i = 0; i < res->n; i++) {
        proto_put_map(b, 2);
        proto_put_str(b, "name");
        proto_put_str(b, res->reqs[i]);
        proto_put_str(b, "cached");
        proto_put_bool(b, res->cached[i]);
    }
}

/* ---- wants ------------------------------------------------------------- */

static void want_finish(want *w)
{
    sup_pkgs_result res = {
        .error = w->error, .code = "install", .reqs = w->reqs, .n = w->n, .cached = w->cached};
    w->cb(w->arg, &res);
    sup_pkgs_free_reqs(w->reqs, w->n);
    free(w->cached);
    free(w->error);
    free(w);
}

/* One of w's jobs ended (error NULL on success). */
static void want_job_done(want *w, const char *error)
{
    if (error && !w->error)
        w->error = mem_strdup(error);
    if (--w->left == 0)
        want_finish(w);
}

/* ---- pip runs ---------------------------------------------------------- */

static void start_jobs(void);

/* Starts pip for j: `python -I -m pip install ... --target TMP -- REQ`,
 * stdout and stderr into an unlinked file, in its own process group, dying
 * with the supervisor. Returns -1 with a message in *why. */
static int job_spawn(job *j, char *why, size_t whylen)
{
    char tmp[SUB_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%d-%u", source_dir, (int)getpid(), ++tmp_seq);
    j->log_fd = open(source_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (j->log_fd < 0) {
        char name[SUB_MAX + 16];
        snprintf(name, sizeof name, "%s/.log-XXXXXX", source_dir);
        j->log_fd = mkostemp(name, O_CLOEXEC);
        if (j->log_fd >= 0)
            unlink(name);
    }
    if (j->log_fd < 0) {
        snprintf(why, whylen, "cannot make a log file in %s: %s", source_dir, strerror(errno));
        return -1;
    }
    j->tmp = mem_strdup(tmp);
    const char *argv[32];
    size_t k = 0;
    const char *fixed[] = {sup_cfg.pip_python, "-I", "-m", "pip", "install", "--isolated",
                           "--no-input", "--disable-pip-version-check", "--no-cache-dir",
                           "--no-color", "--progress-bar", "off", "--root-user-action=ignore",
                           /* wheels only: building a source distribution
                            * would run its code outside any sandbox */
                           "--only-binary", ":all:"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        argv[k++] = fixed[i];
    if (sup_cfg.package_index) {
        argv[k++] = "--index-url";
        argv[k++] = sup_cfg.package_index;
    } else {
        argv[k++] = "--no-index";
    }
    if (sup_cfg.wheelhouse) {
        argv[k++] = "--find-links";
        argv[k++] = sup_cfg.wheelhouse;
    }
    argv[k++] = "--target";
    argv[k++] = j->tmp;
    argv[k++] = "--";
    argv[k++] = j->req;
    argv[k] = NULL;
    pid_t pid = sup_child_fork();
    if (pid == 0) {
        sup_child_limits();
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(j->log_fd, 1) < 0 ||
            dup2(j->log_fd, 2) < 0 || chdir(source_dir) < 0)
            _exit(127);
        close_range(3, ~0u, 0);
        sup_child_signals();
        execve(sup_cfg.pip_python, (char *const *)argv, environ);
        dprintf(2, "cannot execute %s: %s\n", sup_cfg.pip_python, strerror(errno));
        _exit(127);
    }
    if (pid < 0) {
        snprintf(why, whylen, "fork: %s", strerror(errno));
        return -1;
    }
    j->pid = pid;
    j->deadline = sup_now() + PIP_TIMEOUT;
    sup_timer_moved();
    sup_stats.pip_runs++;
    sup_stats_event("pip-start requirement=%s pid=%d", j->req, (int)pid);
    return 0;
}

/* pip's complaint for an error message: the lines it marked "ERROR:",
 * else the end of its output; newlines become " | ". */
static void pip_message(int fd, char *out, size_t outlen)
{
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > PIP_LOG_TAIL ? size - PIP_LOG_TAIL : 0;
    char *buf = mem_alloc(PIP_LOG_TAIL + 1);
    ssize_t n = pread(fd, buf, PIP_LOG_TAIL, from);
    buf[n > 0 ? n : 0] = '\0';
    size_t k = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 2 && k == 0; pass++) {
        char *save = NULL;
        char *text = buf;
        if (pass == 1 && strlen(buf) > outlen / 2) /* the end only */
            text = buf + strlen(buf) - outlen / 2;
        char *copy = mem_strdup(text);
        for (char *line = strtok_r(copy, "\n", &save); line && k + 1 < outlen;
             line = strtok_r(NULL, "\n", &save)) {
            if (pass == 0 && strncmp(line, "ERROR:", 6) != 0)
                continue;
            int w = snprintf(out + k, outlen - k, "%s%s", k ? " | " : "", line);
            k = w < 0 ? k : k + (size_t)w < outlen ? k + (size_t)w : outlen - 1;
        }
        free(copy);
    }
    free(buf);
    if (k == 0)
        snprintf(out, outlen, "(pip printed nothing)");
}

/* Takes j out of the list and frees it. */
static void job_free(job *j)
{
    job **pos = &jobs;
    while (*pos && *pos != j)
        pos = &(*pos)->next;
    if (*pos)
        *pos = j->next;
    njobs--;
    if (j->log_fd >= 0)
        close(j->log_fd);
    free(j->tmp);
    free(j->req);
    free(j->wants);
    free(j);
}

/* Ends j: moves its install into the cache on success, tells its wants. */
static void job_end(job *j, const char *error)
{
    want **wants = j->wants;
    size_t nwants = j->nwants;
    j->wants = NULL;
    job_free(j);
    for (size_t i = 0; i < nwants; i++)
        want_job_done(wants[i], error);
    free(wants);
}

/* Anything pip left behind dies with it, while its group id (its
 * unreaped pid) cannot have been reused. */
void sup_pkgs_before_reap(pid_t pid)
{
    for (job *j = jobs; j; j = j->next)
        if (j->pid == pid && pid > 1)
            kill(-pid, SIGKILL);
}

bool sup_pkgs_on_exit(pid_t pid, int status)
{
    job *j = jobs;
    while (j && !(j->pid == pid && pid > 0))
        j = j->next;
    if (!j)
        return false;
    char final[TREE_MAX], msg[PIP_MESSAGE_MAX + 512], pipmsg[PIP_MESSAGE_MAX];
    snprintf(final, sizeof final, "%s/%s", source_dir, j->req);
    const char *error = NULL;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        /* Another daemon sharing the cache may have been first: its
         * complete tree is as good as this one. */
        if (rename(j->tmp, final) < 0) {
            int e = errno;
            remove_tree(j->tmp);
            struct stat st;
            if (stat(final, &st) < 0) {
                snprintf(msg, sizeof msg, "cannot move the install of '%s' into the cache: %s",
                         j->req, strerror(e));
                error = msg;
            }
        }
    } else {
        remove_tree(j->tmp);
        pip_message(j->log_fd, pipmsg, sizeof pipmsg);
        if (j->timed_out)
            snprintf(msg, sizeof msg, "pip did not install '%s' within %g s: %s", j->req,
                     PIP_TIMEOUT, pipmsg);
        else if (WIFEXITED(status))
            snprintf(msg, sizeof msg, "pip could not install '%s' (exit status %d): %s", j->req,
                     WEXITSTATUS(status), pipmsg);
        else
            snprintf(msg, sizeof msg, "pip could not install '%s' (killed by signal %d): %s",
                     j->req, WTERMSIG(status), pipmsg);
        error = msg;
        sup_stats.pip_failures++;
    }
    sup_stats_event("pip-end requirement=%s status=%s", j->req, error ? "failed" : "ok");
    job_end(j, error);
    start_jobs();
    return true;
}

/* Starts queued jobs while fewer than PIP_PARALLEL run. */
static void start_jobs(void)
{
    size_t running = 0;
    for (job *j = jobs; j; j = j->next)
        running += j->pid > 0;
    job *next;
    for (job *j = jobs; j && running < PIP_PARALLEL; j = next) {
        next = j->next;
        if (j->pid > 0)
            continue;
        char why[SUB_MAX + 128];
        if (job_spawn(j, why, sizeof why) < 0) {
            char msg[sizeof why + SUP_PKGS_REQ_MAX + 64];
            snprintf(msg, sizeof msg, "cannot run pip for '%s': %s", j->req, why);
            sup_stats.pip_failures++;
            job_end(j, msg);
            continue;
        }
        running++;
    }
}

double sup_pkgs_tick(double now)
{
    double next = 0;
    for (job *j = jobs; j; j = j->next) {
        if (j->pid <= 0)
            continue;
        if (!j->timed_out && now >= j->deadline) {
            j->timed_out = true;
            kill(-j->pid, SIGKILL);
        } else if (!j->timed_out && (next == 0 || j->deadline < next)) {
            next = j->deadline;
        }
    }
    return next;
}

void sup_pkgs_fetch(char **reqs, size_t n, sup_pkgs_cb cb, void *arg)
{
    want *w = mem_calloc(1, sizeof *w);
    w->cb = cb;
    w->arg = arg;
    w->n = n;
    w->reqs = mem_calloc(n + 1, sizeof *w->reqs);
    w->cached = mem_calloc(n + 1, sizeof *w->cached);
    for (size_t i = 0; i < n; i++)
        w->reqs[i] = mem_strdup(reqs[i]);
    if (!enabled) {
        w->error = mem_strdup("this daemon offers no packages: start it with --wheelhouse DIR "
                              "or --package-index URL");
        want_finish(w);
        return;
    }
    /* Count what must be installed first: past the cap nothing starts. */
    size_t missing = 0;
    for (size_t i = 0; i < n; i++) {
        char final[TREE_MAX];
        struct stat st;
        snprintf(final, sizeof final, "%s/%s", source_dir, reqs[i]);
        w->cached[i] = stat(final, &st) == 0 && S_ISDIR(st.st_mode);
        missing += !w->cached[i];
    }
    if (njobs + missing > SUP_PKGS_JOBS_MAX) {
        char msg[128];
        snprintf(msg, sizeof msg, "%zu pip runs are already waiting (at most %d)", njobs,
                 SUP_PKGS_JOBS_MAX);
        w->error = mem_strdup(msg);
        sup_pkgs_result res = {
            .error = w->error, .code = "busy", .reqs = w->reqs, .n = w->n, .cached = w->cached};
        w->cb(w->arg, &res);
        sup_pkgs_free_reqs(w->reqs, w->n);
        free(w->cached);
        free(w->error);
        free(w);
        return;
    }
    w->left = 1; /* held until every job is attached */
    for (size_t i = 0; i < n; i++) {
        if (w->cached[i]) {
            sup_stats.pip_cached++;
            continue;
        }
        job *j = jobs, *last = NULL;
        while (j && strcmp(j->req, reqs[i]) != 0) { /* one pip per requirement */
            last = j;
            j = j->next;
        }
        if (!j) {
            j = mem_calloc(1, sizeof *j);
            j->req = mem_strdup(reqs[i]);
            j->log_fd = -1;
            if (last)
                last->next = j;
            else
                jobs = j;
            njobs++;
        }
        j->wants = mem_realloc(j->wants, (j->nwants + 1) * sizeof *j->wants);
        j->wants[j->nwants++] = w;
        w->left++;
    }
    start_jobs();
    want_job_done(w, NULL); /* drops the hold: finishes now if nothing ran */
}

void sup_pkgs_shutdown(void)
{
    while (jobs) {
        job *j = jobs;
        if (j->pid > 0) {
            kill(-j->pid, SIGKILL);
            kill(j->pid, SIGKILL);
            waitpid(j->pid, NULL, 0);
        }
        if (j->tmp)
            remove_tree(j->tmp);
        job_end(j, "the daemon is shutting down");
    }
}
