"""`cprof report --html` (cprof/_html.py): one self-contained page from a report dict.

The pure-Python tests always run. The Chromium test renders the page in a headless browser (dump the DOM,
take a screenshot kept in tests/artifacts/); it skips where no Chromium is installed:
`CPROF_HTML_TESTS=1 bash scripts/setup.sh` installs one.
"""
import copy
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

from cprof import _html

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ARTIFACTS = os.path.join(HERE, "artifacts")
SECTION_IDS = ["diagnoses", "kernels", "steps", "utilisation", "gaps", "memory", "cuda-api", "ranges",
               "modules", "compiled"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture
def single():
    return load("report_single.json")


@pytest.fixture
def ranks():
    return load("report_ranks.json")


def cpu_only():
    """A trace with host activity only: no devices, kernels, steps, gaps or memory."""
    return {"schema": "cprof.report/1",
            "trace": {"path": "cpu_only.json", "producer": "torch.profiler", "rank": None, "world_size": None,
                      "partial": False, "events": 812, "dropped": None},
            "window": {"start_us": 0.0, "end_us": 52000.0, "dur_us": 52000.0},
            "kernels": [], "kernels_total": {"total_us": 0, "instances": 0, "distinct": 0}, "cuda_api": [],
            "memory": [], "devices": [], "gaps": [],
            "ranges": [{"name": "forward", "cat": "user_annotation", "calls": 3, "cpu_us": 4100.0,
                        "gpu_us": 0, "kernels": 0}],
            "modules": [], "steps": [],
            "compiled": {"regions": 0, "nested": 0, "max_depth": 0, "compiled_functions": 0,
                         "triton_kernels": 0},
            "sync": {"calls": 0, "total_us": 0, "by_name": []},
            "launches": {"calls": 0, "total_us": 0, "avg_us": 0},
            "collectives": {"kernels": 0, "total_us": 0}, "diagnoses": []}


class Checker(HTMLParser):
    """Collects ids, data-chart values, text, and tag-balance errors (every non-void tag must close,
    in order)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.charts, self.text, self.attrs = [], [], [], [], [], []
        self.doctype = False

    def handle_decl(self, decl):
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def _attrs(self, tag, attrs):
        a = dict(attrs)
        self.attrs.append((tag, a))
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "svg" and "data-chart" in a:
            self.charts.append(a["data-chart"])
            if "chart" not in (a.get("class") or "").split():
                self.errors.append("svg with data-chart but no class chart")

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1][0] != tag:
            open_tag = self.stack[-1] if self.stack else None
            self.errors.append("</%s> at %s closes %s" % (tag, self.getpos(), open_tag))
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def check(page):
    c = Checker()
    c.feed(page)
    c.close()
    assert c.doctype, "no <!DOCTYPE html>"
    assert not c.errors, c.errors[:5]
    assert not c.stack, "unclosed: %s" % c.stack[:5]
    assert len(c.ids) == len(set(c.ids)), "duplicate ids: %s" % sorted(i for i in c.ids if c.ids.count(i) > 1)
    assert page.count("<html") == page.count("</html>") == 1
    assert page.count("<body") == page.count("</body>") == 1
    c.all_text = " ".join(" ".join(c.text).split())
    return c


def assert_self_contained(page):
    assert not re.search(r"""\b(src|href|xlink:href|action|srcset)\s*=\s*["']?\s*(https?:|//|data:|file:)""",
                         page, re.I)
    assert "@import" not in page
    assert not re.search(r"url\s*\(", page, re.I)
    assert "<link" not in page and "<img" not in page and "<iframe" not in page
    assert not re.search(r"<script[^>]*\bsrc", page, re.I)


def no_raw_ampersand(page):
    """Outside <script>, every & starts an entity: nothing from the report went out unescaped."""
    body = re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    return re.findall(r"&(?!(?:amp|lt|gt|quot|#x27|#\d+);).{0,20}", body)


# ---------------------------------------------------------------- pure Python

def test_single_report_is_well_formed_and_complete(single):
    page = _html.render(single)
    c = check(page)
    for sid in SECTION_IDS:
        assert sid in c.ids, sid
    assert {"kernels", "step-histogram", "steps", "timeline", "idle"} <= set(c.charts), c.charts
    assert_self_contained(page)
    assert "http" not in page  # nothing at all: inline SVG needs no xmlns either
    # the top kernel's share, its total, and the Time % of every row (rounded to 0.1 as shown)
    top = single["kernels"][0]
    assert top["name"] == "ampere_sgemm_128x64_tn"
    assert "48.6%" in c.all_text and _html.fmt_us(top["total_us"]) == "403.5 ms" and "403.5 ms" in c.all_text
    for k in single["kernels"]:
        assert "%.1f%%" % k["time_pct"] in c.all_text
    # the full names are in the text (table), the charts truncate them but keep each in a <title>
    for k in single["kernels"]:
        assert k["name"] in c.all_text
    assert "…" in c.all_text
    # steps: min / median / max printed
    cpu = sorted(s["cpu_us"] for s in single["steps"])
    for v in (cpu[0], (cpu[5] + cpu[6]) / 2, cpu[-1]):
        assert _html.fmt_us(v) in c.all_text
    assert "ProfilerStep#7" in c.all_text
    # utilisation, streams, the dropped-records warning, no partial banner
    assert "66.6%" in c.all_text and "Device 0" in c.all_text
    assert "Dropped records" in c.all_text and "gpu_activity 1,250" in c.all_text
    assert "Partial trace" not in c.all_text
    # gaps: five rows, largest first, with what the CPU was doing
    assert "37.84 ms" in c.all_text
    assert "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" in page
    assert "What the CPU was doing" in c.all_text
    # memory, CUDA API, ranges, modules, compiled
    assert "346.8 MB" in c.all_text and "cudaLaunchKernel" in c.all_text
    assert "nn.Module: ResNet_0" in c.all_text and "compiled regions" in c.all_text
    assert "no GPU activity" not in c.all_text


def test_kernel_names_are_escaped(single):
    page = _html.render(single)
    assert "reduce_kernel&lt;512, 1" in page
    assert "<512" not in page and "<float" not in page and "<4," not in page
    assert "TensorIteratorBase&amp;" in page
    assert not no_raw_ampersand(page), no_raw_ampersand(page)[:5]
    # a range name with markup in it stays text
    assert "loss &lt;ce &amp; label_smoothing&gt;" in page


def test_hostile_strings_stay_text(single):
    rep = copy.deepcopy(single)
    rep["trace"]["path"] = '/tmp/"><script>alert(1)</script>.json'
    rep["kernels"][0]["name"] = "</svg></table><b onmouseover='x'>&"
    rep["diagnoses"][0]["evidence"]["<k>"] = "<v & w>"
    rep["diagnoses"][0]["severity"] = "<bogus>"
    page = _html.render(rep)
    check(page)
    assert "<script>alert" not in page and "<b onmouseover" not in page and "</svg></table>" not in page
    assert page.count("<script>") == 1
    assert not no_raw_ampersand(page)


def test_partial_banner(single):
    rep = copy.deepcopy(single)
    rep["trace"]["partial"] = True
    rep["trace"]["dropped"] = {"gpu_activity": 0, "cpu_ops": 0}
    c = check(_html.render(rep))
    assert "Partial trace" in c.all_text
    assert "Dropped records" not in c.all_text


def test_multi_rank_report(ranks):
    page = _html.render(ranks)
    c = check(page)
    assert_self_contained(page)
    assert "ranks" in c.ids and "diagnoses" in c.ids
    for r in (0, 1):  # each rank's sections are there, prefixed so ids stay unique
        assert "rank%d" % r in c.ids
        for sid in SECTION_IDS:
            assert "rank%d-%s" % (r, sid) in c.ids
    assert c.charts.count("kernels") == 2 and c.charts.count("timeline") == 2 and "ranks" in c.charts
    assert page.count('<details class="rank"') == 2
    # the straggler: its row marked, its section open, the cross-rank diagnosis shown
    assert re.search(r'<tr class="straggler"><td class="num" data-v="1.0">1</td>', page)
    assert re.search(r'<details class="rank" id="rank1" open>', page)
    assert re.search(r'<details class="rank" id="rank0">', page)
    assert "Rank 1 is a straggler" in c.all_text and "Rank 0 waits in collectives" in c.all_text
    assert _html.fmt_us(ranks["ranks"][1]["step_med_us"]) in c.all_text
    assert not no_raw_ampersand(page)


def test_cpu_only_report_says_no_gpu():
    page = _html.render(cpu_only())
    c = check(page)
    for sid in SECTION_IDS:
        assert sid in c.ids
    assert "no GPU activity in this trace" in c.all_text
    assert "no steps in this trace" in c.all_text
    assert not c.charts, c.charts  # no empty charts
    assert "forward" in c.all_text and "4.100 ms" in c.all_text
    assert_self_contained(page)


@pytest.mark.parametrize("rep", [{}, {"schema": "cprof.report/1"},
                                 {"reports": [], "ranks": [], "diagnoses": []}, "not a dict"])
def test_empty_reports_render(rep):
    page = _html.render(rep)
    c = check(page)
    assert_self_contained(page)
    if isinstance(rep, dict) and "reports" in rep:
        assert "ranks" in c.ids
    else:
        for sid in SECTION_IDS:
            assert sid in c.ids
        assert "no GPU activity in this trace" in c.all_text


def test_zeros_and_nulls_do_not_divide_by_zero(single):
    rep = copy.deepcopy(single)
    for k in rep["kernels"] + rep["cuda_api"]:
        for f in k:
            if f != "name":
                k[f] = 0
    rep["kernels_total"] = {"total_us": 0, "instances": 0, "distinct": 0}
    for m in rep["memory"]:
        m.update(count=0, bytes=0, total_us=0, gbps=0)
    d = rep["devices"][0]
    d["idle"] = {"total_us": 0, "host_us": 0, "sync_us": 0, "short_us": 0, "other_us": 0}
    d["timeline"] = {"start_us": 0, "bin_us": 0, "busy_pct": [0, 0, None, "x", float("nan")]}
    d["util_pct"] = None
    for s in rep["steps"]:
        s["cpu_us"] = s["gpu_us"] = 0
    rep["steps"] = rep["steps"][:1]
    rep["gaps"][0].update(before=None, after=None, stream=None, cpu=None)
    rep["window"] = {"start_us": 0, "end_us": 0, "dur_us": 0}
    check(_html.render(rep))


def test_formatting():
    assert _html.fmt_us(0) == "0 µs"
    assert _html.fmt_us(812.25) == "812.2 µs" or _html.fmt_us(812.25) == "812.3 µs"
    assert _html.fmt_us(12345) == "12.35 ms" or _html.fmt_us(12345) == "12.34 ms"
    assert _html.fmt_us(1239605.37) == "1.240 s"
    assert _html.fmt_bytes(512) == "512 B"
    assert _html.fmt_bytes(346816512) == "346.8 MB"
    assert _html.fmt_bytes(2.5e9) == "2.500 GB"
    assert _html.fmt_pct(48.56) == "48.6%"
    assert _html.fmt_us(None) == "0 µs" and _html.fmt_bytes("x") == "0 B"


def test_fixtures_are_consistent(single, ranks):
    """The fixtures follow the schema and their numbers agree with each other."""
    for rep in [single] + ranks["reports"]:
        kt = rep["kernels_total"]
        assert sum(k["total_us"] for k in rep["kernels"]) <= kt["total_us"]
        assert sum(k["instances"] for k in rep["kernels"]) <= kt["instances"]
        totals = [k["total_us"] for k in rep["kernels"]]
        assert totals == sorted(totals, reverse=True)
        for k in rep["kernels"] + rep["cuda_api"]:
            assert k["min_us"] <= k["med_us"] <= k["max_us"] and k["min_us"] <= k["avg_us"] <= k["max_us"]
            assert abs(k["avg_us"] * k["instances"] - k["total_us"]) < 0.01 * k["total_us"] + 1
        for k in rep["kernels"]:
            assert abs(k["time_pct"] - 100 * k["total_us"] / kt["total_us"]) < 0.01
        w = rep["window"]
        assert abs(w["end_us"] - w["start_us"] - w["dur_us"]) < 0.01
        (d,) = rep["devices"]
        assert len(d["streams"]) == 2
        idle = d["idle"]
        assert abs(idle["total_us"] + d["busy_us"] - w["dur_us"]) < 0.01
        assert abs(sum(idle[k + "_us"] for k in ("host", "sync", "short", "other")) - idle["total_us"]) < 0.01
        assert abs(d["util_pct"] - 100 * d["busy_us"] / w["dur_us"]) < 0.01
        tl = d["timeline"]
        assert abs(tl["bin_us"] * len(tl["busy_pct"]) - w["dur_us"]) < 1
        assert all(0 <= v <= 100 for v in tl["busy_pct"])
        assert len(rep["steps"]) == 12 and [s["step"] for s in rep["steps"]] == list(range(12))
        for s in rep["steps"]:
            assert w["start_us"] <= s["start_us"] and s["start_us"] + s["cpu_us"] <= w["end_us"]
        assert len(rep["gaps"]) == 5 and len(rep["diagnoses"]) == 2
        assert [g["dur_us"] for g in rep["gaps"]] == sorted((g["dur_us"] for g in rep["gaps"]), reverse=True)
        for kind in ("host", "sync"):
            assert sum(g["dur_us"] for g in rep["gaps"] if g["kind"] == kind) <= idle[kind + "_us"]
        sync_api = {r["name"]: r for r in rep["cuda_api"]}["cudaStreamSynchronize"]
        longest = max(c["dur_us"] for g in rep["gaps"] for c in g["cpu"]
                      if c["name"] == "cudaStreamSynchronize")
        assert longest <= sync_api["max_us"]
        assert rep["sync"]["calls"] == sum(b["calls"] for b in rep["sync"]["by_name"])
        for m in rep["memory"]:
            assert abs(m["gbps"] - m["bytes"] / m["total_us"] / 1e3) < 0.01
    for r, rep in zip(ranks["ranks"], ranks["reports"]):
        assert r["rank"] == rep["trace"]["rank"] and r["path"] == rep["trace"]["path"]
        cpu = sorted(s["cpu_us"] for s in rep["steps"])
        assert abs(r["step_med_us"] - (cpu[5] + cpu[6]) / 2) < 0.01 and r["step_max_us"] == cpu[-1]
        assert r["gpu_busy_pct"] == rep["devices"][0]["util_pct"]
        assert r["collective_us"] == rep["collectives"]["total_us"]
    assert [r["straggler"] for r in ranks["ranks"]] == [False, True]


# ---------------------------------------------------------------- headless Chromium

def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def png_info(path):
    """(width, height, distinct byte values in the decompressed image data) of a PNG, checked as we go."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, [], None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        assert zlib.crc32(typ + chunk) & 0xffffffff == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if typ == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif typ == b"IDAT":
            idat.append(chunk)
        elif typ == b"IEND":
            break
        pos += 12 + n
    assert width and idat
    raw = zlib.decompress(b"".join(idat))
    return width, height, len(set(raw[::7]))


def run_chromium(exe, tmp_path, *args):
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--user-data-dir=%s" % (tmp_path / "chromium-profile")] + list(args)
    # stderr: chromium complains about dbus and the like on a bare machine; harmless
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    return p.stdout.decode("utf-8", errors="replace")


@pytest.mark.slow
def test_chromium_renders_the_page(tmp_path, single, ranks):
    exe = find_chromium()
    if exe is None:
        pytest.skip("no chromium / chromium-browser / google-chrome on PATH; "
                    "`CPROF_HTML_TESTS=1 bash scripts/setup.sh` installs Debian's chromium")
    pages = {}
    for name, rep in (("single", single), ("ranks", ranks)):
        pages[name] = tmp_path / ("report_%s.html" % name)
        pages[name].write_text(_html.render(rep), encoding="utf-8")
    # the page needs no JS: the same page with its <script> cut out must show the same
    # (--dump-dom itself runs JS, so scriptEnabled=false would leave it nothing to dump)
    nojs = tmp_path / "report_single_nojs.html"
    nojs.write_text(re.sub(r"<script>.*?</script>", "", _html.render(single), flags=re.S), encoding="utf-8")

    # the DOM as Chromium built it: every section heading and chart is there, with JS and without
    for page in (pages["single"], nojs):
        dom = run_chromium(exe, tmp_path, "--dump-dom", page.as_uri())
        for sid in SECTION_IDS:
            assert re.search(r'<section id="%s" data-section="%s"><h2>' % (sid, sid), dom), sid
        for h in ("Diagnoses", "Kernel time", "Step time", "GPU utilisation", "Largest idle gaps",
                  "Memory operations", "CUDA API", "Top ranges", "Top modules", "Compiled regions"):
            assert "<h2>%s</h2>" % h in dom, h
        for chart in ("kernels", "step-histogram", "steps", "timeline", "idle"):
            assert re.search(r'<svg class="chart" data-chart="%s"' % chart, dom), chart
        assert "reduce_kernel&lt;512" in dom and "<512" not in dom
    dom = run_chromium(exe, tmp_path, "--dump-dom", pages["ranks"].as_uri())
    assert '<section id="ranks" data-section="ranks">' in dom
    assert '<svg class="chart" data-chart="ranks"' in dom
    assert dom.count('<details class="rank"') == 2
    assert dom.count('data-chart="timeline"') == 2

    # a screenshot: a real, non-blank 1280x4000 PNG, kept as a test artefact
    os.makedirs(ARTIFACTS, exist_ok=True)
    for name, out in (("single", "report_screenshot.png"), ("ranks", "report_ranks_screenshot.png")):
        shot = tmp_path / out
        run_chromium(exe, tmp_path, "--hide-scrollbars", "--screenshot=%s" % shot, "--window-size=1280,4000",
                     pages[name].as_uri())
        assert shot.is_file()
        w, h, distinct = png_info(shot)
        assert (w, h) == (1280, 4000)
        assert shot.stat().st_size > 50_000, "suspiciously small screenshot: a blank page?"
        assert distinct > 40, "screenshot looks blank"
        shutil.copyfile(shot, os.path.join(ARTIFACTS, out))
