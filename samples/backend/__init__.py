"""The web backend sample: sign-in, an authenticated API and a durable counter queue.

A FastAPI application that keeps accounts, sessions, notes, counter results and the Caravel
queue in one database (a SQLite file or PostgreSQL). Run ``python -m caravel_samples.backend
--help`` for its commands; ``docs/guides/backend-sample.md`` walks through it.
"""
