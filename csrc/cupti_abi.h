/* Our own declarations of the part of the CUPTI 13 and CUDA driver API that cprof uses, so that
 * cprof builds with no CUDA toolkit installed: CUDA is only dlopen'ed at run time (cuda_loader.c).
 * Values and layouts are copied from CUDA 13.0 Update 1 (CUPTI_API_VERSION 130001, CUDA_VERSION
 * 13000); names are NVIDIA's so the code reads like CUPTI code. tests/abi_check.c compares every
 * size, offset and value here with the real headers wherever they are installed.
 * Never include this together with cuda.h or cupti.h in one translation unit: the names clash.
 * The record layouts are those a CUPTI >= 13.0 library writes; the loader refuses older CUPTI. */
#ifndef CPROF_CUPTI_ABI_H
#define CPROF_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

/* The CUPTI API version these declarations were copied from, and the oldest CUPTI whose activity
 * records have these layouts (13.0 moved to a xxyyzz version format: 130000 = CUDA 13.0). */
#define CPROF_CUPTI_ABI_VERSION 130001
#define CPROF_CUPTI_MIN_API_VERSION 130000
#define CPROF_CUDA_ABI_VERSION 13000

/* The real headers choose some padding fields by data model; these are the LP64 layouts. */
_Static_assert(sizeof(void *) == 8 && sizeof(long) == 8,
               "cprof's CUPTI declarations are LP64-only");

/* CUPTI's activity records are packed and 8-byte aligned (cupti_common.h, GCC branch). */
/* tests/abi_check.c defines CPROF_CUPTI_ABI_PFN_ONLY to compile only the function types below
 * against the real headers' types and prototypes. */
#ifndef CPROF_CUPTI_ABI_PFN_ONLY

#if defined(__GNUC__)
#define CPROF_CUPTI_PACKED __attribute__((__packed__)) __attribute__((aligned(8)))
#else
#define CPROF_CUPTI_PACKED
#endif

/* ======================================================================================
 * CUDA driver API (cuda.h)
 * ====================================================================================== */

typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
/* Only ever pointed to from a kernel record; never dereferenced by cprof. */
typedef struct CUaccessPolicyWindow_st CUaccessPolicyWindow;

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
    CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
} CUdevice_attribute;

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_EVENT_INTERPROCESS = 0x4
} CUevent_flags;


/* ======================================================================================
 * CUPTI: results, kinds and enums (cupti_result.h, cupti_activity.h, cupti_callbacks.h)
 * ====================================================================================== */

typedef enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_INVALID_DEVICE = 2,
    CUPTI_ERROR_INVALID_CONTEXT = 3,
    CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID = 4,
    CUPTI_ERROR_INVALID_EVENT_ID = 5,
    CUPTI_ERROR_INVALID_EVENT_NAME = 6,
    CUPTI_ERROR_INVALID_OPERATION = 7,
    CUPTI_ERROR_OUT_OF_MEMORY = 8,
    CUPTI_ERROR_HARDWARE = 9,
    CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT = 10,
    CUPTI_ERROR_API_NOT_IMPLEMENTED = 11,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_READY = 13,
    CUPTI_ERROR_NOT_COMPATIBLE = 14,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_INVALID_METRIC_ID = 16,
    CUPTI_ERROR_INVALID_METRIC_NAME = 17,
    CUPTI_ERROR_QUEUE_EMPTY = 18,
    CUPTI_ERROR_INVALID_HANDLE = 19,
    CUPTI_ERROR_INVALID_STREAM = 20,
    CUPTI_ERROR_INVALID_KIND = 21,
    CUPTI_ERROR_INVALID_EVENT_VALUE = 22,
    CUPTI_ERROR_DISABLED = 23,
    CUPTI_ERROR_INVALID_MODULE = 24,
    CUPTI_ERROR_INVALID_METRIC_VALUE = 25,
    CUPTI_ERROR_HARDWARE_BUSY = 26,
    CUPTI_ERROR_NOT_SUPPORTED = 27,
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED = 28,
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE = 29,
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES = 30,
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS = 31,
    CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED = 32,
    CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED = 33,
    CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE = 34,
    CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35,
    CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED = 36,
    CUPTI_ERROR_OPENACC_UNDEFINED_ROUTINE = 37,
    CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED = 38,
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39,
    CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES = 40,
    CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED = 41,
    CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED = 42,
    CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED = 43,
    CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED = 44,
    CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED = 45,
    CUPTI_ERROR_INVALID_CHIP_NAME = 46,
    CUPTI_ERROR_UNKNOWN = 999,
    CUPTI_ERROR_FORCE_INT = 0x7fffffff
} CUptiResult;

/* All kinds of CUPTI 13.0 (CUPTI_ACTIVITY_KIND_COUNT is left out: it grows with each release).
 * cprof enables CONCURRENT_KERNEL, never KERNEL, which serialises kernels. */
