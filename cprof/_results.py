"""Results of a finished window for programs: events() and key_averages().table().

Built from the window's snapshots after the fact (the trace writer is the fast path for
files). GPU work is charged to the CPU range that launched it the way the trace links them:
a launch on thread T at time t belongs to the innermost range open on T at t, and the GPU
work with the launch's correlation id belongs to that launch."""
import bisect
import json
import math
import os
import sys
from collections import namedtuple

from ._C import TraceWriteError
from ._glue import MEM_EVENT, atomic_write, retry_advice  # MEM_EVENT: as mem_events.c packs one

_CPU_CATS = {0: "user_annotation", 1: "cpu_op", 2: "python_function", 3: "user_annotation"}
_CAT_PYTHON = 2  # python_function (with_stack)
_GPU_WORK = ("kernel", "memcpy", "memset")
_LAUNCH = ("runtime", "driver")
_ON_THREAD = _LAUNCH + ("marker",)  # GPU-collected records that are CPU events of a thread
# events GPU work is not charged to: the trace links a launch to the innermost other range
_NOT_OWNERS = ("python_function", "cuda_runtime", "cuda_driver")
_GPU_CATS = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
             "runtime": "cuda_runtime", "driver": "cuda_driver", "sync": "cuda_sync",
             "overhead": "overhead", "memory": "gpu_memory", "marker": "user_annotation"}

class _DeviceType(str):
    """An event's device type: the str "CPU" / "CUDA", also equal to torch.autograd's
    DeviceType member of that name (torch.profiler's events carry the enum, and code written
    for it compares `evt.device_type == DeviceType.CUDA`)."""

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, str):
            return str.__eq__(self, other)
        return type(other).__name__ == "DeviceType" and getattr(other, "name", None) == str(self)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__

    @property
    def name(self):  # the enum member's name, as torch's DeviceType has it
        return str(self)

    @property
    def value(self):  # c10::DeviceType's number (torch's, where torch is loaded)
        torch = sys.modules.get("torch")
        try:
            return torch.autograd.DeviceType.__members__[str(self)].value
        except Exception:
            return {"CPU": 0, "CUDA": 1}.get(str(self), -1)


CPU = _DeviceType("CPU")
CUDA = _DeviceType("CUDA")


class DeviceType:
    """torch.profiler.DeviceType's members that code filtering events names (`evt.device_type
    == DeviceType.CUDA`), so that importing it from cprof instead works; each equals the str
    of its name and torch's member. cprof's events are CPU or CUDA."""

    CPU = CPU
    CUDA = CUDA
    XPU = _DeviceType("XPU")
    MTIA = _DeviceType("MTIA")
    HPU = _DeviceType("HPU")
    MPS = _DeviceType("MPS")
    PrivateUse1 = _DeviceType("PrivateUse1")

    def __init__(self):
        raise TypeError("cprof.DeviceType is a namespace of device types (DeviceType.CUDA)")

# torch.autograd.profiler_util.Kernel: GPU work a CPU event launched (duration in us)
Kernel = namedtuple("Kernel", ["name", "device", "duration"])


