"""Adversarial review of delegated authn/authz: each test pins one finding (kube's behaviour in
k8s.io/apiserver as the reference) that the code got wrong before it was fixed.

No timing assertions: concurrency is driven with events, memory with tracemalloc totals.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.auth.attributes import request_attributes
from adapter.auth.authn import Authenticator
from adapter.auth.authz import AlwaysAllowAuthorizer, AuthorizationError, DelegatingAuthorizer
from adapter.auth.cache import Coalescer
from adapter.auth.config import AuthFlags, DynamicAuthnConfig
from adapter.auth.middleware import AuthMiddleware
from adapter.auth.responses import forbidden_message, internal_error_text
from adapter.auth.tokens import TokenReviewAuthenticator
from adapter.auth.user import ANONYMOUS, UserInfo
from adapter.labels import parse_selector
from tests.pki import TestPKI

METRIC = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class FakeAPI:
    """KubeAuthAPI answering reviews with a fixed object (or from a table of tokens)."""

    def __init__(self, token_review: Any = None, sar: Any = None, record: bool = True) -> None:
        self.token_review = token_review
        self.sar = sar if sar is not None else {"status": {"allowed": True}}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.record = record
        self.token_reviews: list[dict[str, Any]] = []
        self.sars: list[dict[str, Any]] = []

    def get_configmap(self, namespace: str, name: str) -> Any:
        return None, ""

    def watch_configmap(self, *args: Any) -> Any:
        return iter(())

    def create_token_review(self, body: dict[str, Any]) -> Any:
        if self.record:
            self.token_reviews.append(body)
        if self.token_review is not None:
            return self.token_review
        user = self.tokens.get(body["spec"]["token"])
        return {"status": {"authenticated": True, "user": user}} if user else {"status": {"authenticated": False}}

    def create_subject_access_review(self, body: dict[str, Any]) -> Any:
        if self.record:
            self.sars.append(body)
        return self.sar


class RecordingTokens:
    """A token authenticator that accepts every token and remembers what it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def authenticate(self, token: str) -> UserInfo | None:
        self.seen.append(token)
        return UserInfo.make("token-user", method="token")


def _ca(pki: TestPKI, name: str) -> tuple[x509.Certificate, Any]:
    cert_pem, key_pem = pki.cas[name]
    return x509.load_pem_x509_certificate(cert_pem), serialization.load_pem_private_key(key_pem, None)


def _leaf_der(
    pki: TestPKI,
    ca: str,
    subject: list[tuple[x509.ObjectIdentifier, str]],
    extra_extensions: list[x509.ExtensionType] = (),  # type: ignore[assignment]
) -> bytes:
    """A clientAuth leaf with exactly the subject attributes given (in order), signed by ``ca``."""
    ca_cert, ca_key = _ca(pki, ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
    )
    for ext in extra_extensions:
        builder = builder.add_extension(ext, critical=False)
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def _authn(tmp_path: Path, allowed: list[str] | None = None, tokens: Any = ()) -> tuple[Authenticator, TestPKI]:
    pki = TestPKI(tmp_path)
    cfg = DynamicAuthnConfig(
        AuthFlags(
            client_ca_file=str(pki.client_ca_file),
            requestheader_client_ca_file=str(pki.front_proxy_ca_file),
            requestheader_allowed_names=allowed or [],
        )
    )
    cfg.load_initial()
    return Authenticator(cfg, list(tokens)), pki


def _proxy_tls(pki: TestPKI, cn: str = "front-proxy-client") -> dict[str, Any]:
    return {"client_cert_der": _leaf_der(pki, "front-proxy", [(NameOID.COMMON_NAME, cn)])}


