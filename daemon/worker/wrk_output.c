/* wrk_output: the capture of output (pipes on fds 1/2, the output memory,
 * the flusher thread). Lock order: the channel lock, then out_mu; nobody
 * holding either waits for the GIL. A sender holds the channel lock from
 * taking data out of a buffer or a pipe until it is written, so stream data
 * leaves in the order it was taken. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "wrk_children.h"
#include "wrk_chan.h"
#include "wrk_log.h"
#include "wrk_tick.h"
#include "chan_outmem.h"

/* How long Python-level output may wait in its buffer (the protocol allows
 * 5 ms); waiting at all lets a loop of small prints share frames. */
#define FLUSH_DELAY_NS (2L * 1000 * 1000)
/* How long a run's `start` may wait to go out with its first output or its
 * `done` (one wake of the supervisor for a short run instead of two); until
 * it is out, an interrupt waits in the supervisor. */
#define START_DELAY_NS (1L * 1000 * 1000)
/* Size of the pipes (Linux caps unprivileged requests at 1 MiB). */
#define PIPE_SIZE (1024 * 1024)
#define CHUNK ((size_t)PROTO_STREAM_CHUNK)
/* A Python-level write looks for raw data still unread in its pipe when
 * os.write wrote to its fd since the last look, or when this long has passed
 * since then; see forward_unread_raw. */
#define RAW_CHECK_NS (50L * 1000)
/* Pipes replaced at a run's start whose write ends other processes may still
 * hold (a background child of an earlier run), per stream: drained and
 * counted as between-run output until their last writer is gone. */
#define MAX_STALE 8

static const char *const stream_names[WRK_OUTPUT_NSTREAMS] = {"stdout", "stderr"};

static int pipe_rd[WRK_OUTPUT_NSTREAMS] = {-1, -1};
/* Extra write ends so that the pipes never report end of file, even if user
 * code closes fd 1 or 2. */
static int pipe_keep[WRK_OUTPUT_NSTREAMS] = {-1, -1};
static int wake_fd = -1;
/* Fires START_DELAY_NS after a run began with its `start` held back: the
 * flusher then sends it (-1: none, start goes out at once). start_now: the
 * next run's start goes out at once (the first after a bind: until it is
 * in, the supervisor reads an exit 126 as the bind's failure). */
static atomic_int start_timer = -1;
static long long start_timer_due; /* when it fires next (wrk_tick_clock_ns), if later than now */
static bool start_now;
static bool flusher_started; /* start_flusher: at the worker's first run */
/* Read ends of replaced pipes (both streams), owned by the flusher; new ones
 * are handed over in stale_new (under out_mu) and pipes_gen tells the
 * flusher to look again at pipe_rd and stale_new. */
static int stale[2 * MAX_STALE], nstale;
static int stale_new[2 * MAX_STALE], nstale_new;
static atomic_uint pipes_gen;
/* Output written while no run was active (counted, dropped), not yet
 * reported to the supervisor. */
static atomic_ullong between_bytes;

/* Output not yet sent: per stream the Python-level buffer (`pend`, guarded
 * by out_mu), the buffer being sent and the chunk read from the pipe (both
 * owned by the holder of the channel lock). Shared with the supervisor
 * through om_fd (sent with `ready`); a private mapping when no memfd can be
 * made. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static chan_outmem *om;
static int om_fd = -1;
/* Stores a field of the output memory after the data it describes. The
 * supervisor reads the memory only once the worker is gone, so program
 * order of the stores is all that matters. */
#define OM_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELEASE)
/* Marks the start of the raw area before each pipe read (flusher state). */
static uint64_t nonce = 0x9e3779b97f4a7c15ULL;
/* A run is active: output is forwarded, not discarded. Changed only while
 * holding both the channel lock and out_mu. */
static atomic_bool running;
/* The flusher has been told that a buffer is non-empty and will flush it. */
static atomic_bool armed;
/* Set in forked children: writes go straight to the pipes. */
static atomic_bool forked;
/* A pipe chunk of the stream has been read but not yet sent (set under the
 * channel lock); see forward_unread_raw. */
