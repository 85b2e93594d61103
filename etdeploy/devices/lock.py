"""Holding a device for one job: a service over the device's lock_key.

Two etdeploy processes on this host (a run, a farm's workers, `etdeploy clean`)
must not time runners on one phone at once, nor clean a work dir a job is using.
Each physical device (Device.lock_key: the adb server and serial, the SSH user,
host and port) has one lock file under cache_dir("locks"); holding it is holding
the device. A lock held by a process that died is free again (filelock's flock).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from etdeploy.errors import DeviceError
from etdeploy.paths import cache_dir

if TYPE_CHECKING:
    from etdeploy.devices.base import Device


def lock_dir() -> Path:
    return cache_dir("locks")


def lock_path(device: Device) -> Path:
    """The lock file of `device` on this host."""
    key = hashlib.sha256(device.lock_key().encode()).hexdigest()[:24]
    return lock_dir() / f"device-{key}.lock"


@contextlib.contextmanager
def device_lock(device: Device, timeout_s: float | None = None) -> Iterator[float]:
    """Hold `device` for one job, across processes on this host; yields how long the
    wait for another job was (seconds). timeout_s None: the device's lock_timeout_s."""
    timeout = device.lock_timeout_s if timeout_s is None else timeout_s
    file_lock = filelock.FileLock(str(lock_path(device)))
    started = time.monotonic()
    try:
        file_lock.acquire(timeout=timeout)
    except filelock.Timeout as exc:
        raise DeviceError(
            f"device is busy: another etdeploy job held it for {timeout:.0f} s",
            "wait for the other job, or raise --lock-timeout",
            device=device.name,
        ) from exc
    try:
        yield time.monotonic() - started
    finally:
        file_lock.release()
