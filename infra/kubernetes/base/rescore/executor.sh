#!/bin/bash
# Starts a Spark executor in the pipelines image: the executor branch of
# Spark's own Kubernetes entrypoint (resource-managers/kubernetes/docker/
# .../entrypoint.sh), which the pipelines image does not carry. Spark sets
# the SPARK_* variables on every executor pod it creates; the executor's
# Python workers are the image's interpreter (the driver's PYSPARK_PYTHON).
set -euo pipefail
spark_home=${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
classpath="${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*"
# Spark's executor JVM options, SPARK_JAVA_OPT_0, _1, ... in their order.
readarray -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/[^=]*=\(.*\)/\1/' || true)
exec java "${java_opts[@]}" \
  -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
  -cp "$classpath" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" \
  --executor-id "$SPARK_EXECUTOR_ID" \
  --cores "$SPARK_EXECUTOR_CORES" \
  --app-id "$SPARK_APPLICATION_ID" \
  --hostname "$SPARK_EXECUTOR_POD_IP" \
  --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
  --podName "$SPARK_EXECUTOR_POD_NAME"
