"""Rank and world size: torch.distributed when initialised, else torchrun's RANK / WORLD_SIZE
environment variables (set before any process group exists), else 0 / 1.
Never imports torch itself: if the program has not imported torch.distributed, it is not used."""
import os
import re
import sys

from . import _warn


_warned_env = set()


_INT_LIMIT = 1 << 31


def _env_int(name, default, minimum):
    """The variable as a whole number >= minimum (and below 2^31: the trace's C writer takes
    an int), else default: unset or empty silently, any other value (text, RANK=-1,
    RANK=2147483648) with a warning, once per value."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is not None and minimum <= number < _INT_LIMIT:
        return number
    if (name, value) not in _warned_env:  # once per value: rank_info runs per window
        _warned_env.add((name, value))
        if number is None:
            what = "not a whole number"
        elif number < minimum:
            what = f"below {minimum}"
        else:
            what = f"not below {_INT_LIMIT} (2^31)"
        _warn.warn(f"cprof: ${name}={value!r} is {what}; it is ignored (the rank and world "
                   "size then come from the other variables, else 0 and 1), so file names "
                   "and distributedInfo may not say the right rank")
    return default


_remembered = {"backend": None, "groups": None}


def remember_backend():
    """Notes the initialised process group's backend (called just before the group is
    destroyed, by cprof's wrapper of destroy_process_group): a trace written after it, as
    `cprof run` writes at exit, still names the backend in distributedInfo."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            _remembered["backend"] = str(dist.get_backend())
            _remembered["groups"] = _groups(dist)
    except Exception:  # a group without a backend name (or a test double)
        pass


def _groups(dist):
    """torch.profiler's distributedInfo members beside backend, rank and world size: the
    number of process groups and each one's config (and the NCCL version with NCCL)."""
    info = {}
    try:
        info["pg_count"] = int(dist.get_pg_count())
        info["pg_config"] = dist.distributed_c10d._get_all_pg_configs()
        if dist.get_backend() == "nccl":
            import torch
            info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception:  # a private API that moved, or a group half set up: what was read
        pass
    return info


def group_info():
    """{pg_count, pg_config[, nccl_version]} of the initialised process group, as torch.profiler
    writes them in distributedInfo; those noted before the group was destroyed in a multi-rank
    job; else {}."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return _groups(dist)
    except Exception:
        return {}
    _, world, _ = rank_info()
    return dict(_remembered["groups"] or {}) if world > 1 else {}


def rank_info():
    """Returns (rank, world_size, backend or None): the initialised process group's, else
    RANK (or LOCAL_RANK when RANK is unset) and WORLD_SIZE from the environment. A rank with no
    WORLD_SIZE set implies a world of at least rank + 1."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                rank, world = int(dist.get_rank()), int(dist.get_world_size())
                try:
                    backend = dist.get_backend()
                except Exception:  # a group without a backend name (or a test double)
                    backend = None
                if backend:
                    _remembered["backend"] = str(backend)
                return rank, max(world, 1), str(backend) if backend else None
        except Exception:  # a half-initialised process group: fall back to the environment
            pass
    rank = _env_int("RANK", None, 0)
    if rank is None:
        rank = _env_int("LOCAL_RANK", 0, 0)
    world = _env_int("WORLD_SIZE", None, 1)
    if world is None:
        world = rank + 1
    if rank >= world:  # inconsistent environment: trust the rank, widen the world
        world = rank + 1
    # the group this job had (destroyed by now): its backend, in a multi-rank job only
    return rank, world, _remembered["backend"] if world > 1 else None


def shared_stamp():
    """The part after "profile_" of the default profile_name that every rank of one job
    finds without talking to the others, or None (one process, or nothing shared is known:
    each process then stamps its own time). Several ranks under torchrun (TORCHELASTIC_RUN_ID
    set): all on this node (LOCAL_WORLD_SIZE == the world size), the torchrun agent's start
    time (the workers' parent process, in unix seconds); across nodes, the rendezvous id
    (--rdzv-id), unless it is torchrun's default "none". Decision 122."""
    _, world, _ = rank_info()
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if world <= 1 or not run_id:
        return None
    local = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if local.isdigit() and int(local) == world:
        start = _parent_start()
        if start is not None:
            return str(start)
    if run_id == "none":
        return None
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:64]


def _parent_start():
    """This process's parent's start time in whole unix seconds (Linux /proc: boot time plus
    its start in clock ticks, whole numbers only, so every child reads the same), or None."""
    ppid = os.getppid()
    if ppid <= 1:  # orphaned: the launcher is gone
        return None
    try:
        with open(f"/proc/{ppid}/stat") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, starttime
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return btime + ticks // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
