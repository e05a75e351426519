"""`cprof report --html`: one self-contained HTML page from a report dict (schema cprof.report/1).

render(report) -> str. Pure standard library. Everything is inline: CSS in a <style>, charts as SVG
drawn here, and a few lines of optional JS (click a table header to sort); the page shows everything with
JS disabled and fetches nothing. Every string taken from the report is escaped (kernel names carry <, >, &).
Section ids: diagnoses kernels steps utilisation gaps memory cuda-api ranges modules compiled sync, and
ranks for a multi-rank report, whose per-rank sections get a "rankN-" prefix (ids must be unique); every
section also carries data-section="<id>". Charts are <svg class="chart" data-chart="...">.
"""

import html
import math

__all__ = ["render", "fmt_us", "fmt_bytes", "fmt_pct"]

NO_GPU = "no GPU activity in this trace"
SEV_ORDER = {"high": 0, "medium": 1, "info": 2}
IDLE_KINDS = (("host", "#e15759", "host: no work queued while the CPU was busy"),
              ("sync", "#f28e2b", "sync: the CPU waited on the device"),
              ("short", "#edc948", "short: gaps too short to attribute"),
              ("other", "#bab0ac", "other: work was queued (waiting on dependencies)"),
              ("unknown", "#d7d7d7", "unknown: no launch in the trace to judge by"))
BLUE, ORANGE, RED = "#4e79a7", "#f28e2b", "#e15759"
STRAGGLER = ' <span class="badge sev-high">straggler</span>'


# ---------------------------------------------------------------- formatting

def esc(s):
    return "" if s is None else html.escape(str(s), quote=True)


def _f(x):
    """A number from a report field: None, strings, bools, NaN and inf read as 0."""
    if isinstance(x, bool) or x is None:
        return 0.0
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def _sig(v):
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 100:
        return "%.1f" % v
    if a >= 10:
        return "%.2f" % v
    return "%.3f" % v


def fmt_us(us):
    """Microseconds as a human duration: 812.3 µs, 12.35 ms, 1.240 s."""
    v = _f(us)
    if abs(v) >= 1e6:
        return _sig(v / 1e6) + " s"
    if abs(v) >= 1e3:
        return _sig(v / 1e3) + " ms"
    return _sig(v) + " µs"


def fmt_bytes(n):
    v = _f(n)
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(v) >= div:
            return _sig(v / div) + " " + unit
    return "%d B" % v


def fmt_pct(p):
    return "%.1f%%" % _f(p)


def fmt_int(n):
    return "{:,}".format(int(_f(n)))


