"""Checks made before anything is created; each failure names the object at fault.

1. the kind's CRD is served (API discovery, open to every user); Volcano's PodGroup API
   too for volcano='gang' / 'appwrapper';
2. the user may create the job, ConfigMaps and Secrets (SelfSubjectAccessReview; the
   shared runtime ConfigMap and key Secret, a big call's payload Secret);
3. Kueue kinds: the LocalQueue exists, its ClusterQueue exists and could ever fit the
   job (nominal + borrowingLimit per flavor), the WorkloadPriorityClass exists;
   a Trainer v2 job: its ClusterTrainingRuntime exists; bare Volcano Job: its Volcano Queue
   (and PriorityClass) exist.

Cluster-scoped reads answered 403 are skipped with a warning (the documented Role
is namespaced). Answers are cached per backend for ``preflight_ttl`` seconds, so a
burst of submits pays for the checks once.
"""
from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor, wait
import warnings
from typing import Any, Callable

from ....errors import Fix, GracePeriodWarning, PreflightError, QuotaError, RankRerunWarning, SubmitError
from ....quantity import parse_quantity
from ..cluster import Cluster
from ..kinds import KINDS
from ..render.podsets import pod_sets, total_requests
from ..render.job import Rendered
from ..access import RBAC_FIX
from ..retry import retrying


class _Miss(Exception):
    """An answer the cache does not hold (raised only by a cache made with ``offline=True``)."""


class _Cache:
    def __init__(self, backend: Cluster, offline: bool = False):
        self.store: dict = backend.state.preflight
        self.ttl = backend.preflight_ttl
        self.offline = offline

    def fresh(self, key: Any) -> bool:
        hit = self.store.get(key)
        return hit is not None and time.monotonic() - hit[0] < self.ttl

    def put(self, key: Any, value: Any) -> None:
        self.store[key] = (time.monotonic(), value)

    def get(self, key: Any, fetch: Callable[[], Any]) -> Any:
        """Cached answer; negative answers (None, not allowed) are never cached."""
        if self.fresh(key):
            return self.store[key][1]
        if self.offline:
            raise _Miss(key)
        value = fetch()
        if value is not None and not (isinstance(value, tuple) and value and value[0] is False):
            self.put(key, value)
        return value


def _api_exc():
    from kubernetes.client.exceptions import ApiException
    return ApiException


def _raw_get(api_client: Any, path: str, timeout: float | tuple[float, float]) -> Any:
    return retrying(lambda: api_client.call_api(
        path, "GET", response_type="object", auth_settings=["BearerToken"],
        _return_http_data_only=True, _preload_content=True, _request_timeout=timeout))


def _get_custom(backend: Cluster, group: str, version: str, plural: str, name: str,
                namespace: str | None = None) -> dict | None | str:
    """The object, None on 404, or "forbidden" on 403."""
    from kubernetes import client

    api = client.CustomObjectsApi(backend.api_client)
    try:
        if namespace:
            return retrying(lambda: api.get_namespaced_custom_object(
                group, version, namespace, plural, name, _request_timeout=backend.http_timeout))
        return retrying(lambda: api.get_cluster_custom_object(
            group, version, plural, name, _request_timeout=backend.http_timeout))
    except _api_exc() as exc:
        if exc.status == 404:
            return None
        if exc.status == 403:
            return "forbidden"
        raise _wrap(exc, f"reading {plural}.{group} {name}") from None


def local_queue_names(backend: Cluster, namespace: str) -> list[str] | None:
    """Names of the LocalQueues in ``namespace`` (one list call); None when this user may not
    list them or Kueue is not installed (then nobody can say a queue name is wrong)."""
    return kueue_names(backend, "localqueues", namespace)


def kueue_names(backend: Cluster, plural: str, namespace: str | None = None) -> list[str] | None:
    """Names of the Kueue objects ``plural`` (in ``namespace``, or cluster-scoped), one list call;
    None when this user may not list them or Kueue is not installed."""
    from kubernetes import client

    api = client.CustomObjectsApi(backend.api_client)
    try:
        out = retrying(lambda: api.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, plural, _request_timeout=backend.http_timeout)
            if namespace else api.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural,
                                                             _request_timeout=backend.http_timeout))
    except _api_exc() as exc:
        if exc.status in (403, 404):
            return None
        raise _wrap(exc, f"listing {plural}" + (f" in namespace {namespace}" if namespace else "")) from None
    return sorted(o["metadata"]["name"] for o in (out or {}).get("items", []))


