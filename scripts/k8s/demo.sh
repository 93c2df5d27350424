#!/usr/bin/env bash
# `make demo`: Magnetar on the local cluster in one command. Brings the cluster up (or uses
# the running one), installs the chart with a small PulsarCluster "dev" and its proxy
# (helm/magnetar/ci/values-demo.yaml), applies the example Tenant and Topic, and runs the
# payments example through the proxy: payments produced to persistent://acme/orders/created,
# consumed back and checked. Leaves everything running and prints how to reach it and how
# to remove it. Idempotent: a second run upgrades the release and sends more payments.
# Needs what `make cluster-up` needs (root, Go or the built binaries, `make images`).
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=magnetar-system
step() { printf '\n[demo %s] %s\n' "$(date +%T)" "$*"; }
t0=$(date +%s)

step "local cluster (make cluster-up)"
bash scripts/k8s/cluster.sh up
eval "$(bash scripts/k8s/cluster.sh env)"

step "helm upgrade --install magnetar (operator + PulsarCluster dev with a proxy)"
helm upgrade --install magnetar helm/magnetar --namespace "$NS" --create-namespace \
    -f helm/magnetar/ci/values-demo.yaml --wait --timeout 5m
kubectl -n "$NS" wait pulsarcluster/dev --for=condition=Ready --timeout=10m
kubectl -n "$NS" get mgc dev

step "Tenant acme and Topic acme-orders-created"
kubectl -n "$NS" apply -f crds/examples/tenant.yaml -f crds/examples/topic.yaml
kubectl -n "$NS" wait tenant/acme topic/acme-orders-created --for=condition=Ready --timeout=2m
kubectl -n "$NS" get mgt,mgtp

# this machine is the node: the proxy's ClusterIP routes from here
proxy=$(kubectl -n "$NS" get svc dev-proxy -o jsonpath='{.spec.clusterIP}')
step "payments through the proxy at pulsar://$proxy:6650"
payments=(.venv/bin/python -m magnetar.spark.examples.payments_client)
topic=persistent://acme/orders/created
seed=$(date +%s)  # new payments on every run
"${payments[@]}" produce --service-url "pulsar://$proxy:6650" --topic "$topic" --count 200 --seed "$seed"
"${payments[@]}" consume --service-url "pulsar://$proxy:6650" --topic "$topic" --count 200 --seed "$seed"
.venv/bin/magnetar admin --admin-url "http://$proxy:8080" topics list-partitioned-topics acme/orders

cat <<MSG

[demo] ready in $(( $(date +%s) - t0 ))s. From this machine:
  eval "\$(scripts/k8s/cluster.sh env)"    # kubectl and helm for this cluster
  kubectl -n $NS get mgc,mgt,mgtp,pods
  clients (through the proxy): pulsar://$proxy:6650
  admin API (through the proxy): http://$proxy:8080, e.g.
    .venv/bin/magnetar admin --admin-url http://$proxy:8080 tenants list

Grafana dashboards: not available yet. Monitoring is not part of the local cluster: the
chart can ship its dashboards as ConfigMaps for a Grafana with the dashboard sidecar
(monitoring.grafanaDashboards.enabled) and a ServiceMonitor for the Prometheus Operator,
but neither Prometheus nor Grafana runs here, so there is no dashboard to open.
Brokers and bookies serve Prometheus metrics on /metrics (ports 8080 and 8000 of their pods).

Remove it:
  helm uninstall magnetar --namespace $NS    # the cluster, tenant and topic go first
  make cluster-down
MSG
