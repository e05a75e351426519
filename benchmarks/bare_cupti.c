/* A bare CUPTI activity collector with no cprof code in it, for bench_cupti_modes.py: what
 * CUPTI itself costs a launch-bound step, next to what a cprof window costs. Buffers are plain
 * malloc'ed 8 MiB blocks; the completion callback only counts records by kind. No timestamp
 * callback, no subscriber, no decoding.
 *
 *   gcc -O2 -shared -fPIC -I csrc benchmarks/bare_cupti.c -ldl -o bare_cupti.so
 *
 * bare_start(libcupti_path, mode): mode 0 kernels only (CONCURRENT_KERNEL); 1 kernels and
 * every runtime call (KIND_RUNTIME whole); 2 kernels and the runtime's launch, copy and sync
 * calls (KIND_RUNTIME whole, every other runtime id switched off: what cprof does, without
 * the driver API); 3 kernels and every driver call (KIND_DRIVER whole, no KIND_RUNTIME: are the
 * runtime's nested driver calls cheaper to hook, and do kernels correlate with them?); plus 4: buffers from calloc (fresh zero pages) and CUPTI told so
 * (ZEROED_OUT_ACTIVITY_BUFFER), so it does not zero them itself on the application thread.
 * Returns 0 or a negative step number. bare_stop() flushes,
 * disables and returns the records counted since the last start (kernels in *kernels);
 * bare_linked() then gives how many of those kernels have an API record of the same
 * correlation id (the first 1M of each are kept). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "cupti_abi.h"

#define BUF_SIZE (8u << 20)

static PFN_cuptiActivityRegisterCallbacks p_register;
static PFN_cuptiActivityEnable p_enable;
static PFN_cuptiActivityDisable p_disable;
static PFN_cuptiActivityFlushAll p_flush;
static PFN_cuptiActivityGetNextRecord p_next;
static PFN_cuptiActivityEnableRuntimeApi p_enable_rt;
static unsigned long n_records, n_kernels;
static PFN_cuptiActivitySetAttribute p_set_attr;
static int active_mode = -1;
static int zeroed;

#define CORR_CAP (1u << 20)
static uint32_t kernel_corr[CORR_CAP], api_corr[CORR_CAP];
static unsigned long n_kernel_corr, n_api_corr;

static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = zeroed ? calloc(1, BUF_SIZE) : aligned_alloc(8, BUF_SIZE);
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static void on_complete(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                 size_t valid) {
    (void)ctx;
    (void)stream_id;
    (void)size;
    CUpti_Activity *r = NULL;
    while (p_next(buffer, valid, &r) == CUPTI_SUCCESS) {
        __atomic_add_fetch(&n_records, 1, __ATOMIC_RELAXED);
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            __atomic_add_fetch(&n_kernels, 1, __ATOMIC_RELAXED);
            unsigned long i = __atomic_fetch_add(&n_kernel_corr, 1, __ATOMIC_RELAXED);
            if (i < CORR_CAP)
                kernel_corr[i] = ((cprof_cupti_kernel_t *)r)->correlationId;
        } else if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME ||
                   r->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            unsigned long i = __atomic_fetch_add(&n_api_corr, 1, __ATOMIC_RELAXED);
            if (i < CORR_CAP) api_corr[i] = ((CUpti_ActivityAPI *)r)->correlationId;
        }
    }
    free(buffer);
}

static const uint32_t kept_runtime_ids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
};

int bare_start(const char *path, int mode) {
    if (active_mode >= 0) return -1;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -2;
    p_register = (PFN_cuptiActivityRegisterCallbacks)dlsym(h, "cuptiActivityRegisterCallbacks");
    p_enable = (PFN_cuptiActivityEnable)dlsym(h, "cuptiActivityEnable");
    p_disable = (PFN_cuptiActivityDisable)dlsym(h, "cuptiActivityDisable");
    p_flush = (PFN_cuptiActivityFlushAll)dlsym(h, "cuptiActivityFlushAll");
    p_next = (PFN_cuptiActivityGetNextRecord)dlsym(h, "cuptiActivityGetNextRecord");
    p_enable_rt = (PFN_cuptiActivityEnableRuntimeApi)dlsym(h, "cuptiActivityEnableRuntimeApi");
    p_set_attr = (PFN_cuptiActivitySetAttribute)dlsym(h, "cuptiActivitySetAttribute");
    if (!p_register || !p_enable || !p_disable || !p_flush || !p_next || !p_enable_rt) return -3;
    zeroed = (mode & 4) != 0;
    mode &= 3;
    uint8_t z = (uint8_t)zeroed;
    size_t zs = sizeof z;
    if (!p_set_attr || p_set_attr(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zs, &z))
        return -7;
    if (p_register(on_request, on_complete) != CUPTI_SUCCESS) return -4;
    n_records = n_kernels = n_kernel_corr = n_api_corr = 0;
    if (p_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return -5;
    if ((mode == 1 || mode == 2) && p_enable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS)
        return -6;
    if (mode == 3 && p_enable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS) return -8;
    if (mode == 2) {
        for (uint32_t id = 1; id < 523; id++) {
            int keep = 0;
            for (size_t k = 0; k < sizeof kept_runtime_ids / sizeof *kept_runtime_ids; k++)
                keep |= kept_runtime_ids[k] == id;
            if (!keep) p_enable_rt(id, 0);
        }
    }
    active_mode = mode;
    return 0;
}

long bare_stop(unsigned long *kernels) {
    if (active_mode < 0) return -1;
    p_disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (active_mode == 1 || active_mode == 2) p_disable(CUPTI_ACTIVITY_KIND_RUNTIME);
    if (active_mode == 3) p_disable(CUPTI_ACTIVITY_KIND_DRIVER);
    p_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    active_mode = -1;
    if (kernels) *kernels = __atomic_load_n(&n_kernels, __ATOMIC_RELAXED);
    return (long)__atomic_load_n(&n_records, __ATOMIC_RELAXED);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Kernels of the last window whose correlation id has an API record (after bare_stop). */
long bare_linked(void) {
    size_t nk = n_kernel_corr < CORR_CAP ? n_kernel_corr : CORR_CAP;
    size_t na = n_api_corr < CORR_CAP ? n_api_corr : CORR_CAP;
    qsort(api_corr, na, sizeof *api_corr, cmp_u32);
    long linked = 0;
    for (size_t i = 0; i < nk; i++)
        linked += bsearch(&kernel_corr[i], api_corr, na, sizeof *api_corr, cmp_u32) != NULL;
    return linked;
}
