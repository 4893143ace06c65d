"""Anti-forgery tokens for the dashboard's forms.

A signed double submit: the dashboard sets a random nonce in an ``HttpOnly``, ``SameSite=Strict``
cookie, and every form carries ``HMAC(secret, nonce, principal name)``. A POST is accepted only
when the form's token matches the cookie it arrived with and the principal making it. Another
site can make a browser send the cookie but can neither read it nor compute the token without
the secret, and a token issued to one principal is refused for another.

The secret is random per process unless the application passes one (several processes behind
one address need the same secret, or a form loaded from one process fails on another).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from caravel.errors import ValidationError

__all__ = ["COOKIE", "FIELD", "CsrfSigner"]

COOKIE = "caravel_dashboard_csrf"
FIELD = "csrf_token"
_NONCE_BYTES = 24
_MAX_CHARS = 128
_CONTEXT = b"caravel-dashboard-csrf\x00"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class CsrfSigner:
    """Issues and checks tokens with one secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        if secret is not None and len(secret) < 16:
            raise ValidationError("csrf_secret", "must be at least 16 bytes")
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        """A value for the cookie."""
        return _b64(secrets.token_bytes(_NONCE_BYTES))

    @staticmethod
    def usable_nonce(value: str | None) -> bool:
        """Whether a cookie value looks like one of our nonces (else a new one is set)."""
        return (
            value is not None
            and 16 <= len(value) <= _MAX_CHARS
            and value.isascii()
            and all(c.isalnum() or c in "-_" for c in value)
        )

    def token(self, nonce: str, principal: str) -> str:
        """The form token for this cookie nonce and principal."""
        message = _CONTEXT + nonce.encode("ascii") + b"\x00" + principal.encode("utf-8")
        return _b64(hmac.new(self._secret, message, hashlib.sha256).digest())

    def valid(self, nonce: str | None, principal: str, presented: str | None) -> bool:
        """Whether ``presented`` is the token for this cookie nonce and principal."""
        if not self.usable_nonce(nonce) or presented is None or len(presented) > _MAX_CHARS:
            return False
        assert nonce is not None
        expected = self.token(nonce, principal).encode("ascii")
        return hmac.compare_digest(expected, presented.encode("utf-8", "replace"))
