"""The fake CUPTI / libcuda (tests/fake_cupti) driven through ctypes alone, the way cprof's
collector will drive the real one: subscribe, register buffer callbacks, enable kinds and call
ids, queue synthetic activity, flush, walk the buffers. Then cprof's loader (csrc/cuda_loader.c)
pointed at it. Proves the fake before anything depends on it. Needs gcc; no GPU, no CUDA."""
import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    byref,
    c_char,
    c_char_p,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_DIR = os.path.join(ROOT, "tests", "fake_cupti")
FAKE_SO = os.path.join(FAKE_DIR, "libfake_cupti.so")

# ---- numbers from csrc/cupti_abi.h (checked against NVIDIA's headers by test_abi.py) ----
CUPTI_SUCCESS = 0
CUPTI_ERROR_INVALID_PARAMETER = 1
CUPTI_ERROR_INVALID_OPERATION = 7
CUPTI_ERROR_MAX_LIMIT_REACHED = 12
CUPTI_ERROR_QUEUE_EMPTY = 18
CUPTI_ERROR_INVALID_KIND = 21
CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35
CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39

KIND_MEMCPY, KIND_MEMSET, KIND_KERNEL, KIND_DRIVER, KIND_RUNTIME = 1, 2, 3, 4, 5
KIND_CONCURRENT_KERNEL, KIND_MARKER, KIND_OVERHEAD = 10, 12, 17
KIND_SYNCHRONIZATION, KIND_EXTERNAL_CORRELATION = 38, 39
KIND_MEMORY2, KIND_GRAPH_TRACE = 49, 51

MEMCPY_HTOD, MEMCPY_DTOH = 1, 2
MEMORY_PAGEABLE, MEMORY_PINNED, MEMORY_DEVICE = 1, 2, 3
SYNC_STREAM_SYNCHRONIZE = 3
MARKER_START, MARKER_END = 1 << 1, 1 << 2
EXT_KIND_CUSTOM0 = 3

CBID_cudaLaunchKernel = 211
CBID_cudaMemcpyAsync = 41
CBID_cudaMemsetAsync = 51
CBID_cudaStreamSynchronize = 131
CBID_cudaGraphLaunch = 311
CBID_cudaGetDevice = 17
CBID_cuLaunchKernel = 307
SCRIPT_RUNTIME_CBIDS = [
    CBID_cudaLaunchKernel,
    CBID_cudaMemcpyAsync,
    CBID_cudaMemsetAsync,
    CBID_cudaStreamSynchronize,
    CBID_cudaGraphLaunch,
]

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_READY = 600
CU_EVENT_DISABLE_TIMING = 2
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

FILL_KERNEL = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEE"
    "viT0_T1_"
)
TRITON_KERNEL = "triton_poi_fused_add_0"


# ---- ctypes mirrors of the records the tests read (packed, like CUPTI's) ----
class ActivityAPI(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("cbid", c_uint32), ("start", c_uint64), ("end", c_uint64),
        ("processId", c_uint32), ("threadId", c_uint32), ("correlationId", c_uint32),
        ("returnValue", c_uint32),
    ]


class ActivityKernel10(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("cacheConfig", c_uint8), ("sharedMemoryConfig", c_uint8),
        ("registersPerThread", c_uint16), ("partitionedGlobalCacheRequested", c_int32),
        ("partitionedGlobalCacheExecuted", c_int32), ("start", c_uint64), ("end", c_uint64),
        ("completed", c_uint64), ("deviceId", c_uint32), ("contextId", c_uint32),
        ("streamId", c_uint32), ("gridX", c_int32), ("gridY", c_int32), ("gridZ", c_int32),
        ("blockX", c_int32), ("blockY", c_int32), ("blockZ", c_int32),
        ("staticSharedMemory", c_int32), ("dynamicSharedMemory", c_int32),
        ("localMemoryPerThread", c_uint32), ("localMemoryTotal", c_uint32),
        ("correlationId", c_uint32), ("gridId", c_int64), ("name", c_char_p),
        ("reserved0", c_void_p), ("queued", c_uint64), ("submitted", c_uint64),
        ("launchType", c_uint8), ("isSharedMemoryCarveoutRequested", c_uint8),
        ("sharedMemoryCarveoutRequested", c_uint8), ("padding", c_uint8),
        ("sharedMemoryExecuted", c_uint32), ("graphNodeId", c_uint64),
        ("shmemLimitConfig", c_int32), ("graphId", c_uint32), ("pAccessPolicyWindow", c_void_p),
        ("channelID", c_uint32), ("channelType", c_int32), ("clusterX", c_uint32),
        ("clusterY", c_uint32), ("clusterZ", c_uint32), ("clusterSchedulingPolicy", c_uint32),
        ("localMemoryTotal_v2", c_uint64), ("maxPotentialClusterSize", c_uint32),
        ("maxActiveClusters", c_uint32), ("isDeviceLaunched", c_uint8),
        ("padding3", c_uint8 * 7),
    ]


class ActivityMemcpy6(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("copyKind", c_uint8), ("srcKind", c_uint8), ("dstKind", c_uint8),
        ("flags", c_uint8), ("bytes", c_uint64), ("start", c_uint64), ("end", c_uint64),
        ("deviceId", c_uint32), ("contextId", c_uint32), ("streamId", c_uint32),
        ("correlationId", c_uint32), ("runtimeCorrelationId", c_uint32), ("pad", c_uint32),
        ("reserved0", c_void_p), ("graphNodeId", c_uint64), ("graphId", c_uint32),
        ("channelID", c_uint32), ("channelType", c_int32), ("isDeviceLaunched", c_uint8),
        ("pad2", c_uint8 * 3), ("copyCount", c_uint64),
    ]


class ActivityMemset4(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("value", c_uint32), ("bytes", c_uint64), ("start", c_uint64),
        ("end", c_uint64), ("deviceId", c_uint32), ("contextId", c_uint32),
        ("streamId", c_uint32), ("correlationId", c_uint32), ("flags", c_uint16),
        ("memoryKind", c_uint16), ("pad", c_uint32), ("reserved0", c_void_p),
        ("graphNodeId", c_uint64), ("graphId", c_uint32), ("channelID", c_uint32),
        ("channelType", c_int32), ("isDeviceLaunched", c_uint8), ("pad2", c_uint8 * 3),
    ]


class ActivitySynchronization2(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("type", c_int32), ("start", c_uint64), ("end", c_uint64),
        ("correlationId", c_uint32), ("contextId", c_uint32), ("streamId", c_uint32),
        ("cudaEventId", c_uint32), ("cudaEventSyncId", c_uint64), ("returnValue", c_uint32),
        ("pad", c_uint32),
    ]


class ActivityGraphTrace2(Structure):
    _fields_ = [
        ("kind", c_int32), ("correlationId", c_uint32), ("start", c_uint64), ("end", c_uint64),
        ("deviceId", c_uint32), ("graphId", c_uint32), ("contextId", c_uint32),
        ("streamId", c_uint32), ("reserved", c_void_p), ("endDeviceId", c_uint32),
        ("endContextId", c_uint32),
    ]


class ObjectKindIdPt(Structure):
    _fields_ = [("processId", c_uint32), ("threadId", c_uint32)]


class ObjectKindIdDcs(Structure):
    _fields_ = [("deviceId", c_uint32), ("contextId", c_uint32), ("streamId", c_uint32)]


class ObjectKindId(Union):
    _fields_ = [("pt", ObjectKindIdPt), ("dcs", ObjectKindIdDcs)]


class ActivityMarker2(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("flags", c_int32), ("timestamp", c_uint64), ("id", c_uint32),
        ("objectKind", c_int32), ("objectId", ObjectKindId), ("pad", c_uint32),
        ("name", c_char_p), ("domain", c_char_p),
    ]


class ActivityExternalCorrelation(Structure):
    _pack_ = 1
    _fields_ = [
        ("kind", c_int32), ("externalKind", c_int32), ("externalId", c_uint64),
        ("correlationId", c_uint32), ("reserved", c_uint32),
    ]


