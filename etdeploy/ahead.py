"""Work started on a thread now, its result taken later: what a run can do while it
waits on something else (a device's round trip, a local file's digest)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Ahead(Generic[T]):
    """fn(*args) started now on a thread of its own, in this context (a cache's damage
    noticed there reaches the run's warnings, etdeploy.quarantine); result() waits for
    it and returns what it returned or raises what it raised."""

    def __init__(self, fn: Callable[..., T], *args: Any, name: str = "etdeploy-ahead") -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._call, fn, *args), name=name, daemon=True
        )
        self._thread.start()

    def _call(self, fn: Callable[..., T], *args: Any) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the caller in result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
