"""cprof.profile: the torch.profiler.profile drop-in, on cprof's C engine.

State machine: torch.profiler's action map, transition for transition (prepare = open a
window; start = discard what warmup collected; stop = close the window and keep its data;
ready = on_trace_ready(prof)). The window's data stays in memory until the next window opens,
so export_chrome_trace, key_averages and events work after each cycle and after stop()."""
import collections.abc
import enum
import json
import operator
import os
import socket
import re
import sys
import time
import uuid
import warnings

from . import _C
from . import _warn
from . import _et
from . import _glue
from . import _lifecycle
from . import _schedule as _schedule_mod
from ._dist import rank_info
from ._features import gpu_unavailable_reason
from ._schedule import ProfilerAction, _always_record, as_action, min_steps, same_member
from ._window import (FALSE_WORDS, TRUE_WORDS, Window, check_buffer_size_mb,
                      check_gpu_buffer_mb, check_output_dir, clean_text, env_gpu_buffer_mb,
                      flag, is_settings, is_stream, module_ranges, write_target)




def _add_note(err, note):
    """err.add_note(note) (3.11+). Python 3.10 has no add_note: the same __notes__ list is kept,
    which its tracebacks do not print (the warning raised with each note says the same); an
    exception that takes no attributes goes without."""
    if hasattr(err, "add_note"):
        err.add_note(note)
        return
    try:
        err.__notes__ = [*getattr(err, "__notes__", ()), note]
    except (AttributeError, TypeError):
        pass