def those_that_exist(name: str, known: list[str] | None, what: str) -> str:
    """' (did you mean 'x'?); LocalQueues there: a, b' for an unknown ``name`` ('' when the list
    could not be read)."""
    if known is None:
        return ""
    import difflib
    close = difflib.get_close_matches(name, known, n=1)
    return ((f" (did you mean {close[0]!r}?)" if close else "")
            + f"; {what}: {', '.join(known) if known else 'none'}")


def _wrap(exc: Any, what: str) -> SubmitError:
    return SubmitError(f"{what} failed: HTTP {exc.status} {exc.reason}: "
                       f"{(exc.body or '')[:300] if isinstance(exc.body, str) else exc.body}")


def _skip(what: str) -> None:
    warnings.warn(f"gpujobs preflight: cannot read {what} (403); skipping that check",
                  RuntimeWarning, stacklevel=4)


def _require(backend: Cluster, cache: _Cache, what: str, group: str, version: str, plural: str,
             name: str, missing: str | Callable[[], str], namespace: str | None = None,
             forbidden: str | None = None, fix: Fix | None = None) -> dict | None:
    """The object (cached), PreflightError(``what``, ``missing``) when it does not exist. When
    this user may not read it: PreflightError(``what``, ``forbidden``) if given, else None with
    a warning (cluster-scoped reads: the documented Role is namespaced). ``fix``: the missing one's."""
    obj = cache.get((plural, namespace, name), lambda: _get_custom(backend, group, version, plural,
                                                                   name, namespace))
    if obj == "forbidden":
        if forbidden:
            raise PreflightError(what, forbidden)
        _skip(what)
        return None
    if obj is None:  # (a callable: the text needs a list call, made only now)
        raise PreflightError(what, missing() if callable(missing) else missing, fix)
    return obj


def _served(backend: Cluster, cache: _Cache, api_version: str) -> set[str] | None:
    def fetch() -> set[str] | None:
        try:
            data = _raw_get(backend.api_client, f"/apis/{api_version}", backend.http_timeout)
        except _api_exc() as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:  # Kubernetes grants discovery to every user (system:discovery)
                raise PreflightError(
                    f"API discovery of {api_version}",
                    "this cluster refuses API discovery to your user (HTTP 403 Forbidden), which "
                    "Kubernetes' default ClusterRoleBinding system:discovery grants to every "
                    "authenticated user",
                    Fix.say("ask a cluster admin to grant it back: kubectl create clusterrolebinding "
                            "gpujobs-discovery --clusterrole=system:discovery --group=system:authenticated")) from None
            raise _wrap(exc, f"API discovery of {api_version}") from None
        return {r.get("name") for r in (data or {}).get("resources", [])}

    return cache.get(("discovery", api_version), fetch)


def check_volcano(backend: Cluster, cache: _Cache) -> None:
    served = _served(backend, cache, "scheduling.volcano.sh/v1beta1")
    if not served or "podgroups" not in served:
        raise PreflightError("CRD podgroups.scheduling.volcano.sh",
                             "volcano='gang' needs Volcano's scheduler, which is not installed in "
                             "this cluster; install Volcano or use volcano='none'")


def check_crd(backend: Cluster, cache: _Cache, kind: str) -> None:
    info = KINDS[kind]
    served = _served(backend, cache, info.api_version)
    if not served or info.plural not in served:
        raise PreflightError(f"CRD {info.crd_name}",
                             f"the {kind} API ({info.api_version}) is not installed in this cluster; "
                             f"install its operator (see scripts/kind-e2e-setup.sh) or choose another "
                             f"kind: gpujobs submit --kind KIND ... (Python: .kubernetes(kind=...))")


def check_access(backend: Cluster, cache: _Cache, namespace: str, group: str, resource: str) -> None:
    """SelfSubjectAccessReview: may this user create ``resource`` in ``namespace``?"""
    from kubernetes import client

    def fetch() -> tuple[bool, str]:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": namespace, "verb": "create",
                                                "group": group, "resource": resource}}}
        authz = client.AuthorizationV1Api(backend.api_client)
        try:
            out = retrying(lambda: authz.create_self_subject_access_review(
                body, _request_timeout=backend.http_timeout))
        except _api_exc() as exc:
            raise _wrap(exc, "SelfSubjectAccessReview") from None
        st = out.status
        return bool(st.allowed), (st.reason or "")

    allowed, reason = cache.get(("ssar", namespace, group, resource), fetch)
    if not allowed:
        full = f"{resource}.{group}" if group else resource
        raise PreflightError(
            f"RBAC: create {full} in namespace {namespace}",
            f"you are not allowed to create {full} in namespace {namespace!r}"
            f"{' (' + reason + ')' if reason else ''}; " + RBAC_FIX.format(ns=namespace))


