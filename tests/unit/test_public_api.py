"""Guard the public API: ``caravel.__all__`` changes only on purpose."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect

import pytest

import caravel

PUBLIC_NAMES = [
    "DEFAULT_TENANT",
    "AttemptOutcome",
    "AttemptRecord",
    "BatchOutcome",
    "BatchResult",
    "BatchStatus",
    "CancelOutcome",
    "CancellationSignal",
    "CaravelError",
    "ChainResult",
    "ChainStatus",
    "ClaimedJob",
    "Clock",
    "ConcurrencyLimit",
    "DatabaseNotFoundError",
    "DatabaseQueue",
    "DatabaseVersionError",
    "DeadLetterEvent",
    "Discard",
    "DispatchOptions",
    "DowngradeRefusedError",
    "EnqueueResult",
    "FailedDependency",
    "FailureCategory",
    "FailureOutcome",
    "IdempotencyConflictError",
    "JobCancelledError",
    "JobContext",
    "JobFailed",
    "JobProgress",
    "JobRegistry",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseLostError",
    "Leases",
    "MatchedJobs",
    "OptionsError",
    "Outbox",
    "OutboxEnvelope",
    "OutboxRelay",
    "PendingKeyConflictError",
    "PruneBatch",
    "QueueCounts",
    "QueueInspector",
    "QueueLimitRecord",
    "QueueOptions",
    "QueuePause",
    "QueueWorker",
    "RateLimit",
    "RegistrationError",
    "Retention",
    "RetryPolicy",
    "Schedule",
    "ScheduleError",
    "ScheduleRecord",
    "Scheduler",
    "SchemaNotReadyError",
    "SlotRun",
    "Snooze",
    "StagedIntent",
    "StepOutcome",
    "StoreError",
    "StuckEvent",
    "SyncQueue",
    "SyncQueueError",
    "SystemClock",
    "UnknownJobTypeError",
    "ValidationError",
    "WaitOutcome",
    "WorkerInfo",
    "WorkerOptions",
    "Workflow",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowResult",
    "WorkflowStatus",
    "WorkflowStep",
    "__version__",
    "add_outbox",
]

#: Public values rather than classes or functions: no docstring or ``__name__`` of their own.
CONSTANTS = {"DEFAULT_TENANT", "__version__"}

API_OBJECTS = [name for name in PUBLIC_NAMES if name not in CONSTANTS]


def test_all_is_exactly_the_reviewed_list() -> None:
    assert caravel.__all__ == PUBLIC_NAMES


def test_reviewed_list_is_sorted_and_unique() -> None:
    # Constants first, then the rest alphabetically (ruff's order for ``__all__``).
    assert sorted(PUBLIC_NAMES, key=lambda name: (not name.isupper(), name)) == PUBLIC_NAMES
    assert len(set(PUBLIC_NAMES)) == len(PUBLIC_NAMES)


def test_no_private_names_except_version() -> None:
    private = [name for name in caravel.__all__ if name.startswith("_")]
    assert private == ["__version__"]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_every_name_is_importable(name: str) -> None:
    module = importlib.import_module("caravel")
    assert hasattr(module, name)
    assert getattr(module, name) is getattr(caravel, name)


@pytest.mark.parametrize("name", API_OBJECTS)
def test_every_name_has_its_own_docstring(name: str) -> None:
    obj = getattr(caravel, name)
    # Its own docstring, not one inherited or generated (dataclasses write "Name(field: ...)").
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__
    assert isinstance(doc, str)
    assert doc.strip()
    assert not doc.startswith(f"{name}(")
    assert inspect.getdoc(obj)


@pytest.mark.parametrize("name", API_OBJECTS)
def test_every_name_is_defined_inside_caravel(name: str) -> None:
    obj = getattr(caravel, name)
    assert obj.__module__.split(".")[0] == "caravel"
    assert obj.__name__ == name


def test_the_default_tenant_is_a_valid_tenant_id() -> None:
    from caravel.validation import check_identifier

    assert check_identifier(caravel.DEFAULT_TENANT, "tenant_id") == "default"


def test_version_matches_the_installed_distribution() -> None:
    assert isinstance(caravel.__version__, str)
    assert caravel.__version__ == importlib.metadata.version("caravel-queue")


def test_every_public_name_has_a_home_and_nothing_else_does() -> None:
    assert sorted(caravel._HOMES) == sorted(name for name in PUBLIC_NAMES if name != "__version__")