def _fmt_us(us):
    """torch.autograd.profiler_util._format_time."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class _TorchCompat:
    """What torch.autograd's FunctionEvent / FunctionEventAvg have beside cprof's own figures:
    remote / async / legacy flags, overload names, node ids, the CUDA aliases of the device
    figures, and the "*_str" formatted times and time averages."""

    __slots__ = ()
    flops = 0
    is_async = is_remote = is_legacy = False
    node_id = -1
    overload_name = ""
    use_device = "cuda"
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)
    cuda_memory_usage = property(lambda self: self.device_memory_usage)
    self_cuda_memory_usage = property(lambda self: self.self_device_memory_usage)
    cpu_time = property(lambda self: self.cpu_time_total / self.count if self.count else 0.0)
    device_time = property(lambda self: self.device_time_total / self.count if self.count
                           else 0.0)
    cuda_time = device_time
    is_user_annotation = property(lambda self: self.category in ("user_annotation",
                                                                 "gpu_user_annotation"))
    cpu_time_str = property(lambda self: _fmt_us(self.cpu_time))
    device_time_str = property(lambda self: _fmt_us(self.device_time))
    cpu_time_total_str = property(lambda self: _fmt_us(self.cpu_time_total))
    device_time_total_str = property(lambda self: _fmt_us(self.device_time_total))
    self_cpu_time_total_str = property(lambda self: _fmt_us(self.self_cpu_time_total))
    self_device_time_total_str = property(lambda self: _fmt_us(self.self_device_time_total))

    def __getattr__(self, name):
        # only for names not found otherwise: torch's FunctionEvent fields cprof does not
        # have say so, and what to read instead, rather than naming a class of cprof's
        hint = _TORCH_ONLY.get(name)
        if hint is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"cprof: events have no {name!r} (torch's FunctionEvent field, "
                             f"not recorded by cprof): {hint}")


# torch.autograd.profiler_util.FunctionEvent's fields (torch 2.13) that cprof's events lack,
# with what to use instead
_TORCH_ONLY = {
    "activity_type": "use .category (the same names: cpu_op, user_annotation, "
                     "python_function, kernel, ...)",
    "kwinputs": "keyword arguments are not recorded; .input_shapes / .input_types / "
                ".concrete_inputs hold the positional ones",
    "structured_input_shapes": "use .input_shapes",
    "structured_input_strides": "strides are in the exported trace (Input Strides)",
    "external_id": "use .id; the trace's External id links it there",
    "linked_correlation_id": "use .correlation (GPU work) or .kernels",
    "flow_id": "flows are in the exported trace only",
    "flow_type": "flows are in the exported trace only",
    "flow_start": "flows are in the exported trace only",
    "device_resource_id": "use .thread (CPU) or .stream (GPU)",
    "python_id": "use .stack, or the trace's Python id args",
    "python_parent_id": "use .cpu_parent or .stack",
    "python_module_id": "use .stack, or the trace's Python module id args",
    "metadata_json": "event metadata is in the exported trace's args",
    "_metadata_json": "event metadata is in the exported trace's args",
    "event_metadata": "event metadata is in the exported trace's args",
    "append_kernel": "events are read-only results",
    "append_cpu_child": "events are read-only results",
    "set_cpu_parent": "events are read-only results",
}


class Interval(namedtuple("Interval", "start end")):
    """An event's time range in microseconds (torch.autograd.profiler_util.Interval's API)."""

    __slots__ = ()

    def elapsed_us(self):
        return self.end - self.start


class ProfilerEvent(_TorchCompat):
    """One event of a window. Times are microseconds on the trace's clock (Unix epoch)."""

    __slots__ = ("name", "category", "device_type", "thread", "start_us", "end_us", "depth",
                 "stream", "device", "correlation", "truncated", "self_cpu_time_total",
                 "device_time_total", "self_device_time_total", "input_shapes", "input_types",
                 "stack", "_ns", "_parent", "cpu_parent", "cpu_children", "id", "step_name",
                 "kernels", "self_cpu_percent", "total_cpu_percent", "total_device_percent",
                 "flops", "sequence_nr", "fwd_thread", "concrete_inputs", "cpu_memory_usage",
                 "self_cpu_memory_usage", "device_memory_usage", "self_device_memory_usage",
                 "is_async")

    def __init__(self, name, category, device_type, thread, start_us, end_us, depth=0,
                 stream=None, device=None, correlation=None, truncated=False,
                 input_shapes=None, input_types=None):
        self.name = name
        self.category = category
        self.device_type = CUDA if device_type == "CUDA" else CPU
        self.thread = thread
        self.start_us = start_us
        self.end_us = end_us
        self.depth = depth
        self.stream = stream
        self.device = device
        self.correlation = correlation
        self.truncated = truncated
        self.step_name = None    # "ProfilerStep#N" of a step (its name is "ProfilerStep*")
        # ended on another thread than it began on (record_function ended through a future), or
        # a torch async RecordFunction ("gloo:all_reduce"): as torch's, no self time, parent or
        # children (torch's _populate_cpu_children leaves them out of the CPU tree)
        self.is_async = False
        # record_shapes: torch.profiler's "Input Dims" / "Input type" of the call ([] if none)
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.input_types = input_types if input_types is not None else []
        # record_shapes: torch.profiler's "Concrete Inputs" (scalar arguments' values; None for
        # the others)
        self.concrete_inputs = []
        # with_stack: the python_function ranges enclosing this event, innermost first
        self.stack = []
        self.self_cpu_time_total = 0.0
        self.device_time_total = 0.0
        self.self_device_time_total = 0.0
        self._ns = None
        self._parent = None
        self.cpu_parent = None   # the enclosing CPU event on its thread (torch's FunctionEvent)
        self.cpu_children = []   # the CPU events directly inside it
        self.id = None           # its index in events()
        self.kernels = []        # Kernel tuples of the GPU work it launched itself
        self.self_cpu_percent = self.total_cpu_percent = self.total_device_percent = -1
        self.flops = 0           # with_flops: torch.profiler's estimate for this operator
        # the operator's autograd sequence number (-1: none) and, for a backward node, its
        # forward op's RecordFunction thread (when the RecordFunction observer captured ops)
        self.sequence_nr = -1
        self.fwd_thread = 0
        # profile_memory: bytes allocated (less released) while it ran, on the CPU and on
        # devices, and those less its children's (torch's FunctionEvent figures)
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.device_memory_usage = self.self_device_memory_usage = 0

    key = property(lambda self: self.name)
    duration_us = property(lambda self: self.end_us - self.start_us)
    time_range = property(lambda self: Interval(self.start_us, self.end_us))
    cpu_time_total = property(lambda self: self.duration_us if self.device_type == "CPU" else 0.0)
    # torch.autograd.profiler FunctionEvent's names for the same figures (one call per event)
    count = 1
    device_index = property(lambda self: self.device if self.device is not None else 0)
    # "ProfilerStep*" in events() and tables, "ProfilerStep#N" in the trace, as torch's
    trace_name = property(lambda self: self.step_name or (
        None if self.name == "[memory]" else self.name))
    is_python_function = property(lambda self: self.category == "python_function")
    input_dtypes = property(lambda self: self.input_types)

    @property
    def scope(self):
        """torch's at::RecordScope of the event, as FunctionEvent.scope gives it: 7
        (USER_SCOPE) for record_function ranges, 1 (BACKWARD_FUNCTION) for an autograd node the
        RecordFunction observer captured (it carries its forward op's thread), 0 (FUNCTION)
        otherwise. Without the observer (ITT hooks) a node's scope is 0: its thread is not
        passed."""
        if self.category in ("user_annotation", "gpu_user_annotation"):
            return _USER_SCOPE
        return _BACKWARD_FUNCTION if self.fwd_thread else 0

    def __repr__(self):
        return (f"<ProfilerEvent {self.category} {self.name!r} {self.device_type} "
                f"thread={self.thread} start_us={self.start_us:.3f} "
                f"dur_us={self.duration_us:.3f}>")


def _time_order(ev):
    """torch's order of function events: by start, an enclosing event before what it holds."""
    return (ev.start_us, -ev.end_us)


def events_of(window, first_id=0):
    """All events of a finished window, CPU ranges, allocation events and GPU records in one
    list ordered by start (the longer first), as torch's events(); CPU events carry self CPU
    time and the CUDA time they launched. An EventList (table(), key_averages(),
    total_average()). Their ids count from
    first_id (acc_events: past the windows before, so that ids stay unique, as torch's)."""
    _build(window, first_id)
    return window.results[2]


def _nest(evs):
    """Parents and self CPU times of one thread's events, in begin order. The parent is the
    innermost earlier event that contains the event (torch's _populate_cpu_children rule).
    Self time: each instant goes to the innermost event open then (the latest begun), so a
    range that outlives the one it began in (closed by identity: a ProfilerStep ending inside
    a record_function; a range held open across an await or a yield while other frames run)
    is counted once, never in two events' self times (decision 155). Async events (ended on
    another thread) take no time and are no parent; their _parent serves only their Python
    stack and the walk to a launch's owner."""
    live = []  # the events begun and not yet charged to their end (async ones never), in
    now = None  # begin order; ended ones lie buried under a longer-lived one till it ends
    for ev in evs:
        s, e = ev._ns
        parent = None
        for cand in reversed(live):
            if cand._ns[1] >= e and cand._ns[1] > s:
                parent = cand
                break
        if ev.is_async:
            ev._parent = parent or next((c for c in reversed(live) if c._ns[1] > s), None)
            continue
        ev._parent = parent
        now = _give_time(live, now, s)
        ev.self_cpu_time_total = 0.0
        live.append(ev)
    _give_time(live, now, None)