MIRRORS = {
    "CUpti_ActivityAPI": ActivityAPI,
    "CUpti_ActivityKernel10": ActivityKernel10,
    "CUpti_ActivityMemcpy6": ActivityMemcpy6,
    "CUpti_ActivityMemset4": ActivityMemset4,
    "CUpti_ActivitySynchronization2": ActivitySynchronization2,
    "CUpti_ActivityGraphTrace2": ActivityGraphTrace2,
    "CUpti_ActivityMarker2": ActivityMarker2,
    "CUpti_ActivityExternalCorrelation": ActivityExternalCorrelation,
}
DECODE = {
    KIND_RUNTIME: ActivityAPI,
    KIND_DRIVER: ActivityAPI,
    KIND_KERNEL: ActivityKernel10,
    KIND_CONCURRENT_KERNEL: ActivityKernel10,
    KIND_MEMCPY: ActivityMemcpy6,
    KIND_MEMSET: ActivityMemset4,
    KIND_SYNCHRONIZATION: ActivitySynchronization2,
    KIND_GRAPH_TRACE: ActivityGraphTrace2,
    KIND_MARKER: ActivityMarker2,
    KIND_EXTERNAL_CORRELATION: ActivityExternalCorrelation,
}

BufferRequested = CFUNCTYPE(None, POINTER(POINTER(c_uint8)), POINTER(c_size_t), POINTER(c_size_t))
BufferCompleted = CFUNCTYPE(None, c_void_p, c_uint32, POINTER(c_uint8), c_size_t, c_size_t)
TimestampFunc = CFUNCTYPE(c_uint64)
CallbackFunc = CFUNCTYPE(None, c_void_p, c_int, c_uint32, c_void_p)


class SubscriberParams(Structure):
    _fields_ = [
        ("structSize", c_size_t), ("subscriberName", c_char_p),
        ("oldSubscriberName", POINTER(c_char)), ("oldSubscriberSize", c_size_t),
    ]


# restype, argtypes of everything the tests call
SIGNATURES = {
    "cuptiGetVersion": (c_int, [POINTER(c_uint32)]),
    "cuptiGetResultString": (c_int, [c_int, POINTER(c_char_p)]),
    "cuptiSubscribe": (c_int, [POINTER(c_void_p), CallbackFunc, c_void_p]),
    "cuptiSubscribe_v2": (c_int, [POINTER(c_void_p), CallbackFunc, c_void_p,
                                  POINTER(SubscriberParams)]),
    "cuptiUnsubscribe": (c_int, [c_void_p]),
    "cuptiActivityRegisterCallbacks": (c_int, [BufferRequested, BufferCompleted]),
    "cuptiActivityRegisterTimestampCallback": (c_int, [TimestampFunc]),
    "cuptiActivityEnable": (c_int, [c_int]),
    "cuptiActivityDisable": (c_int, [c_int]),
    "cuptiActivityEnableRuntimeApi": (c_int, [c_uint32, c_uint8]),
    "cuptiActivityEnableDriverApi": (c_int, [c_uint32, c_uint8]),
    "cuptiActivityFlushAll": (c_int, [c_uint32]),
    "cuptiActivityGetNextRecord": (c_int, [POINTER(c_uint8), c_size_t, POINTER(c_void_p)]),
    "cuptiActivityGetNumDroppedRecords": (c_int, [c_void_p, c_uint32, POINTER(c_size_t)]),
    "cuptiGetTimestamp": (c_int, [POINTER(c_uint64)]),
    "cuptiFinalize": (c_int, []),
    "cuptiActivityPushExternalCorrelationId": (c_int, [c_int, c_uint64]),
    "cuptiActivityPopExternalCorrelationId": (c_int, [c_int, POINTER(c_uint64)]),
    "cuptiGetStreamIdEx": (c_int, [c_void_p, c_void_p, c_uint8, POINTER(c_uint32)]),
    "cuptiSetThreadIdType": (c_int, [c_int]),
    "cuInit": (c_int, [ctypes.c_uint]),
    "cuDriverGetVersion": (c_int, [POINTER(c_int)]),
    "cuDeviceGetCount": (c_int, [POINTER(c_int)]),
    "cuDeviceGet": (c_int, [POINTER(c_int), c_int]),
    "cuDeviceGetName": (c_int, [ctypes.c_char_p, c_int, c_int]),
    "cuDeviceTotalMem_v2": (c_int, [POINTER(c_size_t), c_int]),
    "cuDeviceGetAttribute": (c_int, [POINTER(c_int), c_int, c_int]),
    "cuCtxGetCurrent": (c_int, [POINTER(c_void_p)]),
    "cuCtxPushCurrent_v2": (c_int, [c_void_p]),
    "cuCtxPopCurrent_v2": (c_int, [POINTER(c_void_p)]),
    "cuStreamGetCtx": (c_int, [c_void_p, POINTER(c_void_p)]),
    "cuEventCreate": (c_int, [POINTER(c_void_p), ctypes.c_uint]),
    "cuEventDestroy_v2": (c_int, [c_void_p]),
    "cuEventRecord": (c_int, [c_void_p, c_void_p]),
    "cuEventQuery": (c_int, [c_void_p]),
    "cuEventSynchronize": (c_int, [c_void_p]),
    "cuEventElapsedTime_v2": (c_int, [POINTER(c_float), c_void_p, c_void_p]),
    "cuEventElapsedTime": (c_int, [POINTER(c_float), c_void_p, c_void_p]),
    "cuStreamSynchronize": (c_int, [c_void_p]),
    "cuGetErrorString": (c_int, [c_int, POINTER(c_char_p)]),
    "fake_cupti_reset": (None, []),
    "fake_cupti_set_error": (c_int, [c_char_p, c_int]),
    "fake_cupti_set_error_once": (c_int, [c_char_p, c_int]),
    "fake_cupti_set_other_subscriber": (None, [c_char_p]),
    "fake_cupti_set_async": (None, [c_int]),
    "fake_cupti_set_own_clock": (None, [c_int]),
    "fake_cupti_set_dropped": (None, [c_uint64]),
    "fake_cuda_set_events_pending": (None, [c_int]),
    "fake_cupti_subscribers": (c_int, []),
    "fake_cupti_enabled_kinds_mask": (c_uint64, []),
    "fake_cupti_api_enabled": (c_int, [c_int, c_uint32]),
    "fake_cupti_calls": (c_int64, [c_char_p]),
    "fake_cupti_has_timestamp_callback": (c_int, []),
    "fake_cupti_thread_id_type": (c_int, []),
    "fake_cupti_pending": (c_uint64, []),
    "fake_cupti_discarded": (c_uint64, []),
    "fake_cupti_buffers_completed": (c_uint64, []),
    "fake_cupti_records_delivered": (c_uint64, []),
    "fake_cuda_live_events": (c_uint64, []),
    "fake_cupti_add_kernel": (c_int, [c_char_p, c_uint64, c_uint64, c_uint32, c_uint32]),
    "fake_cupti_add_graph_kernel": (c_int, [c_char_p, c_uint64, c_uint64, c_uint32, c_uint32,
                                            c_uint32, c_uint64]),
    "fake_cupti_add_memcpy": (c_int, [c_int, c_int, c_int, c_uint64, c_uint64, c_uint64,
                                      c_uint32, c_uint32, c_int]),
    "fake_cupti_add_memset": (c_int, [c_uint32, c_uint64, c_uint64, c_uint64, c_uint32, c_uint32,
                                      c_int]),
    "fake_cupti_add_api": (c_int, [c_int, c_int, c_uint64, c_uint64, c_uint32, c_uint32]),
    "fake_cupti_add_sync": (c_int, [c_int, c_uint64, c_uint64, c_uint32, c_uint32, c_uint32]),
    "fake_cupti_add_graph_trace": (c_int, [c_uint64, c_uint64, c_uint32, c_uint32, c_uint32]),
    "fake_cupti_add_marker": (c_int, [c_char_p, c_char_p, c_uint32, c_uint64, c_uint64,
                                      c_uint32]),
    "fake_cupti_add_overhead": (c_int, [c_int, c_uint64, c_uint64, c_uint32]),
    "fake_cupti_add_memory": (c_int, [c_int, c_int, c_uint64, c_uint64, c_uint64, c_uint32,
                                      c_uint32]),
    "fake_cupti_add_mempool": (c_int, [c_int, c_int, c_uint64, c_uint64, c_uint64, c_uint64]),
    "fake_cupti_add_external_correlation": (c_int, [c_int, c_uint64, c_uint32]),
    "fake_cupti_script_basic": (c_int, [c_uint64, c_uint32]),
}

