/* Checks csrc/cupti_abi.h against NVIDIA's real CUDA / CUPTI headers: every struct size, alignment,
 * field offset and field size, every enumerator and constant, and (at compile time) every function
 * type. Our declarations and the real ones cannot share a translation unit (same names), so this
 * one file is compiled three times (tests/test_abi.py does it):
 *   -DABI_SIDE_REAL  -I<cuda>/include : a table of values from the real headers, plus static
 *                                       assertions that our function types match the prototypes
 *   -DABI_SIDE_OURS  -Icsrc           : the same table from cupti_abi.h
 *   (neither)                         : main(), which compares the two tables entry by entry
 * The lists below must name every struct, field and enumerator cupti_abi.h declares; test_abi.py
 * checks that too. Exit status 0 when everything matches. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct abi_entry {
    const char *what;
    long long value;
} abi_entry;

/* ---- what is compared ---- */

#define ABI_TYPES(S) \
    S(CUresult) \
    S(CUdevice_attribute) \
    S(CUevent_flags) \
    S(CUptiResult) \
    S(CUpti_ActivityKind) \
    S(CUpti_ActivityObjectKind) \
    S(CUpti_ActivityOverheadKind) \
    S(CUpti_ActivityFlag) \
    S(CUpti_ActivityAttribute) \
    S(CUpti_ActivityMemcpyKind) \
    S(CUpti_ActivityMemoryKind) \
    S(CUpti_ActivityPartitionedGlobalCacheConfig) \
    S(CUpti_ActivitySynchronizationType) \
    S(CUpti_ActivityMemoryOperationType) \
    S(CUpti_ActivityMemoryPoolType) \
    S(CUpti_ActivityMemoryPoolOperationType) \
    S(CUpti_ChannelType) \
    S(CUpti_ActivityLaunchType) \
    S(CUpti_FuncShmemLimitConfig) \
    S(CUpti_ExternalCorrelationKind) \
    S(CUpti_ActivityThreadIdType) \
    S(CUpti_ApiCallbackSite) \
    S(CUpti_CallbackDomain) \
    S(CUpti_runtime_api_trace_cbid) \
    S(CUpti_driver_api_trace_cbid) \
    S(CUdevice) \
    S(CUcontext) \
    S(CUstream) \
    S(CUevent) \
    S(CUpti_CallbackId) \
    S(CUpti_SubscriberHandle) \
    S(CUpti_ActivityObjectKindId) \
    S(CUpti_CallbackData) \
    S(CUpti_SubscriberParams) \
    S(CUpti_Activity) \
    S(CUpti_ActivityKernel10) \
    S(CUpti_ActivityMemcpy6) \
    S(CUpti_ActivityMemcpyPtoP4) \
    S(CUpti_ActivityMemset4) \
    S(CUpti_ActivityAPI) \
    S(CUpti_ActivitySynchronization2) \
    S(CUpti_ActivityOverhead3) \
    S(CUpti_ActivityMemory4) \
    S(CUpti_ActivityMemoryPool3) \
    S(CUpti_ActivityMarker2) \
    S(CUpti_ActivityGraphTrace2) \
    S(CUpti_ActivityExternalCorrelation) \
    S(CUpti_ActivityCudaEvent2)