def _give_time(live, now, until):
    """Charges [now, until) (None: to the last end) to the innermost open events of live
    (latest begun last), dropping those that end; returns the new now."""
    while live:
        top = live[-1]
        end = top._ns[1]
        if now is None or now < top._ns[0]:
            now = top._ns[0] if now is None else max(now, top._ns[0])
        if until is not None and now >= until:
            return now
        if end <= now:
            live.pop()
            continue
        upto = end if until is None or end < until else until
        top.self_cpu_time_total += (upto - now) / 1000.0
        now = upto
    if until is None:
        return now
    return until if now is None or now < until else now


def _build(window, first_id=None):
    """(every event, the CPU ones, the GPU ones) of a window, built once per window (ids from
    first_id; None: any numbering, for the results that do not show ids)."""
    cached = getattr(window, "results", None)
    if cached is not None and first_id in (None, cached[0]):
        return cached[1]
    built = _build_now(window, first_id or 0)
    out = EventList(built[0])
    out.profile_memory = bool(window.config.get("profile_memory"))
    window.results = (first_id or 0, built, out)
    return built


def _build_now(window, first_id):
    snap, gpu = window.snapshot, window.gpu_snapshot
    with_flops = bool(window.config.get("with_flops"))
    # times in microseconds from the window's start, as torch.profiler's events are from its
    # trace's start: Unix-clock microseconds (~1.8e15) in a float step by 0.25 us. Never
    # negative: another thread's ranges (and launches) may begin while cprof's start enables
    # CUPTI, before the span's start (decision 150)
    recs = gpu.records() if gpu is not None else []
    t0 = min([snap.first_ns] + [r["start_ns"] for r in recs
                                if r["kind"] in _LAUNCH and r["tid"] is not None])
    stop = snap.stop_ns
    cpu = []
    by_thread = {}
    parsed = {}
    # record_shapes without with_modules records module calls for their shapes (the trace
    # has them); torch.profiler's results have no module events then, so they are left out
    # here: what they enclose nests in what encloses them, whose self time takes theirs.
    # With with_stack, torch.profiler's results have each call as a python_function
    # "nn.Module: ..." event, and so do these (named by path, as the trace's)
    py_modules = (bool(window.config.get("with_stack")) and not window.config.get("with_modules")
                  and "with_stack_unavailable" not in window.notes
                  and os.environ.get("CPROF_MODULE_EVENTS") != "0")
    hide_modules = bool(window.config.get("record_shapes") or window.config.get("with_stack")) \
        and not window.config.get("with_modules") and not py_modules
    for tid, name, cat, begin, end, depth, trunc, frag, seq, fwd, module, is_async in \
            snap.records(args=True):
        if module and hide_modules:
            continue
        end = end or stop
        shapes = types = values = None
        flops = 0
        if frag is not None:
            got = parsed.get(frag)
            if got is None:
                got = parsed[frag] = _shapes_of(frag)
            shapes, types, concrete, values = got
            if with_flops and name in _FLOP_OPS and not (types and types[0] == ""):
                # a first input of no type is a nested tensor (its dims [] read as a 0-dim
                # tensor's): torch cannot estimate it either and gives 0
                flops = _flops_of(name, shapes, concrete)
            if "TensorList" in types and len(types) == len(shapes):
                # torch's events() give a TensorList argument no shapes ([]), where its trace's
                # Input Dims (and ours) list each tensor's: aten::cat's are [[], []]
                shapes = [[] if t == "TensorList" else d for d, t in zip(shapes, types)]
        step_name = None
        if name.startswith("ProfilerStep#"):
            # torch.profiler's events() and key_averages() name every step "ProfilerStep*"
            # (one row of N calls), a range the program named so too (torch's _rewrite_name
            # goes by the name); the number stays in step_name (the trace keeps "#N")
            step_name, name = name, "ProfilerStep*"
        if module and py_modules:
            name, cat = "nn.Module: " + name, _CAT_PYTHON
        ev = ProfilerEvent(name, _CPU_CATS.get(cat, "user_annotation"), "CPU", tid,
                           (begin - t0) / 1000.0, (end - t0) / 1000.0, depth,
                           truncated=bool(trunc), input_shapes=shapes, input_types=types)
        ev.step_name = step_name
        ev.is_async = bool(is_async)
        ev.flops = flops
        if values:
            ev.concrete_inputs = values
        if seq >= 0:
            ev.sequence_nr, ev.fwd_thread = seq, fwd
        ev._ns = (begin, end)
        cpu.append(ev)
        by_thread.setdefault(tid, []).append(ev)
    # CUDA runtime / driver calls are CPU events of their thread, inside the range that made
    # them (torch.profiler's events() and tables have them: cudaLaunchKernel, a sync's wait)
    # CUPTI's NVTX records (a program without torch's Python NVTX calls) are ranges of their
    # thread too, user_annotation as the trace writes them
    calls = False
    for r in recs:
        if r["kind"] in _ON_THREAD and r["tid"] is not None:
            ev = ProfilerEvent(r["name"], _GPU_CATS[r["kind"]], "CPU", r["tid"],
                               (r["start_ns"] - t0) / 1000.0, (r["end_ns"] - t0) / 1000.0,
                               device=r["device"], correlation=r["correlation"])
            ev._ns = (r["start_ns"], r["end_ns"])
            by_thread.setdefault(r["tid"], []).append(ev)
            calls = True
    if calls:  # into begin order, an enclosing range before what it encloses
        for evs in by_thread.values():
            evs.sort(key=lambda e: (e._ns[0], -e._ns[1]))
        cpu = [ev for evs in by_thread.values() for ev in evs]
    # parents and self CPU time, thread by thread (records are in begin order)
    for evs in by_thread.values():
        _nest(evs)
    # with_stack: each event's Python stack, from its enclosing python_function ranges
    for ev in cpu:
        p = ev._parent
        while p is not None:
            if p.category == "python_function":
                ev.stack.append(p.name)
            p = p._parent
    gpu_events = []
    if recs:
        launch_owner = {}
        starts = {tid: [e._ns[0] for e in evs] for tid, evs in by_thread.items()}
        for r in recs:
            if r["kind"] in _LAUNCH and r["correlation"]:
                owner = _innermost(by_thread.get(r["tid"]), starts.get(r["tid"]), r["start_ns"])
                if owner is not None:
                    launch_owner[r["correlation"]] = owner
        for r in recs:
            if r["kind"] in _ON_THREAD and r["tid"] is not None:
                continue  # a CPU event of its thread (above)
            if r["kind"] == "cuda_event":
                continue  # a cudaEventRecord's record: what event waits wait on, not an event
            # a cuda_sync record is the device side of a wait (Kineto's CUDA_SYNC is a device
            # activity, drawn on the stream's track): a CUDA event of no thread, with no device
            # time of its own (the work waited for has it) and no row (decision 148)
            on_device = r["kind"] in _GPU_WORK + ("sync",)
            ev = ProfilerEvent(r["name"], _GPU_CATS.get(r["kind"], r["kind"]),
                               "CUDA" if on_device else "CPU",
                               r["tid"] if not on_device else None,
                               (r["start_ns"] - t0) / 1000.0, (r["end_ns"] - t0) / 1000.0,
                               stream=r["stream"], device=r["device"],
                               correlation=r["correlation"])
            gpu_events.append(ev)
            if r["kind"] in _GPU_WORK:
                # from the integer ns, as torch's kernel durations: the difference of the two
                # float µs times is off in the last digits (64.00000000000011 for 2 x 32 µs)
                d = (r["end_ns"] - r["start_ns"]) / 1000.0
                ev.device_time_total = ev.self_device_time_total = d
                owner = launch_owner.get(r["correlation"])
                if owner is not None:
                    owner.self_device_time_total += d
                    owner.kernels.append(Kernel(ev.name, ev.device, d))
                    while owner is not None:
                        owner.device_time_total += d
                        owner = owner._parent
    for ev in cpu:
        if ev._parent is not None and not ev.is_async:
            ev.cpu_parent = ev._parent
            ev._parent.cpu_children.append(ev)
        ev._ns = ev._parent = None
    cpu = _remove_dup_nodes(cpu)
    mem = getattr(window, "mem_events", None)
    if mem:
        cpu += _attribute_memory(cpu, mem, t0)
    # one list in time order, as torch's _parse_kineto_results sorts its function events
    # (start, then the longer first): threads, allocation events outside every op and GPU
    # records interleave, so key_averages()'s first-seen row order is torch's too
    everything = sorted(cpu + gpu_events, key=_time_order)
    for i, ev in enumerate(everything, first_id):
        ev.id = i
    collected = window.config.get("collected_activities")
    if "GPU" not in (collected if collected is not None else
                     window.config.get("activities") or ()):
        # torch's events of a profile without CUDA say use_device None: code that decides
        # from it whether to read device times must not be told "cuda"
        for ev in everything:
            if type(ev) is ProfilerEvent:
                ev.__class__ = _HostOnlyEvent
    return everything, cpu, gpu_events


