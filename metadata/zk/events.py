"""Where watch and session callbacks run: one thread of ours per session, one
callback at a time, in the order ZooKeeper reported the events, never on
kazoo's connection thread (a callback may then call back into the client)."""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)


class WatchHandle:
    """Returned by the watch_* methods; cancel() stops further callbacks."""

    def __init__(self, description: str):
        self.description = description
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class EventThread:
    """Runs callbacks one at a time, in submission order, off kazoo's threads."""

    _STOP = object()

    def __init__(self, name: str):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, handle: WatchHandle | None, callback: Callable[..., Any], *args: Any) -> None:
        self._queue.put((handle, callback, args))

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout_s: float) -> None:
        self._queue.put(self._STOP)
        if not self.is_current():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            handle, callback, args = item
            if handle is not None and handle.cancelled:
                continue
            try:
                callback(*args)
            except Exception:
                log.exception("ZooKeeper callback %r failed", getattr(callback, "__name__", callback))
