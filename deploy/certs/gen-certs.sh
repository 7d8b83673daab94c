#!/usr/bin/env bash
# Thin wrapper around `prescaler certs`, the one certificate tool of the kustomize install (the Helm
# chart and the cert-manager component make their own certificates). Kept so existing scripts and
# the environment-variable interface keep working:
#
#   deploy/certs/gen-certs.sh [OUT_DIR]        # default ./prescaler-certs
#   NAMESPACE=prescaler SERVICE=prescaler CLUSTER_DOMAIN=cluster.local DAYS=365 deploy/certs/gen-certs.sh
#
# It writes OUT_DIR/{ca.crt,ca.key,tls.crt,tls.key,apiservice.yaml} and PRINTS the kubectl commands
# that install them. It never runs kubectl: you choose the cluster.
# The prescaler command is taken from $PRESCALER, else `prescaler` on PATH, else this repository's
# .venv (make install).
set -euo pipefail

OUT_DIR=${1:-./prescaler-certs}
NAMESPACE=${NAMESPACE:-prescaler}
SERVICE=${SERVICE:-prescaler}
CLUSTER_DOMAIN=${CLUSTER_DOMAIN:-cluster.local}
DAYS=${DAYS:-365}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -n "${PRESCALER:-}" ]]; then
  prescaler=$PRESCALER
elif command -v prescaler >/dev/null 2>&1; then
  prescaler=$(command -v prescaler)
elif [[ -x "$repo_root/.venv/bin/prescaler" ]]; then
  prescaler=$repo_root/.venv/bin/prescaler
else
  echo "gen-certs.sh: the prescaler command is needed (pip install prescaler, or make install)" >&2
  exit 1
fi

exec "$prescaler" certs --out "$OUT_DIR" --namespace "$NAMESPACE" --service "$SERVICE" \
  --cluster-domain "$CLUSTER_DOMAIN" --days "$DAYS"
