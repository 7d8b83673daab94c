#!/bin/sh
# wrk (Debian package) drives bench/serve.py. Idempotent.
set -eu
command -v wrk >/dev/null 2>&1 && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends wrk