typedef enum {
    CUPTI_ACTIVITY_KIND_INVALID = 0,
    CUPTI_ACTIVITY_KIND_MEMCPY = 1,
    CUPTI_ACTIVITY_KIND_MEMSET = 2,
    CUPTI_ACTIVITY_KIND_KERNEL = 3,
    CUPTI_ACTIVITY_KIND_DRIVER = 4,
    CUPTI_ACTIVITY_KIND_RUNTIME = 5,
    CUPTI_ACTIVITY_KIND_EVENT = 6,
    CUPTI_ACTIVITY_KIND_METRIC = 7,
    CUPTI_ACTIVITY_KIND_DEVICE = 8,
    CUPTI_ACTIVITY_KIND_CONTEXT = 9,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
    CUPTI_ACTIVITY_KIND_NAME = 11,
    CUPTI_ACTIVITY_KIND_MARKER = 12,
    CUPTI_ACTIVITY_KIND_MARKER_DATA = 13,
    CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR = 14,
    CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS = 15,
    CUPTI_ACTIVITY_KIND_BRANCH = 16,
    CUPTI_ACTIVITY_KIND_OVERHEAD = 17,
    CUPTI_ACTIVITY_KIND_CDP_KERNEL = 18,
    CUPTI_ACTIVITY_KIND_PREEMPTION = 19,
    CUPTI_ACTIVITY_KIND_ENVIRONMENT = 20,
    CUPTI_ACTIVITY_KIND_EVENT_INSTANCE = 21,
    CUPTI_ACTIVITY_KIND_MEMCPY2 = 22,
    CUPTI_ACTIVITY_KIND_METRIC_INSTANCE = 23,
    CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION = 24,
    CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER = 25,
    CUPTI_ACTIVITY_KIND_FUNCTION = 26,
    CUPTI_ACTIVITY_KIND_MODULE = 27,
    CUPTI_ACTIVITY_KIND_DEVICE_ATTRIBUTE = 28,
    CUPTI_ACTIVITY_KIND_SHARED_ACCESS = 29,
    CUPTI_ACTIVITY_KIND_PC_SAMPLING = 30,
    CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO = 31,
    CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION = 32,
    CUPTI_ACTIVITY_KIND_OPENACC_DATA = 33,
    CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH = 34,
    CUPTI_ACTIVITY_KIND_OPENACC_OTHER = 35,
    CUPTI_ACTIVITY_KIND_CUDA_EVENT = 36,
    CUPTI_ACTIVITY_KIND_STREAM = 37,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION = 38,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION = 39,
    CUPTI_ACTIVITY_KIND_NVLINK = 40,
    CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT = 41,
    CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT_INSTANCE = 42,
    CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC = 43,
    CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC_INSTANCE = 44,
    CUPTI_ACTIVITY_KIND_MEMORY = 45,
    CUPTI_ACTIVITY_KIND_PCIE = 46,
    CUPTI_ACTIVITY_KIND_OPENMP = 47,
    CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API = 48,
    CUPTI_ACTIVITY_KIND_MEMORY2 = 49,
    CUPTI_ACTIVITY_KIND_MEMORY_POOL = 50,
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE = 51,
    CUPTI_ACTIVITY_KIND_JIT = 52,
    CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE = 53,
    CUPTI_ACTIVITY_KIND_MEM_DECOMPRESS = 54,
    CUPTI_ACTIVITY_KIND_CONFIDENTIAL_COMPUTE_ROTATION = 55,
    CUPTI_ACTIVITY_KIND_FORCE_INT = 0x7fffffff
} CUpti_ActivityKind;

typedef enum {
    CUPTI_ACTIVITY_OBJECT_UNKNOWN = 0,
    CUPTI_ACTIVITY_OBJECT_PROCESS = 1,
    CUPTI_ACTIVITY_OBJECT_THREAD = 2,
    CUPTI_ACTIVITY_OBJECT_DEVICE = 3,
    CUPTI_ACTIVITY_OBJECT_CONTEXT = 4,
    CUPTI_ACTIVITY_OBJECT_STREAM = 5,
    CUPTI_ACTIVITY_OBJECT_FORCE_INT = 0x7fffffff
} CUpti_ActivityObjectKind;

typedef union {
    struct {
        uint32_t processId;
        uint32_t threadId;
    } pt;
    struct {
        uint32_t deviceId;
        uint32_t contextId;
        uint32_t streamId;
    } dcs;
} CUpti_ActivityObjectKindId;

typedef enum {
    CUPTI_ACTIVITY_OVERHEAD_UNKNOWN = 0,
    CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER = 1,
    CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH = 1 << 16,
    CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION = 2 << 16,
    CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE = 3 << 16,
    CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING = 4 << 16,
    CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING = 5 << 16,
    CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL = 6 << 16,
    CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST = 7 << 16,
    CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT = 8 << 16,
    CUPTI_ACTIVITY_OVERHEAD_FORCE_INT = 0x7fffffff
} CUpti_ActivityOverheadKind;

