"""Unit tests of delegated auth: attributes, selectors, caches (injected clock), token file, x509
policy, config sources, flags, response bodies.  End-to-end HTTPS tests are in test_auth_e2e.py."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from adapter.auth.attributes import parse_label_requirements, request_attributes
from adapter.auth.authn import Authenticator
from adapter.auth.authz import AlwaysAllowAuthorizer, DelegatingAuthorizer
from adapter.auth.config import AuthFlags, DynamicAuthnConfig
from adapter.auth.factory import AuthConfigError, AuthenticatedOnlyAuthorizer, add_auth_flags, build_auth
from adapter.auth.kubeapi import KubeAPIError
from adapter.auth.middleware import AuthMiddleware
from adapter.auth.responses import forbidden_body, forbidden_message
from adapter.auth.tokens import TokenReviewAuthenticator, parse_token_file
from adapter.auth.user import ANONYMOUS, UserInfo
from adapter.auth.x509 import CABundle, CertificateError
from adapter.serving.certs import make_ca, make_client_cert, make_serving_cert
from tests.pki import TestPKI


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeAPI:
    """In-process KubeAuthAPI: counts calls, answers from tables."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {}
        self.allow = True
        self.reason = ""
        self.sars: list[dict[str, Any]] = []
        self.token_reviews: list[dict[str, Any]] = []
        self.configmap: dict[str, str] | None = None
        self.fail = False

    def get_configmap(self, namespace, name):
        if self.fail:
            raise KubeAPIError("reading ConfigMap failed: 403 Forbidden")
        return self.configmap, "1"

    def watch_configmap(self, namespace, name, resource_version, timeout_seconds):
        return iter(())

    def create_token_review(self, body):
        self.token_reviews.append(body)
        user = self.tokens.get(body["spec"]["token"])
        if user is None:
            return {"status": {"authenticated": False}}
        return {"status": {"authenticated": True, "user": user}}

    def create_subject_access_review(self, body):
        if self.fail:
            raise KubeAPIError("SubjectAccessReview failed: boom")
        self.sars.append(body)
        return {"status": {"allowed": self.allow, "reason": self.reason}}


def run(coro):
    return asyncio.run(coro)


def der_of(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


# ------------------------------------------------------------------------------ request attributes


@pytest.mark.parametrize(
    "method,path,query,expected",
    [
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/my%7Cmetric".replace("%7C", "|"),
            "",
            ("list", True, "external.metrics.k8s.io", "v1beta1", "ns1", "my|metric", ""),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/m",
            "watch=true",
            ("watch", True, "external.metrics.k8s.io", "v1beta1", "ns1", "m", ""),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/m",
            "watch=false",
            ("list", True, "external.metrics.k8s.io", "v1beta1", "ns1", "m", ""),
        ),
        (
            "POST",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/m",
            "",
            ("create", True, "external.metrics.k8s.io", "v1beta1", "ns1", "m", ""),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1",
            "",
            ("get", True, "external.metrics.k8s.io", "v1beta1", "ns1", "namespaces", "ns1"),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/m",
            "",
            ("list", True, "external.metrics.k8s.io", "v1beta1", "", "m", ""),
        ),
        ("GET", "/apis/external.metrics.k8s.io/v1beta1", "", ("get", False, "", "", "", "", "")),
        ("GET", "/apis/external.metrics.k8s.io", "", ("get", False, "", "", "", "", "")),
        ("GET", "/apis", "", ("get", False, "", "", "", "", "")),
        ("GET", "/openapi/v2", "", ("get", False, "", "", "", "", "")),
        ("HEAD", "/healthz", "", ("head", False, "", "", "", "", "")),
        ("GET", "/api/v1/namespaces/default/pods/p1", "", ("get", True, "", "v1", "default", "pods", "p1")),
    ],
)
def test_request_attributes(method, path, query, expected):
    a = request_attributes(method, path, query.encode())
    assert (a.verb, a.resource_request, a.group, a.version, a.namespace, a.resource, a.name) == expected


@pytest.mark.parametrize(
    "selector,expected",
    [
        ("a=b", (("a", "In", ("b",)),)),
        ("a==b,c!=d", (("a", "In", ("b",)), ("c", "NotIn", ("d",)))),
        ("env in (prod,staging),queue=orders", (("env", "In", ("prod", "staging")), ("queue", "In", ("orders",)))),
        ("x notin (b, a)", (("x", "NotIn", ("a", "b")),)),
        ("k,!gone", (("gone", "DoesNotExist", ()), ("k", "Exists", ()))),
        ("n>5,z=1", (("z", "In", ("1",)),)),  # Gt/Lt dropped (webhook.go)
        ("example.com/app=web", (("example.com/app", "In", ("web",)),)),
    ],
)
def test_label_requirements(selector, expected):
    assert parse_label_requirements(selector) == expected


