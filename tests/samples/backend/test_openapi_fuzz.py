"""Schemathesis against the served OpenAPI schema: no generated request may get a 5xx answer.

Every operation gets valid-looking and deliberately invalid requests, each sent twice: once
anonymously, and once signed in (session cookie and antiforgery token attached) so generated
bodies, headers and queries reach the endpoints' own validation (``schemathesis`` is a dev
dependency).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from caravel_samples.backend.settings import Settings

from tests.samples.backend.serving import REAL_PASSWORD, command, serving, sign_in_over_http

#: Signing out would end the session the rest of the run relies on; these get no credentials.
SESSION_ENDERS = {"/auth/logout", "/auth/sessions/revoke"}
EXAMPLES = 15


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[int, dict[str, str]]]:
    created = command(
        settings, "users", "create", "--email", "fuzz@example.com", stdin=REAL_PASSWORD
    )
    assert created.returncode == 0, created.stderr
    with serving(
        settings,
        CARAVEL__ALLOW_REGISTRATION="true",
        CARAVEL__LIMITS__LOGIN_PERMIT_LIMIT="1000",
    ) as port:
        yield port, sign_in_over_http(port, "fuzz@example.com", REAL_PASSWORD)


@pytest.mark.slow
def test_no_generated_request_gets_a_server_error(
    served: tuple[int, dict[str, str]],
) -> None:
    port, signed_in = served
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json")
    failures: list[tuple[str, str, int]] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
            )
            def check(case: Any) -> None:
                credentials = {} if case.path in SESSION_ENDERS else signed_in
                for headers in ({}, credentials):
                    response = case.call(headers=headers)
                    if response.status_code >= 500:
                        failures.append((case.method, case.path, response.status_code))

            try:
                check()
            except hypothesis.errors.Unsatisfiable:
                # Nothing to make invalid: the operation takes no parameters or body.
                assert mode is schemathesis.GenerationMode.NEGATIVE
    assert failures == []
