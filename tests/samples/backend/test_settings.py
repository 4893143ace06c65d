"""Settings from CARAVEL__ environment variables, and start-up refusing invalid ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from caravel_samples.backend.settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[3]


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "backend.db")
    settings = load_settings()
    assert settings.database_provider == "sqlite"
    assert settings.run_worker is False
    assert settings.allow_registration is False
    assert settings.secure_cookies is True
    assert settings.session_hours == 8
    assert (
        settings.limits.concurrency,
        settings.limits.login_permit_limit,
        settings.limits.login_window_seconds,
    ) == (32, 10, 60)
    assert settings.limits.body_timeout_seconds == 10.0
    assert settings.limits.body_min_bytes_per_second == 1024
    assert settings.api_docs is False
    assert settings.database_url == f"sqlite:///{Path('backend.db').resolve()}"


def test_nested_names_use_double_underscores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "postgresql://app@db/app")
    monkeypatch.setenv("CARAVEL__DATABASE_PROVIDER", "postgres")
    monkeypatch.setenv("CARAVEL__RUN_WORKER", "true")
    monkeypatch.setenv("CARAVEL__LIMITS__CONCURRENCY", "1024")
    monkeypatch.setenv("CARAVEL__LIMITS__LOGIN_PERMIT_LIMIT", "1")
    monkeypatch.setenv("CARAVEL__LIMITS__LOGIN_WINDOW_SECONDS", "3600")
    monkeypatch.setenv("CARAVEL__WORKER__CONCURRENCY", "8")
    settings = load_settings()
    assert settings.run_worker is True
    assert settings.limits.concurrency == 1024
    assert settings.limits.login_permit_limit == 1
    assert settings.limits.login_window_seconds == 3600
    assert settings.worker.concurrency == 8
    assert settings.database_url == "postgresql://app@db/app"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CARAVEL__LIMITS__CONCURRENCY", "0", "must be an integer from 1 to 1024"),
        ("CARAVEL__LIMITS__CONCURRENCY", "1025", "must be an integer from 1 to 1024"),
        ("CARAVEL__LIMITS__CONCURRENCY", "lots", "must be an integer from 1 to 1024"),
        ("CARAVEL__LIMITS__LOGIN_PERMIT_LIMIT", "1001", "must be an integer from 1 to 1000"),
        ("CARAVEL__LIMITS__LOGIN_WINDOW_SECONDS", "0", "must be an integer from 1 to 3600"),
        ("CARAVEL__LIMITS__LOGIN_WINDOW_SECONDS", "3601", "must be an integer from 1 to 3600"),
        ("CARAVEL__DATABASE_PROVIDER", "oracle", "must be sqlite, postgres or mariadb"),
        ("CARAVEL__RUN_WORKER", "maybe", "must be true or false"),
        ("CARAVEL__SESSION_HOURS", "721", "must be an integer from 1 to 720"),
        ("CARAVEL__LIMITS__CONCURENCY", "5", "is not a known setting"),
        (
            "CARAVEL__LIMITS__BODY_TIMEOUT_SECONDS",
            "0",
            "must be a number of seconds above 0 and at most 300",
        ),
        (
            "CARAVEL__LIMITS__BODY_TIMEOUT_SECONDS",
            "301",
            "must be a number of seconds above 0 and at most 300",
        ),
        ("CARAVEL__LIMITS__BODY_MIN_BYTES_PER_SECOND", "0", "must be an integer from 1 to 1048576"),
        ("CARAVEL__API_DOCS", "sometimes", "must be true or false"),
    ],
)
def test_invalid_values_name_the_setting_and_its_range(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "backend.db")
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert f"{name}: {message}" in str(caught.value)
    assert value not in str(caught.value).replace(name, "").replace(message, "")


def test_the_database_must_match_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="CARAVEL__IDENTITY_DATABASE: is required"):
        load_settings()
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "postgresql://app:secret@db/app")
    with pytest.raises(SettingsError, match="must be a file path") as caught:
        load_settings()
    assert "secret" not in str(caught.value)
    monkeypatch.setenv("CARAVEL__DATABASE_PROVIDER", "postgres")
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "backend.db")
    with pytest.raises(SettingsError, match="must be a postgresql:// URL"):
        load_settings()
    monkeypatch.setenv("CARAVEL__DATABASE_PROVIDER", "mariadb")
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", "postgresql://app:secret@db/app")
    with pytest.raises(SettingsError, match="must be a mariadb:// URL") as caught:
        load_settings()
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize("scheme", ["mariadb", "mysql", "mariadb+pymysql"])
def test_the_mariadb_provider_takes_a_mariadb_url(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    monkeypatch.setenv("CARAVEL__DATABASE_PROVIDER", "mariadb")
    monkeypatch.setenv("CARAVEL__IDENTITY_DATABASE", f"{scheme}://app:secret@db:3306/app")
    # The queue's form: no driver named, Caravel picks its own.
    assert load_settings().database_url == "mariadb://app:secret@db:3306/app"


@pytest.mark.parametrize(
    "command", [["serve"], ["migrate"], ["users", "create", "--email", "a@b.co"]]
)
def test_commands_refuse_to_start_with_invalid_settings(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CARAVEL__")} | {
        "CARAVEL__IDENTITY_DATABASE": "backend.db",
        "CARAVEL__LIMITS__CONCURRENCY": "5000",
    }
    result = subprocess.run(
        [sys.executable, "-m", "caravel_samples.backend", *command],
        cwd=ROOT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "CARAVEL__LIMITS__CONCURRENCY: must be an integer from 1 to 1024" in result.stderr
