"""Diagnoses in words, each with its evidence, from a report built in C (trace_analyse.c).

Only aggregates are read here (no per-event loop): the thresholds below are the whole rule
set, documented in docs/usage.md ("cprof report: diagnoses").
"""
import statistics

LAUNCH_UTIL_PCT = 60.0       # launch-bound: the GPU is busy less than this share of the window
LAUNCH_KERNEL_US = 20.0      # ... its kernels average less than this
LAUNCH_HOST_SHARE = 0.5      # ... and at least half its idle time waits on the host while it
                             # launches: in gaps the next work's launch call fills 3% or more
                             # of (trace_gaps.c; not a host busy elsewhere: data loading, I/O,
                             # a Python loop between steps)
SYNC_SHARE = 0.10            # sync stalls: waits or sync-caused idle above 10% of the window
SMALL_COPIES = 10            # many small copies: at least this many below small_copy_bytes
IDLE_UTIL_PCT = 50.0         # GPU mostly idle (not launch-bound): busy below this share
STRAGGLER_RATIO = 1.10       # a rank whose median step is 10% above the ranks' median


def _fmt_us(v):
    v = float(v)
    if v >= 1e6:
        return f"{v / 1e6:.2f} s"
    if v >= 1e3:
        return f"{v / 1e3:.2f} ms"
    return f"{v:.1f} µs"


def _fmt_bytes(n):
    """SI units (1 MB = 10^6 bytes), as the GB/s beside it and the HTML report use."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


HOST_DEVICE = ("HtoD", "DtoH")


def small_copy_limit(r):
    """The small-copy threshold the report was built with (--small-copy-bytes), in words."""
    n = (r.get("options") or {}).get("small_copy_bytes", 65536)
    return f"{int(n):,} bytes" if n < 1000 else f"{int(n):,} bytes ({_fmt_bytes(n)})"


def _d(id_, title, severity, summary, **evidence):
    return {"id": id_, "title": title, "severity": severity, "summary": summary,
            "evidence": evidence}


SKIP_REASONS = (("no_ts", 'without "ts"'), ("no_dur", 'complete ("X") without "dur"'),
                ("negative_dur", 'with a negative "dur"'),
                ("bad_name", 'complete ("X") whose "name" is missing or not a string'),
                ("duplicate", "exact repeats of an earlier event (same ph, name, ts, dur, pid, "
                 "tid, ids and text)"))


def skipped_text(r):
    """How many events the reader left out of the figures and why (the trace's "skipped"
    counts), in words; None when it left none out."""
    sk = r.get("trace", {}).get("skipped") or {}
    if not sk.get("total"):
        return None
    why = "; ".join(f"{sk[k]:,} {words}" for k, words in SKIP_REASONS if sk.get(k))
    return (f"{sk['total']:,} event{'s' if sk['total'] != 1 else ''} skipped ({why}): no "
            "figure of this report counts them")


def rank_problem(r):
    """distributedInfo's rank or world size that the reader refused (not a whole number >= 0,
    >= 1 for the world size; a string of digits is read as the number), in words; None when
    there is none."""
    tr = r.get("trace", {})
    bits = [f"distributedInfo.{k} is {tr[k + '_invalid']}, not a whole number >= {low}"
            for k, low in (("rank", 0), ("world_size", 1)) if tr.get(k + "_invalid")]
    if tr.get("distributed_info_invalid"):
        bits.append(f"distributedInfo is {tr['distributed_info_invalid']}, not an object "
                    "with rank and world_size")
    if not bits:
        return None
    no_rank = tr.get("rank_invalid") or tr.get("distributed_info_invalid")
    return "; ".join(bits) + (": the trace is read as one without a rank (listed on its "
                              "own, compared with no rank)" if no_rank else
                              ": the world size is left out")


# the losses outside cprof.dropped: (key in trace.losses, diagnosis id, title, severity, what
# is counted, what it means and what to do)
_LOSSES = (
    ("names_refused", "names_refused", "Names were lost: cprof's name table was full", "high",
     "name", "could not be stored, so ranges, operator shapes or ProfilerStep#N step names are "
     "missing or counted together under \"[cprof: name table full]\" (a step that lost its "
     "name is not in the steps table). The table keeps every distinct name for the process's "
     "life: use fixed range names (an id in the name makes one per call), record_shapes only "
     "where needed (each distinct shape and scalar argument is a name), or a long schedule in "
     "a fresh process (each step is a name)."),
    ("op_shape_errors", "op_shapes_lost", "Operator shapes were lost", "medium",
     "operator call", "recorded without input shapes (the name table was full, or torch's "
     "inputs could not be read): grouping by input shape and the Input Dims of those ops are "
     "incomplete."),
    ("allocation_events_dropped", "allocation_events_dropped", "Allocation events were dropped",
     "high", "allocation event", "past the window's limit were not recorded: the memory track "
     "ends early and memory figures taken from it (peaks, the memory_track table) cover only "
     "the first part of the window. Profile a shorter window with profile_memory."),
)


def loss_diagnoses(losses):
    """A diagnosis for each loss the trace's metadata records outside cprof.dropped (the
    report's trace.losses, read in C: trace_analyse.c other_losses), with its count."""
    out = []
    for key, ident, title, severity, noun, text in _LOSSES:
        n = losses.get(key)
        if n:
            out.append(_d(ident, title, severity,
                          f"{n:,} {noun}{'s' if n != 1 else ''} {text}", **{key: n}))
    return out


