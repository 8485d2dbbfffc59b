"""A real control plane for the ``realcp`` tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and Kueue, built from upstream Go modules by ``make controlplane``
(tools/controlplane/build.sh; docs/controlplane.md), started once per pytest session on loopback.

Everything binds to 127.0.0.1 on ports chosen free at start; logs are files under the session's run
folder (printed on failure); every process is stopped by its pid at session end. Kueue's webhook
and visibility server are reached through ExternalName Services pointing at ``localhost`` (the
apiserver's ClusterIP service resolver maps ExternalName to ``https://<externalName>:<port>``,
k8s.io/apiserver/pkg/util/proxy/proxy.go ResolveCluster, v0.37.2), so nothing dials a 10.x address.

A component the build could not make is named (module@version, from ``<bin>/MISSING``) and the
session runs with what exists: without Kueue, tests that need it fail with that reason.
"""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tools" / "controlplane" / "build.sh"
NS = "ml"
QUEUE = "team-a"
CQ = "cq-a"
GPUS = 8
KUEUE_FRAMEWORKS = ["batch/job", "kubeflow.org/mpijob", "kubeflow.org/pytorchjob", "ray.io/rayjob",
                    "ray.io/raycluster", "trainer.kubeflow.org/trainjob",
                    "workload.codeflare.dev/appwrapper", "jobset.x-k8s.io/jobset"]
# Kueue's CRDs with a conversion webhook (config/components/crd/kustomization.yaml, v0.17.0)
KUEUE_CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realcp)
            item.add_marker(pytest.mark.slow)
            # the first test also pays the session's start (minutes on a busy 2-core machine)
            item.add_marker(pytest.mark.timeout(900))


