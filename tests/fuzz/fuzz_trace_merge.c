/* libFuzzer harness: `cprof merge` (cprof_trace_merge, csrc/trace_merge.c) on arbitrary traces.
 * The input is one or two traces (split at the first "\n@@\n"); each one the reader accepts is
 * merged as ranks 0 and 1 (a single trace with itself), and the merged trace must be one the
 * reader accepts again, with every input event in it (plus at most one process_name label per
 * process an input left unnamed, 256 per input at most: trace_merge.c NAMED_CAP). The sink is an in-memory stand-in for
 * sink.c's (only cprof_sink_write is used by the merger). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_trace_merge: %s\n", what);                                   \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

struct cprof_sink {
    cprof_buf b;
};

int cprof_sink_write(cprof_sink *s, const void *data, size_t len) {
    cprof_buf_put(&s->b, data, len);
    return s->b.oom ? CPROF_E_NOMEM : CPROF_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data, *sep = NULL;
    for (size_t i = 0; i + 4 <= size; i++)
        if (memcmp(text + i, "\n@@\n", 4) == 0) {
            sep = text + i;
            break;
        }
    size_t len[2] = {sep ? (size_t)(sep - text) : size, sep ? size - (size_t)(sep - text) - 4 : size};
    const char *part[2] = {text, sep ? sep + 4 : text};
    cprof_trace *t[2] = {NULL, NULL};
    char err[256];
    for (int k = 0; k < 2; k++)
        if (cprof_trace_parse(part[k], len[k], 1, &t[k], err, sizeof err)) {
            cprof_trace_free(t[0]);
            return 0;
        }
    int64_t ranks[2] = {0, 1};
    const char *paths[2] = {"a.json", "b\"\\.json"};
    cprof_sink sink;
    cprof_buf_init(&sink.b);
    uint64_t written = 0;
    int rc = cprof_trace_merge(t, ranks, NULL, 2, paths, "merged", &sink, &written);
    CHECK(rc == 0 || rc == CPROF_E_NOMEM, "the merge failed on two parsed traces");
    if (!rc) {
        uint64_t inputs = cprof_trace_nevents(t[0]) + cprof_trace_nevents(t[1]);
        CHECK(written >= inputs && written - inputs <= 2 * 256,
              "the merge wrote a different number of events");
        cprof_trace *m = NULL;
        rc = cprof_trace_parse(sink.b.data, sink.b.len, 0, &m, err, sizeof err);
        if (rc) fprintf(stderr, "%s\nmerged:\n%.*s\n", err, (int)sink.b.len, sink.b.data);
        CHECK(rc == 0 || rc == CPROF_E_NOMEM, "the merged trace does not parse");
        if (m) CHECK(cprof_trace_nevents(m) == written, "the merged trace lost events");
        cprof_trace_free(m);
    }
    cprof_buf_free(&sink.b);
    cprof_trace_free(t[0]);
    cprof_trace_free(t[1]);
    return 0;
}