def gap_cpu_name(g):
    """What the CPU ran during gap g: the innermost event covering half of it or more (the
    DataLoader range, not the ProfilerStep around it), else the one covering most (siblings
    are not nested: the shortest is not the answer)."""
    cpu = g.get("cpu") or []
    if not cpu:
        return "nothing recorded"
    half = [c for c in cpu if 2 * c["overlap_us"] >= g["dur_us"]]
    if half:
        return min(half, key=lambda c: c["dur_us"])["name"]
    return min(cpu, key=lambda c: (-c["overlap_us"], c["dur_us"]))["name"]


def diagnose(r):
    """The diagnoses of one trace's report, most severe first."""
    out = []
    tr = r.get("trace", {})
    win = max(r.get("window", {}).get("dur_us", 0.0), 1e-9)
    dropped = {k: v for k, v in (tr.get("dropped") or {}).items() if v}
    if dropped:
        out.append(_d("dropped", "Records were dropped while collecting", "high",
                      "The trace is missing records (" + ", ".join(
                          f"{k}: {v}" for k, v in dropped.items()) + "): totals below are "
                      "lower bounds. Raise buffer_size_mb (CPU ranges) or gpu_buffer_mb (CUPTI's "
                      "buffers), or shorten the window.", **dropped))
    out.extend(loss_diagnoses(tr.get("losses") or {}))
    skipped = skipped_text(r)
    if skipped:
        sk = tr["skipped"]
        out.append(_d("skipped_events", "Events the report could not use", "high",
                      f"{skipped[0].upper()}{skipped[1:]}. " + (
                          "The trace repeats events (written twice, or two copies joined); "
                          "each is counted once." if sk["total"] == sk.get("duplicate") else
                          "The trace is damaged or was written by a tool that leaves these "
                          "fields out; totals, busy time and the window may be lower than the "
                          "program's."),
                      **{k: sk[k] for k in ("total",) + tuple(k for k, _ in SKIP_REASONS)
                         if sk.get(k)}))
    bad = rank_problem(r)
    if bad:
        out.append(_d("bad_rank", "distributedInfo holds no usable rank", "medium",
                      f"{bad}. Fix the writer (a rank is a whole number "
                      ">= 0, a world size one >= 1) or name the rank traces' files apart.",
                      **{k: tr[k] for k in ("rank_invalid", "world_size_invalid",
                                            "distributed_info_invalid") if k in tr}))
    lk = r.get("links") or {}
    if lk.get("gpu_ops_without_correlation"):
        n, tot = lk["gpu_ops_without_correlation"], lk.get("gpu_ops", 0)
        out.append(_d(
            "unlinked_gpu_ops", "GPU work not linked to its launches", "medium",
            f"{n:,} of the {tot:,} GPU ops carry no args.correlation and no ac2g flow arrow "
            "joins them to a launch call, so their time counts toward no step, range or "
            "module (it is in unattributed_gpu_us; the kernel, busy and idle figures are "
            "whole). The writer of this trace left the links out: torch.profiler and cprof "
            "write both.", gpu_ops=tot, without_correlation=n))
    if lk.get("unpaired_begin_end"):
        n = lk["unpaired_begin_end"]
        out.append(_d(
            "unpaired_begin_end", "Begin/end events left unpaired", "medium",
            f"{n:,} duration event{'s' if n != 1 else ''} written as \"B\" / \"E\" could not "
            "be paired (an E with no B open on its thread, a B never ended, or a B without a "
            "name): not analysed, so a step or range written that way is missing from the "
            "tables. Paired B / E events are read as ranges.", unpaired=n))
    if tr.get("partial"):
        out.append(_d("partial", "The trace is partial", "medium",
                      f"Collection ended early ({tr.get('end', 'unknown')}); the last step may "
                      "be incomplete.", end=tr.get("end", "unknown")))
    kt = r.get("kernels_total", {})
    avg_kernel = kt.get("total_us", 0.0) / kt["instances"] if kt.get("instances") else 0.0
    launches = r.get("launches", {})
    launch_bound = False
    for dev in r.get("devices", []):
        idle = dev["idle"]
        itot = max(idle["total_us"], 1e-9)
        # the gaps where the next op's launch had not returned and was under way (its call
        # fills 3% of the gap or more): what the words call waiting for the CPU to launch
        # (short gaps had their work queued; unknown ones have no launch; a host gap the
        # launch fills less of is the CPU busy elsewhere: data loading, say, a gpu_idle case)
        host_share = idle.get("host_launching_us", idle["host_us"]) / itot
        if (dev["util_pct"] < LAUNCH_UTIL_PCT and 0 < avg_kernel < LAUNCH_KERNEL_US
                and host_share >= LAUNCH_HOST_SHARE):
            launch_bound = True
            out.append(_d(
                "launch_bound", f"GPU {dev['device']} is launch-bound",
                "high" if dev["util_pct"] < 30 else "medium",
                f"GPU {dev['device']} is busy {dev['util_pct']:.1f}% of the "
                f"{_fmt_us(win)} window; its {dev['kernels']:,} kernels average "
                f"{avg_kernel:.1f} µs while a launch call takes "
                f"{launches.get('avg_us', 0.0):.1f} µs on the CPU, and "
                f"{100 * host_share:.0f}% of the idle time is the GPU waiting for the CPU to "
                "launch work. Fewer, larger kernels help: torch.compile (mode="
                "\"reduce-overhead\" uses CUDA graphs), CUDA graphs, fused ops, larger batches.",
                device=dev["device"], util_pct=dev["util_pct"], kernels=dev["kernels"],
                avg_kernel_us=round(avg_kernel, 3), launch_calls=launches.get("calls", 0),
                avg_launch_us=round(launches.get("avg_us", 0.0), 3),
                idle_waiting_on_host_pct=round(100 * host_share, 1)))
    sync = r.get("sync", {})
    sync_idle = sum(d["idle"]["sync_us"] for d in r.get("devices", []))
    if sync.get("total_us", 0) >= SYNC_SHARE * win or sync_idle >= SYNC_SHARE * win:
        names = ", ".join(f"{s['name']} ×{s['calls']}" for s in sync.get("by_name", [])[:3])
        out.append(_d(
            "sync_stalls", "Synchronisation stalls", "high" if sync_idle >= 0.25 * win
            else "medium",
            f"The CPU waits for the GPU {sync.get('calls', 0):,} times for "
            f"{_fmt_us(sync.get('total_us', 0))} ({100 * sync.get('total_us', 0) / win:.1f}% "
            f"of the window; {names or 'CUPTI sync records'}), the GPU idle "
            f"{_fmt_us(sync_idle)} of that time. Look for .item(), .cpu(), "
            ".tolist(), printing tensors, torch.cuda.synchronize() or blocking copies inside "
            "the step; keep values on the GPU or sync once per step.",
            sync_calls=sync.get("calls", 0), sync_us=sync.get("total_us", 0),
            sync_pct_of_window=round(100 * sync.get("total_us", 0) / win, 1),
            gpu_idle_after_sync_us=round(sync_idle, 3)))
    pageable = [m for m in r.get("memory", []) if m.get("pageable")]
    if pageable:
        n = sum(m["pageable"] for m in pageable)
        out.append(_d(
            "pageable_copies", "Copies from pageable host memory", "medium",
            f"{n:,} host-device copies use pageable memory "
            f"({', '.join(m['kind'] for m in pageable)}): they are staged through a driver "
            "buffer, run at a fraction of the bandwidth and block the CPU. Pin the host "
            "tensors (pin_memory=True in the DataLoader, tensor.pin_memory()) and copy with "
            "non_blocking=True.", pageable_copies=n,
            kinds=",".join(m["kind"] for m in pageable)))
    # host-device copies only: the advice (batch them, keep the data on the GPU) is about
    # those; a small device-to-device copy has its data on the GPU already
    small = [m for m in r.get("memory", []) if m.get("small") and m["kind"] in HOST_DEVICE]
    nsmall = sum(m["small"] for m in small)
    if nsmall >= SMALL_COPIES:
        limit = small_copy_limit(r)
        out.append(_d(
            "small_copies", "Many small host-device copies", "medium",
            f"{nsmall:,} host-device copies ("
            + ", ".join(f"{m['kind']}: {m['small']:,}" for m in small)
            + f") move less than {limit} each; each costs a launch and a "
            "synchronisation point. Batch them into one tensor, or keep the data on the GPU.",
            small_copies=nsmall, kinds=",".join(m["kind"] for m in small),
            small_copy_bytes=(r.get("options") or {}).get("small_copy_bytes", 65536)))
    comp = r.get("compiled", {})
    if comp.get("nested"):
        out.append(_d(
            "graph_breaks", "Graph breaks in compiled code", "medium",
            f"{comp['nested']} of {comp['regions']} \"Torch-Compiled Region\" ranges run nested "
            f"inside another (depth up to {comp['max_depth']}): torch.compile broke the graph "
            "there (or code was skipped or disabled). Find the cause with "
            "TORCH_LOGS=graph_breaks or torch._dynamo.explain(fn)(*args).",
            compiled_regions=comp["regions"], nested_regions=comp["nested"],
            max_depth=comp["max_depth"], compiled_functions=comp.get("compiled_functions", 0)))
    if not launch_bound:
        for dev in r.get("devices", []):
            if dev["util_pct"] < IDLE_UTIL_PCT and r.get("gaps"):
                g = max((g for g in r["gaps"] if g["device"] == dev["device"]),
                        key=lambda g: g["dur_us"], default=None)
                if g is None:
                    continue
                cpu = gap_cpu_name(g)
                out.append(_d(
                    "gpu_idle", f"GPU {dev['device']} is idle most of the window", "medium",
                    f"GPU {dev['device']} is busy {dev['util_pct']:.1f}% of the window; idle "
                    f"{_fmt_us(dev['idle']['total_us'])}: waiting on the host "
                    f"{_fmt_us(dev['idle']['host_us'])} (of it, the CPU launching the next work "
                    f"{_fmt_us(dev['idle'].get('host_launching_us', 0.0))}), after syncs "
                    f"{_fmt_us(dev['idle']['sync_us'])}, cause unknown (no launch in the "
                    f"trace to judge by) {_fmt_us(dev['idle'].get('unknown_us', 0.0))}. "
                    "The largest gap is "
                    f"{_fmt_us(g['dur_us'])} while the CPU ran {cpu!r}.",
                    device=dev["device"], util_pct=dev["util_pct"],
                    largest_gap_us=g["dur_us"], cpu_during_gap=cpu))
    for m in r.get("memory_track", []):
        if m.get("grows_every_step"):
            out.append(_d(
                "memory_growth", f"{m['series'].split(' (')[0]} grows every step", "medium",
                f"{m['series']} is higher at each step's start than at the one before: "
                f"{m['steps_growing']} increases over {m['steps']} step starts, "
                f"+{_fmt_bytes(m['per_step_bytes'])} per step, {_fmt_bytes(m['start_bytes'])} "
                f"to {_fmt_bytes(m['end_bytes'])} over the window. Memory that grows step "
                "after step is a leak (tensors kept across steps: a loss appended to a list "
                "without .item() or .detach(), outputs that hold their autograd graph, a "
                "growing cache) or a cache still warming up; profile more steps, and if it "
                "keeps growing, find what holds it (a CUDA memory snapshot with "
                "profile_memory, or gc.get_referrers).",
                series=m["series"], step_starts=m["steps"],
                steps_growing=m["steps_growing"], per_step_bytes=round(m["per_step_bytes"]),
                growth_bytes=m["growth_bytes"], peak_bytes=m["peak_bytes"]))
    if not r.get("devices"):
        out.append(_d("cpu_only", "No GPU activity in this trace", "info",
                      "The trace holds CPU ranges only (no GPU was used or collected); the "
                      "tables show CPU time.", events=tr.get("events", 0)))
    order = {"high": 0, "medium": 1, "info": 2}
    out.sort(key=lambda d: order[d["severity"]])
    return out