/* Flags share bits between record kinds: read each only on the kind it is documented for. */
typedef enum {
    CUPTI_ACTIVITY_FLAG_NONE = 0,
    CUPTI_ACTIVITY_FLAG_DEVICE_CONCURRENT_KERNELS = 1 << 0,
    CUPTI_ACTIVITY_FLAG_DEVICE_ATTRIBUTE_CUDEVICE = 1 << 0,
    CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC = 1 << 0,
    CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS = 1 << 0,
    CUPTI_ACTIVITY_FLAG_MARKER_START = 1 << 1,
    CUPTI_ACTIVITY_FLAG_MARKER_END = 1 << 2,
    CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE = 1 << 3,
    CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE_SUCCESS = 1 << 4,
    CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE_FAILED = 1 << 5,
    CUPTI_ACTIVITY_FLAG_MARKER_SYNC_RELEASE = 1 << 6,
    CUPTI_ACTIVITY_FLAG_MARKER_COLOR_NONE = 1 << 0,
    CUPTI_ACTIVITY_FLAG_MARKER_COLOR_ARGB = 1 << 1,
    CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_SIZE_MASK = 0xFF << 0,
    CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_LOAD = 1 << 8,
    CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_CACHED = 1 << 9,
    CUPTI_ACTIVITY_FLAG_METRIC_OVERFLOWED = 1 << 0,
    CUPTI_ACTIVITY_FLAG_METRIC_VALUE_INVALID = 1 << 1,
    CUPTI_ACTIVITY_FLAG_INSTRUCTION_VALUE_INVALID = 1 << 0,
    CUPTI_ACTIVITY_FLAG_INSTRUCTION_CLASS_MASK = 0xFF << 1,
    CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 << 0,
    CUPTI_ACTIVITY_FLAG_SHARED_ACCESS_KIND_SIZE_MASK = 0xFF << 0,
    CUPTI_ACTIVITY_FLAG_SHARED_ACCESS_KIND_LOAD = 1 << 8,
    CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC = 1 << 0,
    CUPTI_ACTIVITY_FLAG_THRASHING_IN_CPU = 1 << 0,
    CUPTI_ACTIVITY_FLAG_THROTTLING_IN_CPU = 1 << 0,
    CUPTI_ACTIVITY_FLAG_FORCE_INT = 0x7fffffff
} CUpti_ActivityFlag;

/* cuptiActivitySetAttribute: only the attributes cprof sets (uint8_t values). ZEROED_OUT
 * non-zero: the client hands out zero-filled buffers, so CUPTI does not zero them on the thread
 * that asked. PER_THREAD (12.3+; default 1 in CUPTI 13): a buffer per thread making records
 * instead of one shared set; set before the buffer callbacks are registered. */
typedef enum {
    CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER = 5,
    CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 9,
} CUpti_ActivityAttribute;

typedef enum {
    CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN = 0,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOD = 1,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOH = 2,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOA = 3,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOH = 4,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOA = 5,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOD = 6,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOA = 7,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOD = 8,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOH = 9,
    CUPTI_ACTIVITY_MEMCPY_KIND_PTOP = 10,
    CUPTI_ACTIVITY_MEMCPY_KIND_FORCE_INT = 0x7fffffff
} CUpti_ActivityMemcpyKind;

typedef enum {
    CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN = 0,
    CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE = 1,
    CUPTI_ACTIVITY_MEMORY_KIND_PINNED = 2,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE = 3,
    CUPTI_ACTIVITY_MEMORY_KIND_ARRAY = 4,
    CUPTI_ACTIVITY_MEMORY_KIND_MANAGED = 5,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC = 6,
    CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC = 7,
    CUPTI_ACTIVITY_MEMORY_KIND_FORCE_INT = 0x7fffffff
} CUpti_ActivityMemoryKind;

typedef enum {
    CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_UNKNOWN = 0,
    CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED = 1,
    CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_OFF = 2,
    CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_ON = 3,
    CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_FORCE_INT = 0x7fffffff
} CUpti_ActivityPartitionedGlobalCacheConfig;