# every CUPTI / driver symbol csrc/cuda_loader.c resolves, under its exported name
LOADER_SYMBOLS = [
    "cuptiGetVersion", "cuptiGetResultString", "cuptiSubscribe", "cuptiUnsubscribe",
    "cuptiActivityRegisterCallbacks", "cuptiActivityEnable", "cuptiActivityDisable",
    "cuptiActivityFlushAll", "cuptiActivityGetNextRecord", "cuptiActivityGetNumDroppedRecords",
    "cuptiGetTimestamp", "cuptiFinalize", "cuptiGetErrorMessage", "cuptiSubscribe_v2",
    "cuptiActivityRegisterTimestampCallback", "cuptiActivityEnableRuntimeApi",
    "cuptiActivityEnableDriverApi", "cuptiActivityPushExternalCorrelationId",
    "cuptiActivityPopExternalCorrelationId", "cuptiGetDeviceId", "cuptiGetContextId",
    "cuptiGetStreamIdEx", "cuptiSetThreadIdType",
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
    "cuDeviceTotalMem_v2", "cuDeviceGetAttribute", "cuCtxGetCurrent", "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2", "cuStreamGetCtx", "cuEventCreate",
    "cuEventDestroy_v2", "cuEventRecord", "cuEventQuery", "cuEventSynchronize",
    "cuEventElapsedTime_v2", "cuStreamSynchronize", "cuGetErrorString",
]


def build_fake():
    """Builds libfake_cupti.so once per session (skips the module if there is no C compiler)."""
    if not shutil.which(os.environ.get("CC", "gcc")):
        pytest.skip("no C compiler to build tests/fake_cupti")
    subprocess.run(["bash", os.path.join(FAKE_DIR, "build.sh")], check=True)
    return FAKE_SO


@pytest.fixture(scope="module")
def fake():
    lib = ctypes.CDLL(build_fake())
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


@pytest.fixture(autouse=True)
def clean(request):
    if "fake" in request.fixturenames:
        lib = request.getfixturevalue("fake")
        lib.fake_cupti_reset()
        # these tests read back the times they gave: records stay in the test's clock (the
        # fake's default, as CUPTI's, is its own clock when no timestamp callback is set)
        lib.fake_cupti_set_own_clock(0)
        # and they look at records between adding and flushing: no background delivery
        lib.fake_cupti_set_async(0)
        yield
        lib.fake_cupti_reset()
    else:
        yield


