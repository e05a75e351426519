/* Per-name aggregates (count, total, self, min, max) of a window's ranges, computed in C so no
 * Python loop runs per event. Pure C, no globals: any thread, GIL released. */
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

static int by_total_desc(const void *a, const void *b) {
    const cprof_summary_row *x = a, *y = b;
    if (x->total_ns != y->total_ns) return x->total_ns < y->total_ns ? 1 : -1;
    return x->name_id < y->name_id ? -1 : x->name_id > y->name_id;
}

static uint64_t duration(const cprof_snapshot *snap, const cprof_record *r) {
    uint64_t end = r->end_ns ? r->end_ns : snap->stop_ns;
    return end > r->begin_ns ? end - r->begin_ns : 0;
}

int cprof_summary_build(const cprof_snapshot *snap, cprof_summary_row **rows, size_t *nrows) {
    if (!snap || !rows || !nrows) return CPROF_E_ARG;
    *rows = NULL;
    *nrows = 0;
    /* one slot per (name, category): names are dense ids, so a flat index beats hashing */
    uint32_t nnames = cprof_names_count();
    size_t nslots = (size_t)nnames * CPROF_CAT_COUNT;
    uint32_t *slot_of = calloc(nslots ? nslots : 1, sizeof *slot_of); /* row index + 1 */
    cprof_summary_row *out = NULL;
    size_t n = 0, cap = 0;
    /* stack[d] = row index and duration of the open range at depth d, to charge children */
    size_t stack_cap = 64;
    struct frame {
        size_t row;
        uint64_t end_ns;
        int valid;
    } *stack = malloc(stack_cap * sizeof *stack);
    if (!slot_of || !stack) goto oom;

    for (size_t t = 0; t < snap->nthreads; t++) {
        size_t depth_seen = 0;
        for (const cprof_chunk *c = snap->threads[t].chunks; c; c = c->next) {
            for (uint32_t k = 0; k < c->count; k++) {
                const cprof_record *r = &c->rec[k];
                uint8_t cat = r->cat < CPROF_CAT_COUNT ? r->cat : 0;
                size_t key = (size_t)(r->name_id < nnames ? r->name_id : 0) * CPROF_CAT_COUNT + cat;
                if (!slot_of[key]) {
                    if (n == cap) {
                        size_t ncap = cap ? cap * 2 : 64;
                        cprof_summary_row *no = realloc(out, ncap * sizeof *no);
                        if (!no) goto oom;
                        out = no;
                        cap = ncap;
                    }
                    memset(&out[n], 0, sizeof out[n]);
                    out[n].name_id = r->name_id;
                    out[n].cat = cat;
                    out[n].min_ns = UINT64_MAX;
                    slot_of[key] = (uint32_t)(++n);
                }
                size_t row = slot_of[key] - 1;
                uint64_t d = duration(snap, r);
                cprof_summary_row *s = &out[row];
                s->count++;
                s->total_ns += d;
                s->self_ns += d;
                if (d < s->min_ns) s->min_ns = d;
                if (d > s->max_ns) s->max_ns = d;
                /* records are in push order per thread; the parent is the last range seen one
                 * level up (a dropped parent leaves its children uncharged, never mischarged) */
                size_t depth = r->depth;
                if (depth + 1 > stack_cap) {
                    size_t ncap = stack_cap;
                    while (ncap < depth + 1) ncap *= 2;
                    struct frame *ns = realloc(stack, ncap * sizeof *ns);
                    if (!ns) goto oom;
                    stack = ns;
                    stack_cap = ncap;
                }
                for (size_t i = depth_seen; i < depth; i++) stack[i].valid = 0;
                if (depth > 0 && depth <= depth_seen && stack[depth - 1].valid) {
                    /* a child that outlives its parent (ranges closed by identity) is charged
                     * only its part inside */
                    cprof_summary_row *p = &out[stack[depth - 1].row];
                    uint64_t end = r->begin_ns + d, pend = stack[depth - 1].end_ns;
                    uint64_t inside = end < pend ? d : pend > r->begin_ns ? pend - r->begin_ns : 0;
                    p->self_ns = p->self_ns > inside ? p->self_ns - inside : 0;
                }
                stack[depth].row = row;
                stack[depth].end_ns = r->begin_ns + d;
                stack[depth].valid = 1;
                depth_seen = depth + 1;
            }
        }
    }
    free(slot_of);
    free(stack);
    if (n) qsort(out, n, sizeof *out, by_total_desc);
    for (size_t i = 0; i < n; i++)
        if (out[i].min_ns == UINT64_MAX) out[i].min_ns = 0;
    *rows = out;
    *nrows = n;
    return CPROF_OK;
oom:
    free(slot_of);
    free(stack);
    free(out);
    return CPROF_E_NOMEM;
}
