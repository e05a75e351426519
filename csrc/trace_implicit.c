/* What a trace says only implicitly, made explicit after parsing so that the analysis reads
 * one form: GPU work linked to its launch through Kineto's ac2g flow arrows when the events
 * carry no args.correlation, and B / E duration pairs turned into complete ranges. The parser
 * calls both (trace_read.c). Pure C on the caller's events: any thread, GIL released. */
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

/* ---- launches and GPU work linked through ac2g flows ---- */

typedef struct keyed {
    int64_t pid, tid, ts;
    size_t idx;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int is_launch_side(const cprof_tev *e) {
    return e->kind == CPROF_TK_RUNTIME || e->kind == CPROF_TK_DRIVER;
}

static int needs_link(const cprof_tev *e) {
    return e->ph == 'X' && e->correlation == CPROF_TEV_NONE &&
           (is_launch_side(e) || cprof_trace_is_gpu_op(e));
}

/* The first event of v (sorted) at (pid, tid, ts) on the launch side (launch 1) or the GPU
 * side (launch 0), or (size_t)-1. */
static size_t find_at(const cprof_tev *ev, const keyed *v, size_t n, const cprof_tev *f,
                      int launch) {
    keyed k = {f->pid, f->tid, f->ts_ns, 0};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_keyed(&v[mid], &k) < 0) lo = mid + 1;
        else hi = mid;
    }
    for (; lo < n && v[lo].pid == k.pid && v[lo].tid == k.tid && v[lo].ts == k.ts; lo++)
        if (is_launch_side(&ev[v[lo].idx]) == launch) return v[lo].idx;
    return (size_t)-1;
}

static int is_ac2g(const cprof_trace *t, const cprof_tev *e) {
    size_t n;
    const char *s = cprof_trace_str(t, e->cat, &n);
    return e->kind == CPROF_TK_FLOW && e->flow_id != CPROF_TEV_NONE && n == 4 &&
           memcmp(s, "ac2g", 4) == 0;
}

int cprof_tevs_link_flows(const cprof_trace *t, cprof_tev *ev, size_t n) {
    size_t nneed = 0, nflow = 0;
    for (size_t i = 0; i < n; i++) {
        nneed += needs_link(&ev[i]);
        nflow += (ev[i].ph == 's' || ev[i].ph == 'f') && is_ac2g(t, &ev[i]);
    }
    if (!nneed || !nflow) return CPROF_OK; /* Kineto's and cprof's traces: every event linked */
    keyed *v = malloc(nneed * sizeof *v);
    size_t *launch_of = malloc(nflow * sizeof *launch_of); /* by flow slot: the launch event */
    cprof_keyidx flows = {0};
    int rc = CPROF_E_NOMEM;
    if (!v || !launch_of || cprof_keyidx_init(&flows, nflow)) goto out;
    nneed = 0;
    for (size_t i = 0; i < n; i++)
        if (needs_link(&ev[i])) v[nneed++] = (keyed){ev[i].pid, ev[i].tid, ev[i].ts_ns, i};
    qsort(v, nneed, sizeof *v, cmp_keyed);
    /* the flow's start sits on its launch call (same thread, same ts, as Kineto and cprof
     * write it): the launch takes the id of its first flow as its correlation */
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *f = &ev[i];
        if (f->ph != 's' || !is_ac2g(t, f)) continue;
        int added;
        int64_t slot = cprof_keyidx_put(&flows, f->flow_id, &added);
        if (slot < 0 || !added) continue; /* a flow id started twice: the first start kept */
        size_t l = find_at(ev, v, nneed, f, 1);
        launch_of[slot] = l;
        if (l != (size_t)-1 && ev[l].correlation == CPROF_TEV_NONE) ev[l].correlation = f->flow_id;
    }
    /* its end sits on the GPU op (the op's device and stream, its start): the op takes the
     * launch's correlation, so one launch with several flows (several ops) joins them all */
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *f = &ev[i];
        if (f->ph != 'f' || !is_ac2g(t, f)) continue;
        int64_t slot = cprof_keyidx_get(&flows, f->flow_id);
        if (slot < 0 || launch_of[slot] == (size_t)-1) continue;
        size_t g = find_at(ev, v, nneed, f, 0);
        if (g != (size_t)-1 && ev[g].correlation == CPROF_TEV_NONE)
            ev[g].correlation = ev[launch_of[slot]].correlation;
    }
    rc = CPROF_OK;
out:
    free(v);
    free(launch_of);
    cprof_keyidx_free(&flows);
    return rc;
}

/* ---- B / E duration pairs ---- */