static atomic_bool pumping[WRK_OUTPUT_NSTREAMS];

/* When a Python-level write last looked for unread raw data, per stream
 * (GIL); os.write to fd 1 or 2 has written since (set by the wrapper). */
static long long last_raw_check[WRK_OUTPUT_NSTREAMS];
static atomic_bool raw_written[WRK_OUTPUT_NSTREAMS];
/* Called at each run's start, before any of its output (wrk_output_on_run). */
static void (*run_hook)(void);

/* ---- helpers shared by all senders (channel lock held) ----------------- */

/* Sends n bytes of stream s as `stream` frames, the data in place. */
static void send_stream_locked(int s, const uint8_t *p, size_t n)
{
    wrk_chan_write_stream_locked(stream_names[s], p, n);
}

/* Sends stream s's Python-level buffer: it becomes the buffer being sent
 * (sequence numbers taken) and the other buffer takes new writes, so writers
 * can go on appending while the data is written. Dropped when no run is
 * active. */
static void flush_pending_locked(int s)
{
    chan_outmem_stream *m = &om->s[s];
    pthread_mutex_lock(&out_mu);
    uint32_t len = m->pend_len, idx = m->pend_idx;
    if (len == 0) {
        pthread_mutex_unlock(&out_mu);
        return;
    }
    bool live = atomic_load(&running);
    if (live) {
        OM_SET(m->send_seq, m->taken);
        OM_SET(m->send_idx, idx);
        OM_SET(m->send_len, len);
    }
    OM_SET(m->pend_len, 0);
    OM_SET(m->pend_idx, idx ^ 1);
    if (live)
        OM_SET(m->taken, m->taken + len);
    pthread_mutex_unlock(&out_mu);
    if (live) {
        send_stream_locked(s, m->buf[idx], len);
        OM_SET(m->send_len, 0);
    } else {
        atomic_fetch_add(&between_bytes, len);
    }
}

/* Reads one chunk (at most max bytes) of stream s's pipe into the output
 * memory and forwards it after the Python-level data written before it; the
 * bytes read, 0 when the pipe is empty. */
static size_t pump_pipe_locked(int s, size_t max)
{
    chan_outmem_stream *m = &om->s[s];
    if (max > CHAN_OUTMEM_AREA)
        max = CHAN_OUTMEM_AREA;
    atomic_store(&pumping[s], true);
    /* Exactly what the pipe holds (up to max), announced before the read:
     * a worker killed inside read(2) has taken all of it or none, and the
     * nonce over the start of the area tells which. */
    int avail = 0;
    if (ioctl(pipe_rd[s], FIONREAD, &avail) < 0)
        fatal("FIONREAD on the stream pipe: %s", strerror(errno));
    if (avail <= 0) {
        atomic_store(&pumping[s], false);
        return 0;
    }
    size_t want = (size_t)avail < max ? (size_t)avail : max;
    nonce = nonce * 6364136223846793005ULL + 1442695040888963407ULL;
    memcpy(m->raw, &nonce, sizeof nonce);
    OM_SET(m->raw_nonce, nonce);
    OM_SET(m->raw_len, (uint32_t)want);
    OM_SET(m->raw_state, (uint32_t)CHAN_OUTMEM_RAW_READING);
    ssize_t r;
    do
        r = read(pipe_rd[s], m->raw, want);
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno != EAGAIN)
        fatal("read from the stream pipe: %s", strerror(errno));
    if (r <= 0)
        OM_SET(m->raw_len, 0);
    if (r > 0) {
        OM_SET(m->raw_state, (uint32_t)CHAN_OUTMEM_RAW_READ);
        OM_SET(m->raw_len, (uint32_t)r);
        if (atomic_load(&running)) {
            flush_pending_locked(s);
            OM_SET(m->raw_seq, m->taken);
            OM_SET(m->raw_state, (uint32_t)CHAN_OUTMEM_RAW_SEQ);
            OM_SET(m->taken, m->taken + (uint64_t)r);
            send_stream_locked(s, m->raw, (size_t)r);
        } else {
            atomic_fetch_add(&between_bytes, (unsigned long long)r);
        }
        OM_SET(m->raw_len, 0);
    }
    atomic_store(&pumping[s], false);
    return r > 0 ? (size_t)r : 0;
}

