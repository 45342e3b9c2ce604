/* sup_pss (daemon/supervisor): workers' PSS read on a thread of its own.
 * What the loop relies on: a slot per read asked for, no more than
 * SUP_PSS_SLOTS out at once, each figure handed over once and only after
 * the descriptor signalled, a gone process reported as such. */
#include "sup_pss.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit_check.h"

static struct {
    int seen;
    pid_t pid;
    uint64_t pss;
    bool ok;
} got[SUP_PSS_SLOTS];
static int ngot;

/* The collect callback: records each figure by its slot. */
static void done(int slot, pid_t pid, uint64_t pss, bool ok)
{
    CHECK(slot >= 0 && slot < SUP_PSS_SLOTS);
    if (slot < 0 || slot >= SUP_PSS_SLOTS)
        return;
    got[slot].seen++;
    got[slot].pid = pid;
    got[slot].pss = pss;
    got[slot].ok = ok;
    ngot++;
}

/* Collects until want figures came, waiting on the descriptor as the loop
 * does (a bounded wait: 30 s without a signal fails). */
static void collect_until(int fd, int want)
{
    while (ngot < want) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 30000);
        CHECK(n == 1);
        if (n != 1)
            return;
        sup_pss_collect(done);
    }
}

int main(void)
{
    /* Not started: nothing is asked. */
    CHECK(sup_pss_ask(getpid()) == -1);
    int fd = sup_pss_start();
    CHECK(fd >= 0);
    CHECK(sup_pss_start() == fd); /* one thread */
    CHECK(sup_pss_ask(0) == -1 && sup_pss_ask(-1) == -1);

    /* A live process: its figure, once. */
    int s = sup_pss_ask(getpid());
    CHECK(s >= 0);
    collect_until(fd, 1);
    CHECK(got[s].seen == 1 && got[s].ok && got[s].pid == getpid() && got[s].pss > 0);
    uint64_t now = 0;
    CHECK(sup_pss_read(getpid(), &now) && now > 0);
    sup_pss_collect(done); /* nothing more comes */
    CHECK(ngot == 1);

    /* A process that is gone: not ok. */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    memset(got, 0, sizeof got);
    ngot = 0;
    s = sup_pss_ask(child);
    CHECK(s >= 0);
    collect_until(fd, 1);
    CHECK(got[s].seen == 1 && !got[s].ok && got[s].pid == child);
    CHECK(!sup_pss_read(child, &now));

    /* Every slot out: the next ask waits for a collect. */
    memset(got, 0, sizeof got);
    ngot = 0;
    for (int i = 0; i < SUP_PSS_SLOTS; i++)
        CHECK(sup_pss_ask(getpid()) >= 0);
    CHECK(sup_pss_ask(getpid()) == -1);
    collect_until(fd, SUP_PSS_SLOTS);
    for (int i = 0; i < SUP_PSS_SLOTS; i++)
        CHECK(got[i].seen == 1 && got[i].ok && got[i].pss > 0);
    CHECK(sup_pss_ask(getpid()) >= 0); /* free again */

    if (failures)
        fprintf(stderr, "test_sup_pss: %d check(s) failed\n", failures);
    else
        printf("test_sup_pss: ok\n");
    return failures ? 1 : 0;
}
