"""Command-line flags (Kubernetes names) and assembly of the authenticator and authorizer.

Modes:
- **In a cluster** (kubeconfig flag or in-cluster service account): client CA and front-proxy settings
  from flags or the ``extension-apiserver-authentication`` ConfigMap, TokenReview, SubjectAccessReview.
- **Local, with --token-auth-file / --client-ca-file / --requestheader-client-ca-file but no cluster**:
  those authenticators; authorization allows authenticated users and always-allowed paths, anonymous
  requests get 403 (so configuring a credential actually protects the API).
- **Local, nothing configured**: anonymous access, AlwaysAllow, and a warning.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from adapter.auth.attributes import RequestAttributes
from adapter.auth.authn import Authenticator, TokenAuthenticator
from adapter.auth.authz import (
    DEFAULT_ALWAYS_ALLOW_PATHS,
    AlwaysAllowAuthorizer,
    Authorizer,
    Decision,
    DelegatingAuthorizer,
    PathMatcher,
)
from adapter.auth.config import AuthFlags, DynamicAuthnConfig
from adapter.auth.kubeapi import KubeAPIError, KubeAuthAPI, KubernetesAuthAPI
from adapter.auth.tokens import StaticTokenAuthenticator, TokenReviewAuthenticator
from adapter.auth.user import AUTHENTICATED_GROUP, UserInfo

log = logging.getLogger(__name__)

_IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class AuthConfigError(ValueError):
    """Authentication/authorization cannot be set up as configured (clear message for the CLI)."""


def _go_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true", "yes"):
        return True
    if lowered in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


class _CommaList(argparse.Action):
    """pflag StringSlice: comma-separated and repeatable; the first use replaces the default."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        seen = getattr(namespace, f"_{self.dest}_set", False)
        current = list(getattr(namespace, self.dest) or []) if seen else []
        current.extend(v.strip() for v in str(values).split(",") if v.strip())
        setattr(namespace, self.dest, current)
        setattr(namespace, f"_{self.dest}_set", True)


def add_auth_flags(parser: argparse.ArgumentParser, include_kubeconfig: bool = True) -> None:
    """Delegated authentication/authorization flags.  Pass ``include_kubeconfig=False`` when the CLI
    already defines ``--kubeconfig`` (build_auth reads ``args.kubeconfig`` either way)."""
    authn = parser.add_argument_group("delegated authentication")
    authn.add_argument(
        "--authentication-kubeconfig", default=None, help="kubeconfig for TokenReview and the authentication ConfigMap"
    )
    if include_kubeconfig:
        authn.add_argument(
            "--kubeconfig",
            default=None,
            help="kubeconfig used when the authentication/authorization ones are not given",
        )
    authn.add_argument(
        "--client-ca-file", default=None, help="CA bundle for direct client certificates (user = CN, groups = O)"
    )
    authn.add_argument(
        "--requestheader-client-ca-file",
        default=None,
        help="CA bundle for the front-proxy (kube-aggregator) client certificate",
    )
    authn.add_argument(
        "--requestheader-allowed-names",
        action=_CommaList,
        default=[],
        help="allowed front-proxy certificate CNs (comma-separated; empty = any)",
    )
    authn.add_argument(
        "--requestheader-username-headers",
        action=_CommaList,
        default=[],
        help="user name headers (default X-Remote-User)",
    )
    authn.add_argument(
        "--requestheader-group-headers", action=_CommaList, default=[], help="group headers (default X-Remote-Group)"
    )
    authn.add_argument(
        "--requestheader-extra-headers-prefix",
        action=_CommaList,
        default=[],
        help="extra header prefixes (default X-Remote-Extra-)",
    )
    authn.add_argument("--requestheader-uid-headers", action=_CommaList, default=[], help="uid headers (default none)")
    authn.add_argument(
        "--authentication-tolerate-lookup-failure",
        type=_go_bool,
        nargs="?",
        const=True,
        default=False,
        help="start even if the authentication ConfigMap cannot be read",
    )
    authn.add_argument(
        "--authentication-skip-lookup",
        type=_go_bool,
        nargs="?",
        const=True,
        default=False,
        help="do not read the authentication ConfigMap",
    )
    authn.add_argument(
        "--token-auth-file",
        default=None,
        help='static tokens, CSV token,user,uid,"group1,group2" (works without a cluster)',
    )
    authz = parser.add_argument_group("delegated authorization")
    authz.add_argument("--authorization-kubeconfig", default=None, help="kubeconfig for SubjectAccessReview")
    authz.add_argument(
        "--authorization-always-allow-paths",
        action=_CommaList,
        default=list(DEFAULT_ALWAYS_ALLOW_PATHS),
        help="paths allowed without authorization (comma-separated; '*' suffix = prefix)",
    )


