"""`cprof report` and `cprof merge`: analyse cprof or torch.profiler traces, merge rank traces.

    cprof report TRACE [TRACE...] [--format table|csv|json|md] [--top N] [--html OUT.html]
    cprof merge DIR_OR_FILES... -o merged.trace.json.gz [--force]

Parsing and aggregation run in C (csrc/trace_read.c, trace_analyse.c, trace_gaps.c,
trace_merge.c through cprof._C.trace_report / trace_merge); this module picks files, adds the
diagnoses (_diagnose.py) and prints (_report_format.py, _html.py).

Exit codes: 0 done; 1 an input could not be read or parsed, or the output not written (the
message says which file, where and what to do); 2 bad arguments.
"""
import argparse
import fnmatch
import glob
import json
import math
import os
import sys

from . import _C
from ._diagnose import diagnose, rank_problem, rank_table, skipped_text
from ._report_format import TABLES, render
from ._glue import create_temp
from ._window import is_stream, write_target

FORMATS = ("table", "csv", "json", "md")
TRACE_GLOBS = ("*.trace.json", "*.trace.json.gz", "*.pt.trace.json", "*.pt.trace.json.gz")
# other JSON in a directory (torch's export_chrome_trace("trace.json"), HTA's own names) is
# read when its text shows a trace (_looks_like_trace): cprof's summary.json / config.json and
# a report written with --format json sit beside traces and are no traces
JSON_GLOBS = ("*.json", "*.json.gz")


class InputError(Exception):
    """A file the user named cannot be used; the message says what to do."""


class EmptyTraceError(InputError):
    """A trace with no events: left out (with a warning) when other inputs have some."""

    def __init__(self, path):
        super().__init__(f"{path}: the trace holds no events (its traceEvents list is empty): "
                         "nothing to report; profile a window with work in it")
        self.path = path


EMPTY_LEFT_OUT = "the trace holds no events (its traceEvents list is empty): left out"


def _positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _nonneg_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def _byte_count(text):
    v = _nonneg_float(text)
    if v >= 2 ** 62:
        raise argparse.ArgumentTypeError(f"must be a byte count below 2^62, got {text!r}")
    return v


def add_parsers(sub):
    p = sub.add_parser(
        "report", help="analyse cprof or torch.profiler traces (plain or .gz)",
        description="Kernel, CUDA API and memory summaries, GPU utilisation and idle time by "
                    "cause, the largest gaps, GPU time per range/module/step and diagnoses, "
                    "from cprof or torch.profiler traces. Several traces of one job (one per "
                    "rank) also get a per-rank step table that points at stragglers.")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="trace files (.json / .json.gz) or directories holding them")
    p.add_argument("--format", choices=FORMATS, default="table", help="output form (table)")
    p.add_argument("--top", type=_positive_int, default=20,
                   help="rows per table: kernels, API calls, ranges, modules, gaps (20)")
    p.add_argument("--html", metavar="OUT.html",
                   help="also write a self-contained HTML report (tables and charts)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here, not stdout")
    p.add_argument("--short-gap-us", type=_nonneg_float, default=10.0,
                   help="idle gaps shorter than this are 'short gaps between kernels' (10)")
    p.add_argument("--small-copy-bytes", type=_byte_count, default=65536,
                   help="copies below this size count as small (65536)")
    p.add_argument("--step-range", metavar="NAME",
                   help="ranges of this name are the steps (default: torch's ProfilerStep#N)")
    p.add_argument("--tables", metavar="T1,T2",
                   help="only these tables (" + ",".join(k for k, _, _ in TABLES) + ")")
    p.set_defaults(func=cmd_report)
    m = sub.add_parser(
        "merge", help="put the rank traces of one job on one timeline",
        description="Writes one trace with a process group per rank (names kept, 'rank R:' "
                    "prefixed), timestamps on one time base, and prints the per-rank step "
                    "times with stragglers flagged.")
    m.add_argument("inputs", nargs="+", metavar="DIR_OR_FILE",
                   help="rank traces, or directories holding them")
    m.add_argument("-o", "--output", required=True, metavar="merged.trace.json.gz",
                   help="the merged trace (gzip when it ends in .gz)")
    m.add_argument("--force", action="store_true", help="replace the output if it exists")
    m.add_argument("--step-range", metavar="NAME",
                   help="ranges of this name are the steps (default: torch's ProfilerStep#N)")
    m.add_argument("--format", choices=("table", "json", "md"), default="table",
                   help="form of the printed rank table (table)")
    m.set_defaults(func=cmd_merge)


