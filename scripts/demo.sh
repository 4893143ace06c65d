#!/usr/bin/env bash
# The README's first command (`make demo`): run the worker sample end to end on SQLite in a new
# folder under ${TMPDIR:-/tmp}, saying what each step does and what the report means, then leave
# the folder and print the operator commands to look at its queue next.
# migrate -> enqueue the three demo jobs -> work until idle -> counts -> report -> next commands.
set -euo pipefail
PYTHON="${PYTHON:-python}"
# The caravel command installed beside that Python (.venv/bin/caravel after `make demo`).
case "$PYTHON" in
*/*) CARAVEL="$(dirname "$PYTHON")/caravel" ;;
*) CARAVEL=caravel ;;
esac
export CARAVEL_WORKER_DIRECTORY="$(mktemp -d -t caravel-demo-XXXXXX)"
QUEUE_URL="sqlite:///$CARAVEL_WORKER_DIRECTORY/queue.db"
trap 'echo "the demo stopped with an error; its files are in $CARAVEL_WORKER_DIRECTORY" >&2' ERR
sample() { "$PYTHON" -m caravel_samples.worker "$@"; }
say() { echo; printf '%s\n' "$@"; }

echo "Caravel's worker sample (samples/worker) on SQLite, in $CARAVEL_WORKER_DIRECTORY:"
echo "  queue.db    the queue: Caravel's tables, where jobs wait, run and finish"
echo "  results.db  the sample's own data: the row its handler saves for each job"

say "1. Apply both databases' migrations (Caravel never creates tables on its own):"
sample migrate
sample check-model

say "2. Enqueue three jobs that add 1, 2 and 3 to a report, each under an idempotency key" \
    "   (run this again and you get the same three jobs back, already_enqueued true):"
sample enqueue-demo

say "3. Work: claim a job under a lease, run its handler, record it completed; until none is left:"
while [ "$(sample work-once)" = '{"claimed": true}' ]; do echo "processed one job"; done

say "4. The queue's counts: completed 3, and nothing ready, running or in dead_letter:"
sample queue-status

say "5. The report, read from results.db:"
sample report
echo "   events: the rows the handler saved, one per job, keyed by the job's id; total: 1 + 2 + 3."
echo "   A job that runs again after a crash finds its row and adds nothing, so total stays 6."

say "The folder stays, so you can look at the queue with the operator's commands:" \
    "  $CARAVEL status --url $QUEUE_URL" \
    "  $CARAVEL jobs list --url $QUEUE_URL --queue reports" \
    "  $CARAVEL dashboard --url $QUEUE_URL" \
    "(the dashboard serves http://127.0.0.1:8765/ until Ctrl+C). Remove the folder when done:" \
    "  rm -r $CARAVEL_WORKER_DIRECTORY"