def _fmt_num(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return esc(v)
    if isinstance(v, int) or float(v).is_integer():
        return fmt_int(v)
    return "%g" % v


def _fmt_evidence(key, v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        k = key.lower()
        if k.endswith("_us"):
            return fmt_us(v)
        if k.endswith("_pct"):
            return fmt_pct(v)
        if "bytes" in k:
            return fmt_bytes(v)
        return _fmt_num(v)
    return esc(v)


def _short(name, n):
    s = "" if name is None else str(name)
    return s if len(s) <= n else s[:n - 1] + "…"


def _ms(us):
    return "%.3f" % (_f(us) / 1e3)


def _div(a, b):
    return _f(a) / _f(b) if _f(b) else 0.0


def _pct_of(a, b):
    return 100.0 * _f(a) / _f(b) if _f(b) > 0 else 0.0


def _nice_step(span, n):
    raw = span / max(n, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _ticks(lo, hi, n=6):
    if hi <= lo:
        return [lo]
    step = _nice_step(hi - lo, n)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + step * 1e-9:
        out.append(t)
        t += step
    return out


def _tick_label(v):
    return ("%.10g" % round(v, 6)) if abs(v) < 1e15 else "%g" % v


# ---------------------------------------------------------------- html pieces

def _table(headers, rows, cls="sortable"):
    """headers: [(label, numeric)]; rows: [[cell]] with cell = html str or (html, sort value) or
    (html, sort value, css class). Returns a <table>."""
    out = ['<table class="%s"><thead><tr>' % cls]
    for label, num in headers:
        out.append('<th%s>%s</th>' % (' class="num"' if num else "", esc(label)))
    out.append("</tr></thead><tbody>")
    for row in rows:
        tr_cls = ""
        if isinstance(row, tuple):
            row, tr_cls = row
        out.append('<tr class="%s">' % tr_cls if tr_cls else "<tr>")
        for (label, num), cell in zip(headers, row):
            v, cc = None, ("num" if num else "")
            if isinstance(cell, tuple):
                if len(cell) > 2:
                    cc = cell[2]
                cell, v = cell[0], cell[1]
            attrs = (' class="%s"' % cc if cc else "") + (' data-v="%r"' % _f(v) if v is not None else "")
            out.append("<td%s>%s</td>" % (attrs, cell))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _dur(us):
    return (fmt_us(us), _f(us))


def _num(n):
    return (fmt_int(n), _f(n))


def _pc(p):
    return (fmt_pct(p), _f(p))


def _name_cell(name):
    return ('<code>%s</code>' % esc(name), None, "name")


def _section(prefix, sid, title, inner, level=2):
    return ('<section id="%s%s" data-section="%s"><h%d>%s</h%d>%s</section>'
            % (prefix, sid, sid, level, esc(title), level, inner))


def _empty(msg):
    return '<p class="empty">%s</p>' % esc(msg)


def _kv(pairs):
    return '<dl class="kv">%s</dl>' % "".join("<dt>%s</dt><dd>%s</dd>" % (esc(k), v) for k, v in pairs)


def _cards(pairs):
    return '<div class="cards">%s</div>' % "".join(
        '<div class="card"><span>%s</span><b>%s</b></div>' % (esc(k), v) for k, v in pairs)


# ---------------------------------------------------------------- charts (inline SVG)

def _svg(kind, w, h, body, label):
    return ('<svg class="chart" data-chart="%s" viewBox="0 0 %d %d" role="img" aria-label="%s" '
            'preserveAspectRatio="xMinYMin meet">%s</svg>' % (esc(kind), w, h, esc(label), "".join(body)))


def _hbar_chart(kind, rows, label, name_chars=52, text_w=170):
    """rows: [{"label", "full", "value", "text", "color"}] -> horizontal bars, longest = full width."""
    W, LW, RW, RH = 960, 360, text_w, 22
    h = 8 + RH * len(rows)
    vmax = max([_f(r["value"]) for r in rows] + [0.0])
    span = W - LW - RW
    body = []
    for i, r in enumerate(rows):
        y = 4 + i * RH
        bw = span * _f(r["value"]) / vmax if vmax > 0 else 0.0
        body.append('<g><title>%s</title>' % esc(r.get("full") or r["label"]))
        body.append('<text class="lbl" x="%d" y="%.1f" text-anchor="end">%s</text>'
                    % (LW - 8, y + 15, esc(_short(r["label"], name_chars))))
        body.append('<rect x="%d" y="%d" width="%.1f" height="%d" rx="2" fill="%s"/>'
                    % (LW, y + 3, max(bw, 1.0), RH - 6, r.get("color", BLUE)))
        body.append('<text x="%.1f" y="%.1f">%s</text></g>' % (LW + bw + 6, y + 15, esc(r["text"])))
    return _svg(kind, W, h, body, label)


def _timeline_chart(kind, tl, util, gaps):
    """Busy % per time bin as a stepped area; mean utilisation dashed; the largest gaps shaded red."""
    vals = [min(100.0, max(0.0, _f(v))) for v in (tl.get("busy_pct") or [])]
    W, H, L, R, T, B = 960, 230, 52, 14, 12, 40
    pw, ph = W - L - R, H - T - B
    t0, bw = _f(tl.get("start_us")), _f(tl.get("bin_us"))
    t1 = t0 + bw * len(vals)
    span = (t1 - t0) or 1.0
    X = lambda t: L + pw * (t - t0) / span
    Y = lambda p: T + ph * (1 - p / 100.0)
    body = []
    for p in (0, 25, 50, 75, 100):
        body.append('<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>' % (L, W - R, Y(p), Y(p)))
        body.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>' % (L - 6, Y(p) + 4, p))
    for g in gaps:
        gs, gd = _f(g.get("start_us")), _f(g.get("dur_us"))
        if gd <= 0 or gs + gd < t0 or gs > t1:
            continue
        x0, x1 = X(max(gs, t0)), X(min(gs + gd, t1))
        body.append('<rect class="gap" x="%.1f" y="%d" width="%.1f" height="%d">'
                    '<title>idle gap: %s %s at %s ms</title></rect>'
                    % (x0, T, max(x1 - x0, 1.5), ph, esc(fmt_us(gd)), esc(g.get("kind")),
                       esc("%.3f" % (gs / 1e3))))
    if vals:
        pts = ["%.1f,%.1f" % (X(t0), Y(0))]
        for i, v in enumerate(vals):
            pts.append("%.1f,%.1f %.1f,%.1f" % (X(t0 + i * bw), Y(v), X(t0 + (i + 1) * bw), Y(v)))
        pts.append("%.1f,%.1f" % (X(t1), Y(0)))
        body.append('<polygon points="%s" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1.2">'
                    '<title>GPU busy %% per %s bin</title></polygon>'
                    % (" ".join(pts), BLUE, BLUE, esc(fmt_us(bw))))
    if util > 0:
        body.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>'
                    % (L, W - R, Y(util), Y(util), RED))
        body.append('<text x="%d" y="%.1f" text-anchor="end" fill="%s">mean %s</text>'
                    % (W - R - 4, Y(util) - 4, RED, esc(fmt_pct(util))))
    body.append('<line class="axis" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>' % (L, W - R, Y(0), Y(0)))
    for tm in _ticks(t0 / 1e3, t1 / 1e3, 8):
        x = X(tm * 1e3)
        body.append('<line class="axis" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>' % (x, x, Y(0), Y(0) + 4))
        body.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                    % (x, Y(0) + 16, _tick_label(tm)))
    body.append('<text x="%.1f" y="%d" text-anchor="middle" class="muted">time (ms)</text>'
                % (L + pw / 2, H - 4))
    body.append('<text x="12" y="%.1f" text-anchor="middle" class="muted" transform="rotate(-90 12 %.1f)">'
                'busy %%</text>' % (T + ph / 2, T + ph / 2))
    return _svg(kind, W, H, body, "GPU busy percent over time")


def _idle_bar(kind, idle):
    W, H = 640, 64
    total = _f(idle.get("total_us"))
    parts = [(k, c, d, _f(idle.get(k + "_us"))) for k, c, d in IDLE_KINDS]
    denom = sum(p[3] for p in parts) or 1.0
    body, x = [], 0.0
    for k, color, desc, v in parts:
        w = W * v / denom
        if w <= 0:
            continue
        body.append('<g><title>%s: %s (%s of idle)</title><rect x="%.1f" y="0" width="%.1f" height="26" '
                    'fill="%s"/>' % (esc(desc), esc(fmt_us(v)), esc(fmt_pct(_pct_of(v, denom))), x, w, color))
        if w > 70:
            body.append('<text x="%.1f" y="17" text-anchor="middle">%s %s</text>'
                        % (x + w / 2, esc(k), esc(fmt_pct(_pct_of(v, denom)))))
        body.append("</g>")
        x += w
    lx = 0
    for k, color, desc, v in parts:
        body.append('<rect x="%d" y="40" width="12" height="12" fill="%s"/><text x="%d" y="50">%s %s</text>'
                    % (lx, color, lx + 16, esc(k), esc(fmt_us(v))))
        lx += 160
    return _svg(kind, W, H, body, "idle time breakdown, %s in all" % fmt_us(total))


def _histogram(kind, values):
    W, H, L, R, T, B = 640, 240, 36, 12, 18, 44
    pw, ph = W - L - R, H - T - B
    lo, hi = min(values), max(values)
    nb = 1 if hi <= lo else min(12, max(4, int(math.ceil(math.sqrt(len(values)))) + 2))
    width = (hi - lo) / nb if nb > 1 else 1.0
    counts = [0] * nb
    for v in values:
        counts[min(nb - 1, int((v - lo) / width)) if nb > 1 else 0] += 1
    cmax = max(counts) or 1
    body = []
    for c in _ticks(0, cmax, 4):
        if abs(c - round(c)) > 1e-9:
            continue
        y = T + ph * (1 - c / cmax)
        body.append('<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>' % (L, W - R, y, y))
        body.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (L - 6, y + 4, c))
    bwid = pw / nb
    for i, c in enumerate(counts):
        a = lo + i * width
        b = a + width if nb > 1 else hi
        bh = ph * c / cmax
        x = L + i * bwid
        body.append('<g><title>%s – %s: %d step%s</title>'
                    '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                    % (esc(fmt_us(a)), esc(fmt_us(b)), c, "" if c == 1 else "s", x + 1,
                       T + ph - bh, max(bwid - 2, 1), bh, BLUE))
        if c:
            body.append('<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>'
                        % (x + bwid / 2, T + ph - bh - 3, c))
        body.append("</g>")
    body.append('<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>' % (L, W - R, T + ph, T + ph))
    edges = [lo + i * width for i in range(nb + 1)] if nb > 1 else [lo]
    every = max(1, int(math.ceil(len(edges) / 6.0)))
    for i, e in enumerate(edges):
        if i % every and i != len(edges) - 1:
            continue
        x = L + (i * bwid if nb > 1 else pw / 2)
        body.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, T + ph + 15, esc(fmt_us(e))))
    body.append('<text x="%.1f" y="%d" text-anchor="middle" class="muted">step CPU time</text>'
                % (L + pw / 2, H - 6))
    return _svg(kind, W, H, body, "histogram of step CPU time")


