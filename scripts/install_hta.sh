#!/usr/bin/env bash
# Holistic Trace Analysis for the compatibility test. HTA 0.5.0 declares jupyter and more that
# the loader does not use, and omits psutil which it imports: install the loader's real needs.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check --no-deps "holistictraceanalysis==0.5.0"
$PY -m pip install -q --disable-pip-version-check pandas numpy plotly networkx psutil pyyaml
$PY -c "import hta.trace_analysis" && echo "install_hta: HTA ready"
