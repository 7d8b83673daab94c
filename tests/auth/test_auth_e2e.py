"""Delegated authn/authz through a real uvicorn HTTPS server, real certificates, fake kube-apiserver.

Server: ServerThread(AuthMiddleware(echo app)) on 127.0.0.1 serving the test PKI's certificate.
Cluster: tests/fakekube.FakeKube (TokenReview, SubjectAccessReview, the authentication ConfigMap),
reached through the real ``kubernetes`` client (KubernetesAuthAPI).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from adapter.auth.factory import add_auth_flags, build_auth
from adapter.auth.kubeapi import KubernetesAuthAPI
from adapter.auth.middleware import AuthMiddleware
from adapter.serving.server import ServerThread, ServingOptions
from tests.fakekube import FakeKube
from tests.pki import TestPKI

METRIC_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"


async def echo_user_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps(
        {
            "user": scope.get("user"),
            "headers": sorted({k.decode().lower() for k, _ in scope["headers"]}),
        }
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Env:
    pki: TestPKI
    fake: FakeKube
    server: ServerThread
    authorizer: object

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def get(
        self,
        path: str,
        client: tuple[str, list[str]] | None = None,
        ca: str = "client",
        headers: list[tuple[str, str]] | None = None,
    ) -> httpx.Response:
        ctx = self.pki.ssl_context(client=client, ca=ca)
        with httpx.Client(verify=ctx) as http:
            return http.get(self.base + path, headers=httpx.Headers(headers or []))

    def proxy_get(
        self,
        path: str,
        user: str,
        groups: list[str],
        extra: list[tuple[str, str]] = (),
        cn: str = "front-proxy-client",
        ca: str = "front-proxy",
    ) -> httpx.Response:
        headers = [("X-Remote-User", user)] + [("X-Remote-Group", g) for g in groups] + list(extra)
        return self.get(path, client=(cn, []), ca=ca, headers=headers)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_auth_flags(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeKube]:
    with FakeKube() as fk:
        yield fk


@pytest.fixture
def env(tmp_path: Path, fake: FakeKube) -> Iterator[Env]:
    fake.subject_access_reviews.clear()
    fake.token_reviews.clear()
    fake.tokens.clear()
    fake.sar_policy = lambda spec: (True, "fake: allow all")
    pki = TestPKI(tmp_path)
    token_file = tmp_path / "tokens.csv"
    token_file.write_text('static-token,static-user,uid-7,"group-a,group-b"\n')
    args = _parse(
        [
            "--client-ca-file",
            str(pki.client_ca_file),
            "--requestheader-client-ca-file",
            str(pki.front_proxy_ca_file),
            "--requestheader-allowed-names",
            "front-proxy-client,aggregator",
            "--requestheader-extra-headers-prefix",
            "X-Remote-Extra-",
            "--token-auth-file",
            str(token_file),
        ]
    )
    api = KubernetesAuthAPI(fake.api_client())
    authenticator, authorizer, client_cas = build_auth(args, authn_api=api, authz_api=api)
    assert b"front-proxy-ca" not in (client_cas() or b"")  # PEM, not names
    assert (client_cas() or b"").count(b"BEGIN CERTIFICATE") == 2
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
    )
    with ServerThread(AuthMiddleware(echo_user_app, authenticator, authorizer), opts) as server:
        yield Env(pki, fake, server, authorizer)
    authenticator.config.stop()


UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


# ------------------------------------------------------------------------------ front proxy


def test_front_proxy_identity_with_repeated_groups_and_extra(env: Env):
    r = env.proxy_get(
        METRIC_PATH,
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
        extra=[
            ("X-Remote-Extra-Authentication.Kubernetes.Io%2fPod-Name", "kcm-1"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Scopes", "b"),
        ],
    )
    assert r.status_code == 200, r.text
    user = r.json()["user"]
    assert user["name"] == "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
    assert user["groups"] == ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
    assert user["extra"] == {"authentication.kubernetes.io/pod-name": ["kcm-1"], "scopes": ["a", "b"]}
    assert user["method"] == "front-proxy"
    # The identity headers never reach the app.
    assert not [h for h in r.json()["headers"] if h.startswith("x-remote-")]


def test_front_proxy_cert_from_wrong_ca_is_401(env: Env):
    r = env.proxy_get(METRIC_PATH, "system:kube-aggregator", ["system:masters"], ca="evil")
    assert r.status_code == 401
    assert r.json() == UNAUTHORIZED
    assert r.headers["content-type"] == "application/json"
    assert env.fake.subject_access_reviews == []


def test_front_proxy_cn_not_allowed_is_401(env: Env):
    r = env.proxy_get(METRIC_PATH, "system:kube-aggregator", ["system:masters"], cn="someone-else")
    assert r.status_code == 401
    assert r.json() == UNAUTHORIZED


def test_spoofed_headers_without_cert_are_ignored(env: Env):
    r = env.get(METRIC_PATH, headers=[("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")])
    # Anonymous -> goes to SAR (allow-all fake policy), the headers are stripped and not trusted.
    assert r.status_code == 200
    assert r.json()["user"]["name"] == "system:anonymous"
    assert r.json()["user"]["groups"] == ["system:unauthenticated"]
    assert not [h for h in r.json()["headers"] if h.startswith("x-remote-")]
    [sar] = env.fake.subject_access_reviews
    assert sar["spec"]["user"] == "system:anonymous"


def test_spoofed_headers_with_bearer_token_use_the_token_identity(env: Env):
    env.fake.tokens["tok-1"] = {"username": "alice", "uid": "u1", "groups": ["dev"]}
    r = env.get(METRIC_PATH, headers=[("Authorization", "Bearer tok-1"), ("X-Remote-User", "admin")])
    assert r.status_code == 200
    assert r.json()["user"]["name"] == "alice"
    assert "authorization" not in r.json()["headers"]


# ------------------------------------------------------------------------------ direct certs, tokens


def test_direct_client_certificate(env: Env):
    r = env.get(METRIC_PATH, client=("jane", ["ops", "dev"]))
    assert r.status_code == 200
    user = r.json()["user"]
    assert (user["name"], user["groups"], user["method"]) == ("jane", ["ops", "dev", "system:authenticated"], "x509")


def test_direct_client_cert_from_unknown_ca_is_401(env: Env):
    assert env.get(METRIC_PATH, client=("jane", []), ca="evil").status_code == 401


def test_bearer_token_review_allowed_and_denied(env: Env):
    env.fake.tokens["good"] = {
        "username": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-9",
        "groups": ["system:serviceaccounts"],
        "extra": {"k": ["v"]},
    }
    r = env.get(METRIC_PATH, headers=[("Authorization", "Bearer good")])
    assert r.status_code == 200
    user = r.json()["user"]
    assert user == {
        "name": "system:serviceaccount:monitoring:prometheus",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"k": ["v"]},
        "uid": "u-9",
        "method": "token",
    }
    review = env.fake.token_reviews[-1]
    assert review["apiVersion"] == "authentication.k8s.io/v1" and review["kind"] == "TokenReview"
    assert review["spec"] == {"token": "good"}

    r = env.get(METRIC_PATH, headers=[("Authorization", "Bearer bad")])
    assert r.status_code == 401 and r.json() == UNAUTHORIZED
    # Cached: the same tokens again do not cause more reviews.
    reviews = len(env.fake.token_reviews)
    env.get(METRIC_PATH, headers=[("Authorization", "Bearer good")])
    env.get(METRIC_PATH, headers=[("Authorization", "Bearer bad")])
    assert len(env.fake.token_reviews) == reviews


def test_static_token_file(env: Env):
    r = env.get(METRIC_PATH, headers=[("Authorization", "Bearer static-token")])
    assert r.status_code == 200
    user = r.json()["user"]
    assert (user["name"], user["uid"], user["groups"]) == (
        "static-user",
        "uid-7",
        ["group-a", "group-b", "system:authenticated"],
    )
    assert env.fake.token_reviews == []  # the file answered first


# ------------------------------------------------------------------------------ authorization


def test_system_masters_needs_no_sar(env: Env):
    r = env.proxy_get("/apis/external.metrics.k8s.io/v1beta1", "system:kube-aggregator", ["system:masters"])
    assert r.status_code == 200
    assert env.fake.subject_access_reviews == []


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_health_paths_without_any_credentials(env: Env, path: str):
    env.fake.sar_policy = lambda spec: (False, "nobody")
    r = env.get(path)
    assert r.status_code == 200
    assert env.fake.subject_access_reviews == []


def test_sar_attributes_for_metric_get_are_exact(env: Env):
    r = env.proxy_get(
        METRIC_PATH + "?labelSelector=scaledobject.keda.sh%2Fname%3Dmy-so",
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ["system:serviceaccounts"],
        extra=[("X-Remote-Extra-Pod", "p1")],
    )
    assert r.status_code == 200
    [sar] = env.fake.subject_access_reviews
    assert sar["apiVersion"] == "authorization.k8s.io/v1" and sar["kind"] == "SubjectAccessReview"
    assert sar["spec"] == {
        "resourceAttributes": {
            "namespace": "default",
            "verb": "list",
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "resource": "queue_depth",
            "labelSelector": {
                "requirements": [{"key": "scaledobject.keda.sh/name", "operator": "In", "values": ["my-so"]}]
            },
        },
        "user": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"pod": ["p1"]},
    }


def test_watch_and_discovery_attributes(env: Env):
    env.proxy_get(METRIC_PATH + "?watch=true", "u", [])
    env.proxy_get("/openapi/v2", "u", [])
    watch_sar, openapi_sar = env.fake.subject_access_reviews
    assert watch_sar["spec"]["resourceAttributes"]["verb"] == "watch"
    assert openapi_sar["spec"]["nonResourceAttributes"] == {"path": "/openapi/v2", "verb": "get"}
    assert "resourceAttributes" not in openapi_sar["spec"]


def test_sar_deny_is_403_with_exact_status(env: Env):
    env.fake.sar_policy = lambda spec: (False, "no RBAC policy matched")
    r = env.proxy_get(METRIC_PATH, "system:serviceaccount:kube-system:horizontal-pod-autoscaler", [])
    assert r.status_code == 403
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "queue_depth.external.metrics.k8s.io is forbidden: User "
        '"system:serviceaccount:kube-system:horizontal-pod-autoscaler" cannot list resource '
        '"queue_depth" in API group "external.metrics.k8s.io" in the namespace "default": '
        "no RBAC policy matched",
        "reason": "Forbidden",
        "details": {"group": "external.metrics.k8s.io", "kind": "queue_depth"},
        "code": 403,
    }
    # Field order as the Go encoder writes it.
    assert list(r.json()) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]


def test_sar_error_is_500_text(env: Env, monkeypatch):
    def boom(body):
        from adapter.auth.kubeapi import KubeAPIError

        raise KubeAPIError("SubjectAccessReview failed: connection refused")

    monkeypatch.setattr(env.authorizer.api, "create_subject_access_review", boom)
    r = env.proxy_get(METRIC_PATH + "?labelSelector=a%3Db", "bob", [])
    assert r.status_code == 500
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.text == (
        'Internal Server Error: "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/'
        'queue_depth?labelSelector=a%3Db": SubjectAccessReview failed: connection refused\n'
    )


# ------------------------------------------------------------------------------ ConfigMap source


def test_configmap_configuration_and_rotation(tmp_path: Path, fake: FakeKube):
    pki = TestPKI(tmp_path)
    fake.sar_policy = lambda spec: (True, "")
    fake.set_auth_configmap(
        {
            "client-ca-file": pki.ca_pem("client").decode(),
            "requestheader-client-ca-file": pki.ca_pem("front-proxy").decode(),
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
    )
    api = KubernetesAuthAPI(fake.api_client())
    authenticator, authorizer, _ = build_auth(_parse([]), authn_api=api, authz_api=api)
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
    )
    env = None
    try:
        with ServerThread(AuthMiddleware(echo_user_app, authenticator, authorizer), opts) as server:
            env = Env(pki, fake, server, authorizer)
            r = env.proxy_get(METRIC_PATH, "hpa", ["g"])
            assert r.status_code == 200 and r.json()["user"]["name"] == "hpa"
            # Rotate: the front-proxy CA becomes the "evil" one. The watch must pick it up.
            fake.set_auth_configmap(
                {
                    "client-ca-file": pki.ca_pem("client").decode(),
                    "requestheader-client-ca-file": pki.ca_pem("evil").decode(),
                    "requestheader-allowed-names": '["front-proxy-client"]',
                }
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                rh = authenticator.config.current.request_header
                if rh is not None and rh.ca.pem == pki.ca_pem("evil"):
                    break
                time.sleep(0.05)
            assert env.proxy_get(METRIC_PATH, "hpa", ["g"]).status_code == 401
            r = env.proxy_get(METRIC_PATH, "hpa", ["g"], ca="evil")
            assert r.status_code == 200 and r.json()["user"]["name"] == "hpa"
    finally:
        authenticator.config.stop()
        fake.delete("ConfigMap", "extension-apiserver-authentication", "kube-system")


def test_local_mode_without_anything_allows_anonymous(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    authenticator, authorizer, client_cas = build_auth(_parse([]))
    assert client_cas() is None
    pki = TestPKI(tmp_path)
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
    )
    with (
        ServerThread(AuthMiddleware(echo_user_app, authenticator, authorizer), opts) as server,
        httpx.Client(verify=pki.ssl_context()) as http,
    ):
        r = http.get(f"https://127.0.0.1:{server.port}{METRIC_PATH}")
    assert r.status_code == 200
    assert r.json()["user"]["name"] == "system:anonymous"
