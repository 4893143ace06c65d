"""Every size limit of the queue, defined once.

Validation enforces them, the schema sizes its columns with them, and the outbox table (which
holds the same fields before they reach the queue) uses the same numbers, so a value that passes
validation always fits its column. Changing one here needs a migration.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_ATTEMPT_HISTORY",
    "HELD_DUE_AT",
    "MAX_ATTEMPTS",
    "MAX_ATTEMPT_HISTORY",
    "MAX_BATCH_JOBS",
    "MAX_CATEGORY_LENGTH",
    "MAX_CHAIN_STEPS",
    "MAX_DELAY_DAYS",
    "MAX_DETAIL_LENGTH",
    "MAX_ERROR_CLASS_LENGTH",
    "MAX_HOST_LENGTH",
    "MAX_JSON_DEPTH",
    "MAX_KEY_LENGTH",
    "MAX_META_BYTES",
    "MAX_OUTCOME_LENGTH",
    "MAX_PAYLOAD_LIMIT",
    "MAX_PRIORITY",
    "MAX_PROGRESS_BYTES",
    "MAX_PROGRESS_NOTE_LENGTH",
    "MAX_QUEUE_LIST_LENGTH",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_RESULT_LIMIT",
    "MAX_SCHEDULE_NAME_LENGTH",
    "MAX_SNOOZES",
    "MAX_STATE_LENGTH",
    "MAX_TAGS",
    "MAX_TAGS_LENGTH",
    "MAX_TAG_LENGTH",
    "MAX_TIMEOUT_DAYS",
    "MAX_TRACE_CONTEXT_LENGTH",
    "MAX_WIRE_NAME_LENGTH",
    "MAX_WORKFLOW_EDGES",
    "MAX_WORKFLOW_NAME_LENGTH",
    "MAX_WORKFLOW_STEPS",
    "MIN_PRIORITY",
    "PRIORITY_AGING_MS",
]

#: Queue names: ``[a-z0-9._-]``, 1 to 64 characters.
MAX_QUEUE_NAME_LENGTH = 64
#: A schedule name\'s length (it is part of each slot\'s idempotency key).
MAX_SCHEDULE_NAME_LENGTH = 64
#: Wire names (a job type's persisted name): ``[a-z0-9._-]``, 1 to 128 characters.
MAX_WIRE_NAME_LENGTH = 128
#: A workflow's name, a step's name, a signal's name.
MAX_WORKFLOW_NAME_LENGTH = 128
#: Tenant ids and idempotency keys: nonblank, at most 128 characters.
MAX_KEY_LENGTH = 128
#: The deepest nesting a payload may have (``[]`` and ``{}`` are one level).
MAX_JSON_DEPTH = 32
#: The largest ``max_payload_bytes`` a queue may be configured with (1 MiB).
MAX_PAYLOAD_LIMIT = 1024 * 1024
#: The largest attempt budget of one job.
MAX_ATTEMPTS = 100
#: A stored failure category (``HandlerFailed``, ...) or relay failure reason.
MAX_CATEGORY_LENGTH = 32
#: A job state as stored (``dead_letter`` is the longest).
MAX_STATE_LENGTH = 16
#: The W3C trace context carried by a job, as JSON; a longer one is not stored.
MAX_TRACE_CONTEXT_LENGTH = 512
#: A worker's host name in the worker registry (longer names are cut).
MAX_HOST_LENGTH = 255
#: A worker's queue names, comma separated, in the worker registry.
MAX_QUEUE_LIST_LENGTH = 1024
#: The class name of a failed attempt's exception (``module.QualName``; a longer one is cut).
MAX_ERROR_CLASS_LENGTH = 200
#: A detail an attempt keeps for operators (a handler marked it safe, or a redactor made it),
#: after control characters are stripped; a longer one is cut.
MAX_DETAIL_LENGTH = 500
#: An attempt's outcome as stored (``lease_expired`` is the longest).
MAX_OUTCOME_LENGTH = 16
#: The most attempts of one job whose records are kept (the older ones are only counted).
MAX_ATTEMPT_HISTORY = 100
#: How many attempt records per job a worker keeps unless told otherwise
#: (:attr:`~caravel.WorkerOptions.attempt_history`): a default, not a size.
DEFAULT_ATTEMPT_HISTORY = 20
#: A running job's progress as stored (JSON: done, total, note).
MAX_PROGRESS_BYTES = 1024
#: The note of a progress report, in characters (it fits :data:`MAX_PROGRESS_BYTES` with the
#: numbers, whatever its characters).
MAX_PROGRESS_NOTE_LENGTH = 200
#: A job's metadata as stored (a JSON object a handler set, key by key).
MAX_META_BYTES = 8192
#: The largest ``max_result_bytes`` a queue may be configured with (1 MiB).
MAX_RESULT_LIMIT = 1024 * 1024
#: How many times one job may snooze before a snooze dead-letters it instead.
MAX_SNOOZES = 100
#: Tags on one job, each ``[a-z0-9:._-]``, 1 to 64 characters.
MAX_TAGS = 16
MAX_TAG_LENGTH = 64
#: The stored form of a job's tags: ``,a,b,`` (each tag between commas, for exact filtering).
MAX_TAGS_LENGTH = MAX_TAGS * (MAX_TAG_LENGTH + 1) + 1
#: A job's priority: ``MIN_PRIORITY`` to ``MAX_PRIORITY``, higher claimed first, 0 by default.
MIN_PRIORITY = -100
MAX_PRIORITY = 100
#: What one point of priority is worth in waiting time (6 s): jobs are claimed in order of
#: their due time moved earlier by this much per point, so a job ages past any higher priority
#: once it has waited longer than the difference times this. The claim index is built on it:
#: changing it needs a migration.
PRIORITY_AGING_MS = 6_000
#: The due time of a job that waits for something before it may run (a chain's later step, a
#: batch's callback): 9999-12-31T23:59:59Z, past any claim's horizon. The database releases it
#: (sets its due time to the moment of release) in the transaction that finishes what it waits for.
HELD_DUE_AT = 253_402_300_799_000
#: Steps in one chain (its first job included).
MAX_CHAIN_STEPS = 100
#: Jobs in one batch (its callback not counted).
MAX_BATCH_JOBS = 10_000
#: Steps in one workflow (every member of an ``add_many`` group counts).
MAX_WORKFLOW_STEPS = 20_000
#: Dependency edges in one workflow (``after=["group"]`` counts one edge per member).
MAX_WORKFLOW_EDGES = 100_000
#: The longest relative delay (``DispatchOptions(delay=...)``): 100 years of 365 days.
MAX_DELAY_DAYS = 36_500
#: The longest execution timeout (``register(timeout=...)``, ``DispatchOptions(timeout=...)``):
#: 7 days, the longest ``max_lease_lifetime`` a queue may have (no handler runs longer).
MAX_TIMEOUT_DAYS = 7
