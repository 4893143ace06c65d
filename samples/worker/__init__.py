"""The worker sample: the smallest complete, crash-safe Caravel worker.

Three jobs add 1, 2 and 3 to a report. The queue lives in ``queue.db`` and the results in
``results.db``, both in the folder named by ``CARAVEL_WORKER_DIRECTORY``. Run
``python -m caravel_samples.worker --help`` for the commands.
"""
