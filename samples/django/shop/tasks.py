"""The receipt task. The worker runs it (``manage.py caravel_worker``); what it returns is
stored as the job's result and read back with ``send_receipt.get_result(id).return_value``."""

from __future__ import annotations

from typing import Any

from caravel_samples.django.shop.models import Order
from django.db import transaction
from django.utils import timezone

from caravel.contrib.django.compat import SOURCE

if SOURCE == "django.tasks":  # Django 6
    from django.tasks import task
else:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task(queue_name="receipts", takes_context=True)
def send_receipt(context: Any, order_id: int) -> dict[str, Any]:
    """ "Send" the receipt once: a repeat after a crash finds it sent and changes nothing."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.receipt_sent_at is None:
            order.receipt_sent_at = timezone.now()
            order.save(update_fields=["receipt_sent_at"])
    return {
        "order": order.pk,
        "receipt": f"R-{order.pk:06d}",
        "attempt": context.attempt,
    }
