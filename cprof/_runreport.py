"""summary.json and report.md of the run/step Profiler. The numbers come from the C step store
(cprof._C.rs_stats / rs_buckets: one call per run, bin or bucket table); this module only
arranges them. Every undefined value is None (null in JSON), never NaN."""
import dataclasses
import math
import re
import statistics

from . import _C

INF = math.inf
DOMAINS = {0: "model", 1: "engine"}
OTHERS = "others"  # the subtotal of the buckets outside the canonical list


def _ordered(avgs, order):
    """Canonical buckets first, in their order, then the buckets outside the canonical list
    under their own names in the order first timed (issue 4: kept, never dropped), then
    "others": their sum (seed 003 compacts unknown keys into "others"; a subtotal, not one more
    bucket: the report's totals leave it out)."""
    keys = [b for b in order if b in avgs] + [b for b in avgs if b not in order]
    out = {k: avgs[k] for k in keys}
    unknown = [avgs[k] for k in keys if k not in order]
    if unknown:
        out[OTHERS] = (sum(v for v in unknown if v is not None)
                       if any(v is not None for v in unknown) else None)
    return out


# other spellings of canonical buckets that models and engines use (seed 003's profiler reads
# them as the canonical name)
BUCKET_ALIASES = {
    "attn.out_proj": "attn.o_proj", "attn.out_proj.lora": "attn.o_proj.lora",
    "attn.qknorm": "attn.qk_norm", "attn.q_k_norm": "attn.qk_norm",
    "attn.qkv": "attn.qkv_proj", "attn.attention": "attn.compute",
    "mlp.gate_up": "mlp.gate_up_proj", "mlp.down": "mlp.down_proj",
    "mlp.act": "mlp.silu_and_mul", "mlp.silu": "mlp.silu_and_mul",
    "sampling": "sampler", "sample": "sampler", "postprocess": "postproc",
}


def fold_bucket(name):
    """A bucket name as the reports key it: case folded, surrounding space removed and inner
    runs of white space (newlines too) made one space; nothing else changes, so "spec_verify"
    and "spec verify" stay two buckets (decision 127)."""
    return " ".join(name.split()).lower()


def canonical_bucket(domain, name):
    """(domain, canonical name) of a timed bucket, as seed 003's profiler keys them: the name
    folded (fold_bucket); a "model." / "engine." prefix names the domain ("engine.prefill" ->
    engine "prefill" when the rest is one of its canonical buckets; "model.moe_router", an
    unknown name, is the model's whatever timer recorded it); a canonical name of one domain
    only goes to that domain whatever timer recorded it ("decode" is the engine's). Other
    spellings (BUCKET_ALIASES: attn.out_proj, attn.qknorm, ...) are the canonical name.
    Unknown names: (the prefix's domain, else the timer's, None); they are reported under
    their folded names after the canonical buckets (decision 127)."""
    from .runprof import ENGINE_BUCKET_ORDER, MODEL_BUCKET_ORDER
    n = fold_bucket(name)
    for prefix, dom, order in (("model.", "model", MODEL_BUCKET_ORDER),
                               ("engine.", "engine", ENGINE_BUCKET_ORDER)):
        rest = n[len(prefix):]
        rest = BUCKET_ALIASES.get(rest, rest)
        if n.startswith(prefix) and rest in order and n not in order:
            return dom, rest
    n = BUCKET_ALIASES.get(n, n)
    in_model, in_engine = n in MODEL_BUCKET_ORDER, n in ENGINE_BUCKET_ORDER
    if in_model and in_engine:
        return domain, n
    if in_model:
        return "model", n
    if in_engine:
        return "engine", n
    for prefix, dom in (("model.", "model"), ("engine.", "engine")):
        if n.startswith(prefix) and len(n) > len(prefix):
            return dom, None
    return domain, None


def _bucket_avgs(owner, run_lo, run_hi, steps, kv_lo=-INF, kv_hi=INF, others=None):
    """Average ms per step of each bucket: the canonical ones in canonical order, then the
    others under their folded names (fold_bucket), in the order first timed; unknown buckets are kept, never dropped (issue 4). others, if given,
    also gets each unknown bucket's average by domain (summary.json meta.buckets_others_ms)."""
    from .runprof import ENGINE_BUCKET_ORDER, MODEL_BUCKET_ORDER
    avgs = {"model": {}, "engine": {}}
    for domain, name, total_ns, _ in _C.rs_buckets(owner, run_lo, run_hi, kv_lo, kv_hi):
        dom, canon = canonical_bucket(DOMAINS[domain], name)
        avg = total_ns / steps / 1e6 if steps else None
        key = canon if canon is not None else fold_bucket(name)
        if key == OTHERS:  # a bucket the user named "others" is one of them, not the subtotal
            key = "others (timed)"
        if canon is None and others is not None:
            others[dom][key] = avg
        prev = avgs[dom].get(key)
        avgs[dom][key] = avg if prev is None else (prev + avg if avg is not None else prev)
    return _ordered(avgs["model"], MODEL_BUCKET_ORDER), _ordered(avgs["engine"],
                                                                 ENGINE_BUCKET_ORDER)


