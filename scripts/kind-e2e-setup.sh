#!/usr/bin/env bash
# Create a kind cluster with Kueue, Volcano, the MPI Operator, KubeRay, Kubeflow Trainer (v2)
# and AppWrapper, plus the queue objects the gpujobs e2e suite uses. CPU only (no GPUs).
#
#   scripts/kind-e2e-setup.sh            # cluster "gpujobs-e2e", namespace "gpujobs-e2e"
#   export KUBECONFIG=$(kind get kubeconfig-path 2>/dev/null || echo ~/.kube/config)
#   .venv/bin/python -m pytest tests/e2e -m e2e -q
#   kind delete cluster --name gpujobs-e2e   # clean up
#
# Needs: docker (builds gpujobs' MPI image, docker/mpi), kind >= 0.24, kubectl, helm; network access to GitHub releases.
# Versions follow docs/kubernetes-kinds.md, "Supported upstream versions" (Kueue v0.19, Volcano v1.15, MPI Operator v0.8,
# KubeRay v1.7, Trainer v2.3+ with its torch-distributed ClusterTrainingRuntime, AppWrapper v1.1.2).
# Override with the variables below. PyTorchJob (Training Operator v1) is
# not installed: its mpijobs.kubeflow.org CRD (v1 only) cannot replace the MPI Operator's v2beta1
# one, and Kueue deprecates that integration; DDP/FSDP run as TrainJob. Kueue's
# integrations.frameworks is set explicitly to the kinds gpujobs submits (see below).
set -euo pipefail

CLUSTER=${CLUSTER:-gpujobs-e2e}
NS=${NS:-gpujobs-e2e}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
VOLCANO_VERSION=${VOLCANO_VERSION:-v1.15.1}
MPI_OPERATOR_VERSION=${MPI_OPERATOR_VERSION:-v0.8.0}
KUBERAY_VERSION=${KUBERAY_VERSION:-1.7.0}
TRAINER_VERSION=${TRAINER_VERSION:-v2.3.0}  # v2.2+ needed (runtimePatches); v2.1 is refused
APPWRAPPER_VERSION=${APPWRAPPER_VERSION:-v1.1.2}
PYTHON=${PYTHON:-python3}  # with PyYAML (Kueue's configuration); the Python you submit from (MPI image)
MPI_GANG_SCHEDULING=${MPI_GANG_SCHEDULING:-}  # "volcano": run the MPI Operator with --gang-scheduling=volcano
HERE=$(cd "$(dirname "$0")/.." && pwd)

need() { command -v "$1" >/dev/null || { echo "missing: $1" >&2; exit 1; }; }
need kind; need kubectl; need helm; need docker
PYV=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
MPI_IMAGE=${MPI_IMAGE:-gpujobs-mpi:py${PYV/./}}

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
kubectl config use-context "kind-$CLUSTER"

echo "== Kueue $KUEUE_VERSION"
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
kubectl -n kueue-system rollout status deploy/kueue-controller-manager --timeout=300s
# Kueue manages only the kinds in its Configuration's integrations.frameworks (ConfigMap
# kueue-manager-config); name the ones gpujobs submits instead of relying on the release default.
tmp=$(mktemp)
kubectl -n kueue-system get configmap kueue-manager-config \
  -o jsonpath='{.data.controller_manager_config\.yaml}' > "$tmp"
"$PYTHON" - "$tmp" <<'PY'
import sys, yaml
path = sys.argv[1]
cfg = yaml.safe_load(open(path)) or {}
fw = cfg.setdefault("integrations", {}).setdefault("frameworks", [])
for name in ("batch/job", "pod", "jobset.x-k8s.io/jobset", "kubeflow.org/mpijob", "ray.io/rayjob",
             "ray.io/raycluster", "trainer.kubeflow.org/trainjob", "workload.codeflare.dev/appwrapper"):
    if name not in fw:
        fw.append(name)
yaml.safe_dump(cfg, open(path, "w"), sort_keys=False)
PY
kubectl -n kueue-system create configmap kueue-manager-config \
  --from-file=controller_manager_config.yaml="$tmp" --dry-run=client -o yaml | kubectl apply -f -
