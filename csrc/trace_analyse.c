/* The report of one parsed trace (cprof report): kernel and CUDA API summaries as `nsys stats`
 * prints them, memory operations by kind, GPU time attributed to the CPU ranges, modules and
 * steps that launched it, compiled-region nesting, collectives; utilisation and gaps come from
 * trace_gaps.c. Output is JSON (cJSON); the words (diagnoses) are added in Python from it.
 * Pure C on caller-owned data: any thread. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

static double us(int64_t ns) { return (double)ns / 1000.0; }

/* Totals of durations and byte counts saturate. Each value read is bounded (+-2^61 ns, see
 * trace_read.c) but four of them from a corrupt file overflow int64, undefined behaviour
 * (found by fuzzing: two copies with args.bytes 1e308, read as INT64_MAX). */
static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

static int starts_with(const cprof_trace *t, uint32_t id, const char *prefix) {
    size_t n, m = strlen(prefix);
    const char *s = cprof_trace_str(t, id, &n);
    return n >= m && memcmp(s, prefix, m) == 0;
}

/* A CPU-side collective whose range lasts as long as the collective, waiting for the other
 * ranks included: torch's gloo / MPI / UCC process groups (their RecordFunctions end when the
 * work completes). NCCL's CPU range ends at the enqueue: its kernels are the collective. */
static int host_collective(const cprof_trace *t, const cprof_tev *e) {
    return (e->kind == CPROF_TK_CPU_OP || e->kind == CPROF_TK_USER_ANNOTATION) &&
           (starts_with(t, e->name, "gloo:") || starts_with(t, e->name, "mpi:") ||
            starts_with(t, e->name, "ucc:"));
}

/* The host collectives' count and the time they cover (their union: async collectives
 * overlap). 0 or CPROF_E_NOMEM. */
static int host_collectives(const cprof_trace *t, const cprof_tev *ev, size_t n, uint64_t *count,
                            int64_t *covered) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].ph == 'X' && ev[i].dur_ns >= 0 && host_collective(t, &ev[i])) m++;
    *count = m;
    *covered = 0;
    if (!m) return CPROF_OK;
    cprof_ival *v = malloc(m * sizeof *v);
    if (!v) return CPROF_E_NOMEM;
    m = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].ph == 'X' && ev[i].dur_ns >= 0 && host_collective(t, &ev[i]))
            v[m++] = (cprof_ival){ev[i].ts_ns, sat_add(ev[i].ts_ns, ev[i].dur_ns)};
    qsort(v, m, sizeof *v, cprof_ival_cmp);
    int64_t cs = v[0].s, ce = v[0].e;
    for (size_t i = 1; i < m; i++) {
        if (v[i].s > ce) {
            *covered = sat_add(*covered, ce - cs);
            cs = v[i].s;
            ce = v[i].e;
        } else if (v[i].e > ce) {
            ce = v[i].e;
        }
    }
    *covered = sat_add(*covered, ce - cs);
    free(v);
    return CPROF_OK;
}

/* cprof's span of its window: category "Trace", with cprof's "cprof window" arg (Kineto's
 * span, in torch's traces and in merges of them, has none). */
static int is_cprof_span(const cprof_trace *t, const cprof_tev *e) {
    if (!e->cat) return 0;
    size_t n, tl;
    const char *s = cprof_trace_str(t, e->cat, &n);
    if (n != 5 || memcmp(s, "Trace", 5) != 0) return 0;
    const char *text = cprof_trace_text(t, &tl);
    static const char key[] = "\"cprof window\"";
    size_t m = sizeof key - 1;
    if (!text || e->raw_off + e->raw_len > tl) return 0;
    for (uint64_t i = e->raw_off; i + m <= e->raw_off + e->raw_len; i++)
        if (memcmp(text + i, key, m) == 0) return 1;
    return 0;
}

static int contains_ci(const cprof_trace *t, uint32_t id, const char *needle) {
    size_t n, m = strlen(needle);
    const char *s = cprof_trace_str(t, id, &n);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && (s[i + k] | 0x20) == needle[k]) k++;
        if (k == m) return 1;
    }
    return 0;
}

static void add_str(cJSON *o, const char *key, const cprof_trace *t, uint32_t id) {
    char *c = cprof_trace_json(t, id);
    if (!c) return;
    cJSON_AddRawToObject(o, key, c);
    free(c);
}

/* ---- per-name duration statistics (kernels, API calls) ---- */

typedef struct named_dur {
    uint32_t name;
    int32_t occ;                /* kernels: est. achieved occupancy %, -1 unknown */
    int64_t dur;
} named_dur;

static int cmp_named_dur(const void *a, const void *b) {
    const named_dur *x = a, *y = b;
    if (x->name != y->name) return x->name < y->name ? -1 : 1;
    return (x->dur > y->dur) - (x->dur < y->dur);
}

typedef struct stat_row {
    uint32_t name;
    uint64_t n;
    int64_t total, min, max;
    double med, sd;
    double occ;                 /* duration-weighted occupancy of the instances that have one;
                                   -1 when none has */
} stat_row;

static int cmp_row_total(const void *a, const void *b) {
    const stat_row *x = a, *y = b;
    if (x->total != y->total) return x->total < y->total ? 1 : -1;
    return (x->name > y->name) - (x->name < y->name);
}

/* Rows of Time %, Total, Instances, Avg, Med, Min, Max, StdDev (sample), Name; top rows kept;
 * with_occ: and the estimated achieved occupancy (kernels), weighted by duration.
 * *sum: the total over every name, *count: instances, *distinct: names. */