def _stats(owner, run_lo, run_hi, kv_lo=-INF, kv_hi=INF):
    s = _C.rs_stats(owner, run_lo, run_hi, kv_lo, kv_hi)
    return {"steps": s["steps"], "mean_ms": s["mean_ms"], "p50_ms": s["p50_ms"],
            "p90_ms": s["p90_ms"], "p99_ms": s["p99_ms"], "min_ms": s["min_ms"],
            "max_ms": s["max_ms"], "tok_per_s": s["tok_per_s"], "tokens": s["tokens"],
            "time_ms": s["time_ms"]}


def _bins(owner, cfg, run_lo, run_hi):
    edges = list(cfg.kv_bins)
    out = []
    if edges[0] > 0:  # lengths below the first edge: a bin of their own, always listed so
        s = _stats(owner, run_lo, run_hi, 0.0, edges[0])  # every run has the same bins
        out.append({"lo": 0, "hi": edges[0], "label": f"[0, {edges[0]})", **s})
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        s = _stats(owner, run_lo, run_hi, lo, hi if hi is not None else INF)
        label = f"[{lo}, {hi})" if hi is not None else f"[{lo}, inf)"
        out.append({"lo": lo, "hi": hi, "label": label, **s})
    return out


def _mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "n": 0}
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None  # sample std (n - 1)
    return {"mean": mean, "std": std, "n": len(values)}


def build_summary(prof):
    from .runprof import PERCENTILE_METHOD, _iso
    cfg = prof.cfg
    owner = prof._owner
    runs = [r for r in prof.runs if r.end_time is not None]
    measured = [r for r in runs if not r.warmup]
    first = cfg.warmup_runs
    # a run still open (always the last) is not reported, nor are its steps
    last = len(prof.runs) - (1 if prof._run is not None else 0)
    # measured runs are those at index >= warmup_runs: one contiguous selection
    stats = _stats(owner, first, last)
    others = {"model": {}, "engine": {}}
    model, engine = _bucket_avgs(owner, first, last, stats["steps"], others=others)
    per_run = []
    for r in runs:
        rs = _stats(owner, r.index, r.index + 1)
        rm, re_ = _bucket_avgs(owner, r.index, r.index + 1, rs["steps"])
        per_run.append({
            "meta": {**r.extra,
                     "index": r.index, "label": r.label, "bsz": r.bsz, "warmup": r.warmup,
                     "steps_discarded": r.steps_discarded,
                     "steps_unmeasured": r.steps_unmeasured,
                     "steps_overlapped": r.steps_overlapped,
                     "timer_error": r.timer_error,
                     "start_time": _iso(r.start_time), "end_time": _iso(r.end_time),
                     "wall_s": r.end_time - r.start_time},
            "stats": rs,
            "buckets_model_avg_ms": rm,
            "buckets_engine_avg_ms": re_,
            "decode_length_buckets": _bins(owner, cfg, r.index, r.index + 1),
        })
    measured_runs = [p for p in per_run if not p["meta"]["warmup"]]
    agg = {"n_runs": len(measured_runs)}
    for key in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "tok_per_s"):
        agg[key] = _mean_std([p["stats"][key] for p in measured_runs])
    for dom in ("model", "engine"):
        names = []
        for p in measured_runs:
            names += [n for n in p[f"buckets_{dom}_avg_ms"] if n not in names]
        agg[f"buckets_{dom}_avg_ms"] = {
            n: _mean_std([p[f"buckets_{dom}_avg_ms"].get(n, 0.0) for p in measured_runs])
            for n in names}
    if not prof.runs:
        note = "no runs were recorded (begin_run was never called)"
    elif not runs:
        note = (f"run {prof._run.index} is still open and no run has ended: nothing is "
                "reported; call end_run() before save_all()")
    elif not measured:
        note = (f"every run was a warmup run ({len(runs)} run(s), warmup_runs="
                f"{cfg.warmup_runs}): nothing is aggregated; record more runs or lower "
                "warmup_runs")
    elif not stats["steps"]:
        left = sum(r.steps_discarded for r in measured)
        unmeasured = sum(r.steps_unmeasured for r in measured)
        why = (f": {left} step(s) raised" if left else "") + (
            f"{', and ' if left else ': '}{unmeasured} could not be timed" if unmeasured else "")
        note = (f"the {len(measured)} measured run(s) have no measured step{why}; nothing is "
                "aggregated: time steps with step_timing_ctx() inside begin_run() / end_run()")
    else:
        note = None
    return {
        "meta": {
            "rank": prof.rank, "world_size": prof.world_size, "world": prof.world_size,
            "config": dataclasses.asdict(cfg),
            "output_dir": prof.output_dir, "run_name": prof.run_name,
            "start_time": _iso(prof.start_time),
            "cprof_version": _C.__version__,
            "timing": "cuda_events" if prof._cuda else "host_clock",
            "timing_note": prof._timing_note,
            # CUDA timer boundaries on one stream within this many ns share one event
            "timer_boundary_share_ns": (_C.timers_counts()["share_ns"] if prof._cuda
                                        else None),
            "percentile_method": PERCENTILE_METHOD,
            "runs_recorded": len(runs), "runs_measured": len(measured),
            "warmup_runs": cfg.warmup_runs, "num_total_runs": cfg.num_total_runs,
            "note": note,
            # steps that raised inside step_timing_ctx (not measured), over the reported runs
            "steps_discarded": sum(r.steps_discarded for r in runs),
            # steps whose CUDA timers could not be read (an error from CUDA): in no figure
            "steps_unmeasured": sum(r.steps_unmeasured for r in runs),
            # steps open while another thread had a step of another Profiler open: measured,
            # but their bucket times may be short (one timer gate per process, decision 125)
            "steps_overlapped": sum(r.steps_overlapped for r in runs),
            # the buckets outside the canonical list (listed after the canonical ones in the
            # bucket tables): each one's avg ms per step, by domain
            "buckets_others_ms": {dom: dict(v) for dom, v in others.items()},
        },
        "stats": stats,
        "buckets_model_avg_ms": model,
        "buckets_engine_avg_ms": engine,
        "runs": per_run,
        "runs_aggregate": agg,
        "decode_length_buckets": _bins(owner, cfg, first, last),
    }