typedef enum {
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN = 0,
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE = 1,
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT = 2,
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE = 3,
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE = 4,
    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivitySynchronizationType;

typedef enum {
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID = 0,
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION = 1,
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE = 2,
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivityMemoryOperationType;

typedef enum {
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID = 0,
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL = 1,
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED = 2,
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivityMemoryPoolType;

typedef enum {
    CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_INVALID = 0,
    CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED = 1,
    CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED = 2,
    CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED = 3,
    CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivityMemoryPoolOperationType;

typedef enum {
    CUPTI_CHANNEL_TYPE_INVALID = 0,
    CUPTI_CHANNEL_TYPE_COMPUTE = 1,
    CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY = 2,
    CUPTI_CHANNEL_TYPE_DECOMP = 3,
    CUPTI_CHANNEL_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ChannelType;

typedef enum {
    CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR = 0,
    CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE = 1,
    CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE = 2,
    CUPTI_ACTIVITY_LAUNCH_TYPE_CBL_COMMANDLIST = 3
} CUpti_ActivityLaunchType;

typedef enum {
    CUPTI_FUNC_SHMEM_LIMIT_DEFAULT = 0x00,
    CUPTI_FUNC_SHMEM_LIMIT_OPTIN = 0x01,
    CUPTI_FUNC_SHMEM_LIMIT_FORCE_INT = 0x7fffffff
} CUpti_FuncShmemLimitConfig;

typedef enum {
    CUPTI_EXTERNAL_CORRELATION_KIND_INVALID = 0,
    CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN = 1,
    CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC = 2,
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 = 3,
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1 = 4,
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 = 5,
    CUPTI_EXTERNAL_CORRELATION_KIND_SIZE = 6,
    CUPTI_EXTERNAL_CORRELATION_KIND_FORCE_INT = 0x7fffffff
} CUpti_ExternalCorrelationKind;

/* Which thread id CUPTI writes into API records. DEFAULT is pthread_self() truncated to 32 bits
 * on Linux; SYSTEM is gettid(), which is what cprof records for its own threads. */
typedef enum {
    CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT = 0,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM = 1,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE = 2,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivityThreadIdType;

typedef enum {
    CUPTI_API_ENTER = 0,
    CUPTI_API_EXIT = 1,
    CUPTI_API_CBSITE_FORCE_INT = 0x7fffffff
} CUpti_ApiCallbackSite;

typedef enum {
    CUPTI_CB_DOMAIN_INVALID = 0,
    CUPTI_CB_DOMAIN_DRIVER_API = 1,
    CUPTI_CB_DOMAIN_RUNTIME_API = 2,
    CUPTI_CB_DOMAIN_RESOURCE = 3,
    CUPTI_CB_DOMAIN_SYNCHRONIZE = 4,
    CUPTI_CB_DOMAIN_NVTX = 5,
    CUPTI_CB_DOMAIN_STATE = 6,
    CUPTI_CB_DOMAIN_SIZE = 7,
    CUPTI_CB_DOMAIN_FORCE_INT = 0x7fffffff
} CUpti_CallbackDomain;

typedef uint32_t CUpti_CallbackId;

typedef struct {
    CUpti_ApiCallbackSite callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    CUcontext context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CUpti_CallbackData;

typedef struct CUpti_Subscriber_st *CUpti_SubscriberHandle;

/* cuptiSubscribe_v2 (new in CUPTI 13.0): names this subscriber and, on
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, reports who already holds CUPTI. */
#define CUPTI_SUBSCRIBER_NAME_MAX_LEN 53
#define CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN 64
typedef struct {
    size_t structSize;             /* set to CUpti_SubscriberParams_STRUCT_SIZE */
    const char *subscriberName;
    char *oldSubscriberName;
    size_t oldSubscriberSize;
} CUpti_SubscriberParams;
#define CUpti_SubscriberParams_STRUCT_SIZE \
    (offsetof(CUpti_SubscriberParams, oldSubscriberSize) + sizeof(size_t))


#define CUPTI_CORRELATION_ID_UNKNOWN 0
#define CUPTI_TIMESTAMP_UNKNOWN 0LL
#define CUPTI_SYNCHRONIZATION_INVALID_VALUE ((uint32_t)0xFFFFFFFFU)
#define CUPTI_INVALID_CONTEXT_ID ((uint32_t)0xFFFFFFFFU)
#define CUPTI_INVALID_STREAM_ID ((uint32_t)0xFFFFFFFFU)

/* ======================================================================================
 * CUPTI activity records: the versions CUPTI 13 writes for each kind
 * ====================================================================================== */

/* The common header: every record starts with its kind. */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
} CUpti_Activity;

/* CUPTI_ACTIVITY_KIND_KERNEL / CONCURRENT_KERNEL */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    union {
        uint8_t both;
        struct {
            uint8_t requested : 4;
            uint8_t executed : 4;
        } config;
    } cacheConfig;
    uint8_t sharedMemoryConfig;
    uint16_t registersPerThread;
    CUpti_ActivityPartitionedGlobalCacheConfig partitionedGlobalCacheRequested;
    CUpti_ActivityPartitionedGlobalCacheConfig partitionedGlobalCacheExecuted;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    int32_t gridX;
    int32_t gridY;
    int32_t gridZ;
    int32_t blockX;
    int32_t blockY;
    int32_t blockZ;
    int32_t staticSharedMemory;
    int32_t dynamicSharedMemory;
    uint32_t localMemoryPerThread;
    uint32_t localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    void *reserved0;
    uint64_t queued;
    uint64_t submitted;
    uint8_t launchType;
    uint8_t isSharedMemoryCarveoutRequested;
    uint8_t sharedMemoryCarveoutRequested;
    uint8_t padding;
    uint32_t sharedMemoryExecuted;
    uint64_t graphNodeId;
    CUpti_FuncShmemLimitConfig shmemLimitConfig;
    uint32_t graphId;
    CUaccessPolicyWindow *pAccessPolicyWindow;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint32_t clusterX;
    uint32_t clusterY;
    uint32_t clusterZ;
    uint32_t clusterSchedulingPolicy;
    uint64_t localMemoryTotal_v2;
    uint32_t maxPotentialClusterSize;
    uint32_t maxActiveClusters;
    uint8_t isDeviceLaunched;
    uint8_t padding3[7];
} CUpti_ActivityKernel10;

/* CUPTI_ACTIVITY_KIND_MEMCPY (copyKind, srcKind, dstKind hold the enums above as uint8_t) */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    uint8_t copyKind;
    uint8_t srcKind;
    uint8_t dstKind;
    uint8_t flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint32_t runtimeCorrelationId;
    uint32_t pad;                  /* LP64 only in the real header; cprof is LP64-only */
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint8_t isDeviceLaunched;
    uint8_t pad2[3];
    uint64_t copyCount;
} CUpti_ActivityMemcpy6;

/* CUPTI_ACTIVITY_KIND_MEMCPY2 (peer to peer) */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    uint8_t copyKind;
    uint8_t srcKind;
    uint8_t dstKind;
    uint8_t flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t srcDeviceId;
    uint32_t srcContextId;
    uint32_t dstDeviceId;
    uint32_t dstContextId;
    uint32_t correlationId;
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    CUpti_ChannelType channelType;
} CUpti_ActivityMemcpyPtoP4;

/* CUPTI_ACTIVITY_KIND_MEMSET */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    uint32_t value;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint16_t flags;
    uint16_t memoryKind;
    uint32_t pad;                  /* LP64 only in the real header */
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint8_t isDeviceLaunched;
    uint8_t pad2[3];
} CUpti_ActivityMemset4;

/* CUPTI_ACTIVITY_KIND_RUNTIME / DRIVER / INTERNAL_LAUNCH_API */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_CallbackId cbid;
    uint64_t start;
    uint64_t end;
    uint32_t processId;
    uint32_t threadId;
    uint32_t correlationId;
    uint32_t returnValue;
} CUpti_ActivityAPI;

/* CUPTI_ACTIVITY_KIND_SYNCHRONIZATION */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ActivitySynchronizationType type;
    uint64_t start;
    uint64_t end;
    uint32_t correlationId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t cudaEventId;
    uint64_t cudaEventSyncId;
    uint32_t returnValue;
    uint32_t pad;
} CUpti_ActivitySynchronization2;