def _attribute_memory(cpu, data, t0):
    """profile_memory, as torch's _parse_kineto_results: each CPU event's memory usage is the
    bytes of every allocation event (any thread) between its begin and its end (CPU ones as
    cpu_memory_usage, device ones as device_memory_usage), its self usage that less its
    children's; the allocation events inside no event become "[memory]" events of their own
    (returned), as in torch's results."""
    mem = sorted(((ts - t0) / 1000.0, nbytes, dev, tid)
                 for ts, _addr, nbytes, _a, _r, tid, dev, _i, _p in MEM_EVENT.iter_unpack(data))
    times = [m[0] for m in mem]
    pre_cpu, pre_dev = [0], [0]
    for _, nbytes, dev, _ in mem:
        pre_cpu.append(pre_cpu[-1] + (nbytes if dev == 0 else 0))
        pre_dev.append(pre_dev[-1] + (nbytes if dev != 0 else 0))
    cover = [0] * (len(mem) + 1)
    for ev in cpu:
        lo = bisect.bisect_left(times, ev.start_us)
        hi = bisect.bisect_right(times, ev.end_us)
        if lo < hi:
            ev.cpu_memory_usage = pre_cpu[hi] - pre_cpu[lo]
            ev.device_memory_usage = pre_dev[hi] - pre_dev[lo]
            cover[lo] += 1
            cover[hi] -= 1
    for ev in cpu:
        if ev.is_async:  # torch's: no self memory, as no self time
            continue
        ev.self_cpu_memory_usage = ev.cpu_memory_usage - sum(
            c.cpu_memory_usage for c in ev.cpu_children)
        ev.self_device_memory_usage = ev.device_memory_usage - sum(
            c.device_memory_usage for c in ev.cpu_children)
    alone, depth = [], 0
    for i, (ts, nbytes, dev, tid) in enumerate(mem):
        depth += cover[i]
        if depth:
            continue
        ev = ProfilerEvent("[memory]", "cpu_instant_event", "CPU", tid, ts, ts)
        # torch's FunctionEvent for an allocation outside every op: no trace name, no inputs
        # or FLOPs, its own thread as forward thread
        ev.concrete_inputs, ev.flops, ev.fwd_thread = None, None, tid
        if dev == 0:
            ev.cpu_memory_usage = ev.self_cpu_memory_usage = nbytes
        else:
            ev.device_memory_usage = ev.self_device_memory_usage = nbytes
        alone.append(ev)
    return alone


def _remove_dup_nodes(cpu):
    """torch's EventList._remove_dup_nodes: an operator whose only child has its own name (an
    op that redispatches to its overload: aten::sum > aten::sum) is one event; the child goes,
    its children, self times and launched GPU time go to the parent. The trace keeps both."""
    gone = set()
    for ev in cpu:
        p = ev.cpu_parent
        if p is None or p.name != ev.name or len(p.cpu_children) != 1:
            continue
        # the parent may itself be a duplicate already merged upward: merge into the survivor
        p.cpu_children = ev.cpu_children
        for ch in ev.cpu_children:
            ch.cpu_parent = p
        p.self_cpu_time_total += ev.self_cpu_time_total
        p.self_device_time_total += ev.self_device_time_total
        # torch lifts the child's kernels up with its device time; the parent's own (launched
        # outside the child) stay, so that kernels and self CUDA time still agree
        p.kernels = p.kernels + ev.kernels
        gone.add(id(ev))
    if not gone:
        return cpu
    return [ev for ev in cpu if id(ev) not in gone]


