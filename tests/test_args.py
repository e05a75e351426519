"""add_profiler_args / create_profiler_from_args."""
import argparse
import os

import pytest

import cprof


def parse(argv):
    parser = argparse.ArgumentParser()
    cprof.add_profiler_args(parser)
    return parser.parse_args(argv)


def test_defaults():
    a = parse([])
    assert a.profile is False and a.profile_dir is None and a.profile_name is None
    assert a.profile_activities == ["CPU", "GPU"]
    assert a.profile_with_stack is True and a.profile_record_shapes is True
    assert a.track_memory is False and a.profile_record_ops is False
    p = cprof.create_profiler_from_args(a)
    assert p.enabled is False and p.record_ops is False


def test_all_flags(tmp_path):
    a = parse(["--profile", "--profile-dir", str(tmp_path), "--profile-name", "n",
               "--profile-activities", "cpu", "GPU", "mem", "--no-profile-with-stack",
               "--no-profile-record-shapes", "--track-memory", "--profile-record-ops"])
    assert a.profile_activities == ["CPU", "GPU", "MEM"]
    p = cprof.create_profiler_from_args(a)
    assert p.enabled and p.output_dir == str(tmp_path) and p.profile_name == "n"
    assert p.with_stack is False and p.record_shapes is False and p.record_ops is True
    assert p.activities == ["CPU", "GPU", "MEM"]


def test_track_memory_adds_mem():
    p = cprof.create_profiler_from_args(parse(["--profile", "--profile-activities", "CPU",
                                               "--track-memory"]))
    assert p.activities == ["CPU", "MEM"]


def test_explicit_profile_name_wins():
    a = parse(["--profile", "--profile-name", "from-flag"])
    assert cprof.create_profiler_from_args(a, profile_name="explicit").profile_name == "explicit"
    assert cprof.create_profiler_from_args(a).profile_name == "from-flag"


def test_cuda_is_gpu_and_program_flags_are_kept():
    assert parse(["--profile-activities", "CUDA", "cpu"]).profile_activities == ["GPU", "CPU"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--track-memory", type=int, default=7)  # the program's own flag
    cprof.add_profiler_args(parser)
    a = parser.parse_args(["--profile", "--track-memory", "3"])
    assert a.track_memory == 3 and a.profile is True


def test_bad_activity_rejected_by_parser(capsys):
    with pytest.raises(SystemExit):
        parse(["--profile-activities", "TPU"])


def test_namespace_without_optional_attributes(tmp_path, monkeypatch):
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(tmp_path))
    p = cprof.create_profiler_from_args(argparse.Namespace(profile=True))
    assert p.enabled and p.output_dir == str(tmp_path)
    assert p.activities == ["CPU", "GPU"] and p.profile_name.startswith("profile_")
    assert cprof.create_profiler_from_args(argparse.Namespace()).enabled is False


def test_runs_end_to_end(tmp_path):
    p = cprof.create_profiler_from_args(parse(["--profile", "--profile-dir", str(tmp_path),
                                               "--profile-activities", "CPU"]),
                                        profile_name="e2e")
    with p:
        with cprof.range("x"):
            pass
    assert p.trace_path == tmp_path / "e2e.trace.json.gz" and p.trace_path.exists()


def test_record_ops_flag_puts_torch_operators_in_the_trace(tmp_path):
    torch = pytest.importorskip("torch")
    a = parse(["--profile", "--profile-dir", str(tmp_path), "--profile-name", "ops",
               "--profile-activities", "CPU", "--profile-record-ops",
               "--no-profile-with-stack"])
    p = cprof.create_profiler_from_args(a)
    p.verbose = False
    x = torch.randn(16, 16)
    with p:
        torch.mm(x, x)
    import gzip
    import json
    with gzip.open(p.trace_path) as f:
        events = json.load(f)["traceEvents"]
    ops = {e["name"] for e in events if e.get("cat") == "cpu_op"}
    assert "aten::mm" in ops, ops


def test_create_from_a_mapping_and_flag_words(tmp_path):
    """vars(args) or a config dict configures it as a namespace does (a dict used to give a
    disabled profiler silently); the words a YAML file or an environment variable leaves
    ("false", "no", "0") are off, where bool() took them as on."""
    p = cprof.create_profiler_from_args({"profile": True, "profile_dir": str(tmp_path),
                                         "profile_activities": ["CPU"]}, profile_name="d")
    assert p.enabled and p.activities == ["CPU"] and p.output_dir == str(tmp_path)
    assert p.with_stack is True and p.record_shapes is True  # missing keys: the defaults
    with p:
        pass
    assert p.trace_path.exists()
    cfg = vars(parse(["--profile", "--profile-dir", str(tmp_path), "--no-profile-with-stack"]))
    q = cprof.create_profiler_from_args(cfg)
    assert q.enabled and q.with_stack is False
    for off in ("false", "no", "0", "off", ""):
        assert not cprof.create_profiler_from_args(argparse.Namespace(profile=off)).enabled
    r = cprof.create_profiler_from_args(argparse.Namespace(
        profile="true", profile_dir=str(tmp_path), profile_with_stack="false",
        profile_activities=["CPU"]))
    assert r.enabled and r.with_stack is False
    with pytest.raises(TypeError, match="args is None"):
        cprof.create_profiler_from_args(None)


def test_args_that_hold_no_settings_are_refused(tmp_path):
    """An int, a str or a list has none of the names as attributes: it gave a disabled
    context with every default, silently; only None was refused."""
    import collections
    for bad in (5, "--profile", ["--profile"], b"x", 1.5):
        with pytest.raises(TypeError, match="args must be the parsed arguments .* got "
                                            + type(bad).__name__):
            cprof.create_profiler_from_args(bad)
    nt = collections.namedtuple("Args", "profile profile_dir")(True, str(tmp_path))
    assert cprof.create_profiler_from_args(nt).enabled  # a namedtuple holds them as fields


def test_activities_as_one_string_from_a_config(tmp_path):
    """A config file, YAML or environment variable gives the activities as one string, in the
    comma form cprof run --activities takes (or with spaces, as on the command line)."""
    for text, want in (("CPU,MEM", ["CPU", "MEM"]), ("cpu, gpu", ["CPU", "GPU"]),
                       ("CPU GPU MEM", ["CPU", "GPU", "MEM"]), ("GPU", ["GPU"])):
        p = cprof.create_profiler_from_args({"profile": "true", "profile_activities": text})
        assert p.activities == want, text
    with pytest.raises(cprof.ActivityError, match="unknown profiler activity .FOO."):
        cprof.create_profiler_from_args({"profile": "true", "profile_activities": "CPU,FOO"})
    assert cprof.ProfilerContext(activities="CPU,MEM", output_dir=tmp_path).activities == [
        "CPU", "MEM"]


def test_every_error_the_docs_name_is_importable_from_cprof():
    """usage.md's Errors section names classes to catch; `except cprof.X` must not itself
    fail (ActivityError and StacksUnavailableError were not exported)."""
    import re
    from conftest import ROOT
    with open(os.path.join(ROOT, "docs", "usage.md")) as f:
        text = f.read()
    section = text[text.index("## Errors"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    names = set(re.findall(r"`(?:cprof\.)?([A-Z][A-Za-z]*(?:Error|Warning))`", section))
    names -= {"RuntimeError", "ValueError", "TypeError", "AssertionError", "OSError",
              "RuntimeWarning"}
    assert {"ActivityError", "StacksUnavailableError", "WindowStateError"} <= names
    for name in names:
        assert isinstance(getattr(cprof, name, None), type), name