static int stats_table(const cprof_trace *t, named_dur *v, size_t n, int top, int with_occ,
                       cJSON *arr, int64_t *sum, uint64_t *count, uint64_t *distinct) {
    qsort(v, n, sizeof *v, cmp_named_dur);
    stat_row *rows = malloc((n ? n : 1) * sizeof *rows);
    if (!rows) return CPROF_E_NOMEM;
    size_t nr = 0;
    int64_t all = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t tot = 0;
        while (j < n && v[j].name == v[i].name) tot = sat_add(tot, v[j++].dur);
        uint64_t k = j - i;
        double mean = (double)tot / (double)k, ss = 0, occ_w = 0, occ_dur = 0, occ_sum = 0;
        uint64_t occ_n = 0;
        for (size_t q = i; q < j; q++) {
            ss += ((double)v[q].dur - mean) * ((double)v[q].dur - mean);
            if (v[q].occ >= 0) {
                occ_w += (double)v[q].occ * (double)v[q].dur;
                occ_dur += (double)v[q].dur;
                occ_sum += v[q].occ;
                occ_n++;
            }
        }
        /* weighted by duration (what the GPU time ran at); a plain mean if all last 0 ns */
        double occ = !occ_n ? -1.0 : occ_dur > 0 ? occ_w / occ_dur : occ_sum / (double)occ_n;
        double med = k % 2 ? (double)v[i + k / 2].dur
                           : ((double)v[i + k / 2 - 1].dur + (double)v[i + k / 2].dur) / 2.0;
        rows[nr++] = (stat_row){v[i].name, k, tot, v[i].dur, v[j - 1].dur, med,
                                k > 1 ? sqrt(ss / (double)(k - 1)) : 0.0, occ};
        all = sat_add(all, tot);
        i = j;
    }
    qsort(rows, nr, sizeof *rows, cmp_row_total);
    for (size_t i = 0; i < nr && (top <= 0 || i < (size_t)top); i++) {
        cJSON *r = cJSON_CreateObject();
        if (!r) break;
        cJSON_AddItemToArray(arr, r);
        stat_row *s = &rows[i];
        add_str(r, "name", t, s->name);
        cJSON_AddNumberToObject(r, "time_pct",
                                all ? round(10000.0 * (double)s->total / (double)all) / 100.0 : 0.0);
        cJSON_AddNumberToObject(r, "total_us", us(s->total));
        cJSON_AddNumberToObject(r, "instances", (double)s->n);
        cJSON_AddNumberToObject(r, "avg_us", round((double)s->total / (double)s->n) / 1000.0);
        cJSON_AddNumberToObject(r, "med_us", round(s->med) / 1000.0);
        cJSON_AddNumberToObject(r, "min_us", us(s->min));
        cJSON_AddNumberToObject(r, "max_us", us(s->max));
        cJSON_AddNumberToObject(r, "stddev_us", round(s->sd) / 1000.0);
        if (with_occ) {
            if (s->occ >= 0) cJSON_AddNumberToObject(r, "occupancy_pct", round(s->occ * 10) / 10);
            else cJSON_AddNullToObject(r, "occupancy_pct");
        }
    }
    *sum = all;
    *count = n;
    *distinct = nr;
    free(rows);
    return CPROF_OK;
}

/* ---- memory operations by kind ---- */

enum { MEM_HTOD, MEM_DTOH, MEM_DTOD, MEM_HTOH, MEM_PTOP, MEM_SET, MEM_OTHER, MEM_KINDS };
static const char *const mem_names[MEM_KINDS] = {"HtoD", "DtoH", "DtoD", "HtoH",
                                                 "PtoP", "memset", "other"};

static int mem_kind(const cprof_trace *t, const cprof_tev *e) {
    if (e->kind == CPROF_TK_MEMSET) return MEM_SET;
    size_t n;
    const char *s = cprof_trace_str(t, e->name, &n);
    for (size_t i = 0; i + 4 <= n; i++) {
        if (memcmp(s + i, "HtoD", 4) == 0) return MEM_HTOD;
        if (memcmp(s + i, "DtoH", 4) == 0) return MEM_DTOH;
        if (memcmp(s + i, "DtoD", 4) == 0) return MEM_DTOD;
        if (memcmp(s + i, "HtoH", 4) == 0) return MEM_HTOH;
        if (memcmp(s + i, "PtoP", 4) == 0) return MEM_PTOP;
    }
    return MEM_OTHER;
}

static void memory_table(const cprof_trace *t, const cprof_report_opts *o, cJSON *root) {
    struct {
        uint64_t count, pageable, small;
        int64_t bytes, time;
    } m[MEM_KINDS] = {{0}};
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t);
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (e->ph != 'X' || (e->kind != CPROF_TK_MEMCPY && e->kind != CPROF_TK_MEMSET)) continue;
        int k = mem_kind(t, e);
        int64_t bytes = e->bytes == CPROF_TEV_NONE ? 0 : e->bytes;
        m[k].count++;
        m[k].bytes = sat_add(m[k].bytes, bytes);
        m[k].time = sat_add(m[k].time, e->dur_ns > 0 ? e->dur_ns : 0);
        if (k != MEM_SET && contains_ci(t, e->name, "pageable")) m[k].pageable++;
        if (k != MEM_SET && e->bytes != CPROF_TEV_NONE && bytes < o->small_copy_bytes) m[k].small++;
    }
    cJSON *arr = cJSON_AddArrayToObject(root, "memory");
    for (int k = 0; k < MEM_KINDS && arr; k++) {
        if (!m[k].count) continue;
        cJSON *r = cJSON_CreateObject();
        if (!r) return;
        cJSON_AddItemToArray(arr, r);
        cJSON_AddStringToObject(r, "kind", mem_names[k]);
        cJSON_AddNumberToObject(r, "count", (double)m[k].count);
        cJSON_AddNumberToObject(r, "bytes", (double)m[k].bytes);
        cJSON_AddNumberToObject(r, "total_us", us(m[k].time));
        /* bytes per ns is GB/s */
        cJSON_AddNumberToObject(r, "gbps", m[k].time > 0
                                               ? round(1000.0 * (double)m[k].bytes / (double)m[k].time) / 1000.0
                                               : 0.0);
        cJSON_AddNumberToObject(r, "pageable", (double)m[k].pageable);
        cJSON_AddNumberToObject(r, "small", (double)m[k].small);
    }
}

