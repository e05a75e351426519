"""Text forms of a cprof report (table, csv, md; json is the dict itself). The report is built
in C (csrc/trace_analyse.c, trace_gaps.c); this only lays out its small tables."""
import csv
import io
import re

from ._diagnose import _fmt_bytes, _fmt_us, rank_verdict, small_copy_limit

# (key, title, columns): columns are (field, header, kind) with kind f3 (3 decimals), int,
# pct, str, bytes
KERNEL_COLS = [("time_pct", "Time (%)", "pct"), ("total_us", "Total Time (us)", "f3"),
               ("instances", "Instances", "int"), ("avg_us", "Avg (us)", "f3"),
               ("med_us", "Med (us)", "f3"), ("min_us", "Min (us)", "f3"),
               ("max_us", "Max (us)", "f3"), ("stddev_us", "StdDev (us)", "f3"),
               ("name", "Name", "str")]
# kernels: and their estimated achieved occupancy (Kineto's per-kernel figure, weighted by time;
# blank where the trace has none)
KERNEL_OCC_COLS = KERNEL_COLS[:-1] + [("occupancy_pct", "Est. Occ (%)", "pct"),
                                      ("name", "Name", "str")]
TABLES = [
    ("kernels", "CUDA GPU Kernel Summary", KERNEL_OCC_COLS),
    ("cuda_api", "CUDA API Summary", KERNEL_COLS),
    ("memory", "GPU Memory Operations", [
        ("kind", "Kind", "str"), ("count", "Count", "int"), ("bytes", "Total", "bytes"),
        ("total_us", "Time (us)", "f3"), ("gbps", "GB/s", "f3"),
        ("pageable", "Pageable", "int"), ("small", "Small", "int")]),
    ("memory_track", "Memory Over the Window", [
        ("series", "Series", "str"), ("samples", "Samples", "int"),
        ("start_bytes", "Start", "bytes"), ("peak_bytes", "Peak", "bytes"),
        ("end_bytes", "End", "bytes"), ("growth_bytes", "Growth", "bytes"),
        ("per_step_bytes", "Per step", "bytes"), ("steps_growing", "Steps growing", "int")]),
    ("devices", "GPU Utilisation", [
        ("device", "Device", "int"), ("stream", "Stream", "str"), ("busy_us", "Busy (us)", "f3"),
        ("util_pct", "Util (%)", "pct"), ("idle_us", "Idle (us)", "f3"),
        ("host_us", "Wait host (us)", "f3"), ("host_launching_us", "Of it launching (us)", "f3"),
        ("sync_us", "After sync (us)", "f3"),
        ("short_us", "Short gaps (us)", "f3"), ("other_us", "Other (us)", "f3"),
        ("unknown_us", "Unknown (us)", "f3")]),
    ("gaps", "Largest GPU Idle Gaps", [
        ("device", "Device", "int"), ("start_us", "Start (us)", "f3"),
        ("dur_us", "Idle (us)", "f3"), ("kind", "Cause", "str"),
        ("before", "After kernel", "str"), ("after", "Before kernel", "str"),
        ("cpu_text", "CPU during the gap", "str")]),
    ("steps", "Steps", [
        ("step", "Step", "int"), ("cpu_us", "CPU (us)", "f3"), ("gpu_us", "GPU (us)", "f3"),
        ("gpu_ops", "GPU ops", "int"), ("name", "Name", "str")]),
    ("ranges", "Top Ranges by GPU Time", [
        ("gpu_us", "GPU (us)", "f3"), ("cpu_us", "CPU (us)", "f3"), ("calls", "Calls", "int"),
        ("gpu_ops", "GPU ops", "int"), ("cat", "Category", "str"), ("name", "Name", "str")]),
    ("modules", "Top Modules by GPU Time", [
        ("gpu_us", "GPU (us)", "f3"), ("cpu_us", "CPU (us)", "f3"), ("calls", "Calls", "int"),
        ("gpu_ops", "GPU ops", "int"), ("name", "Name", "str")]),
]
RANK_COLS = [("rank", "Rank", "int"), ("traces", "Traces", "int"), ("steps", "Steps", "int"),
             ("step_med_us", "Step med (us)", "f3"), ("step_mean_us", "Step mean (us)", "f3"),
             ("step_max_us", "Step max (us)", "f3"), ("gpu_busy_pct", "GPU busy (%)", "pct"),
             ("collective_us", "Collectives (us)", "f3"),
             ("collective_step_us", "Coll./step (us)", "f3"), ("straggler_text", "Straggler", "str"),
             ("path", "Trace", "str")]

# C0 controls, DEL and C1 controls as escapes: a report reads traces from anywhere (someone
# else's, an HTA export), and an ESC or CSI in a name would restyle or clear the terminal; a
# newline would split its row. A backslash is doubled, as repr does, so that a name holding a
# backslash and an "n" cannot read as one that held a newline
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROLS.update({0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x5c: "\\\\"})


def printable(s):
    """s for a terminal: control characters shown escaped (\\n, \\t, \\x1b, \\x9b), a
    backslash doubled."""
    return str(s).translate(_CONTROLS)


