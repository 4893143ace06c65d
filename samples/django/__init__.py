"""The Django sample: a small shop whose order view enqueues a receipt task inside the same
``transaction.atomic()`` as the order, on Caravel's Django Tasks backend; the task's return
value is read back with ``get_result``. Run it as ``python -m caravel_samples.django``
(Django's ``manage.py``); docs/guides/django.md walks through it."""
