"""Django's own Tasks tests, from the sdist of the pinned Django (``constraints.txt``), run
against :class:`~caravel.contrib.django.CaravelBackend`, adapted only in configuration.

``fetch`` downloads that sdist from PyPI with pip, once, and keeps its ``tests/tasks`` under
``.cache/`` (git-ignored; Django's code is never committed). ``run`` runs those tests with
Django's own test runner: wherever they configure Django's ``ImmediateBackend`` (the backend
that runs tasks), they get ``CaravelBackend`` on a queue database of ours, whose worker
(``caravel.testing.drain``) runs each task as it is enqueued, as the immediate backend does.
``excluded.txt`` lists what does not run, and why. ``tests/django/test_upstream.py`` runs it
all on SQLite and PostgreSQL, in the Django 6 job (``make test-django312``).
"""
