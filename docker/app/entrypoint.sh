#!/usr/bin/env bash
# app-entrypoint ROLE [ARGS]: one part of the compose application, on the host's loopback.
#
#   spark-master     a Spark standalone Master on 127.0.0.1:$SPARK_MASTER_PORT (web UI $SPARK_MASTER_WEBUI_PORT)
#   spark-worker     a Worker of $SPARK_WORKER_CORES cores and $SPARK_WORKER_MEMORY for that Master
#   spark-ready      exit 0 when the Master lists an ALIVE Worker (the healthcheck)
#   run-examples     examples/spark_foreach_stream.py, then examples/spark_streaming_source.py,
#                    against $ZOOKEEPER_CONNECT on the Master (ZKCONSUMER_SPARK_MASTER)
#   anything else    exec'd as given (e.g. python examples/spark_foreach_stream.py --zookeeper ...)
#
# /data is shared by the runner and the Worker (a compose volume): the examples' temporary
# files (TMPDIR=/data/tmp: the streaming example's table and checkpoint) are visible to both.
set -euo pipefail
mkdir -p "$TMPDIR"
SPARK_CLASS="$SPARK_HOME/bin/spark-class"
MASTER_URL="spark://127.0.0.1:$SPARK_MASTER_PORT"
export ZKCONSUMER_SPARK_MASTER="${ZKCONSUMER_SPARK_MASTER:-$MASTER_URL}"

role="${1:-run-examples}"
[ "$#" -gt 0 ] && shift
case "$role" in
  spark-master)
    exec "$SPARK_CLASS" org.apache.spark.deploy.master.Master --host 127.0.0.1 \
      --port "$SPARK_MASTER_PORT" --webui-port "$SPARK_MASTER_WEBUI_PORT" ;;
  spark-worker)
    mkdir -p /data/spark-work
    exec "$SPARK_CLASS" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 \
      --port "$SPARK_WORKER_PORT" --webui-port "$SPARK_WORKER_WEBUI_PORT" \
      --cores "$SPARK_WORKER_CORES" --memory "$SPARK_WORKER_MEMORY" --work-dir /data/spark-work "$MASTER_URL" ;;
  spark-ready)
    exec python - <<PY
import json, sys, urllib.request
state = json.load(urllib.request.urlopen("http://127.0.0.1:$SPARK_MASTER_WEBUI_PORT/json", timeout=2))
sys.exit(0 if any(w.get("state") == "ALIVE" for w in state.get("workers", [])) else 1)
PY
    ;;
  run-examples)
    python examples/spark_foreach_stream.py --zookeeper "$ZOOKEEPER_CONNECT" "$@"
    exec python examples/spark_streaming_source.py --zookeeper "$ZOOKEEPER_CONNECT" "$@" ;;
  *)
    exec "$role" "$@" ;;
esac