def _rows(report, key, md=False):
    """The rows of one table, flattened for display (md: the gaps' CPU text in Markdown)."""
    if key == "devices":
        out = []
        for d in report.get("devices", []):
            i = d["idle"]
            out.append({"device": d["device"], "stream": "all", "busy_us": d["busy_us"],
                        "util_pct": d["util_pct"], "idle_us": i["total_us"],
                        "host_us": i["host_us"],
                        "host_launching_us": i.get("host_launching_us", 0.0),
                        "sync_us": i["sync_us"],
                        "short_us": i["short_us"], "other_us": i["other_us"],
                        "unknown_us": i.get("unknown_us", 0.0)})
            for s in d["streams"]:
                out.append({"device": d["device"], "stream": str(s["stream"]),
                            "busy_us": s["busy_us"], "util_pct": s["util_pct"]})
        return out
    if key == "gaps":
        name = _md_code if md else str
        return [dict(g, cpu_text="; ".join(
            f"{name(c['name'])} ({name(c['cat'])}, {c['overlap_us']:.1f} us)"
            for c in g.get("cpu", []))) for g in report.get("gaps", [])]
    return report.get(key, [])


def _cell(v, kind):
    if v is None or v == "":
        return ""
    if kind == "f3":
        return f"{float(v):,.3f}"
    if kind == "pct":
        return f"{float(v):.1f}"
    if kind == "int":
        return f"{int(v):,}" if isinstance(v, (int, float)) else str(v)
    if kind == "bytes":
        return _fmt_bytes(v)
    # one row per line, and no control character reaches the terminal
    return printable(v)


def _clip(text, width):
    return text if len(text) <= width else text[: width - 1] + "…"


def _text_table(rows, cols, clip=60):
    """Aligned columns as `nsys stats` prints them; text columns other than the last are
    clipped to clip characters (the last, usually the name, is printed whole)."""
    head = [h for _, h, _ in cols]
    body = [[_cell(r.get(f), k) if k != "str" or i == len(cols) - 1
             else _clip(_cell(r.get(f), k), clip) for i, (f, _, k) in enumerate(cols)]
            for r in rows]
    widths = [max([len(head[i])] + [len(b[i]) for b in body]) for i in range(len(cols))]
    lines = []
    for cells in [head, ["-" * w for w in widths]] + body:
        parts = []
        for i, (c, (_, _, kind)) in enumerate(zip(cells, cols)):
            last = i == len(cols) - 1
            parts.append(c if last else (c.ljust(widths[i]) if kind == "str" else
                                         c.rjust(widths[i])))
        lines.append(" " + "  ".join(parts).rstrip())
    return "\n".join(lines)


# Markdown. Names come from the trace: `FillFunctor<float>` is a raw HTML tag to CommonMark
# (GitHub drops it), `<img onerror=...>` passes through as HTML, `**`, `[..](..)` and backticks
# are markup. Names go in code spans, where all of it is literal; other text from the trace
# (diagnoses quote names) has its markup characters backslash-escaped (CommonMark allows that
# before any ASCII punctuation)
_MD_MARKUP = re.compile(r"([\\`*_\[\]<>&|~])")
_MD_CODE_FIELDS = {"name", "cat", "before", "after", "path"}


def _md_text(s):
    """Text from the trace as literal Markdown text: controls escaped as in the table format
    (so a newline cannot end the row or list item), markup characters escaped."""
    return _MD_MARKUP.sub(r"\\\1", printable(s))


def _md_code(s, in_table=True):
    """A name as a code span: a backtick fence longer than any run of backticks in it, padded
    where the name starts or ends with a backtick or has spaces at both ends (CommonMark strips
    one space from each end then). In a table cell "|" is escaped: GFM splits cells on it even
    inside code spans."""
    t = printable(s)
    if not t:
        return ""
    if in_table:
        t = t.replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall("`+", t)), default=0) + 1)
    if "`" in (t[0], t[-1]) or (t[0] == t[-1] == " " and t.strip(" ")):
        t = f" {t} "  # one space is stripped from each end (not of an all-space span)
    return f"{fence}{t}{fence}"


def _md_cell(v, field, kind):
    if field in _MD_CODE_FIELDS and v not in (None, ""):
        return _md_code(v)
    if field == "cpu_text":  # made with the names in code spans (_rows)
        return v or ""
    return _md_text(_cell(v, kind))


def _md_table(rows, cols):
    lines = ["| " + " | ".join(h for _, h, _ in cols) + " |",
             "| " + " | ".join("---" if k == "str" else "---:" for _, _, k in cols) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(_md_cell(r.get(f), f, k) for f, _, k in cols) + " |")
    return "\n".join(lines)


def _header_lines(r):
    tr, win = r["trace"], r["window"]
    bits = [f"trace: {tr['path']}", f"producer: {tr['producer']}"]
    if tr.get("rank") is not None:
        bits.append(f"rank {tr['rank']}/{tr.get('world_size')}")
    bits.append(f"{tr['events']:,} events")
    bits.append(f"window {_fmt_us(win['dur_us'])}")
    if tr.get("partial"):
        bits.append(f"PARTIAL ({tr.get('end')})")
    return printable(", ".join(bits))