rm -f "$tmp"
kubectl -n kueue-system rollout restart deploy/kueue-controller-manager
kubectl -n kueue-system rollout status deploy/kueue-controller-manager --timeout=300s

echo "== Volcano $VOLCANO_VERSION"
kubectl apply -f "https://raw.githubusercontent.com/volcano-sh/volcano/$VOLCANO_VERSION/installer/volcano-development.yaml"
kubectl -n volcano-system rollout status deploy/volcano-scheduler --timeout=300s

echo "== MPI Operator $MPI_OPERATOR_VERSION"
kubectl apply --server-side -f "https://raw.githubusercontent.com/kubeflow/mpi-operator/$MPI_OPERATOR_VERSION/deploy/v2beta1/mpi-operator.yaml"
if [ "$MPI_GANG_SCHEDULING" = volcano ]; then
  # volcano='gang' MPIJobs need the operator's --gang-scheduling=volcano (the release manifest has
  # none; cmd/mpi-operator/app/options/options.go). With it, every MPIJob's pods go to Volcano.
  kubectl -n mpi-operator patch deploy mpi-operator --type=json \
    -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--gang-scheduling=volcano"}]'
fi
kubectl -n mpi-operator rollout status deploy/mpi-operator --timeout=300s

echo "== gpujobs' MPI image (docker/mpi) for Python $PYV: $MPI_IMAGE"
# MPI needs sshd, ssh, Open MPI, mpi4py and the submitter's Python in the image; the default
# pytorch image has none of the first four (docs/kubernetes-kinds.md, MPIJob).
docker build -t "$MPI_IMAGE" --build-arg PYTHON="$PYV" "$HERE/docker/mpi"
kind load docker-image "$MPI_IMAGE" --name "$CLUSTER"

echo "== KubeRay $KUBERAY_VERSION"
helm repo add kuberay https://ray-project.github.io/kuberay-helm/ >/dev/null
helm upgrade --install kuberay-operator kuberay/kuberay-operator --version "$KUBERAY_VERSION" \
  --namespace ray-system --create-namespace --wait

echo "== Kubeflow Trainer $TRAINER_VERSION (TrainJob + torch-distributed runtime)"
kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=$TRAINER_VERSION"
kubectl -n kubeflow-system rollout status deploy/kubeflow-trainer-controller-manager --timeout=300s
kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref=$TRAINER_VERSION"
# gpujobs' runtimes (restartPolicy Never, backoffLimit 0: a failing rank fails the TrainJob at once)
kubectl apply -f "$(dirname "$0")/../docs/trainer-runtimes.yaml"


echo "== AppWrapper $APPWRAPPER_VERSION"
kubectl apply --server-side -f "https://github.com/project-codeflare/appwrapper/releases/download/$APPWRAPPER_VERSION/install.yaml"
# The AppWrapper controller must be allowed to create Volcano Jobs (volcano='appwrapper').
kubectl apply -f - <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: appwrapper-volcano-jobs}
rules:
- apiGroups: [batch.volcano.sh]
  resources: [jobs]
  verbs: [create, delete, get, list, patch, update, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: appwrapper-volcano-jobs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: appwrapper-volcano-jobs}
subjects:
- {kind: ServiceAccount, name: appwrapper-controller-manager, namespace: appwrapper-system}
EOF

echo "== queues in namespace $NS"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpujobs-e2e}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: "8"}
      - {name: memory, nominalQuota: 16Gi}
      - {name: nvidia.com/gpu, nominalQuota: "0"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpujobs-e2e, namespace: $NS}
spec: {clusterQueue: gpujobs-e2e}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-high}
value: 1000
EOF
kubectl apply -n "$NS" -f "$HERE/docs/rbac.yaml" || true   # edit the subject for real users
echo "ready: export GPUJOBS_E2E_NAMESPACE=$NS GPUJOBS_E2E_QUEUE=gpujobs-e2e GPUJOBS_E2E_MPI_IMAGE=$MPI_IMAGE; pytest tests/e2e -m e2e"
