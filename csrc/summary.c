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

/* The ranges of one thread open at `now`, latest begun last: each instant goes to the top. */
typedef struct open_range {
    size_t row;
    uint64_t begin, end;
} open_range;

/* Charges [*now, until) to the innermost open ranges, dropping those that end. */
static void give_time(cprof_summary_row *out, open_range *st, size_t *nopen, uint64_t *now,
                      uint64_t until) {
    while (*nopen) {
        open_range *top = &st[*nopen - 1];
        if (*now < top->begin) *now = top->begin;
        if (*now >= until) return;
        if (top->end <= *now) {
            (*nopen)--;
            continue;
        }
        uint64_t upto = top->end < until ? top->end : until;
        out[top->row].self_ns += upto - *now;
        *now = upto;
    }
    if (*now < until) *now = until;
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
    /* self time: each instant of a thread goes to the innermost range open then (the latest
     * begun), so ranges that nest get duration minus children, and one that outlives the
     * range it began in (closed by identity; held open across an await or a yield while
     * other frames run) is counted once, never twice (decision 155) */
    size_t stack_cap = 64, nopen = 0;
    open_range *stack = malloc(stack_cap * sizeof *stack);
    if (!slot_of || !stack) goto oom;

    for (size_t t = 0; t < snap->nthreads; t++) {
        uint64_t now = 0;
        nopen = 0;
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
                if (d < s->min_ns) s->min_ns = d;
                if (d > s->max_ns) s->max_ns = d;
                /* an async range (ended on another thread: torch's is_async) takes no time */
                if (r->flags & CPROF_REC_ASYNC) continue;
                /* records are in push (begin) order per thread */
                give_time(out, stack, &nopen, &now, r->begin_ns);
                if (nopen == stack_cap) {
                    open_range *ns = realloc(stack, 2 * stack_cap * sizeof *ns);
                    if (!ns) goto oom;
                    stack = ns;
                    stack_cap *= 2;
                }
                stack[nopen++] = (open_range){row, r->begin_ns, r->begin_ns + d};
            }
        }
        give_time(out, stack, &nopen, &now, UINT64_MAX);
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

void cprof_summary_merge(cprof_summary_row *rows, size_t *nrows, const size_t *into) {
    size_t n = *nrows, k = 0;
    int merged = 0;
    for (size_t i = 0; i < n; i++) {
        if (into[i] == i) continue;
        cprof_summary_row *to = &rows[into[i]], *from = &rows[i];
        to->count += from->count;
        to->total_ns += from->total_ns;
        to->self_ns += from->self_ns;
        if (from->min_ns < to->min_ns) to->min_ns = from->min_ns;
        if (from->max_ns > to->max_ns) to->max_ns = from->max_ns;
        merged = 1;
    }
    for (size_t i = 0; i < n; i++)
        if (into[i] == i) rows[k++] = rows[i];
    *nrows = k;
    if (merged) qsort(rows, k, sizeof *rows, by_total_desc);
}