# ------------------------------------------------------------------------- certificates
def _pki(d: Path) -> dict[str, Path]:
    """CA, serving and client certificates for the control plane (python ``cryptography``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    out: dict[str, Path] = {}

    def write(name: str, key, cert) -> None:
        (d / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out[name] = d / f"{name}.crt"

    def make(name: str, cn: str, *, orgs=(), issuer=None, ca=False, server=False, client=False):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]
                            + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs])
        ikey, icert = issuer if issuer else (key, None)
        b = (x509.CertificateBuilder().subject_name(subject)
             .issuer_name(icert.subject if icert else subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                              False), critical=True)
        else:
            usages = ([x509.ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                     ([x509.ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
            b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = b.sign(ikey, hashes.SHA256())
        write(name, key, cert)
        return key, cert

    ca = make("ca", "gpujobs-realcp-ca", ca=True)
    make("apiserver", "kube-apiserver", issuer=ca, server=True)
    make("admin", "realcp-admin", orgs=("system:masters",), issuer=ca, client=True)
    make("kubelet-client", "kube-apiserver-kubelet-client", orgs=("system:masters",), issuer=ca,
         client=True)
    make("kubelet", "system:node:realcp-node", orgs=("system:nodes",), issuer=ca, server=True,
         client=True)
    fp = make("front-proxy-ca", "front-proxy-ca", ca=True)
    make("front-proxy-client", "front-proxy-client", issuer=fp, client=True)
    sa = ec.generate_private_key(ec.SECP256R1())
    (d / "sa.key").write_bytes(sa.private_bytes(serialization.Encoding.PEM,
                                                serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    (d / "sa.pub").write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    out["_ca"] = ca  # type: ignore[assignment]  # (key, cert) for user certificates
    return out


def user_cert(pki_dir: Path, ca, cn: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A client certificate for user ``cn`` (groups as O=), signed by the cluster CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]
                        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca[1].subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca[0], hashes.SHA256()))
    crt, k = pki_dir / f"user-{cn}.crt", pki_dir / f"user-{cn}.key"
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, k


def write_kubeconfig(path: Path, server: str, ca: Path, crt: Path, key: Path,
                     namespace: str = "default") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "realcp",
        "clusters": [{"name": "realcp", "cluster": {"server": server,
                                                    "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": {"client-certificate": str(crt),
                                         "client-key": str(key)}}],
        "contexts": [{"name": "realcp", "context": {"cluster": "realcp", "user": "u",
                                                    "namespace": namespace}}]}))
    return path


# ------------------------------------------------------------------------------ processes
@dataclass
class ControlPlane:
    bin: Path
    run: Path
    missing: dict[str, str]                       # component -> "module@version: reason"
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    server: str = ""
    pki: dict = field(default_factory=dict)
    admin_kubeconfig: Path = Path()
    timings: dict[str, float] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def has_kueue(self) -> bool:
        return "kueue" in self.procs

    def require_kueue(self) -> None:
        if not self.has_kueue:
            pytest.fail(f"Kueue is not running here: {self.missing.get('kueue', 'see logs')}")

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.run / f"{name}.log", "wb")
        p = subprocess.Popen([str(self.bin / name.split("#")[0]), *args], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, cwd=self.run)
        log.close()
        self.procs[name] = p
        return p

    def log_tail(self, name: str, n: int = 30) -> str:
        p = self.run / f"{name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:]) if p.exists() else ""

    def wait_http(self, name: str, url: str, timeout: float, client: bool = True) -> None:
        ctx = ssl.create_default_context(cafile=str(self.pki["ca"])) if url.startswith("https") \
            else None
        if ctx is not None and client:
            ctx.load_cert_chain(self.pki["admin"], self.run / "pki" / "admin.key")
        if ctx is not None and not client:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.log_tail(name)}")
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception as exc:  # noqa: BLE001 - polled until the deadline
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"{name} not ready at {url} within {timeout:.0f}s ({last}):\n"
                           f"{self.log_tail(name)}")

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=10)
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        # Nothing of this control plane outlives it (etcd's data is in a fresh temporary folder):
        # 3 s for all to exit, then SIGKILL (kube-apiserver drains its watches for ~11 s).
        deadline = time.monotonic() + 3
        for p in reversed(list(self.procs.values())):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)

    def api(self, kubeconfig: Path | None = None):
        """A kubernetes ApiClient for ``kubeconfig`` (default: the admin)."""
        from kubernetes import client, config
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig or self.admin_kubeconfig),
                                client_configuration=cfg)
        return client.ApiClient(cfg)

    def user_kubeconfig(self, cn: str, groups: tuple[str, ...] = (), namespace: str = NS) -> Path:
        crt, key = user_cert(self.run / "pki", self.pki["_ca"], cn, groups)
        return write_kubeconfig(self.run / f"kubeconfig-{cn}", self.server, self.pki["ca"], crt,
                                key, namespace)


def _bin_dir() -> tuple[Path, dict[str, str]]:
    env = os.environ.get("GPUJOBS_CONTROLPLANE_BIN")
    if env:
        b = Path(env)
    else:
        go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                    else None)
        if go is None:
            pytest.skip("no Go toolchain on this machine: the realcp suite needs `make controlplane`"
                        " (the polyglot machine kind)")
        r = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True,
                           env={**os.environ, "GO": go, "CONTROLPLANE_CHECK_ONLY": "1"})
        if r.returncode != 0:
            pytest.fail(f"control plane binaries are missing; run `make controlplane` first:\n"
                        f"{r.stderr[-2000:]}")
        b = Path(r.stdout.strip().splitlines()[-1])
    missing: dict[str, str] = {}
    if (b / "MISSING").exists():
        for line in (b / "MISSING").read_text().splitlines():
            name, mod, reason = (line.split("\t") + ["", ""])[:3]
            missing[name] = f"{mod}: {reason}"
    return b, missing


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the Workload CRD alone is 1.3 MB


def _crd_docs(path: Path):
    for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            yield doc


def kueue_module_dir(module: str = "sigs.k8s.io/kueue") -> Path:
    """Where ``module`` (Kueue, or one of the modules Kueue's build pins) is in the module cache."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    r = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", module],
                       cwd=REPO / "tools" / "controlplane" / "kueue", capture_output=True,
                       text=True, check=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    return Path(r.stdout.strip())


def _apply(api, objs: list[dict]) -> None:
    """Server-side apply each object (admin, field manager ``realcp``)."""
    from kubernetes import dynamic
    dc = dynamic.DynamicClient(api)
    for obj in objs:
        res = dc.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = obj["metadata"].get("namespace")
        res.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=ns,
                              field_manager="realcp", force_conflicts=True)


def _create(api, objs: list[dict]) -> None:
    """Create each object (admin); one that exists already is left as it is."""
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ConflictError
    dc = dynamic.DynamicClient(api)
    for obj in objs:
        res = dc.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            res.create(body=obj, namespace=obj["metadata"].get("namespace"))
        except ConflictError:
            pass


