"""The autoscaling guide's blocks that the docs suite does not run: the PostgreSQL scaler's query
runs on a real PostgreSQL queue and counts what ``caravel metrics`` calls ready; the YAML parses,
KEDA's ``valueLocation`` finds a number in a real document, and the Prometheus rules name series
the endpoint writes."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from caravel.autoscaling import prometheus_text, signal_document
from caravel.inspector import QueueInspector
from caravel.limits import HELD_DUE_AT
from caravel.store import open_store
from caravel.store.protocol import Store
from tests.docs.blocks import ROOT, parse
from tests.store.conformance.builders import claim_one, insert, new_job
from tests.support.databases import SqliteTemplate

PAGE = ROOT / "docs" / "guides" / "autoscaling.md"


def _blocks(lang: str) -> list[str]:
    return [b.text for b in parse(PAGE) if b.lang == lang]


def test_the_yaml_parses() -> None:
    documents = [doc for text in _blocks("yaml") for doc in yaml.safe_load_all(text)]
    kinds = [doc.get("kind") for doc in documents]
    assert kinds.count("ScaledObject") == 1
    assert "TriggerAuthentication" in kinds


def _value_at(document: Any, path: str) -> Any:
    """The value at a GJSON path made of keys and list indexes only."""
    for part in path.split("."):
        document = document[int(part)] if part.isdigit() else document[part]
    return document


async def _seeded(url: str) -> QueueInspector:
    now = int(time.time() * 1000)
    store: Store = open_store(url).inner
    try:
        await insert(
            store,
            [
                new_job(1, queue="emails", created_at=now - 5_000),
                new_job(2, queue="emails", created_at=now - 4_000),
                new_job(3, queue="emails", created_at=now - 3_000),
                new_job(4, queue="emails", created_at=now, due_at=now + 3_600_000),  # delayed
                new_job(5, queue="emails", created_at=now, due_at=HELD_DUE_AT),  # held
                new_job(6, queue="reports", created_at=now - 3_000),
            ],
        )
        await claim_one(store, now - 1_000, queue="emails")  # running, not ready
    finally:
        await store.close()
    return QueueInspector(url)


@pytest.mark.postgres
async def test_the_postgresql_scaler_query_counts_the_ready_jobs(pg_url: str) -> None:
    (query,) = _blocks("sql")
    in_yaml = [
        trigger["metadata"]["query"]
        for text in _blocks("yaml")
        for doc in yaml.safe_load_all(text)
        if isinstance(doc, dict) and "triggers" in doc
        for trigger in doc["triggers"]
        if trigger["type"] == "postgresql"
    ]
    assert in_yaml == [query.strip()]
    async with await _seeded(pg_url) as inspector:
        signal = await inspector.scaling_signal("emails")
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            counted = conn.execute(sa.text(query)).scalar_one()
    finally:
        engine.dispose()
    assert counted == signal.queues[0].ready == 2


@pytest.fixture
def sqlite_url(sqlite_template: SqliteTemplate, tmp_path: Path) -> str:
    return sqlite_template.copy_to(tmp_path / "queue.db")


async def test_keda_reads_a_number_where_the_guide_points(sqlite_url: str) -> None:
    async with await _seeded(sqlite_url) as inspector:
        document = signal_document(await inspector.scaling_signal("emails"))
    (scaled,) = [
        doc
        for text in _blocks("yaml")
        for doc in yaml.safe_load_all(text)
        if isinstance(doc, dict) and doc.get("kind") == "ScaledObject"
    ]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["url"].endswith("/metrics?queue=emails")
    assert _value_at(document, trigger["metadata"]["valueLocation"]) == 2


async def test_the_alerts_name_series_the_endpoint_writes(sqlite_url: str) -> None:
    async with await _seeded(sqlite_url) as inspector:
        text = prometheus_text(await inspector.scaling_signal())
    written = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    rules = [
        rule
        for block in _blocks("yaml")
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and "groups" in doc
        for group in doc["groups"]
        for rule in group["rules"]
    ]
    assert len(rules) == 2
    for rule in rules:
        named = set(re.findall(r"\bcaravel_[a-z_]+", rule["expr"]))
        assert named, rule
        assert named <= written, (named, written)
