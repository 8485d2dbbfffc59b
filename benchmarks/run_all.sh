#!/usr/bin/env bash
# Runs every benchmark once, in sequence, printing each command before its output.
#
#   bash benchmarks/run_all.sh [--against REV] > /tmp/bench.txt
#
# --against REV: each benchmark also runs, right after, with the gpujobs of REV (a git
# worktree checked out beside, in $TMPDIR; same Python, PYTHONPATH at that tree, the same
# benchmark script: benchmarks/against.py), and benchmarks/compare.py prints new/old ratios of
# their headline figures at the end. A benchmark that crashes (a traceback, or no output) or
# exits non-zero (a target not met) makes this script exit non-zero, saying which; one that
# cannot run at REV is reported as such (REV may predate what it measures).
# benchmarks/admission_kueue.py starts a real control plane (etcd, kube-apiserver, Kueue; a few
# minutes) and compares Kueue with the engine in one run; it prints "skipped" and passes when the
# control-plane binaries (`make controlplane`) are missing, and is not repeated at REV.
# About 10 minutes on 2 idle cores; twice that with --against. PY=... picks the interpreter.
# BENCH_ONLY="local_launch admission ..." runs only those benchmarks (the others are listed as
# not run; compare.py leaves their rows empty).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PY:-.venv/bin/python}"
AGAINST=""
if [ "${1:-}" = "--against" ]; then
  AGAINST="${2:?usage: run_all.sh [--against REV]}"
fi
OUT="$(mktemp -d)"
export GPUJOBS_HOME="$OUT/home"
mkdir -p "$GPUJOBS_HOME"
OLD=""
cleanup() {
  PYTHONPATH="$ROOT" $PY -c "from gpujobs.backends.local import stop_agent; stop_agent()" >/dev/null 2>&1 || true
  if [ -n "$OLD" ]; then git worktree remove --force "$OLD" >/dev/null 2>&1 || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT
if [ -n "$AGAINST" ]; then
  SHA="$(git rev-parse --verify "$AGAINST^{commit}")" || exit 2
  OLD="${TMPDIR:-/tmp}/gpujobs-against-${SHA:0:12}-$$"
  git worktree add --detach "$OLD" "$SHA" >/dev/null 2>&1 || { echo "cannot check out $AGAINST"; exit 2; }
  echo "# new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')" \
       " against old: ${SHA:0:12} ($AGAINST); load: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

# run LABEL TREE FILE CMD...: one benchmark, output in FILE (and on stdout); sets STATUS
run() {
  local label="$1" tree="$2" file="$3"; shift 3
  echo "\$ $label $*"
  if [ "$tree" = "$ROOT" ]; then
    PYTHONPATH="$ROOT" $PY "$@" > "$file" 2>&1
  else
    PYTHONPATH="$tree" GPUJOBS_HOME="$OUT/home-old" $PY benchmarks/against.py "$tree" "$@" > "$file" 2>&1
  fi
  local rc=$?
  grep -v "^gpujobs: no GPU found" "$file"
  if grep -q "^Traceback (most recent call last)" "$file" || [ ! -s "$file" ]; then
    STATUS="crashed (exit $rc)"
  elif [ "$rc" -ne 0 ]; then
    STATUS="exit $rc (target not met?)"
  elif grep -q "^[a-z_]*: skipped, " "$file"; then
    STATUS="skipped"
  else
    STATUS="ok"
  fi
  echo "[$label: $STATUS]"
  echo
}

failed=()
old_failed=()
i=0
for cmd in \
  "benchmarks/local_launch.py --runs 5" \
  "benchmarks/local_throughput.py --n 200" \
  "benchmarks/local_forecast_latency.py" \
  "benchmarks/admission.py" \
  "benchmarks/admission_kueue.py" \
  "benchmarks/submit_overhead.py" \
  "benchmarks/status_fanout.py" \
  "benchmarks/metrics_overhead.py" \
  "benchmarks/progress_overhead.py" \
  "benchmarks/fault_report.py" \
  "benchmarks/eta_accuracy.py" \
  "benchmarks/k8s_forecast.py" \
  "benchmarks/lab_panel.py"; do
  i=$((i + 1))
  name="${cmd%% *}"; name="${name#benchmarks/}"; name="${name%.py}"
  if [ -n "${BENCH_ONLY:-}" ] && [[ " $BENCH_ONLY " != *" $name "* ]]; then
    echo "[$name: not run (BENCH_ONLY)]"; echo; continue
  fi
  # shellcheck disable=SC2086
  run "new" "$ROOT" "$OUT/$i.new" $cmd
  [ "$STATUS" = ok ] || failed+=("${cmd%% *}: $STATUS")
  # admission_kueue compares with real Kueue in its own run: not repeated at REV
  if [ -n "$OLD" ] && [ "${cmd%% *}" != benchmarks/admission_kueue.py ]; then
    # shellcheck disable=SC2086
    run "old ${SHA:0:12}" "$OLD" "$OUT/$i.old" $cmd
    [ "$STATUS" = ok ] || old_failed+=("${cmd%% *}: $STATUS")
  fi
done

if [ -n "$OLD" ]; then
  echo "# new/old ratios (old = ${SHA:0:12}); load now: $(cut -d' ' -f1-3 /proc/loadavg)"
  i=0
  args=()
  for cmd in local_launch local_throughput local_forecast_latency admission admission_kueue submit_overhead \
             status_fanout metrics_overhead progress_overhead fault_report eta_accuracy k8s_forecast lab_panel; do
    i=$((i + 1))
    args+=("$cmd" "$OUT/$i.new" "$OUT/$i.old")
  done
  PYTHONPATH="$ROOT" $PY benchmarks/compare.py "${args[@]}"
  for f in "${old_failed[@]}"; do echo "at ${SHA:0:12}: $f"; done
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${#failed[@]} benchmark(s):"
  for f in "${failed[@]}"; do echo "  $f"; done
  exit 1
fi
echo "all benchmarks ran"
