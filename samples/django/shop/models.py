"""An order, and the id of its receipt task's result."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    receipt_task = models.CharField(max_length=128, blank=True)
    receipt_sent_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk}"
