#!/usr/bin/env bash
# Debian packages the test suite needs: Open MPI (mpirun, headers for mpi4py) and Chromium
# (browser tests of the widgets). Installed only when running as root and missing.
set -euo pipefail
need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "setup-system: missing ${need[*]}; install them with apt-get (not root: skipping)." >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