def merged_inputs(path, limit=8 << 20):
    """The input paths a `cprof merge` output lists in its header ("cprof": {"merged": [...]}
    before traceEvents); None for any other file (or one that cannot be read: the reader
    reports that)."""
    import gzip
    import re
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            head = b""
            while len(head) < limit and b'"traceEvents"' not in head:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                head += chunk
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    text = head.split(b'"traceEvents"', 1)[0].decode("utf-8", "replace")
    m = re.search(r'"cprof"\s*:\s*(?=\{\s*"merged")', text)
    if m is None:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(text, m.end())
    except ValueError:
        return None
    return [i.get("path") for i in info.get("merged", []) if isinstance(i, dict)]


def _head(path, limit, stop):
    """The first bytes of a plain or gzip file: up to limit, or until stop (a compiled
    regex) matches; None when it cannot be read (the reader reports that when it matters).
    Each chunk is searched once (from a little before it: a match across two chunks is
    found), never the whole head again: a big JSON that is no trace took seconds."""
    import gzip
    import zlib
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            head = bytearray()
            while len(head) < limit:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                start = max(len(head) - 4096, 0)
                head += chunk
                if stop.search(head, start):
                    break
            return bytes(head)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return None


def _looks_like_trace(path):
    """A JSON file holds a Chrome trace: an object with a "traceEvents" key (found in its first
    8 MB: Kineto writes deviceProperties and cprof its merge list before it), or the array form
    whose first element is an event (has "ph"). cprof's report JSON ("schema":
    "cprof.report/..."), summary.json and config.json hold neither."""
    import re
    key = re.compile(rb'"traceEvents"\s*:')
    head = _head(path, 8 << 20, re.compile(rb'"traceEvents"\s*:|^[\xef\xbb\xbf\s]*\['))
    if head is None:
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return re.match(rb'\[\s*[{\]]', text) is not None and re.search(rb'"ph"\s*:', text) is not None
    return (text.startswith(b"{") and key.search(head) is not None
            and re.search(rb'^\{\s*"schema"\s*:\s*"cprof\.report/', text) is None)


def _find_in_dir(item):
    """The traces in directory item: files named like traces (TRACE_GLOBS), and other *.json /
    *.json.gz files whose text shows a trace. Raises InputError when there is none."""
    named = {f for g in TRACE_GLOBS for f in glob.glob(os.path.join(item, g))}
    others = sorted({f for g in JSON_GLOBS for f in glob.glob(os.path.join(item, g))} - named)
    found, not_traces = set(named), []
    for f in others:
        if os.path.isfile(f) and _looks_like_trace(f):
            found.add(f)
        else:
            not_traces.append(os.path.basename(f))
    if not found:
        skipped = (f"; {', '.join(not_traces[:5])}{' ...' if len(not_traces) > 5 else ''} "
                   "hold no traceEvents" if not_traces else "")
        raise InputError(f"{item}: no trace files in this directory (looked for "
                         f"{', '.join(TRACE_GLOBS)} and other *.json[.gz] files holding a "
                         f"\"traceEvents\" list{skipped}); name the trace files instead")
    return sorted(found)