def _config_bool(value, key):
    """A config flag: bools and 0 / 1 as they are, and the strings YAML or a command line
    leave ("false", "no", "0", ...); anything else is a ValueError naming the key."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise ValueError(f"cprof: profiling option {key} must be true or false, got {value!r}")


class GpuUnavailableWarning(RuntimeWarning, UserWarning):
    """GPU activity was asked for but cannot be collected here (the reason is in the message);
    CPU activity is recorded. Both a RuntimeWarning and a UserWarning, so filters written for
    either catch it."""


class ProfilerActivity(enum.Enum):
    """What to collect. torch.profiler.ProfilerActivity values and the strings "CPU",
    "CUDA" / "GPU" and "MEM" are accepted too."""

    CPU = "CPU"
    CUDA = "CUDA"
    MEM = "MEM"

    def __eq__(self, other):  # equal to torch.profiler.ProfilerActivity's member of that name
        return same_member(self, other)

    def __hash__(self):
        # torch.profiler.ProfilerActivity's member hashes as its int value: the same hash lets
        # a torch member find cprof's in a set or a dict (`torch's CPU in supported_activities()`)
        return _TORCH_ACTIVITY_HASH.get(self._name_, hash(self._name_))


_TORCH_ACTIVITY_HASH = {"CPU": 0, "CUDA": 2}  # torch's ProfilerActivity values


class ActivityList(list):
    """A profiler's activities: canonical names ("CPU", "GPU", "MEM") that also answer
    membership of ProfilerActivity members, cprof's or torch.profiler's
    (`ProfilerActivity.CUDA in prof.activities`, as with torch.profiler's set)."""

    def __contains__(self, item):
        if not isinstance(item, str):
            name = getattr(item, "name", None)
            if not isinstance(name, str) or type(item).__name__ != "ProfilerActivity":
                return False
            item = _ACTIVITY_ALIASES.get(name.upper(), name)
        return list.__contains__(self, item)


_ACTIVITY_ALIASES = {"CPU": "CPU", "CUDA": "GPU", "GPU": "GPU", "MEM": "MEM", "MEMORY": "MEM"}


def normalize_activities(activities, default=None):
    """Canonical activity names (CPU, GPU, MEM), de-duplicated, in order. ValueError names the
    valid ones for an unknown or empty list."""
    if activities is None:
        return ActivityList(default if default is not None else _default_activities())
    if isinstance(activities, (str, enum.Enum, dict)) or not hasattr(activities, "__iter__"):
        activities = [activities]
    out = []
    flat = []
    for a in activities:
        if isinstance(a, dict):
            # torch 2.13: {ProfilerActivity.CUDA: ["GPU_MEMCPY", ...]} collects a subset of the
            # group's activity types; [] collects nothing of it. cprof collects a group whole.
            for key, types in a.items():
                types = list(types)
                if not types:
                    continue
                warnings.warn(f"cprof: activity {getattr(key, 'name', key)} with the types "
                              f"{types}: cprof collects every type of an activity; the filter "
                              "is not applied", RuntimeWarning, stacklevel=3)
                flat.append(key)
        elif isinstance(a, str) and re.search(r"[,\s]", a.strip()):
            # "CPU,MEM" / "CPU GPU": the form cprof run --activities takes, and what a config
            # file, YAML or environment variable gives create_profiler_from_args
            flat.extend(p for p in re.split(r"[,\s]+", a) if p)
        else:
            flat.append(a)
    for a in flat:
        name = getattr(a, "name", a)
        canon = _ACTIVITY_ALIASES.get(name.strip().upper()) if isinstance(name, str) else None
        if canon is None and type(a).__name__ == "ProfilerActivity" and isinstance(name, str):
            # torch.profiler's other devices (XPU, MTIA, HPU, PrivateUse1): torch accepts
            # them in a list with CPU; cprof collects NVIDIA GPUs only
            warnings.warn(f"cprof: ProfilerActivity.{name} is not collected by cprof (CPU, "
                          "CUDA and MEM are); ignored", RuntimeWarning, stacklevel=3)
            continue
        if canon is None:
            raise ActivityError(
                f"cprof: unknown profiler activity {a!r}; valid activities are CPU, CUDA "
                "(alias GPU) and MEM, as strings or ProfilerActivity members")
        if canon not in out:
            out.append(canon)
    if not out:
        raise ActivityError("cprof: activities is empty; pass at least one of CPU, CUDA (alias GPU), "
                            "MEM")
    return ActivityList(out)


class ActivityError(ValueError, AssertionError):
    """An unknown or empty activity list. A ValueError; also an AssertionError, which is what
    torch.profiler.profile raises ("No valid profiler activities found")."""


def _default_activities():
    """CPU, plus CUDA when torch has CUDA (torch.profiler's default)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return ["CPU", "GPU"]
    except Exception:
        pass
    return ["CPU"]


def resolve_gpu(activities):
    """(collected activities, notes): GPU is dropped, with a warning, where it cannot be
    collected; CPU is always collected (ranges are the CPU side). Called once per profiler
    (ProfilerContext, cprof.profile): one warning each, not one per schedule cycle."""
    collected = [a for a in activities if a != "GPU"]
    notes = {}
    if "GPU" in activities:
        reason = gpu_unavailable_reason()
        if reason is None:
            collected.append("GPU")
        else:
            notes["gpu_unavailable"] = reason
            _warn.warn(
                f"cprof: GPU activity was asked for but is not collected: {reason}. "
                "Recording CPU activity only.", GpuUnavailableWarning)
    if "CPU" not in collected:
        collected.insert(0, "CPU")
    return collected, notes


_STEP_REQUESTER = "ProfilerStep"  # torch.profiler's name in KinetoStepTracker's counts


def _step_tracker():
    """torch's KinetoStepTracker where torch is imported (cprof never imports it), else None."""
    mod = sys.modules.get("torch.autograd.profiler")
    return getattr(mod, "KinetoStepTracker", None)


def _clean_exit(exc):
    """sys.exit(0) / sys.exit() / sys.exit(None): the program's normal end, not a failure that
    marks the window partial (as `cprof run` reads it)."""
    return isinstance(exc, SystemExit) and exc.code in (0, None)


def _rank_selected(ranks):
    if ranks is None:
        return True
    bad = TypeError(f"cprof: ranks must be a rank number or a list of them (ranks=[0, 1]), "
                    f"got {ranks!r}")
    if isinstance(ranks, bool) or isinstance(ranks, (str, bytes)):
        raise bad
    if not hasattr(ranks, "__iter__"):
        try:
            ranks = [operator.index(ranks)]  # one rank: an int, a numpy integer
        except TypeError:
            raise bad from None
    try:
        ranks = list(ranks)
    except TypeError:
        raise bad from None
    if any(isinstance(r, bool) for r in ranks):
        raise bad
    try:
        ranks = [operator.index(r) for r in ranks]  # numpy integers too
    except TypeError:
        raise bad from None
    if any(r < 0 for r in ranks):
        raise bad
    if not ranks:
        raise ValueError("cprof: ranks=[] would profile no rank; pass the ranks to profile "
                         "(ranks=[0]), None for every rank, or enabled=False to profile none")
    rank, _, _ = rank_info()
    return rank in set(ranks)


class NoResultsError(_C.WindowStateError, AssertionError):
    """Results asked for before any window finished: a WindowStateError (a RuntimeError), and
    an AssertionError, which is what torch.profiler raises then ("Profiler must be
    initialized before getting the events"), so code written against torch keeps working."""


class StacksUnavailableError(ValueError, AssertionError):
    """export_stacks of a window recorded without with_stack: a ValueError, and the
    AssertionError torch.profiler raises for it ("export_stacks() requires
    with_stack=True")."""


class StepOutsideWindowError(_C.WindowStateError, AssertionError):
    """step() on a profile that is not running: a WindowStateError, and the AssertionError
    torch.profiler raises for it with a schedule ("Profiler must be initialized before
    stopping trace")."""


_SCHEDULE_PARAMS = ("wait", "warmup", "active", "repeat", "skip_first")


def _schedule_params(schedule):
    """A cprof.schedule's params, or a torch.profiler.schedule's read from its closure (usage.md
    says torch's works too, and Megatron-LM passes torch's); None for any other callable."""
    p = getattr(schedule, "params", None)
    if isinstance(p, dict):
        return p
    code, cells = getattr(schedule, "__code__", None), getattr(schedule, "__closure__", None)
    if (code is None or not cells or getattr(schedule, "__qualname__", "")
            != "schedule.<locals>.schedule_fn"
            or not getattr(schedule, "__module__", "").startswith("torch.profiler")):
        return None
    try:
        p = {n: c.cell_contents for n, c in zip(code.co_freevars, cells)}
    except ValueError:  # an empty cell
        return None
    p.setdefault("skip_first_wait", 0)  # torch before 2.5 has no skip_first_wait
    if not all(isinstance(p.get(n), int) for n in (*_SCHEDULE_PARAMS, "skip_first_wait")):
        return None
    return p


def _schedule_finished(schedule, step):
    """Whether a cprof.schedule (or torch.profiler.schedule) records nothing from step on:
    repeat > 0 and its cycles run. Other callables cannot say (None for the profile's default:
    always RECORD)."""
    p = _schedule_params(schedule)
    if p is None or not p.get("repeat"):
        return False
    return step >= min_steps(p["wait"], p["warmup"], p["active"], p["repeat"], p["skip_first"],
                             p["skip_first_wait"])


_KINETO_STEPS = ("torch's _KinetoProfile halves of start() / stop(); cprof.profile's start() "
                 "and stop() open and close its window (a schedule's warmup is its prepare)")
# torch.profiler.profile's members (torch 2.13) that cprof.profile does not have
_TORCH_PROFILE_ONLY = {
    "prepare_trace": _KINETO_STEPS,
    "start_trace": _KINETO_STEPS,
    "stop_trace": _KINETO_STEPS,
    "mem_tl": "torch's memory timeline (export_memory_timeline, deprecated there); with "
              "profile_memory=True the trace has a memory track, and export_memory_snapshot(path)",
    "_memory_profile": "torch's memory timeline (export_memory_timeline, deprecated there); "
                       "with profile_memory=True the trace has a memory track",
    "activity_filters": "torch 2.13's filter dicts are taken in activities; prof.activities "
                        "and prof.collected_activities say what is collected",
    "preset_metadata": "use preset_metadata_json(key, json_text) or add_metadata(key, value)",
    "has_cudagraphs": "cprof does not track inductor's cudagraphs setting",
    "_stats": "torch's post-processing statistics; the trace's cprof metadata has cprof's "
              "counts",
}


class profile:  # noqa: N801 -- the torch.profiler name, on purpose
    """Profiles like torch.profiler.profile, on cprof's engine.

    Parameters as torch.profiler.profile (activities, schedule, on_trace_ready,
    record_shapes, profile_memory, with_stack, with_modules, execution_trace_observer
    (driven as torch drives it: cprof/_et.py); with_flops (as torch's: implies
    record_shapes, and key_averages() rows and events carry torch.profiler's FLOP estimates
    for mm / addmm / bmm / baddbmm / mul / add / conv2d, with a "Total FLOPs" column);
    experimental_config is accepted and ignored with a warning), plus:
    ``min_duration_us`` (with_stack: drop Python calls shorter than this), ``c_calls``
    (with_stack: also record calls of C functions such as torch ops; default True),
    ``ranks`` (profile only these ranks; others run unprofiled), ``buffer_size_mb`` (cap of
    the CPU range buffers), ``gpu_buffer_mb`` (cap of CUPTI's activity buffer pool, default
    128 MiB or ``CPROF_GPU_BUFFER_MB``; GPU records beyond it are lost, counted and warned
    about), ``strict`` (a CUPTI held by another tool is an error rather than a warning and
    CPU-only collection), ``record_ops`` (torch's operators as cpu_op ranges, as
    torch.profiler records them: None, the default, records them; with with_modules GPU work
    still links to the innermost module in the trace; where they cannot be attached, the
    trace's cprof.ops says why, with a warning only when record_ops=True was asked for).

    SIGTERM and interpreter exit while started stop it as an exception would: the window is
    closed marked partial and on_trace_ready runs (see cprof/_lifecycle.py)."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False, with_flops=False,
                 with_modules=False, experimental_config=None, execution_trace_observer=None,
                 acc_events=False, use_cuda=None, custom_trace_id_callback=None,
                 post_processing_timeout_s=None, min_duration_us=0.0, c_calls=True, ranks=None, buffer_size_mb=None,
                 strict=True, record_ops=None, gpu_buffer_mb=None, _api="profile"):
        # post_processing_timeout_s bounds torch's post-processing of its events; cprof's
        # results are read from C when asked for: nothing to bound (accepted, as torch's)
        if post_processing_timeout_s is not None and not post_processing_timeout_s > 0:
            raise ValueError("cprof.profile: post_processing_timeout_s must be a positive "
                             "number of seconds or None")
        if use_cuda is not None:
            warnings.warn("cprof.profile: use_cuda is deprecated in torch.profiler; pass "
                          "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
                          FutureWarning, stacklevel=2)
            if use_cuda and activities is None:
                activities = ["CPU", "CUDA"]
        if experimental_config:
            # say what is lost: capture_overload_names' split rows are the one users look for
            warnings.warn("cprof.profile: experimental_config not supported by cprof; "
                          "ignored: its options (capture_overload_names, verbose, "
                          "profile_all_threads, ...) change nothing, so events' overload_name "
                          "stays \"\" and key_averages(group_by_overload_name=True) does not "
                          "split rows", RuntimeWarning, stacklevel=2)
        # with_flops estimates FLOPs from the operators' shapes: it records them, as torch's
        who = f"cprof.{_api}"
        self.with_flops = flag(with_flops, who, "with_flops")
        record_shapes = flag(record_shapes, who, "record_shapes") or self.with_flops
        self.activities = normalize_activities(activities)
        # torch.profiler's attribute: the device whose activity is asked for ("cuda" or None)
        self.use_device = "cuda" if "GPU" in self.activities else None
        # torch's Execution Trace observer: started and stopped with each recording window
        # and cleaned up at the with block's end, as torch.profiler.profile does (cprof/_et.py)
        self.execution_trace_observer = _et.resolve(execution_trace_observer)
        self.experimental_config = experimental_config  # kept, as torch's; ignored (above)
        self._et_step = None        # the ProfilerStep RecordFunction the observer sees
        if flag(profile_memory, who, "profile_memory") and "MEM" not in self.activities:
            self.activities.append("MEM")
        if schedule is not None and not callable(schedule):
            raise TypeError("cprof.profile: schedule must be a callable step -> ProfilerAction "
                            "(use cprof.schedule(wait=, warmup=, active=, repeat=))")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError("cprof.profile: on_trace_ready must be callable with the profiler "
                            "(e.g. cprof.tensorboard_trace_handler(dir))")
        try:  # text refused, as buffer_size_mb's ("5" was taken, "10" MiB was not)
            if isinstance(min_duration_us, (str, bytes, bool)):
                raise TypeError
            min_duration_us = float(min_duration_us)
        except (TypeError, ValueError):
            raise TypeError(f"{who}: min_duration_us must be a number of microseconds, got "
                            f"{min_duration_us!r}") from None
        if not min_duration_us >= 0:
            raise ValueError(f"{who}: min_duration_us must be >= 0 microseconds")
        buffer_size_mb = check_buffer_size_mb(buffer_size_mb, who)
        self.gpu_buffer_mb = check_gpu_buffer_mb(gpu_buffer_mb, who)
        if self.gpu_buffer_mb is None:
            env_gpu_buffer_mb()  # a typo in a job script fails here, not on the GPU nodes' window
        self.record_shapes = bool(record_shapes)
        self.profile_memory = "MEM" in self.activities
        if self.profile_memory:  # a bad CPROF_MEMORY_INTERVAL_US: here, not out of step()
            _glue.memory_interval_us()
        self.with_stack = flag(with_stack, who, "with_stack")
        self.with_modules = flag(with_modules, who, "with_modules")
        self.min_duration_us = min_duration_us
        self.c_calls = flag(c_calls, who, "c_calls")
        # torch's operators (aten::*) as cpu_op ranges, as torch.profiler records them with CPU.
        # None (the default): on, as torch.profiler's default (with with_modules too: the
        # trace then links kernels to the innermost module, not to the op inside it)
        self._ops_asked = record_ops is not None and flag(record_ops, who, "record_ops")
        if record_ops is None:
            record_ops = True
        self.record_ops = bool(record_ops) and "CPU" in self.activities
        if self.record_ops:
            from . import _ops
            _ops.capture_choice()  # a bad CPROF_OPS_CAPTURE is a ValueError here, not later
        self.buffer_size_mb = buffer_size_mb
        self.strict = flag(strict, who, "strict")
        # acc_events: events() / key_averages() cover every window so far, as torch's do
        self.acc_events = flag(acc_events, who, "acc_events")
        self._acc = []              # the finished windows' events (acc_events)
        self._acc_list = None       # events() of them, made once per window added
        self.enabled = _rank_selected(ranks)
        self.ranks = ranks
        self._api = _api
        self.on_trace_ready = on_trace_ready
        self.set_custom_trace_id_callback(custom_trace_id_callback)
        self._trace_id = None       # the current cycle's (get_trace_id)
        self._trace_metadata = {}   # add_metadata / add_metadata_json: key -> JSON text
        if schedule is not None:
            self.schedule = schedule
            self.record_steps = True
        else:
            self.schedule = _always_record
            self.record_steps = False
        self.step_num = 0
        self.current_action = as_action(self.schedule(self.step_num))
        self.collected_activities, self._notes = (None, {})
        self._window = None        # the open window, if any
        self._toggled_off = set()  # toggle_collection_dynamic: "CPU" / "GPU" switched off
        self._last = None          # the last closed window, kept until the next one opens
        self._prepared_at = None   # the transition that opened the current window
        self._transitions = 0      # transitions run (start, each step, stop)
        self._unsaved = None       # a window whose on_trace_ready raised, kept one cycle more
        self._skip_ready = False   # the window just stopped was dropped: no on_trace_ready
        self._warmup_window = False
        self._step_range = None
        self._started = False
        self._glue = None
        self._pending_error = None
        self._window_exc = None
        self._pid = None           # the process that started it (see _in_other_process)
        self._forks = 0
        # what ends the window at SIGTERM / exit (_lifecycle): this profile (None), else a weak
        # reference to the ProfilerContext / cprof run session around it (a strong one made
        # a reference cycle: `del` freed the results only at the next garbage collection)
        self._lifecycle_owner = None
        self.traces_ready = 0
        self.memory = None         # memory snapshot of the last window (profile_memory + CUDA)
        self._mem_sampling = False  # the CPU memory sampler runs for this window (_glue)
        self.action_map = self._build_action_map()
        # torch's global step count (KinetoStepTracker, what Kineto's on-demand tracing
        # counts iterations by): registered here and counted by step() under
        # KINETO_USE_DAEMON, erased at the with block's end, as torch.profiler.profile does
        tracker = _step_tracker()
        self._daemon_steps = tracker is not None and bool(os.environ.get("KINETO_USE_DAEMON"))
        if tracker is not None:
            tracker.init_step_count(_STEP_REQUESTER)

    # seed 002's profiling section: its values for what a config leaves out
    _CONFIG_DEFAULTS = dict(wait=3, warmup=1, active=3, repeat=1, skip_first=0,
                            record_shapes=True, profile_memory=True, with_stack=False,
                            with_modules=False)

    @classmethod
    def from_config(cls, config, trace_dir, use_gzip=False, worker_name=None, **kwargs):
        """A profiler from a training config's profiling section (seed 002): a mapping or an
        object with wait / warmup / active / repeat (/ skip_first) and record_shapes /
        profile_memory / with_stack (/ with_modules); missing ones take seed 002's values
        (3, 1, 3, 1; record_shapes and profile_memory on, with_stack and with_modules off). ``None`` (seed 002's ``profiling:None``) gives a disabled profiler:
        its with block, step() and stop() do nothing. Traces go to ``trace_dir`` through
        tensorboard_trace_handler(trace_dir, worker_name, use_gzip) (``*.pt.trace.json``;
        pass ``worker_name=f"rank{rank}"`` to put the rank in the file names). Extra keyword
        arguments go to cprof.profile. The loop needs cprof.min_steps(wait, warmup, active,
        repeat) steps for every cycle's trace."""
        if config is None:
            p = cls(activities=kwargs.pop("activities", None), **kwargs)
            p.enabled = False
            p._disabled_why = "profiling is disabled in the config (profiling: None)"
            return p
        if isinstance(config, collections.abc.Mapping):
            unknown = sorted(set(config) - set(cls._CONFIG_DEFAULTS))
            if unknown:
                raise ValueError(f"cprof: unknown profiling option(s) {unknown}; known: "
                                 f"{', '.join(cls._CONFIG_DEFAULTS)}")
            get = config.get
        elif not is_settings(config):  # getattr would find nothing: seed 002's values, silently
            raise TypeError(
                f"cprof.profile.from_config takes the profiling section as a mapping or an "
                f"object with wait / warmup / active / repeat ... attributes (None: profiling "
                f"off), got {type(config).__name__} {config!r:.60}" +
                ("; parse YAML text first (yaml.safe_load)" if isinstance(config, str) else ""))
        else:
            def get(key, default):
                return getattr(config, key, default)
        opts = {k: get(k, v) for k, v in cls._CONFIG_DEFAULTS.items()}
        sched = _schedule_mod.schedule(wait=opts["wait"], warmup=opts["warmup"],
                                       active=opts["active"], repeat=opts["repeat"],
                                       skip_first=opts["skip_first"])
        flags = {k: _config_bool(opts[k], k) for k in
                 ("record_shapes", "profile_memory", "with_stack", "with_modules")}
        return cls(schedule=sched,
                   on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name=worker_name,
                                                            use_gzip=use_gzip),
                   **flags, **kwargs)

    # -- torch's transition table --
    def _build_action_map(self):
        # the class's functions, called with the profile (_transit): bound methods here made
        # each profile a reference cycle, so `del prof` freed its results only at the next
        # garbage collection
        A = ProfilerAction
        cls = type(self)
        prep, start, stop, ready = (cls._prepare_trace, cls._start_trace, cls._stop_trace,
                                    cls._trace_ready)

        def bad(msg):
            return lambda _: warnings.warn(f"Incorrect schedule: {msg}", stacklevel=4)

        return {
            (A.NONE, A.NONE): [], (A.NONE, A.WARMUP): [prep],
            (A.NONE, A.RECORD): [prep, start], (A.NONE, A.RECORD_AND_SAVE): [prep, start],
            (A.WARMUP, A.NONE): [bad("WARMUP followed by NONE"), start, stop],
            (A.WARMUP, A.WARMUP): [], (A.WARMUP, A.RECORD): [start],
            (A.WARMUP, A.RECORD_AND_SAVE): [start],
            (A.RECORD, A.NONE): [bad("RECORD followed by NONE"), stop],
            (A.RECORD, A.WARMUP): [bad("RECORD followed by WARMUP"), stop],
            (A.RECORD, A.RECORD): [], (A.RECORD, A.RECORD_AND_SAVE): [],
            (A.RECORD_AND_SAVE, A.NONE): [stop, ready],
            (A.RECORD_AND_SAVE, A.WARMUP): [stop, ready, prep],
            (A.RECORD_AND_SAVE, A.RECORD): [stop, ready, prep, start],
            (A.RECORD_AND_SAVE, A.RECORD_AND_SAVE): [stop, ready, prep, start],
            (A.WARMUP, None): [start, stop], (A.RECORD, None): [stop, ready],
            (A.RECORD_AND_SAVE, None): [stop, ready], (A.NONE, None): [],
        }

    def _transit(self, prev, cur):
        for action in self.action_map.get((prev, cur), ()):
            action(self)

    # -- public API --
    def start(self):
        if not self.enabled:
            return
        if _lifecycle.ending is not None:  # another thread is ending the process's windows
            _lifecycle.park_if_ending()
        if self._in_other_process():
            self._forget_in_child()
        if self._started:
            raise _C.WindowStateError("cprof.profile: start() called twice; call stop() first")
        self._started = True
        if self._glue is None:  # the process's one-time capture setup, before a window opens
            _glue.prewarm(self.with_stack, self.with_modules, self.record_shapes,
                          self.record_ops)
        try:
            depth = _lifecycle.enter_critical(self)
            try:
                self._pid = os.getpid()
                self._forks = _lifecycle.forks
                # registered (signal handlers, exit hooks: ~25-40 us) before the window opens:
                # with with_stack, what runs after the tracer starts is self time of the
                # user's frame holding the `with` (decision 168)
                _lifecycle.opened(self, self._lifecycle_owner and self._lifecycle_owner() or self)
                try:
                    self._run_transitions(ProfilerAction.NONE, self.current_action)
                except BaseException:
                    self._started = False
                    try:
                        self._abort_window()
                    finally:
                        _lifecycle.closed(self)
                    raise
                self._enter_step()
            finally:
                _lifecycle.leave_critical(depth, self)
        except BaseException as err:
            # interrupted (Ctrl-C) once the window was open: a with block does not call
            # __exit__ when __enter__ raised, so it is closed here, never left open to refuse
            # every later window
            self._salvage(err)
            raise

    def stop(self):
        """Stops profiling (the last window closes; on_trace_ready runs if it recorded). Called
        while a KeyboardInterrupt, SystemExit or GeneratorExit is being handled (in a finally:
        or except: block), the window is marked partial with that exception's name, as the
        with-block marks any exception. In a process forked from the one that started it:
        nothing (the window is the parent's)."""
        if not self.enabled:
            return
        if _lifecycle.ending is not None:  # another thread is ending the process's windows
            _lifecycle.park_if_ending()
        if self._in_other_process():
            self._forget_in_child()
            return
        if self._started and self._window is not None and self._window_exc is None:
            exc = sys.exc_info()[1]
            if exc is not None and not isinstance(exc, Exception) and not _clean_exit(exc):
                self._window_exc = type(exc)
        self._stop()

    def _stop(self):
        if not self._started:
            raise _C.WindowStateError(
                "cprof.profile: stop() without start(); use `with cprof.profile(...)` or call "
                "start() first")
        depth = _lifecycle.enter_critical(self)
        try:
            self._exit_step()
            self._started = False
            try:
                self._run_transitions(self.current_action, None)
            finally:
                self._uninstall_glue()
                _lifecycle.closed(self)
        finally:
            _lifecycle.leave_critical(depth, self)
            _lifecycle.leave_left_over(self)  # a step's, interrupted as it left (window closed)
        if not self.traces_ready and self._window_exc is None and sys.exc_info()[1] is None:
            self._say_no_trace()

    def _say_no_trace(self):
        """Stopped with a schedule that has not yet made a trace ready (a loop shorter than
        the schedule: seed 002's 3 epochs for wait=1, warmup=1, active=3): torch.profiler
        writes nothing and says nothing; this says how many steps the first trace needs."""
        p = _schedule_params(self.schedule)
        if p is not None:
            need = min_steps(p["wait"], p["warmup"], p["active"], 1, p["skip_first"],
                             p["skip_first_wait"])
            why = (f"the schedule's first trace needs {need} prof.step() calls "
                   f"(cprof.min_steps(wait={p['wait']}, warmup={p['warmup']}, "
                   f"active={p['active']}, repeat=1, skip_first={p['skip_first']}"
                   + (f", skip_first_wait={p['skip_first_wait']}" if p["skip_first_wait"]
                      else "") + ")); run more steps or shorten wait / warmup / skip_first")
        else:
            why = "the schedule never reached RECORD_AND_SAVE (a trace is ready after it)"
        _warn.warn(f"cprof.profile: stopped after {self.step_num} step(s) with no trace "
                   f"recorded: {why}", UserWarning)

    # -- process lifecycle (_lifecycle.py) --
    def _in_other_process(self):
        """True in a child forked after start() (os.fork runs _lifecycle's hook: a counter
        compare is cheaper than os.getpid(), a system call, on every step)."""
        return self._pid is not None and self._forks != _lifecycle.forks

    def _forget_in_child(self):
        """In a child forked while this profiler ran: drop the parent's window without
        closing or writing it (the child's store forgot it at fork) and remove the captures,
        so the child runs unprofiled; a later start() opens a window of the child's own."""
        if self._started:
            _lifecycle.debug("cprof: profiler started by process %s: stopped without writing "
                             "in forked process %d", self._pid, os.getpid())
        self._forget()

    def _forget(self):
        g, self._glue = self._glue, None
        if g is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g.remove()
        if self.profile_memory and sys.modules.get("torch") is not None:
            from . import _ops
            _ops.state_pop(_ops.MEMORY)  # the allocation reports of the forgotten window
        self._window = None
        self._step_range = None  # its (unrecorded) slot stays on this thread's stack
        self._window_exc = None
        self._started = False

    def _lifecycle_end(self, reason):
        """SIGTERM or interpreter exit while started: stop, the window marked partial with
        end reason."""
        if not self._lost_window():
            # the program was interrupted inside the step: the window's stop closes (truncates)
            # it with every range still open, all marked the same way
            self._step_range = None
            self.__exit__(reason, None, None)
            w = self._last
            if (self.on_trace_ready is None and reason != "abandoned" and w is not None
                    and w.snapshot is not None):
                # the process is ending and nothing will export it: said, not silent
                warnings.warn(
                    f"cprof: a cprof.profile window was still open at {reason}, with no "
                    f"on_trace_ready: its {w.snapshot.ranges} ranges end with the process, "
                    "unwritten; pass on_trace_ready (cprof.tensorboard_trace_handler(dir)) or "
                    "call stop() and export_chrome_trace() before the program ends",
                    RuntimeWarning, stacklevel=2)

    def _lost_window(self):
        """True (and the profiler reset) when its window was closed behind its back (a raw
        _C.stop()): there is nothing left to end or write."""
        if self._window is None or _C.active():
            return False
        _lifecycle.debug("cprof: the profiler's window was closed by someone else; nothing to "
                         "write")
        self._forget()
        _lifecycle.closed(self)
        return True

    def step(self):
        """Ends step N and starts step N+1 (each a ProfilerStep#N range when a schedule is
        given); runs the schedule's transition, writing a trace when a cycle completes."""
        if not self.enabled:
            return
        if _lifecycle.ending is not None:  # another thread is ending the process's windows
            _lifecycle.park_if_ending()
        if self._forks != _lifecycle.forks and self._pid is not None:  # _in_other_process
            self._forget_in_child()
            return
        if not self._started:
            self._step_outside()
            return
        self._exit_step()
        prev = self.current_action
        action = as_action(self.schedule(self.step_num + 1))  # validated before any change
        # a SIGTERM waits while a window opens, restarts or closes; not on the steps whose
        # transition is empty (same action, except RECORD_AND_SAVE): ~0.15 us saved a step
        critical = prev is not action or action is ProfilerAction.RECORD_AND_SAVE
        if critical:
            depth = _lifecycle.enter_critical(self)
        try:
            self.step_num += 1
            self.current_action = action
            try:
                self._run_transitions(prev, self.current_action)
            except BaseException:
                if self._window is None and action is not ProfilerAction.NONE:
                    # the window this step was to open did not open (strict and CUPTI held
                    # elsewhere, say): no action is under way, so stop() does not try to
                    # open it again on the way out, and the next step tries afresh
                    self.current_action = ProfilerAction.NONE
                raise
            finally:
                if self._daemon_steps:
                    _step_tracker().increment_step(_STEP_REQUESTER)
                self._enter_step()
        finally:
            if critical:
                _lifecycle.leave_critical(depth, self)

    def _step_outside(self):
        """step() on a profile that is not running: bad input (issue 5), a StepOutsideWindowError,
        except where the step can record nothing whatever happens next. Megatron-LM's loop
        (and NeMo's) stops the profiler at --profile-step-end and calls prof.step() every
        iteration after it, which torch.profiler's step() accepts: so after a stop(), once
        a cprof.schedule with repeat > 0 has run all its cycles, a step counts and does nothing
        else (decision 169). Anywhere else (never started, no schedule, a schedule that cycles
        forever or that cprof cannot see the end of) it stays the error."""
        if _lifecycle.ending is not None:
            # another thread closed the window as the process ends (os._exit, exec) after this
            # step looked: wait for the end, as a step that looked later does
            _lifecycle.park_if_ending()
        if self._transitions and _schedule_finished(self.schedule, self.step_num + 1):
            self.step_num += 1
            self.current_action = ProfilerAction.NONE
            return
        raise StepOutsideWindowError(
            "cprof.profile: step() outside the profiler: call it inside `with "
            "cprof.profile(...)` (or between start() and stop())")

    def __enter__(self):
        self.start()
        return self

    def __getattr__(self, name):
        # only for names not found otherwise: torch.profiler.profile's members cprof has no
        # counterpart for say so, and what to use instead
        hint = _TORCH_PROFILE_ONLY.get(name)
        if hint is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"cprof.profile has no {name!r} (torch.profiler.profile's): {hint}")

    def _salvage(self, err):
        """A KeyboardInterrupt (or other exception) that landed inside start / stop left the
        window open or the capture hooks installed: close it now, marked partial with err, and
        keep it as the last window (export_chrome_trace / ProfilerContext write it), so the
        next window can open. on_trace_ready is not called: the stop was interrupted."""
        _lifecycle.leave_left_over(self)  # the interrupt may have landed as it was left
        if self._window is None and self._glue is None:
            return
        try:
            if self._window is not None and self._window_exc is None:
                self._window_exc = type(err)
            self._started = False
            self._stop_trace()
        except BaseException as again:  # noqa: BLE001 - err is the exception raised
            warnings.warn(f"cprof.profile: closing the interrupted window failed: {again!r}",
                          RuntimeWarning, stacklevel=3)
        finally:
            try:
                self._uninstall_glue()
            finally:
                self._window = None
                _lifecycle.closed(self)

    def _exit(self, exc_type, exc, tb):
        if not self.enabled:
            return False
        if self._in_other_process():
            self._forget_in_child()
            return False
        if not self._started:
            return False
        if self._window is not None and exc_type is not None and not _clean_exit(exc):
            self._window_exc = exc_type
        try:
            try:
                self._stop()
            finally:
                tracker = _step_tracker()
                if tracker is not None:
                    tracker.erase_step_count(_STEP_REQUESTER)
                et = self.execution_trace_observer
                if et is not None:  # torch's observer writes its file here (as torch's exit)
                    et.cleanup()
        except Exception:
            if exc_type is None:
                raise
            warnings.warn("cprof.profile: stopping after an exception failed; the exception "
                          "in the profiled code is reported", RuntimeWarning, stacklevel=2)
        return False

    # called from C (py_guard.c): an interrupt (Ctrl-C) at its very entry, or anywhere before
    # the window closed, is followed by _salvage, so no window is left open
    __exit__ = _C.guarded_exit(_exit, lambda self, err: self._salvage(err))

    def _run_transitions(self, prev, cur):
        """Runs every action of the transition; an on_trace_ready error is raised after all
        of them, so the profiler stays consistent (the next window opens) and the window's
        data stays available for export_chrome_trace."""
        self._pending_error = None
        self._skip_ready = False
        self._transitions += 1
        self._transit(prev, cur)
        err, self._pending_error = self._pending_error, None
        if err is not None:
            raise err

    # -- steps --
    def _enter_step(self):
        if self.record_steps:
            if self._mem_sampling:  # the memory track's exact value at each step's start
                _C.mem_sampler_sample()
            # closed by identity (a user's range opened in the step may still be open)
            self._step_range = _C.open_range(f"ProfilerStep#{self.step_num}", _C.CAT_STEP)
            et = self.execution_trace_observer
            if et is not None and _et.running(et):
                self._et_step = _et.step_enter(f"ProfilerStep#{self.step_num}")

    def _exit_step(self):
        et_step, self._et_step = self._et_step, None
        if et_step is not None:
            _et.step_exit(et_step)
        token, self._step_range = self._step_range, None
        if token is not None:
            try:
                _C.close_range(token)
            except _C.NoOpenRangeError:
                warnings.warn("cprof.profile: the ProfilerStep range was closed by someone "
                              "else (an unbalanced cprof.pop?)", RuntimeWarning, stacklevel=3)

    # -- actions --
    def _config(self):
        return {
            "api": self._api,
            "activities": self.activities,
            "collected_activities": self.collected_activities,
            "record_shapes": self.record_shapes,
            "with_flops": self.with_flops,
            "profile_memory": self.profile_memory,
            "with_stack": self.with_stack,
            "with_modules": self.with_modules,
            "min_duration_us": self.min_duration_us,
            "record_ops": self.record_ops,
            "schedule": getattr(self.schedule, "params", None) if self.record_steps else None,
            "step": self.step_num,
        }

    def _prepare_trace(self):
        if self._window is not None:
            return
        self._release_last()
        if self.collected_activities is None:
            self.collected_activities, self._notes = resolve_gpu(self.activities)
        gpu = "GPU" in self.collected_activities
        w = Window(self._config(), self.buffer_size_mb, gpu=gpu, memory=self.profile_memory,
                   gpu_buffer_mb=self.gpu_buffer_mb,
                   strict=self.strict, nvtx=not _glue.python_nvtx_installed())
        w.notes.update(self._notes)
        w.trace_id = self._new_trace_id()
        w.cpu_off = "CPU" in self._toggled_off
        w.cuda_off_since = 0 if "GPU" in self._toggled_off else None
        w.start()
        self._window = w
        self._warmup_window = True
        self._prepared_at = self._transitions
        try:
            # the warning may raise (a warnings filter of "error"): the window, open by now,
            # is then closed with the rest, not left open to refuse every later one
            if gpu and not w.gpu:  # CUPTI refused (busy with strict=False, no permission, ...)
                self._gpu_refused(w)
            self._install_glue()
        except BaseException:
            self._abort_window()
            raise

    def _gpu_refused(self, w):
        """Window w could not collect GPU activity (at its start or its restart after warmup):
        its config says CPU only, and the profiler warns (decision 147)."""
        w.config["collected_activities"] = [a for a in self.collected_activities if a != "GPU"]
        if w.gpu_failure is not None:  # not transient: CPU only from now on, one warning
            self.collected_activities = w.config["collected_activities"]
            self._notes = dict(self._notes, gpu_unavailable=w.gpu_failure)
            _warn.warn(f"cprof: GPU activity was asked for but is not collected: "
                       f"{w.gpu_failure.removeprefix('cprof: ')}. Recording CPU activity "
                       "only.", GpuUnavailableWarning)
        elif w.gpu_refused is not None:  # may pass: this window only, the next asks again
            _warn.warn(f"cprof: GPU activity is not collected in this window: "
                       f"{w.gpu_refused.removeprefix('cprof: ')}. This window records CPU "
                       "activity only; the next window (schedule cycle) asks CUPTI again.",
                       GpuUnavailableWarning)

    def _abort_window(self):
        """Closes a window that could not be set up (nothing of value was collected)."""
        self._uninstall_glue()
        w, self._window = self._window, None
        if w is not None:
            w.stop()
            w.release()

    def _start_trace(self):
        if self._window is None:
            self._prepare_trace()
        elif self._warmup_window and self._prepared_at != self._transitions:
            # warmup collected into this window: discard it, keep collection running (not
            # when it was prepared in this very transition: nothing to discard; a stop() in
            # the step that began the warmup has that step's work to discard)
            w = self._window
            had_gpu = w.gpu
            w.restart()
            w.config = self._config()
            if had_gpu and not w.gpu:  # CUPTI refused the restart: as at a start
                self._gpu_refused(w)
            elif not w.gpu:
                w.config["collected_activities"] = [
                    a for a in self.collected_activities if a != "GPU"]
        self._warmup_window = False
        self._window.config["first_step"] = self.step_num
        _glue.memory_begin(self)
        self._et_call("start")

    def _stop_trace(self):
        self._et_call("stop")
        w = self._window
        if w is None:
            return
        self._uninstall_glue()
        # self._window is cleared only once the window is stopped: a stop interrupted (Ctrl-C)
        # before it leaves it for _salvage to finish
        if w.snapshot is None:
            self.memory = _glue.memory_end(self)
            w.config["last_step"] = self.step_num
            # the window's span ends before the CUDA memory snapshot (seconds, with stacks to
            # symbolise): that is cprof's work, not the program's
            w.stop(self._window_exc,
                   end_ns=self.memory.pop("end_ns", None) if self.memory else None)
        self._window_exc = None
        self._window = None
        if self.memory is not None:
            w.notes["memory"] = self.memory.get("summary")
            w.mem_samples = self.memory.pop("samples", None)
            w.mem_heap = self.memory.pop("samples_heap", False)
            w.mem_events = self.memory.pop("events", None)
        if self._unsaved is not None and w.config.get("first_step", -1) >= self.step_num:
            # stopped in the step it started (an exception out of step() right after the
            # next cycle opened, as when on_trace_ready raised with wait=0): it holds no
            # finished step, and the window whose on_trace_ready raised stays the one to
            # export; on_trace_ready is not called for it (it would get that same window
            # again: a handler writing files would write it twice)
            w.release()
            self._skip_ready = True
            return
        self._release_unsaved()
        self._release_last()
        self._last = w
        if self.acc_events:  # parsed now: the window's data goes when the next one opens
            from ._results import events_of
            self._acc.extend(events_of(w, first_id=len(self._acc)))
            self._acc_list = None

    def _et_call(self, method):
        """The execution trace observer's start() / stop(): an error is reported after the
        transition, as on_trace_ready's is; cprof's window is unaffected."""
        et = self.execution_trace_observer
        if et is None:
            return
        try:
            getattr(et, method)()
        except Exception as err:
            _add_note(err, f"cprof: the execution_trace_observer's {method}() raised; cprof's "
                           "own window and trace are unaffected")
            _warn.warn(f"cprof: execution_trace_observer.{method}() raised "
                       f"{type(err).__name__}: {err}")
            if self._pending_error is None:
                self._pending_error = err

    def _trace_ready(self):
        if self._skip_ready:
            self._skip_ready = False
            return
        self.traces_ready += 1
        if self.on_trace_ready is None:
            return
        try:
            self.on_trace_ready(self)
        except Exception as err:  # reported after the transition; the data is kept
            said = "kept in memory" in str(err)  # a TraceWriteError says it already
            if not said:
                _add_note(err, "cprof: on_trace_ready raised; this window's trace is kept in "
                               "memory: call prof.export_chrome_trace(path) to write it (until "
                               "the next window opens)")
            _warn.warn(f"cprof: on_trace_ready raised {type(err).__name__}: {err}"
                       + ("" if said else "; the trace is kept for export_chrome_trace"))
            self._pending_error = err
            if self._last is not None:
                self._last.unsaved = True

    def _install_glue(self):
        if self._glue is None:
            self._glue = _glue.install(with_stack=self.with_stack,
                                       with_modules=self.with_modules,
                                       record_shapes=self.record_shapes,
                                       c_calls=self.c_calls,
                                       min_duration_us=self.min_duration_us,
                                       ops=self.record_ops,
                                       ops_asked=self._ops_asked)

    def _uninstall_glue(self):
        g = self._glue  # kept until removed: an interrupted removal is finished by a retry
        if g is not None:
            names = g.module_names()
            if names and self._window is not None and module_ranges(self._window.config):
                # the trace lists module range names so cprof report can tell them from
                # user ranges (they are user_annotation ranges named by module path)
                self._window.notes["modules"] = sorted(names)
            regions = g.regions_note()
            if regions is not None and self._window is not None:
                self._window.notes["compiled_regions"] = regions
            ops = g.ops_note()
            if ops is not None and self._window is not None:
                self._window.notes["ops"] = ops
            if g.stack_why is not None and self._window is not None:
                self._window.notes["with_stack_unavailable"] = g.stack_why
            g.remove()
            self._glue = None
            if g.stack_replaced and self._window is not None:
                self._window.stack_replaced(g.stack_replaced)
            if g.stack_too_deep and self._window is not None:
                self._window.dropped_extra["python_calls_too_deep"] = g.stack_too_deep
                _warn.warn(
                    f"cprof: with_stack: {g.stack_too_deep:,} Python calls were not recorded: "
                    "they ran deeper than 65,535 nested ranges on one thread (deep recursion); "
                    "ranges opened at that depth show under the deepest recorded call. The "
                    "trace's metadata counts them (dropped.python_calls_too_deep)")

    def _release_last(self):
        w, self._last = self._last, None
        if w is not None and getattr(w, "unsaved", False):
            self._release_unsaved()
            self._unsaved = w  # its on_trace_ready raised: keep it for export_chrome_trace
        elif w is not None:
            w.release()

    def _release_unsaved(self):
        w, self._unsaved = self._unsaved, None
        if w is not None:
            w.release()

    # -- results --
    def _recording_only(self):
        """A window records and no finished one is held (released when it opened): torch's
        events() and key_averages() give an empty list then, as a loop logging them every
        few steps expects."""
        return (self._window is not None
                and (self._last is None or self._last.snapshot is None)
                and (self._unsaved is None or self._unsaved.snapshot is None))

    def _data(self, what):
        if self._last is not None and self._last.snapshot is not None:
            return self._last
        if self._unsaved is not None and self._unsaved.snapshot is not None:
            return self._unsaved
        if self._window is not None:
            raise _C.WindowStateError(
                f"cprof.profile: {what} needs a finished window; the profiler is still "
                "recording (call it after stop() / the with block, or from on_trace_ready)")
        why = getattr(self, "_disabled_why", None) or "this rank is not profiled: see ranks="
        raise NoResultsError(
            f"cprof.profile: nothing to {what}: no window has finished"
            + (f" ({why})" if not self.enabled else ""))

    def export_chrome_trace(self, path, use_python_export=False):
        """Writes the last finished window as a Kineto-compatible Chrome trace; gzip when the
        path ends in .gz. An existing file at path is replaced (as torch.profiler does).
        Returns the path written. use_python_export is torch's switch between its C++ and
        Python writers (torch.profiler.tensorboard_trace_handler passes it): cprof has one
        writer, in C, and takes the argument so torch's handler works unchanged."""
        w = self._data("export")
        given = os.path.expanduser(os.fspath(path))  # "~/t.json", as output_dir= is taken
        path = write_target(given)
        if not is_stream(path):  # /dev/null: written into, its directory need not be writable
            check_output_dir(os.path.dirname(path) or ".", "pass export_chrome_trace a path in "
                             "a directory you can write to (the trace is kept until then)")
        suffix = ".gz" if path.endswith(".gz") else ""
        top = self._top_members(w)
        top.update(self._trace_metadata)
        result = w.write(path[: len(path) - len(suffix)], suffix, gzip=bool(suffix),
                         replace=True, extra=self._export_extra(w),
                         retry="export_chrome_trace(path)", top=top)
        if result is None:  # a forked child: the window is the parent's to write
            return None
        self.last_export = result
        return given if path != given else result.path

    def _export_extra(self, w):
        extra = {"steps": [w.config.get("first_step"), w.config.get("last_step")]}
        return extra

    def export_memory_snapshot(self, path):
        """Writes the CUDA memory history of the last window (profile_memory with CUDA) as a
        pickle for pytorch.org/memory_viz."""
        if not self.memory or self.memory.get("snapshot") is None:
            raise _C.WindowStateError(
                "cprof.profile: no memory snapshot: it needs profile_memory=True (or MEM) and "
                "a program that uses CUDA through torch")
        return _glue.write_memory_snapshot(
            self.memory, os.fspath(path),
            retry="the snapshot is kept in memory: call export_memory_snapshot(path) with "
                  "{where} (until the next window)")

    def events(self):
        """Every event of the last finished window: CPU ranges and GPU activity, as
        cprof.ProfilerEvent objects (name, category, device_type, thread, start_us, end_us,
        duration_us, ...). Empty while a window records (as torch's)."""
        from ._results import EventList, events_of
        if self.acc_events and self._acc:
            if self._acc_list is None:  # one list until a window is added, as torch's
                self._acc_list = EventList(self._acc)
                self._acc_list.profile_memory = bool(self.profile_memory)
                self._acc_list.accumulated = True  # every window's: exported as its own events
            out = self._acc_list
        elif self._recording_only():
            out = EventList([])
        else:
            w = self._data("list events")
            out = events_of(w)
            out.source_window = w  # its window, while the profiler still holds it
        out.source = self  # EventList.export_chrome_trace / export_stacks write its window
        return out

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        """Per-name averages of the last finished window, with CPU and CUDA self/total times;
        .table(sort_by=..., row_limit=...) prints them as torch.profiler does.
        group_by_input_shape (record_shapes) and group_by_stack_n (with_stack) split the rows
        by input shapes and by the innermost Python frames, as torch.profiler's do.
        group_by_overload_name is accepted: cprof's operator names carry no overload (torch's
        ITT hooks pass "aten::add", not its overload), so rows are the same either way.
        Empty while a window records (as torch's)."""
        from ._results import EventList, key_averages
        if self.acc_events and self._acc:
            return EventList(self._acc).key_averages(group_by_input_shape, group_by_stack_n)
        if self._recording_only():
            return EventList([]).key_averages(group_by_input_shape, group_by_stack_n)
        return key_averages(self._data("average"), group_by_input_shape=group_by_input_shape,
                            group_by_stack_n=group_by_stack_n)

    @property
    def profiler(self):
        """torch.profiler.profile's `profiler` (its torch.autograd.profiler.profile): None
        before the first start(), then a view with that object's reading API
        (`function_events`, `key_averages()`, `total_average()`, `self_cpu_time_total`,
        `table()`, `export_chrome_trace()`) over this profiler's last finished window."""
        return _AutogradView(self) if self._transitions else None

    def summary(self):
        """Per-name CPU range aggregates of the last finished window (computed in C)."""
        return self._data("summarise").snapshot.summary()

    # -- trace id and user metadata (torch.profiler's) --
    def set_custom_trace_id_callback(self, callback):
        """Sets the trace id generator, called once per cycle (when a window opens); None
        goes back to random ids (32 hex digits, as torch.profiler makes them)."""
        if callback is not None and not callable(callback):
            raise TypeError("cprof.profile: custom_trace_id_callback must be a callable "
                            "returning a string, or None")
        self.custom_trace_id_callback = callback

    def get_trace_id(self):
        """The current cycle's trace id (written as the trace's top-level "trace_id"), or None
        before the first window opened."""
        return self._trace_id

    def _new_trace_id(self):
        cb = self.custom_trace_id_callback
        if cb is not None:
            try:
                tid = cb()
            except Exception as err:  # a bad callback must not cost the window
                warnings.warn(f"cprof.profile: custom_trace_id_callback raised "
                              f"{type(err).__name__}: {err}; using a random trace id",
                              RuntimeWarning, stacklevel=5)
            else:
                self._trace_id = tid if isinstance(tid, str) else str(tid)
                return self._trace_id
        self._trace_id = f"{uuid.uuid4().int:032X}"
        return self._trace_id

    def _top_members(self, w):
        """The top-level members torch.profiler writes besides Kineto's own: the trace id, the
        options that were on ("1", as its start_trace adds them) and the host name."""
        top = {"trace_id": json.dumps(w.trace_id)}  # set when _prepare_trace made w
        for key, on in (("profile_memory", self.profile_memory), ("with_stack", self.with_stack),
                        ("record_shapes", self.record_shapes),
                        ("with_modules", self.with_modules), ("with_flops", self.with_flops)):
            if on:
                top[key] = "1"
        top["host_name"] = json.dumps(socket.gethostname())
        return top

    _RESERVED_KEYS = frozenset(("schemaVersion", "deviceProperties", "distributedInfo",
                                "displayTimeUnit", "baseTimeNanoseconds", "traceEvents",
                                "traceName", "cprof", "trace_id"))

    def _check_metadata_key(self, what, key):
        if not isinstance(key, str):
            raise TypeError(f"cprof.profile.{what}: the key must be a str, not "
                            f"{type(key).__name__}")
        if key in self._RESERVED_KEYS:
            raise ValueError(f"cprof.profile.{what}: {key!r} is a key cprof writes itself; "
                             "choose another name")

    def add_metadata(self, key, value):
        """Adds a top-level member key: value (a string) to every trace this profiler
        exports from now on, as torch.profiler's add_metadata does."""
        self._check_metadata_key("add_metadata", key)
        if not isinstance(value, str):
            raise TypeError(f"cprof.profile.add_metadata: the value must be a str, not "
                            f"{type(value).__name__} (use add_metadata_json for JSON values)")
        self._trace_metadata[key] = json.dumps(value)

    def add_metadata_json(self, key, value):
        """Adds a top-level member key: value, where value is JSON text (an object, a list,
        a number...), to every trace this profiler exports from now on. Text that is not valid
        JSON is refused here (torch.profiler writes it and leaves an unreadable trace)."""
        self._add_json("add_metadata_json", key, value)

    def _add_json(self, _what, key, value):
        self._check_metadata_key(_what, key)
        if not isinstance(value, str):
            raise TypeError(f"cprof.profile.{_what}: the value must be JSON text "
                            f"(a str), not {type(value).__name__}; json.dumps it first")
        try:
            parsed = json.loads(value)
        except ValueError as err:
            raise ValueError(f"cprof.profile.{_what}: the value for {key!r} is not "
                             f"valid JSON ({err}); nothing was added") from None
        self._trace_metadata[key] = json.dumps(clean_text(parsed))

    def preset_metadata_json(self, key, value):
        """torch.profiler's name for metadata given before the profiler starts: key: value
        (JSON text) in every trace this profiler exports, as add_metadata_json, which may
        be called at any time with cprof."""
        self._add_json("preset_metadata_json", key, value)

    _STACK_METRICS = ("self_cpu_time_total", "self_cuda_time_total", "self_xpu_time_total",
                      "self_privateuse1_time_total")

    def export_stacks(self, path, metric="self_cpu_time_total"):
        """Writes the last finished window's Python stacks in the collapsed format of
        flamegraph.pl and speedscope: one line per event, its enclosing Python frames (outermost
        first) and the event itself, separated by ";", then its self time in whole
        microseconds (metric "self_cpu_time_total") or the GPU time it launched
        ("self_cuda_time_total"). Needs with_stack. Returns the path."""
        if metric not in self._STACK_METRICS:
            raise ValueError(f"metric should be one of: {list(self._STACK_METRICS)}")
        w = self._data("export stacks")
        if not w.config.get("with_stack"):
            # torch's AssertionError; nothing is written, the window's data stays
            raise StacksUnavailableError(
                "cprof.profile.export_stacks() requires with_stack=True: this window was "
                "recorded without it, so it has no Python stacks; profile with "
                "with_stack=True (the window's other exports still work)")
        from ._results import export_stacks
        path = os.path.expanduser(os.fspath(path))
        if not is_stream(path):
            check_output_dir(os.path.dirname(path) or ".", "pass export_stacks a path in a "
                             "directory you can write to")
        export_stacks(w, path, "cpu" if metric == "self_cpu_time_total" else "device")
        return path

    def export_memory_timeline(self, path, device=None):
        """Not available: torch.profiler builds this from its own operator graph. cprof's
        memory views are the trace's memory counter track (profile_memory=True) and the CUDA
        memory snapshot (export_memory_snapshot, for pytorch.org/memory_viz)."""
        raise NotImplementedError(
            "cprof.profile has no export_memory_timeline (torch.profiler deprecates it for the "
            "CUDA memory history); with profile_memory=True the trace has a memory counter "
            "track and [memory] events, and export_memory_snapshot(path) writes the CUDA "
            "memory history for pytorch.org/memory_viz")

    def toggle_collection_dynamic(self, enable, activities):
        """torch.profiler's: stops (enable=False) or resumes (True) collecting activities from
        now on, inside a window. CPU: ranges of every kind (operators, record_function,
        modules, Python functions) opened while off are not recorded; ranges already open end
        normally, and ProfilerStep ranges are always kept. CUDA: GPU work asked for while off
        (kernels, copies, sets, the runtime calls that launched them, syncs, NVTX ranges) is
        left out of the window's results, judged by its launch call's time; CUPTI's memory
        records are kept. The counts left out are in the trace's metadata.
        The setting stays until toggled back, across the schedule's windows; called with no
        window open it applies to the next one. MEM cannot be toggled (a warning; ignored)."""
        if isinstance(enable, str) or not isinstance(enable, (bool, int)):
            raise TypeError(f"cprof.profile.toggle_collection_dynamic: enable must be True or "
                            f"False, got {enable!r}")
        if isinstance(activities, (str, enum.Enum)) or not hasattr(activities, "__iter__"):
            activities = [activities]
        activities = list(activities)
        if not activities:
            return  # torch.profiler: nothing to toggle
        acts = normalize_activities(activities)
        if "MEM" in acts:
            warnings.warn("cprof.profile.toggle_collection_dynamic: MEM cannot be toggled "
                          "(CPU and CUDA can, as in torch.profiler); ignored", RuntimeWarning,
                          stacklevel=2)
        cpu, cuda = "CPU" in acts, "GPU" in acts
        for name, on in (("CPU", cpu), ("GPU", cuda)):
            if on:
                (self._toggled_off.discard if enable else self._toggled_off.add)(name)
        if (cpu or cuda) and self._window is not None and not self._in_other_process():
            self._window.toggle(bool(enable), cpu=cpu, cuda=cuda)