@pytest.mark.parametrize("selector", ["a in (", "=b", "a=b,", "a in ()", "a b"])
def test_unparsable_selectors_give_none(selector):
    assert parse_label_requirements(selector) is None


# ------------------------------------------------------------------------------ responses


def test_forbidden_messages_for_other_shapes():
    user = UserInfo.make("bob")
    assert forbidden_message(user, request_attributes("GET", "/openapi/v2"), "") == (
        'forbidden: User "bob" cannot get path "/openapi/v2"'
    )
    cluster = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/m")
    assert forbidden_message(user, cluster, "r") == (
        'm.external.metrics.k8s.io is forbidden: User "bob" cannot list resource "m" in API group '
        '"external.metrics.k8s.io" at the cluster scope: r'
    )
    body = json.loads(forbidden_body(user, request_attributes("GET", "/version"), ""))
    assert body["details"] == {} and body["code"] == 403 and body["reason"] == "Forbidden"


# ------------------------------------------------------------------------------ token file


def test_token_file_parsing():
    tokens = parse_token_file('t1,alice,u1,"g1,g2"\n\n# comment\nt2, bob, u2\n')
    assert tokens["t1"] == UserInfo.make("alice", ["g1", "g2"], uid="u1")
    assert tokens["t2"].groups == () and tokens["t2"].name == "bob"
    with pytest.raises(ValueError, match="line 1: must have at least 3 columns"):
        parse_token_file("only,two\n")


# ------------------------------------------------------------------------------ caches


def test_token_review_cache_expires_after_ttl_for_allow_and_deny():
    api, clock = FakeAPI(), FakeClock()
    api.tokens["good"] = {"username": "alice", "groups": ["g"]}
    tr = TokenReviewAuthenticator(api, ttl=10, clock=clock)
    assert run(tr.authenticate("good")).name == "alice"
    assert run(tr.authenticate("bad")) is None
    clock.now += 9.9
    assert run(tr.authenticate("good")).name == "alice"
    assert run(tr.authenticate("bad")) is None
    assert len(api.token_reviews) == 2  # both cached
    api.tokens["bad"] = {"username": "late"}
    clock.now += 0.2  # past 10 s
    assert run(tr.authenticate("bad")).name == "late"
    assert run(tr.authenticate("good")).name == "alice"
    assert len(api.token_reviews) == 4


def test_sar_cache_expires_and_is_keyed_by_full_spec():
    api, clock = FakeAPI(), FakeClock()
    authz = DelegatingAuthorizer(api, clock=clock)
    user = UserInfo.make("hpa", ["system:authenticated"])
    attrs = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/a/m")
    assert run(authz.authorize(user, attrs)).allowed
    api.allow = False
    assert run(authz.authorize(user, attrs)).allowed  # cached allow
    other_ns = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/b/m")
    assert not run(authz.authorize(user, other_ns)).allowed  # different spec -> new SAR
    assert len(api.sars) == 2
    clock.now += 10.01
    assert not run(authz.authorize(user, attrs)).allowed  # expired -> new SAR sees the deny
    api.allow = True
    clock.now += 5
    assert not run(authz.authorize(user, attrs)).allowed  # deny cached too
    clock.now += 5.01
    assert run(authz.authorize(user, attrs)).allowed
    assert len(api.sars) == 4


def test_concurrent_identical_sars_are_coalesced():
    api = FakeAPI()
    authz = DelegatingAuthorizer(api)
    user = UserInfo.make("hpa", ["system:authenticated"])
    attrs = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/a/m")

    async def many():
        return await asyncio.gather(*(authz.authorize(user, attrs) for _ in range(20)))

    assert all(d.allowed for d in run(many()))
    assert len(api.sars) == 1


def test_masters_and_paths_skip_sar_and_api_errors_raise():
    api = FakeAPI()
    api.fail = True
    authz = DelegatingAuthorizer(api)
    masters = UserInfo.make("x", ["system:masters"])
    assert run(authz.authorize(masters, request_attributes("GET", "/apis/x/v1/namespaces/a/m"))).allowed
    assert run(authz.authorize(ANONYMOUS, request_attributes("GET", "/livez"))).allowed
    from adapter.auth.authz import AuthorizationError

    with pytest.raises(AuthorizationError, match="boom"):
        run(authz.authorize(ANONYMOUS, request_attributes("GET", "/version")))
    assert api.sars == []


