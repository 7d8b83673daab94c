#!/usr/bin/env bash
# Generate a private CA and prescaler's serving certificate for the kustomize install (the Helm chart
# and the cert-manager component do this for you).
#
#   deploy/certs/gen-certs.sh [OUT_DIR]        # default ./prescaler-certs
#   NAMESPACE=prescaler SERVICE=prescaler CLUSTER_DOMAIN=cluster.local DAYS=365 deploy/certs/gen-certs.sh
#
# Writes OUT_DIR/{ca.crt,ca.key,tls.crt,tls.key} and prints the two commands that install them:
# the Secret mounted at /certs, and the APIService caBundle the aggregator verifies against.
# kube-aggregator dials <service>.<namespace>.svc, so that SAN must be in the certificate (a
# mismatch shows as FailedDiscoveryCheck "x509: certificate is valid for ..., not ...").
# Keep ca.key out of the cluster and out of version control.
set -euo pipefail

OUT_DIR=${1:-./prescaler-certs}
NAMESPACE=${NAMESPACE:-prescaler}
SERVICE=${SERVICE:-prescaler}
CLUSTER_DOMAIN=${CLUSTER_DOMAIN:-cluster.local}
DAYS=${DAYS:-365}

command -v openssl >/dev/null || { echo "gen-certs.sh: openssl is required" >&2; exit 1; }
mkdir -p "$OUT_DIR"
umask 077

SANS="DNS:${SERVICE},DNS:${SERVICE}.${NAMESPACE},DNS:${SERVICE}.${NAMESPACE}.svc,DNS:${SERVICE}.${NAMESPACE}.svc.${CLUSTER_DOMAIN}"

# CA: ECDSA P-256, valid 10 years; only signs this one serving certificate.
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT_DIR/ca.key"
openssl req -x509 -new -key "$OUT_DIR/ca.key" -sha256 -days 3650 -subj "/CN=${SERVICE}-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$OUT_DIR/ca.crt"

# Serving certificate for the Service's DNS names.
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT_DIR/tls.key"
openssl req -new -key "$OUT_DIR/tls.key" -subj "/CN=${SERVICE}.${NAMESPACE}.svc" -out "$OUT_DIR/tls.csr"
cat > "$OUT_DIR/ext.cnf" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=${SANS}
EXT
openssl x509 -req -in "$OUT_DIR/tls.csr" -CA "$OUT_DIR/ca.crt" -CAkey "$OUT_DIR/ca.key" -CAcreateserial \
  -days "$DAYS" -sha256 -extfile "$OUT_DIR/ext.cnf" -out "$OUT_DIR/tls.crt" 2>/dev/null
rm -f "$OUT_DIR/tls.csr" "$OUT_DIR/ext.cnf" "$OUT_DIR/ca.srl"
chmod 644 "$OUT_DIR/ca.crt" "$OUT_DIR/tls.crt"

CA_BUNDLE=$(base64 < "$OUT_DIR/ca.crt" | tr -d '\n')
cat <<MSG
Wrote $OUT_DIR/{ca.crt,ca.key,tls.crt,tls.key} (SANs: ${SANS//DNS:/}).
Install them after `kubectl apply -k deploy/` (the pods wait for the Secret until then):

  kubectl -n ${NAMESPACE} create secret generic ${SERVICE}-tls \\
    --from-file=tls.crt=$OUT_DIR/tls.crt --from-file=tls.key=$OUT_DIR/tls.key --from-file=ca.crt=$OUT_DIR/ca.crt \\
    --dry-run=client -o yaml | kubectl apply -f -
  kubectl patch apiservice v1beta1.external.metrics.k8s.io --type=merge \\
    -p '{"spec":{"caBundle":"${CA_BUNDLE}"}}'
MSG
