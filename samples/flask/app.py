"""The application factory: one :class:`caravel.SyncQueue` per application, shared by every
request thread, as a SQLAlchemy engine is.

The queue keeps its own pooled connections on a thread of its own; views call it like any
blocking library. :meth:`Services.close` releases it and the engine; it runs at interpreter
exit for an application nobody closed (a server stopped by Ctrl+C), and closing twice does
nothing.
"""

from __future__ import annotations

import atexit

from caravel_samples.flask import views
from caravel_samples.flask.jobs import build_registry
from caravel_samples.flask.models import create_engine, session_factory
from caravel_samples.flask.services import EXTENSION, Services
from caravel_samples.flask.settings import Settings
from caravel_samples.flask.signups import Signups
from flask import Flask

from caravel import Clock, SyncQueue, SystemClock

#: Request bodies are one small JSON object; anything bigger is refused with 413.
MAX_BODY_BYTES = 16 * 1024


def create_app(settings: Settings, *, clock: Clock | None = None) -> Flask:
    """The signups application on ``settings``' database, which must be migrated (``python -m
    caravel_samples.flask migrate``); nothing is created here. ``clock`` is for tests."""
    clock = clock if clock is not None else SystemClock()
    engine = create_engine(settings)
    sessions = session_factory(engine)
    queue = SyncQueue(settings.database_url, build_registry(sessions, clock), clock=clock)
    services = Services(engine, queue, Signups(sessions, queue, clock))
    atexit.register(services.close)

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.extensions[EXTENSION] = services
    views.install(app)
    return app