def _collective_us(r):
    c = r.get("collectives") or {}
    return c.get("total_us", 0.0) if c.get("kernels") else c.get("host_us", 0.0)


def _rank_rows(reports):
    """One row per rank: the reports that carry the same rank (the windows of one process: a
    schedule with repeat, several ProfilerContexts) pooled; a report without a rank (a
    torch.profiler trace outside torch.distributed) is a row of its own with rank None."""
    groups, order = {}, []
    for i, r in enumerate(reports):
        rank = r["trace"].get("rank")
        key = ("rank", rank) if rank is not None else ("trace", i)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)
    order.sort(key=lambda k: (k[0] != "rank", k[1]))
    rows = []
    for key in order:
        rs = groups[key]
        steps = [s["cpu_us"] for r in rs for s in r.get("steps", [])]
        devs = [(r.get("window", {}).get("dur_us", 0.0), d) for r in rs
                for d in r.get("devices", [])]
        paths = list(dict.fromkeys(r["trace"]["path"] for r in rs))
        # NCCL kernels; else the CPU process groups' ranges (gloo: a range lasts as long as
        # its collective, the wait for the other ranks included)
        coll = sum(_collective_us(r) for r in rs)
        rows.append({
            "rank": key[1] if key[0] == "rank" else None,
            "path": paths[0] + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else ""),
            "traces": len(rs),
            "steps": len(steps),
            "step_med_us": round(statistics.median(steps), 3) if steps else None,
            "step_mean_us": round(statistics.fmean(steps), 3) if steps else None,
            "step_max_us": round(max(steps), 3) if steps else None,
            # busy time over window time, pooled: a long window weighs more than a short one
            "gpu_busy_pct": round(100.0 * sum(d["busy_us"] for _, d in devs)
                                  / sum(w for w, _ in devs), 2)
            if devs and sum(w for w, _ in devs) > 0 else
            (0.0 if devs else None),
            "collective_us": round(coll, 3),
            # collective time per step: a rank that others wait for spends least in them
            "collective_step_us": round(coll / len(steps), 3) if steps else None,
            "straggler": False,
        })
    return rows


