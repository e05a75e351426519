/* GPU utilisation of a parsed trace: busy time per device and stream (union of kernel, copy
 * and set intervals), the idle time between them classified by cause, the largest gaps with
 * what the CPU was doing, and a binned timeline per device. Part of `cprof report`
 * (trace_analyse.c assembles the report). Pure C on caller-owned data: any thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

typedef struct op {
    int64_t s, e;
    int32_t dev, stream;
    uint32_t idx;
} op;

typedef struct gap {
    int64_t s, e;
    int32_t dev;
    int kind, launching;
    int64_t before, after; /* event indices, -1: none */
} gap;

/* unknown: no evidence either way (the next op's launch is not in the trace, or no op
 * follows: the gap after the last one) */
enum { GAP_HOST, GAP_SYNC, GAP_SHORT, GAP_OTHER, GAP_UNKNOWN, GAP_KINDS };
static const char *const gap_kind_names[GAP_KINDS] = {"host", "sync", "short", "other",
                                                      "unknown"};

/* The device and stream of a GPU op: args first, else Kineto's pid (device) / tid (stream);
 * string tids (no stream number) are stream 0. */
static int32_t op_device(const cprof_tev *e) {
    if (e->device >= 0) return e->device;
    return (!CPROF_TEV_IS_STR(e->pid) && e->pid >= 0 && e->pid < 1024) ? (int32_t)e->pid : 0;
}

static int32_t op_stream(const cprof_tev *e) {
    if (e->stream >= 0) return e->stream;
    return (!CPROF_TEV_IS_STR(e->tid) && e->tid >= 0 && e->tid < INT32_MAX) ? (int32_t)e->tid : 0;
}

static int cmp_dev_start(const void *a, const void *b) {
    const op *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return (x->e > y->e) - (x->e < y->e);
}

static int cmp_stream_start(const void *a, const void *b) {
    const op *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    return (x->s > y->s) - (x->s < y->s);
}

typedef cprof_ival span;

int cprof_ival_cmp(const void *a, const void *b) {
    const cprof_ival *x = a, *y = b;
    return (x->s > y->s) - (x->s < y->s);
}

int cprof_trace_is_gpu_op(const cprof_tev *e) {
    return e->ph == 'X' && (e->kind == CPROF_TK_KERNEL || e->kind == CPROF_TK_MEMCPY ||
                            e->kind == CPROF_TK_MEMSET);
}

static int name_contains(const cprof_trace *t, uint32_t id, const char *needle) {
    size_t n;
    const char *s = cprof_trace_str(t, id, &n);
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, needle, m) == 0) return 1;
    return 0;
}

/* CPU-side waits: CUPTI sync records and *Synchronize API calls. */
int cprof_trace_is_sync(const cprof_trace *t, const cprof_tev *e) {
    if (e->ph != 'X' || e->dur_ns < 0) return 0;
    if (e->kind == CPROF_TK_SYNC) return 1;
    return (e->kind == CPROF_TK_RUNTIME || e->kind == CPROF_TK_DRIVER) &&
           name_contains(t, e->name, "Synchronize");
}

/* correlation id -> index of the API call that launched it (the first call of an id wins) */
typedef struct corr_map {
    cprof_keyidx idx;
    uint32_t *event;
} corr_map;

static int corr_launches(const cprof_trace *t, corr_map *m) {
    size_t n = cprof_trace_nevents(t), count = 0;
    const cprof_tev *ev = cprof_trace_events(t);
    for (size_t i = 0; i < n; i++)
        if ((ev[i].kind == CPROF_TK_RUNTIME || ev[i].kind == CPROF_TK_DRIVER) &&
            ev[i].correlation != CPROF_TEV_NONE)
            count++;
    if (cprof_keyidx_init(&m->idx, count)) return CPROF_E_NOMEM;
    m->event = malloc((count ? count : 1) * sizeof *m->event);
    if (!m->event) return CPROF_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (e->kind != CPROF_TK_RUNTIME && e->kind != CPROF_TK_DRIVER) continue;
        int added;
        int64_t slot = cprof_keyidx_put(&m->idx, e->correlation, &added);
        if (added) m->event[slot] = (uint32_t)i;
    }
    return CPROF_OK;
}

static int64_t corr_get(const corr_map *m, int64_t corr) {
    int64_t slot = cprof_keyidx_get(&m->idx, corr);
    return slot < 0 ? -1 : (int64_t)m->event[slot];
}