#define ABI_FIELDS(F) \
    F(CUpti_ActivityObjectKindId, pt) \
    F(CUpti_ActivityObjectKindId, dcs) \
    F(CUpti_ActivityObjectKindId, pt.processId) \
    F(CUpti_ActivityObjectKindId, pt.threadId) \
    F(CUpti_ActivityObjectKindId, dcs.deviceId) \
    F(CUpti_ActivityObjectKindId, dcs.contextId) \
    F(CUpti_ActivityObjectKindId, dcs.streamId) \
    F(CUpti_CallbackData, callbackSite) \
    F(CUpti_CallbackData, functionName) \
    F(CUpti_CallbackData, functionParams) \
    F(CUpti_CallbackData, functionReturnValue) \
    F(CUpti_CallbackData, symbolName) \
    F(CUpti_CallbackData, context) \
    F(CUpti_CallbackData, contextUid) \
    F(CUpti_CallbackData, correlationData) \
    F(CUpti_CallbackData, correlationId) \
    F(CUpti_SubscriberParams, structSize) \
    F(CUpti_SubscriberParams, subscriberName) \
    F(CUpti_SubscriberParams, oldSubscriberName) \
    F(CUpti_SubscriberParams, oldSubscriberSize) \
    F(CUpti_Activity, kind) \
    F(CUpti_ActivityKernel10, kind) \
    F(CUpti_ActivityKernel10, cacheConfig) \
    F(CUpti_ActivityKernel10, sharedMemoryConfig) \
    F(CUpti_ActivityKernel10, registersPerThread) \
    F(CUpti_ActivityKernel10, partitionedGlobalCacheRequested) \
    F(CUpti_ActivityKernel10, partitionedGlobalCacheExecuted) \
    F(CUpti_ActivityKernel10, start) \
    F(CUpti_ActivityKernel10, end) \
    F(CUpti_ActivityKernel10, completed) \
    F(CUpti_ActivityKernel10, deviceId) \
    F(CUpti_ActivityKernel10, contextId) \
    F(CUpti_ActivityKernel10, streamId) \
    F(CUpti_ActivityKernel10, gridX) \
    F(CUpti_ActivityKernel10, gridY) \
    F(CUpti_ActivityKernel10, gridZ) \
    F(CUpti_ActivityKernel10, blockX) \
    F(CUpti_ActivityKernel10, blockY) \
    F(CUpti_ActivityKernel10, blockZ) \
    F(CUpti_ActivityKernel10, staticSharedMemory) \
    F(CUpti_ActivityKernel10, dynamicSharedMemory) \
    F(CUpti_ActivityKernel10, localMemoryPerThread) \
    F(CUpti_ActivityKernel10, localMemoryTotal) \
    F(CUpti_ActivityKernel10, correlationId) \
    F(CUpti_ActivityKernel10, gridId) \
    F(CUpti_ActivityKernel10, name) \
    F(CUpti_ActivityKernel10, reserved0) \
    F(CUpti_ActivityKernel10, queued) \
    F(CUpti_ActivityKernel10, submitted) \
    F(CUpti_ActivityKernel10, launchType) \
    F(CUpti_ActivityKernel10, isSharedMemoryCarveoutRequested) \
    F(CUpti_ActivityKernel10, sharedMemoryCarveoutRequested) \
    F(CUpti_ActivityKernel10, padding) \
    F(CUpti_ActivityKernel10, sharedMemoryExecuted) \
    F(CUpti_ActivityKernel10, graphNodeId) \
    F(CUpti_ActivityKernel10, shmemLimitConfig) \
    F(CUpti_ActivityKernel10, graphId) \
    F(CUpti_ActivityKernel10, pAccessPolicyWindow) \
    F(CUpti_ActivityKernel10, channelID) \
    F(CUpti_ActivityKernel10, channelType) \
    F(CUpti_ActivityKernel10, clusterX) \
    F(CUpti_ActivityKernel10, clusterY) \
    F(CUpti_ActivityKernel10, clusterZ) \
    F(CUpti_ActivityKernel10, clusterSchedulingPolicy) \
    F(CUpti_ActivityKernel10, localMemoryTotal_v2) \
    F(CUpti_ActivityKernel10, maxPotentialClusterSize) \
    F(CUpti_ActivityKernel10, maxActiveClusters) \
    F(CUpti_ActivityKernel10, isDeviceLaunched) \
    F(CUpti_ActivityKernel10, padding3) \
    F(CUpti_ActivityKernel10, cacheConfig.both) \
    F(CUpti_ActivityMemcpy6, kind) \
    F(CUpti_ActivityMemcpy6, copyKind) \
    F(CUpti_ActivityMemcpy6, srcKind) \
    F(CUpti_ActivityMemcpy6, dstKind) \
    F(CUpti_ActivityMemcpy6, flags) \
    F(CUpti_ActivityMemcpy6, bytes) \
    F(CUpti_ActivityMemcpy6, start) \
    F(CUpti_ActivityMemcpy6, end) \
    F(CUpti_ActivityMemcpy6, deviceId) \
    F(CUpti_ActivityMemcpy6, contextId) \
    F(CUpti_ActivityMemcpy6, streamId) \
    F(CUpti_ActivityMemcpy6, correlationId) \
    F(CUpti_ActivityMemcpy6, runtimeCorrelationId) \
    F(CUpti_ActivityMemcpy6, pad) \
    F(CUpti_ActivityMemcpy6, reserved0) \
    F(CUpti_ActivityMemcpy6, graphNodeId) \
    F(CUpti_ActivityMemcpy6, graphId) \
    F(CUpti_ActivityMemcpy6, channelID) \
    F(CUpti_ActivityMemcpy6, channelType) \
    F(CUpti_ActivityMemcpy6, isDeviceLaunched) \
    F(CUpti_ActivityMemcpy6, pad2) \
    F(CUpti_ActivityMemcpy6, copyCount) \
    F(CUpti_ActivityMemcpyPtoP4, kind) \
    F(CUpti_ActivityMemcpyPtoP4, copyKind) \
    F(CUpti_ActivityMemcpyPtoP4, srcKind) \
    F(CUpti_ActivityMemcpyPtoP4, dstKind) \
    F(CUpti_ActivityMemcpyPtoP4, flags) \
    F(CUpti_ActivityMemcpyPtoP4, bytes) \
    F(CUpti_ActivityMemcpyPtoP4, start) \
    F(CUpti_ActivityMemcpyPtoP4, end) \
    F(CUpti_ActivityMemcpyPtoP4, deviceId) \
    F(CUpti_ActivityMemcpyPtoP4, contextId) \
    F(CUpti_ActivityMemcpyPtoP4, streamId) \
    F(CUpti_ActivityMemcpyPtoP4, srcDeviceId) \
    F(CUpti_ActivityMemcpyPtoP4, srcContextId) \
    F(CUpti_ActivityMemcpyPtoP4, dstDeviceId) \
    F(CUpti_ActivityMemcpyPtoP4, dstContextId) \
    F(CUpti_ActivityMemcpyPtoP4, correlationId) \
    F(CUpti_ActivityMemcpyPtoP4, reserved0) \
    F(CUpti_ActivityMemcpyPtoP4, graphNodeId) \
    F(CUpti_ActivityMemcpyPtoP4, graphId) \
    F(CUpti_ActivityMemcpyPtoP4, channelID) \
    F(CUpti_ActivityMemcpyPtoP4, channelType) \
    F(CUpti_ActivityMemset4, kind) \
    F(CUpti_ActivityMemset4, value) \
    F(CUpti_ActivityMemset4, bytes) \
    F(CUpti_ActivityMemset4, start) \
    F(CUpti_ActivityMemset4, end) \
    F(CUpti_ActivityMemset4, deviceId) \
    F(CUpti_ActivityMemset4, contextId) \
    F(CUpti_ActivityMemset4, streamId) \
    F(CUpti_ActivityMemset4, correlationId) \
    F(CUpti_ActivityMemset4, flags) \
    F(CUpti_ActivityMemset4, memoryKind) \
    F(CUpti_ActivityMemset4, pad) \
    F(CUpti_ActivityMemset4, reserved0) \
    F(CUpti_ActivityMemset4, graphNodeId) \
    F(CUpti_ActivityMemset4, graphId) \
    F(CUpti_ActivityMemset4, channelID) \
    F(CUpti_ActivityMemset4, channelType) \
    F(CUpti_ActivityMemset4, isDeviceLaunched) \
    F(CUpti_ActivityMemset4, pad2) \
    F(CUpti_ActivityAPI, kind) \
    F(CUpti_ActivityAPI, cbid) \
    F(CUpti_ActivityAPI, start) \
    F(CUpti_ActivityAPI, end) \
    F(CUpti_ActivityAPI, processId) \
    F(CUpti_ActivityAPI, threadId) \
    F(CUpti_ActivityAPI, correlationId) \
    F(CUpti_ActivityAPI, returnValue) \
    F(CUpti_ActivitySynchronization2, kind) \
    F(CUpti_ActivitySynchronization2, type) \
    F(CUpti_ActivitySynchronization2, start) \
    F(CUpti_ActivitySynchronization2, end) \
    F(CUpti_ActivitySynchronization2, correlationId) \
    F(CUpti_ActivitySynchronization2, contextId) \
    F(CUpti_ActivitySynchronization2, streamId) \
    F(CUpti_ActivitySynchronization2, cudaEventId) \
    F(CUpti_ActivitySynchronization2, cudaEventSyncId) \
    F(CUpti_ActivitySynchronization2, returnValue) \
    F(CUpti_ActivitySynchronization2, pad) \
    F(CUpti_ActivityOverhead3, kind) \
    F(CUpti_ActivityOverhead3, overheadKind) \
    F(CUpti_ActivityOverhead3, objectKind) \
    F(CUpti_ActivityOverhead3, objectId) \
    F(CUpti_ActivityOverhead3, start) \
    F(CUpti_ActivityOverhead3, end) \
    F(CUpti_ActivityOverhead3, correlationId) \
    F(CUpti_ActivityOverhead3, reserved0) \
    F(CUpti_ActivityOverhead3, overheadData) \
    F(CUpti_ActivityMemory4, kind) \
    F(CUpti_ActivityMemory4, memoryOperationType) \
    F(CUpti_ActivityMemory4, memoryKind) \
    F(CUpti_ActivityMemory4, correlationId) \
    F(CUpti_ActivityMemory4, address) \
    F(CUpti_ActivityMemory4, bytes) \
    F(CUpti_ActivityMemory4, timestamp) \
    F(CUpti_ActivityMemory4, PC) \
    F(CUpti_ActivityMemory4, processId) \
    F(CUpti_ActivityMemory4, deviceId) \
    F(CUpti_ActivityMemory4, contextId) \
    F(CUpti_ActivityMemory4, streamId) \
    F(CUpti_ActivityMemory4, name) \
    F(CUpti_ActivityMemory4, isAsync) \
    F(CUpti_ActivityMemory4, pad1) \
    F(CUpti_ActivityMemory4, memoryPoolConfig) \
    F(CUpti_ActivityMemory4, source) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.memoryPoolType) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.pad2) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.address) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.releaseThreshold) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.pool) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.pool.size) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.pool.processId) \
    F(CUpti_ActivityMemory4, memoryPoolConfig.utilizedSize) \
    F(CUpti_ActivityMemoryPool3, kind) \
    F(CUpti_ActivityMemoryPool3, memoryPoolOperationType) \
    F(CUpti_ActivityMemoryPool3, memoryPoolType) \
    F(CUpti_ActivityMemoryPool3, correlationId) \
    F(CUpti_ActivityMemoryPool3, processId) \
    F(CUpti_ActivityMemoryPool3, deviceId) \
    F(CUpti_ActivityMemoryPool3, minBytesToKeep) \
    F(CUpti_ActivityMemoryPool3, address) \
    F(CUpti_ActivityMemoryPool3, size) \
    F(CUpti_ActivityMemoryPool3, releaseThreshold) \
    F(CUpti_ActivityMemoryPool3, timestamp) \
    F(CUpti_ActivityMemoryPool3, utilizedSize) \
    F(CUpti_ActivityMemoryPool3, isManagedPool) \
    F(CUpti_ActivityMemoryPool3, pad2) \
    F(CUpti_ActivityMarker2, kind) \
    F(CUpti_ActivityMarker2, flags) \
    F(CUpti_ActivityMarker2, timestamp) \
    F(CUpti_ActivityMarker2, id) \
    F(CUpti_ActivityMarker2, objectKind) \
    F(CUpti_ActivityMarker2, objectId) \
    F(CUpti_ActivityMarker2, pad) \
    F(CUpti_ActivityMarker2, name) \
    F(CUpti_ActivityMarker2, domain) \
    F(CUpti_ActivityGraphTrace2, kind) \
    F(CUpti_ActivityGraphTrace2, correlationId) \
    F(CUpti_ActivityGraphTrace2, start) \
    F(CUpti_ActivityGraphTrace2, end) \
    F(CUpti_ActivityGraphTrace2, deviceId) \
    F(CUpti_ActivityGraphTrace2, graphId) \
    F(CUpti_ActivityGraphTrace2, contextId) \
    F(CUpti_ActivityGraphTrace2, streamId) \
    F(CUpti_ActivityGraphTrace2, reserved) \
    F(CUpti_ActivityGraphTrace2, endDeviceId) \
    F(CUpti_ActivityGraphTrace2, endContextId) \
    F(CUpti_ActivityExternalCorrelation, kind) \
    F(CUpti_ActivityExternalCorrelation, externalKind) \
    F(CUpti_ActivityExternalCorrelation, externalId) \
    F(CUpti_ActivityExternalCorrelation, correlationId) \
    F(CUpti_ActivityExternalCorrelation, reserved) \
    F(CUpti_ActivityCudaEvent2, kind) \
    F(CUpti_ActivityCudaEvent2, correlationId) \
    F(CUpti_ActivityCudaEvent2, contextId) \
    F(CUpti_ActivityCudaEvent2, streamId) \
    F(CUpti_ActivityCudaEvent2, eventId) \
    F(CUpti_ActivityCudaEvent2, pad) \
    F(CUpti_ActivityCudaEvent2, deviceId) \
    F(CUpti_ActivityCudaEvent2, pad2) \
    F(CUpti_ActivityCudaEvent2, reserved0) \
    F(CUpti_ActivityCudaEvent2, deviceTimestamp) \
    F(CUpti_ActivityCudaEvent2, cudaEventSyncId)