def _call(
    mw: AuthMiddleware, path: str, headers: list[tuple[bytes, bytes]], tls: Any = None
) -> tuple[int, bytes, dict]:
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
    path_only, _, query = path.partition("?")
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "headers": headers,
    }
    if tls is not None:
        scope["extensions"] = {"tls": tls}
    run(mw(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), seen


# ------------------------------------------------------------------------------ client certificates


def test_client_cert_with_malformed_extensions_is_401_not_a_crash(tmp_path):
    """Any certificate passes the handshake (verification is deferred), so its extensions are
    attacker-controlled. A duplicate extension made cryptography raise DuplicateExtension from the
    EKU check, which escaped the authenticator as a 500 with a traceback."""
    authn, pki = _authn(tmp_path)
    der = _leaf_der(
        pki,
        "client",
        [(NameOID.COMMON_NAME, "x")],
        [
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.2.3.4"), b"\x05\x00"),
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.2.3.5"), b"\x05\x00"),
        ],
    )
    bad = der.replace(b"\x06\x03\x2a\x03\x05", b"\x06\x03\x2a\x03\x04")  # second OID := first
    assert bad != der
    result = run(authn.authenticate([], {"client_cert_der": bad}))
    assert result.user is None
    assert "client certificate" in result.error and "front-proxy" in result.error
    status, body, _ = _call(AuthMiddleware(None, authn, AlwaysAllowAuthorizer()), METRIC, [], {"client_cert_der": bad})
    assert status == 401 and b'"reason":"Unauthorized"' in body


def test_client_cert_without_common_name_is_no_opinion(tmp_path):
    """x509 CommonNameUserConversion: an empty CN is "no opinion", not user "" with the O groups
    (here system:masters, which skipped authorization altogether). What follows is then kube's:
    with a front-proxy CA the failed front-proxy verification is an error (401); without one the
    request is anonymous."""
    authn, pki = _authn(tmp_path)
    der = _leaf_der(pki, "client", [(NameOID.ORGANIZATION_NAME, "system:masters")])
    result = run(authn.authenticate([], {"client_cert_der": der}))
    assert result.user is None and result.error.startswith("front-proxy: ")
    client_only = DynamicAuthnConfig(AuthFlags(client_ca_file=str(pki.client_ca_file)))
    client_only.load_initial()
    result = run(Authenticator(client_only).authenticate([], {"client_cert_der": der}))
    assert result.user == ANONYMOUS and result.error == ""


def test_last_common_name_wins_like_go(tmp_path):
    """pkix.Name.FillFromRDNSequence keeps the last CN; user name and allowed-names check use it."""
    authn, pki = _authn(tmp_path, allowed=["front-proxy-client"])
    der = _leaf_der(pki, "client", [(NameOID.COMMON_NAME, "alice"), (NameOID.COMMON_NAME, "bob")])
    assert run(authn.authenticate([], {"client_cert_der": der})).user.name == "bob"
    proxy = _leaf_der(
        pki, "front-proxy", [(NameOID.COMMON_NAME, "front-proxy-client"), (NameOID.COMMON_NAME, "mallory")]
    )
    result = run(authn.authenticate([(b"x-remote-user", b"admin")], {"client_cert_der": proxy}))
    assert result.user is None and "cn=mallory is not in the allowed list" in result.error


# ------------------------------------------------------------------------------ front-proxy headers


def test_front_proxy_header_values_are_utf8_and_not_unicode_stripped(tmp_path):
    """Go reads header bytes as a (UTF-8) string and trims only spaces and tabs. Latin-1 decoding
    turned "jöe" into "jÃ¶e"; str.strip() would also have made "alice\\u3000" into "alice"."""
    authn, pki = _authn(tmp_path)
    headers = [
        (b"x-remote-user", "jöe".encode()),
        (b"x-remote-group", "grüppe".encode()),
        (b"x-remote-extra-scope", "värde".encode()),
    ]
    user = run(authn.authenticate(headers, _proxy_tls(pki))).user
    assert (user.name, user.groups, user.extra_dict) == (
        "jöe",
        ("grüppe", "system:authenticated"),
        {"scope": ["värde"]},
    )
    spaced = run(authn.authenticate([(b"x-remote-user", "alice\u3000".encode())], _proxy_tls(pki))).user
    assert spaced.name == "alice\u3000"
    nbsp = run(authn.authenticate([(b"x-remote-user", "alice\u00a0".encode())], _proxy_tls(pki))).user
    assert nbsp.name == "alice\u00a0"


def test_extra_keys_are_path_unescaped_like_go(tmp_path):
    """newExtra: lower-case the key, then url.PathUnescape; a malformed escape keeps the whole key
    as it was (Python's unquote decoded the valid escapes and left the bad one)."""
    authn, pki = _authn(tmp_path)
    headers = [
        (b"x-remote-user", b"u"),
        (b"X-Remote-Extra-Foo%zz%2Fbar", b"1"),
        (b"x-remote-extra-A%2Fb%41", b"2"),
    ]
    user = run(authn.authenticate(headers, _proxy_tls(pki))).user
    assert user.extra_dict == {"foo%zz%2fbar": ["1"], "a/bA": ["2"]}


# ------------------------------------------------------------------------------ bearer tokens


@pytest.mark.parametrize(
    "header,token",
    [
        (b"Bearer tok", "tok"),
        (b"bearer tok", "tok"),
        (b"BEARER tok", "tok"),
        (b"  Bearer tok  ", "tok"),
        (b"Bearer tok extra", "tok"),  # SplitN(auth, " ", 3): parts[1]
        (
            b"Bearer  tok",
            None,
        ),  # empty parts[1]: no opinion (kube warns "the provided Authorization header contains extra space")
        (b"Bearer\ttok", None),  # split on " " only
        (b"Bearer", None),
        (b"Bearer ", None),
        (b"Basic dXNlcjpwYXNz", None),
        ("Bearer tök".encode(), "tök"),
    ],
)
def test_bearer_header_is_parsed_like_kube(header, token):
    tokens = RecordingTokens()
    result = run(Authenticator(None, [tokens]).authenticate([(b"authorization", header)], None))
    assert tokens.seen == ([token] if token else [])
    assert result.user.name == ("token-user" if token else ANONYMOUS.name)


def test_authorization_header_is_removed_after_any_successful_authentication(tmp_path):
    """WithAuthentication deletes Authorization once a request is authenticated, whichever
    authenticator succeeded (client certificate, anonymous), not only when a token was used."""
    authn, pki = _authn(tmp_path, tokens=[RecordingTokens()])
    mw = AuthMiddleware(None, authn, AlwaysAllowAuthorizer())
    cert = {"client_cert_der": _leaf_der(pki, "client", [(NameOID.COMMON_NAME, "jane")])}
    status, _, seen = _call(mw, METRIC, [(b"authorization", b"Bearer x"), (b"accept", b"*/*")], cert)
    assert status == 204 and seen["user"]["name"] == "jane"
    assert seen["headers"] == [(b"accept", b"*/*")]
    status, _, seen = _call(mw, METRIC, [(b"Authorization", b"Basic dXNlcjpwYXNz")])
    assert status == 204 and seen["user"]["name"] == "system:anonymous"
    assert seen["headers"] == []


# ------------------------------------------------------------------------------ malformed review answers


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "authenticated"},
        {"status": {"authenticated": True, "user": "alice"}},
        {"status": {"authenticated": True, "user": {"username": "alice", "extra": ["x"]}}},
        {"status": {"authenticated": True, "user": {"username": "alice", "groups": "system:masters"}}},
        {"status": {"authenticated": "false", "user": {"username": "mallory"}}},
    ],
)
def test_malformed_token_review_answer_is_an_error_never_a_user(answer):
    """Go's decoder refuses these (an error -> 401); here they raised AttributeError (500), or a
    string "false" counted as authenticated, or a string of groups became one group per letter."""
    api = FakeAPI(token_review=answer)
    authn = Authenticator(None, [TokenReviewAuthenticator(api)])
    result = run(authn.authenticate([(b"authorization", b"Bearer t")], None))
    assert result.user is None and "token review" in result.error
    run(authn.authenticate([(b"authorization", b"Bearer t")], None))
    assert len(api.token_reviews) == 2  # an error is not cached


