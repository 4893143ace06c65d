"""An event loop on a thread of its own, for blocking callers of async code.

The synchronous facade runs the library's one async implementation here: every call from any
thread is handed to this loop and waited for, so connections, pools and background tasks live
on one loop for the object's whole life (as a SQLAlchemy engine lives in one process). The
thread starts on the first call, so an object made before a web server forks its workers
starts its loop in the worker that uses it.
"""

from __future__ import annotations

import _thread
import asyncio
import atexit
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from caravel.errors import SyncQueueError

__all__ = ["LoopThread"]

T = TypeVar("T")

#: How long closing waits for the loop's last work (releasing connections) to finish.
CLOSE_TIMEOUT = 10.0


class LoopThread:
    """Runs coroutine functions on a private event loop, one thread per instance."""

    def __init__(self, name: str, on_close: Callable[[], Awaitable[None]]) -> None:
        self._name = name
        self._on_close = on_close
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._closed = False
        # Closed at interpreter exit, before the loop's thread is stopped mid-task: nothing
        # pending (a wake-up task, a pooled connection) is left behind.
        self._exit_hook = _close_at_exit(weakref.ref(self))
        _at_exit(self._exit_hook)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started if need be)."""
        return self._started()

    def caller_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started if need be), for a caller that works on its own thread and
        hands the loop only what must run there; refused, as :meth:`call` is, from the loop's
        own thread, where waiting for the loop would wait for itself."""
        loop = self._started()
        if threading.get_ident() == self._thread_id:
            raise SyncQueueError(
                "a synchronous queue was called from its own event loop; "
                "await the async DatabaseQueue there instead"
            )
        return loop

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """Run ``fn(*args)`` on the loop and return its result (or raise its exception)."""
        loop = self.caller_loop()
        # A bare lock, released by the task's done callback, instead of a concurrent Future:
        # waking the caller is the larger part of a handed-over call's cost.
        coro = fn(*args)  # made here, run there
        finished = _thread.allocate_lock()
        finished.acquire()
        holder: list[asyncio.Task[T]] = []

        def done(task: asyncio.Task[T]) -> None:
            finished.release()

        def start() -> None:
            task = loop.create_task(coro)
            holder.append(task)
            task.add_done_callback(done)

        loop.call_soon_threadsafe(start)
        finished.acquire()
        return holder[0].result()

    def close(self) -> None:
        """Run ``on_close`` on the loop, stop it and join its thread. Closing again does
        nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        self._exit_hook.cancelled = True  # type: ignore[attr-defined]
        if loop is None or thread is None or self._pid != os.getpid():
            return
        try:
            closing = _call(self._on_close, ())
            asyncio.run_coroutine_threadsafe(closing, loop).result(CLOSE_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_TIMEOUT)

    @property
    def _thread_id(self) -> int | None:
        thread = self._thread
        return None if thread is None else thread.ident

    def _started(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and self._pid == os.getpid() and not self._closed:
            return loop
        with self._lock:
            if self._closed:
                raise SyncQueueError("this synchronous queue is closed; open a new one")
            if self._loop is not None and self._pid != os.getpid():
                raise SyncQueueError(
                    "this synchronous queue was used before the process forked; "
                    "create it in each worker process (or use it first there)"
                )
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._pid = os.getpid()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=_run, args=(self._loop, ready), name=self._name, daemon=True
                )
                self._thread.start()
                ready.wait()
            return self._loop


async def _call(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    return await fn(*args)


def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
        # Whatever is still scheduled (nothing, after a clean close) is cancelled, not left
        # pending for the interpreter to complain about at exit.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _close_at_exit(ref: weakref.ref[LoopThread]) -> Callable[[], None]:
    def close() -> None:
        found = ref()
        if found is not None and not getattr(close, "cancelled", False):
            found.close()

    return close


def _at_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` when the interpreter exits, while thread pools still take work: the hooks
    of ``threading._register_atexit`` run before ``concurrent.futures`` refuses new work (and
    before ``atexit``'s), latest first. Where it is missing, ``atexit`` is the fallback."""
    # concurrent.futures registers the hook that makes its thread pools refuse work when it is
    # first imported: imported now, that hook runs after ours (the SQLite store's threads are
    # such pools, and closing hands them work).
    import concurrent.futures.thread  # noqa: F401

    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every CPython since 3.9 has it
        atexit.register(hook)
        return
    try:
        register(hook)
    except RuntimeError:  # registered while the interpreter is already shutting down
        atexit.register(hook)
