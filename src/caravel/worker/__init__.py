"""The worker: claim jobs under leases, run their handlers, record outcomes.

:class:`QueueWorker` (in :mod:`~caravel.worker.service`) composes one module per concern: the
lease protocol (:mod:`~caravel.worker.leases`), the fetch loop with expired-lease recovery
(:mod:`~caravel.worker.fetcher`), the handler runner (:mod:`~caravel.worker.runner`), the lease
watchdog (:mod:`~caravel.worker.watchdog`), the acknowledger, the one place that persists
outcomes (:mod:`~caravel.worker.acknowledger`), presence in the worker registry
(:mod:`~caravel.worker.presence`), wake-ups (:mod:`~caravel.worker.wakeups`), the application's
alert hooks (:mod:`~caravel.worker.hooks`), the stop of a run
(:mod:`~caravel.worker.stopping`) and the supervision of its loops
(:mod:`~caravel.worker.supervisor`). Nothing here imports the command line or the dashboard.
"""

from caravel.worker.leases import FailureOutcome, Leases
from caravel.worker.service import QueueWorker
from caravel.worker.stopping import AbandonedJob, Stopping

__all__ = ["AbandonedJob", "FailureOutcome", "Leases", "QueueWorker", "Stopping"]
