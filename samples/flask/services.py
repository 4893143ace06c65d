"""What the views use, kept on the application: the signups service, and the queue and engine
under it."""

from __future__ import annotations

import atexit
from dataclasses import dataclass

import sqlalchemy as sa
from caravel_samples.flask.signups import Signups
from flask import Flask, current_app

from caravel import SyncQueue

#: Where the application keeps its services, in ``app.extensions``.
EXTENSION = "caravel_samples.flask"


@dataclass
class Services:
    """What the views use: the signups service, and the queue and engine under it."""

    engine: sa.Engine
    queue: SyncQueue
    signups: Signups

    def close(self) -> None:
        atexit.unregister(self.close)
        self.queue.close()
        self.engine.dispose()


def services_of(app: Flask | None = None) -> Services:
    """The services of ``app`` (by default the application handling this request)."""
    target = app if app is not None else current_app
    services: Services = target.extensions[EXTENSION]
    return services
