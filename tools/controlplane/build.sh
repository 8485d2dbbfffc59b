#!/usr/bin/env bash
# Builds the real control plane the `realcp` tests start: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and Kueue, from the upstream Go modules pinned by the wrapper modules next to this
# file (etcd/, k8s/, kueue/). Nothing upstream is copied into the repository.
#
# Binaries go outside the clone, to ${XDG_CACHE_HOME:-$HOME/.cache}/gpujobs-controlplane/<stamp>/bin,
# where <stamp> hashes the Go version, the pinned versions and the wrappers' go.mod/go.sum, so a fresh
# clone on the same machine (CI) reuses them. A component that cannot be built is written to
# <bin>/MISSING ("name<TAB>module@version<TAB>reason") and the others are still built; the script fails
# only when etcd or kube-apiserver is missing. The last line of output is the bin folder.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[ -x "$GO" ] || { echo "build.sh: no Go toolchain (set GO=/path/to/go)" >&2; exit 2; }

K8S_VERSION=v1.37.2
KUEUE_VERSION=v0.17.0
ETCD_VERSION=v3.6.16

# The stamp: Go version, the pinned versions and build flags, the wrappers' go.mod/go.sum.
RECIPE="k8s=$K8S_VERSION kueue=$KUEUE_VERSION etcd=$ETCD_VERSION cgo=0 trimpath -s -w ldflags=v1"
stamp="$( { "$GO" version; echo "$RECIPE"; cat "$HERE"/*/go.mod "$HERE"/*/go.sum; } \
          | sha256sum | cut -c1-16)"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/gpujobs-controlplane/$stamp"
BIN="$ROOT/bin"
mkdir -p "$BIN" "$ROOT/logs"

if [ -n "${CONTROLPLANE_CHECK_ONLY:-}" ]; then  # the realcp fixture: where are they, build nothing
  [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ] || { echo "build.sh: not built yet: $BIN" >&2; exit 1; }
  echo "$BIN"; exit 0
fi

need_gib=12
have_kib=$(df -Pk "$ROOT" | awk 'NR==2 {print $4}')
missing_any=0
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kueue; do
  [ -x "$BIN/$b" ] || grep -q "^$b	" "$BIN/MISSING" 2>/dev/null || missing_any=1
done
if [ "$missing_any" = 1 ] && [ "$have_kib" -lt $((need_gib * 1024 * 1024)) ]; then
  echo "build.sh: only $((have_kib / 1024)) MiB free under $ROOT; a cold build needs about ${need_gib} GiB" \
       "(module cache, build cache, binaries). Free some disk and rerun." >&2
  exit 3
fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod
build_flags=(-p "${CONTROLPLANE_BUILD_P:-2}" -trimpath)
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

k8s_ldflags() {  # $1 = package prefix, $2 = git version
  local v="$2" major minor
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  echo "-X $1.gitVersion=$v -X $1.gitMajor=$major -X $1.gitMinor=$minor -X $1.gitTreeState=clean -X $1.buildDate=$now"
}
K8S_LDFLAGS="-s -w $(k8s_ldflags k8s.io/component-base/version $K8S_VERSION) $(k8s_ldflags k8s.io/client-go/pkg/version $K8S_VERSION)"

record_missing() {  # name module@version log
  local reason
  reason="$(grep -v '^go: downloading' "$3" | tail -n 3 | tr '\t\n' '  ')"
  printf '%s\t%s\t%s\n' "$1" "$2" "$reason" >> "$BIN/MISSING"
  echo "build.sh: $1 ($2) could not be built: $reason (log: $3)" >&2
}

# build NAME... -- MODULE@VERSION WRAPPER -- go-build-args...: builds when any NAME is absent.
build() {
  local names=() mod wrapper
  while [ "$1" != "--" ]; do names+=("$1"); shift; done; shift
  mod="$1" wrapper="$2"; shift 3
  local todo=0
  for n in "${names[@]}"; do
    [ -x "$BIN/$n" ] && continue
    # CONTROLPLANE_ONLY="kueue ...": build only these (e.g. Kueue beside a running k8s build)
    if [ -n "${CONTROLPLANE_ONLY:-}" ] && [[ " $CONTROLPLANE_ONLY " != *" $n "* ]]; then continue; fi
    if grep -q "^$n	" "$BIN/MISSING" 2>/dev/null; then
      echo "build.sh: $n failed before for this stamp (see $BIN/MISSING); delete that line to retry" >&2
      continue
    fi
    todo=1
  done
  [ "$todo" = 1 ] || return 0
  local log="$ROOT/logs/${names[0]}.log" out="$ROOT/tmp-${names[0]}"
  rm -rf "$out"; mkdir -p "$out"
  echo "build.sh: building ${names[*]} from $mod (log $log)" >&2
  local t0=$SECONDS
  if (cd "$HERE/$wrapper" && nice -n "${CONTROLPLANE_NICE:-5}" "$GO" build "${build_flags[@]}" -o "$out/" "$@") >"$log" 2>&1; then
    # go names go.etcd.io/etcd/server/v3's binary "server": a single output takes the single name.
    if [ "${#names[@]}" = 1 ] && [ ! -e "$out/${names[0]}" ]; then mv -f "$out"/* "$out/${names[0]}"; fi
    for n in "${names[@]}"; do mv -f "$out/$n" "$BIN/$n"; done
    echo "build.sh: built ${names[*]} in $((SECONDS - t0)) s" >&2
  else
    for n in "${names[@]}"; do record_missing "$n" "$mod" "$log"; done
  fi
  rm -rf "$out"
}

# etcd and kube-apiserver first: alone they give the "validating store" fallback.
build etcd -- "go.etcd.io/etcd/server/v3@$ETCD_VERSION" etcd -- \
  -ldflags "-s -w" go.etcd.io/etcd/server/v3
build kube-apiserver -- "k8s.io/kubernetes@$K8S_VERSION" k8s -- \
  -ldflags "$K8S_LDFLAGS" k8s.io/kubernetes/cmd/kube-apiserver
# One go build for both, so packages they share compile once (the build cache also shares the
# packages already compiled for kube-apiserver).
build kube-controller-manager kube-scheduler -- "k8s.io/kubernetes@$K8S_VERSION" k8s -- \
  -ldflags "$K8S_LDFLAGS" k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

# Kueue as released: every module its go.mod names is served (docs/controlplane.md, probe).
build kueue -- "sigs.k8s.io/kueue@$KUEUE_VERSION" kueue -- \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.GitCommit=module-$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.BuildDate=$now" \
  sigs.k8s.io/kueue/cmd/kueue

if [ -z "${CONTROLPLANE_ONLY:-}" ] && ! { [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ]; }; then
  echo "build.sh: etcd or kube-apiserver missing" >&2; exit 1
fi
echo "$BIN"
