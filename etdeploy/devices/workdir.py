"""What etdeploy keeps in a device's work dir, and the job directories it makes there.

The work dir holds content-addressed files that later runs reuse (runners/ABI-KEY/,
programs/SHA.pte, inputs/SHA.bin), the digest records of those files
(.etdeploy-digests/, devices/digest_records.py), and one directory per job, removed
after the job unless --keep. `etdeploy clean --device` reads the listing here
(Device.listing, the same POSIX sh on every transport) and prunes by it.

A job's directory can outlive its job: the connection drops before the removal
(the phone left Wi-Fi), or the process is killed. So a run writes a note on this
machine, before the directory exists on the device, naming the directory it is
about to make (cache_dir("device-jobs"), a folder per work dir of a device); the
note goes once the directory is gone, or at once for --keep. The next run in that
work dir, holding the device's lock, removes the directories the notes name. A directory
another machine left is not known here; `etdeploy clean --device` removes it.

A run cut short can leave more than its directory: the partial of a push it was
making (`.NAME.etdeploy-partial-OWNER`) and, over ADB, the pid file of the command
it was running (`.pids/OWNER-ID.pid`), with that command maybe still running on
the phone. Both names carry their owner (devices/transfer.owner_tag: this
machine's tag and the process's pid), so the next run here, holding the device's
lock, finds them with one listing and removes those whose process on this machine
is gone, after killing what such a pid file names if it still runs. What a live
process or another machine owns stays (names without an owner come from an
etdeploy that did not tag them, and go).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.devices.base import job_dir
from etdeploy.devices.digest_records import RECORD_DIR, record_path
from etdeploy.devices.lock import device_lock
from etdeploy.devices.transfer import MACHINE_TAG, PARTIAL_MARKER, parse_owner
from etdeploy.errors import EtdeployError
from etdeploy.paths import cache_dir

if TYPE_CHECKING:
    from etdeploy.devices.base import Device

# The folders of content-addressed files a run reuses (pipeline/deploy.py).
SHARED_DIRS = ("runners", "programs", "inputs")
# What ADB's run wrapper keeps while a command runs (pid files).
PIDS_DIR = ".pids"
# An etdeploy before the work dir's record folder kept a record beside each file.
_LEGACY_RECORD = re.compile(r"^\..+\.etdeploy-sha256$")


def is_garbage(path: str) -> bool:
    """A file nothing will read again: the partial of a cut push, a pid file of a run
    that is over (the device's lock is held while cleaning), a record of the old kind."""
    name = path.rpartition("/")[2]
    return (
        PARTIAL_MARKER in name
        or path.startswith(f"{PIDS_DIR}/")
        or bool(_LEGACY_RECORD.match(name))
        or (path.startswith(f"{RECORD_DIR}/") and ".tmp" in name)
    )


def remove_command(workdir: str, paths: Sequence[str], *, recursive: bool) -> str:
    """rm of these resolved paths and of each one's digest record, in one command."""
    targets = []
    for path in paths:
        targets += [shlex.quote(path), shlex.quote(record_path(workdir, path))]
    return f"rm -{'rf' if recursive else 'f'} {' '.join(targets)}"


# -- the journal of job directories -------------------------------------------------


class JobDirs:
    """The job directories this machine made in one work dir of one device and has not
    seen removed. A device with two work dirs (two tables of etdeploy.toml for one
    phone, `local` beside a local device of its own work dir) keeps a journal for each:
    a run in one neither removes nor forgets the other's directories."""

    def __init__(self, device: Device) -> None:
        self.device = device
        place = f"{device.lock_key()}\n{device.workdir.rstrip('/')}"
        self._notes = cache_dir("device-jobs") / hashlib.sha256(place.encode()).hexdigest()[:24]

    def _note(self, job_id: str) -> Path:
        return self._notes / job_id

    def begin(self, job_id: str) -> str:
        """Note the job's directory, then return it (the caller makes it)."""
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"not a job id: {job_id!r}")
        path = job_dir(self.device, job_id)
        # A note that cannot be written costs a leftover directory, never the run. Renamed
        # into place, not synced: it must outlive this process (a kill), and a power cut
        # that loses it leaves a directory `etdeploy clean --device` removes (~3 ms a run).
        with contextlib.suppress(OSError):
            note = self._note(job_id)
            note.parent.mkdir(parents=True, exist_ok=True)
            partial = note.with_name(f".{note.name}.{os.getpid()}")
            partial.write_text(path + "\n")
            os.replace(partial, note)
        return path

    def end(self, job_id: str, *, keep: bool = False) -> None:
        """The job is over: remove its directory (unless keep), then the note. A removal
        that fails leaves the note for the next run; it never hides the job's error."""
        if not keep:
            try:
                self.device.remove(job_dir(self.device, job_id), recursive=True)
            except EtdeployError:
                return
        self._note(job_id).unlink(missing_ok=True)

    def sweep(self, *, but: str | None = None) -> list[str]:
        """Remove the directories earlier runs on this device left (call it holding the
        device's lock); the paths removed."""
        removed: list[str] = []
        base = self.device.workdir.rstrip("/") + "/"
        for note in sorted(self._notes.iterdir()) if self._notes.is_dir() else ():
            if note.name == but or note.name.startswith("."):
                continue
            try:
                path = note.read_text().strip()
            except OSError:
                continue
            # Only a job's own directory, directly below this device's work dir.
            if not path.startswith(base) or path[len(base) :] != note.name:
                note.unlink(missing_ok=True)
                continue
            try:
                self.device.remove(path, recursive=True)
            except EtdeployError:
                continue  # the device does not answer now: the next run tries again
            note.unlink(missing_ok=True)
            removed.append(path)
        with contextlib.suppress(EtdeployError):  # the next run tries again
            removed += sweep_leftovers(self.device)
        return removed