def export_stacks(window, path, metric):
    """Writes window's CPU events with a Python context (python_function events, and events
    under one) as collapsed stacks to path: "outer;...;inner;event value", value the event's
    self CPU time (metric "cpu") or the GPU time charged to it ("device"), whole microseconds,
    lines with 0 left out (as torch.profiler's export_stacks). Returns the number of lines."""
    attr = "self_cpu_time_total" if metric == "cpu" else "self_device_time_total"
    clean = str.maketrans(" ;\t\n", "____")  # the format's separators
    lines = []
    for ev in _build(window)[1]:
        if not ev.stack and ev.category != "python_function":
            continue
        value = int(getattr(ev, attr))
        if value <= 0:
            continue
        frames = [f.translate(clean) for f in reversed(ev.stack)]
        frames.append(ev.name.translate(clean))
        lines.append(f"{';'.join(frames)} {value}\n")
    data = "".join(lines).encode("utf-8")
    retry = "the window's data is kept: call export_stacks(path) again with {where}"
    from ._window import is_stream
    if not is_stream(path):  # whole or nothing: a cut last line reads as a frame
        atomic_write(path, data, "stacks", retry)
        return len(lines)
    try:  # /dev/stdout, a FIFO: written into, no rename possible
        with open(path, "wb") as f:
            f.write(data)
    except OSError as err:
        raise TraceWriteError(err.errno or 5, f"could not write the stacks {path}: "
                              f"{err.strerror or err}; {retry_advice(retry, err.errno)}"
                              ) from None
    return len(lines)


def _shapes_of(frag):
    """(Input Dims, Input type, Concrete Inputs, their values) of a range's JSON args fragment
    ('"k":v,...'), as lists."""
    try:
        args = json.loads("{" + frag + "}")
    except ValueError:  # a fragment is written by cprof's own C code: never expected
        return [], [], [], []
    concrete = list(args.get("Concrete Inputs", []))
    return (list(args.get("Input Dims", [])), list(args.get("Input type", [])), concrete,
            [_concrete_value(t) for t in concrete])


def _concrete_value(text):
    """A "Concrete Inputs" entry as the Python value torch's events() gives: None for a
    non-scalar argument (""), else the number, bool or list it prints."""
    if not isinstance(text, str) or text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except ValueError:
        pass
    if text.startswith("[") and text.endswith("]"):  # a list with "2." or "inf" in it
        items = [_concrete_value(x.strip()) for x in text[1:-1].split(",") if x.strip()]
        if not any(isinstance(x, str) for x in items):
            return items
        return text
    try:
        return float(text)  # an IValue prints 0.0 as "0.", and inf / nan as such
    except ValueError:
        pass
    return _complex_value(text)


def _complex_value(text):
    """A complex scalar as an IValue prints it ("3.+4.j", "-1.5-2e-05j") as the Python complex
    torch's events() give; any other text as it is."""
    if not text.endswith("j"):
        return text
    i = max(text.rfind("+"), text.rfind("-"))
    while i > 0 and text[i - 1] in "eE":  # an exponent's sign, not the imaginary part's
        i = max(text.rfind("+", 0, i - 1), text.rfind("-", 0, i - 1))
    if i <= 0:
        return text
    try:
        return complex(float(text[:i]), float(text[i:-1]))
    except ValueError:
        return text


# with_flops: the operators torch.profiler estimates FLOPs for, with its formulas
# (torch/csrc/profiler/util.cpp computeFlops): a multiply-add is 2 FLOPs, an elementwise
# mul / add 1 per element of the first input; anything it cannot read is 0 ("--")
_FLOP_OPS = frozenset(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mul",
                       "aten::add", "aten::conv2d"))


def _ints(text):
    """A Concrete Inputs entry of a scalar list ("[1, 1]") or a scalar ("1") as ints."""
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return None
    v = v if isinstance(v, list) else [v]
    return v if all(isinstance(x, int) and not isinstance(x, bool) for x in v) else None


def _flops_of(name, dims, concrete):
    def dim(i, rank):
        d = dims[i] if i < len(dims) else None
        ok = isinstance(d, list) and len(d) == rank and all(isinstance(x, int) and x >= 0
                                                            for x in d)
        return d if ok else None

    if name in ("aten::mm", "aten::addmm"):
        first = 0 if name == "aten::mm" else 1
        a, b = dim(first, 2), dim(first + 1, 2)
        return 2 * a[0] * a[1] * b[1] if a and b else 0
    if name in ("aten::bmm", "aten::baddbmm"):
        first = 0 if name == "aten::bmm" else 1
        a, b = dim(first, 3), dim(first + 1, 3)
        return 2 * a[0] * a[1] * a[2] * b[2] if a and b else 0
    if name in ("aten::mul", "aten::add"):
        d = dims[0] if dims and isinstance(dims[0], list) else None
        if d is None or not all(isinstance(x, int) and x >= 0 for x in d):
            return 0
        n = 1
        for x in d:
            n *= x
        return n
    # aten::conv2d(input, weight, bias, stride, padding, dilation, groups)
    x, w = dim(0, 4), dim(1, 4)
    params = [_ints(concrete[i]) if i < len(concrete) else None for i in (3, 4, 5, 6)]
    if not x or not w or any(p is None for p in params):
        return 0
    stride, padding, dilation, groups = params
    if len(stride) != 2 or len(padding) != 2 or len(dilation) != 2 or len(groups) != 1:
        return 0
    if min(stride) <= 0 or groups[0] <= 0:
        return 0
    n, c_in, h, wd = x
    c_out, _, kh, kw = w
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return max(2 * n * out_h * out_w * kh * kw * c_in * c_out // groups[0], 0)


def _innermost(evs, starts, t):
    """The innermost range of one thread's ranges (begin order) open at time t, other than
    python_function ones (as the trace links launches): the last one begun by t, or the
    nearest of its enclosing ranges."""
    if not evs:
        return None
    i = bisect.bisect_right(starts, t) - 1
    ev = evs[i] if i >= 0 else None
    while ev is not None and (not ev._ns[0] <= t <= ev._ns[1]
                              or ev.category in _NOT_OWNERS or ev.is_async):
        ev = ev._parent
    return ev


# ---- key averages ----

# at::RecordScope values (torch's FunctionEvent.scope)
_BACKWARD_FUNCTION = 1
_USER_SCOPE = 7


class _HostOnlyEvent(ProfilerEvent):
    """An event of a window that did not collect CUDA (use_device None, as torch's)."""

    __slots__ = ()
    use_device = None


class FunctionEventAvg(_TorchCompat):
    """Aggregates of every event with one name (times in microseconds). Like torch's, it
    takes its first event's place in the tree (cpu_parent, cpu_children: a table's
    top_level_events_only keeps the rows whose first event had no parent)."""

    def __init__(self, key=None, device_type="CPU", input_shapes=None, stack=None, first=None):
        self.key = key
        self.device_type = CUDA if device_type == "CUDA" else CPU
        self.input_shapes = input_shapes
        self.stack = stack if stack is not None else []
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.device_time_total = 0.0
        self.self_device_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.device_memory_usage = self.self_device_memory_usage = 0
        self.flops = 0
        # torch's: None until an event is added, then the last one's
        self.scope = getattr(first, "scope", None)
        self.category = getattr(first, "category", None)
        self.use_device = getattr(first, "use_device", None)
        self.is_async = getattr(first, "is_async", False)
        self.cpu_parent = getattr(first, "cpu_parent", None)
        self.cpu_children = getattr(first, "cpu_children", [])
        self.self_cpu_percent = self.total_cpu_percent = self.total_device_percent = -1

    def add(self, other):
        """Fold one event or one average into this one (torch's FunctionEventAvg.add): an
        empty average (FunctionEventAvg()) takes the first one's key, device, shapes, stack
        and place in the tree; after that the keys must match. Returns self."""
        if not isinstance(other, (ProfilerEvent, FunctionEventAvg)):
            raise TypeError(f"cprof: FunctionEventAvg.add takes an event (events()) or an "
                            f"average (key_averages()), got {type(other).__name__}")
        if self.key is None:
            self.key = other.key
            self.device_type = other.device_type
            self.input_shapes = other.input_shapes
            self.stack = list(other.stack or [])
            self.category = other.category
            self.use_device = other.use_device
            self.is_async = other.is_async
            self.cpu_parent = other.cpu_parent
            self.cpu_children = other.cpu_children
        elif other.key != self.key:
            raise ValueError(f"cprof: FunctionEventAvg.add: keys differ ({other.key!r} added "
                             f"to the average of {self.key!r})")
        self.scope = other.scope
        self.count += other.count
        for attr in _SUMMED:
            # a [memory] event's flops are None, as torch's
            setattr(self, attr, (getattr(self, attr) or 0) + (getattr(other, attr) or 0))
        return self

    __iadd__ = add

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key!r} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.3f} "
                f"device_time_total={self.device_time_total:.3f}>")