/* Which stream pipes hold something, in one poll(2) (two FIONREADs at
 * every run's start and end otherwise); a failed poll says both, so the
 * drains look. */
static void pipes_to_drain(bool has[WRK_OUTPUT_NSTREAMS])
{
    struct pollfd p[WRK_OUTPUT_NSTREAMS];
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++)
        p[s] = (struct pollfd){.fd = pipe_rd[s], .events = POLLIN};
    int n;
    do
        n = poll(p, WRK_OUTPUT_NSTREAMS, 0);
    while (n < 0 && errno == EINTR);
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++)
        has[s] = n < 0 || p[s].revents != 0;
}

/* Reads what stream s's pipe holds right now. Bounded by the amount present
 * at the start so a background process writing without pause cannot keep
 * the caller here forever. */
static void drain_pipe_locked(int s)
{
    int avail = 0;
    if (ioctl(pipe_rd[s], FIONREAD, &avail) < 0)
        fatal("FIONREAD on the stream pipe: %s", strerror(errno));
    size_t left = (size_t)avail;
    while (left > 0) {
        size_t r = pump_pipe_locked(s, left);
        if (r == 0)
            break;
        left -= r;
    }
}

/* ---- the flusher thread ------------------------------------------------- */

/* Tells the flusher that a Python-level buffer became non-empty. */
static void wake_flusher(void)
{
    uint64_t one = 1;
    if (write(wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        fatal("eventfd write: %s", strerror(errno));
}

/* Drains a replaced pipe: its data is between-run output (counted,
 * dropped). False once its last writer is gone (the caller closes it). */
static bool drain_stale(int fd)
{
    static uint8_t sink[CHAN_OUTMEM_AREA];
    for (int i = 0; i < 16; i++) {
        ssize_t r = read(fd, sink, sizeof sink);
        if (r > 0) {
            atomic_fetch_add(&between_bytes, (unsigned long long)r);
            continue;
        }
        return r < 0 && (errno == EAGAIN || errno == EINTR);
    }
    return true;
}

/* Takes the pipes replaced since the last look; more than MAX_STALE per
 * worker: the oldest is closed (its writers then get EPIPE). */
static void take_stale(void)
{
    pthread_mutex_lock(&out_mu);
    for (int i = 0; i < nstale_new; i++) {
        if (nstale == 2 * MAX_STALE) {
            close(stale[0]);
            memmove(stale, stale + 1, (size_t)(--nstale) * sizeof *stale);
        }
        stale[nstale++] = stale_new[i];
    }
    nstale_new = 0;
    pthread_mutex_unlock(&out_mu);
}

/* The run's held-back `start` is due. A descriptor that no longer reads
 * as a timer (user code closed or replaced it) is dropped: starts then go
 * out at once, and the flusher does not spin on it. */
static void start_timer_fired(struct pollfd *p)
{
    uint64_t n;
    bool gone = (p->revents & (POLLNVAL | POLLERR)) != 0;
    ssize_t r = gone ? -1 : read(p->fd, &n, sizeof n);
    if (gone || (r != (ssize_t)sizeof n && !(r < 0 && (errno == EAGAIN || errno == EINTR)))) {
        atomic_store(&start_timer, -1);
        p->fd = -1;
    }
    wrk_chan_lock();
    wrk_chan_flush_deferred_locked();
    wrk_chan_unlock();
}

/* Forwards pipe data as it arrives and Python-level buffers FLUSH_DELAY_NS
 * after they became non-empty, and drains replaced pipes. Runs with every
 * signal blocked. */
static void *flusher_main(void *arg)
{
    (void)arg;
    struct pollfd pfd[4 + 2 * MAX_STALE];
    unsigned gen = ~0u;
    int npfd = 0;
    bool timed = false;
    long long deadline = 0;
    for (;;) {
        unsigned g = atomic_load(&pipes_gen);
        if (g != gen) { /* the pipes were replaced: poll the new set */
            gen = g;
            take_stale();
            pthread_mutex_lock(&out_mu);
            pfd[0] = (struct pollfd){.fd = pipe_rd[WRK_OUTPUT_STDOUT], .events = POLLIN};
            pfd[1] = (struct pollfd){.fd = pipe_rd[WRK_OUTPUT_STDERR], .events = POLLIN};
            pthread_mutex_unlock(&out_mu);
            pfd[2] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
            pfd[3] = (struct pollfd){.fd = atomic_load(&start_timer), .events = POLLIN};
            for (int i = 0; i < nstale; i++)
                pfd[4 + i] = (struct pollfd){.fd = stale[i], .events = POLLIN};
            npfd = 4 + nstale;
        }
        struct timespec ts, *tp = NULL;
        if (timed) {
            long long left = deadline - wrk_tick_clock_ns();
            if (left < 0)
                left = 0;
            ts.tv_sec = (time_t)(left / 1000000000LL);
            ts.tv_nsec = (long)(left % 1000000000LL);
            tp = &ts;
        }
        if (ppoll(pfd, (nfds_t)npfd, tp, NULL) < 0) {
            if (errno == EINTR)
                continue;
            fatal("flusher poll: %s", strerror(errno));
        }
        if (pfd[2].revents & POLLIN) {
            uint64_t v;
            if (read(wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                fatal("eventfd read: %s", strerror(errno));
            if (!timed) {
                timed = true;
                deadline = wrk_tick_clock_ns() + FLUSH_DELAY_NS;
            }
        }
        if (pfd[3].revents)
            start_timer_fired(&pfd[3]);
        for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
            if (pfd[s].revents) {
                wrk_chan_lock();
                if (pfd[s].fd == pipe_rd[s]) /* else replaced: polled anew */
                    pump_pipe_locked(s, CHUNK);
                wrk_chan_unlock();
            }
        }
        bool closed = false;
        for (int i = 0; i < nstale; i++) {
            if (pfd[4 + i].revents && !drain_stale(stale[i])) {
                close(stale[i]);
                stale[i] = -1;
                closed = true;
            }
        }
        if (closed) {
            int k = 0;
            for (int i = 0; i < nstale; i++)
                if (stale[i] >= 0)
                    stale[k++] = stale[i];
            nstale = k;
            gen = ~0u; /* rebuild the poll set */
        }
        if (timed && wrk_tick_clock_ns() >= deadline) {
            timed = false;
            /* Cleared before taking the buffers: a write that lands after
             * the take finds the buffer empty and `armed` false, and wakes
             * us again. */
            atomic_store(&armed, false);
            wrk_chan_lock();
            flush_pending_locked(WRK_OUTPUT_STDOUT);
            flush_pending_locked(WRK_OUTPUT_STDERR);
            wrk_chan_unlock();
        }
    }
    return NULL;
}

/* ---- set-up --------------------------------------------------------------- */

/* In a forked child the flusher does not exist and the channel is closed:
 * writes go straight to the pipes and locks held by other threads are reset.
 * The output memory is still the parent's (it sends what it holds): the
 * child never touches it. */
static void output_after_fork_child(void)
{
    pthread_mutex_init(&out_mu, NULL);
    atomic_store(&forked, true);
}

/* The output memory: a memfd sealed at its size, so the supervisor's
 * read-only mapping of it can never shrink under it; a private mapping when
 * no memfd can be made (nothing is then recovered after a death). */
static void make_outmem(void)
{
    size_t size = sizeof(chan_outmem);
    int fd = memfd_create("ctxd-output", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        if (fd >= 0)
            close(fd);
        fd = -1;
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            fatal("mmap of the output memory: %s", strerror(errno));
    }
    om = p;
    om_fd = fd;
    om->magic = CHAN_OUTMEM_MAGIC;
    om->size = (uint32_t)size;
}

/* The memfd `ready` carries to the supervisor. */
int wrk_output_memfd(void)
{
    return om_fd;
}

const char *wrk_output_stream_name(int s)
{
    return stream_names[s];
}

void wrk_output_on_run(void (*hook)(void))
{
    run_hook = hook;
}

void wrk_output_raw_written(int s)
{
    atomic_store(&raw_written[s], true);
}

/* The pipe whose write end is fd `target`. The supervisor passes the read
 * end as fd `given` (it keeps one too, to recover output written just before
 * a crash); started any other way, the worker makes its own pipe. */
static void make_pipe(int s, int target, int given)
{
    int p[2];
    struct stat st;
    if (given >= 0) {
        if (fstat(given, &st) < 0 || !S_ISFIFO(st.st_mode))
            fatal("fd %d is not the stream pipe the supervisor passes", given);
        p[0] = given;
        if (fcntl(given, F_SETFD, FD_CLOEXEC) < 0)
            fatal("fcntl FD_CLOEXEC: %s", strerror(errno));
        (void)fcntl(p[0], F_SETPIPE_SZ, PIPE_SIZE);
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
            fatal("fcntl O_NONBLOCK: %s", strerror(errno));
        pipe_rd[s] = p[0];
        pipe_keep[s] = fcntl(target, F_DUPFD_CLOEXEC, 6);
        if (pipe_keep[s] < 0)
            fatal("dup of fd %d: %s", target, strerror(errno));
        return;
    }
    if (pipe2(p, O_CLOEXEC) < 0)
        fatal("pipe2: %s", strerror(errno));
    (void)fcntl(p[0], F_SETPIPE_SZ, PIPE_SIZE); /* best effort */
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
        fatal("fcntl O_NONBLOCK: %s", strerror(errno));
    if (dup2(p[1], target) < 0)
        fatal("dup2 onto fd %d: %s", target, strerror(errno));
    pipe_rd[s] = p[0];
    pipe_keep[s] = p[1];
}

/* Redirects fds 1/2 and starts the flusher with all signals blocked, so
 * SIGINT is only ever handled by the main thread. */
void wrk_output_init(bool supervised)
{
    make_outmem();
    wrk_tick_init();
    make_pipe(WRK_OUTPUT_STDOUT, 1, supervised ? 4 : -1);
    make_pipe(WRK_OUTPUT_STDERR, 2, supervised ? 5 : -1);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0)
        fatal("eventfd: %s", strerror(errno));
    /* none (an old kernel, a seccomp filter): starts go out at once */
    atomic_store(&start_timer, timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    /* Once per process image: forked workers inherit the registration. */
    static bool registered;
    if (!registered && pthread_atfork(NULL, NULL, output_after_fork_child) != 0)
        fatal("pthread_atfork failed");
    registered = true;

    flusher_started = false; /* a forked copy has none (threads do not fork) */
}

/* Starts the flusher thread, once per worker, at its first run, with every
 * signal blocked. Until then the worker stays single-threaded (its set-up
 * faults stay cheap, see README.md); nothing writes before user code runs. */
static void start_flusher(void)
{
    if (flusher_started)
        return;
    flusher_started = true;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    int rc = pthread_create(&th, NULL, flusher_main, NULL);
    if (rc != 0)
        fatal("pthread_create: %s", strerror(rc));
    pthread_detach(th);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

bool wrk_output_forked(void)
{
    return atomic_load(&forked);
}

/* Called by the thread that forks a new worker (wrk_zygote.c), GIL held:
 * with both locks taken no other thread is half-way through a buffer when
 * the process is copied. Lock order as everywhere: channel, then out_mu. */
void wrk_output_fork_prepare(void)
{
    wrk_chan_lock();
    pthread_mutex_lock(&out_mu);
}

void wrk_output_fork_parent(void)
{
    pthread_mutex_unlock(&out_mu);
    wrk_chan_unlock();
}

/* In a new worker made by fork (from the zygote or from a live worker): the
 * old incarnation's descriptors go (fds 1, 2, 4 and 5 have already been
 * replaced by the new pipes), the state of runs is reset and a new flusher
 * thread starts on the pipes whose read ends are fds 4 and 5. */
void wrk_output_restart(void)
{
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
        if (pipe_keep[s] >= 0)
            close(pipe_keep[s]);
        if (pipe_rd[s] > 5)
            close(pipe_rd[s]);
        pipe_keep[s] = pipe_rd[s] = -1;
        atomic_store(&pumping[s], false);
        atomic_store(&raw_written[s], false);
        last_raw_check[s] = 0;
    }
    if (wake_fd >= 0)
        close(wake_fd);
    wake_fd = -1;
    int t = atomic_exchange(&start_timer, -1);
    if (t >= 0)
        close(t);
    start_timer_due = 0; /* this copy's timer (made anew) is not armed */
    /* Replaced pipes of the previous worker (its flusher is gone); 4 and 5
     * (the first pipes' read ends) already hold this worker's new ones. */
    for (int i = 0; i < nstale; i++)
        if (stale[i] > 5)
            close(stale[i]);
    for (int i = 0; i < nstale_new; i++)
        if (stale_new[i] > 5)
            close(stale_new[i]);
    nstale = nstale_new = 0;
    atomic_store(&between_bytes, 0);
    atomic_fetch_add(&pipes_gen, 1);
    wrk_children_forget();
    /* The previous worker's output memory (this copy's is made anew). */
    if (om)
        munmap(om, sizeof *om);
    if (om_fd >= 0)
        close(om_fd);
    om = NULL;
    om_fd = -1;
    atomic_store(&running, false);
    atomic_store(&armed, false);
    atomic_store(&forked, false);
    wrk_output_init(true);
}

/* ---- run boundaries -------------------------------------------------------- */

/* Gives stream s a new pipe (fd s + 1 writes into it) and hands the old read
 * end to the flusher, which drains it as between-run output until its last
 * writer is gone. The new read end, or -1 when none could be made. */
static int rotate_pipe_locked(int s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    /* Above the fixed descriptors 0-5, which a ctx.fork copy replaces. */
    for (int i = 0; i < 2; i++) {
        if (p[i] <= 5) {
            int fd = fcntl(p[i], F_DUPFD_CLOEXEC, 6);
            close(p[i]);
            p[i] = fd;
        }
    }
    if (p[0] < 0 || p[1] < 0) {
        if (p[0] >= 0)
            close(p[0]);
        if (p[1] >= 0)
            close(p[1]);
        return -1;
    }
    (void)fcntl(p[0], F_SETPIPE_SZ, PIPE_SIZE);
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0 || dup2(p[1], s + 1) < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    pthread_mutex_lock(&out_mu);
    int old_rd = pipe_rd[s], old_keep = pipe_keep[s];
    pipe_rd[s] = p[0];
    pipe_keep[s] = p[1];
    if (nstale_new < 2 * MAX_STALE)
        stale_new[nstale_new++] = old_rd;
    else
        close(old_rd);
    pthread_mutex_unlock(&out_mu);
    close(old_keep);
    return p[0];
}

/* Idle output (and that of processes an earlier run left behind) is counted
 * as `between`, never attributed to this run. `between`, then `start` with
 * the new pipes' read ends, go out under the lock before any stream frame of
 * the run. */
void wrk_output_begin_run(const proto_buf *start)
{
    start_flusher();
    if (run_hook)
        run_hook();
    wrk_chan_lock();
    bool has[WRK_OUTPUT_NSTREAMS];
    pipes_to_drain(has);
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++)
        if (has[s])
            drain_pipe_locked(s);
    pthread_mutex_lock(&out_mu);
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
        atomic_fetch_add(&between_bytes, om->s[s].pend_len);
        OM_SET(om->s[s].pend_len, 0);
    }
    pthread_mutex_unlock(&out_mu);
    unsigned long long between = atomic_exchange(&between_bytes, 0);
    int fds[WRK_OUTPUT_NSTREAMS] = {-1, -1};
    /* Another process may hold the pipes' write ends. */
    if (wrk_children_look() || between > 0) {
        for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++)
            fds[s] = rotate_pipe_locked(s);
        atomic_fetch_add(&pipes_gen, 1);
        wake_flusher();
    }
    pthread_mutex_lock(&out_mu);
    atomic_store(&running, true);
    pthread_mutex_unlock(&out_mu);
    if (between) {
        proto_buf b;
        proto_buf_init(&b);
        size_t at = proto_frame_begin(&b);
        proto_put_map(&b, 2);
        proto_put_str(&b, "t");
        proto_put_str(&b, "between");
        proto_put_str(&b, "bytes");
        proto_put_uint(&b, between);
        proto_frame_end(&b, at);
        wrk_chan_write_locked(b.data, b.len);
        proto_buf_free(&b);
    }
    int timer = atomic_load(&start_timer);
    if (fds[0] >= 0 && fds[1] >= 0) {
        wrk_chan_write_fds_locked(start->data, start->len, fds, 2);
    } else if (timer >= 0 && !start_now && start->len <= WRK_CHAN_DEFER_MAX) {
        /* Out with the run's first frame, or by the flusher once the timer
         * fires; the timer is armed at most once per START_DELAY_NS. A run
         * that finds it armed goes out when it fires; one that comes after
         * the flusher's look reads a clock past start_timer_due and arms it
         * again. */
        wrk_chan_defer_locked(start->data, start->len);
        long long now = wrk_tick_clock_ns();
        struct itimerspec due = {.it_value = {0, START_DELAY_NS}};
        if (now >= start_timer_due) {
            if (timerfd_settime(timer, 0, &due, NULL) == 0)
                start_timer_due = now + START_DELAY_NS;
            else
                wrk_chan_flush_deferred_locked();
        }
    } else {
        wrk_chan_write_locked(start->data, start->len);
    }
    start_now = false;
    wrk_chan_unlock();
}

