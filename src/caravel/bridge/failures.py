"""Why a bridge could not carry a message: small, fixed names used as metric attributes, log
fields and the dead-letter header, never a payload or an exception's text."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "EGRESS_FAILURES",
    "HEADER_FAILURE",
    "INGRESS_FAILURES",
    "EgressFailure",
    "IngressFailure",
]

#: Why a message was rejected to the broker's dead letters on ingress:
#: ``MalformedJson`` (the body is not JSON, or not UTF-8), ``UnknownJobType`` (no route or
#: header names a registered type), ``InvalidPayload`` (the type's validation refused it),
#: ``PayloadTooLarge`` (over the queue's ``max_payload_bytes``), ``MissingTenant`` (no tenant
#: header where one is required), ``InvalidTenant`` (a tenant header that is not a tenant id),
#: ``MissingMessageId`` / ``InvalidMessageId`` (no id to dedupe by, or one that is not an
#: idempotency key), ``IdempotencyConflict`` (the same message id came before with another
#: payload or type).
IngressFailure = Literal[
    "MalformedJson",
    "UnknownJobType",
    "InvalidPayload",
    "PayloadTooLarge",
    "MissingTenant",
    "InvalidTenant",
    "MissingMessageId",
    "InvalidMessageId",
    "IdempotencyConflict",
]

#: Why an outbox intent stayed pending on egress: ``NoRoute`` (no destination configured for
#: its job type or queue), ``Unroutable`` (the broker had nowhere to put it), ``BrokerRefused``
#: (the broker negatively acknowledged it).
EgressFailure = Literal["NoRoute", "Unroutable", "BrokerRefused"]

INGRESS_FAILURES: frozenset[str] = frozenset(get_args(IngressFailure))
EGRESS_FAILURES: frozenset[str] = frozenset(get_args(EgressFailure))

#: The header a dead-lettered message carries its :data:`IngressFailure` in, where the adapter
#: can add one.
HEADER_FAILURE = "caravel-failure"
