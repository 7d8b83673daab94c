#!/bin/sh
# Install kubectl for the end-to-end tests (`kubectl get --raw` as the real client).
# Idempotent: exits 0 at once when kubectl is on PATH. Tries the package `kubectl` (where a
# configured repository has it), then Debian's own `kubernetes-client`.
set -eu
command -v kubectl >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-kubectl: apt-get not found; install kubectl by hand" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends kubectl 2>/dev/null \
    || $SUDO apt-get install -y -q --no-install-recommends kubernetes-client
command -v kubectl >/dev/null 2>&1 || { echo "install-kubectl: kubectl still missing" >&2; exit 1; }
