"""The TLS keys of the internal hops (broker -> bookie, processes -> etcd) in broker.conf,
bookkeeper.conf and Pulsar's etcd settings file: mapped to the processes' TLS settings,
PEM-only and password values refused by name, inconsistent settings refused at startup."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar import cli, conffile
from magnetar.common import tlsfiles


def _conf(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_https_endpoints_become_a_tls_metadata_url() -> None:
    assert conffile.metadata_url("etcd:https://e1:2379,https://e2:2379") == (
        "etcd://e1:2379,e2:2379?tls=true"
    )
    assert conffile.metadata_url("metadata-store:etcd:http://e1:2379") == "etcd://e1:2379"
    with pytest.raises(ValueError, match="mix"):
        conffile.metadata_url("etcd:https://e1:2379,http://e2:2379")


def test_broker_conf_bookkeeper_tls_keys_configure_the_bookie_client(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        "broker.conf",
        "metadataStoreUrl=etcd:https://etcd:2379\n"
        "bookkeeperTLSProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory\n"
        "bookkeeperTLSClientAuthentication=true\n"
        "bookkeeperTLSKeyFileType=PEM\n"
        "bookkeeperTLSTrustCertTypes=PEM\n"
        "bookkeeperTLSKeyFilePath=/certs/broker.key\n"
        "bookkeeperTLSCertificateFilePath=/certs/broker.crt\n"
        "bookkeeperTLSTrustCertsFilePath=/certs/ca.crt\n"
        "bookkeeperTLSCertFilesRefreshDurationSeconds=300\n"
        "bookkeeperTLSKeyStorePasswordPath=\n",
    )
    args = cli.parse_args(["broker", f"--config={conf}"])
    assert args.metadata_url == "etcd://etcd:2379?tls=true"
    config = cli.broker_config(args)
    assert config.bookkeeper_tls is not None
    assert config.bookkeeper_tls.files == tlsfiles.TlsFiles(
        cert_file=Path("/certs/broker.crt"),
        key_file=Path("/certs/broker.key"),
        trust_file=Path("/certs/ca.crt"),
    )
    assert config.bookkeeper_tls.check_interval == 300.0
    assert config.metadata_tls is None  # https alone: system roots, decided by the URL


def test_a_broker_without_bookkeeper_tls_keys_speaks_plaintext_to_bookies() -> None:
    args = cli.parse_args(["broker", "--metadata-url=etcd://e:2379"])
    assert cli.broker_config(args).bookkeeper_tls is None


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("bookkeeperTLSKeyFileType=JKS", "PEM files only"),
        ("bookkeeperTLSTrustCertTypes=PKCS12", "PEM files only"),
        ("bookkeeperTLSKeyStorePasswordPath=/p", "unencrypted PEM keys only"),
        ("bookkeeperTLSCertFilesRefreshDurationSeconds=0", "positive"),
    ],
)
def test_bookkeeper_tls_values_magnetar_lacks_are_refused_by_name(
    tmp_path: Path, line: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _conf(tmp_path, "broker.conf", f"metadataStoreUrl=etcd:http://e:2379\n{line}\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["broker", f"--config={conf}"])
    assert named in capsys.readouterr().err


def test_client_authentication_without_a_client_certificate_is_refused() -> None:
    args = cli.parse_args(
        ["broker", "--metadata-url=etcd://e:2379", "--bookkeeper-tls-client-authentication=true"]
    )
    with pytest.raises(ValueError, match="bookkeeperTLSCertificateFilePath"):
        cli.broker_config(args)


def test_bookkeeper_conf_tls_keys_configure_the_bookie_port(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        "bookkeeper.conf",
        "metadataServiceUri=metadata-store:etcd:https://etcd:2379\n"
        "ledgerDirectories=/data\n"
        "tlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory\n"
        "tlsProvider=OpenSSL\n"
        "tlsCertificatePath=/certs/tls.crt\n"
        "tlsKeyStoreType=PEM\n"
        "tlsKeyStore=/certs/tls.key\n"
        "tlsTrustStoreType=PEM\n"
        "tlsTrustStore=/certs/ca.crt\n"
        "tlsClientAuthentication=true\n"
        "tlsCertFilesRefreshDurationSeconds=30\n",
    )
    args = cli.parse_args(["bookie", f"--config={conf}"])
    assert args.metadata_url == "etcd://etcd:2379?tls=true"
    assert cli.bookie_tls(args) == tlsfiles.TlsFiles(
        cert_file=Path("/certs/tls.crt"),
        key_file=Path("/certs/tls.key"),
        trust_file=Path("/certs/ca.crt"),
    )
    assert args.tls_client_authentication is True
    assert args.tls_cert_refresh_check == 30.0


@pytest.mark.parametrize(
    ("lines", "named"),
    [
        ("tlsKeyStoreType=JKS\n", "PEM files only"),
        ("tlsTrustStorePasswordPath=/p\n", "PEM files only"),
        ("tlsProviderFactoryClass=com.example.Other\n", "TLSContextFactory"),
    ],
)
def test_bookie_tls_values_magnetar_lacks_are_refused_by_name(
    tmp_path: Path, lines: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _conf(
        tmp_path,
        "bookkeeper.conf",
        f"metadataServiceUri=etcd:http://e:2379\nledgerDirectories=/d\n{lines}",
    )
    with pytest.raises(SystemExit):
        cli.parse_args(["bookie", f"--config={conf}"])
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tls-certificate-file=/c"], "no private key file"),
        (["--tls-client-authentication=true"], "tlsCertificatePath"),
        (
            ["--tls-certificate-file=/c", "--tls-key-file=/k", "--tls-client-authentication=true"],
            "tlsTrustStore",
        ),
    ],
)
def test_inconsistent_bookie_tls_settings_are_refused(flags: list[str], named: str) -> None:
    args = cli.parse_args(["bookie", "--metadata-url=etcd://e:2379", "--data-dir=/d", *flags])
    with pytest.raises(ValueError, match=named):
        cli.bookie_tls(args)


def test_pulsars_etcd_settings_file_in_yaml_form(tmp_path: Path) -> None:
    path = _conf(
        tmp_path,
        "etcd.yaml",
        "# Pulsar's metadataStoreConfigPath file\n"
        "useTls: true\n"
        "tlsProvider: JDK\n"
        "tlsTrustCertsFilePath: /certs/ca.crt\n"
        'tlsKeyFilePath: "/certs/client.key"\n'
        "tlsCertificateFilePath: /certs/client.crt\n"
        "authority: etcd.example:2379\n",
    )
    args = cli.parse_args(
        ["broker", "--metadata-url=etcd://e:2379", f"--metadata-config-path={path}"]
    )
    tls = cli.broker_config(args).metadata_tls
    assert tls is not None
    assert tls.files == tlsfiles.TlsFiles(
        cert_file=Path("/certs/client.crt"),
        key_file=Path("/certs/client.key"),
        trust_file=Path("/certs/ca.crt"),
    )
    assert tls.authority == "etcd.example:2379"


def test_flags_override_the_etcd_settings_file(tmp_path: Path) -> None:
    path = _conf(tmp_path, "etcd.conf", "useTls=true\ntlsTrustCertsFilePath=/certs/ca.crt\n")
    conf = _conf(tmp_path, "bookkeeper.conf", f"metadataStoreConfigPath={path}\n")
    args = cli.parse_args(
        [
            "bookie",
            f"--config={conf}",
            "--metadata-url=etcd://e:2379",
            "--data-dir=/d",
            "--metadata-tls-trust-certs-file=/other/ca.crt",
        ]
    )
    tls = cli.metadata_tls(args)
    assert tls is not None and tls.files.trust_file == Path("/other/ca.crt")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("useTls: maybe\n", "true or false"),
        ("tlsKeyStoreType: JKS\n", "tlsKeyStoreType"),
        ("tls:\n  nested: true\n", "flat key: value"),
        ("useTls: false\ntlsTrustCertsFilePath: /ca.crt\n", "useTls is false"),
    ],
)
def test_a_bad_etcd_settings_file_is_refused_by_name(tmp_path: Path, text: str, named: str) -> None:
    path = _conf(tmp_path, "etcd.yaml", text)
    args = cli.parse_args(
        ["broker", "--metadata-url=etcd://e:2379", f"--metadata-config-path={path}"]
    )
    with pytest.raises(ValueError, match=named):
        cli.metadata_tls(args)
