#!/usr/bin/env bash
# TensorBoard's profiler plugin for the compatibility test (tests/test_tensorboard.py). Its
# parser and view generator need pandas and numpy only: TensorBoard itself (grpc, protobuf, a
# web server) is left out, and torch is never touched.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check --no-deps "torch-tb-profiler==0.4.3"
$PY -c "import pandas, numpy" 2>/dev/null ||
  $PY -m pip install -q --disable-pip-version-check "pandas>=2.2,<3" numpy
$PY -c "import torch_tb_profiler.profiler.run_generator" && echo "install_tb_profiler: plugin ready"