class AuthenticatedOnlyAuthorizer:
    """Local authorizer when credentials are configured but no cluster exists: authenticated users may
    do anything; anonymous users only reach the always-allowed paths."""

    def __init__(self, always_allow_paths: list[str]) -> None:
        self.paths = PathMatcher(always_allow_paths)

    async def authorize(self, user: UserInfo, attrs: RequestAttributes) -> Decision:
        if AUTHENTICATED_GROUP in user.groups:
            return Decision(True, "authenticated")
        if not attrs.resource_request and self.paths.matches(attrs.path):
            return Decision(True, "always allowed path")
        return Decision(False, "")


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(_IN_CLUSTER_TOKEN)


def _api_for(path: str | None) -> KubeAuthAPI | None:
    if path:
        return KubernetesAuthAPI.from_kubeconfig(path)
    if _in_cluster():
        return KubernetesAuthAPI.from_kubeconfig(None)
    return None


def build_auth(
    options: argparse.Namespace,
    *,
    authn_api: KubeAuthAPI | None = None,
    authz_api: KubeAuthAPI | None = None,
    clock: Callable[[], float] = time.monotonic,
    start_watchers: bool = True,
) -> tuple[Authenticator, Authorizer, Callable[[], bytes | None]]:
    """Build (authenticator, authorizer, client CA PEM provider) from parsed flags.

    ``authn_api`` / ``authz_api`` override the Kubernetes clients (tests, embedding).  Raises
    AuthConfigError with a readable message for unusable files or an unreachable cluster.
    """

    def opt(name: str, default: Any = None) -> Any:
        return getattr(options, name, default)

    try:
        if authn_api is None:
            authn_api = _api_for(opt("authentication_kubeconfig") or opt("kubeconfig"))
        if authz_api is None:
            authz_api = _api_for(opt("authorization_kubeconfig") or opt("kubeconfig"))
    except KubeAPIError as exc:
        raise AuthConfigError(str(exc)) from None

    flags = AuthFlags(
        client_ca_file=opt("client_ca_file"),
        requestheader_client_ca_file=opt("requestheader_client_ca_file"),
        requestheader_allowed_names=list(opt("requestheader_allowed_names") or []),
        requestheader_username_headers=list(opt("requestheader_username_headers") or []),
        requestheader_group_headers=list(opt("requestheader_group_headers") or []),
        requestheader_extra_headers_prefix=list(opt("requestheader_extra_headers_prefix") or []),
        requestheader_uid_headers=list(opt("requestheader_uid_headers") or []),
    )
    config = DynamicAuthnConfig(
        flags,
        authn_api,
        skip_lookup=bool(opt("authentication_skip_lookup", False)),
        tolerate_lookup_failure=bool(opt("authentication_tolerate_lookup_failure", False)),
    )
    try:
        config.load_initial()
    except (ValueError, KubeAPIError) as exc:
        raise AuthConfigError(str(exc)) from None

    token_authenticators: list[TokenAuthenticator] = []
    token_file = opt("token_auth_file")
    if token_file:
        try:
            token_authenticators.append(StaticTokenAuthenticator.from_file(str(token_file)))
        except ValueError as exc:
            raise AuthConfigError(str(exc)) from None
    if authn_api is not None:
        token_authenticators.append(TokenReviewAuthenticator(authn_api, clock=clock))

    authenticator = Authenticator(config, token_authenticators, anonymous=True, clock=clock)
    paths = list(opt("authorization_always_allow_paths", list(DEFAULT_ALWAYS_ALLOW_PATHS)) or [])
    authorizer: Authorizer
    if authz_api is not None:
        authorizer = DelegatingAuthorizer(authz_api, paths, clock=clock)
    elif authenticator.configured or config.uses_configmap:
        log.warning(
            "no authorization kubeconfig and not in a cluster: authenticated users are allowed "
            "everything, anonymous users only %s",
            ", ".join(paths),
        )
        authorizer = AuthenticatedOnlyAuthorizer(paths)
    else:
        log.warning(
            "no authentication configured (no cluster, no --token-auth-file, no client CA): "
            "anonymous access is allowed to everything (local mode)"
        )
        authorizer = AlwaysAllowAuthorizer()
    if start_watchers:
        config.start()
    return authenticator, authorizer, config.client_ca_pems