def _steps_chart(kind, steps):
    W, H, L, R, T, B = 960, 250, 64, 12, 34, 40
    pw, ph = W - L - R, H - T - B
    n = len(steps)
    cpu = [_f(s.get("cpu_us")) for s in steps]
    gpu = [_f(s.get("gpu_us")) for s in steps]
    vmax = max(cpu + gpu + [0.0]) or 1.0
    tstep = _nice_step(vmax / 1e3, 4)
    ymax = math.ceil(vmax / 1e3 / tstep) * tstep * 1e3
    Y = lambda v: T + ph * (1 - v / ymax)
    slot = pw / max(n, 1)
    body = []
    for tm in _ticks(0, ymax / 1e3, 4):
        y = Y(tm * 1e3)
        body.append('<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>' % (L, W - R, y, y))
        body.append('<text x="%d" y="%.1f" text-anchor="end">%s ms</text>' % (L - 6, y + 4, _tick_label(tm)))
    if n <= 80:  # grouped bars
        bw = slot * 0.4
        for i, s in enumerate(steps):
            x = L + i * slot + slot * 0.1
            body.append('<g><title>%s: CPU %s, GPU %s, %s GPU ops</title>'
                        % (esc(s.get("name") or "step %s" % s.get("step")), esc(fmt_us(cpu[i])),
                           esc(fmt_us(gpu[i])), esc(fmt_int(s.get("gpu_ops")))))
            body.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                        % (x, Y(cpu[i]), bw, Y(0) - Y(cpu[i]), BLUE))
            body.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/></g>'
                        % (x + bw, Y(gpu[i]), bw, Y(0) - Y(gpu[i]), ORANGE))
    else:  # lines
        for vals, color in ((cpu, BLUE), (gpu, ORANGE)):
            pts = " ".join("%.1f,%.1f" % (L + (i + 0.5) * slot, Y(v)) for i, v in enumerate(vals))
            body.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>' % (pts, color))
    med = _median(cpu)
    body.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>'
                % (L, W - R, Y(med), Y(med), RED))
    body.append('<line class="axis" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>' % (L, W - R, Y(0), Y(0)))
    every = max(1, int(math.ceil(n / 24.0)))
    for i, s in enumerate(steps):
        if i % every == 0:
            body.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                        % (L + (i + 0.5) * slot, Y(0) + 15, esc(s.get("step", i))))
    body.append('<text x="%.1f" y="%d" text-anchor="middle" class="muted">step</text>' % (L + pw / 2, H - 4))
    lx = L + 4
    for lab, color in (("CPU time", BLUE), ("GPU time (kernels)", ORANGE), ("median CPU", RED)):
        body.append('<rect x="%d" y="4" width="12" height="10" fill="%s"/><text x="%d" y="13">%s</text>'
                    % (lx, color, lx + 16, esc(lab)))
        lx += 150
    return _svg(kind, W, H, body, "CPU and GPU time per step")


