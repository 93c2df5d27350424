"""A real Kubernetes control plane on loopback for the k8s suite.

etcd (the system one: kube-apiserver v1.34 runs fine on Debian's 3.4.23) + kube-apiserver
+ kube-controller-manager (garbage collector, StatefulSet/Deployment/ReplicaSet,
disruption and namespace controllers), all built by scripts/k8s (`make k8s-tools`) and
found in .cache/k8s-bin. No scheduler and no kubelet: pods are created but never run; the
tests play kubelet where they need readiness (``mark_ready``). Free ports, bounded
readiness waits, stop by pid.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.procs import LOOPBACK, Proc, free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "magnetar-test-admin-token"


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "scripts/k8s/versions.env").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def bin_dir() -> Path:
    return Path(os.environ.get("MAGNETAR_K8S_BIN", ROOT / ".cache/k8s-bin"))


def binary(name: str) -> Path | None:
    """The cached binary for ``name`` at its pinned version (None when not built)."""
    v = _versions()
    version = {
        "kube-apiserver": v["KUBERNETES_VERSION"],
        "kube-controller-manager": v["KUBERNETES_VERSION"],
        "helm": v["HELM_VERSION"],
        "etcd": v["ETCD_VERSION"],
    }[name]
    path = bin_dir() / f"{name}-{version}" / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def etcd_binary() -> str | None:
    built = binary("etcd")
    return str(built) if built else shutil.which("etcd")


def missing_tools() -> list[str]:
    missing = [n for n in ("kube-apiserver", "kube-controller-manager") if binary(n) is None]
    if etcd_binary() is None:
        missing.append("etcd")
    return missing


def _https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@dataclass
class ControlPlane:
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    api_port: int = 0

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def start(self) -> ControlPlane:
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        etcd_port, peer_port, self.api_port = free_port(), free_port(), free_port()
        try:
            self._start_etcd(etcd_port, peer_port)
            self._start_apiserver(etcd_port)
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self, port: int, peer: int) -> None:
        etcd = etcd_binary()
        assert etcd is not None
        url = f"http://{LOOPBACK}:{port}"
        self.procs.append(
            Proc(
                [
                    etcd,
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={url}",
                    f"--advertise-client-urls={url}",
                    f"--listen-peer-urls=http://{LOOPBACK}:{peer}",
                    f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer}",
                    f"--initial-cluster=default=http://{LOOPBACK}:{peer}",
                ],
                log_path=self.workdir / "etcd.log",
                ready=lambda: _http_ok(f"{url}/health"),
                ready_timeout=30,
            ).start()
        )

    def _start_apiserver(self, etcd_port: int) -> None:
        w = self.workdir
        key, pub = w / "sa.key", w / "sa.pub"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
            check=True,
            capture_output=True,
        )
        (w / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        apiserver = binary("kube-apiserver")
        assert apiserver is not None
        self.procs.append(
            Proc(
                [
                    str(apiserver),
                    f"--etcd-servers=http://{LOOPBACK}:{etcd_port}",
                    f"--bind-address={LOOPBACK}",
                    f"--advertise-address={LOOPBACK}",
                    f"--secure-port={self.api_port}",
                    f"--cert-dir={w / 'certs'}",
                    f"--token-auth-file={w / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={pub}",
                    f"--service-account-signing-key-file={key}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    # No service-account controller runs, so pods cannot wait for one.
                    "--disable-admission-plugins=ServiceAccount",
                ],
                log_path=w / "kube-apiserver.log",
                ready=lambda: _https_ok(f"{self.server}/readyz"),
                ready_timeout=90,
            ).start()
        )

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: local\n  cluster: {{server: '{self.server}', "
            f"certificate-authority: '{self.workdir / 'certs' / 'apiserver.crt'}'}}\n"
            f"users:\n- name: admin\n  user: {{token: {TOKEN}}}\n"
            "contexts:\n- name: local\n  context: {cluster: local, user: admin}\n"
            "current-context: local\n"
        )

    def start_controller_manager(self) -> None:
        """Start it once our CRDs exist: its garbage collector discovers resource types at
        start and then only every 30 s, and it must watch PulsarClusters to cascade their
        deletion promptly."""
        kcm = binary("kube-controller-manager")
        assert kcm is not None
        self.procs.append(
            Proc(
                [
                    str(kcm),
                    f"--kubeconfig={self.kubeconfig}",
                    "--controllers=garbagecollector,statefulset,deployment,replicaset,"
                    "disruption,namespace,pvc-protection",
                    "--leader-elect=false",
                    f"--bind-address={LOOPBACK}",
                    "--secure-port=0",
                    "--use-service-account-credentials=false",
                ],
                log_path=self.workdir / "kube-controller-manager.log",
            ).start()
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
