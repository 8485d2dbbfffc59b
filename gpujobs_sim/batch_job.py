"""The simulated Job controller for users' ``batch/v1`` Jobs (gpujobs' BatchJob kind).

Written from kubernetes v1.37.2 ``pkg/controller/job/`` (job_controller.go syncJob / manageJob /
deleteJobPods, indexed_job_utils.go, pod_failure_policy.go) and ``k8s.io/api@v0.37.2
batch/v1/types.go``, never from gpujobs' status mapping:

- a suspended Job has no pods: suspending deletes the active ones (their tracking finalizer is
  removed first, so they count neither as failures nor as successes; the sim marks them
  ``UNCOUNTED``), but a podFailurePolicy FailJob rule still judges every failed pod present,
  those too, and a failure goes before the suspend (syncJob: getFailJobMessage over all pods),
  sets ``Suspended=True`` (reason JobSuspended, "Job suspended") and clears ``startTime``; a
  resume sets ``Suspended=False`` (JobResumed, "Job resumed") and ``startTime`` to now;
- Indexed completion mode: one pod per index not yet succeeded, up to ``parallelism``, named
  ``<job>-<index>-<random>`` with hostname ``<job>-<index>`` (the template's ``subdomain`` kept),
  the index in the ``batch.kubernetes.io/job-completion-index`` annotation and label and in
  ``JOB_COMPLETION_INDEX``;
- a failed pod matching a podFailurePolicy FailJob rule (onExitCodes, In / NotIn) sets
  ``FailureTarget`` (reason PodFailurePolicy); otherwise counted failures above ``backoffLimit``
  (default 6) set it with BackoffLimitExceeded, and ``activeDeadlineSeconds`` past ``startTime``
  with DeadlineExceeded. Then the active pods are deleted and, once none is left, ``Failed`` is
  added with the same reason and message;
- every index succeeded and no pod active: ``SuccessCriteriaMet`` then ``Complete`` (reason
  CompletionsReached, "Reached expected number of succeeded pods"), ``completionTime``;
- ``status.active`` (pods not finished), ``ready`` (of them, Ready), ``succeeded``, ``failed``,
  ``completedIndexes``.

Jobs that another object controls (the MPI launcher, KubeRay's submitter) are left to their
operator's model (mpi_operator.py, kuberay.py).
"""
from __future__ import annotations

import secrets
import time
from typing import Any

from .conditions import _cond
from .kubelet import ANN_PORT, ANN_RANK, ANN_ROLE, ANN_WORLD
from .pod_templates import OWNER
from .rules import is_true, parse_time
from .store import now_iso

INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_ENV = "JOB_COMPLETION_INDEX"
DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 types.go JobSpec.BackoffLimit: "Defaults to 6"


def is_batch_job(job: dict) -> bool:
    return job.get("kind") == "Job" and str(job.get("apiVersion", "")).startswith("batch/")


UNCOUNTED = "sim.gpujobs.dev/finalizer-removed"  # the sim's mark of a pod whose tracking finalizer went


