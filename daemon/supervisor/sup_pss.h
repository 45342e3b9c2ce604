/* sup_pss: workers' proportional set size, read on a thread of its own.
 * The kernel walks every mapping of a worker for it (~0.3 ms, several ms
 * on a loaded host with thousands of workers): read in the event loop,
 * a few of them stalled every request behind them. The loop asks, the
 * thread reads /proc/PID/smaps_rollup, the loop collects the figures when
 * the thread's eventfd signals. */
#ifndef CTXD_SUP_PSS_H
#define CTXD_SUP_PSS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads asked for and not yet collected, at most. */
#define SUP_PSS_SLOTS 16

/* Starts the reading thread; returns the descriptor that is readable
 * while figures wait to be collected (for the loop's epoll). */
int sup_pss_start(void);

/* Asks for pid's PSS: its slot (0..SUP_PSS_SLOTS-1), or -1 when every slot
 * is taken or the thread is not started (ask again later). */
int sup_pss_ask(pid_t pid);

/* A figure read: ok false when the process was gone. */
typedef void (*sup_pss_done_fn)(int slot, pid_t pid, uint64_t pss, bool ok);

/* Hands each figure read since the last call to done (on the caller's
 * thread, each once) and frees its slot. */
void sup_pss_collect(sup_pss_done_fn done);

/* pid's PSS in bytes read now, on the caller's thread; false when it
 * could not be read (the process is gone). */
bool sup_pss_read(pid_t pid, uint64_t *pss);

#endif
