"""Flow control: what limits how much of a queue runs at once, and how fast it starts.

Concurrency limits (:class:`ConcurrencyLimit`) cap how many jobs of a queue run at once across
every worker and host, and how many run at once per partition key (the tenant by default, or a
value each job carries: see ``JobRegistry.register(partition_by=...)`` and
``DispatchOptions.partition_key``). Limits are stored in the database, behind the store's
``queue_limit_*`` operations: operators change them with ``caravel queues limits``, code
declares them with :meth:`JobRegistry.limit <caravel.JobRegistry.limit>`, and running workers
follow them within one poll interval.

Rate limits (:class:`RateLimit`) cap the weighted starts of a queue, and of each partition key,
within any window of a period (1 second to 1 day): a sliding window over a log of starts
(:mod:`caravel.flow.window`), stored and followed as the concurrency limits are.

Fair dispatch (``ConcurrencyLimit(fair=True, weights=...)``) claims a queue's ready jobs
round-robin across partition keys, optionally weighted per key, stored and followed the same way.

The exact rule each claim keeps, and why it is exact, is in ``docs/guides/flow-control.md``.
"""

from __future__ import annotations

from caravel.flow.concurrency import MAX_CONCURRENCY_LIMIT, ConcurrencyLimit, check_limit
from caravel.flow.fairness import MAX_KEY_WEIGHT, MAX_WEIGHTS, check_weights
from caravel.flow.partition import TENANT, check_partition_by, partition_key_of
from caravel.flow.rate import MAX_RATE, MAX_WEIGHT, RateLimit, check_rate, check_weight

__all__ = [
    "MAX_CONCURRENCY_LIMIT",
    "MAX_KEY_WEIGHT",
    "MAX_RATE",
    "MAX_WEIGHT",
    "MAX_WEIGHTS",
    "TENANT",
    "ConcurrencyLimit",
    "RateLimit",
    "check_limit",
    "check_partition_by",
    "check_rate",
    "check_weight",
    "check_weights",
    "partition_key_of",
]