# the figures an average sums over its events (count aside)
_SUMMED = ("cpu_time_total", "self_cpu_time_total", "device_time_total",
           "self_device_time_total", "cpu_memory_usage", "self_cpu_memory_usage",
           "device_memory_usage", "self_device_memory_usage", "flops")

SORT_KEYS = ("cpu_time", "device_time", "cpu_time_total", "device_time_total",
             "self_cpu_time_total", "self_device_time_total", "count", "flops",
             "cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage",
             "self_device_memory_usage")


class SortKeyError(ValueError, AttributeError):
    """table(sort_by=...) with a key that is no column: a ValueError, and the AttributeError
    torch.profiler's table raises for it (code catching either still works)."""


def _sort_attr(sort_by):
    """torch's table() reads sort_by with "cuda", "xpu" and "privateuse1" as "device"."""
    return sort_by.replace("cuda", "device").replace("xpu", "device").replace("privateuse1",
                                                                              "device")


class EventList(list):
    """A list of FunctionEventAvg (key_averages()) or of ProfilerEvent (events()) with
    torch.profiler's table(), total_average() and, for events, key_averages()."""

    def __init__(self, *args, use_device=None, profile_memory=False, with_flops=False):
        """torch's EventList(events, use_device=None, profile_memory=False, with_flops=False):
        profile_memory adds table()'s memory columns; use_device and with_flops are kept
        (cprof's table shows CUDA and FLOPs columns when a row has some)."""
        super().__init__(*args)
        self.use_device = use_device
        self.profile_memory = bool(profile_memory)
        self.with_flops = bool(with_flops)

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False, time_unit=None):
        """torch.profiler's table: the same columns, sort keys and arguments. time_unit "s",
        "ms" or "us" prints every time in that unit (anything else: the unit that suits each
        value, as torch); top_level_events_only keeps the rows with no enclosing CPU event;
        max_src_column_width caps Source Location, trimming a frame from its start as torch."""
        if sort_by is not None:
            if not isinstance(sort_by, str):
                raise TypeError(f"cprof: sort_by must be a str such as 'cpu_time_total', got "
                                f"{sort_by!r}")
            attr = _sort_attr(sort_by)
            if attr not in SORT_KEYS:
                raise SortKeyError(f"cprof: cannot sort by {sort_by!r}; sort_by is one of "
                                 f"{', '.join(SORT_KEYS)} ('device' may be spelt 'cuda' or "
                                 f"'xpu', as torch.profiler takes it)")
        # row_limit is compared as torch's _build_table compares it (rows stop when their
        # count == row_limit): None, a negative or any non-integer value prints every row
        rows = list(self)
        if sort_by is not None:
            rows.sort(key=lambda r: getattr(r, attr) or 0, reverse=True)  # [memory]: None
        return _format_table(rows, header, row_limit, max_src_column_width,
                             max_name_column_width, max_shapes_column_width,
                             getattr(self, "profile_memory", False), top_level_events_only,
                             time_unit)

    def __str__(self):
        return self.table()

    @property
    def self_cpu_time_total(self):
        """Self CPU time of every row, microseconds (torch's EventList attribute)."""
        return sum(r.self_cpu_time_total for r in self)

    def key_averages(self, group_by_input_shapes=False, group_by_stack_n=0,
                     group_by_overload_name=False, *, group_by_input_shape=None):
        """Per-name averages of these events (a list events() returned), as torch's
        EventList.key_averages (its spelling, group_by_input_shapes; profile.key_averages'
        group_by_input_shape is taken too). group_by_overload_name: as profile.key_averages."""
        group_by_input_shape = bool(group_by_input_shapes if group_by_input_shape is None
                                    else group_by_input_shape)
        if (not isinstance(group_by_stack_n, int) or isinstance(group_by_stack_n, bool)
                or group_by_stack_n < 0):
            raise ValueError(f"cprof: group_by_stack_n must be an int >= 0, got "
                             f"{group_by_stack_n!r}")
        if any(isinstance(e, FunctionEventAvg) for e in self):
            raise TypeError("cprof: these rows are averages already (key_averages() "
                            "returned them); call key_averages() on events()")
        cpu = [e for e in self if e.device_type == "CPU"]
        gpu = [e for e in self if e.device_type != "CPU"]
        out = average(cpu, gpu, group_by_input_shape, group_by_stack_n)
        out.profile_memory = getattr(self, "profile_memory", False)
        return out

    def _source(self):
        """The profiler whose window these events are, while that window is still its last
        one (a list kept from an earlier window of a schedule is not the profiler's now)."""
        source = getattr(self, "source", None)
        w = getattr(self, "source_window", None)
        if source is not None and w is not None:
            try:
                if source._data("export") is not w:
                    return None
            except Exception:  # noqa: BLE001 - no finished window any more
                return None
        return source

    def _profiler(self, what):
        source = self._source()
        if source is None:
            raise RuntimeError(f"cprof: {what} needs the events of the profiler's last "
                               "window (prof.events(), or the events on_trace_ready got, while "
                               "that window is the last one); call it on the profiler instead")
        return source

    def export_chrome_trace(self, path):
        """prof.events() as it came: the window they are the events of, as a Kineto-compatible
        Chrome trace (the same events, with the GPU side and metadata). Any other list (a
        filtered one, EventList(events)): these events only, in torch's EventList format (a
        JSON array of "X" events and launch flow starts). .gz by suffix. Returns the path."""
        # its own events for a list kept from an earlier window or acc_events' list of every
        # window (as torch's EventList writes its own), else its window's full trace
        source = None if getattr(self, "accumulated", False) else self._source()
        if source is not None:
            return source.export_chrome_trace(path)
        if any(isinstance(e, FunctionEventAvg) for e in self):
            raise TypeError("cprof: EventList.export_chrome_trace writes events (prof.events() "
                            "or a list of them), not key_averages() rows")
        path = os.path.expanduser(os.fspath(path))
        data = _legacy_trace(self, self.use_device or "cuda").encode("utf-8")
        if path.endswith(".gz"):
            import gzip
            data = gzip.compress(data)
        from ._window import check_output_dir
        check_output_dir(os.path.dirname(path) or ".",
                         "pass export_chrome_trace a path in a directory you can write to")
        atomic_write(path, data, "trace", "call export_chrome_trace(path) again with {where}")
        return path

    def export_stacks(self, path, metric="self_cpu_time_total"):
        """The window's Python stacks in the collapsed format (profile.export_stacks)."""
        return self._profiler("EventList.export_stacks").export_stacks(path, metric)

    def supported_export_stacks_metrics(self):
        from ._profile import profile
        return list(profile._STACK_METRICS)

    def total_average(self):
        """One FunctionEventAvg summing every row (key "Total"), as torch's."""
        total = FunctionEventAvg("Total", "CPU", first=self[0] if self else None)
        total.cpu_parent, total.cpu_children, total.category = None, [], None
        total.scope = self[-1].scope if self else None  # torch's: the last row's
        for r in self:
            total.count += r.count
            for attr in _SUMMED:
                setattr(total, attr, getattr(total, attr) + (getattr(r, attr) or 0))
        return total


