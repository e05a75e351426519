/* toggle_collection_dynamic's CUDA side: takes the GPU records launched while CUDA collection
 * was toggled off out of a window's snapshot, at stop.
 * CUPTI keeps collecting while toggled off: switching its kinds off mid-window would lose the
 * records of work launched before the toggle that completes after it, and switching them back
 * on costs what the window's start costs (decision 91). A record belongs to the time its work
 * was asked for: the start of the host call with its correlation id (the runtime or driver
 * record of the launch, copy, set or event record), else its own start (host calls, syncs,
 * NVTX ranges). Memory records are kept: the memory track is a running total that would stay
 * wrong after the toggle back on (a release counted without its allocation), and MEM is not
 * an activity torch.profiler toggles. Pure C, no lock: runs at stop, GIL released. */
#include <stdlib.h>

#include "gpu.h"

/* correlation id -> start of its host call; open addressing, 0 = empty (no call has id 0) */
typedef struct {
    uint32_t *keys;
    uint64_t *start;
    size_t mask;
} corr_map;

static int map_init(corr_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->start = malloc(cap * sizeof *m->start);
    m->mask = cap - 1;
    if (m->keys && m->start) return CPROF_OK;
    free(m->keys);
    free(m->start);
    m->keys = NULL;
    m->start = NULL;
    return CPROF_E_NOMEM;
}

static size_t slot_of(const corr_map *m, uint32_t key) {
    size_t i = (key * 2654435761u) & m->mask;
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & m->mask;
    return i;
}

static int is_host_call(const cprof_gpu_record *r) {
    return r->kind == CPROF_GPU_RUNTIME || r->kind == CPROF_GPU_DRIVER;
}

/* The time r's work was asked for: its host call's start, or its own. */
static uint64_t launch_time(const corr_map *m, const cprof_gpu_record *r) {
    if (!m->keys || !r->correlation) return r->start_ns;
    size_t i = slot_of(m, r->correlation);
    return m->keys[i] ? m->start[i] : r->start_ns;
}

/* 1 if t lies in one of the n [off, on) intervals (sorted, not overlapping). */
static int in_intervals(const uint64_t *iv, size_t n, uint64_t t) {
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first interval whose end is after t */
        size_t mid = lo + (hi - lo) / 2;
        if (iv[2 * mid + 1] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && iv[2 * lo] <= t;
}

int cprof_gpu_drop_toggled_off(cprof_gpu_snapshot *snap, const uint64_t *iv, size_t n) {
    if (!snap || (n && !iv)) return CPROF_E_ARG;
    for (size_t i = 0; i < n; i++)
        if (iv[2 * i] > iv[2 * i + 1] || (i && iv[2 * i] < iv[2 * i - 1])) return CPROF_E_ARG;
    if (!n || !snap->chunks) return CPROF_OK;
    size_t ncalls = 0;
    for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
        for (uint32_t i = 0; i < c->count; i++) ncalls += is_host_call(&c->rec[i]);
    corr_map m = {0};
    /* out of memory: every record is judged by its own start (device work by when it ran) */
    if (ncalls && map_init(&m, ncalls) == CPROF_OK) {
        for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
            for (uint32_t i = 0; i < c->count; i++) {
                const cprof_gpu_record *r = &c->rec[i];
                if (!is_host_call(r) || !r->correlation) continue;
                size_t s = slot_of(&m, r->correlation);
                if (!m.keys[s]) { /* the first call with an id keeps it */
                    m.keys[s] = r->correlation;
                    m.start[s] = r->start_ns;
                }
            }
    }
    /* compact in place, keeping the order: chunks stay full but the last */
    cprof_gpu_chunk *wc = snap->chunks;
    uint32_t wi = 0;
    for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
        for (uint32_t i = 0; i < c->count; i++) {
            const cprof_gpu_record *r = &c->rec[i];
            if (r->kind != CPROF_GPU_MEMORY && in_intervals(iv, n, launch_time(&m, r))) {
                snap->toggled_off++;
                snap->nrecords--;
                snap->per_kind[r->kind]--;
                continue;
            }
            if (wi == CPROF_GPU_CHUNK_RECORDS) {
                wc->count = wi;
                wc = wc->next; /* never past c: the writer trails the reader */
                wi = 0;
            }
            if (&wc->rec[wi] != r) wc->rec[wi] = *r;
            wi++;
        }
    free(m.keys);
    free(m.start);
    cprof_gpu_chunk *rest = wc->next;
    wc->count = wi;
    wc->next = NULL;
    while (rest) {
        cprof_gpu_chunk *next = rest->next;
        free(rest);
        rest = next;
    }
    return CPROF_OK;
}
