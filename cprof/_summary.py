"""Formatting of the per-range summary that the C core computes (Snapshot.summary())."""
from ._report_format import printable


def _ms(ns):
    return f"{ns / 1e6:.3f}"


def format_summary(rows, top=15, title="CPU ranges"):
    """A fixed-width text table of summary rows (heaviest total first)."""
    rows = list(rows)[:top] if top else list(rows)
    if not rows:
        return f"{title}: none recorded"
    # one row per line, and no control character reaches the terminal
    names = [printable(r["name"]) for r in rows]
    width = min(max(len(n) for n in names), 60)
    head = (f"{'Name':<{width}}  {'Calls':>7}  {'Total ms':>10}  {'Self ms':>10}  "
            f"{'Avg ms':>9}  {'Max ms':>9}")
    lines = [title, head, "-" * len(head)]
    for r, name in zip(rows, names):
        name = name if len(name) <= width else name[: width - 1] + "…"
        avg = r["total_ns"] / r["count"] if r["count"] else 0
        lines.append(
            f"{name:<{width}}  {r['count']:>7}  {_ms(r['total_ns']):>10}  "
            f"{_ms(r['self_ns']):>10}  {_ms(avg):>9}  {_ms(r['max_ns']):>9}"
        )
    return "\n".join(lines)