def check_kueue(backend: Cluster, cache: _Cache, r: Rendered) -> None:
    labels = r.job["metadata"]["labels"]
    queue = labels["kueue.x-k8s.io/queue-name"]
    ns = r.namespace
    lq = _require(backend, cache, f"LocalQueue {ns}/{queue}", "kueue.x-k8s.io", "v1beta2",
                  "localqueues", queue, lambda: f"no LocalQueue {queue!r} in namespace {ns!r}"
                  f"{those_that_exist(queue, local_queue_names(backend, ns), 'LocalQueues there')}",
                  fix=Fix.set("queue", "NAME", "pass {} with one of them (list them with "
                              f"`kubectl get localqueues -n {ns}`)"),
                  namespace=ns,
                  # unlike the cluster-scoped reads, the Role grants this one
                  forbidden=f"you may not read LocalQueues in namespace {ns!r}; "
                  + RBAC_FIX.format(ns=ns))
    assert lq is not None  # forbidden= given: a refusal raises instead
    cq_name = str((lq.get("spec") or {}).get("clusterQueue"))
    cq = _require(backend, cache, f"ClusterQueue {cq_name}", "kueue.x-k8s.io", "v1beta2",
                  "clusterqueues", cq_name, f"LocalQueue {ns}/{queue} points at ClusterQueue "
                  f"{cq_name!r}, which does not exist; ask the cluster admin")
    if cq is not None:
        check_fits(cq, r)
    prio = labels.get("kueue.x-k8s.io/priority-class")
    if prio:
        _require(backend, cache, f"WorkloadPriorityClass {prio}", "kueue.x-k8s.io", "v1beta2",
                 "workloadpriorityclasses", prio, lambda: f"priority {prio!r} does not exist (Kueue would "
                 "never create the Workload)" + those_that_exist(
                     prio, kueue_names(backend, "workloadpriorityclasses"), "WorkloadPriorityClasses"),
                 fix=Fix.set("priority", "NAME", "pass {} with one of them (list them with `kubectl get "
                             "workloadpriorityclasses`)"))


def _parse(q: Any):
    return parse_quantity(q, "ClusterQueue quota")


def check_fits(cq: dict, r: Rendered) -> None:
    """QuotaError when no admission could ever fit the job in this ClusterQueue.

    Per resource: every pod set's total must fit in one flavor (nominal + borrowingLimit;
    unlimited borrowing inside a cohort when no limit is set) and the job's total in all
    flavors together. A resource the ClusterQueue does not cover at all never fits.
    """
    name = cq["metadata"]["name"]
    spec = cq.get("spec") or {}
    in_cohort = bool(spec.get("cohortName") or spec.get("cohort"))
    caps: dict[str, dict[str, Any]] = {}  # resource -> flavor -> capacity (None = unbounded)
    for group in spec.get("resourceGroups", []):
        for fl in group.get("flavors", []):
            for res in fl.get("resources", []):
                cap: Any = _parse(res.get("nominalQuota", 0))
                if res.get("borrowingLimit") is not None:
                    cap += _parse(res["borrowingLimit"])
                elif in_cohort:
                    cap = None
                caps.setdefault(res["name"], {})[fl["name"]] = cap
    sets = pod_sets(r.job)
    total = total_requests(sets)
    for resource, amount in total.items():
        if amount == 0:
            continue
        flavors = caps.get(resource)
        if not flavors:
            who = [ps.name for ps in sets if ps.requests.get(resource)]
            why = (" (only its submitter pod asks for it: KubeRay's default submitter requests 500m CPU "
                   "and 200Mi memory, and Kueue counts that pod)" if who == ["submitter"] else "")
            raise QuotaError(f"this job can never start: it asks for {resource}, which its queue "
                             f"does not offer at all. In detail: ClusterQueue {name} has no quota for {resource} (it covers "
                             f"{', '.join(sorted(caps)) or 'nothing'}); the job asks for {amount}{why} "
                             f"and could never be admitted (Kueue: 'resource {resource} unavailable in "
                             f"ClusterQueue'). Use a queue that offers {resource}, or have its admin add "
                             f"{resource} to the ClusterQueue's coveredResources.")
        if any(c is None for c in flavors.values()):
            continue
        biggest_flavor, biggest = max(flavors.items(), key=lambda kv: kv[1])
        everything = sum(flavors.values())
        largest_set = max((ps.requests.get(resource, 0) * ps.count for ps in sets))
        if amount > everything or largest_set > biggest:
            raise QuotaError(
                f"this job can never start: it asks for more {resource} than its queue has, even "
                f"when nothing else runs. In detail: ClusterQueue {name} can never fit it: it needs {amount} {resource} "
                f"(largest pod set {largest_set}) but the queue offers at most {everything} "
                f"(largest flavor {biggest_flavor}: {biggest}, nominal + borrowing limit). "
                f"Ask for fewer, or use a bigger queue.")


