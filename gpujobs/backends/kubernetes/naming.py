"""Names, labels, annotations and job ids of Kubernetes jobs (the key store: :mod:`.keys`).

Job id: ``"<namespace>/<name>"``. Every object gpujobs creates for a job carries
the labels ``gpujobs.dev/job=<name>`` and ``gpujobs.dev/submission-id=<id>``; a call too
big to travel inline goes in the Secret ``<name>-gpujobs`` (see payload_objects).
"""
from __future__ import annotations

import hashlib
import re
import secrets

from ...errors import SpecError
from ...spec import JobSpec

LABEL_JOB = "gpujobs.dev/job"
LABEL_SUBMISSION = "gpujobs.dev/submission-id"
LABEL_FRAMEWORK = "gpujobs.dev/framework"
LABEL_ROLE = "gpujobs.dev/role"
ANN_KIND = "gpujobs.dev/kind"
ANN_GANG = "gpujobs.dev/gang-size"
ANN_GPUS = "gpujobs.dev/gpus"
ANN_WORLD = "gpujobs.dev/world-size"
ANN_RETURN_ALL = "gpujobs.dev/return-all"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpujobs")
USER_LABEL = "gpujobs.dev/user"
"""The submitter's login name (the USER column of ``gpujobs queue``), as a label value."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"

_MAX_NAME = 40


def new_submission_id() -> str:
    return secrets.token_hex(8)


def job_name(spec: JobSpec, submission_id: str) -> str:
    """``spec.name`` when given (deterministic), else ``<display-name>-<6 hex of the id>``."""
    if spec.name:
        return spec.name
    base = re.sub(r"[^a-z0-9-]", "-", spec.display_name.lower())
    base = re.sub(r"-+", "-", base).strip("-") or "job"
    if not base[0].isalpha():
        base = "j-" + base
    suffix = hashlib.sha256(submission_id.encode()).hexdigest()[:6]
    return f"{base[:_MAX_NAME - 7].rstrip('-')}-{suffix}"


def user_label() -> str:
    """This submitter's login name as a label value ('' when unknown): at most 63 characters of
    letters, digits, '-', '_' and '.', starting and ending with a letter or digit."""
    import getpass
    import re
    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without a passwd entry)
        return ""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)[:63].strip("-_.")


def payload_secret_name(name: str) -> str:
    return f"{name}-gpujobs"


def job_id(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def parse_job_id(jid: str) -> tuple[str, str]:
    """``"ns/name"`` -> (ns, name)."""
    ns, sep, name = jid.partition("/")
    if not sep or not ns or not name:
        raise SpecError("job_id", f"{jid!r} is not a Kubernetes job id",
                        "use '<namespace>/<name>' as printed by submit / gpujobs queue")
    return ns, name
