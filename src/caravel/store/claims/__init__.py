"""The claim: which jobs a worker takes and in which order, as one portable statement per source
of jobs (see :data:`~caravel.store.values.ClaimSource`).

Ready jobs are taken in ascending :data:`~caravel.store.schema.claim_rank` (the due time moved
earlier by ``PRIORITY_AGING_MS`` per point of priority), read from ``ix_caravel_jobs_ranked``;
running jobs whose lease expired in order of expiry, from ``ix_caravel_jobs_leases``. No one
index holds both orders, so ``"any"`` is the two bounded reads side by side: up to the batch
of each, expired leases first, and the batch taken from those (at most twice the batch sorted,
never every due row).

A claim of a queue with a per-key concurrency limit (:func:`claim_per_key`) reads the first
:data:`KEY_SCAN` due jobs of each source instead, numbers them per partition key, and takes a job
only while its key's running jobs plus those numbered before it stay within the limit: still one
bounded statement, and a key at its limit cannot hold back the keys behind it within that
horizon.

A claim of a fair queue (:func:`claim_fair`) takes its ready jobs round-robin across partition
keys: it finds the keys with due work by skipping through ``ix_caravel_jobs_fair`` (at most
:data:`KEY_SCAN` of them), reads at most the batch of each key's jobs in claim order, numbers
them within their key after the key's jobs already running, and takes the batch in order of
round, a key of weight ``w`` having ``w`` jobs in each round: the job numbered ``n`` of a key
with ``r`` jobs running is in round ``(r + n - 1) // w``. Within a round the keys take their
turns in key order, starting after the queue's cursor (``b_cursor``: the key its last claim
served last, ``''`` for none; :func:`caravel.flow.fairness.next_cursor`). So a key with jobs
running goes behind the keys with none, and claims of one job at a time go round the keys. A
lone key gets the whole batch, a key without due work takes no turn, and within a key jobs
keep the claim's order (priorities and their aging).
"""

from __future__ import annotations

from caravel.store.claims.chosen import claim_ids, due_weighed, running_by_key
from caravel.store.claims.fair import KeyJobs, claim_fair, in_key_jobs
from caravel.store.claims.keyed import claim_per_key
from caravel.store.claims.plain import claim, running_count
from caravel.store.claims.sources import KEY_SCAN, RANK_HORIZON_MS

__all__ = [
    "KEY_SCAN",
    "RANK_HORIZON_MS",
    "KeyJobs",
    "claim",
    "claim_fair",
    "claim_ids",
    "claim_per_key",
    "due_weighed",
    "in_key_jobs",
    "running_by_key",
    "running_count",
]
