"""What writes a job bundle's folder, shared by the program's bundle (make_bundle.py)
and a language model's (llm/bundle.py): each file listed with its size and sha256,
the job's settings as JSON, the finished folder renamed into place."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy.bundle.job_bundle import RUNNERS_DIR, BundleManifest, FileEntry, RunnerEntry
from etdeploy.digests import sha256_file
from etdeploy.jsonvalue import JsonObject
from etdeploy.npz import table_arrays
from etdeploy.runner_build import BUNDLE_MANIFEST, RunnerBundle
from etdeploy.settings import MACHINE, RunSettings, declared
from etdeploy.staged import Staged

# Per sample, per array.
Table = Sequence[Sequence[np.ndarray]]


@dataclass(frozen=True)
class MadeBundle:
    path: Path
    manifest: BundleManifest
    runners: tuple[RunnerBundle, ...]

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for entry in self.manifest.files.values())


def settings_json(job: RunSettings) -> JsonObject:
    """The job's settings that travel (all but the running machine's own), as JSON."""
    out: JsonObject = {}
    for entry in declared(RunSettings):
        if entry.option.scope == MACHINE:
            continue
        value = getattr(job, entry.name)
        out[entry.name] = (
            str(value)
            if isinstance(value, Path)
            else list(value)
            if isinstance(value, tuple)
            else value
        )
    return out


@contextmanager
def bundle_folder(out: Path) -> Iterator[Writer]:
    """A Writer into a temporary folder beside `out`, renamed into place when the block
    ends; removed when it raises or is interrupted, so no half bundle is left."""
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        yield Writer(partial)
        put_in_place(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def put_in_place(partial: Path, out: Path) -> None:
    """The finished folder under its name; an old bundle there goes only after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(partial, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class Writer:
    """Files into the bundle's folder, each listed with its size and sha256."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, FileEntry] = {}

    def listed(self, relative: str) -> str:
        path = self.root / relative
        self.files[relative] = FileEntry(path.stat().st_size, sha256_file(path))
        return relative

    def copy(self, source: Path, relative: str) -> str:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)  # keeps the runner's executable bit
        return self.listed(relative)

    def text(self, relative: str, text: str, *, listed: bool = True) -> str:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n", "utf-8")
        return self.listed(relative) if listed else relative

    def arrays(self, relative: str, table: Table, letter: str) -> str:
        """A table as .npz (etdeploy.npz.table_arrays: stacked when its rows are alike)."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            # Keys are <letter><k> or s<i>_<letter><k>, never savez's own allow_pickle,
            # which is why numpy's stubs reject a ** of str keys here.
            np.savez(handle, **table_arrays(table, letter))  # type: ignore[arg-type]
        return self.listed(relative)

    def labels(self, relative: str, staged: Staged) -> str:
        """The samples' labels as .npz: `y` (one a sample), the class names and where the
        labels were read, and the task they score."""
        assert staged.labels is not None
        target = self.root / relative
        with open(target, "wb") as handle:
            np.savez(
                handle, y=staged.labels.values, names=np.asarray(staged.labels.names, dtype=str),
                source=np.asarray(staged.labels.source), task=np.asarray(staged.task or ""),
            )  # fmt: skip
        return self.listed(relative)

    def runner(self, bundle: RunnerBundle) -> RunnerEntry:
        """The runner bundle's folder as runner_build wrote it (bundle.json included)."""
        directory = f"{RUNNERS_DIR}/{bundle.abi}-{bundle.kind}"
        for path in (*bundle.files, bundle.directory / BUNDLE_MANIFEST):
            self.copy(path, f"{directory}/{path.name}")
        return RunnerEntry(bundle.abi, bundle.kind, directory)