def _wait_established(api, names: list[str], timeout: float = 60) -> None:
    from kubernetes import client
    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for n in list(pending):
            c = ext.read_custom_resource_definition(n)
            if any(x.type == "Established" and x.status == "True"
                   for x in (c.status.conditions or [])):
                pending.discard(n)
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"CRDs not Established within {timeout}s: {sorted(pending)}")


def _kueue_objects(kdir: Path, webhook_port: int, visibility_port: int) -> list[dict]:
    """Kueue v0.17.0's webhook configurations, Services and APIService from its module, rewritten
    as its kustomization would (namePrefix ``kueue-``, namespace ``kueue-system``) with the
    services turned into ExternalName ``localhost`` and the ports pointed at this session's."""
    svc = {"name": "kueue-webhook-service", "namespace": "kueue-system", "port": webhook_port}
    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kueue-webhook-server-cert",
                                                            "namespace": "kueue-system"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kueue-webhook-service",
                                                             "namespace": "kueue-system"},
         "spec": {"type": "ExternalName", "externalName": "localhost"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "visibility-server",
                                                             "namespace": "kueue-system"},
         "spec": {"type": "ExternalName", "externalName": "localhost"}},
    ]
    for doc in yaml.safe_load_all((kdir / "config/components/webhook/manifests.yaml").read_text()):
        if not doc:
            continue
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        for h in doc["webhooks"]:
            h["clientConfig"]["service"] = {**svc, "path": h["clientConfig"]["service"]["path"]}
        out.append(doc)
    for name in ("apiservice_v1beta2.yaml", "apiservice_v1beta1.yaml"):
        p = kdir / "config/components/visibility" / name
        if p.exists():
            doc = yaml.safe_load(p.read_text())
            doc["spec"]["service"]["port"] = visibility_port
            out.append(doc)
    return out


def _sync_secret(cp: ControlPlane, ns: str, name: str, folder: Path) -> None:
    """Keep ``folder`` equal to Secret ``ns/name``, as a kubelet's Secret volume would: Kueue's
    cert rotator (open-policy-agent/cert-controller v0.16.0 rotator.go ensureCertsMounted) fills
    the Secret and then waits for tls.crt to appear in the webhook's cert dir."""
    import base64

    from kubernetes import client
    api = cp.api()
    core = client.CoreV1Api(api)
    folder.mkdir(parents=True, exist_ok=True)
    seen: dict[str, str] = {}
    try:
        while not cp.stopping.wait(0.5):
            try:
                data = core.read_namespaced_secret(name, ns).data or {}
            except Exception:  # noqa: BLE001 - the apiserver may be stopping
                continue
            if data == seen or "tls.crt" not in data:
                continue
            for key, value in data.items():   # key before cert: the watcher reloads on tls.crt
                if key != "tls.crt":
                    tmp = folder / f".{key}.tmp"
                    tmp.write_bytes(base64.b64decode(value))
                    tmp.replace(folder / key)
            tmp = folder / ".tls.crt.tmp"
            tmp.write_bytes(base64.b64decode(data["tls.crt"]))
            tmp.replace(folder / "tls.crt")
            seen = data
    finally:
        api.close()


