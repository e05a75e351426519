#!/usr/bin/env bash
# Holistic Trace Analysis for the compatibility test. HTA 0.5.0 declares jupyter and more that
# the loader does not use, and omits psutil which it imports: install the loader's real needs.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check --no-deps "holistictraceanalysis==0.5.0"
# pandas 2: HTA 0.5.0's critical path analysis calls DataFrame.drop(axis=, columns=), which
# pandas 3 refuses
$PY -m pip install -q --disable-pip-version-check "pandas>=2.2,<3" numpy plotly networkx psutil pyyaml
$PY -c "import hta.trace_analysis" && echo "install_hta: HTA ready"