def _median(vals):
    v = sorted(vals)
    if not v:
        return 0.0
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2.0


# ---------------------------------------------------------------- sections of one trace

def _header(rep, level=1):
    tr = rep.get("trace") or {}
    win = rep.get("window") or {}
    out = []
    if level == 1:
        out.append("<h1>cprof report</h1>")
    out.append('<p class="path"><code>%s</code></p>' % esc(tr.get("path") or "(unnamed trace)"))
    rank = tr.get("rank")
    ws = tr.get("world_size")
    pairs = [("producer", esc(tr.get("producer") or "unknown"))]
    if rank is not None:
        pairs.append(("rank", esc(rank) + (" of %s" % esc(ws) if ws is not None else "")))
    pairs += [("events", fmt_int(tr.get("events"))),
              ("window", "%s (%s ms → %s ms)" % (esc(fmt_us(win.get("dur_us"))), _ms(win.get("start_us")),
                                                 _ms(win.get("end_us"))))]
    out.append(_kv(pairs))
    if tr.get("partial"):
        out.append('<div class="banner warn partial"><b>Partial trace.</b> The trace was not closed '
                   'cleanly (the program stopped or crashed while profiling); the numbers cover what '
                   'was recorded.</div>')
    dropped = {k: v for k, v in (tr.get("dropped") or {}).items() if _f(v) > 0}
    if dropped:
        out.append('<div class="banner warn dropped"><b>Dropped records:</b> %s. Some activity is missing; '
                   'raise the buffer size to keep it.</div>'
                   % ", ".join("%s %s" % (esc(k), fmt_int(v)) for k, v in sorted(dropped.items())))
    devs = rep.get("devices") or []
    kt = rep.get("kernels_total") or {}
    steps = rep.get("steps") or []
    cards = [("window", esc(fmt_us(win.get("dur_us"))))]
    if devs:
        cards.append(("GPU busy", esc(" / ".join(fmt_pct(d.get("util_pct")) for d in devs))))
    cards.append(("kernel time", esc(fmt_us(kt.get("total_us")))))
    cards.append(("kernels", "%s <small>(%s distinct)</small>"
                  % (fmt_int(kt.get("instances")), fmt_int(kt.get("distinct")))))
    if steps:
        cards.append(("median step", esc(fmt_us(_median([_f(s.get("cpu_us")) for s in steps])))))
    out.append(_cards(cards))
    return "".join(out)


def _diagnoses(diags):
    if not diags:
        return _empty("nothing to report: no diagnosis fired")
    out = []
    for d in sorted(diags, key=lambda d: SEV_ORDER.get(d.get("severity"), 3)):
        sev = d.get("severity") if d.get("severity") in SEV_ORDER else "info"
        ev = d.get("evidence") or {}
        out.append('<div class="diag sev-%s" data-id="%s"><div class="dhead">'
                   '<span class="badge sev-%s">%s</span> <b>%s</b> <span class="muted">%s</span></div>'
                   '<p>%s</p>%s</div>'
                   % (sev, esc(d.get("id")), sev, esc(sev), esc(d.get("title")), esc(d.get("id")),
                      esc(d.get("summary")),
                      _kv([(k, _fmt_evidence(k, v)) for k, v in ev.items()]) if ev else ""))
    return "".join(out)


def _stats_table(rows):
    head = [("Time %", True), ("Total", True), ("Instances", True), ("Avg", True), ("Med", True),
            ("Min", True), ("Max", True), ("StdDev", True), ("Name", False)]
    body = [[_pc(r.get("time_pct")), _dur(r.get("total_us")), _num(r.get("instances")), _dur(r.get("avg_us")),
             _dur(r.get("med_us")), _dur(r.get("min_us")), _dur(r.get("max_us")), _dur(r.get("stddev_us")),
             _name_cell(r.get("name"))] for r in rows]
    if any(r.get("occupancy_pct") is not None for r in rows):
        # kernels: Kineto's estimated achieved occupancy, weighted by time
        head.insert(-1, ("Est. occupancy", True))
        for b, r in zip(body, rows):
            b.insert(-1, _pc(r.get("occupancy_pct")) if r.get("occupancy_pct") is not None else "")
    return _table(head, body)


