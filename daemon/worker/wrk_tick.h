/* wrk_tick: a cheap monotonic clock for rate limits on hot paths. A
 * Python-level write looks for unread raw output at most every 50 µs, so
 * it needs the time at every write: the vDSO's clock_gettime was 8% of a
 * print loop's CPU (25 ns here, twice per print). On x86-64 with an
 * invariant TSC this reads the TSC (10 ns) and converts it to nanoseconds
 * with a rate measured against CLOCK_MONOTONIC; before the rate is known,
 * and on other machines, it reads CLOCK_MONOTONIC. */
#ifndef CTXD_WRK_TICK_H
#define CTXD_WRK_TICK_H

/* Starts the calibration (once per process image: forked children inherit
 * it and measure the rate over the longer span). */
void wrk_tick_init(void);
/* Nanoseconds on CLOCK_MONOTONIC's scale (within the calibration's error,
 * well under 1%). Callers serialise their calls (the GIL): the rate is
 * set by the first call made WRK_TICK_CAL_NS after wrk_tick_init. */
long long wrk_tick_ns(void);
/* CLOCK_MONOTONIC itself, in nanoseconds (deadlines of timers that the
 * kernel keeps on that clock). */
long long wrk_tick_clock_ns(void);
/* Whether the TSC is used yet (for the unit test). */
int wrk_tick_uses_tsc(void);

#define WRK_TICK_CAL_NS (20LL * 1000 * 1000)

#endif