def _text(v):
    """Text for a report.md table cell: "|" escaped (GFM splits cells on it even inside code
    spans) and line breaks made spaces (a newline ends the row)."""
    return " ".join(str(v).splitlines()).replace("|", "\\|")


def _code(v):
    """A name as a code span in a table cell, whatever backticks it holds: the fence is
    longer than any run of them in it ("a``b" ended a two-backtick fence early)."""
    t = _text(v)
    if "`" not in t:
        return f"`{t}`"
    fence = "`" * (max(len(run) for run in re.findall("`+", t)) + 1)
    return f"{fence} {t} {fence}"


def _f(v, digits=3):
    return "—" if v is None else f"{v:.{digits}f}"


def _pm(d, digits=3):
    if d["mean"] is None:
        return "—"
    return f"{d['mean']:.{digits}f} ± {d['std']:.{digits}f}" if d["std"] is not None else \
        f"{d['mean']:.{digits}f}"


def _bucket_table(title, avgs, step_mean, others=None):
    lines = [f"## {title}", ""]
    if not avgs:
        return lines + ["No bucket was timed (enable the domain's profiling and time regions "
                        "inside steps).", ""]
    lines += ["| Bucket | Avg ms/step | Share of step |", "|---|---:|---:|"]
    for name, v in avgs.items():
        share = f"{100 * v / step_mean:.1f}%" if v is not None and step_mean else "—"
        label = "*others (subtotal of the rows above it outside the canonical list)*" \
            if name == OTHERS else _code(name)
        lines.append(f"| {label} | {_f(v)} | {share} |")
    total = sum(v for k, v in avgs.items() if v is not None and k != OTHERS)
    share = f"{100 * total / step_mean:.1f}%" if step_mean else "—"
    lines += [f"| **total** | {_f(total)} | {share} |", ""]
    if step_mean and total > step_mean * 1.001:
        lines += [f"The buckets add up to more than the step ({100 * total / step_mean:.1f}%): "
                  "some of them are timed inside others (nested timers each count their own "
                  "time), so the total counts that time more than once. Nesting `engine.sampling` "
                  "around an `attach_engine`'d `sampler`, say, times sampling twice.", ""]
    if others:
        lines += ["Outside the canonical bucket list (listed last): " + ", ".join(
            _code(n) for n in others) + ".", ""]
    return lines