/* ---- GPU time attributed to the CPU ranges enclosing each launch ---- */

typedef struct item {
    int64_t pid, tid, ts, dur;
    uint32_t idx;
    uint8_t is_launch;
} item;

static int cmp_item(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->is_launch != y->is_launch) return x->is_launch ? 1 : -1; /* a range opens first */
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;            /* the parent first */
    return (x->idx > y->idx) - (x->idx < y->idx);
}

typedef struct agg {
    uint64_t calls, kernels;
    int64_t cpu, gpu;
    uint8_t kind;
} agg;

typedef struct frame {
    uint32_t idx;
    int64_t end, gpu;
    uint64_t kernels;
    uint8_t outermost, compiled, is_step;
} frame;

typedef struct step {
    uint32_t name;
    int64_t pid, tid, num, start, cpu, gpu;
    uint64_t kernels;
} step;

typedef struct attribution {
    const char *step_name; /* NULL: ProfilerStep#N */
    size_t step_name_len;
    agg *by_name; /* indexed by string id */
    uint32_t nnames;
    step *steps;
    size_t nsteps, capsteps;
    uint64_t regions, nested, max_depth, compiled_functions;
    int64_t unattributed_gpu;
    int64_t step_until; /* the end of the latest step on the thread swept: a range named like
                         * the steps that lies inside it is part of that step and no step of
                         * its own (by time: torch's python_function frames do not nest
                         * properly around ProfilerStep#N, so the stack cannot tell); one that
                         * only starts before it ends (clocks or rounding make steps overlap
                         * by a little) is the next step */
} attribution;

/* GPU time and op count of each correlation id (kernels, copies, sets). */
typedef struct gpu_by_corr {
    cprof_keyidx idx;
    int64_t *ns;
    uint64_t *ops;
} gpu_by_corr;

static int gpu_map_build(const cprof_trace *t, gpu_by_corr *m) {
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t), count = 0;
    for (size_t i = 0; i < n; i++)
        if (cprof_trace_is_gpu_op(&ev[i]) && ev[i].correlation != CPROF_TEV_NONE) count++;
    if (cprof_keyidx_init(&m->idx, count)) return CPROF_E_NOMEM;
    m->ns = calloc(count ? count : 1, sizeof *m->ns);
    m->ops = calloc(count ? count : 1, sizeof *m->ops);
    if (!m->ns || !m->ops) return CPROF_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (!cprof_trace_is_gpu_op(e)) continue;
        int added;
        int64_t slot = cprof_keyidx_put(&m->idx, e->correlation, &added);
        if (slot < 0) continue;
        m->ns[slot] = sat_add(m->ns[slot], e->dur_ns > 0 ? e->dur_ns : 0);
        m->ops[slot]++;
    }
    return CPROF_OK;
}

static int64_t gpu_map_get(const gpu_by_corr *m, int64_t corr, uint64_t *ops) {
    int64_t slot = cprof_keyidx_get(&m->idx, corr);
    *ops = slot < 0 ? 0 : m->ops[slot];
    return slot < 0 ? -1 : m->ns[slot];
}

static int is_range(const cprof_tev *e) {
    return e->ph == 'X' && e->dur_ns >= 0 &&
           (e->kind == CPROF_TK_CPU_OP || e->kind == CPROF_TK_USER_ANNOTATION ||
            e->kind == CPROF_TK_PYTHON_FUNCTION);
}