@pytest.mark.parametrize(
    "answer,message",
    [
        ({"status": {"allowed": "false"}}, "allowed"),
        ({"status": "allowed"}, "status"),
        ({"status": {"allowed": True, "denied": True}}, "both allow and deny"),
    ],
)
def test_malformed_or_contradictory_sar_answer_is_an_error(answer, message):
    """A non-boolean "allowed" was truthy (allowed); a non-object status raised AttributeError; both
    allowed and denied is webhook.go's error (-> 500 InternalError), not a plain 403."""
    api = FakeAPI(sar=answer)
    authz = DelegatingAuthorizer(api)
    user = UserInfo.make("u", ["system:authenticated"])
    with pytest.raises(AuthorizationError, match=message):
        run(authz.authorize(user, request_attributes("GET", METRIC)))


# ------------------------------------------------------------------------------ caches


def test_cancelled_first_caller_does_not_fail_the_coalesced_ones():
    """Coalescer: the computation belonged to the first caller's task, so cancelling that request
    (client gone, shutdown) raised CancelledError in every request waiting on the same review."""

    async def scenario() -> Any:
        coalescer: Coalescer[int] = Coalescer()
        gate = asyncio.Event()
        started = asyncio.Event()

        async def compute() -> int:
            started.set()
            await gate.wait()
            return 42

        first = asyncio.ensure_future(coalescer.run("k", compute))
        await started.wait()
        second = asyncio.ensure_future(coalescer.run("k", compute))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        gate.set()
        return await second, first.cancelled()

    assert run(scenario()) == (42, True)


