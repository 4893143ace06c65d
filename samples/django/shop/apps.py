from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "caravel_samples.django.shop"
    label = "shop"
