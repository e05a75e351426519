/* Links GPU activity to the CPU side after the window: each runtime/driver call gets the
 * External id of the innermost cprof range open on its thread when it began, and each kernel,
 * copy, set or sync gets its launching call (same CUPTI correlation id) and so the same
 * External id. Done once per write, in C, with no per-range cost while collecting.
 * Pure C, no globals: any thread, GIL released. */
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

typedef struct {
    uint32_t tid;
    uint64_t start;
    size_t idx;      /* GPU record index */
} api_ref;

static int by_tid_start(const void *a, const void *b) {
    const api_ref *x = a, *y = b;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int is_host_api(const cprof_gpu_record *r) {
    return r->kind == CPROF_GPU_RUNTIME || r->kind == CPROF_GPU_DRIVER;
}

void cprof_links_free(cprof_links *l) {
    if (!l) return;
    free(l->external_id);
    free(l->launch_of);
    memset(l, 0, sizeof *l);
}

/* For every API record of one thread (sorted by start), the External id of the innermost range
 * of that thread open at its start. Ranges are in push order with their depth, so a stack of
 * the open ones is enough. python_function ranges (with_stack) are never the target: a launch
 * belongs to the op, module or annotation around it, as Kineto links kernels to ops, and the
 * Python calls above it show on the timeline. With CPROF_LINK_SKIP_OPS (with_modules)
 * operators are not targets either: GPU work links to the innermost module or user range
 * (issue 5); with CPROF_LINK_SKIP_MODULES module calls are not (written as Python events only:
 * with_stack without with_modules). */
static int link_thread(const cprof_snapshot *cpu, const cprof_thread_data *t, uint64_t first_ext,
                       unsigned skip, const api_ref *apis, size_t napis, uint64_t *ext_out) {
    size_t cap = 64, depth = 0;
    struct open {
        uint64_t end, ext;
    } *stack = malloc(cap * sizeof *stack);
    if (!stack) return CPROF_E_NOMEM;
    const cprof_chunk *c = t->chunks;
    uint32_t k = 0;
    uint64_t ext = first_ext;
    for (size_t i = 0; i < napis; i++) {
        uint64_t at = apis[i].start;
        /* take in every range that began at or before this call */
        while (c) {
            if (k == c->count) {
                c = c->next;
                k = 0;
                continue;
            }
            const cprof_record *r = &c->rec[k];
            if (r->begin_ns > at) break;
            if (r->cat == CPROF_CAT_PYTHON_FUNCTION ||
                ((skip & CPROF_LINK_SKIP_OPS) && r->cat == CPROF_CAT_CPU_OP) ||
                ((skip & CPROF_LINK_SKIP_MODULES) && (r->flags & CPROF_REC_MODULE))) {
                ext++;
                k++;
                continue;
            }
            uint64_t end = r->end_ns ? r->end_ns : cpu->stop_ns;
            while (depth && stack[depth - 1].end < r->begin_ns) depth--;
            if (depth == cap) {
                cap *= 2;
                struct open *ns = realloc(stack, cap * sizeof *ns);
                if (!ns) {
                    free(stack);
                    return CPROF_E_NOMEM;
                }
                stack = ns;
            }
            stack[depth++] = (struct open){end, ext};
            ext++;
            k++;
        }
        while (depth && stack[depth - 1].end < at) depth--;
        ext_out[apis[i].idx] = depth ? stack[depth - 1].ext : 0;
    }
    free(stack);
    return CPROF_OK;
}

int cprof_links_build(const cprof_snapshot *cpu, const cprof_gpu_snapshot *gpu, unsigned skip,
                      cprof_links *out) {
    memset(out, 0, sizeof *out);
    size_t n = (size_t)gpu->nrecords;
    out->n = n;
    out->external_id = calloc(n ? n : 1, sizeof *out->external_id);
    out->launch_of = calloc(n ? n : 1, sizeof *out->launch_of);
    const cprof_gpu_record **recs = malloc((n ? n : 1) * sizeof *recs);
    api_ref *apis = malloc((n ? n : 1) * sizeof *apis);
    size_t napis = 0, i = 0, tcap = 16;
    uint32_t *corr_table = NULL;
    int rc = CPROF_E_NOMEM;
    if (!out->external_id || !out->launch_of || !recs || !apis) goto done;
    for (const cprof_gpu_chunk *c = gpu->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count && i < n; k++) {
            recs[i] = &c->rec[k];
            if (is_host_api(recs[i])) apis[napis++] = (api_ref){recs[i]->tid, recs[i]->start_ns, i};
            i++;
        }
    n = i;

    /* API records -> innermost range, thread by thread */
    qsort(apis, napis, sizeof *apis, by_tid_start);
    uint64_t first_ext = 1;
    for (size_t t = 0; t < cpu->nthreads; t++) {
        const cprof_thread_data *td = &cpu->threads[t];
        size_t lo = 0, hi = napis;
        while (lo < hi) { /* first API record of this tid */
            size_t mid = (lo + hi) / 2;
            if (apis[mid].tid < (uint32_t)td->tid) lo = mid + 1;
            else hi = mid;
        }
        size_t end = lo;
        while (end < napis && apis[end].tid == (uint32_t)td->tid) end++;
        if (end > lo) {
            rc = link_thread(cpu, td, first_ext, skip, apis + lo, end - lo,
                             out->external_id);
            if (rc) goto done;
        }
        first_ext += td->nrecords;
    }

    /* GPU work and syncs -> their launching call: correlation id -> API record (open
     * addressing; CUPTI correlation ids are unique per process) */
    while (tcap < napis * 2) tcap *= 2;
    corr_table = calloc(tcap, sizeof *corr_table); /* index + 1 into apis */
    if (!corr_table) goto done;
    for (size_t a = 0; a < napis; a++) {
        uint32_t corr = recs[apis[a].idx]->correlation;
        if (!corr) continue;
        size_t h = (corr * 2654435761u) & (tcap - 1);
        while (corr_table[h] && recs[apis[corr_table[h] - 1].idx]->correlation != corr)
            h = (h + 1) & (tcap - 1);
        if (!corr_table[h]) corr_table[h] = (uint32_t)(a + 1);
    }

    for (i = 0; i < n; i++) {
        const cprof_gpu_record *r = recs[i];
        if (is_host_api(r) || !r->correlation) continue;
        size_t h = (r->correlation * 2654435761u) & (tcap - 1);
        while (corr_table[h]) {
            const api_ref *a = &apis[corr_table[h] - 1];
            if (recs[a->idx]->correlation == r->correlation) {
                out->launch_of[i] = a->idx + 1;
                out->external_id[i] = out->external_id[a->idx];
                break;
            }
            h = (h + 1) & (tcap - 1);
        }
    }
    rc = CPROF_OK;
done:
    free(recs);
    free(apis);
    free(corr_table);
    if (rc) cprof_links_free(out);
    return rc;
}
