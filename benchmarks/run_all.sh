#!/usr/bin/env bash
# Runs every benchmark once, in sequence, printing each command before its output.
# Usage: bash benchmarks/run_all.sh > /tmp/bench.txt   (about 10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export GPUJOBS_HOME="$(mktemp -d)"
trap '$PY -c "from gpujobs.backends.local import stop_agent; stop_agent()" >/dev/null 2>&1 || true; rm -rf "$GPUJOBS_HOME"' EXIT
for cmd in \
  "benchmarks/local_launch.py --runs 5" \
  "benchmarks/local_throughput.py --n 200" \
  "benchmarks/admission.py" \
  "benchmarks/submit_overhead.py" \
  "benchmarks/status_fanout.py" \
  "benchmarks/metrics_overhead.py" \
  "benchmarks/progress_overhead.py" \
  "benchmarks/fault_report.py" \
  "benchmarks/eta_accuracy.py" \
  "benchmarks/k8s_forecast.py" \
  "benchmarks/lab_panel.py"; do
  echo "\$ .venv/bin/python $cmd"
  $PY $cmd 2>&1 | grep -v "^gpujobs: no GPU found"
  echo
done
