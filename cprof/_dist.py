"""Rank and world size: torch.distributed when initialised, else torchrun's RANK / WORLD_SIZE
environment variables (set before any process group exists), else 0 / 1.
Never imports torch itself: if the program has not imported torch.distributed, it is not used."""
import os
import sys


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError:
        return default


def rank_info():
    """Returns (rank, world_size, backend or None)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                backend = dist.get_backend()
                return dist.get_rank(), dist.get_world_size(), str(backend) if backend else None
        except Exception:  # a half-initialised process group: fall back to the environment
            pass
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world < 1:
        world = 1
    if rank < 0 or rank >= world:
        rank = 0 if world == 1 else rank
    return rank, world, None
