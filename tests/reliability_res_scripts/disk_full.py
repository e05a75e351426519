"""A write that hits the file size limit (RLIMIT_FSIZE with SIGXFSZ ignored, so write() fails
with EFBIG as on a full disk), then the same data saved once the limit is lifted. Run in its
own process: the limit is per process. Prints one JSON line of facts for the test to check.
Usage: python disk_full.py OUTDIR N GZIP(0/1) LIMIT_BYTES"""
import json
import os
import resource
import signal
import sys

import cprof


def listing(d):
    return sorted(os.listdir(d))


def main():
    outdir, n, gz, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    r = cprof.range("disk/range")
    res = {}

    # ProfilerContext: the write at exit fails; save() writes the kept data
    ctx = cprof.ProfilerContext(activities=["CPU"], with_stack=False, record_shapes=False,
                                output_dir=outdir, profile_name="full", gzip=gz, verbose=False)
    with_err = None
    try:
        with ctx:
            for _ in range(n):
                with r:
                    pass
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    except cprof.TraceWriteError as err:
        with_err = err
    res["ctx_error"] = None if with_err is None else {
        "type": type(with_err).__name__, "oserror": isinstance(with_err, OSError),
        "errno": with_err.errno, "message": str(with_err)}
    res["ctx_listing_after_error"] = listing(outdir)
    res["ctx_save_under_limit"] = None
    try:
        ctx.save(os.path.join(outdir, "still-full.trace.json" + (".gz" if gz else "")))
    except cprof.TraceWriteError as err:
        res["ctx_save_under_limit"] = {"errno": err.errno, "message": str(err)}
    res["ctx_listing_after_second_error"] = listing(outdir)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    saved = ctx.save(os.path.join(outdir, "saved.trace.json" + (".gz" if gz else "")))
    res["ctx_saved"] = {"path": saved.path, "events": saved.events}
    res["ctx_listing_after_save"] = listing(outdir)

    # cprof.profile: export_chrome_trace over an existing good file fails under the limit and
    # must leave that file as it was; it works again once the limit is lifted
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            with r:
                pass
    target = os.path.join(outdir, "export.json" + (".gz" if gz else ""))
    prof.export_chrome_trace(target)
    before = os.stat(target)
    with open(target, "rb") as f:
        before_bytes = f.read()
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        prof.export_chrome_trace(target)
        res["export_error"] = None
    except cprof.TraceWriteError as err:
        res["export_error"] = {"errno": err.errno, "message": str(err)}
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    after = os.stat(target)
    with open(target, "rb") as f:
        res["export_old_file_kept"] = (after.st_ino == before.st_ino
                                       and f.read() == before_bytes)
    res["export_listing_after_error"] = listing(outdir)
    res["export_retry"] = prof.export_chrome_trace(os.path.join(outdir, "export2.json"
                                                                + (".gz" if gz else "")))
    res["listing_end"] = listing(outdir)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
