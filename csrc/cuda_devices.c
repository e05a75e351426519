/* deviceProperties for the trace, read from the driver (cuDeviceGet*), as Kineto writes them.
 * Any thread; calls cuInit (idempotent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_loader.h"
#include "gpu.h"

static int attr(const cprof_cuda_api *a, CUdevice dev, CUdevice_attribute what) {
    int v = 0;
    return a->cuDeviceGetAttribute(&v, what, dev) == CUDA_SUCCESS ? v : 0;
}

int cprof_cuda_init_status(int *count, const char **what) {
    const cprof_cuda_api *a = NULL;
    *count = 0;
    *what = NULL;
    if (cprof_cuda_load_driver(&a) != CPROF_OK) return -1;
    CUresult r = a->cuInit(0);
    if (r == CUDA_SUCCESS) {
        if (a->cuDeviceGetCount(count) != CUDA_SUCCESS) *count = 0;
        return 0;
    }
    if (a->cuGetErrorString(r, what) != CUDA_SUCCESS) *what = NULL;
    return (int)r;
}

int cprof_cuda_device_limits(cprof_device_limits **out) {
    *out = NULL;
    const cprof_cuda_api *a = NULL;
    if (cprof_cuda_load_driver(&a) != CPROF_OK || a->cuInit(0) != CUDA_SUCCESS) return 0;
    int count = 0;
    if (a->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) return 0;
    cprof_device_limits *all = calloc((size_t)count, sizeof *all);
    if (!all) return 0;
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        if (a->cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
        cprof_device_limits *d = &all[i];
        d->cc_major = attr(a, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        d->cc_minor = attr(a, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        d->sms = attr(a, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        d->max_threads_per_block = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        d->max_threads_per_sm = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
        d->warp_size = attr(a, dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        d->regs_per_block = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
        d->regs_per_sm = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
        d->smem_per_block = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
        d->smem_per_block_optin =
            attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
        d->smem_per_sm = attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
        d->smem_reserved_per_block =
            attr(a, dev, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    }
    *out = all;
    return count;
}

char *cprof_cuda_device_props_json(void) {
    const cprof_cuda_api *a = NULL;
    if (cprof_cuda_load_driver(&a) != CPROF_OK || a->cuInit(0) != CUDA_SUCCESS) return NULL;
    int count = 0;
    if (a->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) return NULL;
    cprof_buf b;
    cprof_buf_init(&b);
    cprof_buf_puts(&b, "[");
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        if (a->cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
        char name[256] = "";
        a->cuDeviceGetName(name, sizeof name - 1, dev);
        size_t mem = 0;
        a->cuDeviceTotalMem(&mem, dev);
        char item[1024];
        snprintf(item, sizeof item,
                 "%s{\"id\": %d, \"totalGlobalMem\": %zu, \"computeMajor\": %d, "
                 "\"computeMinor\": %d, \"maxThreadsPerBlock\": %d, \"maxThreadsPerMultiprocessor\": %d, "
                 "\"regsPerBlock\": %d, \"regsPerMultiprocessor\": %d, \"warpSize\": %d, "
                 "\"sharedMemPerBlock\": %d, \"sharedMemPerMultiprocessor\": %d, \"numSms\": %d, "
                 "\"sharedMemPerBlockOptin\": %d, \"l2CacheSize\": %d, \"name\": ",
                 i ? ", " : "", i, mem, attr(a, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                 attr(a, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
        cprof_buf_puts(&b, item);
        cprof_buf_json_str(&b, name, strlen(name));
        cprof_buf_puts(&b, "}");
    }
    cprof_buf_puts(&b, "]");
    cprof_buf_put(&b, "", 1); /* NUL */
    if (b.oom) {
        cprof_buf_free(&b);
        return NULL;
    }
    return b.data;
}
