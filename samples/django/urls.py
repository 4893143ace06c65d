"""``/orders`` (the shop's API) and ``/admin/`` (with Caravel's read-only job list)."""

from __future__ import annotations

from caravel_samples.django.shop import views
from django.contrib import admin

from django.urls import path

urlpatterns = [
    path("orders", views.orders),
    path("orders/<int:order_id>", views.order),
    path("admin/", admin.site.urls),
]