def _legacy_trace(events, device_name):
    """torch's EventList.export_chrome_trace text: each event with a trace name as an "X"
    event of pid "CPU functions", and a flow start ("s", cat cpu_to_<device>) per kernel it
    launched; names JSON-escaped (torch pastes them raw)."""
    out, next_id = [], 0
    for ev in events:
        name = ev.trace_name
        if name is None:
            continue
        name = json.dumps(name)
        tid = ev.thread if ev.thread is not None else 0
        out.append(f'{{"name": {name}, "ph": "X", "ts": {ev.time_range.start}, '
                   f'"dur": {ev.time_range.elapsed_us()}, "tid": {tid}, '
                   f'"pid": "CPU functions", "args": {{}}}}')
        for _ in ev.kernels:
            out.append(f'{{"name": {name}, "ph": "s", "ts": {ev.time_range.start}, '
                       f'"tid": {tid}, "pid": "CPU functions", "id": {next_id}, '
                       f'"cat": "cpu_to_{device_name}", "args": {{}}}}')
            next_id += 1
    return "[" + ", ".join(out) + "]"


def _fmt_mem(nbytes):
    """torch.autograd.profiler_util._format_memory."""
    kb, mb, gb = 1024, 1024 ** 2, 1024 ** 3
    if abs(nbytes) >= gb:
        return f"{nbytes * 1.0 / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes * 1.0 / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes * 1.0 / kb:.2f} KB"
    return f"{nbytes} B"


