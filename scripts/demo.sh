#!/usr/bin/env bash
# The README's first command: run the worker sample end to end on SQLite in a temporary folder.
# migrate -> enqueue the three demo jobs -> work until idle -> print the report.
set -euo pipefail
PYTHON="${PYTHON:-python}"
export CARAVEL_WORKER_DIRECTORY="$(mktemp -d -t caravel-demo-XXXXXX)"
trap 'rm -rf "$CARAVEL_WORKER_DIRECTORY"' EXIT
sample() { "$PYTHON" -m caravel_samples.worker "$@"; }

echo "queue and results in $CARAVEL_WORKER_DIRECTORY"
sample migrate
sample check-model
sample enqueue-demo
while [ "$(sample work-once)" = '{"claimed": true}' ]; do echo "processed one job"; done
sample queue-status
echo "report:"
sample report
