"""One profiling window: opens and closes the C event store and writes what it collected.

This is the engine under ProfilerContext (and later cprof.profile): it validates nothing the
user typed (callers do) and keeps the collected snapshot until it has been written, so a failed
write loses nothing."""
import json
import os
import socket
import sys
import threading
import time
import warnings
from collections import namedtuple

from . import _C
from ._dist import rank_info

WriteResult = namedtuple("WriteResult", "path events bytes seconds")

DEFAULT_BUFFER_MB = 256


def _thread_names():
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def check_output_dir(path):
    """Creates path if needed and checks a file can be created in it; raises a clear error."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise _C.TraceWriteError(
            exc.errno,
            f"cprof: the output directory {path!r} cannot be created ({exc.strerror}); "
            "pass another output_dir or set CPROF_PROFILER_DIR",
        ) from None
    if not os.path.isdir(path):
        raise _C.TraceWriteError(
            20, f"cprof: the output path {path!r} exists and is not a directory; pass a directory"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise _C.TraceWriteError(
            13,
            f"cprof: the output directory {path!r} is not writable; pass another output_dir "
            "or set CPROF_PROFILER_DIR",
        )


class Window:
    """Start, stop, write. One window at a time per process (the C store enforces it)."""

    def __init__(self, config, buffer_mb=None):
        self.config = dict(config)
        self.buffer_mb = DEFAULT_BUFFER_MB if buffer_mb is None else buffer_mb
        self.snapshot = None
        self.start_time = None
        self.partial = False
        self.end_reason = None

    def start(self):
        if _C.active():
            raise _C.WindowStateError(
                "a cprof window is already open in this process; close it (exit its "
                "ProfilerContext / call stop()) before opening another")
        _C.set_buffer_cap(int(self.buffer_mb * (1 << 20)))
        _C.start()
        self.start_time = time.time()

    def stop(self, exc_type=None):
        """Closes the window. exc_type: the exception that ended it, if any."""
        snap = _C.stop()
        snap.rename_threads(_thread_names())
        self.snapshot = snap
        if exc_type is not None:
            self.partial = True
            self.end_reason = exc_type.__name__
        if snap.dropped:
            warnings.warn(
                f"cprof: {snap.dropped} of {snap.dropped + snap.ranges} ranges were dropped "
                f"because the range buffer cap ({self.buffer_mb} MiB) was reached; the trace "
                "says so in its metadata. Raise buffer_size_mb to keep them.",
                RuntimeWarning,
                stacklevel=3,
            )
        return snap

    def metadata(self, extra=None):
        rank, world, backend = rank_info()
        meta = {
            "config": self.config,
            "partial": self.partial,
            "end": self.end_reason or "normal",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "argv": list(sys.argv),
        }  # rank and world size live in distributedInfo only: HTA takes the first "rank" key
        torch = sys.modules.get("torch")
        if torch is not None:
            meta["torch"] = getattr(torch, "__version__", None)
        if extra:
            meta.update(extra)
        return meta, rank, world, backend

    def write(self, stem, suffix, gzip=True, replace=False, extra=None):
        """Writes the snapshot to stem+suffix (stem-N+suffix if taken). The snapshot is kept
        if the write fails, so it can be retried elsewhere."""
        if self.snapshot is None:
            raise _C.WindowStateError("cprof: nothing to write: the window has not been stopped")
        meta, rank, world, backend = self.metadata(extra)
        path, events, nbytes, seconds, _ = self.snapshot.write(
            stem,
            suffix,
            gzip=6 if gzip else 0,
            pid=os.getpid(),
            process_name="python",
            rank=rank,
            world_size=world,
            backend=backend,
            extra_json=json.dumps(meta, default=str),
            replace=replace,
        )
        return WriteResult(path, events, nbytes, seconds)

    def release(self):
        if self.snapshot is not None:
            self.snapshot.close()
            self.snapshot = None