/* The first of the n sync intervals (sorted by start) that starts at or after t. */
static size_t first_start_from(const span *sy, size_t n, int64_t t) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sy[mid].s < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static cJSON *add_obj(cJSON *arr) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddItemToArray(arr, o);
    return o;
}

static double us(int64_t ns) { return (double)ns / 1000.0; }

static double pct(int64_t part, int64_t whole) {
    return whole > 0 ? (double)(int64_t)(10000.0 * (double)part / (double)whole + 0.5) / 100.0 : 0.0;
}

static void add_name(cJSON *o, const char *key, const cprof_trace *t, int64_t idx) {
    if (idx < 0) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    char *c = cprof_trace_json(t, cprof_trace_events(t)[idx].name);
    if (!c) return;
    cJSON_AddRawToObject(o, key, c);
    free(c);
}

typedef struct cand {
    int64_t overlap, dur;
    uint32_t idx;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return (x->dur > y->dur) - (x->dur < y->dur);
}

/* most of the gap first; of those covering as much, the innermost (shortest) */
static int cmp_cand_cover(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->overlap != y->overlap) return x->overlap < y->overlap ? 1 : -1;
    return cmp_cand(a, b);
}

static int is_cpu_activity(const cprof_tev *e) {
    switch (e->kind) {
    case CPROF_TK_CPU_OP:
    case CPROF_TK_USER_ANNOTATION:
    case CPROF_TK_PYTHON_FUNCTION:
    case CPROF_TK_RUNTIME:
    case CPROF_TK_DRIVER:
    case CPROF_TK_SYNC: return e->ph == 'X' && e->dur_ns >= 0;
    default: return 0;
    }
}

/* The CPU events covering the gap (each at least a tenth of it; at most 4, the innermost
 * first): the innermost ones covering half of it or more (a step range covers every gap in
 * it, the DataLoader range inside it is the answer), then the ones covering most; the one
 * covering most is always among them. */
static void gap_cpu(const cprof_trace *t, const gap *g, cJSON *o) {
    cJSON *arr = cJSON_AddArrayToObject(o, "cpu");
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t), nc = 0, cap = 64;
    cand *c = malloc(cap * sizeof *c);
    if (!c || !arr) {
        free(c);
        return;
    }
    int64_t need = (g->e - g->s) / 10;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (!is_cpu_activity(e)) continue;
        int64_t s = e->ts_ns > g->s ? e->ts_ns : g->s;
        int64_t en = e->ts_ns + e->dur_ns < g->e ? e->ts_ns + e->dur_ns : g->e;
        if (en - s <= need || en <= s) continue;
        if (nc == cap) {
            cand *nb = realloc(c, cap * 2 * sizeof *c);
            if (!nb) break;
            c = nb;
            cap *= 2;
        }
        c[nc++] = (cand){en - s, e->dur_ns, (uint32_t)i};
    }
    qsort(c, nc, sizeof *c, cmp_cand_cover);
    if (nc > 4) {
        /* c[0] covers most; then the innermost of those covering half or more, then the
         * next by cover */
        size_t half = 1;
        while (half < nc && 2 * c[half].overlap >= g->e - g->s) half++;
        if (half > 4) qsort(c + 1, half - 1, sizeof *c, cmp_cand);
        nc = 4;
    }
    qsort(c, nc, sizeof *c, cmp_cand);
    for (size_t i = 0; i < nc; i++) {
        cJSON *r = add_obj(arr);
        if (!r) break;
        add_name(r, "name", t, c[i].idx);
        size_t cn;
        const char *cat = cprof_trace_str(t, ev[c[i].idx].cat, &cn);
        char cbuf[64];
        snprintf(cbuf, sizeof cbuf, "%.*s", (int)(cn < 63 ? cn : 63), cat);
        cJSON_AddStringToObject(r, "cat", cbuf);
        cJSON_AddNumberToObject(r, "overlap_us", us(c[i].overlap));
        cJSON_AddNumberToObject(r, "dur_us", us(c[i].dur));
    }
    free(c);
}

/* The cause of the idle piece [s, e) (no CPU wait in it) before the op `first` (-1: none
 * follows): the op's launch call had not returned when the piece began: waiting on the host;
 * then a short gap between two ops; then no launch to judge by: unknown; else the work was
 * queued: other. *launching: the launch call fills LAUNCH_DENSITY_PCT of a host piece (the
 * CPU was issuing work, not busy elsewhere: data loading, logging, Python). */