# ------------------------------------------------------------------------------ x509 policy


def test_ca_bundle_rejects_serving_eku_and_expired_certs():
    ca_pem, ca_key = make_ca("ca")
    bundle = CABundle(ca_pem)
    client_pem, _ = make_client_cert(ca_pem, ca_key, "alice", ["g"])
    leaf = x509.load_pem_x509_certificate(client_pem)
    assert bundle.verify(leaf).common_name == "alice"
    serving = x509.load_pem_x509_certificate(make_serving_cert(ca_pem, ca_key, ["x"])[0])
    with pytest.raises(CertificateError, match="key usage"):
        bundle.verify(serving)
    later = CABundle(ca_pem, clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=400))
    with pytest.raises(CertificateError, match="unknown authority or not valid now"):
        later.verify(leaf)


def test_cert_without_eku_is_accepted_like_go():
    ca_pem, ca_key_pem = make_ca("ca")
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "old")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    assert CABundle(ca_pem).verify(cert).common_name == "old"


def test_bad_bundle_has_clear_error():
    with pytest.raises(ValueError, match="--client-ca-file: contains no certificate|not a PEM"):
        CABundle(b"hello", "--client-ca-file")


# ------------------------------------------------------------------------------ authenticator


def _authn(tmp_path: Path, allowed: list[str] | None = None) -> tuple[Authenticator, TestPKI]:
    pki = TestPKI(tmp_path)
    cfg = DynamicAuthnConfig(
        AuthFlags(
            client_ca_file=str(pki.client_ca_file),
            requestheader_client_ca_file=str(pki.front_proxy_ca_file),
            requestheader_allowed_names=allowed or [],
        )
    )
    cfg.load_initial()
    return Authenticator(cfg), pki


def _tls_for(pki: TestPKI, cn: str, groups=(), ca="front-proxy") -> dict[str, Any]:
    cert_file, _ = pki.client(cn, list(groups), ca=ca)
    return {"client_cert_der": der_of(cert_file.read_bytes())}


def test_front_proxy_without_user_header_falls_through_to_401(tmp_path):
    authn, pki = _authn(tmp_path)
    # Verified proxy cert, no X-Remote-User -> no opinion; then the client-CA check fails -> error.
    result = run(authn.authenticate([(b"x-remote-group", b"g")], _tls_for(pki, "front-proxy-client")))
    assert result.user is None and "client certificate" in result.error
    assert b"x-remote-group" in result.strip_headers


def test_empty_allowed_names_accepts_any_cn_and_first_username_header_wins(tmp_path):
    authn, pki = _authn(tmp_path)
    headers = [
        (b"x-remote-user", b"alice"),
        (b"x-remote-user", b"mallory"),
        (b"x-remote-group", b""),
        (b"x-remote-group", b"a"),
    ]
    result = run(authn.authenticate(headers, _tls_for(pki, "anything")))
    assert result.user.name == "alice"
    assert result.user.groups == ("a", "system:authenticated")


def test_config_reload_on_file_change(tmp_path):
    authn, pki = _authn(tmp_path)
    tls = _tls_for(pki, "p", ca="evil")
    headers = [(b"x-remote-user", b"u")]
    assert run(authn.authenticate(headers, tls)).user is None
    pki.front_proxy_ca_file.write_bytes(pki.ca_pem("evil") + b"\n")
    assert authn.config.check_files()
    assert run(authn.authenticate(headers, tls)).user.name == "u"
    pki.front_proxy_ca_file.write_bytes(b"garbage")  # broken rotation keeps the previous CA
    assert not authn.config.check_files()
    assert run(authn.authenticate(headers, tls)).user.name == "u"


def test_configmap_lookup_failure(tmp_path):
    api = FakeAPI()
    api.fail = True
    with pytest.raises(KubeAPIError, match="extension-apiserver-authentication-reader"):
        DynamicAuthnConfig(AuthFlags(), api).load_initial()
    cfg = DynamicAuthnConfig(AuthFlags(), api, tolerate_lookup_failure=True)
    cfg.load_initial()
    assert cfg.current.client_ca is None