def _kueue_config(cp: ControlPlane, webhook_port: int, visibility_port: int,
                  health_port: int) -> Path:
    cfg = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1",
                    "certDir": str(cp.run / "kueue-webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": "kueue-webhook-service",
                                   "webhookSecretName": "kueue-webhook-server-cert"},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "waitForPodsReady": {"timeout": "10m", "blockAdmission": False},
        "integrations": {"frameworks": KUEUE_FRAMEWORKS},
    }
    p = cp.run / "kueue-config.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _wait(cond, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - polled until the deadline
            last = exc
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def start_controlplane(cp: ControlPlane) -> None:
    """Start every component of ``cp`` (the caller stops them, also when this fails)."""
    from kubernetes import client

    from gpujobs_sim import crds as sim_crds

    bin_dir, missing, run = cp.bin, cp.missing, cp.run
    t0 = time.monotonic()
    (run / "pki").mkdir()
    cp.pki = _pki(run / "pki")
    pki = run / "pki"

    etcd_port, peer_port = free_port(), free_port()
    cp.start("etcd", [f"--data-dir={run / 'etcd'}", "--name=default",
                      f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                      f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                      f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                      f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                      f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                      "--listen-metrics-urls=", "--unsafe-no-fsync", "--log-level=warn"])
    cp.wait_http("etcd", f"http://127.0.0.1:{etcd_port}/health", 30)
    cp.timings["etcd"] = time.monotonic() - t0

    port = free_port()
    cp.server = f"https://127.0.0.1:{port}"
    cp.start("kube-apiserver", [
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={pki}", f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}", f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
        "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--profiling=false", "--enable-priority-and-fairness=false", "--v=1"])
    cp.wait_http("kube-apiserver", f"{cp.server}/readyz", 120)
    cp.timings["kube-apiserver"] = time.monotonic() - t0
    cp.admin_kubeconfig = write_kubeconfig(run / "kubeconfig", cp.server, pki / "ca.crt",
                                           pki / "admin.crt", pki / "admin.key")
    kc = str(cp.admin_kubeconfig)
    common = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
              f"--authorization-kubeconfig={kc}", "--leader-elect=false",
              "--bind-address=127.0.0.1", f"--cert-dir={pki}"]
    for name, extra in (("kube-controller-manager", [
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false",
            "--controllers=*,-node-ipam-controller,-node-lifecycle-controller,"
            "-persistentvolume-binder-controller,-persistentvolume-attach-detach-controller"]),
            ("kube-scheduler", [])):
        if name in missing or not (bin_dir / name).exists():
            continue
        hp = free_port()
        cp.start(name, [*common, f"--secure-port={hp}", *extra])
        cp.wait_http(name, f"https://127.0.0.1:{hp}/healthz", 60, client=False)
    cp.timings["kcm+scheduler"] = time.monotonic() - t0

    api = cp.api()
    # CRDs: the operators' from shared/crds (Kueue's own below come from its module)
    crds: list[dict] = []
    for path in sorted(sim_crds.crds_dir().glob("*/*.yaml")):
        if path.parent.name in ("kueue", "examples", "reference"):
            continue
        crds.extend(_crd_docs(path))
    # CRDs shared/crds lacks, from the modules Kueue v0.17.0 is built against (its trainjob
    # integration indexes TrainingRuntimes at start-up and fails without their CRD)
    have = {c["metadata"]["name"] for c in crds}
    for module, rel in (("github.com/kubeflow/trainer/v2", "manifests/base/crds"),
                        ("sigs.k8s.io/jobset", "config/components/crd/bases")):
        for path in sorted((kueue_module_dir(module) / rel).glob("*.yaml")):
            crds.extend(c for c in _crd_docs(path) if c["metadata"]["name"] not in have)
    kdir = kueue_module_dir()
    with_kueue = "kueue" not in missing and (bin_dir / "kueue").exists()
    webhook_port, vis_port, health_port = free_port(), free_port(), free_port()
    for path in sorted((kdir / "config/components/crd/bases").glob("*.yaml")):
        for doc in _crd_docs(path):
            if doc["spec"]["names"]["plural"] in KUEUE_CONVERTED and with_kueue:
                doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"], "clientConfig": {"service": {
                        "name": "kueue-webhook-service", "namespace": "kueue-system",
                        "path": "/convert", "port": webhook_port}}}}
            crds.append(doc)
    _create(api, crds)
    _wait_established(api, [c["metadata"]["name"] for c in crds])
    cp.timings["crds"] = time.monotonic() - t0

    if with_kueue:
        _apply(api, _kueue_objects(kdir, webhook_port, vis_port))
        cfg = _kueue_config(cp, webhook_port, vis_port, health_port)
        cp.start("kueue", [f"--config={cfg}", f"--kubeconfig={kc}", "--zap-log-level=2"])
        sync = threading.Thread(target=_sync_secret, daemon=True, name="realcp-cert-sync",
                                args=(cp, "kueue-system", "kueue-webhook-server-cert",
                                      cp.run / "kueue-webhook-certs"))
        sync.start()
        cp.threads.append(sync)
        cp.wait_http("kueue", f"http://127.0.0.1:{health_port}/readyz", 120)
        reg = client.ApiregistrationV1Api(api)
        _wait(lambda: any(c.type == "Available" and c.status == "True" for c in
                          (reg.read_api_service("v1beta2.visibility.kueue.x-k8s.io").status
                           .conditions or [])), 60, "Kueue's visibility APIService Available")
        cp.timings["kueue"] = time.monotonic() - t0
    _seed(api, with_kcm="kube-controller-manager" in cp.procs)
    cp.timings["ready"] = time.monotonic() - t0