/* CUPTI_ACTIVITY_KIND_OVERHEAD */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ActivityOverheadKind overheadKind;
    CUpti_ActivityObjectKind objectKind;
    CUpti_ActivityObjectKindId objectId;
    uint64_t start;
    uint64_t end;
    uint32_t correlationId;
    uint32_t reserved0;
    void *overheadData;
} CUpti_ActivityOverhead3;

/* CUPTI_ACTIVITY_KIND_MEMORY2 (one record per allocation or release, at its timestamp) */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ActivityMemoryOperationType memoryOperationType;
    CUpti_ActivityMemoryKind memoryKind;
    uint32_t correlationId;
    uint64_t address;
    uint64_t bytes;
    uint64_t timestamp;
    uint64_t PC;
    uint32_t processId;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    const char *name;
    uint32_t isAsync;
    uint32_t pad1;                 /* LP64 only in the real header */
    struct CPROF_CUPTI_PACKED {
        CUpti_ActivityMemoryPoolType memoryPoolType;
        uint32_t pad2;             /* LP64 only in the real header */
        uint64_t address;
        uint64_t releaseThreshold;
        union {
            uint64_t size;
            uint64_t processId;
        } pool;
        uint64_t utilizedSize;
    } memoryPoolConfig;
    const char *source;
} CUpti_ActivityMemory4;

/* CUPTI_ACTIVITY_KIND_MEMORY_POOL */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ActivityMemoryPoolOperationType memoryPoolOperationType;
    CUpti_ActivityMemoryPoolType memoryPoolType;
    uint32_t correlationId;
    uint32_t processId;
    uint32_t deviceId;
    size_t minBytesToKeep;
    uint64_t address;
    uint64_t size;
    uint64_t releaseThreshold;
    uint64_t timestamp;
    uint64_t utilizedSize;
    uint8_t isManagedPool;
    uint8_t pad2[7];
} CUpti_ActivityMemoryPool3;

/* CUPTI_ACTIVITY_KIND_MARKER (NVTX): a range is a START record and an END record with one id */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ActivityFlag flags;
    uint64_t timestamp;
    uint32_t id;
    CUpti_ActivityObjectKind objectKind;
    CUpti_ActivityObjectKindId objectId;
    uint32_t pad;
    const char *name;
    const char *domain;
} CUpti_ActivityMarker2;

