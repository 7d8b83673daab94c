"""`prescaler` command line: serve, validate, certs, forecast, backtest, simulate, preview, demo-announcer, migrate.

Every failure a user can cause ends in one line on stderr (``prescaler <command>: ...``) and a
non-zero exit, never a traceback: usage errors exit 2, runtime errors 1, a closed output pipe 141
(what a shell reports for SIGPIPE, so ``prescaler forecast ... | head`` behaves like other tools).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from adapter import __version__, logs

log = logging.getLogger("prescaler")

EXIT_RUNTIME_ERROR = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
LOOP_SWITCH_INTERVAL = 0.0005  # seconds a thread may hold the GIL while another waits (see run_serve)

# Subcommands contributed by their own packages: module -> function adding argparse subparsers.
_SUBCOMMAND_MODULES = (
    "adapter.validate",
    "adapter.serving.certs_cli",
    "adapter.forecast.cli",
    "adapter.sim.cli",
    "adapter.preview",
    "adapter.demo.announcer",
    "adapter.migrate",
)

# One help text per flag that several subcommands share (filled in where a module left it empty), so
# the same thing is described, and named, the same way everywhere.
COMMON_HELP = {
    "manifests": "YAML files or directories with VirtualMetric/VirtualMetricEvent objects",
    "metric": "external metric name (a VirtualMetric's spec.name)",
    "namespace": "namespace of the target, as the HPA queries it",
    "resource": "target name, the labelSelector's resource= value",
    "allow_private_networks": "let sources reach link-local and cloud metadata addresses (refused by default)",
    "kubeconfig": "kubeconfig to read objects from (default: in-cluster, then ~/.kube/config)",
    "json": "print the full JSON document",
}


# Descriptions for subcommands whose module gives none (shown by `prescaler COMMAND --help`).
DESCRIPTIONS = {
    "preview": "Compute a metric's served values for one target over a coming window, from manifests, with "
    "the same pipeline as the server, and explain each step: the value, and the objects and items "
    "that contributed to it. Prints a table, or JSON with --json; --plot writes a PNG.",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default (``none`` when it has none) or that it is required."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.help == argparse.SUPPRESS or "default" in text or "required" in text:
            return action.help
        if not action.option_strings:  # positionals: described by their help alone
            return text
        if action.required:
            return f"{text} (required)"
        if action.nargs == 0:  # switches: off unless given
            return f"{text} (default: off)" if isinstance(action, argparse._StoreTrueAction) else text
        default = action.default
        if default is None or default == [] or default == argparse.SUPPRESS:
            return f"{text} (default: none)"
        if isinstance(default, list):
            default = ",".join(str(v) for v in default)
        return f"{text} (default: {default})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prescaler",
        formatter_class=HelpFormatter,
        description="Future-aware external metrics for native HPAs: serve them (serve), check manifests "
        "offline (validate), see why a value is what it is (preview), prove it on traffic "
        "(simulate, forecast, backtest), and set up TLS (certs).",
    )
    parser.add_argument("--version", action="version", version=f"prescaler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(sub)
    for module_name in _SUBCOMMAND_MODULES:
        importlib.import_module(module_name).add_parsers(sub)
    for name, subparser in subcommands(parser).items():
        subparser.formatter_class = HelpFormatter
        subparser.prog = f"prescaler {name}"
        if not subparser.description:
            subparser.description = DESCRIPTIONS.get(name)
        for action in subparser._actions:
            if action.help is None and action.dest in COMMON_HELP:
                action.help = COMMON_HELP[action.dest]
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _add_serve(sub: Any) -> None:
    parser = sub.add_parser(
        "serve",
        help="serve external.metrics.k8s.io/v1beta1",
        description="Serve external.metrics.k8s.io/v1beta1 over HTTPS. With --manifests the "
        "objects come from YAML files (local mode); otherwise they are watched in the cluster.",
    )
    parser.add_argument(
        "--manifests",
        nargs="+",
        metavar="PATH",
        default=None,
        help=COMMON_HELP["manifests"] + " (local mode; without it the cluster is watched)",
    )
    parser.add_argument(
        "--max-manifest-bytes",
        type=_positive_int,
        default=8 * 1024 * 1024,
        metavar="BYTES",
        help="refuse a manifest file larger than this (default 8 MiB)",
    )
    parser.add_argument("--kubeconfig", default=None, help=COMMON_HELP["kubeconfig"])
    parser.add_argument("--allow-private-networks", action="store_true", help=COMMON_HELP["allow_private_networks"])
    parser.add_argument(
        "--write-kubeconfig",
        metavar="PATH",
        default=None,
        help="write a kubeconfig for this server (local mode convenience: kubectl --kubeconfig PATH)",
    )
    parser.add_argument(
        "--metrics-max-served-targets",
        type=int,
        default=500,
        metavar="N",
        help="prescaler_served_value keeps the N targets HPAs queried most recently (bounds its series)",
    )
    parser.add_argument(
        "--status-namespace",
        default=os.environ.get("POD_NAMESPACE", "prescaler"),
        help="namespace of the Lease that elects the status writer",
    )
    from adapter.serving.server import add_serving_flags

    add_serving_flags(parser)
    from adapter.auth.factory import add_auth_flags

    add_auth_flags(parser, include_kubeconfig=False)  # --kubeconfig above serves both
    logs.add_logging_flags(parser)
    from adapter.upstream import add_upstream_flags

    add_upstream_flags(parser)
    parser.set_defaults(func=run_serve)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {text}")
    return value


def run_serve(args: argparse.Namespace) -> int:
    from adapter.serving.server import serve, serving_options_from_args
    from adapter.store.kube import KubeConfigError

    logs.configure(args.verbosity, args.logging_format)
    try:
        if args.write_kubeconfig:
            _prepare_local_tls(args)
        from adapter import heap

        with heap.quiet_imports(freeze=True):  # the server's modules live as long as it does
            app, client_cas = build_app(args)
        options = serving_options_from_args(
            args,
            log_level=logs.uvicorn_log_level(args.verbosity),
            access_log=logs.access_log_enabled(args.verbosity),
            client_ca_pems=client_cas,
            on_listening=_local_kubeconfig_writer(args),
        )
    except (ValueError, OSError, KubeConfigError) as exc:  # includes AuthConfigError and ManifestError
        print(f"prescaler serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        serve(app, options)
        failures = getattr(args, "startup_failures", [])
        if failures:
            raise StartupFailed(f"start-up failed: {failures[0]}")
    except OSError as exc:
        print(
            f"prescaler serve: cannot listen on {args.bind_address}:{args.secure_port}: {_os_reason(exc)}",
            file=sys.stderr,
        )
        return EXIT_RUNTIME_ERROR
    except StartupFailed as exc:
        print(f"prescaler serve: {exc}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    return 0


class StartupFailed(RuntimeError):
    """The server's start-up (lifespan) failed; the message says why."""


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


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


