"""The run/step Profiler of seed 003: runs of steps timed with CUDA events (or the host clock),
model / engine bucket timers, and summary.json + report.md.

The timing hot path (bucket timers, step records, statistics) is in cprof._C
(cuda_timers.c, runstats.c); this module holds the run lifecycle, gating, hooks and the
presentation of the numbers."""
import collections.abc
import dataclasses
import operator
import datetime
import json
import math
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import List, Optional

from . import _C
from ._glue import create_temp
from ._dist import rank_info
from ._window import _capturing, check_output_dir, flag

MODEL_BUCKET_ORDER = [
    "embed",
    "attn.qkv_proj", "attn.qkv_proj.lora",
    "attn.qk_norm",
    "attn.compute",  # seed 003's order: qk_norm then compute; rope after them
    "attn.rope",
    "attn.o_proj", "attn.o_proj.lora",
    "mlp.gate_up_proj", "mlp.gate_up_proj.lora",
    "mlp.silu_and_mul",
    "mlp.down_proj", "mlp.down_proj.lora",
    "norm",
    "lm_head",
    "communication",
    "communication.all_reduce", "communication.reduce_scatter_tensor",
    "communication.all_gather", "communication.broadcast",
]
ENGINE_BUCKET_ORDER = [
    # seed 003's order: prefill, decode, sampler, postproc, communication buckets, KV ops, ...
    "prefill", "decode", "sampler", "postproc",
    "communication",
    "kv.alloc", "kv.free", "kv.copy", "kv.swap", "kv.update",
    "draft", "verify",
    "engine.sampling",
]
KV_REDUCTIONS = ("mean", "max", "p50", "p90", "sum")
PERCENTILE_METHOD = ("exact over all measured steps: linear interpolation between the two "
                     "nearest ranks of the sorted step latencies (numpy's default 'linear')")


def _share_ns_from_env():
    """CPROF_TIMER_SHARE_NS: the window (ns) in which adjacent CUDA timer boundaries on one
    stream share one event (csrc/cuda_timers.c); 0 gives every region two events of its own."""
    v = os.environ.get("CPROF_TIMER_SHARE_NS", "").strip()
    if not v:
        return None
    try:
        ns = int(v)
    except ValueError:
        ns = -1
    if ns < 0:
        raise ValueError(f"cprof: CPROF_TIMER_SHARE_NS={v!r} is not a whole number of "
                         "nanoseconds >= 0; unset it for the default (1000) or set 0 to give "
                         "every CUDA timer region two events of its own")
    return ns


class ProfilerStateError(_C.CprofError, RuntimeError):
    """A Profiler call in the wrong order (end_run without begin_run, ...)."""


@dataclass
class ProfilerConfig:
    output_dir: str = "profiler_out"
    collect_on_rank0_only: bool = True
    strict_sync: bool = True
    dist_barrier: bool = False
    model_profiling: bool = False
    engine_profiling: bool = False
    num_total_runs: int = 10
    warmup_runs: int = 1
    print_per_run: bool = True
    run_name: Optional[str] = None
    kv_len_reduce: str = "mean"
    kv_bins: List[int] = field(default_factory=lambda: [0, 512, 1024, 2048, 4096, 8192, 16384])

    def __post_init__(self):
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in ("collect_on_rank0_only", "strict_sync", "dist_barrier", "model_profiling",
                     "engine_profiling", "print_per_run"):
            v = getattr(self, name)
            if v is None:
                v = defaults[name]  # None counts as absent, as in from_args
            elif not isinstance(v, bool):
                try:
                    i = None if isinstance(v, (str, bytes)) else operator.index(v)
                except TypeError:  # numpy.bool_ has no __index__
                    i = int(bool(v)) if _is_numpy_bool(v) else None
                if i not in (0, 1):
                    raise TypeError(f"cprof: ProfilerConfig.{name} must be True or False, got "
                                    f"{v!r}; with argparse use action='store_true' (or "
                                    "BooleanOptionalAction)")
                v = bool(i)
            setattr(self, name, v)
        for name in ("num_total_runs", "warmup_runs"):
            v = getattr(self, name)
            setattr(self, name, _whole(v, f"ProfilerConfig.{name}", "with argparse use type=int"))
        try:
            self.output_dir = os.path.expanduser(os.fspath(self.output_dir))
        except TypeError:
            raise TypeError(f"cprof: ProfilerConfig.output_dir must be a path, got "
                            f"{self.output_dir!r}") from None
        if self.run_name is not None:
            if isinstance(self.run_name, str) and "\\" in self.run_name:
                raise ValueError("cprof: ProfilerConfig.run_name must be a directory name "
                                 f"(no '/' or '\\'), or None for a generated one; got "
                                 f"{self.run_name!r}")
            from .context import check_profile_name
            check_profile_name(self.run_name, "ProfilerConfig.run_name (a directory name, or "
                               "None for a generated one)")
        if self.kv_len_reduce not in KV_REDUCTIONS:
            raise ValueError(f"cprof: kv_len_reduce={self.kv_len_reduce!r} is not one of "
                             f"{', '.join(KV_REDUCTIONS)}")
        bad_bins = ValueError("cprof: kv_bins must be a non-empty list of finite numbers, "
                              f"e.g. [0, 512, 1024]; got {self.kv_bins!r}")
        if isinstance(self.kv_bins, (str, bytes)) or not hasattr(self.kv_bins, "__iter__"):
            raise bad_bins
        bins = list(self.kv_bins)
        try:
            # numpy / torch integers, and argparse's strings of integers ("512", from
            # nargs="+" without type=int), stay integers (labels "[0, 512)", not "[0.0, 512.0)")
            bins = [b if isinstance(b, (int, float)) else
                    int(operator.index(b)) if hasattr(b, "__index__") else _bin_edge(b)
                    for b in bins]
        except (TypeError, ValueError):
            raise bad_bins from None
        if not bins or any(isinstance(b, bool) or not math.isfinite(b) for b in bins):
            raise bad_bins
        if any(b >= c for b, c in zip(bins, bins[1:])):
            raise ValueError(f"cprof: kv_bins must be strictly increasing, got {bins}; "
                             "sort them and remove duplicates")
        self.kv_bins = bins

    @classmethod
    def from_args(cls, args, prefix="prof_"):
        """Per field: args.<prefix><field>, then (engine_profiling) args.<prefix>
        backend_profiling and args.backend_profiling, then args.<field>, then the default. An
        attribute set to None counts as absent."""
        values = {}
        mapping = isinstance(args, collections.abc.Mapping)  # a dict of settings works too
        if args is None:  # no settings: the defaults
            args = {}
            mapping = True
        if not mapping and not hasattr(args, "_fields") and (
                isinstance(args, (str, bytes, int, float, bool, list, tuple))
                or not (hasattr(args, "__dict__") or hasattr(args, "__slots__"))):
            raise TypeError(f"cprof: Profiler / ProfilerConfig.from_args take a ProfilerConfig, "
                            f"an argparse namespace (or any object with the fields as "
                            f"attributes) or a dict, got {type(args).__name__}")
        for f in dataclasses.fields(cls):
            candidates = [prefix + f.name]
            if f.name == "engine_profiling":  # seed 003's alias, prefixed (a --prof_* CLI's
                candidates += [prefix + "backend_profiling", "backend_profiling"]  # too
            candidates.append(f.name)
            for name in candidates:
                v = args.get(name) if mapping else getattr(args, name, None)
                if v is not None:
                    values[f.name] = v
                    break
        return cls(**values)