#define LAUNCH_DENSITY_PCT 3
static int piece_kind(const cprof_tev *ev, const corr_map *cm, int64_t first, int64_t prev_last,
                      int64_t s, int64_t e, int64_t short_ns, int *launching) {
    *launching = 0;
    if (first < 0) return GAP_UNKNOWN;
    int64_t launch = corr_get(cm, ev[first].correlation);
    if (launch >= 0) {
        int64_t ls = ev[launch].ts_ns, le = ls + (ev[launch].dur_ns > 0 ? ev[launch].dur_ns : 0);
        if (le > s) {
            int64_t a = ls > s ? ls : s, b = le < e ? le : e;
            /* in doubles: times reach 2^61 ns, a hundredfold overflows (found by the fuzzer) */
            *launching = b > a && (double)(b - a) * 100.0 >= (double)(e - s) * LAUNCH_DENSITY_PCT;
            return GAP_HOST;
        }
    }
    if (e - s < short_ns && prev_last >= 0) return GAP_SHORT;
    return launch < 0 ? GAP_UNKNOWN : GAP_OTHER;
}

static void keep_largest(gap *top, int *ntop, int cap, const gap *g) {
    int64_t d = g->e - g->s;
    int pos = *ntop;
    while (pos > 0 && top[pos - 1].e - top[pos - 1].s < d) pos--;
    if (pos >= cap) return;
    int last = *ntop < cap ? *ntop : cap - 1;
    memmove(&top[pos + 1], &top[pos], (size_t)(last - pos) * sizeof *top);
    top[pos] = *g;
    if (*ntop < cap) (*ntop)++;
}

/* One device's idle time being classified. */
typedef struct gap_state {
    const cprof_tev *ev;
    const corr_map *cm;
    const span *sy;
    const int64_t *pmax;
    size_t nsync;
    int64_t short_ns;
    int32_t dev;
    int64_t idle[GAP_KINDS];
    int64_t launching; /* host idle while the next work's launch call filled the piece */
    gap *top;
    int *ntop, cap;
} gap_state;

static void idle_piece(gap_state *st, int64_t s, int64_t e, int64_t prev_last, int64_t first,
                       int sync) {
    if (e <= s) return;
    int launching = 0;
    int kind = sync ? GAP_SYNC
                    : piece_kind(st->ev, st->cm, first, prev_last, s, e, st->short_ns, &launching);
    gap g = {s, e, st->dev, kind, launching, prev_last, first};
    st->idle[kind] += e - s;
    if (launching) st->launching += e - s;
    keep_largest(st->top, st->ntop, st->cap, &g);
}

/* The idle gap [s, e) between prev_last and first (-1: none): the parts the CPU spent waiting
 * (syncs) are idle after syncs; each stretch before, between and after them has its own cause
 * (the GPU idle while the CPU loads data after a `.item()` is the host's, not the sync's,
 * also when the next step's wait begins before the gap ends). The waits begun before s are
 * one stretch from s to the latest of their ends (pmax, prefix max of ends: one binary
 * search, so a long wait spanning many gaps is not walked to from each); those begun inside
 * the gap are walked, each once per device, as the gaps of one device do not overlap. */
/* Classifies [p, ws) by its own cause and the wait stretch [ws, min(we, e)) as after syncs;
 * returns where classification has reached. */
static int64_t wait_stretch(gap_state *st, int64_t p, int64_t ws, int64_t we, int64_t e,
                            int64_t prev_last, int64_t first) {
    int64_t end = we < e ? we : e;
    idle_piece(st, p, ws, prev_last, first, 0);
    idle_piece(st, ws, end, prev_last, first, 1);
    return end;
}

static void idle_gap(gap_state *st, int64_t s, int64_t e, int64_t prev_last, int64_t first) {
    size_t lo = first_start_from(st->sy, st->nsync, s);
    size_t hi = first_start_from(st->sy, st->nsync, e);
    int64_t p = s; /* classified up to p */
    int open = lo > 0 && st->pmax[lo - 1] > s;
    int64_t ws = s, we = open ? st->pmax[lo - 1] : s; /* the wait stretch being gathered */
    for (size_t i = lo; i < hi; i++) {
        const span *w = &st->sy[i];
        if (open && w->s <= we) { /* overlaps or touches the stretch: one wait */
            if (w->e > we) we = w->e;
            continue;
        }
        if (open) p = wait_stretch(st, p, ws, we, e, prev_last, first);
        ws = w->s;
        we = w->e;
        open = 1;
    }
    if (open) p = wait_stretch(st, p, ws, we, e, prev_last, first);
    idle_piece(st, p, e, prev_last, first, 0);
}

