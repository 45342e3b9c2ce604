/* sup_outmem: the supervisor's side of a worker's output memory
 * (chan_outmem.h): mapping the memfd the worker sends with `ready`, and
 * recovering the output a dead worker had not sent. The worker is not
 * trusted: the memfd must be sealed at the expected size (so the mapping
 * cannot shrink under the supervisor), and every field read from it is
 * bounds-checked; the worst a lying worker can do is have its own garbage
 * delivered as its own output. */
#include "sup_outmem.h"

#include "chan_outmem.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps a worker's output memory once its seals and size are right: a
 * mapping the worker could shrink would crash the supervisor (SIGBUS). */
const void *sup_outmem_attach(int fd)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    const int need = F_SEAL_SHRINK | F_SEAL_GROW;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)sizeof(chan_outmem) &&
        seals >= 0 && (seals & need) == need)
        p = mmap(NULL, sizeof(chan_outmem), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* Unmaps a worker's output memory (its worker is gone or replaced). */
void sup_outmem_detach(const void **map)
{
    if (*map)
        munmap((void *)*map, sizeof(chan_outmem));
    *map = NULL;
}

/* A piece of a stream held in the output memory. */
typedef struct segment {
    uint64_t seq;
    const uint8_t *data;
    uint32_t len;
} segment;

/* A buffer of the memory as a segment, or none when the fields are out of
 * bounds. */
static void add(segment *v, size_t *n, uint64_t seq, const uint8_t *data, uint32_t len)
{
    if (len == 0 || len > CHAN_OUTMEM_AREA)
        return;
    v[(*n)++] = (segment){seq, data, len};
}

/* What a dead worker had not sent of stream s: the pieces of its output
 * memory past the bytes the supervisor received, in the order sent. */
void sup_outmem_recover(const void *map, int s, uint64_t recv, sup_outmem_emit emit, void *arg)
{
    if (!map || s < 0 || s > 1)
        return;
    const chan_outmem *om = map;
    const chan_outmem_stream *m = &om->s[s];
    if (om->magic != CHAN_OUTMEM_MAGIC)
        return;
    /* A snapshot of the fields (a process the worker forked may still
     * write the memory). */
    uint64_t taken = m->taken, send_seq = m->send_seq, raw_seq = m->raw_seq;
    uint32_t send_idx = m->send_idx, send_len = m->send_len;
    uint32_t pend_idx = m->pend_idx, pend_len = m->pend_len;
    uint32_t raw_state = m->raw_state, raw_len = m->raw_len;
    uint64_t nonce = m->raw_nonce;
    if (raw_state == CHAN_OUTMEM_RAW_READING && raw_len > 0 && raw_len <= CHAN_OUTMEM_AREA) {
        /* Killed inside the read: the bytes left the pipe if the nonce
         * written over the area's start is gone. */
        size_t k = raw_len < sizeof nonce ? raw_len : sizeof nonce;
        raw_state = memcmp(m->raw, &nonce, k) != 0 ? CHAN_OUTMEM_RAW_READ : 0;
    }
    if (pend_len > CHAN_OUTMEM_AREA || pend_idx > 1)
        pend_len = 0;
    /* In the order the worker sends: the buffer being sent, a sequenced raw
     * chunk, the Python-level buffer (from `taken`), and a raw chunk read
     * but not sequenced yet (it follows the Python-level buffer). */
    segment v[3];
    size_t n = 0;
    if (send_idx <= 1)
        add(v, &n, send_seq, m->buf[send_idx], send_len);
    if (raw_state == CHAN_OUTMEM_RAW_SEQ)
        add(v, &n, raw_seq, m->raw, raw_len);
    if (pend_len)
        add(v, &n, taken, m->buf[pend_idx], pend_len);
    if (raw_state == CHAN_OUTMEM_RAW_READ)
        add(v, &n, taken + pend_len, m->raw, raw_len);
    /* Stable sort by sequence (ties keep the order above). */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j].seq < v[j - 1].seq; j--) {
            segment t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    /* Deliver each byte once, from the first one the supervisor has not
     * received (a frame cut short by the death counts as not received). */
    static uint8_t copy[CHAN_OUTMEM_AREA];
    uint64_t next = recv;
    for (size_t i = 0; i < n; i++) {
        uint64_t end = v[i].seq + v[i].len;
        if (end < v[i].seq || end <= next)
            continue;
        uint64_t from = v[i].seq > next ? v[i].seq : next;
        size_t off = (size_t)(from - v[i].seq), k = (size_t)(end - from);
        memcpy(copy, v[i].data + off, k);
        emit(arg, s, copy, k);
        next = end;
    }
}