def rank_verdict(rows, diags):
    """The line printed under the rank table when no cross-rank diagnosis speaks: a verdict
    only where at least two ranks have steps."""
    if diags:
        return None
    if sum(1 for r in rows if r["rank"] is not None and r.get("step_med_us")) >= 2:
        return "no straggler"
    return ("no steps to compare: no trace has step ranges (torch's ProfilerStep#N, or "
            "--step-range NAME)" if not any(r.get("steps") for r in rows) else
            "no steps to compare across ranks: fewer than two ranks have steps")


def _step_span(nums):
    nums = sorted(nums)
    return f"step {nums[0]}" if len(nums) == 1 else f"steps {nums[0]}-{nums[-1]}"


def _different_steps(reports, known, diags):
    """Ranks whose traces hold different steps (other schedules, a rank that stopped early):
    their step times are compared all the same, but the verdict compares unlike things, so
    it says so (the seed audit: steps 0-1 against 1-4 read as "no straggler")."""
    nums = {}
    for r in reports:
        rank = r["trace"].get("rank")
        if rank is not None:
            nums.setdefault(rank, set()).update(
                int(s["step"]) for s in r.get("steps", []) if s.get("step") is not None)
    ranks = [r["rank"] for r in known if nums.get(r["rank"])]
    if len(ranks) < 2 or len({frozenset(nums[k]) for k in ranks}) < 2:
        return
    spans = "; ".join(f"rank {k}: {_step_span(nums[k])}" for k in ranks)
    diags.append(_d(
        "different_steps", "Ranks profiled different steps", "medium",
        f"The ranks' traces hold different steps ({spans}), so their step times compare "
        "different iterations: a straggler verdict (or its absence) may reflect warm-up or "
        "phase rather than a slow rank. Give every rank the same schedule and stop them at "
        "the same step.", ranks=len(ranks)))