def test_cancelled_first_sar_waiter_does_not_fail_others():
    class SlowAPI(FakeAPI):
        def __init__(self) -> None:
            super().__init__()
            self.entered = threading.Event()
            self.release = threading.Event()

        def create_subject_access_review(self, body):
            self.entered.set()
            self.release.wait(30)
            return {"status": {"allowed": True}}

    api = SlowAPI()
    authz = DelegatingAuthorizer(api)
    user = UserInfo.make("hpa", ["system:authenticated"])
    attrs = request_attributes("GET", METRIC)

    async def scenario() -> Any:
        first = asyncio.ensure_future(authz.authorize(user, attrs))
        await asyncio.to_thread(api.entered.wait, 30)
        second = asyncio.ensure_future(authz.authorize(user, attrs))
        await asyncio.sleep(0)
        first.cancel()
        api.release.set()
        return (await second).allowed

    assert run(scenario()) is True
    assert authz.reviews == 1


def _retained_bytes(action: Any) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_failed_certificates_do_not_pin_their_bytes_in_the_cache(tmp_path):
    """The verification cache was keyed by the whole DER: any client (no trust needed, the
    handshake accepts every certificate) could park 4096 certificates of ~100 KB each."""
    authn, pki = _authn(tmp_path)
    padding = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.2.3.9"), b"\x04\x82\x50\x00" + b"A" * 0x5000)
    template = _leaf_der(pki, "evil", [(NameOID.COMMON_NAME, "x")], [padding])
    marker = template.index(b"A" * 64)
    count = 60

    def flood() -> None:
        for i in range(count):
            der = template[:marker] + i.to_bytes(4, "big") + template[marker + 4 :]
            result = run(authn.authenticate([], {"client_cert_der": der}))
            assert result.user is None

    retained = _retained_bytes(flood)
    assert retained < count * len(template) // 4, retained  # was > count * len(template)


