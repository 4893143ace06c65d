"""What ``caravel worker --app caravel_samples.flask.worker:registry`` loads.

The command line loads a registry by name and nothing else, so this module builds one on its
own engine, from ``CARAVEL_DATABASE_URL``: the variable ``caravel worker`` reads for its queue
URL too, so both name the same database. Without it the import fails, and the worker exits 2
naming the variable.
"""

from __future__ import annotations

from caravel_samples.flask.jobs import build_registry
from caravel_samples.flask.models import create_engine, session_factory
from caravel_samples.flask.settings import Settings

from caravel import SystemClock

registry = build_registry(
    session_factory(create_engine(Settings.from_environment())), SystemClock()
)
