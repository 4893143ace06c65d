"""Django's test runner, as the sample needs it: its default is the shop's tests (the sample
is an installed package, not a folder ``manage.py test`` could discover from), and it closes
Caravel's queue connections before the test database is dropped (PostgreSQL refuses to drop a
database that connections still use)."""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner

from caravel.contrib.django import close_queues


class SampleRunner(DiscoverRunner):
    def build_suite(self, test_labels: Any = None, **kwargs: Any) -> Any:
        return super().build_suite(test_labels or ["caravel_samples.django.shop.tests"], **kwargs)

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_queues()
        super().teardown_databases(old_config, **kwargs)