#define ABI_VALUES(V) \
    V(CUDA_SUCCESS) \
    V(CUDA_ERROR_INVALID_VALUE) \
    V(CUDA_ERROR_OUT_OF_MEMORY) \
    V(CUDA_ERROR_NOT_INITIALIZED) \
    V(CUDA_ERROR_DEINITIALIZED) \
    V(CUDA_ERROR_STUB_LIBRARY) \
    V(CUDA_ERROR_NO_DEVICE) \
    V(CUDA_ERROR_INVALID_DEVICE) \
    V(CUDA_ERROR_INVALID_CONTEXT) \
    V(CUDA_ERROR_INVALID_HANDLE) \
    V(CUDA_ERROR_NOT_FOUND) \
    V(CUDA_ERROR_NOT_READY) \
    V(CUDA_ERROR_ILLEGAL_ADDRESS) \
    V(CUDA_ERROR_CONTEXT_IS_DESTROYED) \
    V(CUDA_ERROR_LAUNCH_FAILED) \
    V(CUDA_ERROR_NOT_SUPPORTED) \
    V(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) \
    V(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) \
    V(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) \
    V(CUDA_ERROR_UNKNOWN) \
    V(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) \
    V(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) \
    V(CU_DEVICE_ATTRIBUTE_WARP_SIZE) \
    V(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK) \
    V(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) \
    V(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) \
    V(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) \
    V(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID) \
    V(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) \
    V(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) \
    V(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) \
    V(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) \
    V(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID) \
    V(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) \
    V(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) \
    V(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) \
    V(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) \
    V(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) \
    V(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR) \
    V(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK) \
    V(CU_EVENT_DEFAULT) \
    V(CU_EVENT_BLOCKING_SYNC) \
    V(CU_EVENT_DISABLE_TIMING) \
    V(CU_EVENT_INTERPROCESS) \
    V(CUPTI_SUCCESS) \
    V(CUPTI_ERROR_INVALID_PARAMETER) \
    V(CUPTI_ERROR_INVALID_DEVICE) \
    V(CUPTI_ERROR_INVALID_CONTEXT) \
    V(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID) \
    V(CUPTI_ERROR_INVALID_EVENT_ID) \
    V(CUPTI_ERROR_INVALID_EVENT_NAME) \
    V(CUPTI_ERROR_INVALID_OPERATION) \
    V(CUPTI_ERROR_OUT_OF_MEMORY) \
    V(CUPTI_ERROR_HARDWARE) \
    V(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT) \
    V(CUPTI_ERROR_API_NOT_IMPLEMENTED) \
    V(CUPTI_ERROR_MAX_LIMIT_REACHED) \
    V(CUPTI_ERROR_NOT_READY) \
    V(CUPTI_ERROR_NOT_COMPATIBLE) \
    V(CUPTI_ERROR_NOT_INITIALIZED) \
    V(CUPTI_ERROR_INVALID_METRIC_ID) \
    V(CUPTI_ERROR_INVALID_METRIC_NAME) \
    V(CUPTI_ERROR_QUEUE_EMPTY) \
    V(CUPTI_ERROR_INVALID_HANDLE) \
    V(CUPTI_ERROR_INVALID_STREAM) \
    V(CUPTI_ERROR_INVALID_KIND) \
    V(CUPTI_ERROR_INVALID_EVENT_VALUE) \
    V(CUPTI_ERROR_DISABLED) \
    V(CUPTI_ERROR_INVALID_MODULE) \
    V(CUPTI_ERROR_INVALID_METRIC_VALUE) \
    V(CUPTI_ERROR_HARDWARE_BUSY) \
    V(CUPTI_ERROR_NOT_SUPPORTED) \
    V(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED) \
    V(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE) \
    V(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES) \
    V(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS) \
    V(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED) \
    V(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED) \
    V(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE) \
    V(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) \
    V(CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED) \
    V(CUPTI_ERROR_OPENACC_UNDEFINED_ROUTINE) \
    V(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED) \
    V(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) \
    V(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) \
    V(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED) \
    V(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED) \
    V(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED) \
    V(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED) \
    V(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED) \
    V(CUPTI_ERROR_INVALID_CHIP_NAME) \
    V(CUPTI_ERROR_UNKNOWN) \
    V(CUPTI_ERROR_FORCE_INT) \
    V(CUPTI_ACTIVITY_KIND_INVALID) \
    V(CUPTI_ACTIVITY_KIND_MEMCPY) \
    V(CUPTI_ACTIVITY_KIND_MEMSET) \
    V(CUPTI_ACTIVITY_KIND_KERNEL) \
    V(CUPTI_ACTIVITY_KIND_DRIVER) \
    V(CUPTI_ACTIVITY_KIND_RUNTIME) \
    V(CUPTI_ACTIVITY_KIND_EVENT) \
    V(CUPTI_ACTIVITY_KIND_METRIC) \
    V(CUPTI_ACTIVITY_KIND_DEVICE) \
    V(CUPTI_ACTIVITY_KIND_CONTEXT) \
    V(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) \
    V(CUPTI_ACTIVITY_KIND_NAME) \
    V(CUPTI_ACTIVITY_KIND_MARKER) \
    V(CUPTI_ACTIVITY_KIND_MARKER_DATA) \
    V(CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR) \
    V(CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS) \
    V(CUPTI_ACTIVITY_KIND_BRANCH) \
    V(CUPTI_ACTIVITY_KIND_OVERHEAD) \
    V(CUPTI_ACTIVITY_KIND_CDP_KERNEL) \
    V(CUPTI_ACTIVITY_KIND_PREEMPTION) \
    V(CUPTI_ACTIVITY_KIND_ENVIRONMENT) \
    V(CUPTI_ACTIVITY_KIND_EVENT_INSTANCE) \
    V(CUPTI_ACTIVITY_KIND_MEMCPY2) \
    V(CUPTI_ACTIVITY_KIND_METRIC_INSTANCE) \
    V(CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION) \
    V(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) \
    V(CUPTI_ACTIVITY_KIND_FUNCTION) \
    V(CUPTI_ACTIVITY_KIND_MODULE) \
    V(CUPTI_ACTIVITY_KIND_DEVICE_ATTRIBUTE) \
    V(CUPTI_ACTIVITY_KIND_SHARED_ACCESS) \
    V(CUPTI_ACTIVITY_KIND_PC_SAMPLING) \
    V(CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO) \
    V(CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION) \
    V(CUPTI_ACTIVITY_KIND_OPENACC_DATA) \
    V(CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH) \
    V(CUPTI_ACTIVITY_KIND_OPENACC_OTHER) \
    V(CUPTI_ACTIVITY_KIND_CUDA_EVENT) \
    V(CUPTI_ACTIVITY_KIND_STREAM) \
    V(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) \
    V(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) \
    V(CUPTI_ACTIVITY_KIND_NVLINK) \
    V(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT) \
    V(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT_INSTANCE) \
    V(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC) \
    V(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC_INSTANCE) \
    V(CUPTI_ACTIVITY_KIND_MEMORY) \
    V(CUPTI_ACTIVITY_KIND_PCIE) \
    V(CUPTI_ACTIVITY_KIND_OPENMP) \
    V(CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API) \
    V(CUPTI_ACTIVITY_KIND_MEMORY2) \
    V(CUPTI_ACTIVITY_KIND_MEMORY_POOL) \
    V(CUPTI_ACTIVITY_KIND_GRAPH_TRACE) \
    V(CUPTI_ACTIVITY_KIND_JIT) \
    V(CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE) \
    V(CUPTI_ACTIVITY_KIND_MEM_DECOMPRESS) \
    V(CUPTI_ACTIVITY_KIND_CONFIDENTIAL_COMPUTE_ROTATION) \
    V(CUPTI_ACTIVITY_KIND_FORCE_INT) \
    V(CUPTI_ACTIVITY_OBJECT_UNKNOWN) \
    V(CUPTI_ACTIVITY_OBJECT_PROCESS) \
    V(CUPTI_ACTIVITY_OBJECT_THREAD) \
    V(CUPTI_ACTIVITY_OBJECT_DEVICE) \
    V(CUPTI_ACTIVITY_OBJECT_CONTEXT) \
    V(CUPTI_ACTIVITY_OBJECT_STREAM) \
    V(CUPTI_ACTIVITY_OBJECT_FORCE_INT) \
    V(CUPTI_ACTIVITY_OVERHEAD_UNKNOWN) \
    V(CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER) \
    V(CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH) \
    V(CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION) \
    V(CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE) \
    V(CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING) \
    V(CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING) \
    V(CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL) \
    V(CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST) \
    V(CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT) \
    V(CUPTI_ACTIVITY_OVERHEAD_FORCE_INT) \
    V(CUPTI_ACTIVITY_FLAG_NONE) \
    V(CUPTI_ACTIVITY_FLAG_DEVICE_CONCURRENT_KERNELS) \
    V(CUPTI_ACTIVITY_FLAG_DEVICE_ATTRIBUTE_CUDEVICE) \
    V(CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_START) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_END) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE_SUCCESS) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE_FAILED) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_SYNC_RELEASE) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_COLOR_NONE) \
    V(CUPTI_ACTIVITY_FLAG_MARKER_COLOR_ARGB) \
    V(CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_SIZE_MASK) \
    V(CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_LOAD) \
    V(CUPTI_ACTIVITY_FLAG_GLOBAL_ACCESS_KIND_CACHED) \
    V(CUPTI_ACTIVITY_FLAG_METRIC_OVERFLOWED) \
    V(CUPTI_ACTIVITY_FLAG_METRIC_VALUE_INVALID) \
    V(CUPTI_ACTIVITY_FLAG_INSTRUCTION_VALUE_INVALID) \
    V(CUPTI_ACTIVITY_FLAG_INSTRUCTION_CLASS_MASK) \
    V(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) \
    V(CUPTI_ACTIVITY_FLAG_SHARED_ACCESS_KIND_SIZE_MASK) \
    V(CUPTI_ACTIVITY_FLAG_SHARED_ACCESS_KIND_LOAD) \
    V(CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC) \
    V(CUPTI_ACTIVITY_FLAG_THRASHING_IN_CPU) \
    V(CUPTI_ACTIVITY_FLAG_THROTTLING_IN_CPU) \
    V(CUPTI_ACTIVITY_FLAG_FORCE_INT) \
    V(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) \
    V(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_HTOA) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_ATOH) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_ATOA) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_ATOD) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_DTOA) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP) \
    V(CUPTI_ACTIVITY_MEMCPY_KIND_FORCE_INT) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_PINNED) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_ARRAY) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC) \
    V(CUPTI_ACTIVITY_MEMORY_KIND_FORCE_INT) \
    V(CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_UNKNOWN) \
    V(CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED) \
    V(CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_OFF) \
    V(CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_ON) \
    V(CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_FORCE_INT) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE) \
    V(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_FORCE_INT) \
    V(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID) \
    V(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) \
    V(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) \
    V(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_FORCE_INT) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_TYPE_FORCE_INT) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_INVALID) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED) \
    V(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_FORCE_INT) \
    V(CUPTI_CHANNEL_TYPE_INVALID) \
    V(CUPTI_CHANNEL_TYPE_COMPUTE) \
    V(CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY) \
    V(CUPTI_CHANNEL_TYPE_DECOMP) \
    V(CUPTI_CHANNEL_TYPE_FORCE_INT) \
    V(CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR) \
    V(CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE) \
    V(CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE) \
    V(CUPTI_ACTIVITY_LAUNCH_TYPE_CBL_COMMANDLIST) \
    V(CUPTI_FUNC_SHMEM_LIMIT_DEFAULT) \
    V(CUPTI_FUNC_SHMEM_LIMIT_OPTIN) \
    V(CUPTI_FUNC_SHMEM_LIMIT_FORCE_INT) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) \
    V(CUPTI_EXTERNAL_CORRELATION_KIND_FORCE_INT) \
    V(CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT) \
    V(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) \
    V(CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE) \
    V(CUPTI_ACTIVITY_THREAD_ID_TYPE_FORCE_INT) \
    V(CUPTI_API_ENTER) \
    V(CUPTI_API_EXIT) \
    V(CUPTI_API_CBSITE_FORCE_INT) \
    V(CUPTI_CB_DOMAIN_INVALID) \
    V(CUPTI_CB_DOMAIN_DRIVER_API) \
    V(CUPTI_CB_DOMAIN_RUNTIME_API) \
    V(CUPTI_CB_DOMAIN_RESOURCE) \
    V(CUPTI_CB_DOMAIN_SYNCHRONIZE) \
    V(CUPTI_CB_DOMAIN_NVTX) \
    V(CUPTI_CB_DOMAIN_STATE) \
    V(CUPTI_CB_DOMAIN_SIZE) \
    V(CUPTI_CB_DOMAIN_FORCE_INT) \
    V(CUPTI_RUNTIME_TRACE_CBID_INVALID) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_v4000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_v4000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyArrayToArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DArrayToArray_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToArrayAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromArrayAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DToArrayAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_ptds_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_ptsz_v7000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v12080) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v12080) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v12080) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000) \
    V(CUPTI_RUNTIME_TRACE_CBID_FORCE_INT) \
    V(CUPTI_DRIVER_TRACE_CBID_INVALID) \
    V(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32) \
    V(CUPTI_DRIVER_TRACE_CBID_cuEventRecord) \
    V(CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize) \
    V(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice) \
    V(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch) \
    V(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags) \
    V(CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) \
    V(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz) \
    V(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2) \
    V(CUPTI_DRIVER_TRACE_CBID_FORCE_INT) \
    V(CUPTI_SUBSCRIBER_NAME_MAX_LEN) \
    V(CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN) \
    V(CUpti_SubscriberParams_STRUCT_SIZE) \
    V(CUPTI_CORRELATION_ID_UNKNOWN) \
    V(CUPTI_TIMESTAMP_UNKNOWN) \
    V(CUPTI_SYNCHRONIZATION_INVALID_VALUE) \
    V(CUPTI_INVALID_CONTEXT_ID) \
    V(CUPTI_INVALID_STREAM_ID)

