"""Holding a device for one job: a service over the device's lock_key.

Two etdeploy processes on this host (a run, a farm's workers, `etdeploy clean`)
must not time runners on one phone at once, nor clean a work dir a job is using.
Each physical device (Device.lock_key: the adb server and serial, the SSH user,
host and port) has one lock file under cache_dir("locks"); holding it is holding
the device. A lock held by a process that died is free again: it is flock(2) on
that file, as filelock's UnixFileLock takes it (so the two exclude each other), taken
here with fcntl directly because importing filelock cost every run ~0.02 s; where
there is no fcntl (Windows), filelock takes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

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


# How often a wait for the lock looks again (filelock's default poll interval).
POLL_S = 0.05


@contextlib.contextmanager
def device_lock(device: Device, timeout_s: float | None = None) -> Iterator[float]:
    """Hold `device` for one job, across processes on this host; yields how long the
    wait for another job was (seconds). timeout_s None: the device's lock_timeout_s."""
    timeout = device.lock_timeout_s if timeout_s is None else timeout_s
    started = time.monotonic()
    with held_lock(lock_path(device), timeout) as held:
        if not held:
            raise DeviceError(
                f"device is busy: another etdeploy job held it for {timeout:.0f} s",
                "wait for the other job, or raise --lock-timeout",
                device=device.name,
            )
        yield time.monotonic() - started


@contextlib.contextmanager
def held_lock(path: Path, timeout: float) -> Iterator[bool]:
    """flock(2) on `path` for the block (filelock's lock where there is no flock),
    waiting up to `timeout` seconds (negative: for ever, 0: one try); yields False
    when the wait ran out."""
    try:
        import fcntl
    except ImportError:  # no flock here: filelock's lock for this platform
        import filelock

        lock = filelock.FileLock(str(path))
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout >= 0 and deadline <= time.monotonic():
                    yield False
                    return
                time.sleep(POLL_S)
        yield True
    finally:
        os.close(fd)  # closing the only descriptor releases the lock