def _format_table(events, header=None, row_limit=100, src_width=75, name_width=55,
                  shapes_width=80, memory=False, top_level=False, time_unit=None):
    """torch.autograd.profiler_util._build_table's text, character for character: events
    (sorted already) size every column and make the totals; row_limit rows are printed (the
    top-level ones with top_level). Columns are 12 wide, separated by two spaces (also after
    the last); the name column is the longest name + 4, at most name_width; Input Shapes and
    Source Location appear when a row has some, each frame of a stack on a row of its own."""
    if not events:
        return ""

    def t(us):
        if time_unit == "s":
            return f"{us / 1e6:.3f}s"
        if time_unit == "ms":
            return f"{us / 1e3:.3f}ms"
        if time_unit == "us":
            return f"{us:.3f}us"
        return _fmt_us(us)

    def share(part, whole):
        return f"{100.0 * part / whole:.2f}%" if whole else "NaN"

    def clean(text):  # a name is one line (newlines and tabs in range names break rows)
        return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")

    has_dev = any(e.self_device_time_total > 0 for e in events)
    has_dev_mem = any(e.self_device_memory_usage > 0 for e in events)
    has_shapes = any(e.input_shapes is not None and len(e.input_shapes) > 0 for e in events)
    stacks = [e.stack for e in events if e.stack]
    nw = max(len(clean(e.key)) for e in events) + 4
    if name_width is not None:
        nw = min(nw, name_width)
    sw = max(len(str(e.input_shapes)) for e in events) + 4
    if shapes_width is not None:
        sw = min(sw, shapes_width)
    srcw = None
    if stacks:
        srcw = max(len(f) for st in stacks for f in st) + 4
        if src_width is not None:
            srcw = min(srcw, src_width)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_dev:
        headers += ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
    if memory:
        headers += ["CPU Mem", "Self CPU Mem"]
        if has_dev_mem:
            headers += ["CUDA Mem", "Self CUDA Mem"]
    headers.append("# of Calls")
    widths, align = [nw] + [12] * (len(headers) - 1), [">"] * len(headers)
    if has_shapes:
        headers.append("Input Shapes")
        widths.append(sw)
        align.append(">")
    if stacks:
        headers.append("Source Location")
        widths.append(srcw)
        align.append("<")
    raw_flops = [e.flops for e in events if (e.flops or 0) > 0]
    if raw_flops:  # "Total FLOPs", scaled by the smallest non-zero row (torch's)
        units = ("FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs")
        k = int(max(0.0, min(math.log10(min(raw_flops)) / 3, len(units) - 1.0)))
        flops_scale = 10.0 ** (-3 * k)
        headers.append(f"Total {units[k]}")
        widths.append(12)
        align.append(">")

    def row(values):
        return "".join(f"{v:{a}{w}}  " for v, a, w in zip(values, align, widths))

    sep = "".join("-" * w + "  " for w in widths)
    line_length = sum(w + 2 for w in widths) - 2
    total_cpu = sum(e.self_cpu_time_total for e in events)
    # torch's "Self CUDA time total": the GPU work itself (each kernel, copy, set once), not
    # the CPU rows that launched it as well
    total_dev = sum(e.self_device_time_total for e in events
                    if e.device_type == "CUDA" and not e.is_user_annotation)

    def trim(path):
        if len(path) > srcw:
            path = path[len(path) - srcw:]
            if len(path) > 3:
                path = "..." + path[3:]
        return path

    out = []
    if header is not None:
        out += ["=" * line_length, str(header)]
    if top_level:
        out += ["=" * line_length, "This report only display top-level ops statistics"]
    out += [sep, row(headers), sep]
    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level and getattr(e, "cpu_parent", None) is not None:
            continue
        shown += 1
        name = clean(e.key)
        if name_width is not None and len(name) >= name_width - 3:
            name = name[: name_width - 3] + "..."
        # torch prints an async row's CPU total % as 0: its time is no share of self time
        values = [name, share(e.self_cpu_time_total, total_cpu), t(e.self_cpu_time_total),
                  0 if e.is_async else share(e.cpu_time_total, total_cpu), t(e.cpu_time_total),
                  t(e.cpu_time)]
        if has_dev:
            values += [t(e.self_device_time_total), share(e.self_device_time_total, total_dev),
                       t(e.device_time_total), t(e.device_time)]
        if memory:
            values += [_fmt_mem(e.cpu_memory_usage), _fmt_mem(e.self_cpu_memory_usage)]
            if has_dev_mem:
                values += [_fmt_mem(e.device_memory_usage), _fmt_mem(e.self_device_memory_usage)]
        values.append(e.count)
        if has_shapes:
            values.append(str(e.input_shapes)[:sw])
        if raw_flops:  # before the stack, where torch's rows put it
            values.append(f"{e.flops * flops_scale:8.3f}" if (e.flops or 0) > 0 else "--")
        if stacks:
            values.append(trim(e.stack[0]) if e.stack else "")
        out.append(row(values))
        if stacks:
            blank = [""] * (len(headers) - 1)
            out += [row(blank + [trim(f)]) for f in e.stack[1:]]
            out.append(row(blank + [""]))
    out.append(sep)
    out.append(f"Self CPU time total: {t(total_cpu)}")
    if has_dev:
        out.append(f"Self CUDA time total: {t(total_dev)}")
    return "\n".join(out) + "\n"


def key_averages(window, group_by_input_shape=False, group_by_stack_n=0):
    """Per-name aggregates (CPU ranges, python_function ones included as torch.profiler 2.x
    includes them, and GPU work), in the order first seen (torch's). With
    group_by_input_shape, per (name, input shapes), as torch.profiler's: shapes are those
    record_shapes keeps (module calls, and ranges given args through record_args); every
    other event groups under []. With group_by_stack_n=N (with_stack), per (name, the N
    innermost Python frames enclosing the event)."""
    if (not isinstance(group_by_stack_n, int) or isinstance(group_by_stack_n, bool)
            or group_by_stack_n < 0):
        raise ValueError(f"cprof: group_by_stack_n must be an int >= 0, got "
                         f"{group_by_stack_n!r}")
    _, cpu, gpu = _build(window)
    out = average(cpu, gpu, group_by_input_shape, group_by_stack_n)
    out.profile_memory = bool(window.config.get("profile_memory"))
    return out


def average(cpu, gpu, group_by_input_shape=False, group_by_stack_n=0):
    """key_averages over lists of CPU events and GPU events (ProfilerEvent)."""
    groups = {}

    def add(ev, device, name, cpu_total, self_cpu, dev_total, self_dev, shapes=None, stack=()):
        frames = tuple(stack[:group_by_stack_n]) if group_by_stack_n else ()
        key = (device, name, str(shapes) if group_by_input_shape and shapes else "", frames)
        g = groups.get(key)
        if g is None:
            g = groups[key] = FunctionEventAvg(
                # torch blanks the shapes of rows not grouped by them ('')
                name, device, (shapes or []) if group_by_input_shape else "", list(frames),
                first=ev)
        g.count += 1
        g.cpu_time_total += cpu_total
        g.self_cpu_time_total += self_cpu
        g.device_time_total += dev_total
        g.self_device_time_total += self_dev
        g.cpu_memory_usage += ev.cpu_memory_usage
        g.self_cpu_memory_usage += ev.self_cpu_memory_usage
        g.device_memory_usage += ev.device_memory_usage
        g.self_device_memory_usage += ev.self_device_memory_usage
        g.flops += getattr(ev, "flops", 0) or 0

    # every CPU event, python_function ones too (with_stack): self times are computed over all
    # of them, so leaving some out would leave their self time out of "Self CPU time total"
    # and put the rows around them above 100%
    # in time order over threads, allocation events and GPU work together (torch's events are
    # one list sorted by start, the longer first), so the rows come first-seen as torch's
    on_gpu = {id(ev) for ev in gpu}
    for ev in sorted([*cpu, *gpu], key=_time_order):
        if id(ev) not in on_gpu:
            add(ev, "CPU", ev.name, ev.duration_us, ev.self_cpu_time_total,
                ev.device_time_total, ev.self_device_time_total, ev.input_shapes, ev.stack)
        elif ev.device_type == "CUDA" and ev.category != "cuda_sync":  # decision 148 (a)
            d = ev.device_time_total or ev.duration_us  # GPU work's: from its integer ns
            add(ev, "CUDA", ev.name, 0.0, 0.0, d, d)
    # in the order first seen, as torch's key_averages (table(sort_by=...) sorts, stably)
    out = EventList(groups.values())
    out.grouped_by_input_shape = bool(group_by_input_shape)
    out.grouped_by_stack_n = group_by_stack_n
    return out