def _drop_merged_duplicates(item, found):
    """A directory holding rank traces and a `cprof merge` output of those same files: the
    merged file is left out (with a note), so each rank is counted once. Named explicitly, a
    merged file is always read."""
    names = {os.path.basename(f) for f in found}
    kept = []
    for f in found:
        inputs = merged_inputs(f)
        here = [p for p in inputs or () if p and os.path.basename(p) in names]
        if inputs and len(here) == len(inputs):
            print(f"cprof: note: {f} is a `cprof merge` of traces in {item} that are read "
                  "themselves; it is left out so that no rank counts twice (name it alone "
                  "to read it)", file=sys.stderr)
            continue
        if here:
            print(f"cprof: note: {f} is a `cprof merge` output, and {len(here)} of its "
                  f"{len(inputs)} inputs are in {item} too: their ranks are counted twice",
                  file=sys.stderr)
        kept.append(f)
    return kept


def _digest(path):
    """A hash of the file's bytes, or None when it cannot be read (the reader says why)."""
    import hashlib
    h = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.digest()


def _drop_repeats(cmd, files):
    """Each trace once, with a warning for each left out: a file named twice (as itself,
    through a directory named too, or through a link) or a copy of another (the same bytes)
    would add every one of its events twice, to the report and to the merged timeline."""
    kept, seen = [], {}
    for f in files:
        real = os.path.realpath(f)
        if real in seen:
            how = ("named twice" if f == seen[real] else f"the same file as {seen[real]} "
                   "(named twice, through a directory or a link)")
            print(f"cprof {cmd}: warning: {f} is {how}: read once", file=sys.stderr)
            continue
        seen[real] = f
        kept.append(f)
    by_size = {}  # copies: only files of one size are read through and compared
    for f in kept:
        try:
            by_size.setdefault(os.path.getsize(f), []).append(f)
        except OSError:
            pass
    copies = set()
    for group in (g for g in by_size.values() if len(g) > 1):
        first = {}
        for f in group:
            d = _digest(f)
            if d is None:
                continue
            if d in first:
                print(f"cprof {cmd}: warning: {f} has the same content as {first[d]} (a copy "
                      "of one trace): left out, so that its events count once", file=sys.stderr)
                copies.add(f)
            else:
                first[d] = f
    return [f for f in kept if f not in copies]


def find_traces(items, cmd="report"):
    """Files named, and the trace files inside directories named (sorted; a directory's
    `cprof merge` output of files beside it is left out), each once (_drop_repeats)."""
    files = []
    for item in items:
        if os.path.isdir(item):
            found = _find_in_dir(item)
            files.extend(_drop_merged_duplicates(item, found))
        elif os.path.exists(item):
            if not os.path.isfile(item):
                raise InputError(f"{item}: not a regular file")
            files.append(item)
        else:
            raise InputError(f"{item}: no such file or directory")
    return _drop_repeats(cmd, files)


def analyse(path, top=20, short_gap_us=10.0, small_copy_bytes=65536, step_name=None):
    """The reports of one trace file, diagnoses included: one for a trace, one per rank for a
    file `cprof merge` wrote (each rank analysed on its own: correlation ids and device numbers
    repeat across ranks). Raises InputError."""
    try:
        texts = _C.trace_report(path, top=top, short_gap_us=short_gap_us,
                                small_copy_bytes=int(small_copy_bytes), step_name=step_name,
                                split_ranks=True)
    except _C.TraceFormatError as err:
        raise InputError(f"{err}") from None
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None
    reports = [json.loads(t) for t in texts]
    if not any(r.get("trace", {}).get("events") for r in reports):
        raise EmptyTraceError(path)
    for report in reports:
        report["diagnoses"] = diagnose(report)
        rank = report.get("trace", {}).get("rank")
        _warn_skipped("report", f"{path} (rank {rank})" if len(reports) > 1 and rank is not None
                      else path, report)
    return reports


def _warn_skipped(cmd, path, report):
    """A warning on stderr for the events the reader left out and for a distributedInfo rank
    it refused (each also a diagnosis in the report): seen even with -o, --tables or
    --format json."""
    for text in (skipped_text(report), rank_problem(report)):
        if text:
            print(f"cprof {cmd}: warning: {path}: {text}", file=sys.stderr)


def combine(reports):
    """One report, or several (ranks) with their rank table and cross-rank diagnoses."""
    if len(reports) == 1:
        return reports[0]
    rows, diags = rank_table(reports)
    return {"schema": "cprof.report/1", "reports": reports, "ranks": rows, "diagnoses": diags}


