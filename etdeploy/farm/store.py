"""Where a farm's results live, and which jobs a run still has to do.

- Shards: `--shard-index I --shard-count N` keeps the jobs whose key hashes to
  I, so every host splits the matrix the same way, and a job added to the spec
  moves no other job to another shard.
- The results log: each finished job is one JSON line appended to
  OUT/results.jsonl, flushed and fsynced before the next job starts on that
  device, so a killed farm keeps everything that finished.
- Resume: `--resume` reads the log and skips the jobs whose keys it holds
  (the last line of a key is its result: a job run again appends a line);
  without it, an earlier run in OUT is an error, never overwritten.
- One farm per OUT at a time (a lock file in OUT).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from etdeploy.errors import UsageError
from etdeploy.farm.results import Result, result_key

RESULTS_NAME = "results.jsonl"
_LOCK_NAME = ".farm.lock"


# -- shards --------------------------------------------------------------------------------


def shard_of(key: str, count: int) -> int:
    """The shard a job key falls in: sha256, not Python's salted hash(), so every
    host and every run agrees."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


class Keyed(Protocol):
    """A job or a skipped cell: anything with a job key."""

    @property
    def key(self) -> str: ...


K = TypeVar("K", bound=Keyed)


def select_shard(jobs: Sequence[K], index: int, count: int) -> list[K]:
    """The jobs (or skipped cells) of shard `index` of `count`, in spec order."""
    if count < 1:
        raise UsageError(f"--shard-count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise UsageError(
            f"--shard-index must be 0 to {count - 1} for {count} shard(s), got {index}",
            "shards are numbered from 0",
        )
    return [job for job in jobs if shard_of(job.key, count) == index]


# -- the results log -----------------------------------------------------------------------


class ResultsLog:
    """OUT/results.jsonl: one result per line, each flushed and fsynced as written.

    A farm killed mid-write leaves at most a partial last line; opening the log
    cuts it off (after saying so) so the next line starts clean.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.dropped_partial = 0  # bytes of a cut last line removed on open

    def read(self) -> list[Result]:
        """Every complete result in the file; repairs a cut last line."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        tail = data[end:]
        results: list[Result] = []
        lines = data[:end].splitlines()
        if tail.strip():
            try:
                json.loads(tail)
                lines.append(tail)  # whole, only its newline missing
                with open(self.path, "ab") as handle:
                    handle.write(b"\n")
            except ValueError:
                self.dropped_partial = len(tail)
                with open(self.path, "r+b") as handle:
                    handle.truncate(end)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise UsageError(
                    f"{self.path}:{number}: not JSON ({exc})",
                    "only a farm killed mid-write damages a results file, and only its last line; "
                    "start over with another --out",
                ) from None
            try:
                results.append(Result.from_json(doc))
            except (TypeError, ValueError) as exc:
                raise UsageError(
                    f"{self.path}:{number}: not an etdeploy result ({exc})",
                    "a results file holds what `etdeploy farm` wrote; start over with another --out",
                ) from None
        return results

    def append(self, result: Result) -> None:
        line = json.dumps(result.to_json()) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())


# -- resume ----------------------------------------------------------------------------------


@contextlib.contextmanager
def claim_out_dir(out_dir: Path) -> Iterator[None]:
    """OUT for this farm alone while the block runs (created if need be)."""
    import filelock

    out_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(out_dir / _LOCK_NAME))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise UsageError(
            f"another etdeploy farm is writing to {out_dir}",
            "wait for it, or give this one another --out",
        ) from None
    try:
        yield
    finally:
        lock.release()


def finished_results(log: ResultsLog, resume: bool) -> dict[str, Result]:
    """The results an earlier run left in the log, by job key, for --resume.
    Without resume, an earlier run there is a UsageError: it is never overwritten."""
    earlier = log.read()
    if earlier and not resume:
        raise UsageError(
            f"{log.path} already holds {len(earlier)} result(s) of an earlier run",
            "pass --resume to finish that run, or give another --out",
        )
    finished: dict[str, Result] = {}
    for result in earlier:
        key = result_key(result)
        if key is not None:
            finished[key] = result  # the last line of a key wins
    return finished
