"""The shop's tests, in Django's test runner's conventions (``python -m caravel_samples.django
test``), with Caravel's testing helpers: ``drain`` runs the enqueued tasks through the real
worker, in this process.

They are ``TransactionTestCase``s: a ``TestCase`` wraps each test in a transaction that never
commits, and the worker, on connections of its own, would never see the jobs."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from caravel_samples.django.shop.models import Order
from caravel_samples.django.shop.tasks import send_receipt
from django.test import TransactionTestCase

from caravel.testing import drain


def work() -> list[Any]:
    return drain(send_receipt.get_backend().queue())


class OrderTests(TransactionTestCase):
    def post(self, body: object) -> Any:
        return self.client.post("/orders", json.dumps(body), content_type="application/json")

    def test_an_order_enqueues_its_receipt_and_reads_back_the_result(self) -> None:
        made = self.post({"email": "ann@example.com", "total_cents": 1250})
        self.assertEqual(made.status_code, 201)
        order_id, task_id = made.json()["id"], made.json()["receipt_task"]
        self.assertEqual(
            self.client.get(f"/orders/{order_id}").json()["receipt"]["status"], "READY"
        )

        runs = work()
        self.assertEqual([run.outcome for run in runs], ["completed"])
        result = send_receipt.get_result(task_id)
        self.assertEqual(
            result.return_value, {"order": order_id, "receipt": f"R-{order_id:06d}", "attempt": 1}
        )
        shown = self.client.get(f"/orders/{order_id}").json()
        self.assertTrue(shown["receipt_sent"])
        self.assertEqual(shown["receipt"]["status"], "SUCCESSFUL")
        self.assertEqual(shown["receipt"]["return_value"]["receipt"], f"R-{order_id:06d}")

    def test_a_failed_order_leaves_no_job(self) -> None:
        before = Order.objects.count()
        refused = self.post({"email": "not an address", "total_cents": 5})
        self.assertEqual(refused.status_code, 422)
        self.assertEqual(refused.json()["error"]["field"], "email")
        self.assertEqual(Order.objects.count(), before)
        self.assertEqual(work(), [])

    def test_a_rolled_back_transaction_drops_its_job(self) -> None:
        from django.db import transaction

        class Abort(Exception):
            pass

        ids: list[str] = []
        try:
            with transaction.atomic():
                order = Order.objects.create(email="bo@example.com", total_cents=1)
                ids.append(send_receipt.enqueue(order.pk).id)
                raise Abort
        except Abort:
            pass
        self.assertEqual(work(), [])
        from caravel.contrib.django.compat import TaskResultDoesNotExist

        with self.assertRaises(TaskResultDoesNotExist):
            send_receipt.get_result(ids[0])

    def test_the_receipt_is_sent_once_even_when_run_again(self) -> None:
        order = Order.objects.create(email="cy@example.com", total_cents=3)
        context = SimpleNamespace(attempt=2)  # a redelivery runs the same function again
        first = send_receipt.call(context, order.pk)
        sent = Order.objects.get(pk=order.pk).receipt_sent_at
        send_receipt.call(context, order.pk)
        self.assertEqual(Order.objects.get(pk=order.pk).receipt_sent_at, sent)
        self.assertEqual(first["receipt"], f"R-{order.pk:06d}")
