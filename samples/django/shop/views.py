"""``POST /orders`` saves an order and enqueues its receipt in one transaction;
``GET /orders/<id>`` shows the order and its receipt task's result."""

from __future__ import annotations

import json
from typing import Any

from caravel_samples.django.shop.models import Order
from caravel_samples.django.shop.tasks import send_receipt
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from caravel.contrib.django import options


def _error(status: int, field: str, rule: str) -> JsonResponse:
    return JsonResponse({"error": {"field": field, "rule": rule}}, status=status)


@csrf_exempt  # an API for the sample's curl; a browser form keeps Django's CSRF check
@require_POST
def orders(request: HttpRequest) -> JsonResponse:
    try:
        body = json.loads(request.body)
    except ValueError:
        return _error(400, "body", "must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "body", "must be a JSON object")
    email, total = body.get("email"), body.get("total_cents")
    if not isinstance(email, str) or "@" not in email or len(email) > 254:
        return _error(422, "email", "must be an email address")
    if isinstance(total, bool) or not isinstance(total, int) or not 0 < total < 10**9:
        return _error(422, "total_cents", "must be a whole number of cents above 0")
    with transaction.atomic():
        order = Order.objects.create(email=email, total_cents=total)
        # On Django's own connection: the job commits with the order, or neither exists.
        receipt = options(send_receipt, idempotency_key=f"receipt:{order.pk}")
        result = receipt.enqueue(order.pk)
        order.receipt_task = result.id
        order.save(update_fields=["receipt_task"])
    return JsonResponse({"id": order.pk, "receipt_task": result.id}, status=201)


@require_GET
def order(request: HttpRequest, order_id: int) -> JsonResponse:
    found = Order.objects.filter(pk=order_id).first()
    if found is None:
        return _error(404, "order_id", "no such order")
    result = send_receipt.get_result(found.receipt_task)
    receipt: dict[str, Any] = {"status": str(result.status), "attempts": result.attempts}
    if result.status == "SUCCESSFUL":
        receipt["return_value"] = result.return_value
    return JsonResponse(
        {
            "id": found.pk,
            "email": found.email,
            "receipt_sent": found.receipt_sent_at is not None,
            "receipt": receipt,
        }
    )
