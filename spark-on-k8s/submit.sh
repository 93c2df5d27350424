#!/usr/bin/env bash
# Runs the example pipeline (payments -> per-merchant totals per minute -> results topic;
# src/magnetar/spark/examples/payments.py) as a Spark-on-Kubernetes job: spark-submit in
# cluster mode, so the driver and the executors are pods of the Spark image
# (images/spark, `make images`), the driver with the `spark` ServiceAccount of rbac.yaml,
# driver and executors sharing the checkpoint claim of checkpoint-pvc.yaml at /checkpoints.
# spark-submit waits until the driver pod ends and prints its state.
#
#   KUBECONFIG=... MAGNETAR_SERVICE_URL=pulsar://dev-broker.pulsar.svc:6650 \
#   MAGNETAR_ADMIN_URL=http://dev-broker.pulsar.svc:8080 spark-on-k8s/submit.sh [APP ARGS...]
#
# Env: KUBECONFIG (required; its first cluster's server is the master unless SPARK_MASTER
# is set, e.g. k8s://https://10.0.0.1:6443), SPARK_NAMESPACE (default spark; rbac.yaml and
# checkpoint-pvc.yaml applied there), SPARK_IMAGE (default magnetar/spark:<version>),
# SPARK_PULL_POLICY (default IfNotPresent; Never for images loaded into the node),
# SPARK_EXECUTORS (default 2; 1 core, 640 MiB heap + 512 MiB for Python each), SPARK_APP_NAME (default merchant-totals), SPARK_SUBMIT
# (default: spark-submit of the repository's venv, else of PATH), MAGNETAR_SOURCE /
# MAGNETAR_SINK (topics; the pipeline's defaults), SPARK_CHECKPOINT (default
# /checkpoints/<app name>), SPARK_SUBMIT_EXTRA (more spark-submit options, split on spaces).
# Extra arguments go to the pipeline (e.g. --trigger continuous).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${KUBECONFIG:?set KUBECONFIG to the kubeconfig of the cluster}"
: "${MAGNETAR_SERVICE_URL:?set MAGNETAR_SERVICE_URL (pulsar://<cluster>-broker.<namespace>.svc:6650)}"
: "${MAGNETAR_ADMIN_URL:?set MAGNETAR_ADMIN_URL (http://<cluster>-broker.<namespace>.svc:8080)}"
export KUBECONFIG
version=$(sed -nE 's/^__version__ = "(.*)"/\1/p' "$ROOT/src/magnetar/__init__.py")
NS=${SPARK_NAMESPACE:-spark}
IMAGE=${SPARK_IMAGE:-magnetar/spark:$version}
APP=${SPARK_APP_NAME:-merchant-totals}
if [ -z "${SPARK_MASTER:-}" ]; then
    # the first cluster's server, from a YAML or JSON kubeconfig
    server=$(grep -m1 -oE "\"?server\"?:[[:space:]]*[\"']?https?://[^\"'[:space:],}]+" "$KUBECONFIG" \
        | grep -oE 'https?://.*' || true)
    [ -n "$server" ] || { echo "submit.sh: no server in $KUBECONFIG; set SPARK_MASTER" >&2; exit 2; }
    SPARK_MASTER="k8s://$server"
fi
submit=${SPARK_SUBMIT:-}
if [ -z "$submit" ] && [ -x "$ROOT/.venv/bin/python" ]; then
    # the venv's pyspark package is a Spark home (bin/, jars/)
    SPARK_HOME=$("$ROOT/.venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null || true)
    [ -z "$SPARK_HOME" ] || { export SPARK_HOME; submit=$SPARK_HOME/bin/spark-submit; }
fi
if [ -z "$submit" ]; then
    submit=$(command -v spark-submit || true)
    [ -n "$submit" ] || { echo "submit.sh: no spark-submit: pip install pyspark" >&2; exit 2; }
fi
app_args=(--service-url "$MAGNETAR_SERVICE_URL" --admin-url "$MAGNETAR_ADMIN_URL"
          --checkpoint "${SPARK_CHECKPOINT:-/checkpoints/$APP}")
[ -z "${MAGNETAR_SOURCE:-}" ] || app_args+=(--source "$MAGNETAR_SOURCE")
[ -z "${MAGNETAR_SINK:-}" ] || app_args+=(--sink "$MAGNETAR_SINK")
vol=spark.kubernetes
exec "$submit" \
    --master "$SPARK_MASTER" \
    --deploy-mode cluster \
    --name "$APP" \
    --conf spark.kubernetes.namespace="$NS" \
    --conf spark.kubernetes.container.image="$IMAGE" \
    --conf spark.kubernetes.container.image.pullPolicy="${SPARK_PULL_POLICY:-IfNotPresent}" \
    --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
    --conf spark.kubernetes.driver.pod.name="$APP-driver" \
    --conf spark.executor.instances="${SPARK_EXECUTORS:-2}" \
    --conf spark.executor.cores=1 \
    --conf spark.driver.memory=640m \
    --conf spark.executor.memory=640m \
    --conf spark.driver.memoryOverhead=512m \
    --conf spark.executor.memoryOverhead=512m \
    --conf spark.kubernetes.driver.request.cores=100m \
    --conf spark.kubernetes.executor.request.cores=100m \
    --conf spark.sql.shuffle.partitions=4 \
    --conf spark.sql.session.timeZone=UTC \
    --conf spark.pyspark.python=/opt/magnetar/bin/python3 \
    --conf spark.pyspark.driver.python=/opt/magnetar/bin/python3 \
    --conf $vol.driver.volumes.persistentVolumeClaim.checkpoints.options.claimName=spark-checkpoints \
    --conf $vol.driver.volumes.persistentVolumeClaim.checkpoints.mount.path=/checkpoints \
    --conf $vol.executor.volumes.persistentVolumeClaim.checkpoints.options.claimName=spark-checkpoints \
    --conf $vol.executor.volumes.persistentVolumeClaim.checkpoints.mount.path=/checkpoints \
    --conf spark.kubernetes.submission.waitAppCompletion=true \
    ${SPARK_SUBMIT_EXTRA:-} \
    local:///opt/spark-apps/payments.py "${app_args[@]}" "$@"
