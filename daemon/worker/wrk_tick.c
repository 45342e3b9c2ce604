/* wrk_tick: the TSC as a cheap CLOCK_MONOTONIC (wrk_tick.h). Reading the
 * TSC needs no system call and no vDSO page; a process that turned it off
 * for itself (prctl PR_SET_TSC) would fault on it, which user code can do
 * only to its own worker. */
#include "wrk_tick.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

/* A TSC read and a clock read this close together (in TSC ticks, a few µs
 * at any rate) pair up: a preemption between them would skew the rate. */
#define PAIR_SLACK 20000u

static bool tsc_ok;     /* invariant TSC, calibration started */
static bool calibrated; /* mult is the measured rate */
static uint64_t tsc0;   /* TSC at the start or at calibration */
static long long ns0;   /* CLOCK_MONOTONIC at the same instant */
static uint64_t mult;   /* nanoseconds per tick, 32.32 fixed point */

/* The clock itself: the calibration's reference and every caller's
 * before it completes. */
long long wrk_tick_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#if HAVE_TSC
/* A TSC reading and the clock at the same instant; false when the thread
 * was preempted between them. */
static bool read_pair(uint64_t *tsc, long long *ns)
{
    uint64_t a = __rdtsc();
    *ns = wrk_tick_clock_ns();
    uint64_t b = __rdtsc();
    *tsc = a + (b - a) / 2;
    return b - a < PAIR_SLACK;
}

/* An invariant TSC runs at a constant rate in every P-, C- and T-state
 * (CPUID 0x80000007, EDX bit 8): only then is one rate good for ever. */
static bool tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d & (1u << 8)) != 0;
}
#endif

/* Remembers the first pair of the calibration. */
void wrk_tick_init(void)
{
#if HAVE_TSC
    if (tsc_ok || !tsc_invariant())
        return;
    for (int i = 0; i < 8 && !tsc_ok; i++)
        tsc_ok = read_pair(&tsc0, &ns0);
#endif
}

/* The time: from the TSC once calibrated, else from the clock (which may
 * complete the calibration). */
long long wrk_tick_ns(void)
{
#if HAVE_TSC
    if (calibrated)
        return ns0 + (long long)(((unsigned __int128)(__rdtsc() - tsc0) * mult) >> 32);
    if (tsc_ok) {
        uint64_t t;
        long long n;
        if (read_pair(&t, &n) && n - ns0 >= WRK_TICK_CAL_NS && t > tsc0) {
            mult = (uint64_t)(((unsigned __int128)(uint64_t)(n - ns0) << 32) / (t - tsc0));
            tsc0 = t;
            ns0 = n;
            calibrated = mult > 0;
        }
        return n;
    }
#endif
    return wrk_tick_clock_ns();
}

/* For the unit test: whether the rate is known. */
int wrk_tick_uses_tsc(void)
{
    return calibrated;
}