def _local_kubeconfig_writer(args: argparse.Namespace) -> Any:
    """With --write-kubeconfig: write it once the port is bound (the real one for --secure-port 0)."""
    if not args.write_kubeconfig:
        return None
    from pathlib import Path

    def write(bind_address: str, port: int) -> None:
        host = "127.0.0.1" if bind_address in ("0.0.0.0", "::", "") else bind_address
        host = f"[{host}]" if ":" in host else host
        write_kubeconfig(Path(args.write_kubeconfig), f"https://{host}:{port}", Path(args.tls_cert_file))
        log.info("kubeconfig for this server: %s", args.write_kubeconfig)

    return write


def write_kubeconfig(path: Any, server: str, ca_file: Any, token: str | None = None) -> None:
    import yaml

    # kubectl prompts for a username when a user entry has no credentials; a placeholder token avoids
    # that (local mode without --token-auth-file ignores it).
    user: dict[str, Any] = {"token": token or "local-anonymous"}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "prescaler-local",
        "clusters": [{"name": "prescaler-local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "prescaler-local", "user": user}],
        "contexts": [{"name": "prescaler-local", "context": {"cluster": "prescaler-local", "user": "prescaler-local"}}],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def build_app(args: argparse.Namespace) -> tuple[Any, Any]:
    """The whole server as an ASGI app (store -> engine -> API, auth in front) and the provider of
    client CAs for the TLS layer."""
    from adapter import heap, observability
    from adapter.engine import Engine
    from adapter.sources.base import SourceContext
    from adapter.store.manifests import ManifestStore
    from adapter.version import git_commit

    observability.set_build_info(__version__, git_commit())
    observability.SERVED.resize(args.metrics_max_served_targets)  # ValueError: a usage error
    context = SourceContext(allow_private_networks=args.allow_private_networks)
    heap.enable()  # a server's loaded objects live long: keep the GC from walking them (adapter.heap)
    # The event loop gives up the GIL at every socket call and must win it back from any busy worker
    # thread (calendar expansion, partition rebuilds, forecast fits), which by default holds it for up
    # to 5 ms each time: a request takes several such turns. 0.5 ms keeps the HPA's answer quick while
    # those threads work (1 000 expanding calendars: p99 69 -> 21 ms); with no busy thread it costs nothing.
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL)
    engine = Engine(context)
    from adapter.announced_metrics import export_announced_values

    export_announced_values(engine)  # announcements of the past become history (forecast regressors)
    manifest_store: ManifestStore | None = None
    if args.manifests:
        manifest_store = ManifestStore(engine, args.manifests, max_file_bytes=args.max_manifest_bytes)
        context.secrets = manifest_store.resolve_secret
        from adapter.store.hpp_local import LocalHPPChecker

        manifest_store.on_documents = LocalHPPChecker().update  # HPPs checked against the HPAs in the files

    kube: dict[str, Any] = {}
    api_client = None
    if manifest_store is None:
        # Cluster mode: find the cluster now, so a missing one is one clear error before serving.
        from adapter.store.kube import load_api_client

        api_client = load_api_client(args.kubeconfig)
        kube["store"] = _start_listing(api_client, engine, context)
    try:
        return _build_rest_of_app(args, engine, manifest_store, kube, api_client)
    except BaseException:
        if "store" in kube:
            kube["store"].stop()
        raise


def _start_listing(api_client: Any, engine: Any, context: Any) -> Any:
    """Cluster mode: list (then watch) the objects before the rest of the server is built.

    The API server takes most of a second to answer a list of 100 000 targets' events; asked first,
    it answers while the rest of the server is imported and set up. What arrives is applied, in
    pieces, once the event loop runs (adapter.handoff queues it until then)."""
    from adapter.store.kube import KubeStore
    from adapter.store.kube_json import secret_resolver
    from adapter.store.leadtime import AutoLeadTimes, hpa_reader

    context.secrets = secret_resolver(api_client)
    # leadTime: Auto (read-only: deployments, pods, and the HPA whose scale-up policy sets the ramp)
    engine.lead_times = AutoLeadTimes(api_client, hpa_for=hpa_reader(api_client))
    store = KubeStore(api_client, engine)
    store.start()
    return store


def _build_rest_of_app(
    args: argparse.Namespace, engine: Any, manifest_store: Any, kube: dict[str, Any], api_client: Any
) -> tuple[Any, Any]:
    from adapter.upstream import Passthrough, config_from_args

    upstream_config = config_from_args(args)
    upstream = Passthrough(upstream_config, own_names=engine.metric_names) if upstream_config else None

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            await engine.start()
            if upstream is not None:
                await upstream.start()
            if manifest_store is not None:
                manifest_store.start()
                log.info("local mode: serving objects from %s", ", ".join(args.manifests))
            else:
                kube.update(_start_kube(args, api_client, engine, kube, upstream))
        except Exception as exc:
            # uvicorn stops serving and returns normally; run_serve turns this into an exit code.
            args.startup_failures = [*getattr(args, "startup_failures", []), exc]
            if "store" in kube and "stoppers" not in kube:
                kube["store"].stop()  # listing since build_app
            raise
        try:
            yield
        finally:
            if manifest_store is not None:
                await manifest_store.stop()
            for stopper in kube.get("stoppers", []):
                with contextlib.suppress(Exception):
                    stopper()
            if upstream is not None:
                await upstream.stop()
            await engine.stop()

    from adapter.api.app import PrescalerApp  # (fastapi: imported while the objects are being listed)
    from adapter.auth.factory import build_auth
    from adapter.auth.middleware import AuthMiddleware
    from adapter.serving.inflight import CountRequests

    app = PrescalerApp(engine, lifespan=lifespan, upstream=upstream)
    authenticator, authorizer, client_cas = build_auth(args)
    return CountRequests(AuthMiddleware(app, authenticator, authorizer), engine.requests), client_cas


def _start_kube(
    args: argparse.Namespace, api_client: Any, engine: Any, kube: dict[str, Any], upstream: Any = None
) -> dict[str, Any]:
    """Cluster mode, once the loop runs: learn lead times and HPA bands, write status (Lease holder
    only); the objects are already being listed and watched (_start_listing)."""
    from adapter.store.events import EventRecorder
    from adapter.store.leadtime import learn_forever
    from adapter.store.lease import LeaseElector
    from adapter.store.status import StatusWriter

    store = kube["store"]  # listing since build_app (_start_listing); secrets and lead times are set
    learning = asyncio.get_running_loop().create_task(learn_forever(engine, engine.lead_times))
    from adapter.store.hpa_bands import HpaBands, refresh_forever

    # stepPastTolerance (read-only: list horizontalpodautoscalers, for their targets and replica counts)
    stepping = asyncio.get_running_loop().create_task(refresh_forever(engine, HpaBands(api_client)))
    elector = LeaseElector(api_client, args.status_namespace)
    desired = engine.status.current
    if upstream is not None:  # VirtualMetrics that shadow an upstream metric say so (ShadowsUpstream)
        from adapter.upstream.status import with_shadow_conditions

        desired = with_shadow_conditions(
            desired, upstream, lambda: {vm.name: vm.metric_name for vm in engine.published.metrics.values()}
        )
    writer = StatusWriter(
        api_client, desired, elector=elector, events=EventRecorder(api_client)
    )  # Events on condition changes
    engine.on_status_change(writer.notify)
    if upstream is not None:
        upstream.on_shadowed_change = writer.notify
    writer.start()
    from adapter.store.hpp_kube import HPPStatusController

    hpp_status = HPPStatusController(api_client, is_leader=lambda: elector.is_leader)  # reads HPAs, never writes
    hpp_status.start()
    return {"stoppers": [learning.cancel, stepping.cancel, writer.stop, store.stop, hpp_status.stop], "store": store}


def main(argv: Sequence[str] | None = None) -> int:
    from adapter import heap

    with heap.quiet_imports():
        parser = build_parser()
        args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    command = f"prescaler {args.command}"
    if args.command != "serve":  # serve configures its own logging from its flags
        logs.configure(getattr(args, "verbosity", 0), getattr(args, "logging_format", "text"))
    with _one_line_errors(command) as outcome:
        outcome.code = int(args.func(args) or 0)
    return outcome.code


class _Outcome:
    code: int = 0


@contextlib.contextmanager
def _one_line_errors(command: str) -> Iterator[_Outcome]:
    """Turn the failures a user can cause into one line on stderr and an exit code."""
    outcome = _Outcome()
    try:
        yield outcome
    except KeyboardInterrupt:
        outcome.code = 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly-but-visibly. Point stdout at /dev/null so the
        # interpreter's final flush does not print a second error.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"{command}: output closed early (broken pipe)", file=sys.stderr)
        outcome.code = EXIT_BROKEN_PIPE
    except OSError as exc:
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"{command}:{where} {_os_reason(exc)}", file=sys.stderr)
        outcome.code = EXIT_RUNTIME_ERROR


if __name__ == "__main__":
    sys.exit(main())
