"""The OpenTelemetry SDK for every test here: installed once for the session
(:func:`tests.support.telemetry.install_sdk`), its exporter open only while a test of this
folder runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.telemetry import Sdk, Telemetry, install_sdk


@pytest.fixture(scope="session")
def otel_sdk() -> Sdk:
    return install_sdk()


@pytest.fixture(autouse=True)
def otel(otel_sdk: Sdk) -> Iterator[Telemetry]:
    otel_sdk.exporter.clear()
    otel_sdk.processor.open = True
    try:
        yield Telemetry(otel_sdk)
    finally:
        otel_sdk.processor.open = False
        otel_sdk.processor.waiters.clear()
        otel_sdk.exporter.clear()
