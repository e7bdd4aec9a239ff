"""Where the async steps' calls run (``framework.operators.async_io.Calls``).

- ``CallLoop``: an asyncio event loop on a thread of its own, for a live member and a Spark
  task. Calls are submitted from the task's thread; their completions wait in a queue until
  that thread takes them (``dispatch``), so an async step's results, state and outputs are
  handled on the task's thread only, as in Flink's mailbox.
- ``InlineCalls``: the TestDriver's. Each call runs to its end when it is made, on a private
  loop in the caller's thread: deterministic, and outputs come in input order (an unordered
  step's too).
- ``DeferredCalls``: the TestDriver's on request. Calls wait until the test runs them
  (``run``), so a test can checkpoint, crash and restore with records in flight.

Each may stand a test's function in for a step's (``fakes``: step name -> function).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from typing import Any

Done = Callable[[bool, Any], None]


class _Fakes:
    def __init__(self, fakes: Mapping[str, Any] | None) -> None:
        self.fakes = dict(fakes or {})

    def function(self, step: str, fn: Any) -> Any:
        return self.fakes.get(step, fn)


class CallLoop(_Fakes):
    """The calls of one process's async steps on an event loop thread (started at the first)."""

    def __init__(self, fakes: Mapping[str, Any] | None = None) -> None:
        super().__init__(fakes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._done: collections.deque[tuple[Done, Future[Any]]] = collections.deque()
        self._event = threading.Event()
        self._futures: set[Future[Any]] = set()

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="fw-calls", daemon=True)
        self._thread.start()
        return loop

    def submit(self, coro: Coroutine[Any, Any, Any], done: Done) -> Callable[[], Any]:
        loop = self._loop or self._start()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        self._futures.add(future)

        def finished(f: Future[Any]) -> None:  # on the loop's thread
            self._done.append((done, f))
            self._event.set()

        future.add_done_callback(finished)
        return future.cancel

    def wait(self, timeout_s: float) -> None:
        if self._done:
            return
        self._event.wait(timeout_s)
        self._event.clear()

    def dispatch(self) -> int:
        n = 0
        queue = self._done
        while queue:
            done, future = queue.popleft()
            self._futures.discard(future)
            if future.cancelled():
                continue
            exc = future.exception()
            if exc is None:
                done(True, future.result())
            else:
                done(False, exc)
            n += 1
        return n

    def close(self) -> None:
        """Cancel what is in flight and stop the loop's thread."""
        for future in list(self._futures):
            future.cancel()
        loop, self._loop = self._loop, None
        if loop is not None and self._thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
            loop.close()


class InlineCalls(_Fakes):
    """Each call run to its end when it is made, on a private loop in the caller's thread."""

    def __init__(self, fakes: Mapping[str, Any] | None = None) -> None:
        super().__init__(fakes)
        self._loop = asyncio.new_event_loop()

    def _run(self, coro: Coroutine[Any, Any, Any], done: Done) -> None:
        try:
            result = self._loop.run_until_complete(coro)
        except Exception as exc:  # noqa: BLE001 - the call's failure, handed to its step
            done(False, exc)
        else:
            done(True, result)

    def submit(self, coro: Coroutine[Any, Any, Any], done: Done) -> Callable[[], Any]:
        self._run(coro, done)
        return lambda: None

    def wait(self, timeout_s: float) -> None:
        pass

    def dispatch(self) -> int:
        return 0

    def close(self) -> None:
        self._loop.close()


class DeferredCalls(InlineCalls):
    """Calls that wait until ``run`` (or a full step's ``wait``) runs them, oldest first."""

    def __init__(self, fakes: Mapping[str, Any] | None = None) -> None:
        super().__init__(fakes)
        self._queue: collections.deque[tuple[Coroutine[Any, Any, Any], Done]] = collections.deque()

    def submit(self, coro: Coroutine[Any, Any, Any], done: Done) -> Callable[[], Any]:
        item = (coro, done)
        self._queue.append(item)

        def cancel() -> None:
            if item in self._queue:
                self._queue.remove(item)
                coro.close()

        return cancel

    def wait(self, timeout_s: float) -> None:
        if self._queue:  # a full step waits: the oldest call completes
            self._run(*self._queue.popleft())

    def run(self) -> int:
        """Run every call waiting, oldest first (calls they lead to as well); how many."""
        n = 0
        while self._queue:
            self._run(*self._queue.popleft())
            n += 1
        return n

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def close(self) -> None:
        for coro, _done in self._queue:
            coro.close()
        self._queue.clear()
        super().close()
