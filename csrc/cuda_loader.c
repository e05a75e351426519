/* Run-time loading of libcupti and libcuda into one typed function table (see cuda_loader.h).
 * Nothing here runs at import: the first load call does the work, once per part (pthread_once);
 * the outcome is then published through an atomic state and never changes. Any thread. */
#define _GNU_SOURCE /* dlinfo, RTLD_NOLOAD */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_loader.h"

#define LOADER_MAX_DIRS 16

/* Where each entry point lives in the table, the symbols to try for it in order, and whether
 * the part fails to load without it. */
typedef struct sym_spec {
    const char *names[3];
    size_t off;
    int required;
} sym_spec;

#define SYM(field, req) {{#field, NULL, NULL}, offsetof(cprof_cuda_api, field), req}
#define SYM_AS(field, sym1, sym2, req) {{sym1, sym2, NULL}, offsetof(cprof_cuda_api, field), req}

static const sym_spec driver_syms[] = {
    SYM(cuInit, 1),
    SYM(cuDriverGetVersion, 1),
    SYM(cuDeviceGetCount, 1),
    SYM(cuDeviceGet, 1),
    SYM(cuDeviceGetName, 1),
    SYM_AS(cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL, 1),
    SYM(cuDeviceGetAttribute, 1),
    SYM(cuCtxGetCurrent, 1),
    SYM_AS(cuCtxPushCurrent, "cuCtxPushCurrent_v2", NULL, 0),
    SYM_AS(cuCtxPopCurrent, "cuCtxPopCurrent_v2", NULL, 0),
    SYM(cuStreamGetCtx, 0),
    SYM(cuDevicePrimaryCtxGetState, 0),
    SYM(cuDevicePrimaryCtxRetain, 0),
    SYM(cuEventCreate, 1),
    SYM_AS(cuEventDestroy, "cuEventDestroy_v2", NULL, 1),
    SYM(cuEventRecord, 1),
    SYM(cuEventQuery, 1),
    SYM(cuEventSynchronize, 1),
    /* cuda.h maps cuEventElapsedTime to _v2 since 12.8; older drivers only have the first one */
    SYM_AS(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", 1),
    SYM(cuStreamSynchronize, 1),
    SYM(cuGetErrorString, 1),
};

/* cuptiGetVersion first: it is checked before anything else is resolved. */
static const sym_spec cupti_syms[] = {
    SYM(cuptiGetVersion, 1),
    SYM(cuptiGetResultString, 1),
    SYM(cuptiSubscribe, 1),
    SYM(cuptiUnsubscribe, 1),
    SYM(cuptiActivityRegisterCallbacks, 1),
    SYM(cuptiActivityEnable, 1),
    SYM(cuptiActivityDisable, 1),
    SYM(cuptiActivityFlushAll, 1),
    SYM(cuptiActivityGetNextRecord, 1),
    SYM(cuptiActivityGetNumDroppedRecords, 1),
    SYM(cuptiGetTimestamp, 1),
    SYM(cuptiFinalize, 1),
    SYM(cuptiEnableDomain, 0),
    SYM(cuptiGetErrorMessage, 0),
    SYM(cuptiSubscribe_v2, 0),
    SYM(cuptiActivityRegisterTimestampCallback, 0),
    SYM(cuptiActivityEnableRuntimeApi, 0),
    SYM(cuptiActivityEnableDriverApi, 0),
    SYM(cuptiActivityPushExternalCorrelationId, 0),
    SYM(cuptiActivityPopExternalCorrelationId, 0),
    SYM(cuptiGetDeviceId, 0),
    SYM(cuptiGetContextId, 0),
    SYM(cuptiGetStreamIdEx, 0),
    SYM(cuptiSetThreadIdType, 0),
    SYM(cuptiActivitySetAttribute, 0),
};

#define N_DRIVER_SYMS (sizeof(driver_syms) / sizeof(driver_syms[0]))
#define N_CUPTI_SYMS (sizeof(cupti_syms) / sizeof(cupti_syms[0]))

enum { STATE_UNTRIED = 0, STATE_OK = 1, STATE_FAILED = -1 };

static cprof_cuda_api g_api;

static pthread_once_t g_driver_once = PTHREAD_ONCE_INIT;
static _Atomic int g_driver_state; /* written last by the once routine (seq_cst) */
static char g_driver_err[1024];
static char g_driver_path[PATH_MAX];
static int g_driver_version;

static pthread_once_t g_cupti_once = PTHREAD_ONCE_INIT;
static _Atomic int g_cupti_state;
static char g_cupti_err[4096];
static char g_cupti_path[PATH_MAX];
static const char *g_cupti_source;
static int g_cupti_version;

static pthread_mutex_t g_dirs_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_dirs[LOADER_MAX_DIRS];
static int g_ndirs;
static int g_cupti_started; /* under g_dirs_lock: search dirs can no longer be added */

/* Appends a formatted piece to an error text, "; "-separated, truncating rather than failing. */
static void err_append(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 3 >= cap) return;
    if (len) {
        memcpy(buf + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

static const char *dl_error(void) {
    const char *e = dlerror();
    return e ? e : "unknown dlopen error";
}

/* The file a handle was loaded from (the dynamic loader resolved any bare soname), else hint. */
static void handle_path(void *h, const char *hint, char *out, size_t cap) {
    struct link_map *lm = NULL;
    const char *p = hint;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) p = lm->l_name;
    snprintf(out, cap, "%s", p);
}

/* Resolves specs from h into ptrs. Returns NULL, or the first name of a missing required one. */
static const char *resolve(void *h, const sym_spec *specs, size_t n, void **ptrs) {
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = NULL;
        for (int k = 0; k < 3 && specs[i].names[k] && !ptrs[i]; k++)
            ptrs[i] = dlsym(h, specs[i].names[k]);
        if (!ptrs[i] && specs[i].required) return specs[i].names[0];
    }
    return NULL;
}

/* Publishes resolved pointers field by field: the two parts load concurrently into one struct,
 * so a part writes only its own fields. memcpy because ISO C has no void* -> function cast. */
static void publish(const sym_spec *specs, size_t n, void *const *ptrs) {
    for (size_t i = 0; i < n; i++) memcpy((char *)&g_api + specs[i].off, &ptrs[i], sizeof(void *));
}

/* ---------------------------------------------------------------- driver */

static void driver_load_once(void) {
    const char *env = getenv("CPROF_LIBCUDA_PATH");
    int from_env = env && env[0];
    const char *path = from_env ? env : "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        if (from_env)
            err_append(g_driver_err, sizeof g_driver_err, "CPROF_LIBCUDA_PATH=%s: %s", path,
                       dl_error());
        else
            err_append(g_driver_err, sizeof g_driver_err,
                       "%s (is an NVIDIA driver installed on this machine?)", dl_error());
        atomic_store(&g_driver_state, STATE_FAILED);
        return;
    }
    void *ptrs[N_DRIVER_SYMS];
    const char *missing = resolve(h, driver_syms, N_DRIVER_SYMS, ptrs);
    if (missing) {
        char where[PATH_MAX];
        handle_path(h, path, where, sizeof where);
        err_append(g_driver_err, sizeof g_driver_err,
                   "%s has no %s (a driver older than cprof supports, or not libcuda)", where,
                   missing);
        dlclose(h);
        atomic_store(&g_driver_state, STATE_FAILED);
        return;
    }
    publish(driver_syms, N_DRIVER_SYMS, ptrs);
    int v = 0;
    if (g_api.cuDriverGetVersion(&v) == CUDA_SUCCESS) g_driver_version = v;
    handle_path(h, path, g_driver_path, sizeof g_driver_path);
    g_api.has_driver = 1;
    atomic_store(&g_driver_state, STATE_OK);
}

