/* cuda_loader.c: finds libcupti and libcuda at run time and resolves the entry points cprof uses
 * into one typed table, so that cprof builds and imports with no CUDA anywhere. The driver and
 * CUPTI load independently (CUDA-event timers need only the driver). Each is tried once per
 * process (pthread_once); the result, good or bad, is then fixed. Any thread. */
#ifndef CPROF_CUDA_LOADER_H
#define CPROF_CUDA_LOADER_H

#include "cprof.h"
#include "cupti_abi.h"

/* Every function cprof calls in libcuda and libcupti. Read it only through the pointer a load
 * function gave out: the fields of a part are valid once that part's load returned 0, and never
 * change afterwards. Optional CUPTI entries may be NULL even then. */
typedef struct cprof_cuda_api {
    /* ---- libcuda.so.1: all non-NULL once cprof_cuda_load_driver returned 0 ---- */
    PFN_cuInit cuInit;
    PFN_cuDriverGetVersion cuDriverGetVersion;
    PFN_cuDeviceGetCount cuDeviceGetCount;
    PFN_cuDeviceGet cuDeviceGet;
    PFN_cuDeviceGetName cuDeviceGetName;
    PFN_cuDeviceTotalMem cuDeviceTotalMem;         /* symbol cuDeviceTotalMem_v2 */
    PFN_cuDeviceGetAttribute cuDeviceGetAttribute;
    PFN_cuCtxGetCurrent cuCtxGetCurrent;
    /* optional (NULL when absent): a timer on a thread with no current context borrows the
     * stream's (cuda_timers.c) */
    PFN_cuCtxPushCurrent cuCtxPushCurrent;         /* symbol cuCtxPushCurrent_v2 */
    PFN_cuCtxPopCurrent cuCtxPopCurrent;           /* symbol cuCtxPopCurrent_v2 */
    PFN_cuStreamGetCtx cuStreamGetCtx;
    /* optional: timers made on a thread with no current context use the device's primary
     * context when something (PyTorch) already made it active (cuda_timers.c) */
    PFN_cuDevicePrimaryCtxGetState cuDevicePrimaryCtxGetState;
    PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain;
    PFN_cuEventCreate cuEventCreate;
    PFN_cuEventDestroy cuEventDestroy;             /* symbol cuEventDestroy_v2 */
    PFN_cuEventRecord cuEventRecord;
    PFN_cuEventQuery cuEventQuery;
    PFN_cuEventSynchronize cuEventSynchronize;
    PFN_cuEventElapsedTime cuEventElapsedTime;     /* cuEventElapsedTime_v2, else the 12.x one */
    PFN_cuStreamSynchronize cuStreamSynchronize;
    PFN_cuGetErrorString cuGetErrorString;

    /* ---- libcupti: required entries non-NULL once cprof_cuda_load_cupti returned 0 ---- */
    PFN_cuptiGetVersion cuptiGetVersion;
    PFN_cuptiGetResultString cuptiGetResultString;
    PFN_cuptiSubscribe cuptiSubscribe;
    PFN_cuptiUnsubscribe cuptiUnsubscribe;
    PFN_cuptiActivityRegisterCallbacks cuptiActivityRegisterCallbacks;
    PFN_cuptiActivityEnable cuptiActivityEnable;
    PFN_cuptiActivityDisable cuptiActivityDisable;
    PFN_cuptiActivityFlushAll cuptiActivityFlushAll;
    PFN_cuptiActivityGetNextRecord cuptiActivityGetNextRecord;
    PFN_cuptiActivityGetNumDroppedRecords cuptiActivityGetNumDroppedRecords;
    PFN_cuptiGetTimestamp cuptiGetTimestamp;
    PFN_cuptiFinalize cuptiFinalize;
    /* optional (NULL when the library lacks them) */
    PFN_cuptiEnableDomain cuptiEnableDomain;
    PFN_cuptiGetErrorMessage cuptiGetErrorMessage;
    PFN_cuptiSubscribe_v2 cuptiSubscribe_v2;       /* 13.0+: names who already holds CUPTI */
    PFN_cuptiActivityRegisterTimestampCallback cuptiActivityRegisterTimestampCallback;
    PFN_cuptiActivityEnableRuntimeApi cuptiActivityEnableRuntimeApi;
    PFN_cuptiActivityEnableDriverApi cuptiActivityEnableDriverApi;
    PFN_cuptiActivityPushExternalCorrelationId cuptiActivityPushExternalCorrelationId;
    PFN_cuptiActivityPopExternalCorrelationId cuptiActivityPopExternalCorrelationId;
    PFN_cuptiGetDeviceId cuptiGetDeviceId;
    PFN_cuptiGetContextId cuptiGetContextId;
    PFN_cuptiGetStreamIdEx cuptiGetStreamIdEx;
    PFN_cuptiSetThreadIdType cuptiSetThreadIdType;
    PFN_cuptiActivitySetAttribute cuptiActivitySetAttribute;

    int has_driver;        /* 1 once the driver part is loaded */
    int has_cupti;         /* 1 once the CUPTI part is loaded */
} cprof_cuda_api;