def render_markdown(s):
    m, st = s["meta"], s["stats"]
    lines = [f"# Profiler report: {_text(m['run_name'])}", "",
             f"Rank {m['rank']} of {m['world_size']}; {m['runs_recorded']} run(s) recorded, "
             f"{m['runs_measured']} measured (warmup runs: {m['warmup_runs']}). Timing: "
             f"{m['timing']}. Started {m['start_time']}.", ""]
    if m.get("timing_note"):
        lines += [f"> {m['timing_note']}", ""]
    if m["note"]:
        lines += [f"> **Note:** {m['note']}.", ""]
    if m.get("steps_discarded"):
        lines += [f"> {m['steps_discarded']} step(s) raised inside step_timing_ctx and are not "
                  "measured (not in any figure below).", ""]
    if m.get("steps_overlapped"):
        lines += [f"> **{m['steps_overlapped']} step(s) overlapped a step of another Profiler "
                  "on another thread**: their latencies are right, but their bucket times "
                  "may be short (the bucket timers have one gate per process); step "
                  "Profilers on different threads one after the other for exact buckets.", ""]
    if m.get("steps_unmeasured"):
        why = next((r["meta"]["timer_error"] for r in s.get("runs", ())
                    if r["meta"].get("timer_error")), None)
        lines += [f"> **{m['steps_unmeasured']} step(s) could not be timed**"
                  + (f" ({why})" if why else "") + ": they are not in any figure below.", ""]
    lines += ["## Global summary", "",
              "| Steps | Mean ms | P50 ms | P90 ms | P99 ms | Tok/s | Tokens | Time ms |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|",
              f"| {st['steps']} | {_f(st['mean_ms'])} | {_f(st['p50_ms'])} | "
              f"{_f(st['p90_ms'])} | {_f(st['p99_ms'])} | {_f(st['tok_per_s'], 1)} | "
              f"{st['tokens']} | {_f(st['time_ms'])} |", "",
              f"Percentiles: {m['percentile_method']}.", ""]
    others = m.get("buckets_others_ms") or {}
    lines += _bucket_table("Model buckets", s["buckets_model_avg_ms"], st["mean_ms"],
                           others.get("model"))
    lines += _bucket_table("Engine buckets", s["buckets_engine_avg_ms"], st["mean_ms"],
                           others.get("engine"))
    lines += ["## Per-run overview", "",
              "| Run | Label | Bsz | Warmup | Steps | Tokens | Mean ms | P90 ms | Tok/s |",
              "|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in s["runs"]:
        rm, rs = r["meta"], r["stats"]
        lines.append(f"| {rm['index']} | {_text(rm['label'] or '')} | "
                     f"{'' if rm['bsz'] is None else rm['bsz']} | "
                     f"{'yes' if rm['warmup'] else 'no'} | {rs['steps']} | {rs['tokens']} | "
                     f"{_f(rs['mean_ms'])} | {_f(rs['p90_ms'])} | {_f(rs['tok_per_s'], 1)} |")
    if not s["runs"]:
        lines.append("| — | | | | | | | | |")
    a = s["runs_aggregate"]
    lines += ["", f"## Across-run mean ± std (sample std over {a['n_runs']} measured run(s))",
              "",
              "| Metric | Mean ± std |", "|---|---:|"]
    for key, label in (("mean_ms", "Mean ms"), ("p50_ms", "P50 ms"), ("p90_ms", "P90 ms"),
                       ("p99_ms", "P99 ms"), ("tok_per_s", "Tok/s")):
        lines.append(f"| {label} | {_pm(a[key], 1 if key == 'tok_per_s' else 3)} |")
    for dom in ("model", "engine"):
        b = a[f"buckets_{dom}_avg_ms"]
        if b:
            lines += ["", f"| {dom.capitalize()} bucket | Avg ms/step, mean ± std |", "|---|---:|"]
            lines += [f"| {_code(n)} | {_pm(v)} |" for n, v in b.items()]
    lines += ["", "## Decode-length buckets (KV length at step start)", "",
              "| KV length | Steps | Mean ms | P50 ms | P90 ms | P99 ms | Tok/s |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for b in s["decode_length_buckets"]:
        lines.append(f"| {b['label']} | {b['steps']} | {_f(b['mean_ms'])} | {_f(b['p50_ms'])} | "
                     f"{_f(b['p90_ms'])} | {_f(b['p99_ms'])} | {_f(b['tok_per_s'], 1)} |")
    return "\n".join(lines) + "\n"