static int64_t step_number(const cprof_trace *t, uint32_t name) {
    size_t n;
    const char *s = cprof_trace_str(t, name, &n);
    const size_t p = sizeof "ProfilerStep#" - 1;
    if (n <= p || memcmp(s, "ProfilerStep#", p) != 0) return -1;
    int64_t v = 0;
    for (size_t i = p; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* The step number of a range name, or -1: ProfilerStep#N, or any number for the user's own
 * step range (renumbered in time order after the sweep). */
static int64_t step_of(const cprof_trace *t, const attribution *a, uint32_t name) {
    if (!a->step_name) return step_number(t, name);
    size_t n;
    const char *s = cprof_trace_str(t, name, &n);
    return n == a->step_name_len && memcmp(s, a->step_name, n) == 0 ? 0 : -1;
}

static void pop_frame(const cprof_trace *t, attribution *a, frame *stack, size_t *depth,
                      uint32_t *active, uint64_t *compiled_depth) {
    const cprof_tev *ev = cprof_trace_events(t);
    frame *f = &stack[--*depth];
    const cprof_tev *e = &ev[f->idx];
    agg *g = &a->by_name[e->name];
    g->calls++;
    if (f->outermost) { /* recursion: count a name's time once */
        g->cpu = sat_add(g->cpu, e->dur_ns);
        g->gpu = sat_add(g->gpu, f->gpu);
        g->kernels += f->kernels;
    }
    active[e->name]--;
    if (f->compiled) (*compiled_depth)--;
    if (*depth) {
        stack[*depth - 1].gpu = sat_add(stack[*depth - 1].gpu, f->gpu);
        stack[*depth - 1].kernels += f->kernels;
    }
    if (f->is_step) {
        int64_t num = step_of(t, a, e->name);
        if (a->nsteps == a->capsteps) {
            size_t cap = a->capsteps ? a->capsteps * 2 : 64;
            step *ns = realloc(a->steps, cap * sizeof *ns);
            if (!ns) return; /* a step row lost to memory: the totals above still hold */
            a->steps = ns;
            a->capsteps = cap;
        }
        a->steps[a->nsteps++] =
            (step){e->name, e->pid, e->tid, num, e->ts_ns, e->dur_ns, f->gpu, f->kernels};
    }
}

typedef struct launch {
    int64_t pid, ts, gpu;
    uint64_t ops;
} launch;

static int cmp_launch(const void *a, const void *b) {
    const launch *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* A step's GPU work is every launch made in its time span by any thread of its process (the
 * backward pass runs on autograd threads), as HTA counts it: binary search over launches
 * sorted by (pid, ts) with prefix sums. Replaces the per-thread totals of the sweep. */
static int cmp_step_thread(const void *a, const void *b) {
    const step *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

static int steps_by_time(const cprof_trace *t, attribution *a, const gpu_by_corr *gm) {
    if (!a->nsteps) return CPROF_OK;
    /* in thread order, so a step that overlaps the next one on its thread hands it the
     * launches made after it started: none is counted in two steps */
    qsort(a->steps, a->nsteps, sizeof *a->steps, cmp_step_thread);
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t), nl = 0;
    for (size_t i = 0; i < n; i++)
        if ((ev[i].kind == CPROF_TK_RUNTIME || ev[i].kind == CPROF_TK_DRIVER) &&
            ev[i].correlation != CPROF_TEV_NONE)
            nl++;
    launch *l = malloc((nl + 1) * sizeof *l);
    if (!l) return CPROF_E_NOMEM;
    nl = 0;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if ((e->kind != CPROF_TK_RUNTIME && e->kind != CPROF_TK_DRIVER) ||
            e->correlation == CPROF_TEV_NONE)
            continue;
        uint64_t ops;
        int64_t g = gpu_map_get(gm, e->correlation, &ops);
        if (g >= 0) l[nl++] = (launch){e->pid, e->ts_ns, g, ops};
    }
    qsort(l, nl, sizeof *l, cmp_launch);
    for (size_t i = 1; i < nl; i++) { /* prefix sums, restarting at each process */
        if (l[i].pid != l[i - 1].pid) continue;
        l[i].gpu = sat_add(l[i].gpu, l[i - 1].gpu);
        l[i].ops += l[i - 1].ops;
    }
    for (size_t s = 0; s < a->nsteps; s++) {
        step *st = &a->steps[s];
        /* first launch >= (pid, start) and first >= (pid, end) */
        size_t bounds[2];
        int64_t keys[2] = {st->start, st->start + st->cpu};
        if (s + 1 < a->nsteps && st[1].pid == st->pid && st[1].tid == st->tid &&
            st[1].start < keys[1])
            keys[1] = st[1].start;
        for (int q = 0; q < 2; q++) {
            size_t lo = 0, hi = nl;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (l[mid].pid < st->pid || (l[mid].pid == st->pid && l[mid].ts < keys[q])) lo = mid + 1;
                else hi = mid;
            }
            bounds[q] = lo;
        }
        int64_t g0 = 0, g1 = 0;
        uint64_t o0 = 0, o1 = 0;
        if (bounds[1] > 0 && l[bounds[1] - 1].pid == st->pid) {
            g1 = l[bounds[1] - 1].gpu;
            o1 = l[bounds[1] - 1].ops;
        }
        if (bounds[0] > 0 && l[bounds[0] - 1].pid == st->pid) {
            g0 = l[bounds[0] - 1].gpu;
            o0 = l[bounds[0] - 1].ops;
        }
        st->gpu = g1 - g0;
        st->kernels = o1 - o0;
    }
    free(l);
    return CPROF_OK;
}

static int attribute(const cprof_trace *t, attribution *a) {
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t), ni = 0;
    gpu_by_corr gm = {0};
    int rc = gpu_map_build(t, &gm);
    item *items = NULL;
    uint32_t *active = NULL;
    frame *stack = NULL;
    if (rc) goto out;
    rc = CPROF_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (is_range(&ev[i]) || ((ev[i].kind == CPROF_TK_RUNTIME || ev[i].kind == CPROF_TK_DRIVER) &&
                                 ev[i].correlation != CPROF_TEV_NONE))
            ni++;
    items = malloc((ni ? ni : 1) * sizeof *items);
    active = calloc(a->nnames, sizeof *active);
    size_t cap = 256, depth = 0;
    stack = malloc(cap * sizeof *stack);
    if (!items || !active || !stack) goto out;
    ni = 0;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (is_range(e)) {
            items[ni++] = (item){e->pid, e->tid, e->ts_ns, e->dur_ns, (uint32_t)i, 0};
        } else if ((e->kind == CPROF_TK_RUNTIME || e->kind == CPROF_TK_DRIVER) &&
                   e->correlation != CPROF_TEV_NONE) {
            items[ni++] = (item){e->pid, e->tid, e->ts_ns, e->dur_ns, (uint32_t)i, 1};
        }
    }
    qsort(items, ni, sizeof *items, cmp_item);
    uint64_t compiled_depth = 0;
    for (size_t q = 0; q < ni; q++) {
        const item *it = &items[q];
        if (!q || it->pid != items[q - 1].pid || it->tid != items[q - 1].tid) {
            while (depth) pop_frame(t, a, stack, &depth, active, &compiled_depth);
            a->step_until = INT64_MIN;
        }
        while (depth && stack[depth - 1].end <= it->ts)
            pop_frame(t, a, stack, &depth, active, &compiled_depth);
        const cprof_tev *e = &ev[it->idx];
        if (it->is_launch) {
            uint64_t ops;
            int64_t g = gpu_map_get(&gm, e->correlation, &ops);
            if (g < 0) continue;
            if (depth) {
                stack[depth - 1].gpu = sat_add(stack[depth - 1].gpu, g);
                stack[depth - 1].kernels += ops;
            } else {
                a->unattributed_gpu = sat_add(a->unattributed_gpu, g);
            }
            continue;
        }
        if (depth == cap) {
            frame *ns = realloc(stack, cap * 2 * sizeof *ns);
            if (!ns) goto out;
            stack = ns;
            cap *= 2;
        }
        int compiled = starts_with(t, e->name, "Torch-Compiled Region");
        if (compiled) {
            a->regions++;
            if (compiled_depth) a->nested++;
            compiled_depth++;
            if (compiled_depth > a->max_depth) a->max_depth = compiled_depth;
        }
        size_t nl;
        const char *nm = cprof_trace_str(t, e->name, &nl);
        if (nl == 16 && memcmp(nm, "CompiledFunction", 16) == 0) a->compiled_functions++;
        if (!a->by_name[e->name].kind) a->by_name[e->name].kind = e->kind;
        uint8_t is_step = step_of(t, a, e->name) >= 0 &&
                          (e->ts_ns >= a->step_until || e->ts_ns + e->dur_ns > a->step_until);
        if (is_step) a->step_until = e->ts_ns + e->dur_ns;
        stack[depth++] = (frame){it->idx, e->ts_ns + e->dur_ns, 0, 0,
                                 (uint8_t)(active[e->name]++ == 0), (uint8_t)compiled, is_step};
    }
    while (depth) pop_frame(t, a, stack, &depth, active, &compiled_depth);
    rc = steps_by_time(t, a, &gm);