void wrk_output_start_now(void)
{
    start_now = true;
}

/* Everything written before the run ended reaches the supervisor before
 * `done`: C stdio buffers are flushed into the pipes, then, per stream, the
 * pipe is drained (each raw chunk preceded by the Python-level data written
 * before it) and the Python-level buffer is sent. */
void wrk_output_end_run(const proto_buf *tail)
{
    fflush(NULL);
    wrk_chan_lock();
    bool has[WRK_OUTPUT_NSTREAMS];
    pipes_to_drain(has);
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
        if (has[s])
            drain_pipe_locked(s);
        flush_pending_locked(s);
    }
    wrk_chan_write_locked(tail->data, tail->len);
    pthread_mutex_lock(&out_mu);
    atomic_store(&running, false);
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++)
        OM_SET(om->s[s].pend_len, 0);
    pthread_mutex_unlock(&out_mu);
    wrk_chan_unlock();
}

/* Sends frames in the middle of a run (display events), after every byte
 * written before them, like wrk_output_end_run but leaving the run active.
 * Dropped when no run is active. */
void wrk_output_send_frames(const proto_buf *frames)
{
    if (atomic_load(&forked))
        return; /* a process forked by the cell has no channel */
    fflush(NULL);
    wrk_chan_lock();
    if (atomic_load(&running)) {
        for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
            drain_pipe_locked(s);
            flush_pending_locked(s);
        }
        wrk_chan_write_locked(frames->data, frames->len);
    }
    wrk_chan_unlock();
}