def rank_table(reports):
    """Per-rank step times and GPU figures, stragglers flagged; plus cross-rank diagnoses.

    Two ways a rank straggles. Unsynchronised ranks: its median step is STRAGGLER_RATIO above
    the ranks' median. Ranks that synchronise every step (a collective per step) all take
    the same step time, so the slow rank shows instead in the work it does outside the
    collectives (step minus collective time per step): the others wait for it inside theirs."""
    rows = _rank_rows(reports)
    diags = []
    known = [r for r in rows if r["rank"] is not None and r["step_med_us"]]
    if len(known) < 2:
        if len(rows) >= 2 and any(r["rank"] is None for r in rows):
            diags.append(_d(
                "no_rank_info", "Traces without rank information", "info",
                f"{sum(r['rank'] is None for r in rows)} of the {len(rows)} traces carry no "
                "rank (no distributedInfo: torch.distributed was not initialised when they "
                "were written), so they are listed side by side but not compared as ranks.",
                traces=len(rows)))
        ranked = [r for r in rows if r["rank"] is not None]
        if len(ranked) >= 2:  # ranks, but fewer than two with steps: no verdict either way
            bare = [r["rank"] for r in ranked if not r["step_med_us"]]
            diags.append(_d(
                "no_steps_to_compare", "No steps to compare across ranks", "info",
                f"{len(bare)} of the {len(ranked)} ranks have no steps (rank"
                f"{'s' if len(bare) != 1 else ''} {', '.join(str(b) for b in bare)}): no steps to "
                "compare, so there is no verdict on stragglers. Steps are torch's ProfilerStep#N "
                "ranges (a profiler schedule with prof.step()), or the ranges --step-range "
                "NAME names.", ranks=len(ranked), ranks_without_steps=len(bare)))
        return rows, diags
    _different_steps(reports, known, diags)
    typical = statistics.median(r["step_med_us"] for r in known)
    # collective time per step where at least two ranks show some: a rank that spends more of
    # its step in collectives than the ranks' median waits for the others there, so its
    # longer step is not one they wait for (decision 172)
    has_coll = sum(1 for r in known if r["collective_step_us"]) >= 2
    typical_coll = (statistics.median(r["collective_step_us"] or 0.0 for r in known)
                    if has_coll else None)
    for row in known:
        if typical and row["step_med_us"] / typical >= STRAGGLER_RATIO:
            if has_coll and (row["collective_step_us"] or 0.0) > typical_coll:
                continue
            row["straggler"] = True
    slow = [r for r in known if r["straggler"]]
    if slow:
        worst = max(slow, key=lambda r: r["step_med_us"])
        diags.append(_d(
            "stragglers", "Straggler rank" + ("s" if len(slow) > 1 else ""), "high",
            f"Rank {worst['rank']}'s median step takes {_fmt_us(worst['step_med_us'])}, "
            f"{worst['step_med_us'] / typical:.2f}x the ranks' median ({_fmt_us(typical)})"
            + (f"; straggling ranks: {', '.join(str(r['rank']) for r in slow)}" if
               len(slow) > 1 else "")
            + (f". It spends {_fmt_us(worst['collective_step_us'] or 0.0)} per step in "
               f"collectives (the ranks' median {_fmt_us(typical_coll)}): it is not "
               "waiting for the others" if has_coll else "")
            + ". Check its input pipeline, data sizes, host load and GPU clocks.",
            mode="step_time", straggler_ranks=",".join(str(r["rank"]) for r in slow),
            worst_rank=worst["rank"], worst_step_med_us=worst["step_med_us"],
            ranks_median_step_us=round(typical, 3),
            ratio=round(worst["step_med_us"] / typical, 3)))
        return rows, diags
    # synchronised ranks: compare the work outside collectives
    if sum(1 for r in known if r["collective_step_us"]) < 2:
        # equal steps, but no time in collectives to tell whether some ranks wait for
        # another inside them: no verdict, not "no straggler"
        diags.append(_d(
            "no_collective_time", "Steps equal across ranks; collectives not seen", "info",
            f"The ranks' median steps are within {100 * (STRAGGLER_RATIO - 1):.0f}% of each "
            "other, but the traces hold no collective time (NCCL kernels, or gloo / MPI / "
            "UCC ranges) for the ranks that synchronise each step: a rank the others wait for "
            "would not show in step times, so there is no verdict on stragglers. Profile the "
            "GPU (NCCL kernels) or keep torch.distributed's ranges in the trace.",
            ranks=len(known)))
        return rows, diags
    work = {r["rank"]: max(r["step_med_us"] - (r["collective_step_us"] or 0.0), 0.0)
            for r in known}
    typical_work = statistics.median(work.values())
    typical_coll = statistics.median(r["collective_step_us"] or 0.0 for r in known)
    for row in known:
        w = work[row["rank"]]
        # its work is STRAGGLER_RATIO above the median and others do wait for it: the
        # collective time it lacks is at least a tenth of its extra work
        if (typical_work and w / typical_work >= STRAGGLER_RATIO
                and typical_coll - (row["collective_step_us"] or 0.0)
                >= 0.1 * (w - typical_work)):
            row["straggler"] = True
    slow = [r for r in known if r["straggler"]]
    if slow:
        worst = max(slow, key=lambda r: work[r["rank"]])
        wait = max(known, key=lambda r: r["collective_step_us"] or 0.0)
        diags.append(_d(
            "stragglers", "Straggler rank" + ("s" if len(slow) > 1 else ""), "high",
            f"The ranks synchronise every step (median steps {_fmt_us(typical)}), but rank "
            f"{worst['rank']} works {_fmt_us(work[worst['rank']])} per step outside "
            f"collectives, {work[worst['rank']] / typical_work:.2f}x the ranks' median "
            f"({_fmt_us(typical_work)})"
            + (f"; straggling ranks: {', '.join(str(r['rank']) for r in slow)}" if
               len(slow) > 1 else "")
            + f". The others wait for it inside their collectives: rank {wait['rank']} "
            f"spends {_fmt_us(wait['collective_step_us'])} per step in them, rank "
            f"{worst['rank']} {_fmt_us(worst['collective_step_us'] or 0.0)}. Check its input "
            "pipeline, data sizes, host load and GPU clocks.",
            mode="synchronised", straggler_ranks=",".join(str(r["rank"]) for r in slow),
            worst_rank=worst["rank"], worst_work_us=round(work[worst["rank"]], 3),
            ranks_median_work_us=round(typical_work, 3),
            ranks_median_step_us=round(typical, 3),
            worst_collective_step_us=worst["collective_step_us"],
            max_collective_step_us=wait["collective_step_us"],
            ratio=round(work[worst["rank"]] / typical_work, 3)))
    return rows, diags
