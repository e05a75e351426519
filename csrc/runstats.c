/* The step store of the run/step Profiler: one record per measured step (owner, run, latency,
 * tokens, KV length) and the bucket times filed under it, turned into exact statistics on
 * request. Every Profiler is an owner: two Profilers alive at once keep their steps apart, and
 * a released owner's steps are dropped once no live owner has any (step indices stay valid for
 * the CUDA regions still pending until then).
 * Callers hold the GIL; nothing here blocks or touches CUDA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runstats.h"

typedef struct {
    uint32_t owner;     /* the Profiler it belongs to (0: released) */
    uint32_t run;
    uint8_t done;       /* step_end was called */
    uint8_t unmeasured; /* a timer of it could not be resolved: in no statistic */
    uint8_t aborted;    /* it raised (or failed to start): in no statistic, and the regions
                         * still pending for it are dropped when they resolve */
    uint64_t latency_ns; /* UINT64_MAX while pending */
    int64_t tokens;
    double kv_len;
} step_rec;

typedef struct {
    uint64_t step; /* index of its step */
    uint64_t ns;
    uint32_t bucket;
    uint8_t domain;
} bucket_rec;

static step_rec *steps;
static uint64_t nsteps, steps_cap;
static bucket_rec *buckets;
static uint64_t nbuckets, buckets_cap;
static uint32_t last_owner;
static uint64_t live_steps; /* steps whose owner is not released */

static int grow(void **arr, uint64_t *cap, size_t elem) {
    uint64_t ncap = *cap ? *cap * 2 : 1024;
    void *n = realloc(*arr, ncap * elem);
    if (!n) return CPROF_E_NOMEM;
    *arr = n;
    *cap = ncap;
    return CPROF_OK;
}

uint32_t cprof_rs_new_owner(void) {
    if (last_owner == UINT32_MAX) last_owner = 0; /* 4 billion Profilers later: wrap, skip 0 */
    return ++last_owner;
}

int cprof_rs_step_begin(uint32_t owner, uint32_t run, uint64_t *step) {
    if (!owner) return CPROF_E_ARG;
    if (nsteps == steps_cap && grow((void **)&steps, &steps_cap, sizeof *steps))
        return CPROF_E_NOMEM;
    steps[nsteps] =
        (step_rec){.owner = owner, .run = run, .latency_ns = UINT64_MAX, .kv_len = NAN};
    live_steps++;
    *step = nsteps++;
    return CPROF_OK;
}

/* The step keeps its index (never given to the next step): its timer regions resolve later
 * (CUDA events, or any timer until the step's run ends) and must find it aborted, not be filed
 * under a successor. */
void cprof_rs_step_abort(uint64_t step) {
    if (step >= nsteps) return;
    steps[step].aborted = 1;
    steps[step].done = 0;
    while (nbuckets && buckets[nbuckets - 1].step == step) nbuckets--;
}

int cprof_rs_step_end(uint64_t step, uint64_t latency_ns, int64_t tokens, double kv_len) {
    if (step >= nsteps || steps[step].done || steps[step].aborted) return CPROF_E_STATE;
    steps[step].done = 1;
    if (latency_ns != UINT64_MAX) steps[step].latency_ns = latency_ns;
    steps[step].tokens = tokens;
    steps[step].kv_len = kv_len;
    return CPROF_OK;
}

void cprof_rs_set_latency(uint64_t step, uint64_t latency_ns) {
    if (step < nsteps) steps[step].latency_ns = latency_ns;
}

int cprof_rs_step_unmeasured(uint64_t step) {
    if (step >= nsteps || steps[step].unmeasured || steps[step].aborted || !steps[step].owner)
        return 0;
    steps[step].unmeasured = 1;
    return 1;
}

void cprof_rs_set_kv(uint64_t step, double kv_len) {
    if (step < nsteps) steps[step].kv_len = kv_len;
}

void cprof_rs_add_bucket(uint64_t step, uint8_t domain, uint32_t bucket_id, uint64_t ns) {
    if (step >= nsteps || steps[step].aborted) return;
    if (nbuckets == buckets_cap && grow((void **)&buckets, &buckets_cap, sizeof *buckets))
        return;
    buckets[nbuckets++] = (bucket_rec){step, ns, bucket_id, domain};
}

void cprof_rs_set_tokens(uint64_t step, int64_t tokens) {
    if (step < nsteps) steps[step].tokens = tokens;
}

int cprof_rs_release(uint32_t owner, int may_compact) {
    for (uint64_t i = 0; owner && i < nsteps; i++)
        if (steps[i].owner == owner) {
            steps[i].owner = 0;
            live_steps--;
        }
    if (live_steps || !may_compact) return 0;
    nsteps = nbuckets = 0;
    return 1;
}

