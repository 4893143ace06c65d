"""Helpers for the backend tests: settings, a running application with an HTTP client, a
signed-in browser, and accounts created directly in the database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa
from caravel_samples.backend import accounts
from caravel_samples.backend.app import create_app
from caravel_samples.backend.db import create_engine
from caravel_samples.backend.guards import CSRF_HEADER
from caravel_samples.backend.jobs import QUEUE
from caravel_samples.backend.services import Services
from caravel_samples.backend.settings import Settings, load_settings
from fastapi import FastAPI

from caravel import Clock, QueueWorker

PASSWORD = "correct horse battery staple"
APP_TABLES = ("counter_results", "notes", "sessions", "users", "caravel_jobs")
BASE_URL = "https://backend.test"


def make_settings(provider: str, database: str, **overrides: Any) -> Settings:
    return load_settings(database_provider=provider, identity_database=database, **overrides)


def with_overrides(settings: Settings, **overrides: Any) -> Settings:
    return make_settings(settings.database_provider, settings.identity_database, **overrides)


@dataclass
class Running:
    app: FastAPI
    services: Services
    client: httpx.AsyncClient

    def browser(self) -> Browser:
        """Another client with its own cookie jar (another person or device)."""
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=BASE_URL)
        return Browser(client)

    def worker(self, **options: Any) -> QueueWorker:
        return self.services.new_worker(**options)


@asynccontextmanager
async def running(settings: Settings, *, clock: Clock | None = None) -> AsyncIterator[Running]:
    """The application, started (its lifespan entered) and stopped around the block."""
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield Running(app, app.state.services, client)


async def add_user(settings: Settings, email: str, *, operator: bool = False) -> accounts.User:
    engine = create_engine(settings)
    try:
        return await accounts.create_user(engine, email, PASSWORD, operator=operator)
    finally:
        await engine.dispose()


class Browser:
    """One client with a cookie jar, signing in and sending the antiforgery token."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.token: str | None = None

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def sign_in(self, email: str, password: str = PASSWORD) -> None:
        response = await self.client.post(
            "/auth/login", json={"email": email, "password": password}
        )
        assert response.status_code == 204, response.text
        self.token = await self.csrf()

    async def csrf(self) -> str:
        response = await self.client.get("/auth/csrf")
        assert response.status_code == 200, response.text
        token: str = response.json()["token"]
        return token

    def headers(self, **extra: str) -> dict[str, str]:
        assert self.token is not None, "sign in first"
        return {CSRF_HEADER: self.token, **extra}

    async def submit(self, key: str, quantity: object, **body: object) -> httpx.Response:
        return await self.client.post(
            "/counter/events",
            json={"quantity": quantity, **body},
            headers=self.headers(**{"Idempotency-Key": key}),
        )

    async def summary(self, **params: str) -> dict[str, Any]:
        response = await self.client.get("/counter/summary", params=params)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


async def drain(worker: QueueWorker) -> int:
    """Run ``worker`` one job at a time until nothing is due, then close it; returns how many
    jobs it claimed."""
    claimed = 0
    async with worker:
        while await worker.run_once(QUEUE):
            claimed += 1
    return claimed


async def count_rows(settings: Settings, table: str) -> int:
    engine = create_engine(settings)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}"))).scalar_one())
    finally:
        await engine.dispose()


async def gather(*aws: Any) -> list[Any]:
    return list(await asyncio.gather(*aws))