def supported_activities():
    """The activities cprof can trace in this process, as torch.profiler's function answers:
    CPU always, CUDA when a GPU, its driver and CUPTI are usable (cprof.features() says why
    not). MEM (profile_memory) is always available but not listed, as torch lists no memory
    activity: `profile(activities=supported_activities())` traces what torch's would."""
    acts = {ProfilerActivity.CPU}
    if gpu_unavailable_reason() is None:
        acts.add(ProfilerActivity.CUDA)
    return acts


def kineto_available():
    """True: torch.profiler's question (can it write Kineto traces?) has one answer for cprof,
    whose profile writes Kineto-format traces in every build. Whether GPU activity can be
    collected here is supported_activities()'s answer (and cprof.features()' why not)."""
    return True


def _check_worker_name(name):
    """name, or a ValueError: it starts every trace file name the handler writes."""
    if name in (".", "..") or "/" in name or any(c < " " or c == "\x7f" for c in name):
        raise ValueError(f"cprof.tensorboard_trace_handler: worker_name must be a file name "
                         f"(without '/' or control characters), got {name!r}")
    try:
        n = len(os.fsencode(name))
    except UnicodeError:
        raise ValueError(f"cprof.tensorboard_trace_handler: worker_name {name!r} cannot be a "
                         "file name on this system; pass another") from None
    # {worker}.{time_ns: 19 digits}.pt.trace.json.gz, and -N when the name is taken, in 255
    if n > 200:
        raise ValueError(f"cprof.tensorboard_trace_handler: worker_name is {n} bytes; file "
                         "names are limited to 255 bytes with the .{time_ns}.pt.trace.json.gz "
                         "suffix, so keep it under 200")
    return name


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False,
                              use_python_export=False):
    """on_trace_ready callback writing ``{dir_name}/{worker}.{time_ns}.pt.trace.json[.gz]``
    (worker defaults to ``{hostname}_{pid}``, as torch's; each rank's trace carries its rank
    in ``distributedInfo``), the layout TensorBoard's profiler plugin and HTA read. The directory is created (and checked) now, so a bad one fails before any
    profiling. use_python_export is torch's choice of its exporter, accepted: cprof has one
    writer, in C."""
    dir_name = os.path.expanduser(os.fspath(dir_name))
    fix = "pass tensorboard_trace_handler a directory you can write to"
    check_output_dir(dir_name, fix)
    if worker_name:  # checked now, as the directory: not after a whole window was profiled
        worker_name = _check_worker_name(str(worker_name))

    def handler_fn(prof):
        nonlocal worker_name
        check_output_dir(dir_name, fix + " (the window's trace is kept: call "
                         "prof.export_chrome_trace(path))")
        if not worker_name:  # torch's default, the same under torchrun
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json"
        if use_gzip:
            file_name += ".gz"
        path = prof.export_chrome_trace(os.path.join(dir_name, file_name))
        if getattr(prof, "memory", None) and prof.memory.get("snapshot") is not None:
            stem = path[: path.index(".pt.trace.json")]
            prof.export_memory_snapshot(stem + ".memory.pickle")
        return path

    handler_fn.dir_name = dir_name
    return handler_fn


