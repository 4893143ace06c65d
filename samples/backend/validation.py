"""Input rules shared by the request models and the command line.

Every string that reaches the database or a hash must be encodable as UTF-8 (JSON can carry
lone surrogates) and free of control characters (NUL above all: PostgreSQL text cannot hold it,
SQLite can); otherwise the request is rejected with 400 naming the field, before any query, so
both databases answer alike rather than one failing deep inside a driver. Note text may keep
line breaks and tabs.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, Field

MAX_EMAIL_CHARS = 254
MIN_NEW_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024
MAX_NOTE_CHARS = 2000
MAX_IDEMPOTENCY_KEY_CHARS = 128


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def has_control_characters(value: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in value)


def check_text(value: str) -> str:
    """Any text field: valid UTF-8 text without control characters."""
    if not _encodable(value):
        raise ValueError("must be valid text")
    if has_control_characters(value):
        raise ValueError("must not contain control characters")
    return value


def normalize_email(value: str) -> str:
    """The stored form of an email address: trimmed and lowercased. Raises ``ValueError`` when
    it is not a plausible ``local@domain`` address."""
    email = value.strip().lower()
    local, at, domain = email.rpartition("@")
    if (
        not at
        or not local
        or "." not in domain.strip(".")
        or len(email) > MAX_EMAIL_CHARS
        or not _encodable(email)
        or has_control_characters(email)
        or any(ch.isspace() for ch in email)
    ):
        raise ValueError("must be an email address of at most 254 characters")
    return email


def check_password(value: str) -> str:
    """Any password offered at sign-in: 1 to 1024 characters of text, no control characters."""
    if not (1 <= len(value) <= MAX_PASSWORD_CHARS) or not _encodable(value):
        raise ValueError("must be 1 to 1024 characters of text")
    return check_text(value)


def check_new_password(value: str) -> str:
    """A password for a new account: 12 to 1024 characters of text."""
    check_password(value)
    if len(value) < MIN_NEW_PASSWORD_CHARS:
        raise ValueError("must be at least 12 characters")
    return value


def check_note_text(value: str) -> str:
    """Note text: 1 to 2000 characters, not only spaces; line breaks and tabs are allowed, other
    control characters are not."""
    if not (1 <= len(value) <= MAX_NOTE_CHARS) or not value.strip() or not _encodable(value):
        raise ValueError("must be 1 to 2000 characters and not only spaces")
    if has_control_characters(value.replace("\n", "").replace("\r", "").replace("\t", "")):
        raise ValueError("must not contain control characters other than line breaks and tabs")
    return value


def check_idempotency_key(values: list[bytes]) -> str:
    """The one ``Idempotency-Key`` header value, read as UTF-8 (not HTTP's historical Latin-1,
    so ``price-€`` is the six characters it looks like): nonblank, at most 128 characters, no
    control characters. Raises ``ValueError`` with the rule otherwise."""
    if len(values) != 1:
        raise ValueError("send exactly one Idempotency-Key header")
    try:
        key = values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("Idempotency-Key must be valid UTF-8") from None
    if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY_CHARS or has_control_characters(key):
        raise ValueError(
            "Idempotency-Key must be nonblank, at most 128 characters, without control characters"
        )
    return key


#: For the OpenAPI schema: nonblank text without control characters (the check above is exact).
KEY_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"

#: The email offered at sign-in: only text rules, so a malformed address is the generic 401.
LoginEmail = Annotated[
    str, Field(min_length=1, max_length=MAX_EMAIL_CHARS), AfterValidator(check_text)
]
Email = Annotated[str, Field(max_length=MAX_EMAIL_CHARS), AfterValidator(normalize_email)]
Password = Annotated[
    str, Field(min_length=1, max_length=MAX_PASSWORD_CHARS), AfterValidator(check_password)
]
NewPassword = Annotated[
    str,
    Field(min_length=MIN_NEW_PASSWORD_CHARS, max_length=MAX_PASSWORD_CHARS),
    AfterValidator(check_new_password),
]
NoteText = Annotated[
    str, Field(min_length=1, max_length=MAX_NOTE_CHARS), AfterValidator(check_note_text)
]
