/* libFuzzer harness: the trace reader and analysis behind `cprof report`, on arbitrary bytes.
 * cprof_trace_parse must accept or reject any input with an error message (never crash, hang
 * or touch memory out of bounds); an accepted trace must give a report that is valid JSON.
 * Build and run: scripts/fuzz.sh. A crash input replays with: ./fuzz_trace_report FILE */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_trace_report: %s\n", what);                                  \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static void report(const cprof_trace *t, const cprof_report_opts *o) {
    char *json = NULL;
    int rc = cprof_report_build(t, o, "x", &json);
    CHECK(rc == 0 || rc == CPROF_E_NOMEM, "cprof_report_build failed on a parsed trace");
    if (rc) return;
    CHECK(json != NULL, "cprof_report_build returned 0 and no text");
    cJSON *root = cJSON_Parse(json);
    if (!root) fprintf(stderr, "report:\n%s\n", json);
    CHECK(root != NULL, "the report is not valid JSON");
    cJSON_Delete(root);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the error buffer is its own allocation, exactly errcap bytes: writing past it is caught */
    const size_t errcap = 200;
    char *err = malloc(errcap);
    if (!err) return 0;
    err[0] = 0;
    cprof_trace *t = NULL;
    int rc = cprof_trace_parse((const char *)data, size, 1, &t, err, errcap);
    if (rc) {
        CHECK(rc == CPROF_E_FORMAT || rc == CPROF_E_NOMEM, "parse failed with an unexpected code");
        CHECK(memchr(err, 0, errcap) != NULL, "the error message is not terminated");
        CHECK(rc != CPROF_E_FORMAT || err[0], "a format error without a message");
        CHECK(t == NULL, "a failed parse returned a trace");
        free(err);
        return 0;
    }
    CHECK(t != NULL, "a successful parse returned no trace");
    /* what `cprof report` uses (the binding's defaults), then the other branches: a named step
     * range, one row per table, one timeline bin, every gap and copy counted */
    cprof_report_opts defaults = {20, 10000, 65536, 100, NULL};
    report(t, &defaults);
    cprof_report_opts other = {1, 0, 0, 1, "step"};
    report(t, &other);
    /* a merged trace (cprof.merged listed): each rank's view, as `cprof report` builds them */
    for (size_t k = 0; k < cprof_trace_get_info(t)->nmerged && k < 8; k++) {
        if (!cprof_trace_merged_view_starts(t, k)) continue;
        cprof_trace *v = NULL;
        int vrc = cprof_trace_rank_view(t, k, &v);
        CHECK(vrc == 0 || vrc == CPROF_E_NOMEM, "cprof_trace_rank_view failed");
        if (vrc) continue;
        CHECK(cprof_trace_nevents(v) <= cprof_trace_nevents(t), "a view larger than its trace");
        report(v, &defaults);
        cprof_trace_free(v);
    }
    /* every string id is readable */
    const cprof_tev *ev = cprof_trace_events(t);
    for (size_t i = 0, n = cprof_trace_nevents(t); i < n && i < 64; i++) {
        char *c = cprof_trace_json(t, ev[i].name);
        free(c);
    }
    cprof_trace_free(t);
    free(err);
    return 0;
}
