"""One background thread that runs the store's asynchronous calls in submission order.

An engine hands a batch of blocks to `KVStore.put_async` and goes on with its step; the copy into
the lease happens here. Between calls, and at least every `idle_period_s`, the thread runs the
store's maintenance (session expiry, lost and idle leases) so those happen even while the engine
makes no calls.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_STOP = object()


class Worker:
    def __init__(self, name: str, idle: Callable[[], object], idle_period_s: float) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = idle
        self._period = idle_period_s
        self._closed = False
        self._submit_lock = threading.Lock()  # so nothing is queued behind the stop marker
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._submit_lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            self._queue.put((fn, future))
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted before this call has finished (FIFO: a no-op queued
        now completes after all of them). TimeoutError if that takes longer than `timeout`."""
        self.submit(lambda: None).result(timeout)

    def close(self, timeout: float | None = None) -> None:
        with self._submit_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._period)
            except queue.Empty:
                self._guarded(self._idle)
                continue
            if item is _STOP:
                return
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def _guarded(self, fn: Callable[[], object]) -> None:
        # An eternal task logs its own failure at once and keeps going.
        try:
            fn()
        except Exception:
            log.exception("kv.maintenance_failed")
