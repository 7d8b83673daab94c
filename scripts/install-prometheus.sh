#!/bin/sh
# Install Prometheus and promtool (Debian package `prometheus`) for the source tests.
# Idempotent: exits 0 quietly when both binaries are already on PATH.
set -eu

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus: apt-get not found; install prometheus and promtool by hand" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# --no-install-recommends keeps node-exporter and friends out; the package's service is not started
# in containers (no systemd), and the tests run their own server anyway.
$SUDO apt-get install -y -q --no-install-recommends prometheus

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "install-prometheus: prometheus/promtool still missing after install" >&2
    exit 1
fi