out:
    free(items);
    free(active);
    free(stack);
    cprof_keyidx_free(&gm.idx);
    free(gm.ns);
    free(gm.ops);
    return rc;
}

typedef struct ranked {
    uint32_t name;
    int64_t gpu, cpu;
} ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->gpu != y->gpu) return x->gpu < y->gpu ? 1 : -1;
    if (x->cpu != y->cpu) return x->cpu < y->cpu ? 1 : -1;
    return (x->name > y->name) - (x->name < y->name);
}

static const char *kind_cat(uint8_t k) {
    switch (k) {
    case CPROF_TK_CPU_OP: return "cpu_op";
    case CPROF_TK_USER_ANNOTATION: return "user_annotation";
    case CPROF_TK_PYTHON_FUNCTION: return "python_function";
    default: return "other";
    }
}

static int is_module(const cprof_trace *t, uint32_t name) {
    return (cprof_trace_str_flags(t, name) & CPROF_TSTR_MODULE) ||
           starts_with(t, name, "nn.Module: ");
}

/* which: 0 ranges (cpu_op / user_annotation, not steps or modules), 1 modules */
static int ranked_table(const cprof_trace *t, const attribution *a, int which, int top,
                        cJSON *arr) {
    ranked *r = malloc((a->nnames ? a->nnames : 1) * sizeof *r);
    if (!r) return CPROF_E_NOMEM;
    size_t nr = 0;
    for (uint32_t id = 1; id < a->nnames; id++) {
        const agg *g = &a->by_name[id];
        if (!g->calls) continue;
        int mod = is_module(t, id);
        if (which == 1 ? !mod
                       : (mod || g->kind == CPROF_TK_PYTHON_FUNCTION || step_of(t, a, id) >= 0))
            continue;
        r[nr++] = (ranked){id, g->gpu, g->cpu};
    }
    qsort(r, nr, sizeof *r, cmp_ranked);
    for (size_t i = 0; i < nr && (top <= 0 || i < (size_t)top); i++) {
        const agg *g = &a->by_name[r[i].name];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        add_str(o, "name", t, r[i].name);
        cJSON_AddStringToObject(o, "cat", kind_cat(g->kind));
        cJSON_AddNumberToObject(o, "calls", (double)g->calls);
        cJSON_AddNumberToObject(o, "cpu_us", us(g->cpu));
        cJSON_AddNumberToObject(o, "gpu_us", us(g->gpu));
        /* every GPU op (kernels, copies, sets); "kernels" is the same count under the name
         * reports before decision 131 gave it */
        cJSON_AddNumberToObject(o, "gpu_ops", (double)g->kernels);
        cJSON_AddNumberToObject(o, "kernels", (double)g->kernels);
    }
    free(r);
    return CPROF_OK;
}

static int cmp_step(const void *a, const void *b) {
    const step *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* ---- assembly ---- */

/* Adds the counts of one window's cprof.dropped to another's: numbers are summed, except an
 * error code ("..._error"), where the first nonzero one is kept. */
static void add_drops(cJSON *into, const cJSON *from) {
    if (!cJSON_IsObject(into) || !cJSON_IsObject(from)) return;
    for (const cJSON *c = from->child; c; c = c->next) {
        if (!c->string || !cJSON_IsNumber(c)) continue;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(into, c->string);
        size_t kl = strlen(c->string);
        int is_err = kl >= 6 && strcmp(c->string + kl - 6, "_error") == 0;
        if (!have) cJSON_AddNumberToObject(into, c->string, c->valuedouble);
        else if (!cJSON_IsNumber(have)) continue;
        else if (!is_err) cJSON_SetNumberValue(have, have->valuedouble + c->valuedouble);
        else if (have->valuedouble == 0) cJSON_SetNumberValue(have, c->valuedouble);
    }
}

/* The losses of a window recorded outside cprof.dropped: (name in the report, path in the
 * cprof metadata). The report lists them apart from the drops of a full buffer; a merge
 * carries them in each input's "dropped" (trace_merge.c), where the report finds them too. */
static const char *const other_losses[][3] = {
    {"names_refused", "names_refused", NULL},
    {"op_shape_errors", "ops", "shape_errors"},
    {"allocation_events_dropped", "memory", "allocation_events_dropped"},
};
#define NOTHER_LOSSES (sizeof other_losses / sizeof other_losses[0])

cJSON *cprof_trace_losses(const cprof_trace *t) {
    const cprof_trace_info *in = cprof_trace_get_info(t);
    size_t tl;
    const char *text = cprof_trace_text(t, &tl);
    if (!text || !in->meta.len || (size_t)in->meta.off + in->meta.len > tl) return NULL;
    cJSON *meta = cJSON_ParseWithLength(text + in->meta.off, in->meta.len);
    cJSON *dropped = cJSON_DetachItemFromObjectCaseSensitive(meta, "dropped");
    if (!cJSON_IsObject(dropped)) {
        cJSON_Delete(dropped);
        dropped = meta ? cJSON_CreateObject() : NULL;
    }
    for (size_t i = 0; dropped && i < NOTHER_LOSSES; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, other_losses[i][1]);
        if (other_losses[i][2]) v = cJSON_GetObjectItemCaseSensitive(v, other_losses[i][2]);
        if (cJSON_IsNumber(v) && v->valuedouble > 0) {
            cJSON_DeleteItemFromObjectCaseSensitive(dropped, other_losses[i][0]);
            cJSON_AddNumberToObject(dropped, other_losses[i][0], v->valuedouble);
        }
    }
    cJSON_Delete(meta);
    return dropped;
}

