"""`prescaler` command line: serve, certs, forecast, backtest, simulate, preview, demo-announcer."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from adapter import __version__

log = logging.getLogger("prescaler")

# Subcommands contributed by their own packages: module -> function adding argparse subparsers.
_SUBCOMMAND_MODULES = (
    "adapter.serving.certs_cli",
    "adapter.forecast.cli",
    "adapter.sim.cli",
    "adapter.preview",
    "adapter.demo.announcer",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prescaler", description="Future-aware external metrics for native HPAs.")
    parser.add_argument("--version", action="version", version=f"prescaler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(sub)
    for module_name in _SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional part missing must not break the others
            log.debug("subcommands of %s unavailable: %s", module_name, exc)
            continue
        module.add_parsers(sub)
    return parser


def _add_serve(sub: Any) -> None:
    parser = sub.add_parser("serve", help="serve external.metrics.k8s.io/v1beta1",
                            description="Serve external.metrics.k8s.io/v1beta1 over HTTPS. With --manifests the "
                            "objects come from YAML files (local mode); otherwise they are watched in the cluster.")
    parser.add_argument("--manifests", nargs="+", metavar="PATH", default=None,
                        help="YAML files or directories with VirtualMetric/VirtualMetricEvent objects (local mode)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig for reading objects (default: in-cluster)")
    parser.add_argument("--allow-private-networks", action="store_true",
                        help="let sources reach link-local and cloud metadata addresses (refused by default)")
    parser.add_argument("--v", "-v", dest="verbosity", type=int, default=1, help="log verbosity (0-4)")
    parser.add_argument("--write-kubeconfig", metavar="PATH", default=None,
                        help="write a kubeconfig for this server (local mode convenience: kubectl --kubeconfig PATH)")
    parser.add_argument("--status-namespace", default=os.environ.get("POD_NAMESPACE", "prescaler"),
                        help="namespace of the Lease that elects the status writer")
    from adapter.serving.server import add_serving_flags

    add_serving_flags(parser)
    from adapter.auth.factory import add_auth_flags

    add_auth_flags(parser, include_kubeconfig=False)  # --kubeconfig above serves both
    parser.set_defaults(func=run_serve)


def _configure_logging(verbosity: int) -> None:
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbosity < 3:
        logging.getLogger("httpx").setLevel(logging.WARNING)


def run_serve(args: argparse.Namespace) -> int:
    from adapter.serving.server import serve, serving_options_from_args

    _configure_logging(args.verbosity)
    try:
        if args.write_kubeconfig:
            _prepare_local_tls(args)
        app, client_cas = build_app(args)
        options = serving_options_from_args(args, log_level="info" if args.verbosity >= 2 else "warning",
                                            access_log=args.verbosity >= 3, client_ca_pems=client_cas)
    except (ValueError, OSError) as exc:  # includes AuthConfigError and ManifestError
        print(f"prescaler serve: {exc}", file=sys.stderr)
        return 2
    try:
        serve(app, options)
    except OSError as exc:
        print(f"prescaler serve: cannot listen on {args.bind_address}:{args.secure_port}: {exc}", file=sys.stderr)
        return 1
    return 0


def _prepare_local_tls(args: argparse.Namespace) -> None:
    """Generate the self-signed certificate up front so the kubeconfig can carry it as its CA."""
    from pathlib import Path

    from adapter.serving.certs import self_signed

    out = Path(args.write_kubeconfig).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    if not args.tls_cert_file:
        cert, key = self_signed(list(args.tls_sans or []))
        (out / "tls.crt").write_bytes(cert)
        key_path = out / "tls.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        args.tls_cert_file, args.tls_private_key_file = str(out / "tls.crt"), str(key_path)
    host = "127.0.0.1" if args.bind_address in ("0.0.0.0", "::", "") else args.bind_address
    write_kubeconfig(Path(args.write_kubeconfig), f"https://{host}:{args.secure_port}", Path(args.tls_cert_file))
    print(f"kubeconfig for this server: {args.write_kubeconfig}", file=sys.stderr)


def write_kubeconfig(path: Any, server: str, ca_file: Any, token: str | None = None) -> None:
    import yaml

    # kubectl prompts for a username when a user entry has no credentials; a placeholder token avoids
    # that (local mode without --token-auth-file ignores it).
    user: dict[str, Any] = {"token": token or "local-anonymous"}
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "prescaler-local",
        "clusters": [{"name": "prescaler-local", "cluster": {"server": server,
                                                             "certificate-authority": str(ca_file)}}],
        "users": [{"name": "prescaler-local", "user": user}],
        "contexts": [{"name": "prescaler-local", "context": {"cluster": "prescaler-local", "user": "prescaler-local"}}],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def build_app(args: argparse.Namespace) -> tuple[Any, Any]:
    """The whole server as an ASGI app (store -> engine -> API, auth in front) and the provider of
    client CAs for the TLS layer."""
    from adapter.api.app import PrescalerApp
    from adapter.engine import Engine
    from adapter.sources.base import SourceContext
    from adapter.store.manifests import ManifestStore

    context = SourceContext(allow_private_networks=args.allow_private_networks)
    engine = Engine(context)
    manifest_store: ManifestStore | None = None
    if args.manifests:
        manifest_store = ManifestStore(engine, args.manifests)
        context.secrets = manifest_store.resolve_secret

    kube: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        await engine.start()
        if manifest_store is not None:
            manifest_store.start()
            log.info("local mode: serving objects from %s", ", ".join(args.manifests))
        else:
            kube.update(_start_kube(args, engine, context))
        try:
            yield
        finally:
            if manifest_store is not None:
                await manifest_store.stop()
            for stopper in kube.get("stoppers", []):
                with contextlib.suppress(Exception):
                    stopper()
            await engine.stop()

    from adapter.auth.factory import build_auth
    from adapter.auth.middleware import AuthMiddleware

    app = PrescalerApp(engine, lifespan=lifespan)
    authenticator, authorizer, client_cas = build_auth(args)
    return AuthMiddleware(app, authenticator, authorizer), client_cas


def _start_kube(args: argparse.Namespace, engine: Any, context: Any) -> dict[str, Any]:
    """Cluster mode: watch the CRDs, resolve Secrets, write status (Lease holder only)."""
    import base64

    from kubernetes import client

    from adapter.store.events import EventRecorder
    from adapter.store.kube import KubeStore, load_api_client
    from adapter.store.lease import LeaseElector
    from adapter.store.status import StatusWriter

    api_client = load_api_client(args.kubeconfig)
    core = client.CoreV1Api(api_client)

    def resolve_secret(namespace: str, name: str, key: str) -> str:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=10)
        data = (secret.data or {}).get(key)
        if data is None:
            raise LookupError(f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    context.secrets = resolve_secret
    store = KubeStore(api_client, engine)
    store.start()
    elector = LeaseElector(api_client, args.status_namespace)
    writer = StatusWriter(api_client, engine.desired_status, elector=elector,
                          events=EventRecorder(api_client))  # Events on condition changes
    engine.on_status_change(writer.notify)
    writer.start()
    return {"stoppers": [writer.stop, store.stop], "store": store}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