/* CUPTI_ACTIVITY_KIND_GRAPH_TRACE: one record per graph launch. Enabling this kind replaces the
 * per-node kernel/memcpy/memset records of graph launches (not packed in the real header either) */
typedef struct {
    CUpti_ActivityKind kind;
    uint32_t correlationId;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t graphId;
    uint32_t contextId;
    uint32_t streamId;
    void *reserved;
    uint32_t endDeviceId;
    uint32_t endContextId;
} CUpti_ActivityGraphTrace2;

/* CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: ties a CUPTI correlationId to an id pushed with
 * cuptiActivityPushExternalCorrelationId on the launching thread */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    CUpti_ExternalCorrelationKind externalKind;
    uint64_t externalId;
    uint32_t correlationId;
    uint32_t reserved;
} CUpti_ActivityExternalCorrelation;

/* CUPTI_ACTIVITY_KIND_CUDA_EVENT */
typedef struct CPROF_CUPTI_PACKED {
    CUpti_ActivityKind kind;
    uint32_t correlationId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t eventId;
    uint32_t pad;
    uint32_t deviceId;
    uint32_t pad2;
    void *reserved0;
    uint64_t deviceTimestamp;
    uint64_t cudaEventSyncId;
} CUpti_ActivityCudaEvent2;

/* cprof's names for the records it decodes: change the version here, nowhere else. */
typedef CUpti_ActivityKernel10 cprof_cupti_kernel_t;
typedef CUpti_ActivityMemcpy6 cprof_cupti_memcpy_t;
typedef CUpti_ActivityMemcpyPtoP4 cprof_cupti_memcpy_p2p_t;
typedef CUpti_ActivityMemset4 cprof_cupti_memset_t;
typedef CUpti_ActivityAPI cprof_cupti_api_t;
typedef CUpti_ActivitySynchronization2 cprof_cupti_sync_t;
typedef CUpti_ActivityOverhead3 cprof_cupti_overhead_t;
typedef CUpti_ActivityMemory4 cprof_cupti_memory_t;
typedef CUpti_ActivityMemoryPool3 cprof_cupti_mempool_t;
typedef CUpti_ActivityMarker2 cprof_cupti_marker_t;
typedef CUpti_ActivityGraphTrace2 cprof_cupti_graph_t;
typedef CUpti_ActivityExternalCorrelation cprof_cupti_extcorr_t;
typedef CUpti_ActivityCudaEvent2 cprof_cupti_cuda_event_t;

/* ======================================================================================
 * Callback ids of the runtime and driver calls cprof traces (cupti_runtime_cbid.h,
 * cupti_driver_cbid.h); the lists with names and categories are in cupti_cbids.h.
 * ====================================================================================== */

typedef enum CUpti_runtime_api_trace_cbid_enum {
    CUPTI_RUNTIME_TRACE_CBID_INVALID                                       = 0,
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020                              = 20,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020                                = 22,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020                          = 25,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020                            = 26,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020                           = 27,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020                              = 31,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020                            = 32,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArray_v3020                       = 33,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArray_v3020                     = 34,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArray_v3020                     = 35,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArray_v3020                   = 36,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_v3020                  = 37,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_v3020                = 38,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020                      = 39,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020                    = 40,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020                         = 41,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_v3020                  = 42,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_v3020                = 43,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020                       = 44,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_v3020                = 45,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_v3020              = 46,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020                 = 47,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020               = 48,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020                              = 49,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_v3020                            = 50,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020                         = 51,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020                       = 52,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020                   = 131,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020                         = 135,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020                    = 137,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_v3020                            = 142,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_v3020                       = 143,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020                            = 144,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020                       = 145,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020                     = 147,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000                          = 160,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000                     = 161,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_v4000                        = 162,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_v4000                   = 163,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020                   = 165,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000                        = 211,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000                   = 214,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000                         = 215,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000                       = 216,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArray_ptds_v7000                  = 217,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArray_ptds_v7000                = 218,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArray_ptds_v7000                = 219,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArray_ptds_v7000              = 220,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_ptds_v7000             = 221,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_ptds_v7000           = 222,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000                 = 223,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000               = 224,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000                    = 225,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_ptsz_v7000             = 226,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_ptsz_v7000           = 227,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000                  = 228,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_ptsz_v7000           = 229,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_ptsz_v7000         = 230,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000            = 231,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000          = 232,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000                         = 233,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_ptds_v7000                       = 234,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000                    = 235,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_ptsz_v7000                  = 236,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000              = 239,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000                    = 242,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_ptds_v7000                       = 243,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_ptsz_v7000                  = 244,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000                       = 245,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000                  = 246,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000                = 247,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_ptds_v7000                   = 249,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_ptsz_v7000              = 250,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000             = 269,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000        = 270,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000  = 272,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000                        = 311,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000                   = 312,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010               = 370,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010          = 371,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020                        = 373,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020                   = 374,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020                          = 375,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020                     = 376,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060                    = 430,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060               = 431,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080                   = 482,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v12080              = 483,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v12080                 = 484,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v12080            = 485,
    /* nvcc 13's <<<>>> launch stub (unless __NV_LEGACY_LAUNCH): extensions built with it */
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000                     = 505,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000                = 506,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000                   = 509,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000              = 510,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v13000                 = 511,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v13000            = 512,
    CUPTI_RUNTIME_TRACE_CBID_FORCE_INT                                     = 0x7fffffff
} CUpti_runtime_api_trace_cbid;

