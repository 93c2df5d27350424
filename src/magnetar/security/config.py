"""The security settings of a process (broker, standalone, proxy), with Pulsar's key names.

Why this module exists: the configuration file, the command line and the tests build one
:class:`SecurityConfig`; the process turns it into its :class:`~authn.Authenticator`,
:class:`~authz.Rules` and TLS contexts, and a setting that cannot work (a provider without
its key, an unreadable key) fails at startup naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.security import authn, authz, client_auth, keys, tokens
from magnetar.security.tls import TlsSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class SecurityConfig:
    authentication_enabled: bool = False
    """authenticationEnabled."""
    providers: tuple[str, ...] = ()
    """authenticationProviders, as methods: ``tls``, ``token``, ``basic``."""
    token_secret_key: str | None = None
    """tokenSecretKey (file://, data:, a path or base64)."""
    token_public_key: str | None = None
    """tokenPublicKey (same forms; X.509 DER or PEM)."""
    token_auth_claim: str = "sub"  # noqa: S105 (a claim name)
    """tokenAuthClaim: the claim holding the role."""
    token_audience_claim: str | None = None
    """tokenAudienceClaim: with it, a token must name ``token_audience`` there."""
    token_audience: str | None = None
    """tokenAudience."""
    token_clock_skew_s: float = 0.0
    """tokenAllowedClockSkewSeconds."""
    basic_auth_conf: str | None = None
    """basicAuthConf: the htpasswd file (file://, data:, a path or base64)."""
    anonymous_role: str | None = None
    """anonymousUserRole: the role of a client that presents no credentials."""
    refresh_check_s: float = 60.0
    """authenticationRefreshCheckSeconds: how often a connection's credentials are checked
    for expiry (an expired token is challenged with AUTH_CHALLENGE, then the connection is
    closed if no fresh one arrives by the next check)."""
    authorization_enabled: bool = False
    """authorizationEnabled."""
    super_users: tuple[str, ...] = ()
    """superUserRoles."""
    proxy_roles: tuple[str, ...] = ()
    """proxyRoles."""
    authenticate_metrics: bool = False
    """authenticateMetricsEndpoint: /metrics needs credentials too (Pulsar's default: no)."""
    tls: TlsSettings = field(default_factory=TlsSettings)
    """The tls* keys of the TLS listeners."""
    tls_refresh_s: float = 300.0
    """tlsCertRefreshCheckDurationSec: how often the certificate files are checked."""
    broker_client_auth_plugin: str | None = None
    """brokerClientAuthenticationPlugin: how this broker authenticates to other brokers
    (its role should be a super-user, as in Pulsar)."""
    broker_client_auth_params: str = ""
    """brokerClientAuthenticationParameters."""
    broker_client_tls: bool = False
    """brokerClientTlsEnabled: call other brokers on their TLS URLs."""
    broker_client_trust_certs: str | None = None
    """brokerClientTrustCertsFilePath (default: tlsTrustCertsFilePath)."""
    broker_client_certificate: str | None = None
    """brokerClientCertificateFilePath (a client certificate for the TLS provider)."""
    broker_client_key: str | None = None
    """brokerClientKeyFilePath."""
    tls_hostname_verification: bool = False
    """tlsHostnameVerificationEnabled: check other brokers' certificate names."""

    def broker_client_credentials(self) -> client_auth.Credentials | None:
        """The credentials of this broker's calls to other brokers (ValueError when the
        plugin or its parameters cannot be used)."""
        if not self.broker_client_auth_plugin:
            return None
        try:
            return client_auth.Credentials.parse(
                self.broker_client_auth_plugin, self.broker_client_auth_params
            )
        except client_auth.CredentialsError as err:
            raise ValueError(f"brokerClientAuthenticationParameters: {err}") from None

    def broker_client_tls_settings(self) -> TlsSettings:
        creds = self.broker_client_credentials()
        cert = self.broker_client_certificate or (creds.cert_file if creds else None)
        key = self.broker_client_key or (creds.key_file if creds else None)
        return TlsSettings(
            trust=self.broker_client_trust_certs or self.tls.trust,
            certificate=cert,
            key=key,
            verify_hostname=self.tls_hostname_verification,
        )

    def authenticator(self) -> authn.Authenticator | None:
        """The providers, or None when authentication is off; ValueError naming the missing
        or unreadable setting."""
        if not self.authentication_enabled:
            return None
        providers: list[authn.Provider] = []
        for method in self.providers:
            if method == "tls":
                providers.append(authn.TlsProvider())
            elif method == "token":
                providers.append(authn.TokenProvider(self.token_validator()))
            elif method == "basic":
                if not self.basic_auth_conf:
                    raise ValueError("AuthenticationProviderBasic needs basicAuthConf")
                providers.append(authn.BasicProvider.from_conf(self.basic_auth_conf))
            else:
                raise ValueError(f"unknown authentication method {method!r}")
        if not providers and self.anonymous_role is None:
            raise ValueError(
                "authenticationEnabled=true needs authenticationProviders or anonymousUserRole"
            )
        return authn.Authenticator(providers, anonymous_role=self.anonymous_role)

    def token_validator(self) -> tokens.Validator:
        key: bytes | tokens.PublicKey
        if self.token_secret_key:
            key = keys.read(self.token_secret_key, what="tokenSecretKey")
        elif self.token_public_key:
            try:
                raw = keys.read(self.token_public_key, what="tokenPublicKey")
                key = tokens.load_public_key(raw)
            except ValueError as err:
                raise ValueError(f"tokenPublicKey: {err}") from None
        else:
            raise ValueError("AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey")
        return tokens.Validator(
            key,
            role_claim=self.token_auth_claim,
            audience_claim=self.token_audience_claim,
            audience=self.token_audience,
            leeway_s=self.token_clock_skew_s,
        )

    def rules(self) -> authz.Rules:
        return authz.Rules(
            enabled=self.authorization_enabled,
            super_users=frozenset(self.super_users),
            proxy_roles=frozenset(self.proxy_roles),
        )
