/* Memory over the window, for cprof report: the memory counters a trace holds (cprof's "CPU
 * memory" and "GPU memory (CUPTI)" tracks, torch.profiler's "[memory]" events) as series with
 * their start, peak, end and growth, and their value at each step's start, so memory that
 * grows every step (a leak, or a cache still filling) is an answer, not a chart to squint at.
 * Pure C over a parsed trace: any thread, GIL released. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

#define MAX_SERIES 16
#define GROWTH_MIN_BYTES (1 << 20) /* "grows every step" only past 1 MiB in all */

typedef struct sample {
    int64_t ts, value;
    size_t ev; /* the event's index in the trace */
} sample;

typedef struct series {
    int source;      /* 0 cprof CPU, 1 cprof GPU (CUPTI), 2 torch CPU, 3 torch GPU */
    int64_t device;  /* GPU index; -1 for CPU */
    sample *s;
    size_t n, cap;
} series;

static const char *const source_names[] = {"CPU memory (cprof: malloc'd, else resident)",
                                           "GPU memory (CUPTI: allocated)",
                                           "CPU memory (torch: allocated)",
                                           "GPU memory (torch: allocated)"};

static int name_is(const cprof_trace *t, uint32_t id, const char *want) {
    size_t n, wn = strlen(want);
    const char *s = cprof_trace_str(t, id, &n);
    return n == wn && memcmp(s, want, n) == 0;
}

/* The series an event belongs to (source, device), or -1 when it is not a memory counter. */
static int source_of(const cprof_trace *t, const cprof_tev *e, int64_t *device) {
    if (e->bytes == CPROF_TEV_NONE) return -1;
    if (e->ph == 'C' && name_is(t, e->name, "CPU memory")) {
        *device = -1;
        return 0;
    }
    if (e->ph == 'C' && name_is(t, e->name, "GPU memory (CUPTI)")) {
        *device = e->pid; /* cprof writes a device's counter in the device's process */
        return 1;
    }
    if ((e->ph == 'i' || e->ph == 'I') && name_is(t, e->name, "[memory]")) {
        if (e->stream == 1) {
            *device = e->device;
            return 3;
        }
        *device = -1;
        return 2;
    }
    return -1;
}

static int cmp_sample(const void *a, const void *b) {
    const sample *x = a, *y = b;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The last value at or before ts, or 0 and *found = 0 when the series starts later. */
static int64_t value_at(const series *r, int64_t ts, int *found) {
    size_t lo = 0, hi = r->n; /* first sample after ts */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->s[mid].ts <= ts) lo = mid + 1;
        else hi = mid;
    }
    *found = lo > 0;
    return lo ? r->s[lo - 1].value : 0;
}

static double us(int64_t ns) { return (double)ns / 1000.0; }

/* torch's "[memory]" events give the level after each change ("Total Allocated") and the
 * change ("Bytes"): the level before the first one, the window's start, is the first's total
 * less its bytes. From the event's kept text (read once per series); *ok = 0 without it. */
static int64_t level_before(const cprof_trace *t, const cprof_tev *e, int *ok) {
    size_t len;
    const char *text = cprof_trace_text(t, &len);
    *ok = 0;
    if (!text || e->raw_off > len || e->raw_len > len - e->raw_off) return 0;
    cJSON *doc = cJSON_ParseWithLength(text + e->raw_off, e->raw_len);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(doc, "args"), "Bytes");
    int64_t before = 0;
    if (cJSON_IsNumber(b)) {
        before = e->bytes - (int64_t)b->valuedouble;
        *ok = 1;
    }
    cJSON_Delete(doc);
    return before;
}

