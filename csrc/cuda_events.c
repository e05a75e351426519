/* Event waits -> the event record they wait on: Kineto's wait_on_stream and
 * wait_on_cuda_event_record_corr_id. A cudaStreamWaitEvent or cudaEventSynchronize names a CUDA
 * event; CUPTI's CUDA_EVENT records say, for each cudaEventRecord, which stream the event was
 * recorded on and the call's correlation id. Holistic Trace Analysis' critical path and Chakra
 * draw cross-stream dependencies from the pair.
 *
 * The pairing is Kineto's: the latest record of the same event in the same context whose
 * correlation id precedes the wait's (correlation ids grow at each API call, across threads).
 * CUPTI 12.6+ also stamps both records with a cudaEventSyncId meant for exactly this pairing;
 * where both carry one and the two rules disagree, the sync id wins. Pure C, run once at stop
 * with the GIL released. */
#include <stdlib.h>

#include "cupti_abi.h"
#include "gpu.h"

typedef struct ev_ref {
    uint32_t context, event, correlation, stream;
    uint64_t sync_id;
} ev_ref;

static int cmp_ref(const void *a, const void *b) {
    const ev_ref *x = a, *y = b;
    if (x->context != y->context) return x->context < y->context ? -1 : 1;
    if (x->event != y->event) return x->event < y->event ? -1 : 1;
    return (x->correlation > y->correlation) - (x->correlation < y->correlation);
}

static int valid_sync_id(uint64_t id) {
    return id != 0 && id != (uint64_t)CUPTI_SYNCHRONIZATION_INVALID_VALUE && id != UINT64_MAX;
}

static int waits_on_event(const cprof_gpu_record *r) {
    return r->kind == CPROF_GPU_SYNC &&
           (r->sub == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE ||
            r->sub == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT) &&
           r->u.ev.event_id != CUPTI_SYNCHRONIZATION_INVALID_VALUE;
}

/* The last record of (context, event) with a correlation id below corr, or NULL; *lo / *hi
 * bound the event's records. */
static const ev_ref *latest_before(const ev_ref *refs, size_t n, uint32_t context,
                                   uint32_t event, uint32_t corr, size_t *lo, size_t *hi) {
    ev_ref key = {context, event, 0, 0, 0};
    size_t a = 0, b = n;
    while (a < b) { /* first record of (context, event) */
        size_t m = a + (b - a) / 2;
        if (cmp_ref(&refs[m], &key) < 0) a = m + 1;
        else b = m;
    }
    *lo = a;
    key.correlation = corr;
    b = n;
    while (a < b) { /* first record of (context, event) at or after corr */
        size_t m = a + (b - a) / 2;
        if (cmp_ref(&refs[m], &key) < 0) a = m + 1;
        else b = m;
    }
    size_t end = a;
    while (end < n && refs[end].context == context && refs[end].event == event) end++;
    *hi = end;
    return a > *lo ? &refs[a - 1] : NULL;
}

int cprof_gpu_resolve_event_waits(cprof_gpu_snapshot *snap) {
    size_t nev = 0, nwait = 0;
    for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count; k++) {
            cprof_gpu_record *r = &c->rec[k];
            if (r->kind == CPROF_GPU_CUDA_EVENT) nev++;
            else if (r->kind == CPROF_GPU_SYNC) {
                r->u.ev.wait_stream = -1;
                r->u.ev.wait_corr = -1;
                nwait += waits_on_event(r);
            }
        }
    snap->event_waits_resolved = snap->event_waits_unresolved = 0;
    if (!nwait) return CPROF_OK;
    ev_ref *refs = nev ? malloc(nev * sizeof *refs) : NULL;
    if (nev && !refs) {
        snap->event_waits_unresolved = nwait;
        return CPROF_E_NOMEM;
    }
    size_t i = 0;
    for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count; k++) {
            const cprof_gpu_record *r = &c->rec[k];
            if (r->kind == CPROF_GPU_CUDA_EVENT)
                refs[i++] = (ev_ref){r->context, r->u.ev.event_id, r->correlation, r->stream,
                                     r->u.ev.sync_id};
        }
    if (nev) qsort(refs, nev, sizeof *refs, cmp_ref);
    for (cprof_gpu_chunk *c = snap->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count; k++) {
            cprof_gpu_record *r = &c->rec[k];
            if (!waits_on_event(r)) continue;
            size_t lo = 0, hi = 0;
            const ev_ref *e = nev ? latest_before(refs, nev, r->context, r->u.ev.event_id,
                                                  r->correlation, &lo, &hi)
                                  : NULL;
            if (nev && valid_sync_id(r->u.ev.sync_id) && !(e && e->sync_id == r->u.ev.sync_id)) {
                /* CUPTI paired them otherwise: its id names the record (bounded search) */
                for (size_t j = lo; j < hi && j < lo + 4096; j++)
                    if (refs[j].sync_id == r->u.ev.sync_id) {
                        e = &refs[j];
                        break;
                    }
            }
            if (!e) {
                snap->event_waits_unresolved++;
                continue;
            }
            r->u.ev.wait_stream = (int32_t)e->stream;
            r->u.ev.wait_corr = e->correlation;
            snap->event_waits_resolved++;
        }
    free(refs);
    return CPROF_OK;
}