@contextlib.contextmanager
def held_for_job(device: Device, job_id: str, *, keep: bool = False) -> Iterator[float]:
    """The device held for one job (its lock, across processes on this host): what runs
    that could not clean up left goes first, the job's directory is journaled before it
    exists and removed after the block, however the block ends (unless keep). Yields
    how long the wait for another job was (seconds)."""
    with device_lock(device) as waited:
        jobs = JobDirs(device)
        jobs.sweep(but=job_id)
        jobs.begin(job_id)
        try:
            yield waited
        finally:
            jobs.end(job_id, keep=keep)


# -- what dead runs left ---------------------------------------------------------------

# find patterns of the files a run cut short can leave: partials, pid files.
LEFTOVER_NAMES = (f"*{PARTIAL_MARKER}*", "*.pid")


def sweep_leftovers(device: Device) -> list[str]:
    """Remove the partials and pid files that runs of this machine which are over
    left in the device's work dir (call it holding the device's lock), killing first
    what such a pid file names if it still runs; the paths removed (full)."""
    listing = device.listing(names=LEFTOVER_NAMES)
    dead = [f.path for f in listing.files if _left_by_dead_run(f.path)]
    if not dead:
        return []
    base = listing.workdir
    pid_files = [f"{base}/{path}" for path in dead if path.startswith(f"{PIDS_DIR}/")]
    if pid_files:
        device.run(["sh", "-c", orphan_kill_script(pid_files, base)], deadline_s=30)
    device.remove(*dead)
    return [f"{base}/{path}" for path in dead]


def _left_by_dead_run(path: str) -> bool:
    name = path.rpartition("/")[2]
    if PARTIAL_MARKER in name:
        owner = name.rpartition(PARTIAL_MARKER)[2]
    elif path.startswith(f"{PIDS_DIR}/") and name.endswith(".pid"):
        owner = name[: -len(".pid")].rpartition("-")[0]
    else:
        return False
    parsed = parse_owner(owner)
    if parsed is None:
        return True  # untagged: from an etdeploy before owners were named
    machine, pid = parsed
    return machine == MACHINE_TAG and not _alive(pid)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def orphan_kill_script(pid_files: Sequence[str], workdir: str) -> str:
    """POSIX sh that kills what each pid file's command left running, and only that.

    The pid file holds the run wrapper's pid, which leads the command's process
    group (adbd makes each shell a session leader). While the wrapper lives, its
    command line still holds the pid file's path (`echo $$ > FILE`): the group is
    killed. When the wrapper is gone (adbd hangs up only the shell when its stream
    closes), what is left of its group is killed if a process of it runs from the
    work dir (the runner's path is below it; a group's id is not given to another
    while it has members); a pid the device has given to another process since is
    left alone either way. `ps -A -o pid,pgid` works with procps and toybox,
    whose ps takes field names in any case (parse_ko compares them with
    strncasecmp: toys/posix/ps.c, read 2026-12-04)."""
    quoted = " ".join(shlex.quote(f) for f in pid_files)
    base = shlex.quote(workdir.rstrip("/") + "/")
    return (
        f'for f in {quoted}; do p=$(cat "$f" 2>/dev/null); '
        'case "$p" in ""|*[!0-9]*|0|1) continue;; esac; '
        'if tr "\\0" " " < /proc/"$p"/cmdline 2>/dev/null | grep -qF -- "$f"; then '
        'kill -s KILL -- -"$p" 2>/dev/null || kill -s KILL "$p" 2>/dev/null; continue; fi; '
        'ours=""; for q in $(ps -A -o pid,pgid 2>/dev/null | awk -v g="$p" \'$2 == g {print $1}\'); '
        f'do tr "\\0" " " < /proc/"$q"/cmdline 2>/dev/null | grep -qF -- {base} && ours=1; done; '
        '[ -n "$ours" ] && kill -s KILL -- -"$p" 2>/dev/null; done; true'
    )