/* Moves the other losses (other_losses) out of a window's drops into tr's "losses" object,
 * nonzero counts only; the drops are left as tr's "dropped" (null when there are none). */
static void add_losses(cJSON *tr, cJSON *dropped) {
    cJSON *losses = cJSON_AddObjectToObject(tr, "losses");
    for (size_t i = 0; dropped && i < NOTHER_LOSSES; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(dropped, other_losses[i][0]);
        if (losses && cJSON_IsNumber(v) && v->valuedouble > 0)
            cJSON_AddItemToObject(losses, other_losses[i][0], v);
        else
            cJSON_Delete(v);
    }
    if (dropped && !dropped->child) { /* a trace that recorded only the other losses */
        cJSON_Delete(dropped);
        dropped = NULL;
    }
    if (dropped) cJSON_AddItemToObject(tr, "dropped", dropped);
    else cJSON_AddNullToObject(tr, "dropped");
}

static void add_info(const cprof_trace *t, const char *path, cJSON *root) {
    const cprof_trace_info *in = cprof_trace_get_info(t);
    cJSON *tr = cJSON_AddObjectToObject(root, "trace");
    cJSON_AddStringToObject(tr, "path", path ? path : "");
    cJSON_AddStringToObject(tr, "producer", in->is_cprof   ? "cprof"
                                            : in->is_torch ? "torch.profiler"
                                                           : "unknown");
    if (in->rank != CPROF_TEV_NONE) cJSON_AddNumberToObject(tr, "rank", (double)in->rank);
    else cJSON_AddNullToObject(tr, "rank");
    if (in->world_size != CPROF_TEV_NONE)
        cJSON_AddNumberToObject(tr, "world_size", (double)in->world_size);
    else cJSON_AddNullToObject(tr, "world_size");
    /* a rank given but no rank (1.5, -1, "one"): read as absent, its text kept for a warning */
    if (in->rank_invalid) add_str(tr, "rank_invalid", t, in->rank_invalid);
    if (in->world_size_invalid) add_str(tr, "world_size_invalid", t, in->world_size_invalid);
    if (in->dist_invalid) add_str(tr, "distributed_info_invalid", t, in->dist_invalid);
    cJSON_AddBoolToObject(tr, "partial", in->partial == 1);
    if (in->end_reason) add_str(tr, "end", t, in->end_reason);
    cJSON_AddNumberToObject(tr, "events", (double)cprof_trace_nevents(t));
    cJSON_AddNumberToObject(tr, "json_bytes", (double)in->text_bytes);
    /* events the reader could not place or weigh (trace_read.h, cprof_tskip): left out of
     * every figure, counted here so that the report says so */
    static const char *const skip_names[CPROF_TSKIP_COUNT] = {
        "total", "no_ts", "no_dur", "negative_dur", "bad_name", "duplicate"};
    uint64_t skipped[CPROF_TSKIP_COUNT] = {0};
    const cprof_tev *ev = cprof_trace_events(t);
    for (size_t i = 0, n = cprof_trace_nevents(t); i < n; i++)
        if (ev[i].skip && ev[i].skip < CPROF_TSKIP_COUNT) {
            skipped[ev[i].skip]++;
            skipped[0]++;
        }
    cJSON *sk = cJSON_AddObjectToObject(tr, "skipped");
    for (int k = 0; k < CPROF_TSKIP_COUNT && sk; k++)
        cJSON_AddNumberToObject(sk, skip_names[k], (double)skipped[k]);
    if (in->base_time_ns != CPROF_TEV_NONE) { /* exact: a double keeps only 53 bits */
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)in->base_time_ns);
        cJSON_AddRawToObject(tr, "base_time_ns", num);
    }
    cJSON *dropped = NULL;
    size_t tl;
    const char *text = cprof_trace_text(t, &tl);
    if (in->ndropped_windows) { /* a rank of a merged file: its windows' drops, summed */
        for (size_t i = 0; text && i < in->ndropped_windows; i++) {
            cprof_tspan sp = in->dropped_windows[i];
            if ((size_t)sp.off + sp.len > tl) continue;
            cJSON *one = cJSON_ParseWithLength(text + sp.off, sp.len);
            if (!dropped) dropped = one;
            else add_drops(dropped, one);
            if (one != dropped) cJSON_Delete(one);
        }
    } else {
        dropped = cprof_trace_losses(t);
    }
    add_losses(tr, dropped);
}

