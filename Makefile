# Magnetar — the commands a developer needs. `make run` and `make test` work on a fresh machine.
VENV   := .venv
PY     := $(VENV)/bin/python
PROTOS := $(wildcard proto/*.proto)

.PHONY: setup run test test-fast test-slow lint bench proto clean dashboards

setup:
	@bash scripts/setup.sh

run: setup
	@$(VENV)/bin/magnetar standalone

# With Go on the machine (it is on the project's machines), the k8s tools and MinIO are built
# (cached) and the suites against a real control plane and a real S3 run too; without Go they
# are skipped with a message.
GO := $(shell command -v go 2>/dev/null || ls /usr/local/go/bin/go 2>/dev/null)

# As root (the project's machines), the images are built (scripts/images/build.sh installs and
# starts Docker; cached) so tests/images run, then on the local cluster (each brings it up and
# tears it down): docs/kubernetes.md's quick start run literally (e2e/test_docs.py, reduced form:
# without `make demo`), and the reduced PulsarCluster suite: install, an offload to the chart's
# MinIO, one bookie kill, one version roll.
# Without root or Go they skip with a message naming what is missing.
# The suite runs against the compiled hot paths `make setup` builds (scripts/native.py); the
# unit tests run a second time on the pure-Python modules (MAGNETAR_NATIVE=0).
test: setup lint
	@if [ -n "$(GO)" ]; then PATH="$$(dirname $(GO)):$$PATH" bash scripts/k8s/install-all.sh; fi
	@if [ -n "$(GO)" ]; then PATH="$$(dirname $(GO)):$$PATH" bash scripts/k8s/install-minio.sh >/dev/null; fi
	@if [ "$$(id -u)" = 0 ]; then BASE_IMAGE="$(BASE_IMAGE)" bash scripts/images/build.sh; \
	else echo "[test] not root: images not built (tests/images and e2e skip)"; fi
	@MAGNETAR_K8S_TESTS=$(if $(GO),1,) $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)
	@MAGNETAR_NATIVE=0 $(PY) -m pytest -m "not slow" tests/unit -q $(PYTEST_ARGS)
	@MAGNETAR_E2E_REDUCED=1 $(PY) -m pytest e2e/test_docs.py e2e/test_pulsarcluster.py -rs $(PYTEST_ARGS)

test-fast: setup
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-slow: setup
	@$(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: setup
	@$(VENV)/bin/ruff check src operator tests bench e2e
	@$(VENV)/bin/ruff format --check src operator tests bench e2e
	@$(VENV)/bin/mypy
	@$(VENV)/bin/lint-imports

bench: setup
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Generated protobuf/gRPC modules: built from proto/ by scripts/gen_proto.sh, never edited.
proto:
	@bash scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .cache .mypy_cache .pytest_cache .ruff_cache
	find src -name _gen -type d -prune -exec rm -rf {} +

# --- Kubernetes (issue 6): operator, CRDs, chart -----------------------------------------------
# k8s-tools builds the pinned kube-apiserver, kube-controller-manager and helm from the Go
# module proxy into .cache/k8s-bin (minutes the first time, cached after; see
# docs/kubernetes.md). test-k8s runs the operator's unit tests (builders, CRDs, helm) and the
# suite against a real control plane started by a pytest fixture. Not part of `make test` yet.
.PHONY: k8s-tools test-k8s test-e2e minio
# minio: the S3 server of the offload suites (tests/integration/offload, bench/offload_bench.py),
# built from the Go module proxy at the version pinned in scripts/k8s/versions.env.
minio:
	@bash scripts/k8s/install-minio.sh

k8s-tools:
	@bash scripts/k8s/install-all.sh

test-k8s: setup k8s-tools
	@MAGNETAR_K8S_TESTS=1 $(PY) -m pytest tests/unit/operator tests/k8s $(PYTEST_ARGS)

# e2e on the local cluster (scripts/k8s/cluster.sh, brought up if none runs, torn down after):
# the docs' commands run literally (e2e/test_docs.py: docs/kubernetes.md's quick start, then the
# README's `make demo`; the reduced form leaves the demo out), the smoke test, then the PulsarCluster suite (3 etcd, 3 bookies, 2 brokers, a proxy and the
# chart's MinIO; an offload to it read back, 10,000 messages, bookie and broker pods deleted
# mid-publish, a version roll, uninstall). test-e2e-full is the same; test-e2e-reduced:
# install, the offload, one bookie kill, one roll, uninstall. Both build MinIO first (cached)
# so `images` includes magnetar/minio.
# test-e2e-kind: e2e/test_kind.py (needs a kind that runs here: docs/kubernetes.md).
.PHONY: test-e2e-full test-e2e-reduced test-e2e-kind
test-e2e test-e2e-full: setup minio images
	@$(PY) -m pytest e2e/test_docs.py e2e/test_local_cluster.py e2e/test_pulsarcluster.py -rs $(PYTEST_ARGS)

test-e2e-reduced: setup minio images
	@MAGNETAR_E2E_REDUCED=1 $(PY) -m pytest e2e/test_docs.py e2e/test_pulsarcluster.py -rs $(PYTEST_ARGS)

# test-e2e-docs: e2e/test_docs.py alone (docs/kubernetes.md's quick start and the README's
# `make demo`, run literally on the local cluster; starts with no cluster running).
.PHONY: test-e2e-docs
test-e2e-docs: setup images
	@$(PY) -m pytest e2e/test_docs.py -rs $(PYTEST_ARGS)

test-e2e-kind: setup
	@$(PY) -m pytest e2e/test_kind.py -rs $(PYTEST_ARGS)

# --- Side-by-side benchmarks (issue 7): Apache Pulsar standalone, pulsar-lite, Magnetar --------
# bench-peers installs Pulsar (Maven Central -> .cache/pulsar-<v>/lib) and pulsar-lite (PyPI ->
# .cache/pulsar-lite-venv) the first time, then runs the four workloads against each system in
# turn, 3 rounds, and regenerates docs/benchmarks.md (about 30-40 minutes on 2 cores).
# bench-peers-quick: 1 round, short phases, 128 MiB backlog (a few minutes; a smoke run).
# Not part of `make test`.
# bench-peers-secured: workloads 1 and 2 on Apache Pulsar and Magnetar, each plaintext and with
# TLS + token authentication + authorization (3 rounds; its own section of the report).
.PHONY: bench-peers bench-peers-quick bench-peers-secured
bench-peers: setup
	@$(PY) bench/peers/run.py $(BENCH_PEERS_ARGS)

bench-peers-quick: setup
	@$(PY) bench/peers/run.py --quick $(BENCH_PEERS_ARGS)

bench-peers-secured: setup
	@$(PY) bench/peers/run.py --systems pulsar,pulsar-secured,magnetar,magnetar-secured \
		--workloads w1,w2 $(BENCH_PEERS_ARGS)

# pulsar-perf (Apache Pulsar's Java load generator, Maven Central -> .cache/pulsar-perf-<v>):
# produce + consume 1 KiB for 60 s against a fresh Magnetar standalone; fails on any error.
# BENCH_ARGS=--record writes its figures into docs/benchmarks.md. `make bench-peers
# BENCH_PEERS_ARGS="--systems pulsar,magnetar --workloads w1p --rounds 1"` compares the systems
# with it as the load generator (workload w1p, minutes; its own section of the report).
# pulsar-keys: src/magnetar/pulsar_keys.py, every key of Apache Pulsar's configuration files,
# read from its classes in the jars scripts/bench/install_pulsar.sh assembles (committed;
# regenerate after changing the Pulsar version in bench/peers/pom.xml).
.PHONY: pulsar-keys
pulsar-keys: setup
	@$(PY) scripts/gen_pulsar_keys.py

.PHONY: bench-pulsar-perf
bench-pulsar-perf: setup
	@$(PY) bench/pulsar_perf_bench.py $(BENCH_ARGS)

# --- Official clients (issue 11): Java and Go conformance suites -------------------------------
# They run in `make test` against a Magnetar standalone and a two-broker etcd cluster
# (tests/clients). test-clients runs only them; test-clients-pulsar runs the same suites against
# Apache Pulsar standalone (Maven Central, cached in .cache) to tell a Magnetar gap from a client
# quirk -- not part of `make test`.
.PHONY: test-clients test-clients-pulsar
test-clients: setup
	@$(PY) -m pytest tests/clients -rs $(PYTEST_ARGS)

test-clients-pulsar: setup
	@MAGNETAR_CLIENTS_AGAINST=pulsar $(PY) -m pytest tests/clients -rs $(PYTEST_ARGS)

# --- Security (issue 21): the security suites against Apache Pulsar standalone ----------------
# tests/integration/security against Pulsar configured with the same keys (TLS, the three
# providers, authorization), to check Magnetar's answers are Pulsar's; what only Magnetar
# has skips with the reason (docs/security.md, "Checked against Apache Pulsar"). Not part of
# `make test` (Pulsar's jars from Maven Central, ~2 min).
.PHONY: test-security-pulsar
test-security-pulsar: setup
	@MAGNETAR_SECURITY_AGAINST=pulsar $(PY) -m pytest tests/integration/security -rs $(PYTEST_ARGS)

# security-refusals: records Apache Pulsar's status for every admin route walked with a role
# lacking permission (tests/integration/security/pulsar_refusals.json), which the route walk
# compares Magnetar's refusals with in `make test`. Run it after adding routes.
.PHONY: security-refusals
security-refusals: setup
	@MAGNETAR_SECURITY_AGAINST=pulsar MAGNETAR_SECURITY_RECORD=1 $(PY) -m pytest tests/integration/security/test_admin_access.py -k refusals -q $(PYTEST_ARGS)

# --- Metrics (issue 23): parity with Apache Pulsar's /metrics, through a real Prometheus ----------
# tests/integration/metrics runs in `make test` against the stored capture of Pulsar's series
# (tests/integration/metrics/pulsar-4.0.7.metrics). metrics-pulsar rewrites that capture from a
# Pulsar standalone under the same workload (scripts/capture_pulsar_metrics.py);
# test-metrics-pulsar runs the parity test against a fresh capture. docs/metrics.md.
.PHONY: metrics-pulsar test-metrics-pulsar dashboards
metrics-pulsar: setup
	@$(PY) scripts/capture_pulsar_metrics.py

test-metrics-pulsar: setup
	@MAGNETAR_METRICS_AGAINST=pulsar $(PY) -m pytest tests/integration/metrics -rs -s $(PYTEST_ARGS)

# The chart's Grafana dashboards (helm/magnetar/files/dashboards/), written by their generator
# (scripts/dashboards.py; committed, regenerated after changing it).
dashboards: setup
	@$(PY) scripts/dashboards.py

# --- Images (issue 12): built locally, nothing pulled from a registry ---------------------------
# images: magnetar/{broker,bookie,operator,spark}:<version> on a Debian bookworm base built here with
# debootstrap (cached; scripts/images/base.sh), Python packages from PyPI; installs Debian's
# docker.io and starts dockerd when needed (scripts/images/docker.sh). With registry access:
# `make images BASE_IMAGE=python:3.11-slim`. test-images: the smoke tests in tests/images
# (standalone + official client, bookie registering in etcd); they skip without docker.
.PHONY: images test-images
images: setup
	@BASE_IMAGE="$(BASE_IMAGE)" bash scripts/images/build.sh

test-images: images
	@$(PY) -m pytest tests/images -rs $(PYTEST_ARGS)

# --- The local cluster (issue 12): a real single-node Kubernetes on this machine ---------------
# cluster-up: etcd, kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, a private
# containerd, CoreDNS and a local-path provisioner, all built here (Go module proxy, Debian
# packages, `make images`) and cached; nothing pulled from a registry. KUBECONFIG is
# .cache/cluster/kubeconfig. cluster-down stops everything it started (by pid) and removes the
# bridge, iptables chains, netns and state, restoring the sysctls kubelet changes.
# docs/kubernetes.md "The local cluster". Not part of `make test`.
.PHONY: cluster-up cluster-down cluster-status test-e2e-cluster
cluster-up: setup
	@bash scripts/k8s/cluster.sh up

cluster-down:
	@bash scripts/k8s/cluster.sh down

cluster-status:
	@bash scripts/k8s/cluster.sh status

test-e2e-cluster: setup
	@$(PY) -m pytest e2e/test_local_cluster.py -rs $(PYTEST_ARGS)

# demo: the local cluster (brought up, or the running one), the chart with a small PulsarCluster
# and its proxy (helm/magnetar/ci/values-demo.yaml), the example Tenant and Topic, and payments
# produced and consumed through the proxy (scripts/k8s/demo.sh); leaves it running and prints
# how to reach it and how to remove it. docs/kubernetes.md, "Quick start".
.PHONY: demo
demo: setup images
	@bash scripts/k8s/demo.sh
