"""The Flask sample: a synchronous web application that enqueues in its own transaction.

``POST /signups`` saves a signup row and enqueues its welcome job in one SQLAlchemy
transaction, through :class:`caravel.SyncQueue`: both commit together or neither exists. A
worker (``caravel worker`` with :mod:`caravel_samples.flask.worker`'s registry) runs the
synchronous ``welcome`` handler, which marks the signup as welcomed. The queue and the
application's table share one database, named by ``CARAVEL_DATABASE_URL`` or ``--url``. Run
``python -m caravel_samples.flask --help`` for the commands.
"""
