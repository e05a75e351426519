/* The "cprof" metadata object written at the top of every trace: version, window times,
 * counts, drops, and what the caller adds (config, partial flag). Built with cJSON: it is a
 * small document, written once per trace. Pure C, any thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

int cprof_meta_json(const cprof_snapshot *snap, const char *extra_json, char **out) {
    if (!snap || !out) return CPROF_E_ARG;
    cJSON *root = extra_json && *extra_json ? cJSON_Parse(extra_json) : cJSON_CreateObject();
    if (!root) return extra_json && *extra_json ? CPROF_E_JSON : CPROF_E_NOMEM;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return CPROF_E_JSON;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "version");
    cJSON_AddStringToObject(root, "version", CPROF_VERSION);

    cJSON *win = cJSON_CreateObject();
    /* cJSON numbers are doubles, exact only up to 2^53: Unix ns need more, so they are
     * written as raw integer literals */
    char tmp[32];
    int64_t start_unix = (int64_t)snap->start_ns + snap->unix_offset_ns;
    int64_t stop_unix = (int64_t)cprof_snapshot_span_stop(snap) + snap->unix_offset_ns;
    cJSON_AddNumberToObject(win, "id", (double)snap->window_id);
    snprintf(tmp, sizeof tmp, "%lld", (long long)start_unix);
    cJSON_AddItemToObject(win, "start_unix_ns", cJSON_CreateRaw(tmp));
    snprintf(tmp, sizeof tmp, "%lld", (long long)stop_unix);
    cJSON_AddItemToObject(win, "stop_unix_ns", cJSON_CreateRaw(tmp));
    cJSON_AddNumberToObject(win, "duration_ns",
                            (double)(cprof_snapshot_span_stop(snap) - snap->start_ns));
    cJSON_AddStringToObject(win, "clock", "CLOCK_MONOTONIC");
    cprof_clock_state cs;
    cprof_clock_info(&cs);
    cJSON_AddStringToObject(win, "clock_source", cs.tsc ? "tsc" : "vdso");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "window");
    cJSON_AddItemToObject(root, "window", win);

    cJSON *counts = cJSON_GetObjectItemCaseSensitive(root, "counts");
    if (!cJSON_IsObject(counts)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "counts");
        counts = cJSON_AddObjectToObject(root, "counts");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(counts, "cpu_ranges");
    cJSON_AddNumberToObject(counts, "cpu_ranges", (double)snap->nrecords);
    cJSON_DeleteItemFromObjectCaseSensitive(counts, "cpu_ranges_truncated");
    cJSON_AddNumberToObject(counts, "cpu_ranges_truncated", (double)snap->truncated);
    cJSON_AddNumberToObject(counts, "threads", (double)snap->nthreads);
    cJSON_DeleteItemFromObjectCaseSensitive(counts, "cpu_ranges_toggled_off");
    if (snap->toggled_off) /* toggle_collection_dynamic(False, [CPU]): left out on request */
        cJSON_AddNumberToObject(counts, "cpu_ranges_toggled_off", (double)snap->toggled_off);

    cJSON *dropped = cJSON_GetObjectItemCaseSensitive(root, "dropped");
    if (!cJSON_IsObject(dropped)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "dropped");
        dropped = cJSON_AddObjectToObject(root, "dropped");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(dropped, "cpu_ranges");
    cJSON_AddNumberToObject(dropped, "cpu_ranges", (double)snap->dropped);

    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return CPROF_E_NOMEM;
    /* hand back memory the caller frees with free(), whatever allocator cJSON was built with */
    size_t n = strlen(text);
    char *copy = malloc(n + 1);
    if (copy) memcpy(copy, text, n + 1);
    cJSON_free(text);
    if (!copy) return CPROF_E_NOMEM;
    *out = copy;
    return CPROF_OK;
}

int cprof_meta_members_check(const char *members) {
    if (!members || !*members) return CPROF_OK;
    size_t n = strlen(members);
    char *text = malloc(n + 3);
    if (!text) return CPROF_E_NOMEM;
    text[0] = '{';
    memcpy(text + 1, members, n);
    text[n + 1] = '}';
    text[n + 2] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    int ok = root && cJSON_IsObject(root);
    cJSON_Delete(root);
    free(text);
    return ok ? CPROF_OK : CPROF_E_JSON;
}
