"""One queue per application: the requests enqueue through the queue ``create_app`` made, and
closing the application's services closes it (closing again does nothing). SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from caravel_samples.flask.app import create_app
from caravel_samples.flask.jobs import WELCOME
from caravel_samples.flask.services import services_of
from caravel_samples.flask.settings import Settings

from caravel import SyncQueueError
from caravel.testing import assert_enqueued
from tests.samples.flask.support import sign_up


def test_closing_the_application_closes_its_queue(settings: Settings) -> None:
    app = create_app(settings)
    services = services_of(app)
    for n in range(3):
        assert sign_up(app.test_client(), f"user{n}@example.com").status_code == 201
    assert_enqueued(services.queue, WELCOME, count=3)

    services.close()
    services.close()  # closing twice does nothing
    with pytest.raises(SyncQueueError):
        services.queue.get_status("01a2330b-8ca1-7cb0-b79f-bf312dca5d12", "signups")
