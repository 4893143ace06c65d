#!/usr/bin/env bash
# End-to-end smoke test of the worker sample, from a freshly built wheel installed into a fresh
# virtual environment, in fresh temporary folders. Exits non-zero on the first failed check.
#
#   scripts/smoke-worker.sh            # builds the wheel from this checkout
#   PYTHON=python3.12 scripts/smoke-worker.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SCRATCH="$(mktemp -d -t caravel-smoke-XXXXXX)"
WORKER_PID=""
cleanup() {
    if [ -n "$WORKER_PID" ] && kill -0 "$WORKER_PID" 2>/dev/null; then kill -KILL "$WORKER_PID"; fi
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
expect_eq() { [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"; }

step "build the wheel and install it into a fresh virtual environment"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$SCRATCH/dist" "$ROOT"
"$PYTHON" -m venv "$SCRATCH/venv"
"$SCRATCH/venv/bin/python" -m pip install --quiet "$SCRATCH"/dist/caravel_queue-*.whl
SAMPLE=("$SCRATCH/venv/bin/python" -m caravel_samples.worker)
cd "$SCRATCH"   # nothing from the checkout is importable from here

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what="$2"; shift 2
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for $what"
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------------------------
step "an unmigrated folder: check-model and work both exit 1"
export CARAVEL_WORKER_DIRECTORY="$SCRATCH/unmigrated"
mkdir "$CARAVEL_WORKER_DIRECTORY"
set +e
"${SAMPLE[@]}" check-model; code=$?
"${SAMPLE[@]}" work; work_code=$?
set -e
expect_eq "$code" 1 "check-model on an unmigrated folder"
expect_eq "$work_code" 1 "work on an unmigrated folder"

# ---------------------------------------------------------------------------------------------
step "migrate, check-model, enqueue the demo twice"
export CARAVEL_WORKER_DIRECTORY="$SCRATCH/crash"
mkdir "$CARAVEL_WORKER_DIRECTORY"
"${SAMPLE[@]}" migrate
"${SAMPLE[@]}" check-model
first="$("${SAMPLE[@]}" enqueue-demo)"
second="$("${SAMPLE[@]}" enqueue-demo)"
expect_eq "$(echo "$second" | grep -o '"already_enqueued": true' | wc -l | tr -d ' ')" 3 \
    "the repeated enqueue returns the original jobs"
expect_eq "$(echo "$first" | grep -o '"job_id": "[^"]*"')" "$(echo "$second" | grep -o '"job_id": "[^"]*"')" \
    "job ids of the repeated enqueue"

step "crash right after saving the first result, before acknowledging (exit 73)"
set +e
CARAVEL_WORKER_CRASH_AFTER_RESULT=1 CARAVEL_WORKER_LEASE_SECONDS=1 "${SAMPLE[@]}" work-once
code=$?
set -e
expect_eq "$code" 73 "the crash run's exit code"

step "let the lease expire, then work-once until nothing is claimed"
sleep 1.5
for _ in $(seq 1 10); do
    out="$(CARAVEL_WORKER_LEASE_SECONDS=1 "${SAMPLE[@]}" work-once)"
    echo "$out"
    [ "$out" = '{"claimed": false}' ] && break
done
expect_eq "$out" '{"claimed": false}' "the queue drained"
expect_eq "$("${SAMPLE[@]}" report)" '{"events": 3, "total": 6}' "report after recovery"

step "the demo enqueued again after completion changes nothing"
"${SAMPLE[@]}" enqueue-demo >/dev/null
expect_eq "$("${SAMPLE[@]}" work-once)" '{"claimed": false}' "no new work after re-enqueue"
expect_eq "$("${SAMPLE[@]}" report)" '{"events": 3, "total": 6}' "report after re-enqueue"

step "queue-status is read-only: the database files are byte-for-byte unchanged"
before="$(sha256sum "$CARAVEL_WORKER_DIRECTORY/queue.db" "$CARAVEL_WORKER_DIRECTORY/results.db")"
"${SAMPLE[@]}" queue-status
after="$(sha256sum "$CARAVEL_WORKER_DIRECTORY/queue.db" "$CARAVEL_WORKER_DIRECTORY/results.db")"
expect_eq "$after" "$before" "database checksums around queue-status"
"${SAMPLE[@]}" queue-status | grep -q '"completed": 3' || fail "queue-status shows 3 completed"

# ---------------------------------------------------------------------------------------------
step "continuous mode: run work, enqueue from a second process, stop with SIGTERM"
export CARAVEL_WORKER_DIRECTORY="$SCRATCH/continuous"
mkdir "$CARAVEL_WORKER_DIRECTORY"
"${SAMPLE[@]}" migrate >/dev/null
"${SAMPLE[@]}" work &
WORKER_PID=$!
"${SAMPLE[@]}" enqueue-demo >/dev/null
report_is_complete() { [ "$("${SAMPLE[@]}" report)" = '{"events": 3, "total": 6}' ]; }
wait_for 30 "the continuous worker to finish the demo" report_is_complete
kill -TERM "$WORKER_PID"
set +e; wait "$WORKER_PID"; code=$?; set -e
WORKER_PID=""
expect_eq "$code" 0 "continuous worker exit code after SIGTERM"

# ---------------------------------------------------------------------------------------------
step "SIGTERM mid-job: clean exit, the job is not acknowledged, a later worker recovers it"
export CARAVEL_WORKER_DIRECTORY="$SCRATCH/sigterm"
mkdir "$CARAVEL_WORKER_DIRECTORY"
"${SAMPLE[@]}" migrate >/dev/null
"${SAMPLE[@]}" enqueue-demo >/dev/null
# A 5-second lease: long enough that the job is still on its first attempt when the SIGTERM
# lands, even on a loaded machine (each lease that runs out uses up one of its 3 attempts).
CARAVEL_WORKER_LEASE_SECONDS=5 CARAVEL_WORKER_HANDLER_DELAY_MS=30000 \
    "${SAMPLE[@]}" work --shutdown-grace 0 &
WORKER_PID=$!
one_running() { "${SAMPLE[@]}" queue-status | grep -q -e '"running": 1' -e '"expired": 1'; }
wait_for 30 "a job to be mid-run" one_running
kill -TERM "$WORKER_PID"
set +e; wait "$WORKER_PID"; code=$?; set -e
WORKER_PID=""
expect_eq "$code" 0 "exit code after SIGTERM mid-job"
expect_eq "$("${SAMPLE[@]}" report)" '{"events": 0, "total": 0}' "nothing recorded by the cancelled job"
sleep 5.5   # the cancelled job's 5-second lease expires
for _ in $(seq 1 10); do
    out="$(CARAVEL_WORKER_LEASE_SECONDS=1 "${SAMPLE[@]}" work-once)"
    [ "$out" = '{"claimed": false}' ] && break
done
expect_eq "$("${SAMPLE[@]}" report)" '{"events": 3, "total": 6}' "report after recovery from SIGTERM"

step "smoke test passed"