def _kernels(rep, gpu):
    rows = rep.get("kernels") or []
    if not rows:
        return _empty(NO_GPU if not gpu else "no kernels in this trace")
    kt = rep.get("kernels_total") or {}
    shown = sum(_f(r.get("total_us")) for r in rows)
    note = ('<p>%s of kernel time in %s launches of %s distinct kernels; the %d below cover %s.</p>'
            % (esc(fmt_us(kt.get("total_us"))), fmt_int(kt.get("instances")), fmt_int(kt.get("distinct")),
               len(rows), esc(fmt_pct(_pct_of(shown, kt.get("total_us"))))))
    bars = [{"label": r.get("name"), "value": r.get("total_us"),
             "full": "%s\n%s total, %s instances" % (r.get("name"), fmt_us(r.get("total_us")),
                                                     fmt_int(r.get("instances"))),
             "text": "%s · %s" % (fmt_pct(r.get("time_pct")), fmt_us(r.get("total_us")))}
            for r in rows[:15]]
    return note + _hbar_chart("kernels", bars, "top kernels by total time") + _stats_table(rows)


def _steps(rep, gpu):
    steps = rep.get("steps") or []
    if not steps:
        return _empty("no steps in this trace" + ("" if gpu else "; " + NO_GPU))
    cpu = [_f(s.get("cpu_us")) for s in steps]
    gpu_t = [_f(s.get("gpu_us")) for s in steps]
    slow = max(range(len(steps)), key=lambda i: cpu[i])
    stats = _kv([("steps", fmt_int(len(steps))), ("min", esc(fmt_us(min(cpu)))),
                 ("median", esc(fmt_us(_median(cpu)))), ("mean", esc(fmt_us(sum(cpu) / len(cpu)))),
                 ("max", esc(fmt_us(max(cpu)))),
                 ("slowest", "%s (%s)" % (esc(steps[slow].get("name") or steps[slow].get("step")),
                                          esc(fmt_us(cpu[slow])))),
                 ("median GPU", esc(fmt_us(_median(gpu_t)))),
                 ("GPU / CPU", esc(fmt_pct(_pct_of(sum(gpu_t), sum(cpu)))))])
    rows = [[_num(s.get("step")), esc(s.get("name")), (_ms(s.get("start_us")), _f(s.get("start_us"))),
             _dur(s.get("cpu_us")), _dur(s.get("gpu_us")), _pc(_pct_of(s.get("gpu_us"), s.get("cpu_us"))),
             _num(s.get("gpu_ops"))] for s in steps]
    table = _table([("Step", True), ("Name", False), ("Start (ms)", True), ("CPU", True), ("GPU", True),
                    ("GPU/CPU", True), ("GPU ops", True)], rows)
    return ('<div class="grid2"><div>%s</div><div><h4>Step time (CPU)</h4>%s</div></div>%s'
            '<details class="more"><summary>all %d steps</summary>%s</details>'
            % (_histogram("step-histogram", cpu), stats, _steps_chart("steps", steps), len(steps), table))


def _utilisation(rep):
    devs = rep.get("devices") or []
    if not devs:
        return _empty(NO_GPU)
    out = []
    for d in devs:
        dev = d.get("device")
        gaps = [g for g in (rep.get("gaps") or []) if g.get("device") == dev]
        idle = d.get("idle") or {}
        out.append('<h3>Device %s: %s busy (%s), %s kernels</h3>'
                   % (esc(dev), esc(fmt_pct(d.get("util_pct"))), esc(fmt_us(d.get("busy_us"))),
                      fmt_int(d.get("kernels"))))
        tl = d.get("timeline") or {}
        if tl.get("busy_pct"):
            out.append(_timeline_chart("timeline", tl, _f(d.get("util_pct")), gaps))
            out.append('<p class="muted small">Busy %% per %s bin; shaded: the largest idle gaps '
                       '(see below).</p>' % esc(fmt_us(tl.get("bin_us"))))
        streams = _table([("Stream", True), ("Busy", True), ("Util %", True), ("Ops", True)],
                         [[_num(s.get("stream")), _dur(s.get("busy_us")), _pc(s.get("util_pct")),
                           _num(s.get("ops"))] for s in d.get("streams") or []])
        out.append('<div class="grid2"><div><h4>Idle time: %s</h4>%s</div><div><h4>Streams</h4>%s</div></div>'
                   % (esc(fmt_us(idle.get("total_us"))), _idle_bar("idle", idle), streams))
    return "".join(out)


def _kernel_ref(name):
    if not name:
        return '<span class="muted">—</span>'
    return '<code title="%s">%s</code>' % (esc(name), esc(_short(name, 48)))


_NOTHING = '<span class="muted">nothing recorded</span>'


