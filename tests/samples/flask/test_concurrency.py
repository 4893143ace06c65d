"""One queue shared by request threads: concurrent signups, and concurrent retries of one
request, each answered correctly, with exactly one row and one job per signup. SQLite and
PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from caravel_samples.flask.jobs import WELCOME
from caravel_samples.flask.settings import Settings
from flask import Flask
from werkzeug.test import TestResponse

from caravel import SyncQueue
from caravel.testing import assert_enqueued
from tests.samples.flask.support import count_rows, sign_up

THREADS = 8


def _at_once(app: Flask, requests: list[tuple[str, str | None]]) -> list[TestResponse]:
    def one(request: tuple[str, str | None]) -> TestResponse:
        return sign_up(app.test_client(), *request)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, requests))


def test_concurrent_signups_each_get_a_row_and_a_job(
    app: Flask, queue: SyncQueue, settings: Settings
) -> None:
    answers = _at_once(app, [(f"user{n}@example.com", None) for n in range(THREADS)])
    assert [a.status_code for a in answers] == [201] * THREADS
    assert len({a.get_json()["job_id"] for a in answers}) == THREADS
    assert_enqueued(queue, WELCOME, count=THREADS)
    assert count_rows(settings, "signups") == THREADS


def test_concurrent_retries_of_one_request_make_one_signup(
    app: Flask, queue: SyncQueue, settings: Settings
) -> None:
    answers = _at_once(app, [("ann@example.com", "the-one-key")] * THREADS)
    assert sorted(a.status_code for a in answers) == [200] * (THREADS - 1) + [201]
    assert len({a.get_json()["job_id"] for a in answers}) == 1
    assert_enqueued(queue, WELCOME, count=1)
    assert count_rows(settings, "signups") == 1