/* Range b (ended by be) and child c (ended by ce), paired just before it at the next depth,
 * read as one range written twice (B B E E once sorted): the same name, times and text of
 * their B and of their E. */
static int same_pair(const cprof_tev *ev, size_t b, size_t be, size_t c, size_t ce,
                     const char *text) {
    const cprof_tev *x = &ev[b], *y = &ev[c];
    if (x->name != y->name || x->ts_ns != y->ts_ns || ev[be].ts_ns != ev[ce].ts_ns ||
        x->cat != y->cat || x->raw_len != y->raw_len || ev[be].raw_len != ev[ce].raw_len)
        return 0;
    return !text || (memcmp(text + x->raw_off, text + y->raw_off, x->raw_len) == 0 &&
                     memcmp(text + ev[be].raw_off, text + ev[ce].raw_off, ev[be].raw_len) == 0);
}

static int same_text(const cprof_tev *ev, size_t a, size_t b, const char *text) {
    const cprof_tev *x = &ev[a], *y = &ev[b];
    return x->ph == y->ph && x->name == y->name && x->raw_len == y->raw_len &&
           (!text || memcmp(text + x->raw_off, text + y->raw_off, x->raw_len) == 0);
}

/* A trace written twice whose ranges touch writes, at the instant one range ends and the next
 * begins, E_fwd B_bwd once and E_fwd B_bwd E_fwd B_bwd twice: paired as written, the second
 * copy's E_fwd would close the first copy's bwd. Where the events of a thread at one instant
 * are two equal halves (the same texts in the same order), they are interleaved here, each
 * event beside its copy (E_fwd E_fwd B_bwd B_bwd), so that each copy pairs with its own.
 * Returns whether any instant was so. A trace written once can have such an instant too
 * (E op B op E op B op: back-to-back calls within a µs): the caller keeps this order only if
 * in it every pair has its twin. Instants with more than RUN_MAX events are left as written. */
#define RUN_MAX 64
static int group_copies(const cprof_tev *ev, keyed *v, size_t n, const char *text) {
    int moved = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && v[j].pid == v[i].pid && v[j].tid == v[i].tid && v[j].ts == v[i].ts) j++;
        size_t len = j - i, m = len / 2, k = 0;
        if (len >= 2 && len % 2 == 0 && len <= RUN_MAX) {
            while (k < m && same_text(ev, v[i + k].idx, v[i + m + k].idx, text)) k++;
            if (k == m && m > 1) {
                keyed tmp[RUN_MAX];
                for (k = 0; k < m; k++) {
                    tmp[2 * k] = v[i + k];
                    tmp[2 * k + 1] = v[i + m + k];
                }
                memcpy(&v[i], tmp, len * sizeof *tmp);
                moved = 1;
            }
        }
        i = j;
    }
    return moved;
}

/* One pairing of the B / E events in order v (nothing written): each E ends the latest B
 * still open on its thread. pb / pe: the pairs' B and E; twin: the B and E of each pair that
 * repeats the range around it. Returns the pairs; *ntwin the twin entries (2 a pair);
 * *twice whether the pairing reads as a trace written twice: every pair in exactly one twin
 * relation (as the copy or as the range copied; counts alone let a recursion b > b > b in one
 * µs, in two relations through the middle b, stand for an unrelated range's missing one), at
 * least two relations, and one of them spanning time (at one instant, a trace written twice
 * and a sequence of calls written once are the same events: a > c, a > c in one µs).
 * mark: a byte per event, all 0 (left so). */
static size_t pair_pass(const cprof_tev *ev, const keyed *v, size_t nbe, const char *text,
                        size_t *open, size_t *last, size_t *pb, size_t *pe, size_t *twin,
                        size_t *ntwin, unsigned char *mark, int *twice) {
    size_t depth = 0, pairs = 0;
    int disjoint = 1, spans = 0;
    *ntwin = 0;
    for (size_t q = 0; q < nbe; q++) {
        if (q && (v[q].pid != v[q - 1].pid || v[q].tid != v[q - 1].tid)) depth = 0;
        const cprof_tev *e = &ev[v[q].idx];
        if (e->ph == 'B') {
            open[depth++] = v[q].idx;
            last[2 * depth] = SIZE_MAX; /* no child of this range paired yet */
            continue;
        }
        if (!depth) continue; /* an E with no B open: stays E, counted as unpaired */
        size_t bi = open[--depth];
        if (!ev[bi].name) continue; /* a range with no name: both stay, unpaired */
        pb[pairs] = bi;
        pe[pairs++] = v[q].idx;
        size_t c = last[2 * (depth + 1)], ce = last[2 * (depth + 1) + 1];
        if (c != SIZE_MAX && same_pair(ev, bi, v[q].idx, c, ce, text)) {
            twin[(*ntwin)++] = c; /* the inner one: its B was written later, its E earlier */
            twin[(*ntwin)++] = ce;
            if (mark[bi] || mark[c]) disjoint = 0;
            mark[bi] = mark[c] = 1;
            spans |= ev[v[q].idx].ts_ns != ev[bi].ts_ns;
        }
        last[2 * depth] = bi;
        last[2 * depth + 1] = v[q].idx;
    }
    for (size_t k = 0; k < *ntwin; k += 2) mark[twin[k]] = 0;
    for (size_t k = 0; k < pairs; k++) mark[pb[k]] = 0;
    *twice = disjoint && spans && *ntwin / 2 >= 2 && *ntwin == pairs;
    return pairs;
}

