"""Coordinator: threads of one process ask each other to stop (TF1's ``tf.train.Coordinator``).

A MonitoredSession hands one to its hooks' ``after_create_session``; a hook that starts
threads registers them, and the session asks them to stop and joins them on ``close``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from mpiflow import errors


class Coordinator:
    """A stop flag shared by threads, remembering the first exception that requested it.

    Args:
        clean_stop_exception_types: exception types that stop the threads without being
            re-raised by ``join`` (default: ``OutOfRangeError``, as in TensorFlow).
    """

    def __init__(self, clean_stop_exception_types=None):
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (errors.OutOfRangeError,)
        self._clean_stop_exception_types = tuple(clean_stop_exception_types)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info_to_raise = None
        self._registered_threads = set()
        self._joined = False

    def should_stop(self) -> bool:
        return self._stop_event.is_set()

    def request_stop(self, ex=None) -> None:
        """Ask every thread to stop; remember ``ex`` (an exception or exc_info) to re-raise.

        Only the first exception is kept; clean-stop exception types are not kept.
        """
        with self._lock:
            if ex is not None and self._exc_info_to_raise is None:
                exc_info = ex if isinstance(ex, tuple) else (type(ex), ex, ex.__traceback__)
                if not issubclass(exc_info[0], self._clean_stop_exception_types):
                    self._exc_info_to_raise = exc_info
            self._stop_event.set()

    def clear_stop(self) -> None:
        """Forget a requested stop and its exception, so the threads can be started again."""
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            self._stop_event.clear()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """Context manager that requests a stop with the exception raised in its body."""
        try:
            yield
        except Exception:  # noqa: BLE001  (any error of a worker thread stops them all)
            self.request_stop(ex=sys.exc_info())

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested or ``timeout`` seconds pass; return whether it was."""
        return self._stop_event.wait(timeout)

    def register_thread(self, thread: threading.Thread) -> None:
        with self._lock:
            self._registered_threads.add(thread)

    def join(self, threads=None, stop_grace_period_secs: float = 120,
             ignore_live_threads: bool = False) -> None:
        """Wait for the threads to end once a stop is requested; re-raise a kept exception.

        Raises:
            DeadlineExceededError: threads still run ``stop_grace_period_secs`` after the
                stop request (unless ``ignore_live_threads``); the message names them.
        """
        with self._lock:
            threads = set(threads or ()) | self._registered_threads
        while any(t.is_alive() for t in threads) and not self.wait_for_stop(0.1):
            pass
        deadline = time.monotonic() + stop_grace_period_secs
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._joined = True
            self._registered_threads = set()
            exc_info = self._exc_info_to_raise
        if exc_info is not None:
            raise exc_info[1].with_traceback(exc_info[2])
        alive = sorted(t.name for t in threads if t.is_alive())
        if alive and not ignore_live_threads:
            raise errors.DeadlineExceededError(
                f"Coordinator stopped with threads still running {stop_grace_period_secs:g} s "
                f"after the stop request: {', '.join(alive)}")

    @property
    def joined(self) -> bool:
        return self._joined

    def raise_requested_exception(self) -> None:
        """Re-raise the exception a stop was requested with, if any."""
        with self._lock:
            exc_info = self._exc_info_to_raise
        if exc_info is not None:
            raise exc_info[1].with_traceback(exc_info[2])
