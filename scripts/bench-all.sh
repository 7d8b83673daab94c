#!/usr/bin/env bash
# Runs every benchmark in order, even when one of them misses its goal (exits non-zero), so one
# missed goal never hides the figures of the benchmarks after it; exits 1 at the end naming those
# that missed. Usage: scripts/bench-all.sh PYTHON
set -uo pipefail

py=${1:?usage: scripts/bench-all.sh PYTHON}
benches=(
    serve timeline overlap scale
    cluster_start # the control plane of make e2e (built once, cached)
    forecast scaling fusion upstream reliability_sources reliability
)
missed=()
for bench in "${benches[@]}"; do
    echo "$py bench/$bench.py"
    if ! "$py" "bench/$bench.py"; then
        missed+=("bench/$bench.py")
    fi
done
if ((${#missed[@]})); then
    echo "make bench: ${#missed[@]} benchmark(s) exited non-zero (a goal missed or an error, see above): ${missed[*]}" >&2
    exit 1
fi
echo "make bench: every benchmark met its goals"