class _AutogradView:
    """`prof.profiler` of a cprof.profile: the reading side of torch.autograd.profiler.profile,
    for code written against it (`prof.profiler.function_events`). function_events is None
    while no window has finished, as torch's is before stop."""

    __slots__ = ("_prof",)

    def __init__(self, prof):
        self._prof = prof

    @property
    def function_events(self):
        if self._prof._recording_only():
            return None  # torch's autograd profile has none until its window finished
        try:
            return self._prof.events()
        except _C.WindowStateError:
            return None

    def _events(self):
        ev = self.function_events
        if ev is None:
            raise NoResultsError("cprof: prof.profiler has no results yet: the profiler "
                                 "has not finished a window (read it after stop())")
        return ev

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        return self._prof.key_averages(group_by_input_shape, group_by_stack_n,
                                       group_by_overload_name)

    def total_average(self):
        return self._events().total_average()

    @property
    def self_cpu_time_total(self):
        return self._events().self_cpu_time_total

    def table(self, *args, **kwargs):
        return self._events().table(*args, **kwargs)

    def export_chrome_trace(self, path):
        return self._prof.export_chrome_trace(path)

    def __getattr__(self, name):
        raise AttributeError(
            f"cprof: prof.profiler.{name} is torch.autograd.profiler internals that cprof does "
            "not have; function_events, key_averages(), total_average(), self_cpu_time_total, "
            "table() and export_chrome_trace() are offered (or use prof.events())")