int cprof_tevs_pair_begin_end(cprof_tev *ev, size_t n, const char *text) {
    size_t nbe = 0, repeats = 0;
    for (size_t i = 0; i < n; i++) {
        nbe += ev[i].ph == 'B' || ev[i].ph == 'E';
        repeats += ev[i].skip == CPROF_TSKIP_DUPLICATE;
    }
    if (!nbe) return CPROF_OK;
    keyed *v = malloc(2 * nbe * sizeof *v);
    size_t *open = malloc(nbe * sizeof *open);
    size_t *last = malloc(2 * (nbe + 1) * sizeof *last);
    size_t *pairs_buf = malloc(4 * nbe * sizeof *pairs_buf); /* two pairings' B and E */
    size_t *twin = malloc(2 * nbe * sizeof *twin);           /* two pairings' twins */
    unsigned char *mark = calloc(n, 1);
    if (!v || !open || !last || !pairs_buf || !twin || !mark) {
        free(v);
        free(open);
        free(last);
        free(pairs_buf);
        free(twin);
        free(mark);
        return CPROF_E_NOMEM;
    }
    nbe = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].ph == 'B' || ev[i].ph == 'E') v[nbe++] = (keyed){ev[i].pid, ev[i].tid, ev[i].ts_ns, i};
    /* by thread and time; at one time, in the order written (the Trace Event Format's rule:
     * an E ends the latest B still open on its thread) */
    qsort(v, nbe, sizeof *v, cmp_keyed);
    size_t *pb = pairs_buf, *pe = pairs_buf + nbe, *tw = twin, ntw;
    int twice;
    size_t pairs = pair_pass(ev, v, nbe, text, open, last, pb, pe, tw, &ntw, mark, &twice);
    if (!twice) {
        /* not read as written twice: it may be one whose ranges touch (E_fwd B_bwd E_fwd
         * B_bwd at an instant); the pairing of the copies grouped is taken only if in it every
         * pair has its twin, else the order written stands (grouping may change the pairing
         * of a trace that repeats an event at one instant truly) */
        keyed *g = v + nbe;
        memcpy(g, v, nbe * sizeof *v);
        if (group_copies(ev, g, nbe, text)) {
            size_t *pb2 = pairs_buf + 2 * nbe, *pe2 = pairs_buf + 3 * nbe, *tw2 = twin + nbe, ntw2;
            size_t pairs2 =
                pair_pass(ev, g, nbe, text, open, last, pb2, pe2, tw2, &ntw2, mark, &twice);
            if (twice) {
                pb = pb2;
                pe = pe2;
                tw = tw2;
                pairs = pairs2;
                ntw = ntw2;
            }
        }
    }
    for (size_t k = 0; k < pairs; k++) {
        ev[pb[k]].ph = 'X';
        ev[pb[k]].dur_ns = ev[pe[k]].ts_ns - ev[pb[k]].ts_ns;
        ev[pe[k]].ph = 0; /* its end is the range's end now */
    }
    /* A recursion within one µs writes such a twin truly (whole-µs traces): twins are taken
     * for repeats only where the trace was written twice, by the evidence of its other
     * events (decision 117 found repeated X / flow events) or of its pairs (pair_pass) */
    if (ntw && (repeats || twice))
        for (size_t k = 0; k < ntw; k++) {
            ev[tw[k]].skip = CPROF_TSKIP_DUPLICATE; /* both events counted, as repeats */
            ev[tw[k]].ph = 0;
            ev[tw[k]].kind = CPROF_TK_OTHER;
        }
    free(v);
    free(open);
    free(last);
    free(pairs_buf);
    free(twin);
    free(mark);
    return CPROF_OK;
}