def _gaps(rep, gpu):
    gaps = rep.get("gaps") or []
    if not gaps:
        return _empty("no idle gaps" if gpu else NO_GPU)
    rows = []
    for i, g in enumerate(gaps, 1):
        cpu = g.get("cpu") or []
        items = "".join('<li><code title="%s">%s</code> <span class="muted">%s</span> %s of %s</li>'
                        % (esc(c.get("name")), esc(_short(c.get("name"), 60)), esc(c.get("cat")),
                           esc(fmt_us(c.get("overlap_us"))), esc(fmt_us(c.get("dur_us")))) for c in cpu[:6])
        if len(cpu) > 6:
            items += '<li class="muted">+%d more</li>' % (len(cpu) - 6)
        kind = g.get("kind") or "other"
        stream = "—" if g.get("stream") is None else g.get("stream")
        cpu_cell = '<ul class="cpu">%s</ul>' % items if items else _NOTHING
        start = (_ms(g.get("start_us")), _f(g.get("start_us")))
        rows.append([_num(i), esc(g.get("device")), esc(stream), start,
                     _dur(g.get("dur_us")), '<span class="kind k-%s">%s</span>' % (esc(kind), esc(kind)),
                     "%s → %s" % (_kernel_ref(g.get("before")), _kernel_ref(g.get("after"))), cpu_cell])
    return _table([("#", True), ("Device", False), ("Stream", False), ("Start (ms)", True),
                   ("Duration", True), ("Kind", False), ("Before → after", False),
                   ("What the CPU was doing", False)], rows)


def _memory(rep, gpu):
    track = _memory_track(rep.get("memory_track") or [])
    rows = rep.get("memory") or []
    if not rows:
        return track + _empty("no memory operations" if gpu else NO_GPU)
    return track + _memory_ops(rows)


def _memory_track(rows):
    """Memory over the window (counter tracks / torch's [memory] events), when the trace has
    them: start, peak, end, growth and growth per step."""
    if not rows:
        return ""

    def b(v):
        return (fmt_bytes(v), _f(v))
    return _table([("Series", False), ("Samples", True), ("Start", True), ("Peak", True),
                   ("End", True), ("Growth", True), ("Per step", True), ("Steps growing", True)],
                  [[esc(r.get("series")), _num(r.get("samples")), b(r.get("start_bytes")),
                    b(r.get("peak_bytes")), b(r.get("end_bytes")), b(r.get("growth_bytes")),
                    b(r.get("per_step_bytes")), _num(r.get("steps_growing"))] for r in rows])


def _memory_ops(rows):

    def flag(v):
        if isinstance(v, bool):
            return ("yes" if v else "—", int(v))
        return _num(v)
    return _table([("Kind", False), ("Count", True), ("Bytes", True), ("Total", True), ("Avg", True),
                   ("GB/s", True), ("Pageable", True), ("Small", True)],
                  [[esc(r.get("kind")), _num(r.get("count")), (fmt_bytes(r.get("bytes")), _f(r.get("bytes"))),
                    _dur(r.get("total_us")), _dur(_div(r.get("total_us"), r.get("count"))),
                    ("%.2f" % _f(r.get("gbps")), _f(r.get("gbps"))), flag(r.get("pageable")),
                    flag(r.get("small"))] for r in rows])


def _ranges(rows, what):
    if not rows:
        return _empty("no %s in this trace" % what)
    return _table([("Name", False), ("Category", False), ("Calls", True), ("CPU", True), ("GPU", True),
                   ("GPU ops", True)],
                  [[_name_cell(r.get("name")), esc(r.get("cat")), _num(r.get("calls")), _dur(r.get("cpu_us")),
                    _dur(r.get("gpu_us")), _num(r.get("gpu_ops"))] for r in rows])


def _compiled(rep):
    c = rep.get("compiled") or {}
    if not any(_f(v) for v in c.values()):
        return _empty("no torch.compile regions in this trace")
    return _cards([("compiled regions", fmt_int(c.get("regions"))), ("nested", fmt_int(c.get("nested"))),
                   ("max depth", fmt_int(c.get("max_depth"))),
                   ("compiled functions", fmt_int(c.get("compiled_functions"))),
                   ("Triton kernels", fmt_int(c.get("triton_kernels")))])


def _sync(rep):
    s, la, co = rep.get("sync") or {}, rep.get("launches") or {}, rep.get("collectives") or {}
    out = _cards([("sync calls", fmt_int(s.get("calls"))), ("time in sync", esc(fmt_us(s.get("total_us")))),
                  ("kernel launches", fmt_int(la.get("calls"))),
                  ("launch time", esc(fmt_us(la.get("total_us")))),
                  ("avg launch", esc(fmt_us(la.get("avg_us")))),
                  ("collective kernels", fmt_int(co.get("kernels"))),
                  ("collective time", esc(fmt_us(co.get("total_us"))))])
    by = s.get("by_name") or []
    if by:
        out += _table([("Call", False), ("Calls", True), ("Total", True), ("Avg", True)],
                      [[_name_cell(b.get("name")), _num(b.get("calls")), _dur(b.get("total_us")),
                        _dur(_div(b.get("total_us"), b.get("calls")))] for b in by])
    return out