/* Function types: the PFN_ name in cupti_abi.h and the symbol cuda_loader.c resolves. */
#define ABI_PFNS(P) \
    P(cuptiGetVersion, cuptiGetVersion) \
    P(cuptiGetResultString, cuptiGetResultString) \
    P(cuptiGetErrorMessage, cuptiGetErrorMessage) \
    P(cuptiSubscribe, cuptiSubscribe) \
    P(cuptiSubscribe_v2, cuptiSubscribe_v2) \
    P(cuptiUnsubscribe, cuptiUnsubscribe) \
    P(cuptiActivityRegisterCallbacks, cuptiActivityRegisterCallbacks) \
    P(cuptiActivityRegisterTimestampCallback, cuptiActivityRegisterTimestampCallback) \
    P(cuptiActivityEnable, cuptiActivityEnable) \
    P(cuptiActivityDisable, cuptiActivityDisable) \
    P(cuptiActivityEnableRuntimeApi, cuptiActivityEnableRuntimeApi) \
    P(cuptiActivityEnableDriverApi, cuptiActivityEnableDriverApi) \
    P(cuptiActivityFlushAll, cuptiActivityFlushAll) \
    P(cuptiActivitySetAttribute, cuptiActivitySetAttribute) \
    P(cuptiActivityGetNextRecord, cuptiActivityGetNextRecord) \
    P(cuptiActivityGetNumDroppedRecords, cuptiActivityGetNumDroppedRecords) \
    P(cuptiGetTimestamp, cuptiGetTimestamp) \
    P(cuptiFinalize, cuptiFinalize) \
    P(cuptiEnableDomain, cuptiEnableDomain) \
    P(cuptiActivityPushExternalCorrelationId, cuptiActivityPushExternalCorrelationId) \
    P(cuptiActivityPopExternalCorrelationId, cuptiActivityPopExternalCorrelationId) \
    P(cuptiGetDeviceId, cuptiGetDeviceId) \
    P(cuptiGetContextId, cuptiGetContextId) \
    P(cuptiGetStreamIdEx, cuptiGetStreamIdEx) \
    P(cuptiSetThreadIdType, cuptiSetThreadIdType) \
    P(cuInit, cuInit) \
    P(cuDriverGetVersion, cuDriverGetVersion) \
    P(cuDeviceGetCount, cuDeviceGetCount) \
    P(cuDeviceGet, cuDeviceGet) \
    P(cuDeviceGetName, cuDeviceGetName) \
    P(cuDeviceTotalMem, cuDeviceTotalMem_v2) \
    P(cuDeviceGetAttribute, cuDeviceGetAttribute) \
    P(cuCtxGetCurrent, cuCtxGetCurrent) \
    P(cuCtxPushCurrent, cuCtxPushCurrent_v2) \
    P(cuCtxPopCurrent, cuCtxPopCurrent_v2) \
    P(cuStreamGetCtx, cuStreamGetCtx) \
    P(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState) \
    P(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain) \
    P(cuEventCreate, cuEventCreate) \
    P(cuEventDestroy, cuEventDestroy_v2) \
    P(cuEventRecord, cuEventRecord) \
    P(cuEventQuery, cuEventQuery) \
    P(cuEventSynchronize, cuEventSynchronize) \
    P(cuEventElapsedTime, cuEventElapsedTime_v2) \
    P(cuStreamSynchronize, cuStreamSynchronize) \
    P(cuGetErrorString, cuGetErrorString)

