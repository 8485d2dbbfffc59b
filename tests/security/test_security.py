"""Security: results authenticated before unpickling (local and Kubernetes), payload
authenticated in the rank, no secret values in rendered objects, pod hardening over the
whole render matrix, key files private, payload size limits."""
from __future__ import annotations

import base64
import io
import os
import pickle
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gpujobs
from gpujobs.errors import PayloadError, ResultAuthError
from gpujobs.payload import MAGIC, seal
from tests.support import MPI_IMAGE

SENTINEL = "s3cr3t-SENTINEL-7f2c9a"
# what a root sshd needs after drop ALL, plus NET_BIND_SERVICE, the file capability mpi-operator's
# images set on /usr/sbin/sshd (mpi-operator@v0.8.0 build/base/Dockerfile): all in Pod Security's
# baseline set (kubernetes.io/docs/concepts/security/pod-security-standards, Capabilities)
SSHD_CAPS = {"SETUID", "SETGID", "SYS_CHROOT", "CHOWN", "AUDIT_WRITE", "NET_BIND_SERVICE"}


class _Marker:
    """Unpickling this creates a file: proof that something was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def forged_envelope(marker: Path, key: bytes | None = None) -> bytes:
    body = pickle.dumps(_Marker(str(marker)))
    if key is not None:  # sealed with the WRONG key
        return seal(_Marker(str(marker)), key)
    return MAGIC + b"\x00" * 32 + body


def test_marker_payload_really_creates_the_file(tmp_path):
    """Control: the forged payloads used below do create the marker when unpickled."""
    marker = tmp_path / "control"
    pickle.loads(forged_envelope(marker)[len(MAGIC) + 32:])
    assert marker.exists()


def answer(*_data):
    return 42


# ------------------------------------------------------------------------------ local results
@pytest.mark.slow
def test_local_tampered_result_is_refused_and_never_unpickled(gpujobs_home, tmp_path, no_leftovers):
    job = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
    job.wait(timeout=120)
    outcome = gpujobs_home / "jobs" / job.id / "results" / "outcome-0.bin"
    assert outcome.exists()
    good = outcome.read_bytes()
    assert gpujobs.attach(job.id).result() == 42  # untouched: fine

    # 1) one flipped byte in the pickle body
    flipped = bytearray(good)
    flipped[-3] ^= 0x01
    outcome.write_bytes(bytes(flipped))
    with pytest.raises(ResultAuthError, match="not unpickled"):
        gpujobs.attach(job.id).result()

    # 2) a forged outcome whose unpickling would create a marker file (no MAC / wrong key)
    for i, blob in enumerate((forged_envelope(tmp_path / "m0"),
                              forged_envelope(tmp_path / "m1", key=os.urandom(32)))):
        outcome.write_bytes(blob)
        with pytest.raises(ResultAuthError):
            gpujobs.attach(job.id).result()
        with pytest.raises(ResultAuthError):
            gpujobs.attach(job.id).exception()
        assert not (tmp_path / f"m{i}").exists(), "a forged result was unpickled"
    no_leftovers(job.id)


@pytest.mark.slow
def test_rank_refuses_a_tampered_payload(tmp_path):
    """The runner verifies payload.bin with the job key before unpickling the call."""
    key = os.urandom(32)
    (tmp_path / "key").write_text(key.hex())
    marker = tmp_path / "payload-marker"
    (tmp_path / "payload.bin").write_bytes(forged_envelope(marker, key=os.urandom(32)))
    (tmp_path / "results").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.update(GPUJOBS_PAYLOAD=str(tmp_path / "payload.bin"), GPUJOBS_KEY_FILE=str(tmp_path / "key"),
               GPUJOBS_RESULT_SINK=f"dir:{tmp_path / 'results'}", GPUJOBS_FRAMEWORK="ddp",
               GPUJOBS_JOB_ID="sec-test", RANK="0", WORLD_SIZE="1", GPUJOBS_DEVICE="cpu")
    proc = subprocess.run([sys.executable, "-m", "gpujobs.runner"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "ResultAuthError" in proc.stderr and not marker.exists()
    from gpujobs.payload import open_envelope
    out = open_envelope((tmp_path / "results" / "outcome-0.bin").read_bytes(), key)
    assert not out.ok and out.exc_type.endswith("ResultAuthError")


@pytest.mark.slow
def test_local_job_files_are_private(gpujobs_home):
    job = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
    job.wait(timeout=120)
    jd = gpujobs_home / "jobs" / job.id
    assert stat.S_IMODE((jd / "key").stat().st_mode) == 0o600
    # other users on a shared machine can neither read results/payload nor the key
    assert stat.S_IMODE(jd.stat().st_mode) & 0o077 == 0, oct(jd.stat().st_mode)


# ------------------------------------------------------------------------------ Kubernetes
@pytest.mark.slow
def test_k8s_forged_result_line_is_refused(gpujobs_home, tmp_path):
    from gpujobs.backends.kubernetes import KubernetesBackend
    from gpujobs.backends.kubernetes.keys import record_path
    from gpujobs.handle import Job
    from gpujobs_sim import SimCluster

    sim = SimCluster(gpus=2).start()
    try:
        be = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q")
        spec = gpujobs.job(answer).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q").spec()
        jid = be.submit(spec)
        ns, name = jid.split("/")
        kp = record_path(ns, name, gpujobs_home)  # holds the job's key
        assert stat.S_IMODE(kp.stat().st_mode) == 0o600
        assert stat.S_IMODE(kp.parent.stat().st_mode) & 0o077 == 0
        secret = sim.store.get("v1", "Secret",
                               be.render_job(spec, for_submit=True).key_secret["metadata"]["name"], ns)
        from gpujobs.payload import derive_key
        ns_key = bytes.fromhex(base64.b64decode(secret["data"]["key"]).decode())
        assert derive_key(ns_key, jid) == be.job_key(jid)  # the job's key, derived

        st = be.wait(jid, timeout=60)
        assert st.phase == "succeeded"
        pods = [o["metadata"]["name"] for r, o in sim.store.all_objects()
                if r.kind == "Pod" and o["metadata"].get("labels", {}).get("gpujobs.dev/job") == name]
        assert pods
        marker = tmp_path / "k8s-marker"
        forged = base64.b64encode(forged_envelope(marker, key=os.urandom(32))).decode()
        for pod in pods:  # the last GPUJOBS-RESULT line of a rank wins: forge it
            sim.server.logs.append(ns, pod, f"\nGPUJOBS-RESULT 0 {forged}\n")
        # a process that reads the results now (this one read and archived them when wait() saw
        # the job end, before the forgery)
        other = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q")
        with pytest.raises(ResultAuthError):
            Job(jid, other).result()
        assert not marker.exists(), "a forged log line was unpickled"
    finally:
        for b in (be, locals().get("other")):
            if b is not None:
                b.state.stop_watches()
        sim.stop()


# ------------------------------------------------------------------------------ rendering
def _strings(obj):
    """Every string in a rendered object; binaryData, Secret data and the inline sealed call
    decoded (and zips in them)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            if k == "gpujobs.dev/payload" and isinstance(v, str):  # the sealed call, inline
                yield v
                v = {"payload": v}
            if k in ("binaryData", "gpujobs.dev/payload") or (k == "data" and obj.get("kind") ==
                                                             "Secret"):
                for blob in v.values():
                    raw = base64.b64decode(blob)
                    yield raw.decode("latin-1")
                    if raw[:2] == b"PK":
                        with zipfile.ZipFile(io.BytesIO(raw)) as z:
                            for n in z.namelist():
                                yield z.read(n).decode("latin-1")
            else:
                yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def _walk(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + "." + k, k, v
            yield from _walk(v, path + "." + k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")


def _matrix():
    from tests.k8s_render.test_matrix import CASES, make_spec
    return CASES, make_spec


def test_no_secret_value_and_hardened_pods_over_the_render_matrix(monkeypatch):
    """Every matrix case, with the secret's value present in the submitter's environment under
    the very name the job asks for: the value appears in no rendered object (payload included),
    no pod is privileged, uses host namespaces or hostPath, or adds capabilities."""
    from gpujobs_sim import crds
    if not crds.crds_available():
        pytest.skip("upstream CRDs not available")
    from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
    cases, make_spec = _matrix()
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    monkeypatch.setenv("GPUJOBS_TEST_SECRET", SENTINEL)
    checked = 0
    for (fw, kind, mode), nodes, gpus, option in cases:
        spec = make_spec(fw, kind, mode, nodes, gpus, option)
        if option != "env-secrets":
            spec = spec.replace(secret_env=(("HF_TOKEN", gpujobs.SecretRef("hf", "token")),))
        r = render_job(spec, opts=RenderOptions(namespace="ml"))
        for obj in r.objects:
            for s in _strings(obj):
                assert SENTINEL not in s, f"{kind}/{option}: the secret value leaked"
        assert SENTINEL.encode() not in spec.payload()
        assert any("gpujobs.dev/payload" in p for p, _k, _v in _walk(r.job))  # decoded above
        for path, k, v in _walk(r.job):
            assert k != "hostPath", path
            if k in ("hostNetwork", "hostPID", "hostIPC", "privileged"):
                assert v is False, path
            if k in ("containers", "initContainers"):
                for c in v:
                    sc = c.get("securityContext", {})
                    assert sc.get("allowPrivilegeEscalation") is False, path
                    assert sc["capabilities"]["drop"] == ["ALL"], path
                    sshd = "sshd" in " ".join(c.get("command", []) + c.get("args", []))
                    # MPI workers run sshd (the MPI operator's model): only what sshd needs
                    assert set(sc["capabilities"].get("add", [])) <= (SSHD_CAPS if sshd else set()), path
            if k == "env":
                for e in v:
                    if e.get("name") == "HF_TOKEN":
                        assert "value" not in e and e["valueFrom"]["secretKeyRef"]["name"] == "hf"
        checked += 1
    assert checked == len(cases) > 600  # 675 since MPI inside an AppWrapper is refused at render


# ------------------------------------------------------------------------------ size limits
def test_default_payload_limit_is_enforced_by_the_builder():
    from gpujobs.spec import DEFAULT_MAX_PAYLOAD_BYTES
    big = b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(PayloadError, match="max_payload_bytes"):
        gpujobs.job(answer, big).spec()
    assert gpujobs.job(answer, big).options(max_payload_bytes=2 * len(big)).spec().payload()


def test_secret_limit_is_enforced_at_render_even_under_the_builder_limit():
    spec = gpujobs.job(answer, b"y" * 1_100_000).ddp(gpus=1).spec()  # fine for the builder
    with pytest.raises(PayloadError, match="usable bytes of a Kubernetes Secret"):
        spec_objs = gpujobs.job(answer, b"y" * 1_100_000).render(kind="PyTorchJob")  # noqa: F841
    assert len(spec.payload()) > 1_000_000
