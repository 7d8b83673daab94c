#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by `make e2e` from Go modules, at pinned versions:
#   kube-apiserver and kube-controller-manager from k8s.io/kubernetes, and etcd from go.etcd.io/etcd.
# k8s.io/kubernetes points its staging modules (k8s.io/api, k8s.io/client-go, ...) at ./staging with
# `replace` lines that only work inside its own repository; the wrapper module below pins each of them
# to the matching v0.x release instead. Binaries land in a machine-wide cache (not the work tree), so a
# fresh clone on the same machine - CI's included - reuses them; Go's own build and module caches make a
# rebuild after a version change incremental.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-3.6.8}"
CACHE="${PRESCALER_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/prescaler/controlplane}"
OUT="$CACHE/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION"
BIN="$OUT/bin"

log() { printf 'controlplane-build: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "the Go toolchain is not on PATH; make e2e builds kube-apiserver, kube-controller-manager and etcd from Go modules and needs it"

if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-controller-manager" && -x "$BIN/etcd" && -f "$OUT/.complete" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$OUT/k8s" "$OUT/etcd" "$BIN"
# Two `make e2e` at once (two worktrees, CI retries) share the cache: one builds, the other waits.
exec 9>"$OUT/.lock"
flock 9
if [[ -f "$OUT/.complete" ]]; then echo "$BIN"; exit 0; fi
start=$(date +%s)
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0

# --- kube-apiserver, kube-controller-manager -------------------------------------------------------
log "resolving k8s.io/kubernetes v$K8S_VERSION"
# `go mod download -json` reports a failure in the JSON's Error field (and exits non-zero).
gomod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" 2>&1 | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    d = json.loads(text)
except ValueError:
    sys.exit(text.strip() or "no output")
if d.get("Error") or not d.get("GoMod"):
    sys.exit(d.get("Error") or "no go.mod in the download")
print(d["GoMod"])') \
  || die "module k8s.io/kubernetes version v$K8S_VERSION cannot be downloaded (error above; is the Go module proxy $(go env GOPROXY) reachable?)"
staging_version="v0.${K8S_VERSION#1.}"
go_directive=$(awk '/^go [0-9]/{print $2; exit}' "$gomod")

{
  echo "module prescaler.local/controlplane"
  echo
  echo "go $go_directive"
  echo
  echo "require k8s.io/kubernetes v$K8S_VERSION"
  echo
  echo "replace ("
  # every staging module k8s.io/kubernetes replaces with ./staging/src/... -> its published v0.x release
  grep -E '^\s*k8s\.io/[A-Za-z0-9._-]+ => \./staging/' "$gomod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > "$OUT/k8s/go.mod"
cat > "$OUT/k8s/tools.go" <<'GO'
//go:build tools

// The control plane's main packages, listed so that `go mod tidy` resolves their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO

# What `kube-apiserver --version` and /version report (hack/lib/version.sh sets the same variables when
# Kubernetes builds its release binaries). gitMinor is the bare minor number, "36" for 1.36.3.
k8s_minor=$(cut -d. -f2 <<<"$K8S_VERSION")
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

( cd "$OUT/k8s"
  log "go mod tidy (k8s.io/kubernetes v$K8S_VERSION, staging modules at $staging_version)"
  go mod tidy >/dev/null 2>"$OUT/k8s/tidy.log" || { cat "$OUT/k8s/tidy.log" >&2; die "go mod tidy failed for k8s.io/kubernetes v$K8S_VERSION"; }
  for cmd in kube-apiserver kube-controller-manager; do
    log "building $cmd (cold: many minutes on 2 cores; cached afterwards)"
    go build -ldflags "$ldflags" -o "$BIN/$cmd" "k8s.io/kubernetes/cmd/$cmd" \
      || die "go build k8s.io/kubernetes/cmd/$cmd@v$K8S_VERSION failed"
  done
)

# --- etcd ---------------------------------------------------------------------------------------------
# The etcd repository's own main module replaces its sub-modules with local paths, so `go install
# go.etcd.io/etcd/v3@...` cannot work; a two-line main around etcdmain is the same program.
cat > "$OUT/etcd/go.mod" <<GOMOD
module prescaler.local/etcd

go $go_directive

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
GOMOD
cat > "$OUT/etcd/main.go" <<'GO'
// etcd, exactly as its own main package starts it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
( cd "$OUT/etcd"
  log "go mod tidy (go.etcd.io/etcd/server/v3 v$ETCD_VERSION)"
  go mod tidy >/dev/null 2>"$OUT/etcd/tidy.log" || { cat "$OUT/etcd/tidy.log" >&2; die "go mod tidy failed for go.etcd.io/etcd/server/v3 v$ETCD_VERSION"; }
  log "building etcd"
  go build -ldflags "-s -w" -o "$BIN/etcd" . || die "go build etcd v$ETCD_VERSION failed"
)

touch "$OUT/.complete"
# The binaries must say the version they were pinned to (guards against a stale cache or a
# mis-resolved module).
"$BIN/kube-apiserver" --version | grep -qx "Kubernetes v$K8S_VERSION" \
  || die "$BIN/kube-apiserver --version says '$("$BIN/kube-apiserver" --version)', expected Kubernetes v$K8S_VERSION"
"$BIN/etcd" --version | grep -q "etcd Version: $ETCD_VERSION" \
  || die "$BIN/etcd --version does not report $ETCD_VERSION"
log "built in $(( $(date +%s) - start )) s: $(cd "$BIN" && echo *)"
echo "$BIN"