def test_configmap_with_bad_json_is_reported(tmp_path):
    api = FakeAPI()
    pki = TestPKI(tmp_path)
    api.configmap = {
        "requestheader-client-ca-file": pki.ca_pem("front-proxy").decode(),
        "requestheader-allowed-names": "front-proxy-client",
    }  # not JSON
    with pytest.raises(ValueError, match="requestheader-allowed-names.*JSON"):
        DynamicAuthnConfig(AuthFlags(), api).load_initial()


# ------------------------------------------------------------------------------ flags / factory


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_auth_flags(parser)
    return parser.parse_args(argv)


def test_flags_parse_like_pflag():
    args = _parse(
        [
            "--requestheader-allowed-names",
            "a,b",
            "--requestheader-allowed-names",
            "c",
            "--authentication-tolerate-lookup-failure",
            "--authentication-skip-lookup=false",
            "--authorization-always-allow-paths",
            "/healthz,/metrics*",
        ]
    )
    assert args.requestheader_allowed_names == ["a", "b", "c"]
    assert args.authentication_tolerate_lookup_failure is True
    assert args.authentication_skip_lookup is False
    assert args.authorization_always_allow_paths == ["/healthz", "/metrics*"]
    assert _parse([]).authorization_always_allow_paths == ["/healthz", "/readyz", "/livez"]


def test_build_auth_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(AuthConfigError, match="--client-ca-file .*No such file"):
        build_auth(_parse(["--client-ca-file", str(tmp_path / "missing.crt")]))
    bad = tmp_path / "tokens.csv"
    bad.write_text("x,y\n")
    with pytest.raises(AuthConfigError, match="at least 3 columns"):
        build_auth(_parse(["--token-auth-file", str(bad)]))
    with pytest.raises(AuthConfigError, match="cannot load Kubernetes client configuration"):
        build_auth(_parse(["--kubeconfig", str(tmp_path / "nope")]))


def test_local_token_file_mode_requires_a_token(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("secret,dev,1\n")
    authn, authz, _ = build_auth(_parse(["--token-auth-file", str(tokens)]), start_watchers=False)
    assert isinstance(authz, AuthenticatedOnlyAuthorizer)
    metric = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/a/m")
    assert not run(authz.authorize(ANONYMOUS, metric)).allowed
    assert run(authz.authorize(ANONYMOUS, request_attributes("GET", "/readyz"))).allowed
    user = run(authn.authenticate([(b"authorization", b"Bearer secret")], None)).user
    assert run(authz.authorize(user, metric)).allowed
    assert run(authn.authenticate([(b"authorization", b"Bearer wrong")], None)).user is None


# ------------------------------------------------------------------------------ middleware (ASGI level)


def _call(mw: AuthMiddleware, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes, dict]:
    seen: dict[str, Any] = {}
    sent: list[dict] = []

    async def app(scope, receive, send):
        seen.update(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    mw.app = app
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
    }
    run(mw(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), seen


def test_middleware_strips_authorization_after_token_auth_and_passes_lifespan():
    api = FakeAPI()
    api.tokens["t"] = {"username": "alice"}
    mw = AuthMiddleware(None, Authenticator(None, [TokenReviewAuthenticator(api)]), AlwaysAllowAuthorizer())
    status, _, seen = _call(mw, "/apis", [(b"authorization", b"Bearer t"), (b"accept", b"*/*")])
    assert status == 204
    assert seen["headers"] == [(b"accept", b"*/*")]
    assert seen["user"]["name"] == "alice" and seen["user"]["groups"] == ["system:authenticated"]
    assert seen["auth"]["attributes"].path == "/apis"

    calls = []

    async def app(scope, receive, send):
        calls.append(scope["type"])

    run(AuthMiddleware(app, Authenticator(), AlwaysAllowAuthorizer())({"type": "lifespan"}, None, None))
    assert calls == ["lifespan"]


def test_cached_front_proxy_result_is_dropped_when_the_ca_rotates(tmp_path):
    authn, pki = _authn(tmp_path)
    tls = _tls_for(pki, "front-proxy-client")
    headers = [(b"x-remote-user", b"u"), (b"x-remote-group", b"g")]
    assert run(authn.authenticate(headers, tls)).user.name == "u"
    assert run(authn.authenticate(headers, tls)).user.name == "u"  # served from the result cache
    pki.front_proxy_ca_file.write_bytes(pki.ca_pem("evil"))
    assert authn.config.check_files()
    assert run(authn.authenticate(headers, tls)).user is None
