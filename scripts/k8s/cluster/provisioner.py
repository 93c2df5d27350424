"""A small local-path volume provisioner for the local cluster (scripts/k8s/cluster.sh).

Serves StorageClass ``local-path`` (provisioner ``magnetar.dev/local-path``,
WaitForFirstConsumer): for each Pending claim of that class that the scheduler has placed on
this node (annotation ``volume.kubernetes.io/selected-node``) it makes a directory under
--root and a ``local`` PersistentVolume pre-bound to the claim; a Released volume whose
reclaim policy is Delete has its directory and PV removed, a Retained one is left as it is.
Sizes are recorded, not enforced (the directories share the host's filesystem). Runs on the
host next to kubelet, polling through kubectl once a second; stdlib only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROVISIONER = "magnetar.dev/local-path"
CLASS = "local-path"


def kubectl(args: argparse.Namespace, *cmd: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        [args.kubectl, "--kubeconfig", args.kubeconfig, *cmd],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout


def provision(args: argparse.Namespace, pvc: dict) -> None:
    meta = pvc["metadata"]
    uid = meta["uid"]
    path = Path(args.root) / f"{meta['namespace']}-{meta['name']}-{uid}"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)  # pods run as any uid (the project's images: 10001)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{uid}",
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            "labels": {"magnetar.dev/local-path": "true"},
        },
        "spec": {
            "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]},
            "accessModes": pvc["spec"].get("accessModes", ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": args.reclaim.get(CLASS, "Delete"),
            "storageClassName": CLASS,
            "volumeMode": pvc["spec"].get("volumeMode", "Filesystem"),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": uid,
            },
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [args.node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }
    kubectl(args, "create", "-f", "-", stdin=json.dumps(pv))
    print(f"provisioned pvc-{uid} for {meta['namespace']}/{meta['name']} at {path}", flush=True)


def reclaim(args: argparse.Namespace, pv: dict) -> None:
    name = pv["metadata"]["name"]
    path = Path(pv["spec"]["local"]["path"])
    if Path(args.root) in path.parents:
        shutil.rmtree(path, ignore_errors=True)
    kubectl(args, "delete", "pv", name, "--wait=false")
    print(f"deleted {name} and {path}", flush=True)


def step(args: argparse.Namespace) -> None:
    pvcs = json.loads(kubectl(args, "get", "pvc", "-A", "-o", "json"))["items"]
    pvs = json.loads(kubectl(args, "get", "pv", "-o", "json"))["items"]
    existing = {pv["metadata"]["name"] for pv in pvs}
    for pvc in pvcs:
        ann = pvc["metadata"].get("annotations", {})
        if (
            pvc.get("status", {}).get("phase") == "Pending"
            and pvc["spec"].get("storageClassName") == CLASS
            and ann.get("volume.kubernetes.io/selected-node") == args.node
            and f"pvc-{pvc['metadata']['uid']}" not in existing
        ):
            provision(args, pvc)
    for pv in pvs:
        ann = pv["metadata"].get("annotations", {})
        if (
            ann.get("pv.kubernetes.io/provisioned-by") == PROVISIONER
            and pv.get("status", {}).get("phase") == "Released"
            and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
        ):
            reclaim(args, pv)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubectl", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--root", required=True, help="directory holding the volumes")
    p.add_argument("--node", required=True, help="this node's name")
    p.add_argument("--interval", type=float, default=1.0)
    args = p.parse_args()
    args.reclaim = {}
    while True:
        try:
            sc = json.loads(kubectl(args, "get", "storageclass", CLASS, "-o", "json"))
            args.reclaim[CLASS] = sc.get("reclaimPolicy", "Delete")
            step(args)
        except (subprocess.SubprocessError, KeyError, ValueError) as exc:
            print(f"provisioner: {exc}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
