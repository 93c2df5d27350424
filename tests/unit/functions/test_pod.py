"""The pod entry's pure parts: the instance id from the pod's name, and the instance's
``access`` for a secured cluster, as the instance reads it (magnetar.functions.instance)."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from magnetar.functions import instance, pod


def test_instance_id_is_the_ordinal() -> None:
    assert pod.instance_id("public-default-excl-function-12") == 12
    with pytest.raises(pod.PodConfigError, match="does not end with a StatefulSet ordinal"):
        pod.instance_id("excl-function")


def test_access_of_a_secured_cluster(tmp_path: Path) -> None:
    token = tmp_path / "broker.token"
    token.write_text("a.b.c\n")
    ca = tmp_path / "ca.crt"
    given = pod.access(
        {"MAGNETAR_TLS_TRUST_CERTS": str(ca), "MAGNETAR_AUTH_TOKEN_FILE": str(token)}
    )
    assert given == {
        "authPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authParams": f"file://{token}",
        "tlsTrustCertsFile": str(ca),
        "tlsHostnameVerification": True,
    }
    client, http = instance.access({"access": given})
    assert isinstance(client["authentication"], pulsar.AuthenticationToken)
    assert client["tls_trust_certs_file_path"] == str(ca) and client["tls_validate_hostname"]
    assert http["credentials"].current_token() == "a.b.c"  # read from the file


def test_access_of_a_plain_cluster() -> None:
    client, http = instance.access({"access": pod.access({})})
    assert "authentication" not in client and "credentials" not in http
