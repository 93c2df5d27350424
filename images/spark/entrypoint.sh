#!/bin/bash
# Entrypoint of the Spark image for Spark on Kubernetes. Spark starts its pods with one
# argument naming the role:
#   driver ARGS...   (cluster mode) spark-submit in client mode inside the driver pod, bound to
#                    the pod's address (SPARK_DRIVER_BIND_ADDRESS, set by Spark)
#   executor         the executor JVM, configured by the SPARK_EXECUTOR_* / SPARK_DRIVER_URL
#                    variables and the SPARK_JAVA_OPT_<n> options Spark puts in the pod
# Anything else runs as a command (e.g. `spark-submit ...`, `python3 ...`, `bash`).
set -euo pipefail

case "${1:-}" in
    driver)
        shift
        exec "$SPARK_HOME/bin/spark-submit" --deploy-mode client \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?set by Spark}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            "$@"
        ;;
    executor)
        shift
        java_opts=()
        while IFS= read -r opt; do java_opts+=("$opt"); done < <(
            env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
        exec "$JAVA_HOME/bin/java" "${java_opts[@]}" \
            -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
            -cp "${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "${SPARK_DRIVER_URL:?}" \
            --executor-id "${SPARK_EXECUTOR_ID:?}" \
            --cores "${SPARK_EXECUTOR_CORES:?}" \
            --app-id "${SPARK_APPLICATION_ID:?}" \
            --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}"
        ;;
    "")
        exec bash
        ;;
    *)
        exec "$@"
        ;;
esac