/* ---- the write path (GIL held on entry) ------------------------------------ */

/* write(2) until done; used by forked children. */
static void write_fd_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* like a closed stdout: the output is lost */
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Sends stream s's buffered data, and first any raw data unread in its
 * pipe if drain is set, with the GIL released (sending may block). */
static void send_now_nogil(int s, bool drain)
{
    PyThreadState *ts = PyEval_SaveThread();
    wrk_chan_lock();
    if (drain)
        drain_pipe_locked(s);
    flush_pending_locked(s);
    wrk_chan_unlock();
    PyEval_RestoreThread(ts);
}

/* Forwards raw output written before this Python-level write and not yet
 * sent, so the write cannot overtake it. The pipe is looked at when os.write
 * wrote to the stream's fd since the last look (exact order) and otherwise
 * at most every RAW_CHECK_NS (ordered with C code and other processes). */
static void forward_unread_raw(int s)
{
    long long now = 0;
    /* A load first: the exchange is a locked instruction, and rarely needed
     * (the flag is set and read under the GIL). */
    if (!(atomic_load_explicit(&raw_written[s], memory_order_relaxed) &&
          atomic_exchange(&raw_written[s], false))) {
        now = wrk_tick_ns();
        /* a clock that went back (a TSC out of step on another CPU)
         * looks now rather than never again */
        if (now >= last_raw_check[s] && now - last_raw_check[s] < RAW_CHECK_NS)
            return;
    }
    last_raw_check[s] = now ? now : wrk_tick_ns();
    int avail = 0;
    if (ioctl(pipe_rd[s], FIONREAD, &avail) < 0)
        return;
    if (avail > 0 || atomic_load(&pumping[s]))
        send_now_nogil(s, true);
}