def check_trainer_api(backend: Cluster, cache: _Cache, r: Rendered) -> None:
    """Refuse a Trainer v2 job on Kubeflow Trainer v2.1 (its CRD would prune the runtime patch and the
    job would never start) and drop what v2.2 lacks; see trainer_api. A user who may not read CRDs
    (cluster-scoped) gets a warning and the v2.3 rendering."""
    from . import trainer_api as ta
    crd = cache.get(("crd", ta.TRAINJOB_CRD), lambda: _get_custom(
        backend, "apiextensions.k8s.io", "v1", "customresourcedefinitions", ta.TRAINJOB_CRD))
    if crd == "forbidden":
        _skip(f"CRD {ta.TRAINJOB_CRD} (to tell the Kubeflow Trainer version)")
    api = ta.trainer_api(crd) if isinstance(crd, dict) else ta.UNKNOWN
    if api == ta.V21:
        raise PreflightError(
            f"CRD {ta.TRAINJOB_CRD}",
            f"this cluster serves Kubeflow Trainer v2.1 (its {r.kind} has podTemplateOverrides, not "
            "runtimePatches); gpujobs needs Trainer v2.2 or newer (v2.3+ recommended): upgrade it "
            "(kubectl apply --server-side -k \"github.com/kubeflow/trainer.git/manifests/overlays/"
            "manager?ref=v2.3.0\"), or use another kind: gpujobs submit --kind PyTorchJob ...")
    ta.adapt(r.job, api)
    if api in (ta.V23, ta.UNKNOWN) and r.job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name"):
        check_kueue_keeps_grace(backend, cache, r)


def check_kueue_keeps_grace(backend: Cluster, cache: _Cache, r: Rendered) -> None:
    """Warn when the cluster's Kueue (read from its manager's image, submit/kueue_version.py) will
    drop the Trainer v2 job's terminationGracePeriodSeconds on admission (Kueue before v0.20)."""
    from . import kueue_version as kv
    grace = None
    for patch in r.job["spec"].get("runtimePatches") or []:
        for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            grace = rj["template"]["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", grace)
    if grace is None or grace == 30:  # the pod default (core/v1 PodSpec terminationGracePeriodSeconds)
        return
    version = cache.get(("kueue-version",), lambda: backend.detected_kueue_version() or "")
    if kv.erases_trainjob_grace_period(version):
        warnings.warn(f"Kueue {version} vendors Kubeflow Trainer v2.2.1 and rewrites the {r.kind} without "
                      f"terminationGracePeriodSeconds when it admits it (kueue@v0.19.2 pkg/controller/jobs/trainjob/"
                      f"trainjob_controller.go RunWithPodSetsInfo): the pods get 30 s, not the {grace} s gpujobs "
                      "asked for, to save a checkpoint on preemption or cancel. Fix: upgrade Kueue to v0.20 or "
                      "newer (a cluster admin), or use kind='PyTorchJob'", GracePeriodWarning, stacklevel=4)


def _runtime(backend: Cluster, cache: _Cache, name: str) -> dict | None | str:
    return cache.get(("clustertrainingruntimes", None, name), lambda: _get_custom(
        backend, "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", name))