def _fail(cmd, msg):
    print(f"cprof {cmd}: error: {msg}", file=sys.stderr)
    return 1


def _stdout(cmd, text):
    """Writes text to standard output and flushes it. Returns 0, or 1 after a clean error when
    stdout cannot take it (a full disk, an I/O error: it used to end in a traceback; -o PATH
    already gave this error). A reader that closed early (BrokenPipeError) is __main__'s."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        # what is still buffered cannot be written either: the interpreter's flush at exit
        # would print the same error again as a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return _fail(cmd, f"cannot write to standard output: {err.strerror or err}; "
                     "redirect it to a disk with room" + (" or pass -o PATH" if cmd == "report"
                                                          else ""))
    return 0


def _write_text(path, text):
    """Writes text to path whole or not at all: a temporary file beside it, renamed over it.
    A device or FIFO (/dev/stdout, /dev/full, a pipe) is written into, never replaced; a
    symlink's target is replaced, not the link. Errors name path, not the temporary file."""
    try:
        if is_stream(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return
        real = write_target(path)
        tmp, fd = create_temp(real)  # O_EXCL: a file planted at the name is never written
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, real)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None


def _only_tables(doc, sections):
    """The JSON report with only the tables --tables names (the trace facts, diagnoses and
    totals kept), as the other formats print only those tables."""
    if not sections:
        return doc
    names = {k for k, _, _ in TABLES}

    def one(report):
        return {k: v for k, v in report.items() if k not in names or k in sections}

    if "reports" in doc:  # several ranks or files
        return dict(doc, reports=[one(r) for r in doc["reports"]])
    return one(doc)


def _clobbers_trace(args, files):
    """Why the report's -o / --html must not be written where asked (a trace it reads, or a
    name the next report or merge would take for a trace), or None."""
    inputs = {os.path.realpath(f) for f in files}
    for flag, path in (("-o", args.output), ("--html", args.html)):
        if not path or is_stream(path):
            continue
        if os.path.realpath(path) in inputs:
            return (f"{flag} {path} is a trace this report reads: writing the report there "
                    "would destroy it; choose another path")
        name = os.path.basename(path)
        if any(fnmatch.fnmatch(name, g) for g in TRACE_GLOBS):
            return (f"{flag} {path} is named like a trace (*.trace.json[.gz]): the next "
                    "`cprof report` or `merge` of its directory would read the report as one; "
                    "name it .txt, .md, .json or .html")
    return None


def _empty_option(args, cmd):
    """The message for an option given as "" (an unset shell variable, say), which would
    otherwise be taken as not given: -o "" printed to stdout. None when there is none."""
    for flag, value, what in (
            ("--tables", getattr(args, "tables", None),
             "name one or more of " + ",".join(k for k, _, _ in TABLES)),
            ("--step-range", args.step_range, "name the range that marks a step, or leave "
             "the option out for torch's ProfilerStep#N"),
            ("-o", args.output, "name the merged trace's file" if cmd == "merge" else
             "name a file, or leave -o out to print to standard output"),
            ("--html", getattr(args, "html", None), "name the HTML file to write")):
        if value is not None and not (value.strip(" ,") if flag == "--tables" else value):
            return f"{flag} is empty; {what}"
    return None