def _finished_pod(p: dict) -> bool:
    return (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _uncounted(p: dict) -> bool:
    """Its tracking finalizer was removed (deleteJobPods): the Job's counts leave it out."""
    return (p["metadata"].get("annotations") or {}).get(UNCOUNTED) == "true"


def _ready(p: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (p.get("status") or {}).get("conditions") or [])


def _index(p: dict) -> int | None:
    v = (p["metadata"].get("annotations") or {}).get(INDEX)
    return int(v) if v is not None and str(v).isdigit() else None


def fail_job_message(job: dict, pod: dict) -> tuple[bool, str | None]:
    """(counted, FailJob message or None) for a failed pod, by the Job's podFailurePolicy: the first
    rule whose onExitCodes match a terminated container's exit code decides (pod_failure_policy.go
    matchPodFailurePolicy; In / NotIn over ``values``; a rule naming a container looks only at it)."""
    rules = (((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules")) or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for i, rule in enumerate(rules):
        on = rule.get("onExitCodes")
        if not on:
            continue
        for cs in statuses:
            term = (cs.get("state") or {}).get("terminated")
            if term is None or (on.get("containerName") and on["containerName"] != cs.get("name")):
                continue
            code = int(term.get("exitCode", 0))
            values = [int(v) for v in on.get("values") or []]
            if (code in values) != (on.get("operator") == "In"):
                continue
            action = rule.get("action")
            if action == "Ignore":
                return False, None
            if action == "FailJob":
                md = pod["metadata"]
                return True, (f"Container {cs.get('name')} for pod {md['namespace']}/{md['name']} failed with "
                              f"exit code {code} matching FailJob rule at index {i}")
            return True, None
    return True, None


def _indexes_text(done: set[int]) -> str:
    """completedIndexes: increasing, runs of three or more as first-last ("1,3-5,7")."""
    out, run = [], []
    for i in sorted(done):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out)


def operate(ctrl: Any, job: dict) -> None:
    md, spec = job["metadata"], job.get("spec") or {}
    ns, store = md["namespace"], ctrl.store
    if md.get("deletionTimestamp") or any(o.get("controller") for o in md.get("ownerReferences") or ()):
        return
    if is_true(job, "Complete") or is_true(job, "Failed"):
        return
    pods = ctrl._pods_of(job)
    active = [p for p in pods if not _finished_pod(p) and not p["metadata"].get("deletionTimestamp")]
    failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
    # the podFailurePolicy judges every failed pod still there, those deleted on a suspend too
    # (getFailJobMessage), and a failure goes before the suspend (syncJob's finishedCondition)
    judged = [(p, *fail_job_message(job, p)) for p in failed]  # (pod, counted, FailJob message)
    policy = next((m for _, _, m in judged if m), None)
    if spec.get("suspend") and policy is None and not is_true(job, "FailureTarget"):
        for p in active:  # deleteJobPods: the tracking finalizer first, so they are not counted
            store.mutate("v1", "Pod", p["metadata"]["name"], ns,
                         lambda o: o["metadata"].setdefault("annotations", {}).update({UNCOUNTED: "true"}))
            store.delete("v1", "Pod", p["metadata"]["name"], ns)

        def suspend(o: dict) -> None:
            st = o.setdefault("status", {})
            if not is_true(o, "Suspended"):
                _cond(o, "Suspended", "True", "JobSuspended", "Job suspended")
                st.pop("startTime", None)
            st.update(active=0, ready=0)
        store.mutate(job["apiVersion"], "Job", md["name"], ns, suspend)
        return
    completions = int(spec.get("completions") or 1)
    parallelism = int(spec.get("parallelism", 1))
    # a pod counts only with its tracking finalizer (getValidPodsWithFilter): one that succeeded
    # after a suspend took the finalizer off (a function returning in its grace) completes nothing
    done = {i for p in pods if (p.get("status") or {}).get("phase") == "Succeeded" and not _uncounted(p)
            for i in [_index(p)] if i is not None and i < completions}
    counted = sum(1 for p, count, _ in judged if count and not _uncounted(p))
    reason, message = ("PodFailurePolicy", policy) if policy else ("", "")
    start = parse_time((job.get("status") or {}).get("startTime"))
    limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    deadline = spec.get("activeDeadlineSeconds")
    if not reason and counted > limit:
        reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    if not reason and deadline and start is not None:
        if time.time() >= start + int(deadline):
            reason, message = "DeadlineExceeded", "Job was active longer than specified deadline"
        else:
            ctrl.changes.at("deadline", f"batch/v1|Job|{ns}|{md['name']}", start + int(deadline))
    if reason or is_true(job, "FailureTarget"):
        for p in active:
            store.delete("v1", "Pod", p["metadata"]["name"], ns)
        left = [p for p in ctrl._pods_of(job) if not _finished_pod(p)]

        def fail(o: dict) -> None:
            if not is_true(o, "FailureTarget"):
                _cond(o, "FailureTarget", "True", reason, message)
            target = next(c for c in o["status"]["conditions"] if c["type"] == "FailureTarget")
            o["status"].update(active=len(left), ready=0, failed=len(failed))
            if not left:
                _cond(o, "Failed", "True", target["reason"], target["message"])
        store.mutate(job["apiVersion"], "Job", md["name"], ns, fail)
        return
    if len(done) >= completions and not active:
        def complete(o: dict) -> None:
            st = o.setdefault("status", {})
            _cond(o, "SuccessCriteriaMet", "True", "CompletionsReached", "Reached expected number of succeeded pods")
            _cond(o, "Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods")
            st.update(active=0, ready=0, succeeded=len(done), failed=len(failed),
                      completedIndexes=_indexes_text(done), completionTime=now_iso())
        store.mutate(job["apiVersion"], "Job", md["name"], ns, complete)
        return
    running = {_index(p) for p in active}
    wanted = [i for i in range(completions) if i not in done and i not in running]
    wanted = wanted[:max(0, parallelism - len(active))]
    if wanted:
        port = next(((p["metadata"].get("annotations") or {}).get(ANN_PORT) for p in active), None) \
            or str(ctrl.next_port())
        for i in wanted:
            _create_pod(ctrl, job, i, port, world=completions)
        active = [p for p in ctrl._pods_of(job) if not _finished_pod(p)]

    def progress(o: dict) -> None:
        st = o.setdefault("status", {})
        if is_true(o, "Suspended"):
            _cond(o, "Suspended", "False", "JobResumed", "Job resumed")
            st["startTime"] = now_iso()
        st.setdefault("startTime", now_iso())
        st.update(active=len(active), ready=sum(_ready(p) for p in active), succeeded=len(done),
                  failed=len(failed))
        if done:
            st["completedIndexes"] = _indexes_text(done)
    store.mutate(job["apiVersion"], "Job", md["name"], ns, progress)


def _create_pod(ctrl: Any, job: dict, index: int, port: str, world: int) -> None:
    import copy
    md = job["metadata"]
    tmpl = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmd, pspec = tmpl.get("metadata") or {}, tmpl.get("spec") or {}
    for c in pspec.get("containers") or []:  # addCompletionIndexEnvVariable (a fieldRef upstream)
        c["env"] = [e for e in c.get("env") or [] if e.get("name") != INDEX_ENV] + [
            {"name": INDEX_ENV, "value": str(index)}]
    pspec["hostname"] = f"{md['name']}-{index}"
    labels = {**(tmd.get("labels") or {}), INDEX: str(index), "batch.kubernetes.io/job-name": md["name"],
              "job-name": md["name"], "batch.kubernetes.io/controller-uid": md["uid"],
              "controller-uid": md["uid"], OWNER: md["uid"]}
    ann = {**(tmd.get("annotations") or {}), INDEX: str(index),
           ANN_ROLE: "rank", ANN_RANK: str(index), ANN_WORLD: str(world), ANN_PORT: port}
    ctrl.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{md['name']}-{index}-{secrets.token_hex(3)[:5]}", "namespace": md["namespace"],
        "labels": labels, "annotations": ann,
        "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": "Job", "name": md["name"], "uid": md["uid"],
                             "controller": True, "blockOwnerDeletion": True}]},
        "spec": pspec})