int cprof_report_build(const cprof_trace *t, const cprof_report_opts *opts, const char *path,
                       char **json_out) {
    cprof_report_opts o = *opts;
    if (o.top <= 0) o.top = 20;
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t);
    int rc = CPROF_E_NOMEM;
    cJSON *root = cJSON_CreateObject();
    named_dur *kd = NULL, *ad = NULL;
    attribution a = {0};
    if (!root) return CPROF_E_NOMEM;
    cJSON_AddStringToObject(root, "schema", "cprof.report/1");
    add_info(t, path, root);
    cJSON *opt = cJSON_AddObjectToObject(root, "options"); /* the thresholds the words quote */
    cJSON_AddNumberToObject(opt, "short_gap_us", us(o.short_gap_ns));
    cJSON_AddNumberToObject(opt, "small_copy_bytes", (double)o.small_copy_bytes);

    /* the window: every timed event (metadata events carry ts 0 and do not count). In a trace
     * cprof wrote, CPU events count only inside its span (category Trace, "PyTorch Profiler
     * (0)"): other threads keep recording while cprof enables CUPTI and after the program's
     * end of the window, during cprof's closing sync and flush, and that time is cprof's, not
     * the program's (decision 150). GPU work counts whole (work launched in the window may
     * run after its end). Kineto's span does not bound torch's own events: not used */
    int64_t sp0 = INT64_MAX, sp1 = INT64_MIN;
    for (size_t i = 0; i < n; i++)
        if (ev[i].ph == 'X' && ev[i].dur_ns >= 0 && is_cprof_span(t, &ev[i])) {
            if (ev[i].ts_ns < sp0) sp0 = ev[i].ts_ns;
            if (ev[i].ts_ns + ev[i].dur_ns > sp1) sp1 = ev[i].ts_ns + ev[i].dur_ns;
        }
    int clip = sp0 <= sp1;
    int64_t w0 = INT64_MAX, w1 = INT64_MIN;
    size_t nk = 0, na = 0;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        int64_t s, en;
        if (e->ph == 'X' && e->dur_ns >= 0) {
            if (e->kind == CPROF_TK_KERNEL) nk++;
            else if (e->kind == CPROF_TK_RUNTIME || e->kind == CPROF_TK_DRIVER) na++;
            s = e->ts_ns;
            en = e->ts_ns + e->dur_ns;
        } else if (e->ph == 'i' || e->ph == 'I' || e->ph == 'B' || e->ph == 'E') {
            s = en = e->ts_ns;
        } else {
            continue;
        }
        if (clip && !cprof_trace_is_gpu_op(e)) {
            if (s < sp0) s = sp0;
            if (en > sp1) en = sp1;
            if (en < s) continue; /* wholly outside the span */
        }
        if (s < w0) w0 = s;
        if (en > w1) w1 = en;
    }
    if (w0 > w1) w0 = w1 = 0;
    /* what the figures cannot use, said rather than left out silently: B / E events left
     * unpaired (trace_implicit.c), GPU ops linked to no launch (no args.correlation, no ac2g
     * flow): no step, range or module gets their time */
    uint64_t unpaired = 0, gpu_ops = 0, no_corr = 0;
    for (size_t i = 0; i < n; i++) {
        unpaired += ev[i].ph == 'B' || ev[i].ph == 'E';
        if (cprof_trace_is_gpu_op(&ev[i])) {
            gpu_ops++;
            no_corr += ev[i].correlation == CPROF_TEV_NONE;
        }
    }
    cJSON *lk = cJSON_AddObjectToObject(root, "links");
    cJSON_AddNumberToObject(lk, "gpu_ops", (double)gpu_ops);
    cJSON_AddNumberToObject(lk, "gpu_ops_without_correlation", (double)no_corr);
    cJSON_AddNumberToObject(lk, "unpaired_begin_end", (double)unpaired);
    cJSON *win = cJSON_AddObjectToObject(root, "window");
    cJSON_AddNumberToObject(win, "start_us", us(w0));
    cJSON_AddNumberToObject(win, "end_us", us(w1));
    cJSON_AddNumberToObject(win, "dur_us", us(w1 - w0));

    kd = malloc((nk ? nk : 1) * sizeof *kd);
    ad = malloc((na ? na : 1) * sizeof *ad);
    if (!kd || !ad) goto out;
    nk = na = 0;
    int64_t launch_total = 0, coll_total = 0, sync_total = 0;
    uint64_t launches = 0, colls = 0, tritons = 0, syncs = 0;
    double occ_w = 0, occ_dur = 0; /* kernels' occupancy weighted by their time */
    struct {
        uint32_t name;
        uint64_t calls;
        int64_t total;
    } sync_by[16];
    int nsync_names = 0;
    for (size_t i = 0; i < n; i++) {
        const cprof_tev *e = &ev[i];
        if (e->ph != 'X' || e->dur_ns < 0) continue;
        if (e->kind == CPROF_TK_KERNEL) {
            kd[nk++] = (named_dur){e->name,
                                   e->occupancy == CPROF_TEV_NO_OCC ? -1 : e->occupancy,
                                   e->dur_ns};
            if (e->occupancy != CPROF_TEV_NO_OCC) {
                occ_w += (double)e->occupancy * (double)e->dur_ns;
                occ_dur += (double)e->dur_ns;
            }
            if (contains_ci(t, e->name, "nccl")) {
                colls++;
                coll_total = sat_add(coll_total, e->dur_ns);
            }
            if (starts_with(t, e->name, "triton_")) tritons++;
        } else if (e->kind == CPROF_TK_RUNTIME || e->kind == CPROF_TK_DRIVER) {
            ad[na++] = (named_dur){e->name, -1, e->dur_ns};
            if (contains_ci(t, e->name, "launch")) {
                launches++;
                launch_total = sat_add(launch_total, e->dur_ns);
            }
        }
        if (cprof_trace_is_sync(t, e) && e->kind != CPROF_TK_SYNC) {
            syncs++;
            sync_total = sat_add(sync_total, e->dur_ns);
            int q = 0;
            while (q < nsync_names && sync_by[q].name != e->name) q++;
            if (q == nsync_names && q < 16) { /* more than 16 kinds of sync: totals only */
                sync_by[q].name = e->name;
                sync_by[q].calls = 0;
                sync_by[q].total = 0;
                nsync_names++;
            }
            if (q < nsync_names) {
                sync_by[q].calls++;
                sync_by[q].total = sat_add(sync_by[q].total, e->dur_ns);
            }
        }
    }
    int64_t ksum, asum;
    uint64_t kcount, kdistinct, acount, adistinct;
    cJSON *karr = cJSON_AddArrayToObject(root, "kernels");
    if (!karr || stats_table(t, kd, nk, o.top, 1, karr, &ksum, &kcount, &kdistinct)) goto out;
    cJSON *kt = cJSON_AddObjectToObject(root, "kernels_total");
    cJSON_AddNumberToObject(kt, "total_us", us(ksum));
    cJSON_AddNumberToObject(kt, "instances", (double)kcount);
    cJSON_AddNumberToObject(kt, "distinct", (double)kdistinct);
    if (occ_dur > 0) cJSON_AddNumberToObject(kt, "occupancy_pct", round(occ_w / occ_dur * 10) / 10);
    else cJSON_AddNullToObject(kt, "occupancy_pct");
    cJSON *aarr = cJSON_AddArrayToObject(root, "cuda_api");
    if (!aarr || stats_table(t, ad, na, o.top, 0, aarr, &asum, &acount, &adistinct)) goto out;
    memory_table(t, &o, root);

    if (cprof_gaps_report(t, &o, w0, w1, root)) goto out;

    /* attribution needs one slot per string id */
    size_t nstr = 1;
    for (size_t i = 0; i < n; i++)
        if (ev[i].name >= nstr) nstr = (size_t)ev[i].name + 1;
    a.nnames = (uint32_t)nstr;
    a.step_name = o.step_name && *o.step_name ? o.step_name : NULL;
    a.step_name_len = a.step_name ? strlen(a.step_name) : 0;
    a.by_name = calloc(nstr, sizeof *a.by_name);
    if (!a.by_name || attribute(t, &a)) goto out;
    cJSON *ranges = cJSON_AddArrayToObject(root, "ranges");
    cJSON *modules = cJSON_AddArrayToObject(root, "modules");
    if (!ranges || !modules || ranked_table(t, &a, 0, o.top, ranges) ||
        ranked_table(t, &a, 1, o.top, modules))
        goto out;
    /* qsort(NULL, 0, ...) is undefined (UBSan: nonnull argument) and a.steps is NULL when
     * the trace has no steps */
    if (a.nsteps) qsort(a.steps, a.nsteps, sizeof *a.steps, cmp_step);
    if (a.step_name)
        for (size_t i = 0; i < a.nsteps; i++) a.steps[i].num = (int64_t)i;
    cJSON *steps = cJSON_AddArrayToObject(root, "steps");
    for (size_t i = 0; i < a.nsteps && steps; i++) {
        cJSON *s = cJSON_CreateObject();
        if (!s) goto out;
        cJSON_AddItemToArray(steps, s);
        add_str(s, "name", t, a.steps[i].name);
        cJSON_AddNumberToObject(s, "step", (double)a.steps[i].num);
        cJSON_AddNumberToObject(s, "start_us", us(a.steps[i].start));
        cJSON_AddNumberToObject(s, "cpu_us", us(a.steps[i].cpu));
        cJSON_AddNumberToObject(s, "gpu_us", us(a.steps[i].gpu));
        cJSON_AddNumberToObject(s, "gpu_ops", (double)a.steps[i].kernels); /* as ranges' */
        cJSON_AddNumberToObject(s, "kernels", (double)a.steps[i].kernels);
    }
    {
        int64_t *starts = malloc((a.nsteps ? a.nsteps : 1) * sizeof *starts);
        if (!starts) goto out;
        for (size_t i = 0; i < a.nsteps; i++) starts[i] = a.steps[i].start;
        int mrc = cprof_memory_report(t, starts, a.nsteps, root);
        free(starts);
        if (mrc) goto out;
    }
    cJSON *cr = cJSON_AddObjectToObject(root, "compiled");
    cJSON_AddNumberToObject(cr, "regions", (double)a.regions);
    cJSON_AddNumberToObject(cr, "nested", (double)a.nested);
    cJSON_AddNumberToObject(cr, "max_depth", (double)a.max_depth);
    cJSON_AddNumberToObject(cr, "compiled_functions", (double)a.compiled_functions);
    cJSON_AddNumberToObject(cr, "triton_kernels", (double)tritons);
    cJSON *lo = cJSON_AddObjectToObject(root, "launches");
    cJSON_AddNumberToObject(lo, "calls", (double)launches);
    cJSON_AddNumberToObject(lo, "total_us", us(launch_total));
    cJSON_AddNumberToObject(lo, "avg_us", launches ? us(launch_total) / (double)launches : 0.0);
    cJSON *so = cJSON_AddObjectToObject(root, "sync");
    cJSON_AddNumberToObject(so, "calls", (double)syncs);
    cJSON_AddNumberToObject(so, "total_us", us(sync_total));
    cJSON *sb = cJSON_AddArrayToObject(so, "by_name");
    for (int q = 0; q < nsync_names && sb; q++) {
        cJSON *r = cJSON_CreateObject();
        if (!r) goto out;
        cJSON_AddItemToArray(sb, r);
        add_str(r, "name", t, sync_by[q].name);
        cJSON_AddNumberToObject(r, "calls", (double)sync_by[q].calls);
        cJSON_AddNumberToObject(r, "total_us", us(sync_by[q].total));
    }
    cJSON *co = cJSON_AddObjectToObject(root, "collectives");
    cJSON_AddNumberToObject(co, "kernels", (double)colls);
    cJSON_AddNumberToObject(co, "total_us", us(coll_total));
    uint64_t hcount;
    int64_t hcovered;
    if (host_collectives(t, ev, n, &hcount, &hcovered)) goto out;
    /* gloo / MPI / UCC ranges (CPU process groups): the time they cover, waits included */
    cJSON_AddNumberToObject(co, "host_ranges", (double)hcount);
    cJSON_AddNumberToObject(co, "host_us", us(hcovered));
    cJSON_AddNumberToObject(root, "unattributed_gpu_us", us(a.unattributed_gpu));
    char *text = cJSON_PrintUnformatted(root);
    if (!text) goto out;
    *json_out = text;
    rc = CPROF_OK;
out:
    cJSON_Delete(root);
    free(kd);
    free(ad);
    free(a.by_name);
    free(a.steps);
    return rc;
}