typedef enum CUpti_driver_api_trace_cbid_enum {
    CUPTI_DRIVER_TRACE_CBID_INVALID                                        = 0,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize                               = 17,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost                                  = 38,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc                                 = 39,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD                                   = 43,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH                                   = 45,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD                                   = 47,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D                                     = 56,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D                                     = 58,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync                              = 60,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync                              = 62,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync                              = 64,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync                                = 68,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync                                = 69,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8                                     = 71,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16                                    = 73,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32                                    = 75,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8                                   = 77,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16                                  = 79,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32                                  = 81,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecord                                  = 119,
    CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize                             = 121,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize                            = 126,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async                                = 216,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async                               = 218,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async                               = 220,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async                              = 222,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async                             = 224,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async                             = 226,
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2                                  = 243,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2                                   = 245,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy_v2                                    = 248,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2                                  = 249,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2                                 = 250,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2                                 = 251,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2                                = 252,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2                               = 253,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2                               = 254,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2                                = 276,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2                           = 277,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2                                = 278,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2                           = 279,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2                                = 280,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2                           = 281,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2                                  = 287,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2                             = 289,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2                                  = 290,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2                             = 291,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2                              = 294,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent                              = 295,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy                                       = 305,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync                                  = 306,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel                                 = 307,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer                                   = 318,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync                              = 319,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer                                 = 320,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync                            = 321,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds                           = 397,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds                           = 398,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds                           = 399,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds                             = 405,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds                             = 407,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds                                  = 408,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds                              = 409,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds                            = 410,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds                             = 411,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds                            = 412,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds                            = 413,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds                           = 414,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds                          = 415,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds                          = 416,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz                             = 418,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz                      = 421,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz                      = 422,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz                      = 423,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz                        = 424,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz                        = 425,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz                         = 426,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz                       = 427,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz                           = 428,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz                          = 429,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz                          = 430,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz                         = 431,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz                        = 432,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz                        = 433,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz                         = 436,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz                       = 440,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz                             = 441,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz                            = 442,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel                      = 477,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz                 = 478,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice           = 480,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch                                  = 514,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz                             = 515,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags                         = 587,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz                    = 588,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync                                = 598,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz                           = 599,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync                                 = 600,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz                            = 601,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync                        = 611,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz                   = 612,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx                               = 652,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz                          = 653,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync                             = 776,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_ptsz                        = 777,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync                           = 778,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz                      = 779,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2                          = 796,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz                     = 797,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2                        = 798,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz                   = 799,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2                            = 800,
    CUPTI_DRIVER_TRACE_CBID_FORCE_INT                                      = 0x7fffffff
} CUpti_driver_api_trace_cbid;

#endif /* !CPROF_CUPTI_ABI_PFN_ONLY */

/* ======================================================================================
 * Function types: callbacks cprof gives CUPTI, and every entry point cuda_loader.c resolves.
 * (C11 allows repeating an identical typedef, which is how abi_check.c checks the callbacks.)
 * ====================================================================================== */

typedef void (*CUpti_CallbackFunc)(void *userdata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *cbdata);

/* CUPTI asks for an empty buffer (set *buffer, *size; *maxNumRecords = 0 means "fill it"). */
typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size,
                                                 size_t *maxNumRecords);
/* CUPTI hands back a buffer holding validSize bytes of records. */
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId,
                                                  uint8_t *buffer, size_t size, size_t validSize);
/* Returns the time CUPTI writes into records, in ns (default on Linux: CLOCK_REALTIME). */
typedef uint64_t (*CUpti_TimestampCallbackFunc)(void);

/* Driver entry points cprof resolves. The exported symbol is named where cuda.h maps the API name
 * to a versioned one (cuDeviceTotalMem -> cuDeviceTotalMem_v2, ...). */
