"""The operations dashboard: an ASGI application over one queue database.

Install the ``web`` extra (``pip install caravel-queue[web]``), then either run it on its own::

    caravel dashboard --url postgresql://app@db/app --bind 127.0.0.1:8765

or mount it inside your ASGI application, deciding who may do what::

    from caravel.web import Principal, dashboard

    ops = dashboard(DATABASE_URL, authorize=lambda request: Principal.operator("ops"))
    app.mount("/ops", ops)        # and `await ops.close()` when the application stops

Without ``authorize`` it answers only requests made on its own machine to a loopback address.
Nothing else in the ``caravel`` package imports this module, so the core library never needs
Starlette or Jinja2. See ``docs/guides/dashboard.md``.
"""

from caravel.web.app import ROUTES, Dashboard, RouteSpec, dashboard
from caravel.web.auth import Authorize, Principal, local_request
from caravel.web.metrics import MetricsApp, metrics_app

__all__ = [
    "ROUTES",
    "Authorize",
    "Dashboard",
    "MetricsApp",
    "Principal",
    "RouteSpec",
    "dashboard",
    "local_request",
    "metrics_app",
]
