/* sup_ctxpss: each worker's PSS figure, cached in its context: read on
 * sup_pss's thread for new workers and finished runs (the PSS list's
 * head), a few at a time in the clients' pauses, and by INFO within a
 * budget when stale. */
#include "sup_ctxpss.h"

#include "sup_log.h"
#include "sup_pss.h"
#include "sup_stats.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* A PSS figure older than this is read again by INFO (within its budget).
 * The tick reads only figures never read for this worker or older than its
 * last run (an idle worker's barely moves), at most PSS_TICK_READS per
 * PSS_TICK_GAP (~2% of a core at 0.3 ms a read, while there are such),
 * and a worker at most once per PSS_MIN_GAP: a context running short runs
 * back to back would otherwise pay a read per run (0.3 ms of the
 * supervisor's CPU against its own ~0.15 ms for a run). A daemon whose
 * contexts are idle does no background reading at all. */
#define PSS_MAX_AGE 30.0
#define PSS_TICK_READS 4
#define PSS_TICK_SCAN 32
#define PSS_TICK_GAP 0.05
#define PSS_MIN_GAP 1.0
static double info_deadline; /* monotonic; 0: INFO reads every stale PSS */
static double pss_tick_next;

static sup_ctx *pss_asker[SUP_PSS_SLOTS]; /* whose read each sup_pss slot holds */

void sup_ctxpss_want(sup_ctx *c)
{
    c->pss.at = 0;
    if (c->deleted || !sup_ctx_linked(c))
        return;
    sup_ctx_list_remove(SUP_CTX_MEM, c);
    sup_ctx_list_unshift(SUP_CTX_MEM, c);
}

/* Resident memory of a worker (bytes; 0 when unknown) from statm, which
 * the kernel answers from counters: cheap enough for every INFO. */
static uint64_t worker_rss(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long size, resident;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* c's figure is being read (now, or by the sup_pss thread): it is not
 * wanted again until it is out of date; the least recently measured
 * stay first. */
static void pss_reading(sup_ctx *c, double now)
{
    c->pss.at = c->pss.read_at = now;
    if (c->pid > 0)
        sup_stats.pss_reads++;
    if (!c->deleted && !c->spare.on) {
        sup_ctx_list_remove(SUP_CTX_MEM, c);
        sup_ctx_list_push(SUP_CTX_MEM, c);
    }
}

/* Proportional memory of a worker (bytes; 0 when unknown), read now: PSS
 * is what an idle context really costs once pages are shared, but the
 * kernel walks every mapping for it (~0.3 ms, more on a loaded host), so
 * the figure is cached in c. Only for a client's INFO that has no figure
 * or an out-of-date one; the loop's own reads go to sup_ctxpss_ask. */
static void read_pss(sup_ctx *c, double now)
{
    pss_reading(c, now);
    c->pss.bytes = 0; /* also a dead worker's, and one whose read failed */
    if (c->pid > 0)
        (void)sup_pss_read(c->pid, &c->pss.bytes);
}

bool sup_ctxpss_ask(sup_ctx *c, double now)
{
    if (c->pid <= 0) {
        read_pss(c, now); /* 0, without a read */
        return true;
    }
    if (c->pss.slot) /* a read of an earlier worker of c is still out */
        return false;
    int slot = sup_pss_ask(c->pid);
    if (slot < 0)
        return false;
    pss_asker[slot] = c;
    c->pss.slot = slot + 1;
    pss_reading(c, now);
    return true;
}

/* A figure from the sup_pss thread: c's, if c still runs that worker. */
static void pss_arrived(int slot, pid_t pid, uint64_t pss, bool ok)
{
    sup_ctx *c = pss_asker[slot];
    pss_asker[slot] = NULL;
    if (!c)
        return;
    c->pss.slot = 0;
    if (c->pid == pid)
        c->pss.bytes = ok ? pss : 0;
}

void sup_ctxpss_collect(void)
{
    sup_pss_collect(pss_arrived);
}

static bool pss_stale(const sup_ctx *c, double now)
{
    return c->pid > 0 && (c->pss.at == 0 || now - c->pss.at > PSS_MAX_AGE);
}

void sup_ctxpss_info_budget(double seconds)
{
    info_deadline = seconds > 0 ? sup_now() + seconds : 0;
}

void sup_ctxpss_info(sup_ctx *c, uint64_t *rss, uint64_t *pss)
{
    double now = sup_now();
    /* No figure yet (a new worker whose read is out) or an old one: read
     * now, within the budget of a ctx.list page. */
    if ((pss_stale(c, now) || (c->pid > 0 && c->pss.bytes == 0)) &&
        (info_deadline == 0 || now < info_deadline))
        read_pss(c, now);
    *rss = worker_rss(c->pid);
    *pss = c->pid > 0 ? c->pss.bytes : 0;
    if (*pss > *rss) /* read at different times */
        *pss = *rss;
}

void sup_ctxpss_forget(sup_ctx *c)
{
    if (c->pss.slot) /* its figure, when it comes, is for no one */
        pss_asker[c->pss.slot - 1] = NULL;
}

bool sup_ctxpss_due(double now)
{
    return now >= pss_tick_next && sup_ctx_list_head(SUP_CTX_MEM) &&
           sup_ctx_list_head(SUP_CTX_MEM)->pss.at == 0;
}

double sup_ctxpss_wake(double now)
{
    return pss_tick_next > now ? pss_tick_next : 0;
}

double sup_ctxpss_tick(double now)
{
    if (now < pss_tick_next)
        return pss_tick_next;
    /* The wanted figures are the head of the PSS list; a read moves its
     * context to the tail, one read less than PSS_MIN_GAP ago stays. */
    int reads = 0, scanned = 0;
    sup_ctx *next;
    for (sup_ctx *c = sup_ctx_list_head(SUP_CTX_MEM);
         c && c->pss.at == 0 && reads < PSS_TICK_READS && scanned < PSS_TICK_SCAN;
         c = next, scanned++) {
        next = c->memq.next;
        if (c->pid > 0 && c->pss.read_at != 0 && now - c->pss.read_at < PSS_MIN_GAP)
            continue;
        if (!sup_ctxpss_ask(c, now)) /* every slot taken: the next tick */
            break;
        reads++; /* a dead one's: 0, and off the head */
    }
    sup_ctx *h = sup_ctx_list_head(SUP_CTX_MEM);
    pss_tick_next = h && h->pss.at == 0 ? now + PSS_TICK_GAP : 0;
    return pss_tick_next;
}
