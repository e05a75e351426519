"""The trace writer: escaping, timestamps, gzip, temp-file-then-rename."""
import gzip
import json
import os

import pytest

import cprof
import cprof._C as C
from conftest import load_trace, ranges_of

NASTY = [
    'quote " and backslash \\',
    "newline\nand\ttab\rcr",
    "nul\x00byte",
    "control \x01\x1f\x7f",
    "emoji 🔥 and CJK 漢字 and é",
    "lone surrogate \ud800 here",
    "low surrogate \udfff",
    "</script><!-- -->",
    "",
    "x" * 5000,
]


@pytest.mark.parametrize("gz", [0, 6])
def test_nasty_names_give_valid_json(tmp_path, gz):
    C.start()
    for n in NASTY:
        with cprof.range(n):
            pass
    snap = C.stop()
    path, *_ = snap.write(str(tmp_path / "nasty"), ".trace.json.gz" if gz else ".trace.json",
                          gzip=gz)
    t = load_trace(path)  # strict json parse
    names = [e["name"] for e in ranges_of(t)]
    assert len(names) == len(NASTY)
    for got, want in zip(names, NASTY):
        if "\ud800" in want or "\udfff" in want:
            assert "\ufffd" in got and "surrogate" in got
        else:
            assert got == want


@pytest.mark.parametrize("gz", [0, 6])
def test_a_long_legal_file_name_is_written(tmp_path, gz):
    """The hidden temporary file ".{name}.{pid}.{n}.tmp" adds up to 27 bytes to the name: a
    legal name of 229-255 bytes failed with "File name too long" (torch.profiler writes it)."""
    C.start()
    with cprof.range("x"):
        pass
    snap = C.stop()
    suffix = ".trace.json.gz" if gz else ".trace.json"
    # an odd count of ASCII first: byte 200, where the temporary name is cut, is mid-"é"
    stem = "x" + "é" * ((255 - 1 - len(suffix)) // 2)
    path, *_ = snap.write(str(tmp_path / stem), suffix, gzip=gz)
    assert os.path.basename(path) == stem + suffix and len((stem + suffix).encode()) >= 254
    assert [e["name"] for e in ranges_of(load_trace(path))] == ["x"]
    assert os.listdir(tmp_path) == [stem + suffix]  # no temporary file left

def test_escape_invalid_utf8_bytes():
    cases = {
        b"plain": '"plain"',
        b"\xff": '"\ufffd"',
        b"a\xc3": '"a\ufffd"',  # truncated 2-byte sequence
        b"\xc0\xaf": '"\ufffd\ufffd"',  # overlong
        b"\xed\xa0\x80": '"\ufffd\ufffd\ufffd"',  # encoded surrogate
        b"\xf4\x90\x80\x80": '"\ufffd\ufffd\ufffd\ufffd"',  # above U+10FFFF
        "é".encode(): '"é"',
        b"\x00\x1f": '"\\u0000\\u001f"',
    }
    for raw, want in cases.items():
        out = C.json_escape(raw).decode("utf-8")
        assert out == want, (raw, out)
        json.loads(out)


def test_escape_random_bytes_always_valid():
    import random
    rnd = random.Random(1234)
    for _ in range(3000):
        raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40)))
        out = C.json_escape(raw)
        out.decode("utf-8")  # valid UTF-8
        json.loads(out)


def test_timestamps_consistent_with_window_and_base(tmp_path):
    C.start()
    with cprof.range("outer"):
        with cprof.range("inner"):
            pass
    snap = C.stop()
    path, *_ = snap.write(str(tmp_path / "ts"), ".trace.json", gzip=0)
    t = load_trace(path)
    base = t["baseTimeNanoseconds"]
    assert base % 1_000_000_000 == 0
    outer, inner = ranges_of(t)
    start_unix = int(t["cprof"]["window"]["start_unix_ns"])
    stop_unix = int(t["cprof"]["window"]["stop_unix_ns"])
    for e in (outer, inner):
        unix_begin = base + e["ts"] * 1000
        assert start_unix - 1000 <= unix_begin <= stop_unix + 1000
        assert e["dur"] >= 0
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer[
        "dur"] + 0.002
    assert outer["args"]["External id"] != inner["args"]["External id"]