def _trace_body(rep, prefix="", level=2):
    gpu = bool(rep.get("devices")) or bool(rep.get("kernels"))
    api = rep.get("cuda_api") or []
    sec = lambda sid, title, inner: _section(prefix, sid, title, inner, level)
    return "".join([
        sec("diagnoses", "Diagnoses", _diagnoses(rep.get("diagnoses") or [])),
        sec("kernels", "Kernel time", _kernels(rep, gpu)),
        sec("steps", "Step time", _steps(rep, gpu)),
        sec("utilisation", "GPU utilisation", _utilisation(rep)),
        sec("gaps", "Largest idle gaps", _gaps(rep, gpu)),
        sec("memory", "Memory operations", _memory(rep, gpu)),
        sec("cuda-api", "CUDA API",
            _stats_table(api) if api else _empty("no CUDA API calls" if gpu else NO_GPU)),
        sec("ranges", "Top ranges", _ranges(rep.get("ranges") or [], "ranges")),
        sec("modules", "Top modules", _ranges(rep.get("modules") or [], "module calls")),
        sec("compiled", "Compiled regions", _compiled(rep)),
        sec("sync", "Synchronisation, launches, collectives", _sync(rep)),
    ])


SECTIONS = [("diagnoses", "Diagnoses"), ("kernels", "Kernels"), ("steps", "Steps"),
            ("utilisation", "Utilisation"), ("gaps", "Gaps"), ("memory", "Memory"), ("cuda-api", "CUDA API"),
            ("ranges", "Ranges"), ("modules", "Modules"), ("compiled", "Compiled"), ("sync", "Sync")]


def _nav(links):
    return '<nav>%s</nav>' % " ".join('<a href="#%s">%s</a>' % (esc(i), esc(t)) for i, t in links)


# ---------------------------------------------------------------- multi-rank

def _rank_prefixes(reports):
    ranks = [(r.get("trace") or {}).get("rank") for r in reports]
    if None in ranks or len(set(ranks)) != len(ranks):
        return ["trace%d-" % i for i in range(len(reports))], ["trace %d" % i for i in range(len(reports))]
    return ["rank%s-" % int(_f(r)) for r in ranks], ["rank %s" % r for r in ranks]


def _ranks_section(ranks):
    if not ranks:
        return _empty("no ranks")
    bars = []
    for r in ranks:
        st = bool(r.get("straggler"))
        med, mx = fmt_us(r.get("step_med_us")), fmt_us(r.get("step_max_us"))
        who = "rank %s" % r.get("rank") if r.get("rank") is not None else "trace (no rank)"
        bars.append({"label": "%s%s" % (who, " (straggler)" if st else ""),
                     "full": "%s: %s\nmedian step %s, max %s" % (who, r.get("path"), med, mx),
                     "value": r.get("step_med_us"), "color": RED if st else BLUE,
                     "text": "%s median · max %s" % (med, mx)})
    rows = [([_num(r.get("rank")) if r.get("rank") is not None else "",
              _name_cell(r.get("path")), _num(r.get("traces")), _num(r.get("steps")),
              _dur(r.get("step_med_us")), _dur(r.get("step_mean_us")), _dur(r.get("step_max_us")),
              _pc(r.get("gpu_busy_pct")),
              _dur(r.get("collective_us")), _dur(r.get("collective_step_us")),
              STRAGGLER.strip() if r.get("straggler") else ""],
             "straggler" if r.get("straggler") else "") for r in ranks]
    head = [("Rank", True), ("Trace", False), ("Traces", True), ("Steps", True),
            ("Median step", True), ("Mean step", True), ("Max step", True), ("GPU busy", True),
            ("Collectives", True), ("Collectives per step", True), ("", False)]
    return ('<h4>Median step time per rank</h4>'
            + _hbar_chart("ranks", bars, "median step time per rank", 40, 250) + _table(head, rows))


def _multi_title(rep):
    """"cprof report: 2 ranks", or "3 traces, 2 ranks" when a rank has several windows."""
    n = len(rep.get("reports") or [])
    nranks = len({r.get("rank") for r in rep.get("ranks") or [] if r.get("rank") is not None})
    ranks = "%d rank%s" % (nranks, "" if nranks == 1 else "s")
    return "cprof report: " + (ranks if nranks == n else "%d traces, %s" % (n, ranks))


def _render_multi(rep):
    reports = rep.get("reports") or []
    ranks = rep.get("ranks") or []
    prefixes, labels = _rank_prefixes(reports)
    strag = {r.get("rank") for r in ranks if r.get("straggler")}
    parts = ["<h1>%s</h1>" % esc(_multi_title(rep)),
             _nav([("ranks", "Ranks"), ("diagnoses", "Cross-rank diagnoses")]
                  + [(p[:-1], lab) for p, lab in zip(prefixes, labels)]),
             _section("", "ranks", "Ranks", _ranks_section(ranks)),
             _section("", "diagnoses", "Cross-rank diagnoses", _diagnoses(rep.get("diagnoses") or []))]
    for i, (r, p, lab) in enumerate(zip(reports, prefixes, labels)):
        tr = r.get("trace") or {}
        is_strag = tr.get("rank") in strag and tr.get("rank") is not None
        med = _median([_f(s.get("cpu_us")) for s in r.get("steps") or []])
        nd = len(r.get("diagnoses") or [])
        summ = ('%s%s <span class="muted">%s · median step %s · %d diagnos%s</span>'
                % (esc(lab.capitalize()), STRAGGLER if is_strag else "",
                   esc(tr.get("path")), esc(fmt_us(med)), nd, "is" if nd == 1 else "es"))
        parts.append('<details class="rank" id="%s"%s><summary>%s</summary>%s%s%s</details>'
                     % (esc(p[:-1]), " open" if (is_strag or (i == 0 and not strag)) else "", summ,
                        _header(r, level=2), _nav([(p + s, t) for s, t in SECTIONS]),
                        _trace_body(r, p, level=3)))
    return "".join(parts)


