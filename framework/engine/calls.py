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
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

log = logging.getLogger("framework.calls")
Done = Callable[[bool, Any], None]
_GATHER_S = 0.001  # completions gathered before the task's thread is woken: one wake-up for many


class _Fakes:
    def __init__(self, fakes: Mapping[str, Any] | None) -> None:
        self.fakes = dict(fakes or {})

    def function(self, step: str, fn: Any) -> Any:
        return self.fakes.get(step, fn)


class _Call:
    """One call submitted to a ``CallLoop``: its task once the loop has started it."""

    __slots__ = ("cancelled", "coro", "done", "task")

    def __init__(self, coro: Coroutine[Any, Any, Any], done: Done) -> None:
        self.coro, self.done = coro, done
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False


class CallLoop(_Fakes):
    """The calls of one process's async steps on an event loop thread (started at the first).

    Calls made while the task's thread processes a batch are handed to the loop together
    (``flush``, one wake-up of the loop for all of them); each completion is queued for
    ``dispatch``, and the first of a run of them wakes a ``wait``."""

    def __init__(self, fakes: Mapping[str, Any] | None = None) -> None:
        super().__init__(fakes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._new: list[_Call] = []  # submitted, not yet handed to the loop
        self._done: collections.deque[_Call] = collections.deque()
        self._event = threading.Event()
        self._live: set[_Call] = set()
        self._tasks: dict[asyncio.Task[Any], _Call] = {}  # on the loop's thread: the call of each task

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="fw-calls", daemon=True)
        self._thread.start()
        return loop

    def submit(self, coro: Coroutine[Any, Any, Any], done: Done) -> Callable[[], Any]:
        call = _Call(coro, done)
        self._new.append(call)
        self._live.add(call)
        return lambda: self._cancel(call)

    def flush(self) -> None:
        """Hand the calls submitted since the last flush to the loop, in one wake-up."""
        if not self._new:
            return
        batch, self._new = self._new, []
        loop = self._loop or self._start()
        loop.call_soon_threadsafe(self._begin, loop, batch)

    def _begin(self, loop: asyncio.AbstractEventLoop, batch: list[_Call]) -> None:  # on the loop's thread
        for call in batch:
            if call.cancelled:
                call.coro.close()
                continue
            call.task = task = loop.create_task(call.coro)
            self._tasks[task] = call
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:  # on the loop's thread
        call = self._tasks.pop(task)
        first = not self._done
        self._done.append(call)
        if first:  # the task's thread is woken once for the completions of the next moment
            asyncio.get_running_loop().call_later(_GATHER_S, self._event.set)

    def _cancel(self, call: _Call) -> None:
        call.cancelled = True
        self._live.discard(call)
        task, loop = call.task, self._loop
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel)

    def wait(self, timeout_s: float) -> None:
        self.flush()
        if self._done:
            return
        self._event.wait(timeout_s)
        self._event.clear()

    def dispatch(self) -> int:
        self.flush()
        n = 0
        queue = self._done
        while queue:
            call = queue.popleft()
            self._live.discard(call)
            task = call.task
            if call.cancelled or task is None or task.cancelled():
                continue
            exc = task.exception()
            if exc is None:
                call.done(True, task.result())
            else:
                call.done(False, exc)
            n += 1
        return n

    def close(self, timeout_s: float = 5.0) -> None:
        """Let what the steps handed it last (their functions' ``close``) finish, for at most
        ``timeout_s``, then stop the loop's thread; calls still in flight are cancelled."""
        self.flush()
        loop, self._loop = self._loop, None
        if loop is None or self._thread is None:
            return
        left = [c.task for c in self._live if c.task is not None and not c.cancelled]

        async def finish() -> None:
            if left:
                await asyncio.wait(left, timeout=timeout_s)
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        try:
            asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout_s + 5)
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            log.debug("the calls' loop did not finish its last calls: %s", exc)
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

    def flush(self) -> None:
        pass

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

    def __del__(self) -> None:  # a test that ends with calls waiting: they are dropped, not warned about
        for coro, _done in self._queue:
            coro.close()

    def close(self) -> None:
        for coro, _done in self._queue:
            coro.close()
        self._queue.clear()
        super().close()