_run_name_lock = threading.Lock()
_run_names = {}  # every name this process made -> how many times (names made in between must
                 # not let a later Profiler reuse an earlier one's directory)


def generate_run_name(prefix="run"):
    """A unique, sortable run directory name: <prefix>_<YYYYmmdd-HHMMSS>_<pid>, with _<n>
    added when this process already made that name (two in the same second). prefix may also
    be the runner's args namespace: its run_name if set, else the base name of its model
    (model_name / model / model_path), else "run"."""
    if not isinstance(prefix, str):
        args = prefix
        if getattr(args, "run_name", None):
            return str(args.run_name)
        prefix = _model_prefix(args)
    prefix = "".join(c if c.isalnum() or c in "-_." else "_" for c in prefix) or "run"
    name = f"{prefix}_{time.strftime('%Y%m%d-%H%M%S')}_{os.getpid()}"
    with _run_name_lock:
        n = _run_names.get(name, 0)
        _run_names[name] = n + 1
    return f"{name}_{n}" if n else name


_job_names = [0]  # Profilers that took a job-wide run name from the process group's store


def _launcher_start(pid):
    """(start time in Unix seconds, pid) of process pid (/proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK"), pid
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def job_run_name(prefix="run"):
    """A run name every rank of a job agrees on, for Profilers of every rank saving into one
    {run_name}/ directory without a run_name given: rank 0's generated name, shared through the
    process group's store when torch.distributed is initialised; else, ranks started by one
    launcher on this node (torchrun: LOCAL_WORLD_SIZE == WORLD_SIZE), <prefix>_<launcher's
    start time>_<launcher's pid>. None when neither is known (the caller warns)."""
    rank, world, _ = rank_info()
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            store = dist.distributed_c10d._get_default_store()
            _job_names[0] += 1
            key = f"cprof/run_name/{_job_names[0]}"
            if rank == 0:
                name = generate_run_name(prefix)
                store.set(key, name)
                return name
            store.wait([key], datetime.timedelta(seconds=120))
            return store.get(key).decode()
    except Exception:  # no store (a test double, a backend without one), or rank 0 never came
        pass
    local = os.environ.get("LOCAL_WORLD_SIZE")
    if "TORCHELASTIC_RUN_ID" in os.environ and local == str(world):
        started = _launcher_start(os.getppid())
        if started is not None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started[0]))
            return f"{prefix}_{stamp}_{started[1]}"
    return None


def _model_prefix(args):
    """The base name of the model args names (model_name / model / model_path), else "run"."""
    if args is None or isinstance(args, ProfilerConfig):
        return "run"
    get = args.get if isinstance(args, collections.abc.Mapping) else \
        (lambda a: getattr(args, a, None))
    for attr in ("model_name", "model", "model_path"):
        v = get(attr)
        if isinstance(v, (str, os.PathLike)) and str(v).strip():
            return os.path.basename(os.path.normpath(str(v))) or "run"
    return "run"


def _torch():
    return sys.modules.get("torch")


def _cuda_ready():
    t = _torch()
    try:
        return t is not None and t.cuda.is_available() and t.cuda.is_initialized()
    except Exception:
        return False


def _current_stream(device=None):
    """The CUstream of torch's current stream on device (None: the thread's current device;
    0, the legacy default stream, without torch CUDA). Looked up once per step, not per
    timer."""
    return int(_torch().cuda.current_stream(device).cuda_stream) if _cuda_ready() else 0


def _sync(device=None):
    """Waits for device (None: the thread's current device). Not while this thread's stream
    is capturing a CUDA graph: a synchronize there fails and invalidates the user's capture
    (vLLM-style engines capture their graphs inside profiled warmup steps); skipped, said
    once."""
    if not _cuda_ready():
        return
    torch = _torch()
    if _capturing(torch):
        global _capture_warned
        if not _capture_warned:
            _capture_warned = True
            warnings.warn("cprof: strict_sync skipped synchronising CUDA while this thread's "
                          "stream captures a CUDA graph (a synchronize there would fail and "
                          "invalidate the capture); times of steps and CPU timers around the "
                          "capture do not wait for the GPU", RuntimeWarning, stacklevel=3)
        return
    torch.cuda.synchronize(device)