# ---------------------------------------------------------------- page

CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--soft:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1200px;margin:0 auto;padding:12px 24px 48px}
h1{font-size:24px;margin:10px 0 2px}
h2{font-size:19px;margin:30px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:16px;margin:22px 0 8px}
h4{font-size:13px;margin:8px 0 6px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
section>h3:first-child{border-bottom:1px solid var(--line);padding-bottom:3px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12px}
a{color:#0969da;text-decoration:none}
nav{margin:8px 0 4px;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:13px}
.path{margin:0 0 6px}
.muted{color:var(--muted)} .small{font-size:12px;margin:0 0 8px}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:1px 14px;margin:4px 0 8px;font-size:13px}
.kv dt{color:var(--muted)} .kv dd{margin:0;overflow-wrap:anywhere}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
.card{border:1px solid var(--line);border-radius:6px;padding:6px 14px;min-width:130px;background:var(--soft)}
.card span{display:block;font-size:11px;color:var(--muted);text-transform:uppercase}
.card b{font-size:18px;font-weight:600} .card small{font-weight:400;color:var(--muted)}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0}
.warn{background:#fff8c5;border:1px solid #d4a72c}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:11px;font-weight:600;color:#fff;
 text-transform:uppercase;vertical-align:1px}
.badge.sev-high{background:#cf222e} .badge.sev-medium{background:#bf8700} .badge.sev-info{background:#0969da}
.diag{border:1px solid var(--line);border-left:5px solid #0969da;border-radius:6px;
 padding:8px 14px;margin:8px 0}
.diag.sev-high{border-left-color:#cf222e} .diag.sev-medium{border-left-color:#bf8700}
.diag p{margin:4px 0}
.empty{color:var(--muted);font-style:italic}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:6px 0 14px}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600;white-space:nowrap;cursor:pointer;user-select:none}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{word-break:break-all;min-width:240px}
td.name code{font-size:11.5px}
td code{overflow-wrap:anywhere}
tbody tr:hover{background:#f3f6fa}
tr.straggler td{background:#ffebe9}
ul.cpu{margin:0;padding-left:16px} ul.cpu li{margin:0}
.kind{padding:0 6px;border-radius:4px;font-size:12px;background:#eee}
.k-host{background:#fbd5d6} .k-sync{background:#fde3c8} .k-short{background:#faf0c4}
svg.chart{display:block;width:100%;height:auto;margin:6px 0 10px;overflow:visible}
svg.chart text{font-size:11px;fill:#1f2328;font-family:system-ui,sans-serif}
svg.chart text.lbl{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:10.5px}
svg.chart text.muted{fill:#656d76}
svg.chart .grid{stroke:#e6e9ed;stroke-width:1} svg.chart .axis{stroke:#8c959f;stroke-width:1}
svg.chart .gap{fill:#e15759;fill-opacity:.14}
.grid2{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:20px;align-items:start}
details.rank{border:1px solid var(--line);border-radius:8px;padding:0 16px 8px;margin:14px 0}
details.rank>summary{cursor:pointer;padding:10px 0;font-size:17px;font-weight:600}
details.rank>summary .muted{font-size:14px;font-weight:400}
details.more>summary{cursor:pointer;color:#0969da;margin:4px 0}
@media (max-width:800px){.grid2{grid-template-columns:1fr}}
@media print{details{display:block}}
"""

# optional: click a header to sort its table (numeric cells sort by data-v); the page needs none of it
JS = """
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var tb = th.closest('table').tBodies[0], i = th.cellIndex, asc = th.getAttribute('data-dir') !== 'asc';
    th.setAttribute('data-dir', asc ? 'asc' : 'desc');
    var key = function (r) {
      var c = r.cells[i], v = c ? c.getAttribute('data-v') : null;
      return v === null ? (c ? c.textContent : '') : parseFloat(v);
    };
    Array.prototype.slice.call(tb.rows).sort(function (a, b) {
      var x = key(a), y = key(b), d = typeof x === 'number' ? x - y : String(x).localeCompare(String(y));
      return asc ? d : -d;
    }).forEach(function (r) { tb.appendChild(r); });
  });
});
"""


def render(report):
    """The whole page for one report dict (single trace, or multi-rank with "reports")."""
    report = report if isinstance(report, dict) else {}
    if "reports" in report:
        title = _multi_title(report)
        body = _render_multi(report)
    else:
        path = (report.get("trace") or {}).get("path") or "trace"
        title = "cprof report: %s" % path.replace("\\", "/").rsplit("/", 1)[-1]
        body = _header(report) + _nav(SECTIONS) + _trace_body(report)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="generator" content="cprof"><title>%s</title><style>%s</style></head>'
            '<body><main>%s<footer class="muted small"><p>Generated by cprof from schema %s. '
            'Times are relative to the trace\'s time base.</p></footer></main>'
            '<script>%s</script></body></html>\n'
            % (esc(title), CSS, body, esc(report.get("schema") or "?"), JS))