static int selected(const step_rec *s, uint32_t owner, uint32_t run_lo, uint32_t run_hi, double kv_lo,
                    double kv_hi) {
    /* a step without a KV length (NaN) belongs to no bin, but to every unbinned query */
    int kv_ok = (isinf(kv_lo) && kv_lo < 0 && isinf(kv_hi)) ||
                (!isnan(s->kv_len) && s->kv_len >= kv_lo && s->kv_len < kv_hi);
    return s->owner == owner && s->done && !s->unmeasured && s->latency_ns != UINT64_MAX &&
           s->run >= run_lo && s->run < run_hi && kv_ok;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Linear interpolation between closest ranks: rank h = (n - 1) * p. */
static double percentile(const uint64_t *sorted, uint64_t n, double p) {
    double h = (double)(n - 1) * p;
    uint64_t lo = (uint64_t)floor(h);
    uint64_t hi = lo + 1 < n ? lo + 1 : lo;
    return (double)sorted[lo] + (h - (double)lo) * ((double)sorted[hi] - (double)sorted[lo]);
}

int cprof_rs_stats(uint32_t owner, uint32_t run_lo, uint32_t run_hi, double kv_lo, double kv_hi,
                   cprof_step_stats *out) {
    memset(out, 0, sizeof *out);
    uint64_t *lat = malloc((nsteps ? nsteps : 1) * sizeof *lat);
    if (!lat) return CPROF_E_NOMEM;
    uint64_t n = 0, total = 0, tok = 0, tok_hi = 0;
    for (uint64_t i = 0; i < nsteps; i++) {
        if (!selected(&steps[i], owner, run_lo, run_hi, kv_lo, kv_hi)) continue;
        lat[n++] = steps[i].latency_ns;
        total += steps[i].latency_ns;
        uint64_t t = (uint64_t)steps[i].tokens; /* >= 0: the binding refuses negatives */
        tok += t;
        if (tok < t) tok_hi++; /* carry: the total stays exact, never wraps negative */
    }
    out->steps = n;
    out->tokens = tok;
    out->tokens_hi = tok_hi;
    out->time_ms = (double)total / 1e6;
    double tokens = (double)tok_hi * 18446744073709551616.0 + (double)tok;
    out->tok_per_s = total ? tokens / ((double)total / 1e9) : NAN;
    if (n == 0) {
        out->mean_ms = out->p50_ms = out->p90_ms = out->p99_ms = out->min_ms = out->max_ms = NAN;
        free(lat);
        return CPROF_OK;
    }
    qsort(lat, n, sizeof *lat, cmp_u64);
    out->mean_ms = (double)total / (double)n / 1e6;
    out->p50_ms = percentile(lat, n, 0.50) / 1e6;
    out->p90_ms = percentile(lat, n, 0.90) / 1e6;
    out->p99_ms = percentile(lat, n, 0.99) / 1e6;
    out->min_ms = (double)lat[0] / 1e6;
    out->max_ms = (double)lat[n - 1] / 1e6;
    free(lat);
    return CPROF_OK;
}

/* One row per distinct (domain, bucket): rows grow by doubling, found through an open-addressing
 * index of row numbers (power-of-two size, kept under half full). */
typedef struct {
    cprof_bucket_total *rows;
    uint64_t *last_step; /* per row: the last step counted, so steps counts each step once */
    size_t n, cap;
    uint32_t *index; /* row + 1; 0 empty */
    size_t index_size;
} bucket_table;

static size_t bucket_hash(uint8_t domain, uint32_t bucket, size_t mask) {
    uint64_t h = ((uint64_t)bucket << 8 | domain) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & mask;
}

static int table_grow(bucket_table *t) {
    size_t ncap = t->cap ? t->cap * 2 : 64;
    cprof_bucket_total *nr = realloc(t->rows, ncap * sizeof *nr);
    if (!nr) return CPROF_E_NOMEM;
    t->rows = nr;
    uint64_t *nl = realloc(t->last_step, ncap * sizeof *nl);
    if (!nl) return CPROF_E_NOMEM;
    t->last_step = nl;
    t->cap = ncap;
    uint32_t *ni = calloc(ncap * 2, sizeof *ni); /* at most half full */
    if (!ni) return CPROF_E_NOMEM;
    free(t->index);
    t->index = ni;
    t->index_size = ncap * 2;
    for (size_t r = 0; r < t->n; r++) {
        size_t k = bucket_hash(t->rows[r].domain, t->rows[r].bucket_id, t->index_size - 1);
        while (ni[k]) k = (k + 1) & (t->index_size - 1);
        ni[k] = (uint32_t)r + 1;
    }
    return CPROF_OK;
}

/* The row of (domain, bucket), added if new; NULL when out of memory. */
static size_t *table_row(bucket_table *t, uint8_t domain, uint32_t bucket, size_t *row) {
    if (t->n == t->cap && table_grow(t) != CPROF_OK) return NULL;
    size_t mask = t->index_size - 1, k = bucket_hash(domain, bucket, mask);
    while (t->index[k]) {
        size_t r = t->index[k] - 1;
        if (t->rows[r].domain == domain && t->rows[r].bucket_id == bucket) {
            *row = r;
            return row;
        }
        k = (k + 1) & mask;
    }
    *row = t->n++;
    t->index[k] = (uint32_t)*row + 1;
    t->rows[*row] = (cprof_bucket_total){domain, bucket, 0, 0};
    t->last_step[*row] = UINT64_MAX;
    return row;
}

int cprof_rs_buckets(uint32_t owner, uint32_t run_lo, uint32_t run_hi, double kv_lo, double kv_hi,
                     cprof_bucket_total **rows, size_t *n) {
    *rows = NULL;
    *n = 0;
    bucket_table t = {0};
    if (table_grow(&t) != CPROF_OK) goto nomem;
    for (uint64_t i = 0; i < nbuckets; i++) {
        const bucket_rec *b = &buckets[i];
        if (b->step >= nsteps || !selected(&steps[b->step], owner, run_lo, run_hi, kv_lo, kv_hi))
            continue;
        size_t k;
        if (!table_row(&t, b->domain, b->bucket, &k)) goto nomem;
        t.rows[k].total_ns += b->ns;
        if (t.last_step[k] != b->step) {
            t.rows[k].steps++;
            t.last_step[k] = b->step;
        }
    }
    free(t.last_step);
    free(t.index);
    *rows = t.rows;
    *n = t.n;
    return CPROF_OK;
nomem:
    free(t.rows);
    free(t.last_step);
    free(t.index);
    return CPROF_E_NOMEM;
}
