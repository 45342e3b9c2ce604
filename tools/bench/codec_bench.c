/* ctxd-codec-bench: encode and decode of three typical messages (an execute
 * request, a 1 MiB stream event, a ctx.list reply of 1,000 contexts) with
 * the hand-written codec ctxd had before msgpack-c (built from git history,
 * see tools/bench/CMakeLists.txt) and the msgpack-c codec of proto/, in one
 * run. Prints the median ns/op and MB/s of each and the ratio new/old.
 *   ctxd-codec-bench [ROUNDS [MS_PER_ROUND]]   (defaults: 11 rounds, 50 ms) */
#include "codec_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const case_names[CASE_COUNT] = {"execute", "stream 1 MiB", "ctx.list 1000"};

/* CPU time of this thread: other processes sharing the CPUs (builds, other
 * benchmarks) delay a round but do not add to it. */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The bytes an encoder produced, copied (its buffer is reused). */
static uint8_t *encoded(const codec_ops *ops, int c, size_t *len)
{
    const uint8_t *p;
    *len = ops->encode(c, &p);
    uint8_t *copy = malloc(*len);
    if (!copy)
        abort();
    memcpy(copy, p, *len);
    return copy;
}

/* Keeps the work observable so the loops are not optimised away. */
static volatile size_t sink;

/* ns of CPU time per operation over one round of at least ms milliseconds. */
static double round_ns(const codec_ops *ops, int c, int decode, const uint8_t *msg, size_t len,
                       double ms)
{
    long iters = 0;
    double start = now_ns(), end;
    do {
        for (int i = 0; i < 16; i++, iters++) {
            if (decode) {
                sink += (size_t)ops->decode(msg, len);
            } else {
                const uint8_t *p;
                sink += ops->encode(c, &p);
            }
        }
        end = now_ns();
    } while (end - start < ms * 1e6);
    return (end - start) / (double)iters;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 11;
    double ms = argc > 2 ? atof(argv[2]) : 50;
    if (rounds < 1 || rounds > 1000 || ms <= 0 || ms > 10000) {
        fprintf(stderr, "usage: ctxd-codec-bench [ROUNDS (1..1000) [MS_PER_ROUND]]\n");
        return 2;
    }
    const codec_ops *codecs[2] = {&codec_old, &codec_new};
    int status = 0;
    printf("codec old (hand-written, git history) vs new (msgpack-c): median of %d rounds "
           "of %.0f ms of CPU time\n",
           rounds, ms);
    printf("%-14s %8s %-6s %11s %9s %11s %9s %8s\n", "message", "bytes", "op", "old ns/op",
           "old MB/s", "new ns/op", "new MB/s", "new/old");
    for (int c = 0; c < CASE_COUNT; c++) {
        size_t len_old, len_new;
        uint8_t *msg_old = encoded(&codec_old, c, &len_old);
        uint8_t *msg_new = encoded(&codec_new, c, &len_new);
        /* Same bytes from both encoders, same values from both decoders. */
        if (len_old != len_new || memcmp(msg_old, msg_new, len_old) != 0) {
            printf("%s: the encoders differ (%zu vs %zu bytes)\n", case_names[c], len_old, len_new);
            status = 1;
        }
        long n_old = codec_old.decode(msg_new, len_new), n_new = codec_new.decode(msg_new, len_new);
        if (n_old < 0 || n_old != n_new) {
            printf("%s: the decoders differ (%ld vs %ld values)\n", case_names[c], n_old, n_new);
            status = 1;
        }
        for (int decode = 0; decode < 2; decode++) {
            double *t[2];
            for (int k = 0; k < 2; k++)
                if (!(t[k] = calloc((size_t)rounds, sizeof(double))))
                    abort();
            for (int r = 0; r < rounds; r++) /* interleaved: drift hits both */
                for (int k = 0; k < 2; k++)
                    t[k][r] = round_ns(codecs[k], c, decode, msg_new, len_new, ms);
            double med[2] = {median(t[0], rounds), median(t[1], rounds)};
            printf("%-14s %8zu %-6s %11.0f %9.1f %11.0f %9.1f %8.2f\n", case_names[c], len_new,
                   decode ? "decode" : "encode", med[0], (double)len_new / med[0] * 1e3, med[1],
                   (double)len_new / med[1] * 1e3, med[1] / med[0]);
            free(t[0]);
            free(t[1]);
        }
        free(msg_old);
        free(msg_new);
    }
    return status;
}
