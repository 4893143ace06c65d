"""The threads synchronous handlers run in.

A :class:`~concurrent.futures.ThreadPoolExecutor` joins its threads when the interpreter exits,
so one synchronous handler that ignores cancellation would keep a stopped worker's process alive
(and a second Ctrl+C would then end in a traceback from that join). These threads are daemon
threads: the worker waits for them during its shutdown grace, reports any still running as
abandoned (their jobs run again once their leases end), and the process exits without them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["HandlerThreads"]

P = ParamSpec("P")
T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class HandlerThreads(Executor):
    """At most ``size`` reusable daemon threads, started as work needs them."""

    def __init__(self, size: int, name: str = "caravel-job") -> None:
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._busy = 0
        self._closed = False

    @property
    def busy(self) -> int:
        """Calls submitted and not finished yet (running, or waiting for a thread)."""
        return self._busy

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a handler after the worker closed")
            self._busy += 1
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args, kwargs = item
            del item
            running = future.set_running_or_notify_cancel()
            failure: BaseException | None = None
            result: Any = None
            if running:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the awaiting task, as an executor does
                    failure = exc
            # No longer busy before the awaiting task hears of it: the worker counts busy
            # threads as abandoned the moment its last job is acknowledged.
            with self._lock:
                self._busy -= 1
            if running:
                if failure is not None:
                    future.set_exception(failure)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs, failure, result
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None and item[0].cancel():
                        self._busy -= 1
            for _ in self._threads:
                self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
