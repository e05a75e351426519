"""cprof.schedule and the profiler actions: torch.profiler's semantics, step for step.

A cycle is wait + warmup + active steps; ``repeat`` cycles (0 = forever) after ``skip_first``
steps. torch.profiler.schedule callables and ProfilerAction values are accepted wherever ours
are (matched by name), so code written for torch.profiler runs unchanged."""
import enum
import numbers
import warnings


def same_member(a, b):
    """a (a cprof enum member) equals b: the same member, or torch.profiler's enum member of
    the same name from the enum of the same name (so `cprof.schedule(...)(n) ==
    torch.profiler.schedule(...)(n)` holds, as a drop-in needs)."""
    if a is b:
        return True
    if isinstance(b, enum.Enum) and type(b) is type(a):
        return False
    name = getattr(b, "name", None)
    return (isinstance(name, str) and name == a.name
            and type(b).__name__ == type(a).__name__)


class ProfilerAction(enum.Enum):
    """What the profiler does during a step (the same members as torch.profiler's, and equal
    to them by name)."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3

    def __eq__(self, other):
        return same_member(self, other)

    def __hash__(self):
        return hash(self._name_)


class ScheduleError(ValueError, AssertionError):
    """An invalid schedule. A ValueError; also an AssertionError, which is what
    torch.profiler.schedule raises, so code written against torch keeps working."""


def _count(name, value, minimum, who="cprof.schedule"):
    integral_float = isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or integral_float):
        raise TypeError(f"{who}: {name} must be a whole number of steps, got {value!r}")
    value = int(value)
    if value < minimum:
        need = "> 0" if minimum == 1 else ">= 0"
        raise ScheduleError(
            f"{who}: {name}={value} is invalid (need {need}); a cycle is wait + "
            "warmup + active steps and active must be at least 1")
    return value


def schedule(wait, warmup, active, repeat=0, skip_first=0, *, skip_first_wait=0):
    """Returns a callable step -> ProfilerAction with torch.profiler.schedule's semantics.
    Positional or by keyword (torch's takes keywords only; code written for it runs as is).

    Skips ``skip_first`` steps, then cycles: ``wait`` steps idle, ``warmup`` steps collected and
    discarded, ``active`` steps recorded (the last one RECORD_AND_SAVE, after which the trace is
    ready). ``repeat`` cycles, 0 = until profiling ends. ``skip_first_wait`` skips the first
    cycle's wait. Steps needed for every trace: ``skip_first + (wait + warmup + active) *
    repeat`` (minus ``wait`` with skip_first_wait) -- wait is part of every cycle."""
    wait = _count("wait", wait, 0)
    warmup = _count("warmup", warmup, 0)
    active = _count("active", active, 1)
    repeat = _count("repeat", repeat, 0)
    skip_first = _count("skip_first", skip_first, 0)
    skip_first_wait = _count("skip_first_wait", skip_first_wait, 0)
    num_steps = wait + warmup + active
    if warmup == 0:
        warnings.warn("cprof.schedule: profiler won't be using warmup, this can skew profiler "
                      "results (the first recorded step pays for starting collection); "
                      "torch.profiler.schedule warns the same", UserWarning, stacklevel=2)

    def schedule_fn(step):
        if step < 0:
            raise ScheduleError(f"cprof.schedule: step must be >= 0, got {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod_step < num_steps - 1 else \
            ProfilerAction.RECORD_AND_SAVE

    schedule_fn.params = dict(wait=wait, warmup=warmup, active=active, repeat=repeat,
                              skip_first=skip_first, skip_first_wait=skip_first_wait)
    return schedule_fn


def min_steps(wait, warmup, active, repeat, skip_first=0, skip_first_wait=0):
    """Steps (profiler.step() calls) a loop needs so every one of ``repeat`` cycles completes
    and its trace is written: skip_first + (wait + warmup + active) * repeat, less the first
    wait with skip_first_wait. repeat=0 cycles until profiling ends (seed 002's
    `--profiling.repeat 0`): the steps its first trace needs, each further cycle adding
    wait + warmup + active."""
    wait, warmup, repeat, skip_first = (_count(n, v, 0, "cprof.min_steps") for n, v in (
        ("wait", wait), ("warmup", warmup), ("repeat", repeat), ("skip_first", skip_first)))
    active = _count("active", active, 1, "cprof.min_steps")  # as schedule() takes them
    n = skip_first + (wait + warmup + active) * max(repeat, 1)
    return n - wait if skip_first_wait else n


def _always_record(step):
    return ProfilerAction.RECORD


def as_action(value):
    """Our ProfilerAction for ours, torch's (by name) or None; TypeError otherwise."""
    if isinstance(value, ProfilerAction):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in ProfilerAction.__members__:
        return ProfilerAction[name]
    raise TypeError(
        f"cprof: a schedule must return a ProfilerAction (NONE, WARMUP, RECORD, "
        f"RECORD_AND_SAVE), got {value!r}")