_capture_warned = False  # warned once per process about a sync skipped during graph capture


def _current_device():
    """torch's current CUDA device on this thread, or None where CUDA is not in use (or
    cannot say: then every step syncs its own thread's current device, as before)."""
    if not _cuda_ready():
        return None
    try:
        return _torch().cuda.current_device()
    except Exception:
        return None


def _barrier():
    t = _torch()
    dist = sys.modules.get("torch.distributed")
    if t is not None and dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()


def _as_length(v):
    """One KV length of a list: a number (a string is a mistake, not a length)."""
    if isinstance(v, (str, bytes, bool)) or v is None:
        raise TypeError(f"a KV length is a number, got {v!r}")
    return float(v)


def _is_numpy_bool(v):
    t = type(v)
    return t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")


def _bin_edge(b):
    """A kv_bins edge that is neither an int nor a float: a string of an integer ("512", as
    argparse hands over without type=int) is that int, other text or objects a float."""
    if isinstance(b, (str, bytes)):
        try:
            return int(b)
        except ValueError:
            pass
    return float(b)


def _whole(n, what, hint, digits_ok=True):
    """n as an int >= 0: ints, numpy / 0-d tensor integers, integral floats and (digits_ok)
    strings of digits, as argparse hands over without type=int; bools, other strings and
    fractions are errors naming what and the hint (a count is never silently truncated)."""
    v = None
    if isinstance(n, (str, bytes)):
        text = n.decode() if isinstance(n, bytes) else n
        if digits_ok and text.strip().isdecimal() and text.strip().isascii():
            v = int(text)
    elif not isinstance(n, bool) and n is not None:
        try:
            v = operator.index(n)
        except TypeError:
            try:
                f = float(n)
            except (TypeError, ValueError):
                f = None
            if f is not None and math.isfinite(f) and f.is_integer():
                v = int(f)
    if v is None:
        raise TypeError(f"cprof: {what} must be a whole number, got {n!r}; {hint}")
    if v < 0:
        raise ValueError(f"cprof: {what} must be 0 or more (not negative), got {v}")
    if v >= 2 ** 63:
        raise ValueError(f"cprof: {what} is {v}, beyond what a step can count (2^63 - 1)")
    return v


def _whole_tokens(n):
    """set_step_tokens' count (see _whole)."""
    return _whole(n, "set_step_tokens' count", "pass the number of accepted tokens",
                  digits_ok=False)


# the keys cprof writes in each run's meta (summary.json runs[i].meta): begin_run refuses them
RUN_META_KEYS = ("index", "label", "bsz", "warmup", "steps_discarded", "steps_unmeasured",
                 "steps_overlapped", "timer_error", "start_time", "end_time", "wall_s")


def _bsz(v):
    """begin_run's bsz as summary.json keeps it: None, or a number (numpy / torch scalars as
    numbers, NaN as None; a string of digits, as argparse hands over, as an int)."""
    if v is None:
        return None
    if isinstance(v, (str, bytes)):
        text = v.decode() if isinstance(v, bytes) else v
        if text.strip().isdecimal() and text.strip().isascii():
            return int(text)
    elif not isinstance(v, bool):
        n = _json_scalar(v)
        if n is None or (isinstance(n, (int, float)) and not isinstance(n, bool)):
            return n
    raise TypeError(f"cprof: begin_run's bsz is the batch size, a number; got {v!r} (pass "
                    "other run details as keywords: begin_run(bsz=8, sizes=[1, 2]))")