def test_ts_has_three_decimals(tmp_path):
    C.start()
    with cprof.range("r"):
        pass
    snap = C.stop()
    path, *_ = snap.write(str(tmp_path / "dec"), ".trace.json", gzip=0)
    text = open(path).read()
    line = next(ln for ln in text.splitlines() if '"name":"r"' in ln)
    ts = line.split('"ts":')[1].split(",")[0]
    assert len(ts.split(".")[1]) == 3


def test_gzip_output_is_gzip(tmp_path):
    C.start()
    snap = C.stop()
    path, *_ = snap.write(str(tmp_path / "g"), ".trace.json.gz", gzip=6)
    with open(path, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    json.loads(gzip.decompress(open(path, "rb").read()))


def test_no_temp_file_left_and_never_overwrites(tmp_path):
    C.start()
    snap = C.stop()
    p1, *_ = snap.write(str(tmp_path / "t"), ".json", gzip=0)
    p2, *_ = snap.write(str(tmp_path / "t"), ".json", gzip=0)
    assert p1.endswith("t.json") and p2.endswith("t-1.json")
    assert sorted(os.listdir(tmp_path)) == ["t-1.json", "t.json"]
    p3, *_ = snap.write(str(tmp_path / "t"), ".json", gzip=0, replace=True)
    assert p3 == p1


def test_write_error_reports_and_keeps_snapshot(tmp_path):
    C.start()
    with cprof.range("kept"):
        pass
    snap = C.stop()
    with pytest.raises(cprof.TraceWriteError) as e:
        snap.write(str(tmp_path / "missing" / "x"), ".json", gzip=0)
    assert isinstance(e.value, OSError) and "missing" in str(e.value)
    path, *_ = snap.write(str(tmp_path / "x"), ".json", gzip=0)
    assert [e["name"] for e in ranges_of(load_trace(path))] == ["kept"]


def test_full_disk_error_is_clear(tmp_path):
    # a 64 KiB tmpfs stands in for a full disk (the trace below is ~2 MB)
    import subprocess
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        C.set_buffer_cap(256 << 20)
        C.start()
        for i in range(20000):
            with cprof.range(f"name {i % 50}"):
                pass
        snap = C.stop()
        with pytest.raises(cprof.TraceWriteError) as e:
            snap.write(str(mnt / "big"), ".trace.json", gzip=0)
        assert "No space" in str(e.value)
        assert os.listdir(mnt) == []  # no half-written file, no temp file
        path, *_ = snap.write(str(tmp_path / "big"), ".trace.json", gzip=0)
        assert len(ranges_of(load_trace(path))) == 20000
    finally:
        subprocess.run(["umount", str(mnt)])


def test_cprof_metadata_survives_any_config(tmp_path):
    C.start()
    snap = C.stop()
    with pytest.raises(cprof.CprofError):
        snap.write(str(tmp_path / "bad"), ".json", gzip=0, extra_json="[1, 2]")
    path, *_ = snap.write(str(tmp_path / "ok"), ".json", gzip=0,
                          extra_json=json.dumps({"config": {"s": "é\"\n", "n": None}}))
    assert load_trace(path)["cprof"]["config"] == {"s": "é\"\n", "n": None}


def test_events_read_names_as_the_trace_writes_them(tmp_path):
    """A lone surrogate in a name: events() returned it as surrogate escapes of its bytes,
    the trace as U+FFFD; both now read the same."""
    with cprof.profile(activities=["CPU"], record_ops=False) as p:
        for n in NASTY:
            with cprof.range(n):
                pass
    path = p.export_chrome_trace(str(tmp_path / "n.json"))
    in_trace = [e["name"] for e in ranges_of(load_trace(path))]
    in_events = [e.name for e in p.events()]
    assert in_events == in_trace
    assert in_events[NASTY.index("lone surrogate \ud800 here")] == "lone surrogate \ufffd\ufffd\ufffd here"
    for name in in_events:
        name.encode("utf-8")  # no lone surrogate left: printable, writable anywhere
