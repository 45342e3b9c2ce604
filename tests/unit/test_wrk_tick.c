/* wrk_tick (daemon/worker): the TSC read as CLOCK_MONOTONIC. What must
 * hold: before the calibration span it is the clock itself; after it, on a
 * machine with an invariant TSC, the TSC is used, and every interval it
 * measures lies between the clock's measures of the intervals just inside
 * and just outside it (with 1% for the calibration's error), however the
 * test is scheduled. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wrk_tick.h"

#include "unit_check.h"

static long long clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(long long ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* One interval measured by both: clock outside, tick, clock inside, pause,
 * clock inside, tick, clock outside. */
static void check_interval(long long pause)
{
    long long o1 = clock_ns();
    long long k1 = wrk_tick_ns();
    long long i1 = clock_ns();
    sleep_ns(pause);
    long long i2 = clock_ns();
    long long k2 = wrk_tick_ns();
    long long o2 = clock_ns();
    long long k = k2 - k1, inner = i2 - i1, outer = o2 - o1;
    if (!(k >= inner - inner / 100 && k <= outer + outer / 100))
        fprintf(stderr, "tick %lld ns, clock between %lld and %lld ns\n", k, inner, outer);
    CHECK(k >= inner - inner / 100 && k <= outer + outer / 100);
}

int main(void)
{
    wrk_tick_init();
    long long a = clock_ns(), t = wrk_tick_ns(), b = clock_ns();
    CHECK(t >= a && t <= b); /* the clock itself until calibrated */
    CHECK(!wrk_tick_uses_tsc());
    sleep_ns(WRK_TICK_CAL_NS + 1000000);
    for (int i = 0; i < 20 && !wrk_tick_uses_tsc(); i++)
        (void)wrk_tick_ns(); /* a preempted pair is retried at the next call */
#if defined(__x86_64__)
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int invariant = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "constant_tsc") && strstr(line, "nonstop_tsc"))
            invariant = 1;
    if (f)
        fclose(f);
    if (invariant)
        CHECK(wrk_tick_uses_tsc());
#endif
    for (int i = 0; i < 5; i++)
        check_interval(5000000LL * (i + 1));
    long long last = wrk_tick_ns();
    for (int i = 0; i < 100000; i++) { /* monotonic on one thread */
        long long now = wrk_tick_ns();
        CHECK(now >= last);
        last = now;
        if (failures)
            break;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("wrk_tick: ok (%s)\n", wrk_tick_uses_tsc() ? "TSC" : "clock");
    return 0;
}