def test_long_anonymous_urls_do_not_pin_their_bytes_in_caches():
    """Every distinct URL of an anonymous request stayed in the attributes memo and (inside the
    cached key) in the SubjectAccessReview cache: 12 000 entries of up to 64 KB heads."""
    api = FakeAPI(sar={"status": {"allowed": False}}, record=False)
    authz = DelegatingAuthorizer(api)
    count, size = 60, 20_000

    def flood() -> None:
        for i in range(count):
            path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/default/m{i}" + "x" * size
            query = f"labelSelector=k%3D{'v' * size}".encode()
            attrs = request_attributes("GET", path, query)
            assert not run(authz.authorize(ANONYMOUS, attrs)).allowed

    retained = _retained_bytes(flood)
    assert retained < count * size // 2, retained  # was > 2 * count * size
    assert authz.reviews == count
    # The decisions are still cached (by digest): the same long request asks no second review.
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/m0" + "x" * size
    query = f"labelSelector=k%3D{'v' * size}".encode()
    assert not run(authz.authorize(ANONYMOUS, request_attributes("GET", path, query))).allowed
    assert authz.reviews == count


# ------------------------------------------------------------------------------ request attributes


def test_sar_label_selector_is_the_one_the_api_serves():
    """The SAR's selector came from a second, regex-based parser. Go's lexer (and adapter.labels)
    stops at a NUL byte, so the API serves `a=b`, while the review asked about `a in (b\\x00x)`."""
    attrs = request_attributes("GET", METRIC, b"labelSelector=a%3Db%00x")
    served = parse_selector("a=b\x00x")
    assert [(r.key, r.values) for r in served.requirements] == [("a", ("b",))]
    assert attrs.label_requirements == (("a", "In", ("b",)),)


def test_empty_watch_parameter_is_a_watch():
    """runtime.Convert_Slice_string_To_bool: only "0" and "false" are false, so `?watch=` (and a
    bare `?watch`) is a watch, which is also how the API itself reads it (405)."""
    assert request_attributes("GET", METRIC, b"watch=").verb == "watch"
    assert request_attributes("GET", METRIC, b"watch").verb == "watch"
    assert request_attributes("GET", METRIC, b"watch=FALSE").verb == "list"
    assert request_attributes("GET", METRIC, b"watch=0").verb == "list"


def test_empty_path_segments_are_kept_like_split_path():
    """splitPath trims the slashes at both ends and keeps empty segments in between: an empty
    namespace is the cluster scope, not a shift of every later segment."""
    a = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces//m")
    assert (a.resource_request, a.verb, a.namespace, a.resource, a.name) == (True, "list", "", "m", "")
    b = request_attributes("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/m/")
    assert (b.verb, b.namespace, b.resource, b.name) == ("list", "ns", "m", "")


# ------------------------------------------------------------------------------ response texts


def test_forbidden_message_quotes_like_go():
    """%q escapes control characters as Go does (\\x1b, \\x7f), not as JSON (\\u001b, raw DEL)."""
    user = UserInfo.make("bob\x7f")
    attrs = request_attributes("GET", "/version\x1b")
    assert forbidden_message(user, attrs, "") == 'forbidden: User "bob\\x7f" cannot get path "/version\\x1b"'
    # NewForbidden with an empty GroupResource (group-less path, empty resource segment): "forbidden: ".
    empty = request_attributes("GET", "/api/v1/namespaces/ns//x")
    assert (empty.resource_request, empty.resource, empty.name) == (True, "", "x")
    assert forbidden_message(UserInfo.make("bob"), empty, "") == (
        'forbidden: User "bob" cannot get resource "" in API group "" in the namespace "ns"'
    )


def test_internal_error_text_is_sanitized_like_kube():
    """responsewriters.InternalError HTML-escapes &, < and > in the whole text."""
    text = internal_error_text("/x?a=1&b=<2>", "boom & <bang>")
    assert text == b'Internal Server Error: "/x?a=1&amp;b=&lt;2&gt;": boom &amp; &lt;bang&gt;\n'