int cprof_cuda_load_driver(const cprof_cuda_api **out) {
    pthread_once(&g_driver_once, driver_load_once);
    if (out) *out = &g_api;
    return atomic_load(&g_driver_state) == STATE_OK ? CPROF_OK : CPROF_E_UNAVAILABLE;
}

/* ---------------------------------------------------------------- CUPTI */

/* Checks an opened libcupti: version first (records of an older CUPTI have other layouts), then
 * every required symbol. On success publishes it and returns 1; otherwise explains why in
 * g_cupti_err, closes it and returns 0. */
static int cupti_accept(void *h, const char *path, const char *source) {
    char where[PATH_MAX];
    handle_path(h, path, where, sizeof where);
    void *ptrs[N_CUPTI_SYMS];
    PFN_cuptiGetVersion get_version;
    void *gv = dlsym(h, "cuptiGetVersion");
    if (!gv) {
        err_append(g_cupti_err, sizeof g_cupti_err, "%s has no cuptiGetVersion (not CUPTI?)",
                   where);
        dlclose(h);
        return 0;
    }
    memcpy(&get_version, &gv, sizeof gv);
    uint32_t version = 0;
    CUptiResult r = get_version(&version);
    if (r != CUPTI_SUCCESS) {
        err_append(g_cupti_err, sizeof g_cupti_err,
                   "%s: cuptiGetVersion failed (CUptiResult %d): a broken or mismatched "
                   "libcupti; set CPROF_CUPTI_PATH to the libcupti.so.13 of your CUDA 13 "
                   "toolkit or nvidia-cuda-cupti wheel",
                   where, (int)r);
        dlclose(h);
        return 0;
    }
    if (version < CPROF_CUPTI_MIN_API_VERSION) {
        /* before 13.0 CUPTI numbered its API 1..28; 13.0 switched to 130000 = CUDA 13.0 */
        err_append(g_cupti_err, sizeof g_cupti_err,
                   "%s is CUPTI API version %u (a CUDA %s CUPTI); cprof decodes the activity "
                   "records of CUPTI 13.0 or newer (API version >= %d): set CPROF_CUPTI_PATH "
                   "to the libcupti.so.13 of a CUDA 13 toolkit or of the nvidia-cuda-cupti 13 "
                   "wheel",
                   where, version, version < 100 ? "12 or older" : "pre-13",
                   CPROF_CUPTI_MIN_API_VERSION);
        dlclose(h);
        return 0;
    }
    const char *missing = resolve(h, cupti_syms, N_CUPTI_SYMS, ptrs);
    if (missing) {
        err_append(g_cupti_err, sizeof g_cupti_err, "%s (CUPTI API version %u) has no %s", where,
                   version, missing);
        dlclose(h);
        return 0;
    }
    publish(cupti_syms, N_CUPTI_SYMS, ptrs);
    snprintf(g_cupti_path, sizeof g_cupti_path, "%s", where);
    g_cupti_source = source;
    g_cupti_version = (int)version;
    g_api.has_cupti = 1;
    return 1;
}