/* A large write is sent chunk by chunk through the free buffer of the
 * output memory (so a death in the middle loses no chunk taken), after what
 * was written before it. */
static void send_large_nogil(int s, const char *p, size_t n)
{
    PyThreadState *ts = PyEval_SaveThread();
    wrk_chan_lock();
    drain_pipe_locked(s);
    flush_pending_locked(s);
    chan_outmem_stream *m = &om->s[s];
    while (n > 0 && atomic_load(&running)) {
        size_t k = n < CHAN_OUTMEM_AREA ? n : CHAN_OUTMEM_AREA;
        uint32_t idx = m->pend_idx ^ 1; /* free while the channel lock is held */
        memcpy(m->buf[idx], p, k);
        OM_SET(m->send_seq, m->taken);
        OM_SET(m->send_idx, idx);
        OM_SET(m->send_len, (uint32_t)k);
        OM_SET(m->taken, m->taken + k);
        send_stream_locked(s, m->buf[idx], k);
        OM_SET(m->send_len, 0);
        p += k;
        n -= k;
    }
    wrk_chan_unlock();
    PyEval_RestoreThread(ts);
}

/* A memcpy per piece under out_mu in the common case; a buffer that would
 * outgrow its area, or a large write, is sent by the writer itself with the
 * GIL released, so buffers stay bounded. */
