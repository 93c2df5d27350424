"""The operator's Kubernetes client follows rotating credentials (``kube.CredentialSource``)
on the real API server: a kubeconfig whose exec plugin hands out a service account's
bound token, the token replaced and the old one revoked (its bound Secret deleted) while
the client runs. With a short expiry the plugin is run again before the next request; with
a long one the API server's 401 makes the client reload and retry once. Either way no call
fails -- a token read once at start would lock the operator out."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from pathlib import Path

import pytest
from kubernetes import client

from magnetar_operator.kube import ApiError, Credentials, CredentialSource, Kube
from tests.k8s.controlplane import ControlPlane

pytestmark = pytest.mark.k8s

PLUGIN = """\
import json, sys
token = open(sys.argv[1]).read().strip()
status = {"token": token}
if sys.argv[2] != "0":
    status["expirationTimestamp"] = sys.argv[2]
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def _bound_token(core: client.CoreV1Api, namespace: str, secret: str) -> str:
    """A token of service account ``rotator`` bound to Secret ``secret`` (valid until that
    Secret is deleted)."""
    created = core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=secret))
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=3600,
            bound_object_ref=client.V1BoundObjectReference(
                kind="Secret", api_version="v1", name=secret, uid=created.metadata.uid
            ),
        )
    )
    answer = core.create_namespaced_service_account_token("rotator", namespace, request)
    return str(answer.status.token)


def _setup(api: client.ApiClient, namespace: str) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="rotator"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="read-configmaps"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="rotator"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="read-configmaps"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="rotator", namespace=namespace)
            ],
        ),
    )


@pytest.mark.parametrize("expiry", ["short", "long"])
def test_a_rotated_and_revoked_token_does_not_lock_the_client_out(
    api: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path, expiry: str
) -> None:
    core = client.CoreV1Api(api)
    _setup(api, namespace)
    token_file = tmp_path / "token"
    token_file.write_text(_bound_token(core, namespace, "first"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    # short: already inside the loader's refresh margin, so the plugin runs before each
    # request; long: it never expires, so only a 401 makes the client ask again
    when = dt.datetime.now(dt.UTC) + (
        dt.timedelta(seconds=1) if expiry == "short" else dt.timedelta(days=1)
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": control_plane.server,
            "certificate-authority": str(control_plane.workdir / "certs" / "apiserver.crt")}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": [str(plugin), str(token_file), when.strftime("%Y-%m-%dT%H:%M:%SZ")],
            "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip

    async def rejected(creds: Credentials) -> bool:
        static = Kube(creds)  # the credentials as read once: what the client must not do
        try:
            await static.list("v1", "ConfigMap", namespace, labels={})
        except ApiError as e:
            return e.status == 401
        finally:
            await static.close()
        return False

    async def run() -> None:
        kube = Kube(CredentialSource(str(kubeconfig)))
        try:
            assert await kube.list("v1", "ConfigMap", namespace, labels={}) == []
            first = CredentialSource(str(kubeconfig)).current()
            # rotate: the plugin now hands out a second token; the first is revoked
            token_file.write_text(_bound_token(core, namespace, "second"))
            core.delete_namespaced_secret("first", namespace)
            for _ in range(60):  # the revocation is seen by the API server at once, or soon
                if await rejected(first):
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("the first token still accepted after its Secret went")
            for _ in range(3):
                assert await kube.list("v1", "ConfigMap", namespace, labels={}) == []
        finally:
            await kube.close()

    asyncio.run(run())
