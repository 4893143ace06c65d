"""The security primitives: Argon2 password hashes, session tokens and antiforgery tokens.

- Passwords are stored only as Argon2id hashes (argon2-cffi's recommended parameters). Checking
  a sign-in for an unknown email still verifies a hash, so the answer takes as long as for a
  wrong password.
- A session token is 32 random bytes sent in an HttpOnly cookie. The database keeps only its
  SHA-256, so a copy of the sessions table cannot be replayed as cookies.
- An antiforgery token is a fresh random nonce and an HMAC-SHA256 of it keyed with the session
  token. It is bound to that one session (a new sign-in needs a new token), every call returns a
  different one, and checking it needs no extra storage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()

_CSRF_CONTEXT = b"caravel-backend-antiforgery:"
_NONCE_BYTES = 16
#: Longer presented tokens are rejected before any decoding.
MAX_TOKEN_CHARS = 128


def hash_password(password: str) -> str:
    """The Argon2id hash to store. CPU- and memory-hard: call it off the event loop."""
    return _hasher.hash(password)


@cache
def _decoy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(24))


def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches ``stored``. With ``stored=None`` (no such account) a decoy
    hash is checked anyway and the answer is ``False``. Call it off the event loop."""
    try:
        matched = _hasher.verify(stored if stored is not None else _decoy_hash(), password)
    except (VerificationError, InvalidHashError):
        return False
    return bool(matched) and stored is not None


def needs_rehash(stored: str) -> bool:
    """True when ``stored`` was made with weaker parameters than the current ones."""
    try:
        return _hasher.check_needs_rehash(stored)
    except InvalidHashError:
        return False


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


def session_key(token: str) -> str:
    """What the sessions table stores for a token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(session_token: str, nonce: bytes) -> bytes:
    return hmac.new(session_token.encode("utf-8"), _CSRF_CONTEXT + nonce, hashlib.sha256).digest()


def new_csrf_token(session_token: str) -> str:
    """A fresh antiforgery token for the session whose cookie holds ``session_token``."""
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return f"{_b64(nonce)}.{_b64(_mac(session_token, nonce))}"


def csrf_token_valid(session_token: str, presented: str) -> bool:
    """Whether ``presented`` was issued by :func:`new_csrf_token` for this session."""
    if len(presented) > MAX_TOKEN_CHARS or presented.count(".") != 1:
        return False
    nonce_text, mac_text = presented.split(".")
    try:
        nonce, mac = _unb64(nonce_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        return False
    if len(nonce) != _NONCE_BYTES:
        return False
    return hmac.compare_digest(mac, _mac(session_token, nonce))