def _seed(api, with_kcm: bool) -> None:
    """The namespace (and its default ServiceAccount, from kcm), Kueue queues (8 GPUs), priority classes and
    the trainer runtimes gpujobs' preflight looks up (as tests/k8s_submit/conftest.py seeds the
    simulator)."""
    from kubernetes import client
    core = client.CoreV1Api(api)
    _apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
    if with_kcm:
        _wait(lambda: core.read_namespaced_service_account("default", NS), 60,
              "the default ServiceAccount (kube-controller-manager)")
    res = [{"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "256Gi"},
           {"name": "nvidia.com/gpu", "nominalQuota": str(GPUS)}]
    _apply(api, [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "a100"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CQ},
         "spec": {"namespaceSelector": {},
                  "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                      "flavors": [{"name": "a100", "resources": res}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": NS}, "spec": {"clusterQueue": CQ}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": "high"}, "value": 1000},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": "low"}, "value": 10},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "default"}, "spec": {"weight": 1}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "vq"}, "spec": {"weight": 1}},
    ])
    # Trainer's own torch-distributed runtime (shared/crds/examples/trainer), and a copy under the
    # name gpujobs uses with Volcano
    from gpujobs_sim import crds as sim_crds
    rt = yaml.safe_load((sim_crds.crds_dir() / "examples/trainer/"
                         "clustertrainingruntime-torch-distributed.yaml").read_text())
    rt_volcano = {**rt, "metadata": {**rt["metadata"], "name": "torch-distributed-volcano"}}
    _apply(api, [rt, rt_volcano])
    # gpujobs' own runtimes (restartPolicy Never, backoffLimit 0), as the documented admin step
    # installs them: `gpujobs admin trainer-runtimes | kubectl apply -f -` (docs/trainer-runtimes.yaml);
    # the real apiserver checks them against Trainer's CRD here
    _apply(api, [d for d in yaml.safe_load_all((REPO / "docs/trainer-runtimes.yaml").read_text()) if d])


@pytest.fixture(scope="session")
def controlplane(tmp_path_factory):
    """The running control plane (see module doc). Its logs stay in the run folder."""
    bin_dir, missing = _bin_dir()
    for name in ("etcd", "kube-apiserver"):
        if not (bin_dir / name).exists():
            pytest.fail(f"{name} was not built ({missing.get(name, 'no reason recorded')}); "
                        "run `make controlplane`")
    run = Path(tempfile.mkdtemp(prefix="gpujobs-realcp-"))
    cp = ControlPlane(bin_dir, run, missing)
    try:
        try:
            start_controlplane(cp)
        except Exception as exc:
            pytest.fail(f"the control plane did not start: {exc}\n(logs in {run})")
        # seconds from the start to each component ready, kept beside the binaries (README numbers)
        (bin_dir.parent / "last-start.json").write_text(json.dumps(cp.timings, indent=1))
        yield cp
    finally:
        cp.stop()
        left = [n for n, p in cp.procs.items() if p.poll() is None]
        assert not left, f"still running after stop: {left}"
        if os.environ.get("GPUJOBS_REALCP_KEEP") is None:
            shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_api(controlplane):
    api = controlplane.api()
    yield api
    api.close()


@pytest.fixture
def backend(controlplane, gpujobs_home):
    """gpujobs' kubernetes backend on the real apiserver, as the admin, namespace ``ml``."""
    from gpujobs.backends.kubernetes import KubernetesBackend
    be = KubernetesBackend(kubeconfig=str(controlplane.admin_kubeconfig), namespace=NS,
                           home=gpujobs_home, default_queue=QUEUE, request_timeout=20.0)
    yield be
    if be._api_client is not None:
        be._api_client.close()


@pytest.fixture
def node(controlplane, admin_api, request):
    """Node ``realcp-node`` (8 GPUs, or the test's ``indirect`` parameter) running the pods bound to
    it (tests/realcp/node.py), for this test only: its processes are killed and the Node deleted after."""
    if "kube-scheduler" in controlplane.missing or "kube-controller-manager" in controlplane.missing:
        pytest.fail(f"the scheduler and kcm are needed: {controlplane.missing}")
    from .node import Node
    n = Node(admin_api, controlplane.run / "pki", gpus=getattr(request, "param", 8))
    try:
        yield n
    finally:
        n.stop()
    assert not n.errors, n.errors