void wrk_output_writev(int s, const struct iovec *iov, size_t cnt, size_t n)
{
    if (n == 0)
        return;
    if (atomic_load(&forked)) {
        PyThreadState *ts = PyEval_SaveThread();
        for (size_t i = 0; i < cnt; i++)
            write_fd_all(s + 1, iov[i].iov_base, iov[i].iov_len);
        PyEval_RestoreThread(ts);
        return;
    }
    if (!atomic_load(&running)) {
        atomic_fetch_add(&between_bytes, n); /* a thread writing between runs */
        return;
    }
    if (n >= CHUNK) {
        for (size_t i = 0; i < cnt; i++)
            if (iov[i].iov_len >= CHUNK)
                send_large_nogil(s, iov[i].iov_base, iov[i].iov_len);
            else
                wrk_output_writev(s, &iov[i], 1, iov[i].iov_len);
        return;
    }
    forward_unread_raw(s);
    chan_outmem_stream *m = &om->s[s];
    pthread_mutex_lock(&out_mu);
    while (m->pend_len + n > CHAN_OUTMEM_AREA) {
        /* Send what is there first, so frames are full-size. */
        pthread_mutex_unlock(&out_mu);
        send_now_nogil(s, false);
        pthread_mutex_lock(&out_mu);
    }
    if (!atomic_load(&running)) {
        pthread_mutex_unlock(&out_mu);
        return;
    }
    uint32_t len = m->pend_len, at = len;
    for (size_t i = 0; i < cnt; i++) {
        memcpy(m->buf[m->pend_idx] + at, iov[i].iov_base, iov[i].iov_len);
        at += (uint32_t)iov[i].iov_len;
    }
    OM_SET(m->pend_len, at);
    pthread_mutex_unlock(&out_mu);
    if (len == 0 && !atomic_exchange(&armed, true))
        wake_flusher();
}

/* Sends stream s's buffer now: flush() promises the data has left the
 * process (e.g. before os._exit). */
void wrk_output_flush(int s)
{
    if (atomic_load(&forked))
        return;
    pthread_mutex_lock(&out_mu);
    bool empty = om->s[s].pend_len == 0;
    pthread_mutex_unlock(&out_mu);
    if (!empty)
        send_now_nogil(s, false);
}