def _evidence(d):
    return ", ".join(f"{k}={v}" for k, v in (d.get("evidence") or {}).items())


def _diag_lines(diags):
    out = []
    for d in diags:  # summaries and evidence quote names from the trace
        out.append(printable(f"[{d['severity']}] {d['title']}: {d['summary']}"))
        ev = _evidence(d)
        if ev:
            out.append(f"    evidence: {printable(ev)}")
    return out


def _md_diag_lines(diags):
    """Markdown: each diagnosis with its evidence, as the text table gives it."""
    out = []
    for d in diags:
        out.append(f"- **{_md_text(d['title'])}** ({_md_text(d['severity'])}): "
                   f"{_md_text(d['summary'])}")
        ev = _evidence(d)
        if ev:
            out.append(f"  - evidence: {_md_text(ev)}")
    return out


def _one(report, fmt, sections):
    table = fmt == "table"
    out = [] if table else [f"## {_md_code(report['trace']['path'], in_table=False)}", ""]
    out += [_header_lines(report) if table else _md_text(_header_lines(report)), ""]
    diags = report.get("diagnoses", []) or []
    if table:
        out.append("** Diagnoses:")
        out.extend(["  " + ln for ln in _diag_lines(diags)] or ["  none: nothing stands out"])
    else:
        out += ["### Diagnoses", ""]
        out.extend(_md_diag_lines(diags) or ["- nothing stands out"])
    for key, title, cols in TABLES:
        if sections and key not in sections:
            continue
        if key == "memory":  # the threshold this report used (--small-copy-bytes)
            limit = small_copy_limit(report).split(" (")[-1].rstrip(")")
            cols = [(f, f"Small (< {limit})" if f == "small" else h, k) for f, h, k in cols]
        rows = _rows(report, key, md=not table)
        if table:
            out += ["", f"** {title} ({key}):", "",
                    _text_table(rows, cols) if rows else "  (none in this trace)"]
        else:
            out += ["", f"### {title}", "",
                    _md_table(rows, cols) if rows else "_none in this trace_"]
    c = report.get("compiled", {})
    if c.get("regions") or c.get("triton_kernels"):
        line = (f"Compiled code: {c['regions']} Torch-Compiled Regions ({c['nested']} nested, "
                f"max depth {c['max_depth']}), {c['compiled_functions']} CompiledFunction, "
                f"{c['triton_kernels']} Triton kernels")
        out += ["", ("** " if table else "") + line]
    return out


def render(doc, fmt, sections=None):
    """doc: one report, or {"reports": [...], "ranks": [...], "diagnoses": [...]}."""
    reports = doc["reports"] if "reports" in doc else [doc]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        blocks = []
        for key, _, cols in TABLES + [("diagnoses", "", None)]:
            if sections and key not in sections:
                continue
            blocks.append((key, cols))
        if "ranks" in doc:
            blocks.insert(0, ("ranks", RANK_COLS))
        for bi, (key, cols) in enumerate(blocks):
            if bi:
                buf.write("\n")
            if key == "diagnoses":
                w.writerow(["table", "trace", "id", "severity", "title", "summary",
                            "evidence"])
                for r in reports:
                    for d in r.get("diagnoses", []):
                        w.writerow([key, r["trace"]["path"], d["id"], d["severity"], d["title"],
                                    d["summary"], _evidence(d)])
                for d in doc.get("diagnoses", []) if "reports" in doc else []:
                    w.writerow([key, "", d["id"], d["severity"], d["title"], d["summary"],
                                _evidence(d)])
                continue
            if key == "ranks":
                w.writerow(["table"] + [f for f, _, _ in cols])
                for row in doc["ranks"]:
                    w.writerow([key] + [row.get(f) for f, _, _ in cols])
                continue
            w.writerow(["table", "trace"] + [f for f, _, _ in cols])
            for r in reports:
                for row in _rows(r, key):
                    w.writerow([key, r["trace"]["path"]] + [row.get(f, "") for f, _, _ in cols])
        return buf.getvalue()
    out = []
    if "ranks" in doc:
        rows = [dict(r, straggler_text="yes" if r["straggler"] else "") for r in doc["ranks"]]
        if fmt == "table":
            out.append("** Ranks (step time per rank):")
            out.append("")
            out.append(_text_table(rows, RANK_COLS))
            out.append("")
            out.extend(_diag_lines(doc.get("diagnoses", [])) or [
                rank_verdict(doc["ranks"], doc.get("diagnoses"))])
        else:
            out.append("## Ranks")
            out.append("")
            out.append(_md_table(rows, RANK_COLS))
            out.append("")
            out.extend(_md_diag_lines(doc.get("diagnoses", [])) or [
                f"_{rank_verdict(doc['ranks'], doc.get('diagnoses'))}_"])
        out.append("")
    for i, r in enumerate(reports):
        if i:
            out.append("")
            out.append("=" * 80 if fmt == "table" else "---")
        out.extend(_one(r, fmt, sections))
    return "\n".join(out) + "\n"