/* Opens a candidate file and checks it. A file that is not there is skipped without a word
 * (absence is the normal case for most of the list); one that is there but fails is explained. */
static int cupti_try_file(const char *path, const char *source) {
    if (access(path, F_OK) != 0) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        err_append(g_cupti_err, sizeof g_cupti_err, "%s: %s", path, dl_error());
        return 0;
    }
    return cupti_accept(h, path, source);
}

/* The path of a libcupti already mapped in this process (PyTorch maps its own), if any. */
static int find_mapped_cupti(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    char line[PATH_MAX + 256];
    int found = 0, at_line_start = 1;
    while (!found && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        int whole = len > 0 && line[len - 1] == '\n';
        /* a continuation of an over-long line holds no "address perms ... path" prefix */
        int skip = !at_line_start;
        at_line_start = whole;
        if (skip) continue;
        if (whole) line[--len] = '\0';
        char *p = strchr(line, '/');
        if (!p) continue;
        const char *base = strrchr(p, '/') + 1;
        if (strncmp(base, "libcupti.so", 11) != 0) continue;
        snprintf(out, cap, "%s", p);
        found = 1;
    }
    fclose(f);
    return found;
}

static void cupti_load_once(void) {
    pthread_mutex_lock(&g_dirs_lock);
    g_cupti_started = 1; /* from here on g_dirs is read-only */
    pthread_mutex_unlock(&g_dirs_lock);

    int ok = 0;
    const char *env = getenv("CPROF_CUPTI_PATH");
    char mapped[PATH_MAX];
    if (env && env[0]) {
        /* an explicit file is the user's decision: no fallback that would hide a typo */
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            err_append(g_cupti_err, sizeof g_cupti_err, "CPROF_CUPTI_PATH=%s: %s", env,
                       dl_error());
        else
            ok = cupti_accept(h, env, "CPROF_CUPTI_PATH");
    } else if (find_mapped_cupti(mapped, sizeof mapped)) {
        /* Never load a second copy next to the mapped one: take it or fail. RTLD_NOLOAD only
         * returns the copy already there; the plain dlopen of the same file does the same but
         * also covers a copy that was mapped without the dynamic loader knowing its name. */
        void *h = dlopen(mapped, RTLD_NOW | RTLD_NOLOAD);
        if (!h) h = dlopen(mapped, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            err_append(g_cupti_err, sizeof g_cupti_err,
                       "a libcupti is already mapped in this process (%s) but cannot be opened: %s",
                       mapped, dl_error());
        else
            ok = cupti_accept(h, mapped, "already mapped");
        if (!ok)
            err_append(g_cupti_err, sizeof g_cupti_err,
                       "cprof does not load a second CUPTI next to the one already in the process "
                       "(likely PyTorch's); set CPROF_CUPTI_PATH to override");
    } else {
        static const char *const names[] = {"libcupti.so.13", "libcupti.so"};
        char path[PATH_MAX];
        for (int i = 0; !ok && i < g_ndirs; i++)
            for (int k = 0; !ok && k < 2; k++) {
                snprintf(path, sizeof path, "%s/%s", g_dirs[i], names[k]);
                ok = cupti_try_file(path, "search dir");
            }
        const char *cuda_home = getenv("CUDA_HOME");
        const char *homes[2] = {cuda_home && cuda_home[0] ? cuda_home : NULL, "/usr/local/cuda"};
        static const char *const subdirs[] = {"extras/CUPTI/lib64", "lib64"};
        for (int j = 0; !ok && j < 2; j++) {
            if (!homes[j]) continue;
            for (int s = 0; !ok && s < 2; s++)
                for (int k = 0; !ok && k < 2; k++) {
                    snprintf(path, sizeof path, "%s/%s/%s", homes[j], subdirs[s], names[k]);
                    ok = cupti_try_file(path, j == 0 ? "CUDA_HOME" : "/usr/local/cuda");
                }
        }
        for (int k = 0; !ok && k < 2; k++) {
            void *h = dlopen(names[k], RTLD_NOW | RTLD_LOCAL);
            if (h) ok = cupti_accept(h, names[k], "loader path");
        }
        if (!ok) {
            char looked[1024] = "";
            for (int i = 0; i < g_ndirs; i++) err_append(looked, sizeof looked, "%s", g_dirs[i]);
            if (homes[0]) err_append(looked, sizeof looked, "$CUDA_HOME=%s", homes[0]);
            err_append(looked, sizeof looked, "/usr/local/cuda");
            err_append(g_cupti_err, sizeof g_cupti_err,
                       "no usable libcupti.so.13 / libcupti.so in [%s] nor on the dynamic loader's "
                       "path; set CPROF_CUPTI_PATH to the file",
                       looked);
        }
    }
    atomic_store(&g_cupti_state, ok ? STATE_OK : STATE_FAILED);
}

int cprof_cuda_load_cupti(const cprof_cuda_api **out) {
    pthread_once(&g_cupti_once, cupti_load_once);
    if (out) *out = &g_api;
    return atomic_load(&g_cupti_state) == STATE_OK ? CPROF_OK : CPROF_E_UNAVAILABLE;
}

int cprof_cuda_loader_add_search_dir(const char *dir) {
    if (!dir || !dir[0]) return CPROF_E_ARG;
    int rc = CPROF_OK;
    pthread_mutex_lock(&g_dirs_lock);
    if (g_cupti_started) {
        rc = CPROF_E_STATE;
    } else if (g_ndirs >= LOADER_MAX_DIRS) {
        rc = CPROF_E_FULL;
    } else {
        char *copy = strdup(dir);
        if (!copy) rc = CPROF_E_NOMEM;
        else g_dirs[g_ndirs++] = copy;
    }
    pthread_mutex_unlock(&g_dirs_lock);
    return rc;
}

int cprof_cuda_load(const cprof_cuda_api **out) {
    int d = cprof_cuda_load_driver(out);
    int c = cprof_cuda_load_cupti(out);
    return d == CPROF_OK && c == CPROF_OK ? CPROF_OK : CPROF_E_UNAVAILABLE;
}

/* ---------------------------------------------------------------- getters */

const char *cprof_cuda_driver_error(void) {
    return atomic_load(&g_driver_state) == STATE_FAILED ? g_driver_err : "";
}

const char *cprof_cupti_error(void) {
    return atomic_load(&g_cupti_state) == STATE_FAILED ? g_cupti_err : "";
}

const char *cprof_cuda_load_error(void) {
    /* per thread: the two parts can fail at different times, so the text is built per call */
    static _Thread_local char buf[sizeof g_driver_err + sizeof g_cupti_err + 32];
    buf[0] = '\0';
    if (atomic_load(&g_driver_state) == STATE_FAILED)
        err_append(buf, sizeof buf, "libcuda: %s", g_driver_err);
    if (atomic_load(&g_cupti_state) == STATE_FAILED)
        err_append(buf, sizeof buf, "CUPTI: %s", g_cupti_err);
    return buf;
}

const char *cprof_cupti_path(void) {
    return atomic_load(&g_cupti_state) == STATE_OK ? g_cupti_path : NULL;
}

const char *cprof_libcuda_path(void) {
    return atomic_load(&g_driver_state) == STATE_OK ? g_driver_path : NULL;
}

const char *cprof_cupti_source(void) {
    return atomic_load(&g_cupti_state) == STATE_OK ? g_cupti_source : NULL;
}

int cprof_cupti_version(void) {
    return atomic_load(&g_cupti_state) == STATE_OK ? g_cupti_version : 0;
}

int cprof_cuda_driver_version(void) {
    return atomic_load(&g_driver_state) == STATE_OK ? g_driver_version : 0;
}