def _finite(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


class _StepContext:
    __slots__ = ("prof", "step", "t0", "region", "range", "gate", "sync", "thread",
                 "overlapped", "device")

    def __init__(self, prof):
        self.prof = prof

    def __enter__(self):
        self.prof._step_enter(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.step
        except AttributeError:  # never entered (a slot not yet set)
            if not self.prof.enabled:
                return False  # a gated rank: call-order mistakes are no-ops too
            raise ProfilerStateError("cprof: a step_timing_ctx() was exited without being "
                                     "entered; use it as `with prof.step_timing_ctx(): ...`"
                                     ) from None
        self.prof._step_exit(self, exc_type)
        return False


_DISCARDED = object()  # Profiler._last_step after a step that raised


class _RunInfo:
    def __init__(self, index, bsz, label, warmup):
        self.index, self.bsz, self.label, self.warmup = index, bsz, label, warmup
        self.start_time = time.time()
        self.end_time = None
        self.steps = 0
        self.steps_discarded = 0  # steps that raised: not measured, counted in the reports
        self.steps_unmeasured = 0  # steps whose CUDA timers could not be read: in no figure
        self.steps_overlapped = 0  # steps open while another thread had a step open: their
                                   # bucket times may be short (the timer gate is per process)
        self.timer_error = None    # what CUDA returned for them
        self.extra = {}  # begin_run's other keywords (prefix_len=...)
        self.pending_kv = []  # (step index, device scalar tensor): resolved at end_run


class Profiler:
    """Runs of timed steps, bucket breakdowns and reports (seed 003's API)."""

    def __init__(self, args=None, *, timing="auto", **overrides):
        """args: a ProfilerConfig, or any namespace (ProfilerConfig.from_args reads it; its
        attributes are kept as the runner args for save_config). timing: "auto" (CUDA events
        when torch has initialised CUDA, else the host clock), "cuda" (CUDA events through the
        driver whenever a context is current) or "host". Other keywords override fields."""
        if timing not in ("auto", "cuda", "host"):
            raise ValueError(f"cprof: timing must be 'auto', 'cuda' or 'host', got {timing!r}")
        self._timing = timing
        if isinstance(args, ProfilerConfig):
            # a copy, validated again: a config edited after it was made (cfg.kv_bins = ...)
            # is checked here, and later edits do not reach this Profiler
            cfg = dataclasses.replace(args, **overrides)
            self.runner_args = {}
        else:
            cfg = ProfilerConfig.from_args(args) if args is not None else ProfilerConfig()
            if overrides:
                cfg = dataclasses.replace(cfg, **overrides)
            if isinstance(args, collections.abc.Mapping):
                self.runner_args = dict(args)
            else:
                self.runner_args = dict(vars(args)) if args is not None and hasattr(
                    args, "__dict__") else {}
        self.cfg = cfg
        self.rank, self.world_size, _ = rank_info()
        self.enabled = not (cfg.collect_on_rank0_only and self.rank != 0)
        self.run_name = cfg.run_name
        if not self.run_name:
            prefix = _model_prefix(args)
            if self.world_size > 1 and not cfg.collect_on_rank0_only and self.enabled:
                self.run_name = job_run_name(prefix)
                if self.run_name is None:
                    warnings.warn(
                        "cprof: every rank collects (collect_on_rank0_only=False) but no "
                        "run_name was given and the ranks' common name cannot be found (no "
                        "initialised process group, no launcher on this node): each rank "
                        "writes into a run directory of its own; pass run_name= to share one",
                        RuntimeWarning, stacklevel=2)
            if not self.run_name:
                self.run_name = generate_run_name(prefix)
        self.output_dir = os.path.join(cfg.output_dir, self.run_name)
        # where save_all / save_config write: the run directory made here, even when the
        # program changes its working directory later (a relative output_dir then pointed the
        # reports at another directory and left the one made here empty)
        self._write_dir = os.path.abspath(self.output_dir)
        self.start_time = time.time()
        self.runs = []
        self._run = None
        self._step = None
        self._tokens = 0
        self._kv = None
        self._cuda = None  # decided at the first run: CUDA events or host clock
        self._timing_note = None
        self._share_ns = _share_ns_from_env()
        self._attached_models = set()
        self._pending_kv = None  # set_step_seq_len before a step: that step's KV length
        self._last_step = None   # the last completed step of the open run (set_step_tokens after it)
        self._overlap_warned = False  # warned once about steps overlapping another thread's
        # (thread, torch device) of begin_run: the device a step on another thread syncs
        self._run_device = (None, None)
        # this Profiler's steps in the C step store, kept apart from any other Profiler's and
        # released with it
        self._owner = _C.rs_new_owner()
        weakref.finalize(self, _C.rs_release, self._owner)
        if self.enabled:
            check_output_dir(self.output_dir, "pass another output_dir (ProfilerConfig."
                             "output_dir / --prof_output_dir)")

    @property
    def disabled(self):
        """True on a rank-gated Profiler (collect_on_rank0_only and rank != 0)."""
        return not self.enabled

    @property
    def out_dir(self):
        return self.output_dir

    @property
    def world(self):
        return self.world_size

    # -- timing mode --
    def _decide_timing(self):
        if self._cuda is not None:
            return
        if self._timing == "host":
            self._cuda = False
            return
        if self._timing == "cuda" or _cuda_ready():
            ok, reason = _C.timers_cuda_init(_current_device() or 0)
            if ok and self._share_ns is not None:
                _C._timers_share_ns(self._share_ns)
        else:
            ok, reason = False, "CUDA is not available or not initialised in this process"
        self._cuda = ok
        if not ok and (self.cfg.model_profiling or _torch() is not None):
            self._timing_note = f"CUDA timers fall back to host timing: {reason}"
            if self.enabled and not getattr(Profiler, "_notice_given", False):
                Profiler._notice_given = True
                print(f"cprof: {self._rank_tag()}{self._timing_note}", file=sys.stderr)

    def _rank_tag(self):
        """"rank R: " in a multi-rank job, where every rank may print to one console (decision
        171); "" in one process."""
        return f"rank {self.rank}: " if self.world_size > 1 else ""

    # -- runs --
    def begin_run(self, bsz=None, label=None, **meta):
        """Opens a run. Other keywords (prefix_len=..., ...) are kept in the run's meta.
        On a rank-gated Profiler: a no-op."""
        if not self.enabled:
            return None
        if self._run is not None:
            raise ProfilerStateError(
                f"cprof: begin_run called while run {self._run.index} is open; call end_run() "
                "first")
        taken = sorted(k for k in meta if k in RUN_META_KEYS)
        if taken:  # refused, not overwritten: the user's value would be lost (decision 126)
            raise ValueError(f"cprof: begin_run keyword(s) {', '.join(map(repr, taken))} are "
                             "cprof's own keys in the run's meta; pass the value under "
                             f"another name (cprof's keys: {', '.join(RUN_META_KEYS)})")
        bsz = _bsz(bsz)
        self._decide_timing()
        index = len(self.runs)
        # what summary.json will hold: numpy / torch scalars as numbers, NaN as null, a label
        # as text (bsz=np.int64(8), label=3 made save_all fail after the runs were collected)
        self._run = _RunInfo(index, bsz, None if label is None else _clean_text(str(label)),
                             warmup=index < self.cfg.warmup_runs)
        self._run.extra = _jsonable(meta)
        self.runs.append(self._run)
        self._run_device = (threading.get_ident(), _current_device())
        self._pending_kv = None
        self._last_step = None
        return self._run.index

    def end_run(self):
        if not self.enabled:
            if self.cfg.dist_barrier:
                _barrier()  # the enabled rank's end_run barrier: keep them symmetric
            return
        run = self._run
        if run is None:
            raise ProfilerStateError("cprof: end_run called without begin_run; call "
                                     "begin_run(bsz=..., label=...) first")
        if self._step is not None:
            raise ProfilerStateError("cprof: end_run called inside step_timing_ctx; leave "
                                     "the step first")
        if self.cfg.dist_barrier:
            _barrier()
        self._resolve_timers(run)
        self._resolve_kv(run)
        run.end_time = time.time()
        self._run = None
        self._pending_kv = None
        self._last_step = None
        if self.cfg.print_per_run:
            s = _C.rs_stats(self._owner, run.index, run.index + 1, -math.inf, math.inf)
            tag = " (warmup, not aggregated)" if run.warmup else ""
            mean = s["mean_ms"] if s["mean_ms"] is not None else float("nan")
            tps = s["tok_per_s"] if s["tok_per_s"] is not None else float("nan")
            print(f"cprof: {self._rank_tag()}run {run.index}{' ' + run.label if run.label else ''}{tag}: "
                  f"{s['steps']} steps, mean {mean:.3f} ms, p90 "
                  f"{(s['p90_ms'] or float('nan')):.3f} ms, {tps:.1f} tok/s, "
                  f"{s['tokens']} tokens")

    def _resolve_timers(self, run):
        """Reads the run's ended CUDA regions. A step whose time CUDA cannot give (an error
        from the event query, a sticky CUDA error in the program) is left out of every
        figure, counted (steps_unmeasured in the reports) and warned about: never a 0 ms."""
        n, why = _C.timers_resolve()
        if not n:
            return
        first = not run.steps_unmeasured
        run.steps_unmeasured += n
        run.timer_error = why
        if first or not self.cfg.strict_sync:  # strict_sync resolves every step: warn once
            warnings.warn(
                f"cprof: {n} step(s) of run {run.index} could not be timed ({why}): they are "
                "left out of every statistic, not counted as 0 ms; the reports count them "
                "(steps_unmeasured). A CUDA error in the program makes later event queries "
                "fail too: check it with torch.cuda.synchronize().", RuntimeWarning,
                stacklevel=3)

    def _resolve_kv(self, run):
        if not run.pending_kv:
            return
        t = _torch()
        values = t.stack([v.reshape(()).double() for _, v in run.pending_kv]).cpu().tolist()
        bad = 0
        for (step, _), v in zip(run.pending_kv, values):
            if math.isfinite(v) and v >= 0:
                _C.step_set_kv(step, float(v))
            else:
                bad += 1
        run.pending_kv = []
        if bad:
            import warnings
            warnings.warn(f"cprof: run {run.index}: {bad} step(s) got device tensors of KV "
                          "lengths with a negative (or NaN) value in set_step_seq_len; those "
                          "steps have no KV length (lengths are numbers >= 0)", RuntimeWarning,
                          stacklevel=3)

    # -- steps --
    def step_timing_ctx(self):
        """Context manager timing one step; bucket timers inside it record."""
        return _StepContext(self)

    def _step_enter(self, ctx):
        if self.cfg.dist_barrier:
            _barrier()  # outside timing, on every rank (gated ranks too: barriers stay symmetric)
        ctx.step = None
        ctx.range = None
        if not self.enabled:
            return
        run = self._run
        if run is None:
            raise ProfilerStateError("cprof: step_timing_ctx used outside a run; call "
                                     "begin_run() first")
        if self._step is not None:
            raise ProfilerStateError("cprof: step_timing_ctx is already open; steps do not nest")
        strict = self.cfg.strict_sync
        ctx.device = self._step_device()
        if strict:
            _sync(ctx.device)
        ctx.step = _C.step_begin(self._owner, run.index)
        self._step = ctx.step
        self._tokens = 0
        self._kv, self._pending_kv = self._pending_kv, None
        stream = _current_stream(ctx.device) if self._cuda else 0
        measured = not run.warmup
        # model buckets time on the GPU (CUDA events) when possible; engine buckets on the host
        ctx.gate = (measured and self.cfg.model_profiling,
                    measured and self.cfg.engine_profiling, bool(self._cuda), False, stream,
                    ctx.step)
        ctx.sync = bool(strict and measured and self.cfg.engine_profiling and _cuda_ready())
        _C.timers_gate(*ctx.gate)
        ctx.thread = threading.get_ident()
        ctx.overlapped = False
        for other in _open_steps:
            if other.thread != ctx.thread:
                # another thread's step is open: the one gate serves both, so bucket times of
                # both steps can be lost (decision 125); counted in both runs, never silent
                other.overlapped = ctx.overlapped = True
        _open_steps.append(ctx)
        _StepSync.engine = _StepSync.engine or ctx.sync
        try:
            if _C.active():
                r = _C.range(f"step[{run.label}]" if run.label else "step")
                r.__enter__()
                ctx.range = r
            ctx.region = None
            if self._cuda and not strict:
                slot = _C.timer_begin(True, stream, ctx.step)
                # None: CUDA could not record it; the step is counted unmeasured, with why
                ctx.region = (slot, stream) if slot is not None else None
        except BaseException:
            # a step that failed to start is not open: the gate goes back, the step is dropped
            _close_gate(ctx)
            if ctx.range is not None:
                ctx.range.__exit__(None, None, None)
            _C.step_abort(ctx.step)
            self._step = ctx.step = None
            raise
        ctx.t0 = _C.now_ns()

    def _step_device(self):
        """The device a step syncs and times: the thread's current one, but on a thread other
        than begin_run's, the device current at begin_run. torch's current device is per
        thread, and a worker thread that never set it has device 0: its step would sync (and
        create a context on) device 0 while the run's work is on another GPU (gpurev2 F4). A
        worker whose current device is not that default set it (one thread per GPU): its own
        device is where its work runs, so it keeps it."""
        thread, device = self._run_device
        if device is None or thread == threading.get_ident():
            return None
        return device if _current_device() == 0 else None

    def _step_exit(self, ctx, exc_type):
        if ctx.step is None:
            return
        t1 = _C.now_ns()
        strict = self.cfg.strict_sync
        latency = None
        if ctx.region is not None:
            slot, stream = ctx.region
            _C.timer_end(slot, stream, 255, ctx.step)  # 255: the step's own region
        if strict:
            _sync(ctx.device)
            t1 = _C.now_ns()
        if ctx.region is None:
            latency = t1 - ctx.t0
        _close_gate(ctx)
        if ctx.range is not None:
            ctx.range.__exit__(None, None, None)
        self._step = None
        if exc_type is not None:
            _C.step_abort(ctx.step)  # a step that raised is not a measurement: counted
            self._run.steps_discarded += 1
            # tokens reported right after it are its own, discarded with it (not the step
            # before it's)
            self._last_step = _DISCARDED
            return
        kv = self._kv
        if kv is not None and not isinstance(kv, float):
            self._run.pending_kv.append((ctx.step, kv))
            kv = None
        _C.step_end(ctx.step, latency, int(self._tokens), kv)
        if ctx.overlapped:  # measured, but its bucket times may be short
            self._count_overlap(self._run)
        self._last_step = ctx.step
        self._run.steps += 1
        if strict:
            self._resolve_timers(self._run)

    def _count_overlap(self, run):
        run.steps_overlapped += 1
        if not self._overlap_warned:
            self._overlap_warned = True
            warnings.warn(
                f"cprof: a step of run {run.index} was open while another thread had a step "
                "of another Profiler open: the bucket timers have one gate per process, so "
                "bucket times of such steps can be short (their step latencies are right). "
                "They are counted (steps_overlapped in summary.json and report.md); step "
                "Profilers on different threads one after the other for exact buckets.",
                RuntimeWarning, stacklevel=4)

    def set_step_tokens(self, n):
        """Accepted tokens of the step: inside step_timing_ctx(), or right after it (then they
        go to the step that just ended, as when the count is known only once the step is
        done)."""
        if not self.enabled:
            return
        n = _whole_tokens(n)
        if n < 0:
            raise ValueError(f"cprof: set_step_tokens got {n}; accepted tokens cannot be "
                             "negative")
        if self._step is not None:
            self._tokens = n
            return
        if self._run is not None and self._last_step is _DISCARDED:
            return  # the step that just ended raised: its tokens go with its times
        if self._run is not None and self._last_step is not None:
            _C.step_set_tokens(self._last_step, n)
            return
        raise ProfilerStateError("cprof: set_step_tokens outside a step with no step before it "
                                 "in this run; call it inside step_timing_ctx() (or right "
                                 "after it)")

    def set_step_seq_len(self, x):
        """KV length of the step: int, list, numpy array or scalar, or tensor, reduced per
        kv_len_reduce. Inside step_timing_ctx(), or before it in an open run (then it is the
        next step's: the KV length at the step's start). A CUDA tensor is reduced on the
        device and copied once per run, not once per step."""
        if not self.enabled:
            return
        if self._step is None and self._run is None:
            raise ProfilerStateError("cprof: set_step_seq_len outside a run; call "
                                     "begin_run() first, then set it inside (or just before) "
                                     "step_timing_ctx()")
        if isinstance(x, (str, bytes, bool)) or x is None:
            raise TypeError(f"cprof: set_step_seq_len takes an int, a list, an array or a "
                            f"tensor of KV lengths, got {x!r}")
        v = self._reduce(x)
        if v is None:  # refused, not taken as "no KV length": that would drop a length set
            raise ValueError(f"cprof: set_step_seq_len got no KV lengths ({x!r} is empty); "
                             "pass the step's lengths (one per sequence), or skip the call "
                             "for this step")
        if isinstance(v, float) and (not math.isfinite(v) or v < 0):
            raise ValueError(f"cprof: set_step_seq_len got {x!r}; a KV length is a number "
                             ">= 0")
        if self._step is not None:
            self._kv = v
        else:
            self._pending_kv = v

    def _reduce(self, x):
        how = self.cfg.kv_len_reduce
        t = _torch()
        if t is not None and isinstance(x, t.Tensor):
            v = x.detach().double().reshape(-1)
            if v.numel() == 0:
                return None
            if how == "mean":
                r = v.mean()
            elif how == "max":
                r = v.max()
            elif how == "sum":
                r = v.sum()
            else:
                r = t.quantile(v, 0.5 if how == "p50" else 0.9)
            if r.device.type == "cpu":
                if float(v.min()) < 0:
                    raise ValueError(f"cprof: set_step_seq_len got a negative KV length "
                                     f"({float(v.min()):g}); KV lengths are numbers >= 0")
                return float(r)
            # on the device, without a copy: a negative length makes the step's value NaN,
            # which end_run reports (_resolve_kv)
            return t.where(v.min() < 0, t.full_like(r, float("nan")), r)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return float(x)
        if getattr(x, "ndim", None) == 0 or (
                not hasattr(x, "__len__") and not hasattr(x, "__iter__")
                and hasattr(x, "__float__") and not isinstance(x, bool)):
            try:  # numpy scalars and 0-d arrays
                return float(x)
            except (TypeError, ValueError):
                pass
        kind = type(x).__name__
        if hasattr(x, "tolist"):
            # an array of any shape counts as its values, as a tensor does (reshape(-1) above):
            # a 2-D numpy array of lengths was a TypeError where the same tensor was taken
            flat = getattr(x, "ndim", 1) > 1 and callable(getattr(x, "reshape", None))
            x = (x.reshape(-1) if flat else x).tolist()
        try:
            values = [_as_length(v) for v in x]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"cprof: set_step_seq_len takes an int, a list, an array or a "
                            f"tensor of KV lengths, got {kind} ({exc})") from None
        if not values:
            return None
        bad = next((v for v in values if not 0 <= v < math.inf), None)
        if bad is not None:
            raise ValueError(f"cprof: set_step_seq_len got a KV length of {bad:g}; KV lengths "
                             "are numbers >= 0")
        values.sort()
        if how == "mean":
            return sum(values) / len(values)
        if how == "max":
            return values[-1]
        if how == "sum":
            return float(sum(values))
        p = 0.5 if how == "p50" else 0.9
        h = (len(values) - 1) * p
        lo = math.floor(h)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (h - lo) * (values[hi] - values[lo])

    # -- hooks --
    def attach_model(self, model, use_gated_lora=False):
        from ._hooks import attach_model
        return attach_model(model, use_gated_lora=use_gated_lora)

    def attach_engine(self, engine):
        from ._hooks import attach_engine
        return attach_engine(engine)

    # -- reports --
    def _measured_runs(self):
        return [r for r in self.runs if not r.warmup]

    def summary(self):
        """The summary.json document as a dict (no NaN/Infinity: undefined values are None)."""
        from ._runreport import build_summary
        return build_summary(self)

    def _target_dir(self, output_dir, what):
        d = self._write_dir if output_dir is None else os.path.expanduser(os.fspath(output_dir))
        check_output_dir(d, f"pass {what}(output_dir=...) to write elsewhere (nothing "
                            "recorded is lost: prof.summary() still has it)")
        return d

    def save_config(self, output_dir=None):
        """Writes {output_dir}/{run_name}/config.json (or output_dir/config.json when given):
        the config and the runner's arguments; config-rank{R}.json on rank R > 0 (every rank
        collecting). Returns the path (None on a gated rank)."""
        if not self.enabled:
            return None
        d = self._target_dir(output_dir, "save_config")
        doc = {
            "config": dataclasses.asdict(self.cfg),
            "runner_args": _jsonable(self.runner_args),
            "meta": {"rank": self.rank, "world_size": self.world_size,
                     "run_name": self.run_name, "cprof_version": _C.__version__,
                     "created": _iso(time.time())},
        }
        # rank R's beside rank 0's when every rank collects, as summary-rankR.json
        path = os.path.join(d, f"config-rank{self.rank}.json" if self.rank else "config.json")
        _write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        return path

    def save_all(self, output_dir=None):
        """Writes summary.json and report.md under {output_dir}/{run_name}/ (or in output_dir
        when given). Returns their paths (None on a gated rank). A run still open is left out
        of both (its steps too) with a warning. When every rank collects
        (collect_on_rank0_only=False), ranks other than 0 write summary-rank{R}.json and
        report-rank{R}.md beside rank 0's, so no rank's report replaces another's."""
        if not self.enabled:
            return None
        if self._run is not None:
            warnings.warn(f"cprof: save_all with run {self._run.index} still open: it is not "
                          "in the report; call end_run() first", RuntimeWarning, stacklevel=2)
        from ._runreport import render_markdown
        d = self._target_dir(output_dir, "save_all")
        summary = self.summary()
        tag = f"-rank{self.rank}" if self.rank else ""
        sp = os.path.join(d, f"summary{tag}.json")
        _write_text(sp, json.dumps(summary, indent=2, allow_nan=False) + "\n")
        rp = os.path.join(d, f"report{tag}.md")
        _write_text(rp, render_markdown(summary))
        return sp, rp


class NullProfiler:
    """What get_active_profiler returns when none is registered, or when the registered one is
    disabled (a rank-gated Profiler): every call is a no-op, timers record nothing."""

    enabled = False
    disabled = True
    runs = ()
    rank = 0
    world_size = world = 1
    output_dir = out_dir = None
    run_name = None

    def __init__(self, cfg=None):
        self.cfg = cfg if cfg is not None else ProfilerConfig()
        self._gated = None  # the disabled Profiler this one stands for (its barriers run)

    def __bool__(self):  # so `if get_active_profiler():` tells "none active", as seed 003's
        return False

    def begin_run(self, *a, **k):
        return None

    def end_run(self, *a, **k):
        if self._gated is not None:
            self._gated.end_run(*a, **k)  # a gated rank's dist_barrier barrier, as the Profiler's
        return None

    def step_timing_ctx(self):
        # standing for a gated rank's Profiler: its step context records nothing but keeps
        # the dist_barrier barriers, or rank 0's step barriers pair with nothing here
        return _NULL_CTX if self._gated is None else self._gated.step_timing_ctx()

    def set_step_tokens(self, *a, **k):
        return None

    def set_step_seq_len(self, *a, **k):
        return None

    def save_config(self, *a, **k):
        return None

    def save_all(self, *a, **k):
        return None

    def summary(self):
        return None

    def attach_model(self, *a, **k):
        return None

    def attach_engine(self, *a, **k):
        return None


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL_CTX = _NullCtx()
_NULL = NullProfiler()


def _null_standing_for(prof):
    """A NullProfiler standing for a disabled Profiler: its config, rank and run name."""
    n = NullProfiler(prof.cfg)
    n.rank, n.world_size, n.world = prof.rank, prof.world_size, prof.world_size
    n.run_name = prof.run_name
    n._gated = prof
    return n
_active = None


def register_active_profiler(prof):
    """Makes prof the profiler get_active_profiler() returns (None: as release). A Profiler,
    a NullProfiler, or an object with the Profiler's step methods (a wrapper of one)."""
    global _active
    if prof is not None and not isinstance(prof, (Profiler, NullProfiler)) and not all(
            callable(getattr(prof, m, None)) for m in ("begin_run", "end_run",
                                                        "step_timing_ctx")):
        raise TypeError(f"register_active_profiler: expected a cprof.Profiler, got "
                        f"{type(prof).__name__}; make one with cprof.Profiler(config)")
    _active = prof
    return prof


def get_active_profiler():
    """The registered Profiler; a NullProfiler when none is registered or the registered one
    is disabled (rank-gated), so `get_active_profiler().step_timing_ctx()` is always safe."""
    if _active is None:
        return _NULL
    if getattr(_active, "enabled", True) is False and not isinstance(_active, NullProfiler):
        return _null_standing_for(_active)
    return _active


def release_active_profiler():
    global _active
    _active = None


# -- timers (C objects: outside a step, in warmup runs or with the domain off, one check) --

# Model-domain timer: CUDA events on the step's stream (host clock without CUDA). A C function:
# no Python frame and no argument parsing on the per-region path.
cuda_bucket_timer = _C.cuda_bucket_timer


# The open steps of every Profiler, innermost last. The C timer gate is one per process: a
# step of one Profiler opened inside another's (a draft model's Profiler inside the target's)
# takes it, and its exit hands it back to the step it covered, whose timers record again.
_open_steps = []


def _close_gate(ctx):
    for i in range(len(_open_steps) - 1, -1, -1):
        if _open_steps[i] is ctx:
            del _open_steps[i]
            break
    if _open_steps:
        top = _open_steps[-1]
        _C.timers_gate(*top.gate)
    else:
        _C.timers_gate(False, False, False, False, 0, 0)
    _StepSync.engine = any(s.sync for s in _open_steps)


class _StepSync:
    """Whether any open step's engine (CPU) timers synchronise the device (seed 003's
    strict_sync "synchronises CUDA at step boundaries (and for CPU timers)"): the one check a
    timer makes when none does. Which step, and so whether and which device (None: the
    thread's current one), is the timer's own thread's (_timer_step): two Profilers stepping
    on two threads (one per GPU) each sync their own device (decision 184)."""
    engine = False


def _timer_step():
    """The open step a CPU timer on this thread belongs to: the innermost one opened on this
    thread, else (a helper thread of the stepping one) the innermost open step of any thread,
    as before steps were told apart by thread. None outside every step."""
    steps = _open_steps[:]  # other threads open and close theirs meanwhile
    if len(steps) > 1:
        me = threading.get_ident()
        for ctx in reversed(steps):
            if ctx.thread == me:
                return ctx
    return steps[-1] if steps else None


def cpu_bucket_timer(bucket, sync=None):
    """Engine-domain timer on the host clock. The device is synchronised around it when sync
    is True, or (sync=None, the default) when the step it times runs under strict_sync with
    CUDA in use and engine profiling on, as seed 003 says; sync=False never synchronises."""
    if sync is not None and sync is not True and sync is not False:
        sync = flag(sync, "cprof: cpu_bucket_timer", "sync")  # "no" would count as true
    t = _C.engine_timer(bucket)
    if sync or (sync is None and _StepSync.engine):
        step = _timer_step()
        if sync or (step is not None and step.sync):
            return _SyncedTimer(t, step.device if step is not None else None)
    return t


def attention_compute_timer(stream=None):
    """The attn.compute bucket (CUDA events on the step's stream, or on stream)."""
    if stream is None:  # the per-region fast path: one positional argument
        return _C.cuda_bucket_timer("attn.compute")
    return _C.cuda_bucket_timer("attn.compute", stream=stream)


def rope_compute_timer(stream=None):
    """The attn.rope bucket (CUDA events on the step's stream, or on stream)."""
    if stream is None:
        return _C.cuda_bucket_timer("attn.rope")
    return _C.cuda_bucket_timer("attn.rope", stream=stream)


class _SyncedTimer:
    __slots__ = ("t", "device")

    def __init__(self, t, device):
        self.t = t
        self.device = device  # its step's (None: the thread's current device)

    def __enter__(self):
        _sync(self.device)
        return self.t.__enter__()

    def __exit__(self, *exc):
        _sync(self.device)
        return self.t.__exit__(*exc)


def _iso(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


def _json_scalar(v):
    """A number for summary.json: numpy / torch scalars (one-element tensors included) as
    Python numbers, NaN and infinities as None; anything else as _jsonable makes it."""
    if v is None or isinstance(v, bool):
        return v
    if not isinstance(v, (int, float)):
        item = getattr(v, "item", None)
        if callable(item):
            try:
                v = item()
            except Exception:
                return _jsonable(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if isinstance(v, (int, float)) else _jsonable(v)


def _jsonable(obj):
    try:
        json.dumps(obj, allow_nan=False)
        return obj
    except (TypeError, ValueError):
        mod = type(obj).__module__.split(".")[0]
        if mod in ("numpy", "torch") and hasattr(obj, "tolist"):
            try:  # numpy / torch scalars and arrays as numbers and lists, not their repr
                return _jsonable(obj.tolist())
            except Exception:
                pass
        if isinstance(obj, dict):
            return {str(k): _jsonable(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [_jsonable(v) for v in obj]
        if isinstance(obj, float):
            return None
        return repr(obj)


def _clean_text(s):
    """s with each lone surrogate (a label from os.fsdecode, '\\ud800') as U+FFFD, one per byte
    it cannot be encoded in, as range names in a trace: UTF-8 files and stdout refuse them."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _write_text(path, text):
    tmp = None
    try:
        tmp, fd = create_temp(path)  # O_EXCL: a file planted at the name is never written
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_clean_text(text))
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            if tmp is not None:
                os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise
        raise _C.TraceWriteError(exc.errno or 5, f"cprof: {path!r} cannot be written "
                                 f"({exc.strerror}); pass output_dir=... to save_all() / "
                                 "save_config() to write elsewhere (prof.summary() still has "
                                 "everything)") from None