int cprof_gaps_report(const cprof_trace *t, const cprof_report_opts *o, int64_t win0,
                      int64_t win1, cJSON *root) {
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t), nops = 0, nsync = 0;
    for (size_t i = 0; i < n; i++) {
        if (cprof_trace_is_gpu_op(&ev[i]) && ev[i].dur_ns >= 0) nops++;
        else if (cprof_trace_is_sync(t, &ev[i])) nsync++;
    }
    cJSON *devices = cJSON_AddArrayToObject(root, "devices");
    cJSON *gaps_out = cJSON_AddArrayToObject(root, "gaps");
    if (!devices || !gaps_out) return CPROF_E_NOMEM;
    if (nops == 0) return CPROF_OK;
    int rc = CPROF_E_NOMEM;
    int top_cap = o->top > 0 ? o->top : 10;
    op *ops = malloc(nops * sizeof *ops);
    span *sy = malloc((nsync ? nsync : 1) * sizeof *sy);
    int64_t *pmax = malloc((nsync ? nsync : 1) * sizeof *pmax);
    gap *top = malloc((size_t)top_cap * sizeof *top);
    corr_map cm = {0};
    if (!ops || !sy || !pmax || !top || corr_launches(t, &cm)) goto out;
    size_t k = 0, ks = 0;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (cprof_trace_is_gpu_op(e) && e->dur_ns >= 0) {
            ops[k++] = (op){e->ts_ns, e->ts_ns + e->dur_ns, op_device(e), op_stream(e), (uint32_t)i};
        } else if (cprof_trace_is_sync(t, e)) {
            sy[ks++] = (span){e->ts_ns, e->ts_ns + e->dur_ns};
        }
    }
    qsort(sy, nsync, sizeof *sy, cprof_ival_cmp);
    for (size_t i = 0; i < nsync; i++) pmax[i] = i && pmax[i - 1] > sy[i].e ? pmax[i - 1] : sy[i].e;

    /* per stream busy time (union per stream) */
    qsort(ops, nops, sizeof *ops, cmp_stream_start);
    typedef struct sstat {
        int32_t dev, stream;
        int64_t busy;
        uint64_t ops;
    } sstat;
    size_t nst = 0;
    sstat *streams = malloc(nops * sizeof *streams);
    if (!streams) goto out;
    for (size_t i = 0; i < nops;) {
        size_t j = i;
        int64_t busy = 0, cs = ops[i].s, ce = ops[i].e;
        for (; j < nops && ops[j].dev == ops[i].dev && ops[j].stream == ops[i].stream; j++) {
            if (ops[j].s > ce) {
                busy += ce - cs;
                cs = ops[j].s;
                ce = ops[j].e;
            } else if (ops[j].e > ce) {
                ce = ops[j].e;
            }
        }
        busy += ce - cs;
        streams[nst++] = (sstat){ops[i].dev, ops[i].stream, busy, (uint64_t)(j - i)};
        i = j;
    }

    /* per device: union, gaps, timeline */
    qsort(ops, nops, sizeof *ops, cmp_dev_start);
    int ntop = 0;
    int bins = o->bins > 0 ? o->bins : 100;
    int64_t wdur = win1 > win0 ? win1 - win0 : 1;
    double *binv = calloc((size_t)bins, sizeof *binv);
    if (!binv) {
        free(streams);
        goto out;
    }
    size_t si = 0;
    for (size_t i = 0; i < nops;) {
        int32_t dev = ops[i].dev;
        int64_t busy = 0, kernels = 0;
        gap_state gs = {ev, &cm, sy, pmax, nsync, o->short_gap_ns, dev, {0}, 0, top, &ntop,
                        top_cap};
        const int64_t *idle = gs.idle;
        memset(binv, 0, (size_t)bins * sizeof *binv);
        int64_t prev_end = win0, prev_last = -1; /* prev_last: the op that ended the last segment */
        size_t j = i;
        while (j < nops && ops[j].dev == dev) {
            /* one busy segment: ops overlapping or touching, merged */
            int64_t cs = ops[j].s, ce = ops[j].e, first = ops[j].idx, seg_last = ops[j].idx;
            for (; j < nops && ops[j].dev == dev && ops[j].s <= ce; j++) {
                if (ev[ops[j].idx].kind == CPROF_TK_KERNEL) kernels++;
                if (ops[j].e > ce) {
                    ce = ops[j].e;
                    seg_last = ops[j].idx;
                }
            }
            if (cs > prev_end) /* the idle gap before this segment, classified */
                idle_gap(&gs, prev_end, cs, prev_last, first);
            busy += ce - cs;
            /* the timeline: the segment's overlap with each bin */
            int64_t a = cs < win0 ? win0 : cs, b = ce > win1 ? win1 : ce;
            if (b > a) {
                int b0 = (int)((double)(a - win0) * bins / (double)wdur);
                int b1 = (int)((double)(b - 1 - win0) * bins / (double)wdur);
                if (b1 >= bins) b1 = bins - 1;
                if (b0 < 0) b0 = 0;
                for (int q = b0; q <= b1; q++) {
                    int64_t q0 = win0 + (int64_t)((double)wdur * q / bins);
                    int64_t q1 = win0 + (int64_t)((double)wdur * (q + 1) / bins);
                    int64_t x0 = a > q0 ? a : q0, x1 = b < q1 ? b : q1;
                    if (x1 > x0 && q1 > q0) binv[q] += (double)(x1 - x0) / (double)(q1 - q0);
                }
            }
            prev_end = ce;
            prev_last = seg_last;
        }
        if (win1 > prev_end) /* after the last GPU work: no launch follows to judge by */
            idle_gap(&gs, prev_end, win1, prev_last, -1);
        cJSON *d = add_obj(devices);
        if (!d) goto out_bins;
        cJSON_AddNumberToObject(d, "device", dev);
        cJSON_AddNumberToObject(d, "busy_us", us(busy));
        cJSON_AddNumberToObject(d, "util_pct", pct(busy, wdur));
        cJSON_AddNumberToObject(d, "kernels", (double)kernels);
        cJSON *sarr = cJSON_AddArrayToObject(d, "streams");
        for (; si < nst && streams[si].dev == dev; si++) {
            cJSON *so = add_obj(sarr);
            if (!so) goto out_bins;
            cJSON_AddNumberToObject(so, "stream", streams[si].stream);
            cJSON_AddNumberToObject(so, "busy_us", us(streams[si].busy));
            cJSON_AddNumberToObject(so, "util_pct", pct(streams[si].busy, wdur));
            cJSON_AddNumberToObject(so, "ops", (double)streams[si].ops);
        }
        cJSON *id = cJSON_AddObjectToObject(d, "idle");
        int64_t itotal = 0;
        for (int q = 0; q < GAP_KINDS; q++) itotal += idle[q];
        cJSON_AddNumberToObject(id, "total_us", us(itotal));
        for (int q = 0; q < GAP_KINDS; q++) {
            char key[16];
            snprintf(key, sizeof key, "%s_us", gap_kind_names[q]);
            cJSON_AddNumberToObject(id, key, us(idle[q]));
        }
        /* of host_us: the CPU was issuing the next work (launch-bound), not busy elsewhere */
        cJSON_AddNumberToObject(id, "host_launching_us", us(gs.launching));
        cJSON *tl = cJSON_AddObjectToObject(d, "timeline");
        cJSON_AddNumberToObject(tl, "start_us", us(win0));
        cJSON_AddNumberToObject(tl, "bin_us", us(wdur) / bins);
        cJSON *bp = cJSON_AddArrayToObject(tl, "busy_pct");
        for (int q = 0; q < bins; q++) {
            double v = binv[q] * 100.0;
            cJSON_AddItemToArray(bp, cJSON_CreateNumber((double)(int64_t)(v * 10 + 0.5) / 10));
        }
        i = j;
    }
    for (int q = 0; q < ntop; q++) {
        cJSON *g = add_obj(gaps_out);
        if (!g) goto out_bins;
        cJSON_AddNumberToObject(g, "device", top[q].dev);
        int64_t ref = top[q].after >= 0 ? top[q].after : top[q].before;
        if (ref >= 0) cJSON_AddNumberToObject(g, "stream", op_stream(&ev[ref]));
        else cJSON_AddNullToObject(g, "stream");
        cJSON_AddNumberToObject(g, "start_us", us(top[q].s));
        cJSON_AddNumberToObject(g, "dur_us", us(top[q].e - top[q].s));
        cJSON_AddStringToObject(g, "kind", gap_kind_names[top[q].kind]);
        if (top[q].kind == GAP_HOST) cJSON_AddBoolToObject(g, "launching", top[q].launching);
        add_name(g, "before", t, top[q].before);
        add_name(g, "after", t, top[q].after);
        gap_cpu(t, &top[q], g);
    }
    rc = CPROF_OK;
out_bins:
    free(binv);
    free(streams);
out:
    free(ops);
    free(sy);
    free(pmax);
    free(top);
    cprof_keyidx_free(&cm.idx);
    free(cm.event);
    return rc;
}