class Collector:
    """What cprof's collector does with the activity API, in Python: hands out 8-byte aligned
    buffers, walks completed ones with cuptiActivityGetNextRecord and keeps copies of records."""

    def __init__(self, lib, buffer_size=1 << 16, max_records=0, give_none=False):
        self.lib = lib
        self.buffer_size = buffer_size
        self.max_records = max_records
        self.give_none = give_none
        self.live = {}  # address -> ctypes array: keeps buffers alive while CUPTI has them
        self.records = []  # (kind, decoded copy)
        self.completed = []  # (valid_size, thread ident)
        self.walk_errors = []
        self.lock = threading.Lock()
        self.req = BufferRequested(self._requested)
        self.comp = BufferCompleted(self._completed)

    def _requested(self, buf, size, max_records):
        if self.give_none:
            buf[0] = POINTER(c_uint8)()
            size[0] = 0
            return
        arr = (c_uint64 * (self.buffer_size // 8))()  # uint64 elements: 8-byte aligned
        with self.lock:
            self.live[ctypes.addressof(arr)] = arr
        buf[0] = ctypes.cast(arr, POINTER(c_uint8))
        size[0] = self.buffer_size
        max_records[0] = self.max_records

    def _completed(self, ctx, stream_id, buf, size, valid):
        addr = ctypes.cast(buf, c_void_p).value
        rec = c_void_p()
        got = []
        while True:
            r = self.lib.cuptiActivityGetNextRecord(buf, valid, byref(rec))
            if r == CUPTI_ERROR_MAX_LIMIT_REACHED:
                break
            if r != CUPTI_SUCCESS:
                self.walk_errors.append(r)
                break
            kind = c_int32.from_address(rec.value).value
            cls = DECODE.get(kind)
            got.append((kind, cls.from_buffer_copy(ctypes.string_at(rec.value, ctypes.sizeof(cls)))
                        if cls else None))
        with self.lock:
            self.records.extend(got)
            self.completed.append((valid, threading.get_ident()))
            self.live.pop(addr, None)

    def register(self):
        assert self.lib.cuptiActivityRegisterCallbacks(self.req, self.comp) == CUPTI_SUCCESS

    def of(self, *kinds):
        return [r for k, r in self.records if k in kinds]


def enable_script_kinds(lib, graph_trace=False):
    for kind in (KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_SYNCHRONIZATION):
        assert lib.cuptiActivityEnable(kind) == CUPTI_SUCCESS
    if graph_trace:
        assert lib.cuptiActivityEnable(KIND_GRAPH_TRACE) == CUPTI_SUCCESS
    # as cprof does: the whole API kinds (the per-id switch alone records nothing on CUPTI 13)
    assert lib.cuptiActivityEnable(KIND_RUNTIME) == CUPTI_SUCCESS
    assert lib.cuptiActivityEnable(KIND_DRIVER) == CUPTI_SUCCESS
    for cbid in SCRIPT_RUNTIME_CBIDS:
        assert lib.fake_cupti_api_enabled(0, cbid) == 1


T0 = 1_000_000_000_000
TID = 4242


def us(x):
    return T0 + x * 1000


# ================================================================ the fake itself


def test_exports_what_the_loader_resolves(fake):
    for name in LOADER_SYMBOLS + ["cuEventElapsedTime"] + list(SIGNATURES):
        assert hasattr(fake, name), name
    version = c_uint32()
    assert fake.cuptiGetVersion(byref(version)) == CUPTI_SUCCESS
    assert version.value == 130001


def test_record_mirrors_match_cupti_abi_h(tmp_path):
    """The ctypes mirrors above must be the layouts of csrc/cupti_abi.h, field by field."""
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        pytest.skip("no C compiler")
    lines = []
    for cname, cls in MIRRORS.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    src = tmp_path / "mirror.c"
    src.write_text('#include <stdio.h>\n#include "cupti_abi.h"\nint main(void) {\n'
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "mirror"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.join(ROOT, "csrc"),
                    str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    seen = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        seen[(cname, field)] = int(value)
    for cname, cls in MIRRORS.items():
        assert seen[(cname, "size")] == ctypes.sizeof(cls), cname
        for field, _ in cls._fields_:
            assert seen[(cname, field)] == getattr(cls, field).offset, (cname, field)


def test_one_subscriber_at_a_time(fake):
    cb = CallbackFunc(lambda *a: None)
    h1, h2 = c_void_p(), c_void_p()
    assert fake.cuptiSubscribe(byref(h1), cb, None) == CUPTI_SUCCESS
    assert h1.value
    assert fake.fake_cupti_subscribers() == 1
    busy = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert fake.cuptiSubscribe(byref(h2), cb, None) == busy
    assert fake.cuptiUnsubscribe(h1) == CUPTI_SUCCESS
    assert fake.fake_cupti_subscribers() == 0
    assert fake.cuptiUnsubscribe(h1) == CUPTI_ERROR_INVALID_PARAMETER
    assert fake.fake_cupti_calls(b"cuptiSubscribe") == 2


def test_subscribe_v2_names_the_other_holder(fake):
    fake.fake_cupti_set_other_subscriber(b"CUPTI for Nsight Systems")
    assert fake.fake_cupti_subscribers() == 1
    old = ctypes.create_string_buffer(64)
    params = SubscriberParams(ctypes.sizeof(SubscriberParams), b"cprof",
                              ctypes.cast(old, POINTER(c_char)), 64)
    h = c_void_p()
    cb = CallbackFunc(lambda *a: None)
    r = fake.cuptiSubscribe_v2(byref(h), cb, None, byref(params))
    assert r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert old.value == b"CUPTI for Nsight Systems"
    fake.fake_cupti_set_other_subscriber(None)
    assert fake.cuptiSubscribe_v2(byref(h), cb, None, byref(params)) == CUPTI_SUCCESS
    # a second client now learns our name, the way cprof would be named to torch.profiler
    h2 = c_void_p()
    assert fake.cuptiSubscribe_v2(byref(h2), cb, None, byref(params)) == \
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert old.value == b"CUPTI for cprof"
    params.structSize = 0
    assert fake.cuptiSubscribe_v2(byref(h2), cb, None, byref(params)) == \
        CUPTI_ERROR_INVALID_PARAMETER


def test_injected_errors(fake):
    denied = CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
    busy = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert fake.fake_cupti_set_error(b"cuptiActivityEnable", denied) == 0
    for _ in range(3):
        assert fake.cuptiActivityEnable(KIND_CONCURRENT_KERNEL) == denied
    assert fake.fake_cupti_enabled_kinds_mask() == 0
    assert fake.fake_cupti_set_error(b"cuptiActivityEnable", 0) == 0  # cleared
    assert fake.cuptiActivityEnable(KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS
    assert fake.fake_cupti_enabled_kinds_mask() == 1 << KIND_CONCURRENT_KERNEL

    cb = CallbackFunc(lambda *a: None)
    h = c_void_p()
    fake.fake_cupti_set_error_once(b"cuptiSubscribe", busy)
    assert fake.cuptiSubscribe(byref(h), cb, None) == busy
    assert fake.cuptiSubscribe(byref(h), cb, None) == CUPTI_SUCCESS
    assert fake.fake_cupti_calls(b"cuptiActivityEnable") == 4
    assert fake.fake_cupti_set_error(b"cuptiNoSuchFunction", 1) == -1
    assert fake.fake_cupti_calls(b"cuptiNoSuchFunction") == -1

    s = c_char_p()
    assert fake.cuptiGetResultString(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, byref(s)) == CUPTI_SUCCESS
    assert s.value == b"CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"
    fake.fake_cupti_set_error(b"cuInit", 100)  # CUDA_ERROR_NO_DEVICE
    assert fake.cuInit(0) == 100


def test_basic_script_flush(fake):
    col = Collector(fake)
    col.register()
    enable_script_kinds(fake)
    created = fake.fake_cupti_script_basic(T0, TID)
    assert created == 21  # 22 records in the scene, minus the GRAPH_TRACE one (kind off)
    assert fake.fake_cupti_pending() == 21
    assert col.records == []  # nothing arrives before a flush
    assert fake.cuptiActivityFlushAll(0) == CUPTI_SUCCESS
    assert fake.fake_cupti_pending() == 0
    assert col.walk_errors == []
    assert len(col.records) == 21
    assert fake.fake_cupti_records_delivered() == 21

    runtime, driver = col.of(KIND_RUNTIME), col.of(KIND_DRIVER)
    kernels = col.of(KIND_CONCURRENT_KERNEL)
    memcpys, memsets, syncs = col.of(KIND_MEMCPY), col.of(KIND_MEMSET), col.of(KIND_SYNCHRONIZATION)
    assert (len(runtime), len(driver), len(kernels)) == (9, 1, 7)
    assert (len(memcpys), len(memsets), len(syncs)) == (2, 1, 1)

    apis = {a.correlationId: a for a in runtime + driver}
    assert sorted(apis) == list(range(1, 11))
    assert all(a.threadId == TID and a.processId == os.getpid() for a in apis.values())
    assert [apis[c].cbid for c in (1, 2, 3, 4)] == [CBID_cudaLaunchKernel] * 4
    assert driver[0].cbid == CBID_cuLaunchKernel and driver[0].correlationId == 10
    for gpu in kernels + memcpys + memsets:  # GPU work starts after its launch returned
        assert gpu.correlationId in apis
        assert gpu.start >= apis[gpu.correlationId].end
        assert gpu.end > gpu.start

    assert {k.streamId for k in kernels} == {7, 13}
    names = {k.name.decode() for k in kernels}
    assert FILL_KERNEL in names and TRITON_KERNEL in names
    graph = [k for k in kernels if k.graphId]
    assert [(k.graphId, k.graphNodeId, k.correlationId) for k in graph] == [(1, 100, 9),
                                                                            (1, 101, 9)]
    assert apis[9].cbid == CBID_cudaGraphLaunch
    triton = next(k for k in kernels if k.name == TRITON_KERNEL.encode())
    assert triton.correlationId == 10 and triton.streamId == 7

    htod = next(m for m in memcpys if m.copyKind == MEMCPY_HTOD)
    dtoh = next(m for m in memcpys if m.copyKind == MEMCPY_DTOH)
    assert (htod.srcKind, htod.dstKind, htod.bytes, htod.flags) == (MEMORY_PAGEABLE, MEMORY_DEVICE,
                                                                    4 << 20, 0)
    assert (dtoh.srcKind, dtoh.dstKind, dtoh.flags & 1) == (MEMORY_DEVICE, MEMORY_PINNED, 1)
    assert (memsets[0].bytes, memsets[0].memoryKind, memsets[0].correlationId) == (1 << 20,
                                                                                  MEMORY_DEVICE, 7)
    assert (syncs[0].type, syncs[0].correlationId, syncs[0].streamId) == (SYNC_STREAM_SYNCHRONIZE,
                                                                          8, 13)
    assert apis[8].cbid == CBID_cudaStreamSynchronize
    assert apis[8].start <= syncs[0].start and syncs[0].end <= apis[8].end
    assert min(a.start for a in apis.values()) == us(10)  # timestamps verbatim


def test_only_enabled_call_ids_make_api_records(fake):
    col = Collector(fake)
    col.register()
    # the per-id switch alone, without the kind, succeeds and records nothing: what CUPTI
    # 13.0.1 does (H200, driver 580.159.04), whatever its header says
    assert fake.cuptiActivityEnableRuntimeApi(CBID_cudaLaunchKernel, 1) == CUPTI_SUCCESS
    assert fake.fake_cupti_api_enabled(0, CBID_cudaLaunchKernel) == 1
    assert fake.fake_cupti_api_enabled(0, CBID_cudaGetDevice) == 0
    fake.fake_cupti_script_basic(T0, TID)
    fake.cuptiActivityFlushAll(0)
    assert col.of(KIND_RUNTIME) == [] and col.of(KIND_DRIVER) == []
    assert col.of(KIND_CONCURRENT_KERNEL) == []
    assert fake.fake_cupti_discarded() == 22

    # the whole kind overrides earlier per-id settings; a per-id call after it narrows it again
    col.records.clear()
    assert fake.cuptiActivityEnable(KIND_RUNTIME) == CUPTI_SUCCESS
    assert fake.fake_cupti_api_enabled(0, CBID_cudaGetDevice) == 1
    assert fake.cuptiActivityEnableRuntimeApi(CBID_cudaLaunchKernel, 0) == CUPTI_SUCCESS
    fake.fake_cupti_add_api(0, CBID_cudaGetDevice, us(1), us(2), TID, 50)
    fake.fake_cupti_add_api(0, CBID_cudaLaunchKernel, us(3), us(4), TID, 51)
    fake.cuptiActivityFlushAll(0)
    assert [r.correlationId for r in col.of(KIND_RUNTIME)] == [50]
    assert fake.cuptiActivityDisable(KIND_RUNTIME) == CUPTI_SUCCESS
    assert fake.fake_cupti_api_enabled(0, CBID_cudaGetDevice) == 0
    assert fake.cuptiActivityEnableRuntimeApi(0, 1) == CUPTI_ERROR_INVALID_PARAMETER
    assert fake.cuptiActivityEnable(9999) == CUPTI_ERROR_INVALID_KIND


def test_graph_trace_replaces_graph_nodes(fake):
    col = Collector(fake)
    col.register()
    enable_script_kinds(fake, graph_trace=True)
    assert fake.fake_cupti_script_basic(T0, TID) == 20  # 2 graph kernels out, 1 graph record in
    fake.cuptiActivityFlushAll(0)
    kernels = col.of(KIND_CONCURRENT_KERNEL)
    assert len(kernels) == 5 and not any(k.graphId for k in kernels)
    (g,) = col.of(KIND_GRAPH_TRACE)
    assert (g.graphId, g.correlationId, g.streamId, g.start, g.end) == (1, 9, 7, us(325), us(360))


def test_kernel_kind_gives_kernel_records(fake):
    col = Collector(fake)
    col.register()
    fake.cuptiActivityEnable(KIND_KERNEL)
    assert fake.fake_cupti_add_kernel(b"k", us(1), us(2), 7, 1) == 1
    fake.cuptiActivityFlushAll(0)
    assert [k for k, _ in col.records] == [KIND_KERNEL]


def test_small_buffers_and_record_limits(fake):
    col = Collector(fake, buffer_size=512)
    col.register()
    enable_script_kinds(fake)
    fake.fake_cupti_script_basic(T0, TID)
    fake.cuptiActivityFlushAll(0)
    assert len(col.records) == 21 and col.walk_errors == []
    assert len(col.completed) >= 5
    assert all(valid <= 512 for valid, _ in col.completed)

    col2 = Collector(fake, max_records=2)
    assert fake.cuptiActivityRegisterCallbacks(col2.req, col2.comp) == CUPTI_SUCCESS
    fake.fake_cupti_script_basic(T0, TID)
    fake.cuptiActivityFlushAll(0)
    assert len(col2.records) == 21 and len(col2.completed) == 11


def test_records_without_a_buffer_are_dropped_and_counted(fake):
    dropped = c_size_t()
    fake.cuptiActivityEnable(KIND_CONCURRENT_KERNEL)
    fake.fake_cupti_add_kernel(b"k", us(1), us(2), 7, 1)  # no callbacks registered yet
    assert fake.cuptiActivityGetNumDroppedRecords(None, 0, byref(dropped)) == CUPTI_SUCCESS
    assert dropped.value == 1
    fake.cuptiActivityGetNumDroppedRecords(None, 0, byref(dropped))
    assert dropped.value == 0  # reading resets

    tiny = Collector(fake, buffer_size=64)  # smaller than a kernel record (216 bytes)
    tiny.register()
    fake.fake_cupti_add_kernel(b"k", us(1), us(2), 7, 1)
    fake.fake_cupti_add_kernel(b"k", us(3), us(4), 7, 2)
    fake.cuptiActivityFlushAll(0)
    fake.cuptiActivityGetNumDroppedRecords(None, 0, byref(dropped))
    assert dropped.value == 2 and tiny.records == []

    none = Collector(fake, give_none=True)
    none.register()
    fake.fake_cupti_add_kernel(b"k", us(1), us(2), 7, 1)
    fake.cuptiActivityFlushAll(0)
    fake.fake_cupti_set_dropped(1000)
    fake.cuptiActivityGetNumDroppedRecords(None, 0, byref(dropped))
    assert dropped.value == 1000


def test_async_delivery_from_a_background_thread(fake):
    col = Collector(fake, buffer_size=1024)
    col.register()
    enable_script_kinds(fake)
    fake.fake_cupti_set_async(1)
    fake.fake_cupti_script_basic(T0, TID)
    deadline = time.monotonic() + 10
    while not col.completed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert col.completed, "no buffer completed in the background"
    assert all(ident != threading.get_ident() for _, ident in col.completed)
    fake.fake_cupti_set_async(0)
    assert fake.cuptiActivityFlushAll(0) == CUPTI_SUCCESS
    assert len(col.records) == 21
    assert sorted(r.correlationId for r in col.of(KIND_RUNTIME, KIND_DRIVER)) == list(range(1, 11))


def test_flush_from_inside_a_callback_is_refused(fake):
    results = []

    def completed(ctx, stream, buf, size, valid):
        results.append(fake.cuptiActivityFlushAll(0))

    col = Collector(fake)
    comp = BufferCompleted(completed)
    fake.cuptiActivityRegisterCallbacks(col.req, comp)
    fake.cuptiActivityEnable(KIND_CONCURRENT_KERNEL)
    fake.fake_cupti_add_kernel(b"k", us(1), us(2), 7, 1)
    assert fake.cuptiActivityFlushAll(0) == CUPTI_SUCCESS
    assert results == [CUPTI_ERROR_INVALID_OPERATION]


def test_get_next_record_on_an_empty_buffer(fake):
    buf = (c_uint64 * 8)()
    rec = c_void_p()
    p = ctypes.cast(buf, POINTER(c_uint8))
    assert fake.cuptiActivityGetNextRecord(p, 0, byref(rec)) == CUPTI_ERROR_MAX_LIMIT_REACHED
    assert fake.cuptiActivityGetNextRecord(None, 0, byref(rec)) == CUPTI_ERROR_INVALID_PARAMETER
    c_int32.from_buffer(buf).value = 9999  # not a kind
    assert fake.cuptiActivityGetNextRecord(p, 64, byref(rec)) == CUPTI_ERROR_INVALID_KIND


def test_markers_and_external_correlation(fake):
    col = Collector(fake)
    col.register()
    fake.cuptiActivityEnable(KIND_MARKER)
    fake.cuptiActivityEnable(KIND_EXTERNAL_CORRELATION)
    fake.cuptiActivityEnable(KIND_RUNTIME)
    assert fake.fake_cupti_add_marker(b"forward", b"cprof", 5, us(1), us(9), TID) == 2
    assert fake.cuptiActivityPushExternalCorrelationId(EXT_KIND_CUSTOM0, 777) == CUPTI_SUCCESS
    fake.fake_cupti_add_api(0, CBID_cudaLaunchKernel, us(2), us(3), TID, 1)
    last = c_uint64()
    r = fake.cuptiActivityPopExternalCorrelationId(EXT_KIND_CUSTOM0, byref(last))
    assert r == CUPTI_SUCCESS and last.value == 777
    assert fake.cuptiActivityPopExternalCorrelationId(EXT_KIND_CUSTOM0, byref(last)) == \
        CUPTI_ERROR_QUEUE_EMPTY
    fake.fake_cupti_add_api(0, CBID_cudaLaunchKernel, us(4), us(5), TID, 2)  # no id pushed now
    fake.cuptiActivityFlushAll(0)

    start, end = col.of(KIND_MARKER)
    assert (start.flags, start.id) == (MARKER_START, 5)
    assert (start.name, start.domain) == (b"forward", b"cprof")
    assert (end.flags, end.id, end.name, end.timestamp) == (MARKER_END, 5, None, us(9))
    assert start.objectId.pt.threadId == TID
    (x,) = col.of(KIND_EXTERNAL_CORRELATION)
    assert (x.externalKind, x.externalId, x.correlationId) == (EXT_KIND_CUSTOM0, 777, 1)
    kinds = [k for k, _ in col.records]
    assert kinds.index(KIND_EXTERNAL_CORRELATION) < kinds.index(KIND_RUNTIME)


def test_timestamp_callback_and_thread_id_type(fake):
    ts = c_uint64()
    assert fake.cuptiGetTimestamp(byref(ts)) == CUPTI_SUCCESS
    assert abs(ts.value - time.time_ns()) < 60 * 10**9  # default: CLOCK_REALTIME
    cb = TimestampFunc(lambda: 42)
    assert fake.cuptiActivityRegisterTimestampCallback(cb) == CUPTI_SUCCESS
    assert fake.fake_cupti_has_timestamp_callback() == 1
    fake.cuptiGetTimestamp(byref(ts))
    assert ts.value == 42
    assert fake.cuptiSetThreadIdType(1) == CUPTI_SUCCESS
    assert fake.fake_cupti_thread_id_type() == 1
    sid = c_uint32()
    fake.cuptiGetStreamIdEx(None, None, 0, byref(sid))
    assert sid.value == 7
    fake.cuptiGetStreamIdEx(None, 13, 0, byref(sid))
    assert sid.value == 13


def test_finalize_forgets_activity_state(fake):
    col = Collector(fake)
    col.register()
    enable_script_kinds(fake)
    fake.fake_cupti_script_basic(T0, TID)
    assert fake.cuptiFinalize() == CUPTI_SUCCESS
    assert fake.fake_cupti_enabled_kinds_mask() == 0
    assert fake.fake_cupti_pending() == 0
    assert fake.fake_cupti_api_enabled(0, CBID_cudaLaunchKernel) == 0
    fake.cuptiActivityFlushAll(0)
    assert col.records == []


def test_driver_device_and_events(fake):
    assert fake.cuInit(0) == CUDA_SUCCESS
    v, n, dev, value = c_int(), c_int(), c_int(), c_int()
    assert fake.cuDriverGetVersion(byref(v)) == CUDA_SUCCESS and v.value == 13000
    assert fake.cuDeviceGetCount(byref(n)) == CUDA_SUCCESS and n.value == 1
    assert fake.cuDeviceGet(byref(dev), 0) == CUDA_SUCCESS and dev.value == 0
    assert fake.cuDeviceGet(byref(dev), 1) != CUDA_SUCCESS
    name = ctypes.create_string_buffer(256)
    assert fake.cuDeviceGetName(name, 256, 0) == CUDA_SUCCESS
    assert name.value == b"Fake GPU (cprof tests)"
    mem = c_size_t()
    assert fake.cuDeviceTotalMem_v2(byref(mem), 0) == CUDA_SUCCESS and mem.value == 80 << 30
    for attr, want in ((CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
                       (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
                       (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132)):
        assert fake.cuDeviceGetAttribute(byref(value), attr, 0) == CUDA_SUCCESS
        assert value.value == want
    ctx = c_void_p()
    assert fake.cuCtxGetCurrent(byref(ctx)) == CUDA_SUCCESS and ctx.value

    live = fake.fake_cuda_live_events()
    a, b, untimed = c_void_p(), c_void_p(), c_void_p()
    assert fake.cuEventCreate(byref(a), 0) == CUDA_SUCCESS
    assert fake.cuEventCreate(byref(b), 0) == CUDA_SUCCESS
    assert fake.cuEventCreate(byref(untimed), CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS
    assert fake.fake_cuda_live_events() == live + 3
    ms = c_float()
    assert fake.cuEventElapsedTime_v2(byref(ms), a, b) == CUDA_ERROR_INVALID_HANDLE  # unrecorded
    assert fake.cuEventRecord(a, None) == CUDA_SUCCESS
    time.sleep(0.02)
    assert fake.cuEventRecord(b, None) == CUDA_SUCCESS
    assert fake.cuEventRecord(untimed, None) == CUDA_SUCCESS
    assert fake.cuEventQuery(b) == CUDA_SUCCESS
    assert fake.cuEventElapsedTime_v2(byref(ms), a, b) == CUDA_SUCCESS
    assert 15.0 <= ms.value < 2000.0
    assert fake.cuEventElapsedTime(byref(ms), a, b) == CUDA_SUCCESS
    assert fake.cuEventElapsedTime_v2(byref(ms), a, untimed) == CUDA_ERROR_INVALID_HANDLE
    fake.fake_cuda_set_events_pending(1)
    assert fake.cuEventQuery(b) == CUDA_ERROR_NOT_READY
    assert fake.cuEventElapsedTime_v2(byref(ms), a, b) == CUDA_ERROR_NOT_READY
    fake.fake_cuda_set_events_pending(0)
    assert fake.cuEventSynchronize(b) == CUDA_SUCCESS
    assert fake.cuStreamSynchronize(None) == CUDA_SUCCESS
    for e in (a, b, untimed):
        assert fake.cuEventDestroy_v2(e) == CUDA_SUCCESS
    assert fake.fake_cuda_live_events() == live
    s = c_char_p()
    assert fake.cuGetErrorString(CUDA_ERROR_NOT_READY, byref(s)) == CUDA_SUCCESS
    assert s.value == b"device not ready"


def test_driver_needs_cuinit_first(tmp_path):
    """A fresh process: every device call fails until cuInit, as with the real driver."""
    code = textwrap.dedent(f"""
        import ctypes
        lib = ctypes.CDLL({build_fake()!r})
        n = ctypes.c_int()
        before = lib.cuDeviceGetCount(ctypes.byref(n))
        init = lib.cuInit(0)
        after = lib.cuDeviceGetCount(ctypes.byref(n))
        print(before, init, after, n.value)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["3", "0", "0", "1"]


# ================================================================ cprof's loader, on the fake


def _extension():
    found = sorted(glob.glob(os.path.join(ROOT, "cprof", "_C*.so")))
    if not found:
        pytest.skip("cprof._C is not built in place (python setup.py build_ext --inplace)")
    lib = ctypes.CDLL(found[0])
    if not hasattr(lib, "cprof_cuda_load"):
        pytest.skip("this build of cprof._C has no cuda_loader")
    return found[0]


LOADER_PROBE = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
for f in ("cprof_cuda_load_error", "cprof_cuda_driver_error", "cprof_cupti_error",
          "cprof_cupti_path", "cprof_libcuda_path", "cprof_cupti_source"):
    getattr(lib, f).restype = ctypes.c_char_p
for path in sys.argv[3:]:
    if path.startswith("map:"):
        ctypes.CDLL(path[4:])          # as PyTorch maps its own libcupti at import
    else:
        assert lib.cprof_cuda_loader_add_search_dir(path.encode()) == 0
api = ctypes.c_void_p()
fn = getattr(lib, sys.argv[2])
rc = fn(ctypes.byref(api))
s = lambda b: b.decode() if b is not None else None
print(json.dumps({
    "rc": rc, "api": bool(api.value),
    "error": s(lib.cprof_cuda_load_error()),
    "driver_error": s(lib.cprof_cuda_driver_error()),
    "cupti_error": s(lib.cprof_cupti_error()),
    "cupti_path": s(lib.cprof_cupti_path()), "cupti_source": s(lib.cprof_cupti_source()),
    "cupti_version": lib.cprof_cupti_version(),
    "libcuda_path": s(lib.cprof_libcuda_path()),
    "driver_version": lib.cprof_cuda_driver_version(),
    "add_after_load": lib.cprof_cuda_loader_add_search_dir(b"/late"),
}))
"""


def load_in_subprocess(env_extra, fn="cprof_cuda_load", args=()):
    """The loader runs once per process, so each case gets a fresh one."""
    ext = _extension()
    env = {k: v for k, v in os.environ.items()
           if k not in ("CPROF_CUPTI_PATH", "CPROF_LIBCUDA_PATH", "FAKE_CUPTI_API_VERSION")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", LOADER_PROBE, ext, fn, *args], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_loader_uses_the_fake_for_both_parts(fake):
    r = load_in_subprocess({"CPROF_CUPTI_PATH": FAKE_SO, "CPROF_LIBCUDA_PATH": FAKE_SO})
    assert r["rc"] == 0 and r["api"] and r["error"] == ""
    assert r["cupti_path"] == FAKE_SO and r["cupti_source"] == "CPROF_CUPTI_PATH"
    assert r["cupti_version"] == 130001
    assert r["libcuda_path"] == FAKE_SO and r["driver_version"] == 13000
    assert r["add_after_load"] == -3  # CPROF_E_STATE: too late to change the search order


def test_loader_parts_fail_independently(fake, tmp_path):
    missing = str(tmp_path / "nope" / "libcuda.so.1")
    r = load_in_subprocess({"CPROF_CUPTI_PATH": FAKE_SO, "CPROF_LIBCUDA_PATH": missing})
    assert r["rc"] == -11  # CPROF_E_UNAVAILABLE
    assert r["cupti_version"] == 130001 and r["cupti_error"] == ""
    assert r["driver_version"] == 0 and missing in r["driver_error"]
    assert r["error"].startswith("libcuda: ") and missing in r["error"]

    r = load_in_subprocess({"CPROF_LIBCUDA_PATH": FAKE_SO}, fn="cprof_cuda_load_driver")
    assert r["rc"] == 0 and r["driver_version"] == 13000
    assert r["cupti_version"] == 0 and r["cupti_error"] == ""  # CUPTI never tried


def test_loader_reports_a_bad_explicit_cupti(fake, tmp_path):
    missing = str(tmp_path / "libcupti.so.13")
    r = load_in_subprocess({"CPROF_CUPTI_PATH": missing}, fn="cprof_cuda_load_cupti")
    assert r["rc"] == -11 and r["cupti_path"] is None
    assert f"CPROF_CUPTI_PATH={missing}" in r["cupti_error"]

    r = load_in_subprocess({"CPROF_CUPTI_PATH": FAKE_SO, "FAKE_CUPTI_API_VERSION": "24"},
                           fn="cprof_cuda_load_cupti")
    assert r["rc"] == -11
    assert "CUPTI API version 24" in r["cupti_error"] and "130000" in r["cupti_error"]

    not_cupti = shutil.which("true")  # an executable, not a shared library
    r = load_in_subprocess({"CPROF_CUPTI_PATH": not_cupti}, fn="cprof_cuda_load_cupti")
    assert r["rc"] == -11 and not_cupti in r["cupti_error"]


def test_loader_search_dirs_come_first(fake, tmp_path):
    d = tmp_path / "nvidia" / "cu13" / "lib"
    d.mkdir(parents=True)
    shutil.copy(FAKE_SO, d / "libcupti.so.13")
    r = load_in_subprocess({"CUDA_HOME": str(tmp_path / "no-cuda")}, fn="cprof_cuda_load_cupti",
                           args=[str(tmp_path / "empty"), str(d)])
    assert r["rc"] == 0, r["cupti_error"]
    assert r["cupti_source"] == "search dir"
    assert r["cupti_path"] == str(d / "libcupti.so.13")


def test_loader_prefers_the_cupti_already_mapped(fake, tmp_path):
    d = tmp_path / "torch_lib"
    d.mkdir()
    shutil.copy(FAKE_SO, d / "libcupti.so.13")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(FAKE_SO, other / "libcupti.so.13")
    mapped = str(d / "libcupti.so.13")
    r = load_in_subprocess({}, fn="cprof_cuda_load_cupti", args=["map:" + mapped, str(other)])
    assert r["rc"] == 0, r["cupti_error"]
    assert (r["cupti_source"], r["cupti_path"]) == ("already mapped", mapped)

    # an old mapped CUPTI is refused, and no second copy is loaded next to it
    r = load_in_subprocess({"FAKE_CUPTI_API_VERSION": "26"}, fn="cprof_cuda_load_cupti",
                           args=["map:" + mapped, str(other)])
    assert r["rc"] == -11
    assert mapped in r["cupti_error"] and "second CUPTI" in r["cupti_error"]


def _timers_script(template, tmp_path):
    """Runs a timers script (a template of root, so, out) against the fake driver in its own
    process (the loader resolves once per process): its result and its last line as JSON."""
    code = template.format(root=ROOT, so=FAKE_SO, out=str(tmp_path))
    env = dict(os.environ, CPROF_LIBCUDA_PATH=FAKE_SO, CPROF_CUPTI_PATH=FAKE_SO)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r, json.loads(r.stdout.strip().splitlines()[-1])


TIMERS_TWO_CONTEXTS = """
import ctypes, json, sys, time
sys.path.insert(0, {root!r})
import cprof, cprof._C as C
fake = ctypes.CDLL({so!r})
S1, S0 = 0x7171, 0x7272  # a stream of device 1, one of device 0
fake.fake_cuda_stream_ctx(ctypes.c_uint64(S1), 1)
fake.fake_cuda_stream_ctx(ctypes.c_uint64(S0), 0)
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="ctx",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
prof.begin_run()
with prof.step_timing_ctx():
    fake.fake_cuda_set_current(1)  # torch.cuda.device(1): its events, its stream
    ctx = ctypes.c_void_p(0)
    fake.cuCtxGetCurrent(ctypes.byref(ctx))
    current1 = ctx.value
    with cprof.cuda_bucket_timer("dev1", stream=S1):
        time.sleep(0.002)
    with cprof.cuda_bucket_timer("other", stream=S0):  # device 0's stream, device 1 current
        time.sleep(0.002)
    depth = fake.fake_cuda_ctx_depth()  # device 0's context was lent for the records only
    ctx = ctypes.c_void_p(0)
    fake.cuCtxGetCurrent(ctypes.byref(ctx))
    current = ctx.value
    fake.fake_cuda_set_current(0)
prof.end_run()
prof.begin_run()
for _ in range(3):
    with prof.step_timing_ctx():
        with cprof.cuda_bucket_timer("dev0"):
            time.sleep(0.002)
prof.end_run()
s = prof.summary()
print(json.dumps({{"b": s["buckets_model_avg_ms"], "steps": s["stats"]["steps"],
                  "unmeasured": s["meta"].get("steps_unmeasured"), "depth": depth,
                  "current": current, "current1": current1,
                  "live": fake.fake_cuda_live_events(), "counts": C.timers_counts()}}))
"""


TIMERS_NO_CONTEXT = """
import ctypes, json, sys, threading, time, warnings
sys.path.insert(0, {root!r})
import cprof, cprof._C as C
fake = ctypes.CDLL({so!r})
S1 = 0x7171  # a stream of device 1
fake.fake_cuda_stream_ctx(ctypes.c_uint64(S1), 1)
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="noctx",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
depth = []
def worker():
    fake.fake_cuda_set_current(-1)  # a thread that has made no CUDA call yet
    with cprof.cuda_bucket_timer("worker"):  # the step's stream: the default one
        time.sleep(0.002)
    with cprof.cuda_bucket_timer("worker_dev1", stream=S1):
        time.sleep(0.002)
    depth.append(fake.fake_cuda_ctx_depth())
    ctx = ctypes.c_void_p(1)
    fake.cuCtxGetCurrent(ctypes.byref(ctx))
    depth.append(ctx.value)  # still none: the borrowed context was popped
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    prof.begin_run()
    for _ in range(2):
        with prof.step_timing_ctx():
            t = threading.Thread(target=worker)
            t.start()
            t.join()
    prof.end_run()
    # a Profiler made on a thread with no context: CUDA timing stays usable, for both
    thr = {{}}
    def other_profiler():
        fake.fake_cuda_set_current(-1)
        p3 = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="thr",
                            warmup_runs=0, print_per_run=False), timing="cuda")
        p3.begin_run()
        with p3.step_timing_ctx():
            time.sleep(0.001)
        p3.end_run()
        thr["cuda"], thr["steps"] = p3._cuda, p3.summary()["stats"]["steps"]
    t = threading.Thread(target=other_profiler)
    t.start()
    t.join()
    prof.begin_run()
    with prof.step_timing_ctx():
        with cprof.cuda_bucket_timer("after"):
            time.sleep(0.002)
    prof.end_run()
    # a step region whose record fails (strict_sync=False times the step with events): the
    # step goes on, left out of the figures, counted and warned about
    prof2 = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="fail",
                           warmup_runs=0, strict_sync=False, print_per_run=False),
                           timing="cuda")
    prof2.begin_run()
    fake.fake_cupti_set_error_once(b"cuEventRecord", 999)
    with prof2.step_timing_ctx():
        time.sleep(0.001)
    with prof2.step_timing_ctx():
        time.sleep(0.001)
    # a step that raises after its record failed is discarded, and counted once, as that
    fake.fake_cupti_set_error_once(b"cuEventRecord", 999)
    try:
        with prof2.step_timing_ctx():
            raise KeyError("user")
    except KeyError:
        pass
    prof2.end_run()
s, s2 = prof.summary(), prof2.summary()
print(json.dumps({{"b": s["buckets_model_avg_ms"], "steps": s["stats"]["steps"],
                  "steps2": s2["stats"]["steps"], "thr": thr,
                  "unmeasured": s2["meta"].get("steps_unmeasured"),
                  "discarded": s2["meta"].get("steps_discarded"),
                  "depth": depth, "warnings": [str(x.message) for x in w],
                  "live": fake.fake_cuda_live_events(), "counts": C.timers_counts()}}))
"""


def test_cuda_timers_on_a_thread_with_no_context_and_failed_records(tmp_path):
    """A worker thread that has made no CUDA call has no current context: cuEventCreate failed
    there and the region was lost without a word. It now borrows the stream's context (pushed
    and popped around the record). A record that fails anyway leaves its step out of every
    figure, counted and warned about with the driver's error; a step region's failure used to
    raise CprofError out of the user's step_timing_ctx."""
    r, out = _timers_script(TIMERS_NO_CONTEXT, tmp_path)
    # 2 ms in 2 of the 3 steps
    assert out["b"].get("worker", 0) >= 1.0 and out["b"].get("worker_dev1", 0) >= 1.0, out
    assert out["depth"] == [0, None, 0, None], out
    assert out["steps"] == 3 and out["b"].get("after", 0) > 0, out
    assert out["thr"] == {"cuda": True, "steps": 1}, out
    # of the second Profiler's 2 good-looking steps, 1 lost its record; the one that raised
    assert out["steps2"] == 1 and out["unmeasured"] == 1 and out["discarded"] == 1, out
    assert any("could not be timed" in m and "cuEventRecord returned CUDA error 999" in m
               for m in out["warnings"]), out["warnings"]
    assert out["live"] == out["counts"]["events"], out


TIMERS_FRESH_THREAD = """
import ctypes, json, sys, threading, time
sys.path.insert(0, {root!r})
import cprof, cprof._C as C
fake = ctypes.CDLL({so!r})
fake.fake_cuda_primary_retains.restype = ctypes.c_uint64
fake.fake_cuda_set_primary_active({active})
out = {{}}
def worker():
    # a training thread: PyTorch made device 0's primary context active (on the main thread);
    # this one has made no CUDA call yet when its run begins, so none is current on it
    ctx = ctypes.c_void_p(1)
    fake.cuInit(0)
    fake.cuCtxGetCurrent(ctypes.byref(ctx))
    out["ctx_before"] = ctx.value
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="fresh",
                          warmup_runs=0, model_profiling=True, print_per_run=False),
                          timing="cuda")
    prof.begin_run()
    for _ in range(2):
        with prof.step_timing_ctx():
            with cprof.cuda_bucket_timer("b"):
                time.sleep(0.002)
    prof.end_run()
    out["cuda"], out["note"] = prof._cuda, prof._timing_note
    out["b"] = prof.summary()["buckets_model_avg_ms"].get("b", 0)
    out["depth"] = fake.fake_cuda_ctx_depth()
t = threading.Thread(target=worker)
t.start()
t.join()
out["counts"], out["retains"] = C.timers_counts(), fake.fake_cuda_primary_retains()
print(json.dumps(out))
"""


def test_cuda_timers_for_a_run_begun_on_a_thread_before_its_first_cuda_call(tmp_path):
    """The real driver binds no context to a new thread (cuCtxGetCurrent gives NULL until a
    CUDA call binds one), which the fake used to hide by lending every thread a context. A
    Profiler whose first run began on such a thread (a training thread, before its first tensor
    op; CUDA initialised on the main thread) fell back to host timing for good: "no CUDA context
    is current on this thread". It now times with the device's primary context, which PyTorch
    made active, retained once; a process where it is not active still falls back, said."""
    r, out = _timers_script(TIMERS_FRESH_THREAD.replace("{active}", "1"), tmp_path)
    assert out["ctx_before"] is None, out
    assert out["cuda"] is True and out["note"] is None, out
    assert out["b"] >= 1.0 and out["counts"]["records"] >= 4, out
    assert out["retains"] == 1 and out["depth"] == 0, out
    r, out = _timers_script(TIMERS_FRESH_THREAD.replace("{active}", "0"), tmp_path)
    assert out["cuda"] is False and "no CUDA context is current" in out["note"], out
    assert out["retains"] == 0 and out["counts"]["records"] == 0, out


TIMERS_LOST_RELEASED = """
import ctypes, gc, json, sys, time, warnings
sys.path.insert(0, {root!r})
import cprof
fake = ctypes.CDLL({so!r})
def cfg(name):
    return cprof.ProfilerConfig(output_dir={out!r}, run_name=name, warmup_runs=0,
                                strict_sync=False, print_per_run=False)
def lose_one(prof):  # a run left open whose one step could not be recorded
    prof.begin_run()
    fake.fake_cupti_set_error_once(b"cuEventRecord", 999)
    with prof.step_timing_ctx():
        time.sleep(0.001)
def two_steps(prof, begun=False):
    if not begun:
        prof.begin_run()
    for _ in range(2):
        with prof.step_timing_ctx():
            time.sleep(0.001)
    prof.end_run()
    s = prof.summary()
    return [s["stats"]["steps"], s["meta"].get("steps_unmeasured")]
out = {{}}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    # the store is emptied when the Profiler goes: its step index goes to the next Profiler
    a = cprof.Profiler(cfg("a"), timing="cuda")
    lose_one(a)
    del a
    gc.collect()
    out["after_empty"] = two_steps(cprof.Profiler(cfg("b"), timing="cuda"))
    # another Profiler alive: the store is kept, the released step is nobody's to count
    d = cprof.Profiler(cfg("d"), timing="cuda")
    d.begin_run()
    with d.step_timing_ctx():  # d has a step in the store: it is not emptied when c goes
        time.sleep(0.001)
    c = cprof.Profiler(cfg("c"), timing="cuda")
    lose_one(c)
    del c
    gc.collect()
    out["while_kept"] = two_steps(d, begun=True)
out["warnings"] = [str(x.message) for x in w]
print(json.dumps(out))
"""


def test_a_released_profiler_s_lost_record_marks_no_other_step(tmp_path):
    """A step whose record failed is marked at the next resolve. When its Profiler went before
    that (a run never ended), the mark fell on whichever step then had its index (the store is
    emptied when no Profiler is left, and indices start again at 0): another Profiler's good
    step vanished from its figures, counted unmeasured with a warning about a CUDA error it
    never had. With the store kept, the released step was counted in the other's run."""
    r, out = _timers_script(TIMERS_LOST_RELEASED, tmp_path)
    assert out["after_empty"] == [2, 0], out
    assert out["while_kept"] == [3, 0], out
    assert not any("could not be timed" in m for m in out["warnings"]), out


def test_cuda_timers_keep_each_context_s_events_apart(tmp_path):
    """An event records only on a stream of the context it was made in (cuda.h): a region timed
    on device 1 (its own stream, or device 0's stream by mistake) must not leave device-1
    events in the pool that the next device-0 regions are handed and fail with. They were put
    back on top of the pool, so every later region of the process went unmeasured (and a step
    region raised); now events are kept per context and a failed one is destroyed."""
    r, out = _timers_script(TIMERS_TWO_CONTEXTS, tmp_path)
    # a stream of another device than the current one is timed with events of the stream's
    # context (lent for the records), as torch.cuda.Event takes the stream's device; it was
    # refused (CUDA error 400) and its step left out of every figure (gpurev2 F1)
    assert out["steps"] == 4 and not out["unmeasured"], out
    # 2 ms in 1 of the 4 steps each (model averages are per step of the whole summary)
    assert out["b"].get("other", 0) >= 0.45 and out["b"].get("dev1", 0) >= 0.45, out
    assert "CUDA error" not in r.stderr, r.stderr
    assert out["depth"] == 0 and out["current"] == out["current1"], out  # lent, then given back
    assert out["b"].get("dev0", 0) >= 1.5, out  # and device 0's (3 steps) after it
    # the event whose record failed was destroyed, not pooled: what lives is what the pool holds
    assert out["live"] == out["counts"]["events"], out


TIMERS_STREAM_REUSED = """
import ctypes, json, sys, time
sys.path.insert(0, {root!r})
import cprof
fake = ctypes.CDLL({so!r})
S = 0x7171
fake.fake_cuda_stream_ctx(ctypes.c_uint64(S), 1)  # a stream of device 1
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="reuse",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
prof.begin_run()
with prof.step_timing_ctx():
    with cprof.cuda_bucket_timer("a", stream=S):
        time.sleep(0.002)
    fake.fake_cuda_stream_ctx(ctypes.c_uint64(S), 0)  # destroyed; the handle now device 0's
    with cprof.cuda_bucket_timer("b", stream=S):
        time.sleep(0.002)
prof.end_run()
s = prof.summary()
print(json.dumps({{"b": s["buckets_model_avg_ms"], "steps": s["stats"]["steps"],
                  "unmeasured": s["meta"].get("steps_unmeasured"),
                  "live": fake.fake_cuda_live_events()}}))
"""


def test_a_stream_handle_reused_by_another_context_is_asked_again(tmp_path):
    """The stream's context is cached with the last boundary (decision 163): a stream destroyed
    and its handle reused by another device's stream within one step was recorded with the
    old context's event (CUDA error 400) and the step went unmeasured (review8 F2); a record
    refused with an invalid handle on a cached answer now asks the driver again, once."""
    r, out = _timers_script(TIMERS_STREAM_REUSED, tmp_path)
    assert out["steps"] == 1 and not out["unmeasured"], (out, r.stderr)
    assert out["b"].get("a", 0) >= 1.5 and out["b"].get("b", 0) >= 1.5, out


TIMERS_STICKY = """
import ctypes, json, sys, time, warnings
sys.path.insert(0, {root!r})
import cprof
fake = ctypes.CDLL({so!r})
fake.fake_cupti_set_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
out = {{}}
for fn, code in (("cuEventRecord", 700), ("cuEventElapsedTime_v2", 719),
                 ("cuEventRecord", 400)):
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name=fn + str(code),
                                               warmup_runs=0, print_per_run=False,
                                               model_profiling=True, strict_sync=False),
                          timing="cuda")
    prof.begin_run()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(4):
            if i == 2:  # the program's kernel faulted: every later call fails the same way
                fake.fake_cupti_set_error(fn.encode(), code)
            with prof.step_timing_ctx():
                with cprof.cuda_bucket_timer("lm_head"):
                    time.sleep(0.001)
        prof.end_run()
    fake.fake_cupti_set_error(fn.encode(), 0)
    out[fn + str(code)] = [str(x.message) for x in w if "could not be timed" in str(x.message)]
print(json.dumps(out))
"""


def test_a_timer_failure_names_the_driver_s_error_not_a_guess(tmp_path):
    """After a sticky CUDA error of the program (an illegal address, 700; a launch failure,
    719) every event call fails. The warning said "cuEventRecord returned CUDA error 700 (a
    stream of another device, or gone)": a number and a wrong diagnosis. It now gives the
    driver's own description, and blames the stream only for an invalid handle (400)."""
    _, out = _timers_script(TIMERS_STICKY, tmp_path)
    rec, elapsed, handle = out["cuEventRecord700"], out["cuEventElapsedTime_v2719"], \
        out["cuEventRecord400"]
    assert len(rec) == 1 and "an illegal memory access was encountered" in rec[0], rec
    assert "another device" not in rec[0], rec
    assert len(elapsed) == 1 and "unspecified launch failure" in elapsed[0], elapsed
    assert len(handle) == 1 and "invalid resource handle" in handle[0], handle
    assert "a stream of another device, or gone" in handle[0], handle


def test_a_failing_cupti_version_check_says_what_to_do(tmp_path):
    """A libcupti whose cuptiGetVersion fails is unusable for the process; the reason gave only
    the CUptiResult. It now says what to do (the fault sweep)."""
    code = (f"import ctypes, sys; sys.path.insert(0, {ROOT!r}); "
            f"ctypes.CDLL({FAKE_SO!r}).fake_cupti_set_error(b'cuptiGetVersion', 999); "
            "import cprof; print(cprof.features()['gpu_activity']['reason'])")
    env = dict(os.environ, CPROF_LIBCUDA_PATH=FAKE_SO, CPROF_CUPTI_PATH=FAKE_SO)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cuptiGetVersion failed (CUptiResult 999)" in r.stdout
    assert "set CPROF_CUPTI_PATH" in r.stdout, r.stdout
