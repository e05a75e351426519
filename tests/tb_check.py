"""Load a trace the way TensorBoard's profiler plugin (PyPI `torch-tb-profiler`) does.

TensorBoard itself is not needed: the plugin's parser (`RunProfileData`) and the generator of
its views (`RunGenerator`) are plain Python over the trace JSON. `load_with_tb(path)` runs both
as the plugin's loader does for one worker and returns (profile, data, log): the plugin's
RunProfile (views, overview, kernel tables, module stats, ...), its RunProfileData (op trees,
steps) and the WARNING-and-up lines the plugin logged while loading.
`scripts/install_tb_profiler.sh` installs the plugin without TensorBoard.
"""
from __future__ import annotations

import gzip
import json
import logging


def tb_available():
    try:
        import torch_tb_profiler.profiler.data  # noqa: F401
        return True
    except Exception:
        return False


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def load_with_tb(path):
    from torch_tb_profiler import utils
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    logger = utils.get_logger()
    h = _Lines()
    logger.addHandler(h)
    try:
        data = RunProfileData("worker0", None, json.loads(raw))
        data.trace_file_path = str(path)
        data.process()
        data.analyze()
        profile = RunGenerator("worker0", None, data).generate_run_profile()
    finally:
        logger.removeHandler(h)
    return profile, data, h.lines


def module_tree(stats):
    """The Module view's table as nested (name, occurrences, [children]) tuples, names without
    torch's "nn.Module: " prefix (as the view shows them)."""
    return [(s.name, s.occurences, module_tree(s.children)) for s in stats or []]


def timeline_modules(data):
    """The Module view's timeline (module_op.get_module_tree): nested (name, [children])."""
    from torch_tb_profiler.profiler.module_op import get_module_tree

    def walk(ms):
        return [(m.name.replace("nn.Module: ", ""), walk(m.children)) for m in ms]
    return walk(get_module_tree(data.tid2tree))