typedef CUresult (*PFN_cuInit)(unsigned int Flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int *driverVersion);
typedef CUresult (*PFN_cuDeviceGetCount)(int *count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *device, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char *name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem)(size_t *bytes, CUdevice dev);           /* _v2 */
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext *pctx);
typedef CUresult (*PFN_cuCtxPushCurrent)(CUcontext ctx);                         /* _v2 */
typedef CUresult (*PFN_cuCtxPopCurrent)(CUcontext *pctx);                        /* _v2 */
typedef CUresult (*PFN_cuStreamGetCtx)(CUstream hStream, CUcontext *pctx);
typedef CUresult (*PFN_cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags,
                                                   int *active);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev);
typedef CUresult (*PFN_cuEventCreate)(CUevent *phEvent, unsigned int Flags);
typedef CUresult (*PFN_cuEventDestroy)(CUevent hEvent);                          /* _v2 */
typedef CUresult (*PFN_cuEventRecord)(CUevent hEvent, CUstream hStream);
typedef CUresult (*PFN_cuEventQuery)(CUevent hEvent);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent hEvent);
/* _v2 since CUDA 12.8 (same signature); older drivers export only cuEventElapsedTime. */
typedef CUresult (*PFN_cuEventElapsedTime)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream hStream);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char **pStr);

/* CUPTI entry points (cupti_activity.h, cupti_callbacks.h, cupti_result.h, cupti_version.h). */
typedef CUptiResult (*PFN_cuptiGetVersion)(uint32_t *version);
typedef CUptiResult (*PFN_cuptiGetResultString)(CUptiResult result, const char **str);
typedef CUptiResult (*PFN_cuptiGetErrorMessage)(CUptiResult result, const char **str);
typedef CUptiResult (*PFN_cuptiSubscribe)(CUpti_SubscriberHandle *subscriber,
                                          CUpti_CallbackFunc callback, void *userdata);
typedef CUptiResult (*PFN_cuptiSubscribe_v2)(CUpti_SubscriberHandle *subscriber,
                                             CUpti_CallbackFunc callback, void *userdata,
                                             CUpti_SubscriberParams *pParams);
typedef CUptiResult (*PFN_cuptiUnsubscribe)(CUpti_SubscriberHandle subscriber);
typedef CUptiResult (*PFN_cuptiActivityRegisterCallbacks)(
    CUpti_BuffersCallbackRequestFunc funcBufferRequested,
    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted);
typedef CUptiResult (*PFN_cuptiActivityRegisterTimestampCallback)(
    CUpti_TimestampCallbackFunc funcTimestamp);
typedef CUptiResult (*PFN_cuptiActivityEnable)(CUpti_ActivityKind kind);
typedef CUptiResult (*PFN_cuptiActivityDisable)(CUpti_ActivityKind kind);
/* Per-call-id API record selection, without enabling all of KIND_RUNTIME / KIND_DRIVER.
 * Enabling or disabling the whole kind afterwards overrides these settings. */
typedef CUptiResult (*PFN_cuptiActivityEnableRuntimeApi)(CUpti_CallbackId cbid, uint8_t enable);
typedef CUptiResult (*PFN_cuptiActivityEnableDriverApi)(CUpti_CallbackId cbid, uint8_t enable);
typedef CUptiResult (*PFN_cuptiActivityFlushAll)(uint32_t flag);
typedef CUptiResult (*PFN_cuptiActivitySetAttribute)(CUpti_ActivityAttribute attr,
                                                     size_t *valueSize, void *value);
typedef CUptiResult (*PFN_cuptiActivityGetNextRecord)(uint8_t *buffer, size_t validBufferSizeBytes,
                                                      CUpti_Activity **record);
/* Reads and resets the count of records dropped for lack of buffer space. */
typedef CUptiResult (*PFN_cuptiActivityGetNumDroppedRecords)(CUcontext context, uint32_t streamId,
                                                             size_t *dropped);
typedef CUptiResult (*PFN_cuptiGetTimestamp)(uint64_t *timestamp);
typedef CUptiResult (*PFN_cuptiFinalize)(void);
/* Turns every callback of one domain on or off for a subscriber (teardown: the next API exit). */
typedef CUptiResult (*PFN_cuptiEnableDomain)(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                             CUpti_CallbackDomain domain);
typedef CUptiResult (*PFN_cuptiActivityPushExternalCorrelationId)(
    CUpti_ExternalCorrelationKind kind, uint64_t id);
typedef CUptiResult (*PFN_cuptiActivityPopExternalCorrelationId)(
    CUpti_ExternalCorrelationKind kind, uint64_t *lastId);
typedef CUptiResult (*PFN_cuptiGetDeviceId)(CUcontext context, uint32_t *deviceId);
typedef CUptiResult (*PFN_cuptiGetContextId)(CUcontext context, uint32_t *contextId);
typedef CUptiResult (*PFN_cuptiGetStreamIdEx)(CUcontext context, CUstream stream,
                                              uint8_t perThreadStream, uint32_t *streamId);
typedef CUptiResult (*PFN_cuptiSetThreadIdType)(CUpti_ActivityThreadIdType type);

#endif /* CPROF_CUPTI_ABI_H */