def check_runtime(backend: Cluster, cache: _Cache, rt: str, key: str, config: Any, kind: str) -> None:
    """The ``kind`` (a Trainer v2 job)'s ClusterTrainingRuntime exists, and a failing rank under it fails the job
    (restartPolicy Never, backoffLimit 0: kubeflow.training_runtimes); a runtime that re-runs ranks
    in place (Trainer's stock torch-distributed) is used with a RankRerunWarning."""
    from ..render import kubeflow as kf
    obj = _runtime(backend, cache, rt)
    if obj == "forbidden":
        _skip(f"ClusterTrainingRuntime {rt}")
        return
    if obj is None:
        ours = rt in (kf.TRAINJOB_RUNTIME, kf.TRAINJOB_VOLCANO_RUNTIME)
        stock = ours and isinstance(_runtime(backend, cache, kf.STOCK_RUNTIME), dict)
        raise PreflightError(
            f"ClusterTrainingRuntime {rt}",
            f"the {kind} runtime {rt!r} is not installed (kubectl get clustertrainingruntimes lists those "
            "that are); fix: "
            + ("have a cluster admin install gpujobs' runtimes: gpujobs admin trainer-runtimes | kubectl "
               f"apply -f - (docs/kubernetes-kinds.md, {kind})"
               + (f"; only Kubeflow Trainer's stock {kf.STOCK_RUNTIME!r} is installed, under which a "
                  "failing rank runs your function again in place, up to 6 times" if stock else "")
               + "; or " if ours else "install Kubeflow Trainer's runtimes, or ")
            + f"name an installed one with {key} = \"NAME\" under [kubernetes] in {config} (Python: "
            f"KubernetesBackend({key}=...)), or use another kind: gpujobs submit --kind PyTorchJob ...")
    why = kf.runtime_reruns_ranks(obj) if isinstance(obj, dict) else ""
    if why:
        warnings.warn(f"ClusterTrainingRuntime {rt!r} ({why}) re-runs a failing rank in place: the kubelet "
                      "restarts its container and your function runs again, up to 6 times, before the "
                      f"{kind} fails; install gpujobs' runtimes (gpujobs admin trainer-runtimes | kubectl "
                      f"apply -f -) and drop {key} from [kubernetes] in {config}", RankRerunWarning, stacklevel=4)


def check_other(backend: Cluster, cache: _Cache, r: Rendered) -> None:
    from ....config import config_path
    if (r.job["spec"].get("runtimeRef") or {}).get("kind") == "ClusterTrainingRuntime":  # Trainer v2
        check_trainer_api(backend, cache, r)
        rt = r.job["spec"]["runtimeRef"]["name"]
        key = "trainjob_volcano_runtime" if rt == backend.options.trainjob_volcano_runtime and \
            rt != backend.options.trainjob_runtime else "trainjob_runtime"
        check_runtime(backend, cache, rt, key, config_path(), r.kind)
    if KINDS[r.kind].volcano_mode == "job":  # a bare Volcano Job: Volcano alone queues it
        q = r.job["spec"]["queue"]
        _require(backend, cache, f"Volcano Queue {q}", "scheduling.volcano.sh", "v1beta1", "queues",
                 q, f"no Volcano queue {q!r}; list them with `kubectl get queues.scheduling.volcano.sh`, "
                 f"then set volcano_queue = \"NAME\" under [kubernetes] in {config_path()} "
                 "(Python: .options(volcano_queue=\"NAME\"))")


_POOL = ThreadPoolExecutor(max_workers=6, thread_name_prefix="gpujobs-preflight")


def preflight(backend: Cluster, r: Rendered) -> None:
    """Run every check for ``r``; raise PreflightError / QuotaError before anything is created."""
    try:  # a burst of submits: every answer is cached, so check in this thread, no round trip
        for check in _checks(backend, _Cache(backend, offline=True), r):
            check()
        return
    except _Miss:
        pass
    # The checks only read; run them together (one round trip each, not one after another)
    # and report the first failure in the order above, so errors stay deterministic. All of
    # them end before preflight returns: none writes the cache after a caller has moved on.
    futures = [_POOL.submit(check) for check in _checks(backend, _Cache(backend), r)]
    wait(futures)
    for fut in futures:
        fut.result()


def _checks(backend: Cluster, cache: _Cache, r: Rendered) -> list[Callable[[], None]]:
    checks: list[Callable[[], None]] = [lambda: check_crd(backend, cache, r.kind)]
    wrapped = KINDS[r.kind].wraps
    if wrapped is not None:  # its controller creates the inner kind's object
        checks.append(lambda: check_crd(backend, cache, wrapped.name))
    if r.volcano == "gang":
        checks.append(lambda: check_volcano(backend, cache))
    info = KINDS[r.kind]
    extra = tuple(("", c["kind"].lower() + "s") for c in r.companions)  # a Service: services
    for group, resource in ((info.group, info.plural), ("", "configmaps"), ("", "secrets"), *extra):
        checks.append(functools.partial(check_access, backend, cache, r.namespace, group, resource))
    if KINDS[r.kind].kueue_integration:
        checks.append(lambda: check_kueue(backend, cache, r))
    checks.append(lambda: check_other(backend, cache, r))
    return checks