def cmd_report(args):
    sections = None
    empty = _empty_option(args, "report")
    if empty:  # a bad argument: exit 2, as argparse's own
        _fail("report", empty)
        return 2
    if args.tables:
        sections = {s.strip() for s in args.tables.split(",") if s.strip()}
        unknown = sections - {k for k, _, _ in TABLES}
        if unknown:  # a bad argument: exit 2, as argparse's own
            _fail("report", f"unknown table(s) {', '.join(sorted(unknown))}; choose "
                  f"from {', '.join(k for k, _, _ in TABLES)}")
            return 2
    try:
        files = find_traces(args.traces, "report")
        clash = _clobbers_trace(args, files)
        if clash:  # checked before the (long) analysis
            _fail("report", clash)
            return 2
        reports, empty = [], []
        for f in files:
            try:
                reports.extend(analyse(f, args.top, args.short_gap_us, args.small_copy_bytes,
                                       args.step_range))
            except EmptyTraceError as err:  # left out, as cprof merge leaves it out
                empty.append(err)
        if not reports:
            raise empty[0] if len(empty) == 1 else InputError(
                f"none of the {len(empty)} traces holds any events (their traceEvents lists "
                "are empty): nothing to report; profile a window with work in it")
        for err in empty:
            print(f"cprof report: warning: {err.path}: {EMPTY_LEFT_OUT}", file=sys.stderr)
    except InputError as err:
        return _fail("report", err)
    doc = combine(reports)
    if args.format == "json":
        text = json.dumps(_only_tables(doc, sections), indent=1) + "\n"
    else:
        text = render(doc, args.format, sections)
    try:
        if args.html:
            from . import _html
            _write_text(args.html, _html.render(doc))
        if args.output:
            _write_text(args.output, text)
    except OSError as err:
        return _fail("report", f"cannot write {err.filename}: {err.strerror}; choose another "
                     "path")
    if not args.output and _stdout("report", text):
        return 1
    if args.html:
        print(f"cprof: HTML report written to {args.html}", file=sys.stderr)
    return 0


def cmd_merge(args):
    empty = _empty_option(args, "merge")
    if empty:  # a bad argument: exit 2, as argparse's own
        _fail("merge", empty)
        return 2
    try:
        files = find_traces(args.inputs, "merge")
    except InputError as err:
        return _fail("merge", err)
    out = args.output
    target = write_target(out)
    out_dir = os.path.dirname(os.path.abspath(target))
    if os.path.isdir(target):  # --force would not help ("exists; pass --force" said it would)
        return _fail("merge", f"{out} is a directory; name the merged trace file, e.g. -o "
                     f"{os.path.join(out, 'merged.trace.json.gz')}")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        return _fail("merge", f"the output directory {out_dir} is a file, not a directory; "
                     "choose another path")
    if not os.path.isdir(out_dir):
        return _fail("merge", f"the output directory {out_dir} does not exist; create it first")
    if os.path.realpath(out) in {os.path.realpath(f) for f in files}:
        return _fail("merge", f"{out} is also an input; write the merged trace elsewhere")
    try:
        events, nbytes, texts = _C.trace_merge(files, target,
                                               gzip=6 if out.endswith(".gz") else 0,
                                               replace=args.force,
                                               step_name=args.step_range)
    except _C.TraceFormatError as err:
        return _fail("merge", err)
    except FileExistsError:
        return _fail("merge", f"{out} exists; pass --force to replace it")
    except OSError as err:
        return _fail("merge", f"{err.filename or out}: {err.strerror or err}")
    reports = []
    for f, t in zip(files, texts):
        r = json.loads(t)
        if not r.get("trace", {}).get("events"):  # left out of the merge by trace_merge
            print(f"cprof merge: warning: {f}: {EMPTY_LEFT_OUT}", file=sys.stderr)
            continue
        r["diagnoses"] = diagnose(r)
        _warn_skipped("merge", f, r)
        reports.append(r)
    rows, diags = rank_table(reports)
    ranks = [r["trace"].get("rank") for r in reports]
    known = [r for r in ranks if r is not None]
    if len(set(known)) != len(known):
        print("cprof merge: note: several inputs carry the same rank "
              f"({ranks}): they are taken as windows of that rank and share its process "
              "group", file=sys.stderr)
    doc = {"schema": "cprof.report/1", "merged": out, "events": events, "bytes": nbytes,
           "ranks": rows, "diagnoses": diags}
    if args.format == "json":
        if _stdout("merge", json.dumps(doc, indent=1) + "\n"):
            return 1
    else:
        if _stdout("merge", render({"reports": [], "ranks": rows, "diagnoses": diags},
                                   args.format)):
            return 1
        print(f"cprof: merged {len(reports)} traces ({events:,} events) into {out} "
              f"({nbytes / 1e6:.1f} MB)", file=sys.stderr)
    return 0