/* ---- the two tables ---- */

#define ABI_S(T) \
    {"sizeof(" #T ")", (long long)sizeof(T)}, {"_Alignof(" #T ")", (long long)_Alignof(T)},
#define ABI_F(T, f) \
    {"offsetof(" #T ", " #f ")", (long long)offsetof(T, f)}, \
    {"sizeof(" #T "." #f ")", (long long)sizeof(((T *)0)->f)},
#define ABI_V(v) {#v, (long long)(v)},
#define ABI_TABLE(name) \
    const abi_entry name[] = {ABI_TYPES(ABI_S) ABI_FIELDS(ABI_F) ABI_VALUES(ABI_V)}; \
    const size_t name##_n = sizeof(name) / sizeof(name[0]);

#if defined(ABI_SIDE_REAL)

#include <cuda.h>
#include <cupti.h>

ABI_TABLE(abi_real)
const long long abi_real_cupti_version = CUPTI_API_VERSION;
const long long abi_real_cuda_version = CUDA_VERSION;

/* Our callback typedefs are repeated here on top of NVIDIA's (C11 allows an identical repeat,
 * a different one does not compile), and each PFN_ type must be exactly the prototype's type. */
#define CPROF_CUPTI_ABI_PFN_ONLY
#include "cupti_abi.h"
#define ABI_P(pfn, sym) \
    _Static_assert(__builtin_types_compatible_p(PFN_##pfn, __typeof__(&sym)), \
                   "PFN_" #pfn " does not match the prototype of " #sym);
ABI_PFNS(ABI_P)

#elif defined(ABI_SIDE_OURS)

#include "cupti_abi.h"

ABI_TABLE(abi_ours)
const long long abi_ours_cupti_version = CPROF_CUPTI_ABI_VERSION;
const long long abi_ours_cuda_version = CPROF_CUDA_ABI_VERSION;

#else /* the comparison */

extern const abi_entry abi_real[], abi_ours[];
extern const size_t abi_real_n, abi_ours_n;
extern const long long abi_real_cupti_version, abi_ours_cupti_version;
extern const long long abi_real_cuda_version, abi_ours_cuda_version;

int main(void) {
    size_t bad = 0;
    /* Versions differing is not an error by itself (a newer toolkit may keep these layouts);
     * the entries below decide. Printed so a failure can be read against them. */
    printf("CUPTI_API_VERSION: real %lld, cupti_abi.h %lld\n", abi_real_cupti_version,
           abi_ours_cupti_version);
    printf("CUDA_VERSION: real %lld, cupti_abi.h %lld\n", abi_real_cuda_version,
           abi_ours_cuda_version);
    if (abi_real_n != abi_ours_n) {
        printf("MISMATCH: %zu real entries, %zu ours (the two sides disagree on the lists)\n",
               abi_real_n, abi_ours_n);
        return 1;
    }
    for (size_t i = 0; i < abi_real_n; i++) {
        if (strcmp(abi_real[i].what, abi_ours[i].what) != 0) {
            printf("MISMATCH: entry %zu is %s (real) vs %s (ours)\n", i, abi_real[i].what,
                   abi_ours[i].what);
            return 1;
        }
        if (abi_real[i].value != abi_ours[i].value) {
            printf("MISMATCH: %s: real %lld, cupti_abi.h %lld\n", abi_real[i].what,
                   abi_real[i].value, abi_ours[i].value);
            bad++;
        }
    }
    printf("%zu of %zu entries match\n", abi_real_n - bad, abi_real_n);
    return bad ? 1 : 0;
}

#endif