/* Adds a directory to look in for libcupti.so.13 / libcupti.so, after CPROF_CUPTI_PATH and a
 * libcupti already mapped in the process, before $CUDA_HOME and /usr/local/cuda. The Python side
 * passes the directories beside PyTorch (site-packages/nvidia/cu13/lib, .../cuda_cupti/lib).
 * Returns 0, CPROF_E_ARG (NULL or empty), CPROF_E_FULL (more than 16), CPROF_E_NOMEM, or
 * CPROF_E_STATE once CUPTI loading has started (the order would no longer mean anything). */
CPROF_EXPORT int cprof_cuda_loader_add_search_dir(const char *dir);

/* Loads libcuda (CPROF_LIBCUDA_PATH if set, else libcuda.so.1) on the first call; later calls
 * return the same result. *out (if given) is set to the table in every case.
 * Returns 0 or CPROF_E_UNAVAILABLE (cprof_cuda_driver_error() says why). Never calls cuInit. */
CPROF_EXPORT int cprof_cuda_load_driver(const cprof_cuda_api **out);

/* Loads libcupti on the first call: CPROF_CUPTI_PATH (that exact file, nothing else), else a
 * libcupti already mapped in the process (never a second copy: two CUPTIs in one process break),
 * else the added search directories, $CUDA_HOME/extras/CUPTI/lib64, $CUDA_HOME/lib64,
 * /usr/local/cuda/extras/CUPTI/lib64, /usr/local/cuda/lib64, then the dynamic loader's own search
 * for libcupti.so.13 and libcupti.so. A library older than CUPTI 13.0 is refused (its activity
 * records have other layouts). *out (if given) is set to the table in every case.
 * Returns 0 or CPROF_E_UNAVAILABLE (cprof_cupti_error() says why). Calls only cuptiGetVersion. */
CPROF_EXPORT int cprof_cuda_load_cupti(const cprof_cuda_api **out);

/* Both of the above. Returns 0 when both loaded, else CPROF_E_UNAVAILABLE; *out is set either
 * way and its has_driver / has_cupti say which part can be used. */
CPROF_EXPORT int cprof_cuda_load(const cprof_cuda_api **out);

/* Why loading failed: which file, the dlerror text, the missing symbol or the version found.
 * "" when nothing failed (or nothing was tried yet). Never NULL. The _load_error text covers both
 * parts and lives in a per-thread buffer valid until this thread's next call. */
CPROF_EXPORT const char *cprof_cuda_load_error(void);
CPROF_EXPORT const char *cprof_cuda_driver_error(void);
CPROF_EXPORT const char *cprof_cupti_error(void);

/* The file the CUPTI part / driver part was loaded from, or NULL when not loaded. */
CPROF_EXPORT const char *cprof_cupti_path(void);
CPROF_EXPORT const char *cprof_libcuda_path(void);
/* How libcupti was found: "CPROF_CUPTI_PATH", "already mapped", "search dir", "CUDA_HOME",
 * "/usr/local/cuda" or "loader path"; NULL when not loaded. */
CPROF_EXPORT const char *cprof_cupti_source(void);
/* cuptiGetVersion() of the loaded CUPTI (e.g. 130001), or 0 when not loaded. */
CPROF_EXPORT int cprof_cupti_version(void);
/* cuDriverGetVersion() of the loaded driver (e.g. 13000), or 0 when not loaded. */
CPROF_EXPORT int cprof_cuda_driver_version(void);

#endif /* CPROF_CUDA_LOADER_H */
