/* Exact duplicate events (a trace whose events were written twice, two copies concatenated):
 * the later copies are marked skipped, CPROF_TSKIP_DUPLICATE, so that every figure counts each
 * event once and the report says how many it left out. Pure C: any thread, GIL released. */
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

/* Complete ranges and flows: their copies double tables and join duplicated launches to
 * duplicated kernels. Instants and counters are left alone: old Kineto traces have whole-µs
 * times, and an allocation freed and made again within one µs writes the same text twice,
 * truly. So are B / E pairs: two nested ranges ending in one µs write the same E, a
 * recursion within one µs the same B. */
static int dedup_kind(uint8_t ph) {
    return ph == 'X' || ph == 's' || ph == 't' || ph == 'f';
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* The tail of an event's text, where its args are: events alike in every decoded field but
 * one arg (torch's "Ev Idx") must not share a hash chain (a quadratic probe otherwise). */
static uint64_t tail_hash(const cprof_tev *e, const char *text) {
    if (!text) return 0;
    uint32_t k = e->raw_len < 64 ? e->raw_len : 64;
    const unsigned char *p = (const unsigned char *)text + e->raw_off + e->raw_len - k;
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < k; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t key_hash(const cprof_tev *e, const char *text) {
    uint64_t h = mix(e->ph, e->name);
    h = mix(h, tail_hash(e, text));
    h = mix(h, (uint64_t)e->ts_ns);
    h = mix(h, (uint64_t)e->dur_ns);
    h = mix(h, (uint64_t)e->pid);
    h = mix(h, (uint64_t)e->tid);
    h = mix(h, (uint64_t)e->correlation);
    h = mix(h, (uint64_t)e->external_id);
    h = mix(h, (uint64_t)e->flow_id);
    return mix(h, e->raw_len);
}

/* The same event: every decoded field, and the same text (args the reader does not decode
 * differ between truly distinct events, e.g. torch's "Ev Idx"). */
static int same_event(const cprof_tev *a, const cprof_tev *b, const char *text) {
    if (a->ph != b->ph || a->name != b->name || a->ts_ns != b->ts_ns || a->dur_ns != b->dur_ns ||
        a->pid != b->pid || a->tid != b->tid || a->correlation != b->correlation ||
        a->external_id != b->external_id || a->flow_id != b->flow_id || a->bytes != b->bytes ||
        a->device != b->device || a->stream != b->stream || a->cat != b->cat ||
        a->raw_len != b->raw_len)
        return 0;
    return !text || memcmp(text + a->raw_off, text + b->raw_off, a->raw_len) == 0;
}

typedef struct dedup_slot {
    uint32_t idx1; /* event index + 1; 0: empty */
    uint32_t h;
} dedup_slot;

/* One hash probe per range or flow event; the first copy is kept. Contract in trace_read.h. */
int cprof_tevs_mark_duplicates(cprof_tev *ev, size_t n, const char *text) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += dedup_kind(ev[i].ph);
    if (m < 2 || n >= UINT32_MAX) return CPROF_OK;
    size_t cap = 16;
    while (cap < 2 * m) cap <<= 1;
    dedup_slot *slot = calloc(cap, sizeof *slot);
    if (!slot) return CPROF_E_NOMEM;
    /* hashes a batch ahead, their slots prefetched: the probes are cache misses otherwise
     * (the table outgrows the caches), half the cost of the pass */
    enum { BATCH = 32 };
    uint64_t hs[BATCH];
    for (size_t b0 = 0; b0 < n; b0 += BATCH) {
        size_t nb = n - b0 < BATCH ? n - b0 : BATCH;
        for (size_t k = 0; k < nb; k++) {
            hs[k] = dedup_kind(ev[b0 + k].ph) ? key_hash(&ev[b0 + k], text) : 0;
            __builtin_prefetch(&slot[(size_t)hs[k] & (cap - 1)]);
        }
        for (size_t k = 0; k < nb; k++) {
            size_t i = b0 + k;
            cprof_tev *e = &ev[i];
            if (!dedup_kind(e->ph)) continue;
            uint32_t h = (uint32_t)(hs[k] >> 32);
            for (size_t j = (size_t)hs[k] & (cap - 1);; j = (j + 1) & (cap - 1)) {
                if (!slot[j].idx1) {
                    slot[j] = (dedup_slot){(uint32_t)(i + 1), h};
                    break;
                }
                if (slot[j].h == h && same_event(&ev[slot[j].idx1 - 1], e, text)) {
                    e->skip = CPROF_TSKIP_DUPLICATE;
                    e->ph = 0; /* and kind: launches are matched to kernels by kind alone */
                    e->kind = CPROF_TK_OTHER;
                    break;
                }
            }
        }
    }
    free(slot);
    return CPROF_OK;
}