int cprof_memory_report(const cprof_trace *t, const int64_t *step_starts, size_t nsteps,
                        cJSON *root) {
    const cprof_tev *ev = cprof_trace_events(t);
    size_t n = cprof_trace_nevents(t);
    series sr[MAX_SERIES];
    size_t nsr = 0;
    int rc = CPROF_E_NOMEM;
    int64_t *starts = NULL;
    for (size_t i = 0; i < n; i++) {
        int64_t dev;
        int src = source_of(t, &ev[i], &dev);
        if (src < 0) continue;
        size_t k = 0;
        while (k < nsr && !(sr[k].source == src && sr[k].device == dev)) k++;
        if (k == nsr) {
            if (nsr == MAX_SERIES) continue; /* more devices than that: the first 16 */
            sr[nsr++] = (series){src, dev, NULL, 0, 0};
        }
        series *r = &sr[k];
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 256;
            sample *ns = realloc(r->s, cap * sizeof *ns);
            if (!ns) goto out;
            r->s = ns;
            r->cap = cap;
        }
        r->s[r->n++] = (sample){ev[i].ts_ns, ev[i].bytes, i};
    }
    cJSON *arr = cJSON_AddArrayToObject(root, "memory_track");
    if (!arr) goto out;
    if (nsteps) {
        starts = malloc(nsteps * sizeof *starts);
        if (!starts) goto out;
        memcpy(starts, step_starts, nsteps * sizeof *starts);
        qsort(starts, nsteps, sizeof *starts, cmp_i64);
    }
    for (size_t k = 0; k < nsr; k++) {
        series *r = &sr[k];
        qsort(r->s, r->n, sizeof *r->s, cmp_sample);
        /* the level the series starts from: its first sample (cprof's counters sample the
         * window's start), or for torch's [memory] events the level before the first change
         * (an allocated-then-freed window grows by 0, not by minus its first allocation) */
        int64_t start = r->s[0].value;
        if (r->source >= 2) {
            int ok;
            int64_t before = level_before(t, &ev[r->s[0].ev], &ok);
            if (ok) start = before;
        }
        int64_t lo = start, peak = start, peak_ts = r->s[0].ts;
        if (r->s[0].value < lo) lo = r->s[0].value;
        if (r->s[0].value > peak) peak = r->s[0].value;
        for (size_t i = 1; i < r->n; i++) {
            if (r->s[i].value < lo) lo = r->s[i].value;
            if (r->s[i].value > peak) {
                peak = r->s[i].value;
                peak_ts = r->s[i].ts;
            }
        }
        /* the value at each step's start: growth from step to step */
        size_t with_value = 0, growing = 0;
        int64_t first_v = 0, prev_v = 0;
        for (size_t i = 0; i < nsteps; i++) {
            int found;
            int64_t v = value_at(r, starts[i], &found);
            if (!found) continue;
            if (with_value == 0) first_v = v;
            else if (v > prev_v) growing++;
            prev_v = v;
            with_value++;
        }
        cJSON *o = cJSON_CreateObject();
        if (!o) goto out;
        cJSON_AddItemToArray(arr, o);
        char label[96];
        if (r->device >= 0)
            snprintf(label, sizeof label, "%s, GPU %lld", source_names[r->source],
                     (long long)r->device);
        else
            snprintf(label, sizeof label, "%s", source_names[r->source]);
        cJSON_AddStringToObject(o, "series", label);
        cJSON_AddNumberToObject(o, "device", (double)r->device);
        cJSON_AddNumberToObject(o, "samples", (double)r->n);
        cJSON_AddNumberToObject(o, "start_bytes", (double)start);
        cJSON_AddNumberToObject(o, "min_bytes", (double)lo);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)peak);
        cJSON_AddNumberToObject(o, "peak_us", us(peak_ts));
        cJSON_AddNumberToObject(o, "end_bytes", (double)r->s[r->n - 1].value);
        cJSON_AddNumberToObject(o, "growth_bytes",
                                (double)(r->s[r->n - 1].value - start));
        int64_t step_growth = with_value > 1 ? prev_v - first_v : 0;
        cJSON_AddNumberToObject(o, "steps", (double)with_value);
        cJSON_AddNumberToObject(o, "steps_growing", (double)growing);
        cJSON_AddNumberToObject(o, "per_step_bytes",
                                with_value > 1 ? (double)step_growth / (double)(with_value - 1)
                                               : 0.0);
        /* at least three step-to-step increases, all of them, and a real amount in all */
        cJSON_AddBoolToObject(o, "grows_every_step", with_value >= 4 &&
                                                         growing == with_value - 1 &&
                                                         step_growth >= GROWTH_MIN_BYTES);
    }
    rc = CPROF_OK;
out:
    for (size_t k = 0; k < nsr; k++) free(sr[k].s);
    free(starts);
    return rc;
}
