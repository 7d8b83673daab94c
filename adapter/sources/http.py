"""Safe async HTTP GET shared by the `api`, `prometheus` and `forecast` sources (rules in docs/failure-rules.md).

What "safe" means here:
- one overall deadline per request (a server that drips one byte a second cannot hold a fetch open);
- a response-size limit enforced while streaming, on the bytes received *and* on the bytes each
  content-coding layer produces (counted as they are produced), so neither a 100 MB body nor a
  2 KB `gzip, gzip` bomb that inflates to 1 GiB is ever held in memory; codings other than gzip and
  deflate are refused;
- one connection pool per event loop and TLS setting, shared by every source, with a bound on the
  requests in flight, so a thousand sources do not open a thousand pools;
- TLS verified by default, with an optional CA (inline PEM `caBundle` and/or `caFile`) or an explicit
  `insecureSkipVerify`;
- link-local (169.254.0.0/16, fe80::/10) and cloud metadata addresses are refused *after* DNS
  resolution, at connect time, unless explicitly allowed, also when written in IPv6 forms that
  embed them (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::/96 NAT64, 2002::/16 6to4); a URL whose host is
  a numeric IPv4 form other than dotted decimal (octal 0251.0376.0251.0376, hex, one integer) is
  refused at load. The check runs inside the connection
  backend and we connect to the very address we checked, so DNS rebinding cannot slip past it.
  Loopback and private ranges stay allowed: in-cluster services live there.
- error messages name the URL without query string or credentials, never header values.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import weakref
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import aiohttp.abc
import yarl

from adapter.errors import SourceError, ValidationError
from adapter.fields import expect_mapping, read_bool, read_number, read_string, reject_unknown
from adapter.sources.base import SourceContext
from adapter.sources.work import off_loop

T = TypeVar("T")

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
MAX_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
MAX_HEADERS = 32

METADATA_HOSTNAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle
        "fd00:ec2::254",  # AWS IMDS over IPv6 (a ULA address, so not caught by the link-local rule)
        "100.100.100.200",  # Alibaba Cloud (CGNAT range)
        "169.254.170.2",  # AWS ECS task metadata
    )
)
_LINK_LOCAL_V4 = ipaddress.ip_network("169.254.0.0/16")
_LINK_LOCAL_V6 = ipaddress.ip_network("fe80::/10")
# IPv6 prefixes whose last 32 bits are an IPv4 address the packet ends up at: the deprecated
# IPv4-compatible form (::a.b.c.d) and NAT64 (RFC 6052 well-known prefix, RFC 8215 local-use prefix).
_EMBEDS_V4_LOW32 = (
    ipaddress.ip_network("::/96"),
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
)
# A host made only of digits, dots and hex digits after 0x: some IPv4 number that is not dotted
# decimal (getaddrinfo reads "0251.0376.0251.0376" as octal, "2852039166" as one integer).
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$", re.IGNORECASE)

# A body up to this size is parsed on the event loop (tens of microseconds); larger ones in the worker.
SMALL_BODY_BYTES = 4096
# How many requests all sources of one event loop may have in flight; more wait their turn.
MAX_CONCURRENT_REQUESTS = 64
# Content codings we decode; we ask for nothing else (Accept-Encoding) and refuse anything else.
_CODINGS = ("gzip", "x-gzip", "deflate")
MAX_CODING_LAYERS = 2
_PIECE = 64 * 1024  # decoded bytes produced per step, so memory stays bounded while inflating

# RFC 7230 token: what a header name may contain.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}\Z")
# Headers the client sets itself; letting users override them would break framing or routing.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SecretKeyRef:
    namespace: str
    name: str
    key: str

    def describe(self) -> str:
        return f"secret {self.namespace}/{self.name} key {self.key!r}"


@dataclass(frozen=True)
class HeaderSpec:
    name: str
    value: str | None = None
    secret: SecretKeyRef | None = None


@dataclass(frozen=True)
class TlsConfig:
    ca_bundle: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class HttpOptions:
    """The options every HTTP-based source block shares (api, prometheus, forecast history)."""

    url: str
    headers: tuple[HeaderSpec, ...] = ()
    tls: TlsConfig = field(default_factory=TlsConfig)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    allow_link_local: bool = False


HTTP_OPTION_FIELDS = ("url", "headers", "tls", "maxResponseBytes", "allowLinkLocal")


def parse_http_options(block: Mapping[str, Any], path: str) -> HttpOptions:
    """Read the shared HTTP fields of `block` (unknown-field checking is the caller's job)."""
    url = read_string(block, "url", path, required=True) or ""
    check_url(url, f"{path}.url")
    max_bytes = read_number(block, "maxResponseBytes", path, default=DEFAULT_MAX_RESPONSE_BYTES)
    assert max_bytes is not None
    if max_bytes != int(max_bytes) or not 1024 <= max_bytes <= MAX_MAX_RESPONSE_BYTES:
        raise ValidationError(
            f"{path}.maxResponseBytes", f"must be an integer between 1024 and {MAX_MAX_RESPONSE_BYTES}"
        )
    return HttpOptions(
        url=url,
        headers=parse_headers(block.get("headers"), f"{path}.headers"),
        tls=parse_tls(block.get("tls"), f"{path}.tls"),
        max_response_bytes=int(max_bytes),
        allow_link_local=read_bool(block, "allowLinkLocal", path),
    )


def check_url(url: str, path: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ValidationError(path, f"invalid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValidationError(path, f"URL scheme must be http or https, got {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise ValidationError(path, "URL has no host")
    if parts.username is not None or parts.password is not None:
        # Credentials in URLs end up in logs; there are headers and secrets for that.
        raise ValidationError(path, "credentials in the URL are not allowed; use headers or auth")
    if any(ch.isspace() for ch in url):
        raise ValidationError(path, "URL contains whitespace")
    host = parts.hostname
    if _NUMERIC_HOST.match(host) and not _is_dotted_decimal(host):
        # Resolvers disagree on these (octal, hex, one integer); they mostly hide a metadata address.
        raise ValidationError(
            path,
            f"host {host!r} is a numeric IPv4 form other than dotted decimal "
            "(a.b.c.d); write the address in dotted decimal",
        )
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise ValidationError(path, "URL contains a control character")
    try:
        yarl.URL(url)  # what the client will parse it with
    except (ValueError, TypeError) as exc:
        raise ValidationError(path, f"invalid URL: {exc}") from None


def _is_dotted_decimal(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def parse_secret_key_ref(raw: Any, path: str) -> SecretKeyRef:
    ref = expect_mapping(raw, path)
    reject_unknown(ref, ("namespace", "name", "key"), path)
    return SecretKeyRef(
        namespace=read_string(ref, "namespace", path, required=True, max_length=63) or "",
        name=read_string(ref, "name", path, required=True, max_length=253) or "",
        key=read_string(ref, "key", path, required=True, max_length=253) or "",
    )


def parse_headers(raw: Any, path: str) -> tuple[HeaderSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValidationError(path, "expected a list of {name, value} or {name, valueFrom}")
    if len(raw) > MAX_HEADERS:
        raise ValidationError(path, f"more than {MAX_HEADERS} headers")
    headers = []
    for index, item in enumerate(raw):
        where = f"{path}[{index}]"
        entry = expect_mapping(item, where)
        reject_unknown(entry, ("name", "value", "valueFrom"), where)
        name = read_string(entry, "name", where, required=True) or ""
        if not _HEADER_NAME.match(name):
            raise ValidationError(f"{where}.name", f"{name[:40]!r} is not a valid HTTP header name")
        if name.lower() in _RESERVED_HEADERS:
            raise ValidationError(f"{where}.name", f"header {name!r} is set by the client and cannot be overridden")
        has_value, has_from = "value" in entry, "valueFrom" in entry
        if has_value == has_from:
            raise ValidationError(where, "exactly one of value or valueFrom is required")
        if has_value:
            value = read_string(entry, "value", where, required=False, max_length=8192)
            if value is None or not _header_value_ok(value):
                raise ValidationError(f"{where}.value", "expected a string without line breaks")
            headers.append(HeaderSpec(name=name, value=value))
        else:
            value_from = expect_mapping(entry["valueFrom"], f"{where}.valueFrom")
            reject_unknown(value_from, ("secretKeyRef",), f"{where}.valueFrom")
            if "secretKeyRef" not in value_from:
                raise ValidationError(f"{where}.valueFrom.secretKeyRef", "required")
            secret = parse_secret_key_ref(value_from["secretKeyRef"], f"{where}.valueFrom.secretKeyRef")
            headers.append(HeaderSpec(name=name, secret=secret))
    return tuple(headers)


def parse_tls(raw: Any, path: str) -> TlsConfig:
    if raw is None:
        return TlsConfig()
    tls = expect_mapping(raw, path)
    reject_unknown(tls, ("caBundle", "caFile", "insecureSkipVerify"), path)
    ca_bundle = read_string(tls, "caBundle", path, max_length=1024 * 1024)
    if ca_bundle is not None and "-----BEGIN CERTIFICATE-----" not in ca_bundle:
        raise ValidationError(f"{path}.caBundle", "expected PEM text with at least one BEGIN CERTIFICATE block")
    if ca_bundle is not None:
        try:
            ssl.create_default_context(cadata=ca_bundle)
        except (ssl.SSLError, ValueError) as exc:
            raise ValidationError(f"{path}.caBundle", f"not a usable PEM CA bundle: {exc}") from None
    ca_file = read_string(tls, "caFile", path)
    insecure = read_bool(tls, "insecureSkipVerify", path)
    if insecure and (ca_bundle or ca_file):
        raise ValidationError(f"{path}.insecureSkipVerify", "cannot be combined with caBundle or caFile")
    return TlsConfig(ca_bundle=ca_bundle, ca_file=ca_file, insecure_skip_verify=insecure)


def _header_value_ok(value: str) -> bool:
    return "\r" not in value and "\n" not in value and "\0" not in value


# ---------------------------------------------------------------- helpers for messages and headers


def safe_url(url: str) -> str:
    """The URL as shown in messages: no credentials, no query string (it may carry tokens)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "<invalid URL>"


def resolve_headers(specs: Iterable[HeaderSpec], context: SourceContext) -> dict[str, str]:
    """Header values, secrets read now (so a rotated Secret is picked up on the next fetch)."""
    out: dict[str, str] = {}
    for spec in specs:
        if spec.secret is None:
            out[spec.name] = spec.value or ""
            continue
        # Secrets written with `echo` end in a newline; strip it before checking for line breaks.
        value = read_secret(spec.secret, context, f"header {spec.name!r}").strip()
        if not _header_value_ok(value):
            raise SourceError(f"header {spec.name!r}: {spec.secret.describe()} contains a line break")
        out[spec.name] = value
    return out


def read_secret(ref: SecretKeyRef, context: SourceContext, what: str) -> str:
    try:
        value = context.secrets(ref.namespace, ref.name, ref.key)
    except Exception as exc:  # noqa: BLE001 - any resolver failure becomes a status message
        # The resolver's message names the secret, never its content.
        raise SourceError(f"{what}: cannot read {ref.describe()}: {_short(str(exc))}") from None
    if not isinstance(value, str):
        raise SourceError(f"{what}: {ref.describe()} is not text")
    return value


def read_text_file(path: str, what: str, limit: int = 64 * 1024) -> str:
    """A small credential file (token, password), read at fetch time so rotation is picked up."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SourceError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SourceError(f"{what}: {path} is larger than {limit} bytes")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SourceError(f"{what}: {path} is not UTF-8 text") from None


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- address policy


class AddressRefused(Exception):
    """A connection to a forbidden address was refused before any byte was sent."""


def forbidden_reason(address: str) -> str | None:
    """Why connecting to `address` (an IP literal) is refused by default, or None if it is fine."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            reason = forbidden_reason(str(embedded))
            if reason:
                return f"{reason} ({embedded}) in IPv6 form"
    if ip in _LINK_LOCAL_V4 or ip in _LINK_LOCAL_V6:
        return "a link-local address"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:169.254.169.254 is the same host
    if ip.sixtofour is not None:
        return ip.sixtofour
    if int(ip) > 1 and any(ip in net for net in _EMBEDS_V4_LOW32):  # not :: or ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


Resolver = Callable[[str, int], Awaitable[list[str]]]


class ResolveFailed(OSError):
    """A host name that resolves to nothing (an OSError, as aiohttp expects of its resolvers)."""


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ResolveFailed(f"cannot resolve host {host!r}: {exc.strerror}") from None
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        if sockaddr[0] not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


def _check_host(host: str, allow_link_local: bool) -> None:
    """Refuse a metadata host name or a forbidden IP literal before anything is resolved or sent
    (aiohttp connects to an IP literal without asking the resolver)."""
    if allow_link_local:
        return
    bare = host.strip("[]")
    if bare.lower().rstrip(".") in METADATA_HOSTNAMES:
        raise AddressRefused(f"host {bare} is a cloud metadata service")
    reason = forbidden_reason(bare)
    if reason:
        raise AddressRefused(f"host {bare} resolves to {bare}, {reason}")


class _GuardedResolver(aiohttp.abc.AbstractResolver):
    """Resolves the host itself and checks every address; aiohttp then connects to exactly the
    addresses returned here, so a second lookup (DNS rebinding) cannot change where it goes."""

    def __init__(self, allow_link_local: bool, resolver: Resolver):
        self._allow = allow_link_local
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        # The name itself (a metadata host name) was checked by HttpClient.get before the request.
        addresses = await self._resolver(host, port)
        if not addresses:
            raise ResolveFailed(f"host {host!r} resolved to no address")
        if not self._allow:
            for address in addresses:
                reason = forbidden_reason(address)
                if reason:
                    # Refuse when *any* address is forbidden: a name mixing them is suspicious.
                    raise AddressRefused(f"host {host} resolves to {address}, {reason}")
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in addresses
        ]

    async def close(self) -> None:
        pass


def _new_session(key: _PoolKey) -> aiohttp.ClientSession:
    """One pool of kept-alive connections for every source of a loop with these TLS settings."""
    connector = aiohttp.TCPConnector(
        ssl=make_ssl_context(key.tls),
        limit=MAX_CONCURRENT_REQUESTS,
        keepalive_timeout=30.0,
        resolver=_GuardedResolver(key.allow_link_local, key.resolver),
        use_dns_cache=False,  # every new connection resolves and checks again
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),  # sources share the pool: no cookie goes from one to another
        auto_decompress=False,  # BoundedDecoder inflates, counting as it goes
        trust_env=False,  # no proxy or .netrc from the environment
        timeout=aiohttp.ClientTimeout(total=None),  # HttpClient.get keeps the one overall deadline
    )


@dataclass(frozen=True)
class _PoolKey:
    tls: TlsConfig
    allow_link_local: bool
    resolver: Resolver


class _LoopPools:
    """The shared sessions of one event loop (aiohttp sessions belong to the loop that made them)."""

    def __init__(self) -> None:
        self.clients: dict[_PoolKey, tuple[aiohttp.ClientSession, int]] = {}
        self.gate = asyncio.Semaphore(MAX_CONCURRENT_REQUESTS)

    def acquire(self, key: _PoolKey) -> aiohttp.ClientSession:
        client, users = self.clients.get(key, (None, 0))
        if client is None:
            client = _new_session(key)
        self.clients[key] = (client, users + 1)
        return client

    async def release(self, key: _PoolKey) -> None:
        client, users = self.clients[key]
        if users > 1:
            self.clients[key] = (client, users - 1)
            return
        del self.clients[key]
        await client.close()


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPools] = weakref.WeakKeyDictionary()


def _loop_pools() -> _LoopPools:
    loop = asyncio.get_running_loop()
    pools = _POOLS.get(loop)
    if pools is None:
        pools = _POOLS[loop] = _LoopPools()
    return pools


def shared_pool_count() -> int:
    """Connection pools open on the running loop (for tests and the bench)."""
    return len(_loop_pools().clients)


def make_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    if tls.insecure_skip_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if tls.ca_bundle is None and tls.ca_file is None:
        return ssl.create_default_context()
    # A configured CA replaces the system store, as Kubernetes' caBundle fields do.
    try:
        return ssl.create_default_context(cafile=tls.ca_file, cadata=tls.ca_bundle)
    except FileNotFoundError:
        raise SourceError(f"TLS: caFile {tls.ca_file} not found") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise SourceError(f"TLS: cannot load CA: {_short(str(exc))}") from None


# ---------------------------------------------------------------- the client


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str
    url: str  # safe form, for messages

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def check_ok(self) -> None:
        """Raise SourceError for a non-2xx status, with a short excerpt of the body."""
        if not 200 <= self.status < 300:
            raise SourceError(f"HTTP {self.status} from {self.url}{_body_excerpt(self.body)}")


def _body_excerpt(body: bytes) -> str:
    text = _short(body[:400].decode("utf-8", errors="replace"), 200)
    return f": {text}" if text else ""


class HttpClient:
    """A source's handle on the shared connection pool. Create and use inside the event loop."""

    def __init__(
        self, tls: TlsConfig = TlsConfig(), allow_link_local: bool = False, resolver: Resolver = system_resolver
    ):
        self._key = _PoolKey(tls, allow_link_local, resolver)
        self._pools: _LoopPools | None = None
        self._client: aiohttp.ClientSession | None = None

    def _ensure(self) -> tuple[_LoopPools, aiohttp.ClientSession]:
        if self._client is None or self._pools is None:
            self._pools = _loop_pools()
            self._client = self._pools.acquire(self._key)
        return self._pools, self._client

    async def get(
        self,
        url: str,
        *,
        timeout: float,
        max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """GET `url`; the response body is read up to `max_bytes`. Any failure is a SourceError."""
        shown = safe_url(url)
        try:
            pools, client = self._ensure()
            async with pools.gate, asyncio.timeout(timeout):
                _check_host(urlsplit(url).hostname or "", self._key.allow_link_local)
                return await self._get(client, url, shown, max_bytes, headers, params)
        except TimeoutError:
            raise SourceError(f"GET {shown}: timed out after {timeout:g}s") from None
        except AddressRefused as exc:
            raise SourceError(f"GET {shown}: refused: {exc} (set allowLinkLocal: true to allow it)") from None
        except aiohttp.ClientError as exc:
            raise SourceError(f"GET {shown}: {_describe_client_error(exc)}") from None
        except ValueError as exc:  # yarl's and aiohttp's word for a URL or header they cannot send
            raise SourceError(f"GET {shown}: invalid request: {_short(str(exc))}") from None
        except ssl.SSLError as exc:
            raise SourceError(f"GET {shown}: TLS error: {_short(str(exc))}") from None
        except OSError as exc:
            raise SourceError(f"GET {shown}: {exc.strerror or exc}") from None

    async def _get(
        self,
        client: aiohttp.ClientSession,
        url: str,
        shown: str,
        max_bytes: int,
        headers: Mapping[str, str] | None,
        params: Mapping[str, str] | None,
    ) -> HttpResponse:
        request_headers = {"Accept": "application/json, text/csv;q=0.9, */*;q=0.5", "Accept-Encoding": "gzip, deflate"}
        request_headers.update(headers or {})
        async with client.get(url, headers=request_headers, params=params, allow_redirects=False) as response:
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise SourceError(f"GET {shown}: response larger than {max_bytes} bytes (Content-Length {declared})")
            codings = [c for value in response.headers.getall("content-encoding", ()) for c in value.split(",")]
            decoder = BoundedDecoder(codings, max_bytes, f"GET {shown}")
            chunks: list[bytes] = []
            # Raw (still encoded) bytes as they arrive (auto_decompress is off).
            async for raw in response.content.iter_any():
                for piece in decoder.feed(raw):
                    chunks.append(piece)
                    await asyncio.sleep(0)  # inflating is CPU work: let the loop serve in between
            decoder.finish()
            return HttpResponse(
                status=response.status,
                body=b"".join(chunks),
                content_type=response.headers.get("content-type", ""),
                url=shown,
            )

    async def aclose(self) -> None:
        if self._client is not None and self._pools is not None:
            pools, self._pools, self._client = self._pools, None, None
            await pools.release(self._key)


class _Inflater:
    """One content-coding layer, inflated at most `_PIECE` bytes at a time."""

    def __init__(self, coding: str):
        self._raw_fallback = coding == "deflate"  # "deflate" is zlib-wrapped, but some servers send raw
        self._obj = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding != "deflate" else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            if self._obj.eof:
                return  # bytes after the end of the stream are ignored, as HTTP clients do
            try:
                out = self._obj.decompress(data, _PIECE)
            except zlib.error:
                if not self._raw_fallback:
                    raise
                self._raw_fallback = False
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._raw_fallback = False
            data = self._obj.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < _PIECE:
                return

    @property
    def complete(self) -> bool:
        return self._obj.eof


class BoundedDecoder:
    """Undoes `Content-Encoding` while counting: the wire bytes and the output of every layer are
    each limited to `max_bytes`, checked as the bytes are produced (a bomb stops at the limit)."""

    def __init__(self, codings: list[str], max_bytes: int, what: str):
        names = [c.strip().lower() for c in codings if c.strip() and c.strip().lower() != "identity"]
        for name in names:
            if name not in _CODINGS:
                raise SourceError(f"{what}: unsupported Content-Encoding {name[:40]!r} (gzip and deflate are accepted)")
        if len(names) > MAX_CODING_LAYERS:
            raise SourceError(
                f"{what}: {len(names)} stacked content codings ({', '.join(names)}); at most "
                f"{MAX_CODING_LAYERS} are accepted"
            )
        # Listed in the order they were applied: undo the last one first.
        self._layers = [_Inflater(name) for name in reversed(names)]
        self._produced = [0] * (len(self._layers) + 1)  # [0] counts wire bytes
        self._max = max_bytes
        self._what = what

    def _count(self, index: int, size: int) -> None:
        self._produced[index] += size
        if self._produced[index] > self._max:
            stage = "on the wire" if index == 0 else "after decompression"
            raise SourceError(f"{self._what}: response larger than {self._max} bytes {stage}")

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._count(0, len(data))
        try:
            yield from self._run(0, data)
        except zlib.error as exc:
            raise SourceError(f"{self._what}: cannot decode the compressed response: {exc}") from None

    def _run(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            if data:
                yield data
            return
        for piece in self._layers[index].feed(data):
            self._count(index + 1, len(piece))
            yield from self._run(index + 1, piece)

    def finish(self) -> None:
        if self._produced[0] and not all(layer.complete for layer in self._layers):
            raise SourceError(f"{self._what}: the compressed response is truncated")


async def get_document(
    client: HttpClient,
    options: HttpOptions,
    context: SourceContext,
    *,
    timeout: float,
    parse: Callable[[HttpResponse], T],
    url: str | None = None,
    params: Mapping[str, str] | None = None,
    extra_headers: Mapping[str, str] | None = None,
) -> T:
    """The one way sources load a document over HTTP: GET with the block's options and limits, then
    `parse(response)` in a worker thread, so decoding a large body never blocks the event loop (a
    body of at most SMALL_BODY_BYTES is parsed on the loop: faster than the hand-off to the thread)."""
    headers = resolve_headers(options.headers, context)
    headers.update(extra_headers or {})
    response = await client.get(
        url or options.url, timeout=timeout, max_bytes=options.max_response_bytes, headers=headers, params=params
    )
    if len(response.body) <= SMALL_BODY_BYTES:
        return parse(response)
    return await off_loop(parse, response)


def _describe_client_error(exc: aiohttp.ClientError) -> str:
    cause: BaseException | None = exc
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # itself an ssl.CertificateError
        cause = exc.certificate_error
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS verification failed: {_short(cause.verify_message or str(cause))}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS error: {_short(str(cause))}"
        cause = getattr(cause, "os_error", None) or cause.__cause__ or cause.__context__
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot connect: {_short(str(exc.os_error))}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {_short(exc.os_error.strerror or str(exc.os_error)) or 'connection failed'}"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"invalid URL: {_short(str(exc))}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return f"protocol error: {_short(str(exc)) or type(exc).__name__}"
    return f"{type(exc).__name__}: {_short(str(exc))}" if str(exc) else type(exc).__name__
