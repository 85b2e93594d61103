"""Device sources: devices a farm claims from a device-farm service for its run,
beside the [devices.NAME] tables it is given.

A spec names its sources in [farm.sources.KIND] (parse.py reads them; today: stf, see
etdeploy.farm.sources.stf). Each source provides device names that farm.devices
and [[farm.job]] entries use like any other; the jobs' keys, shards and reports
do not change with where a device came from.

Around a run (etdeploy.farm.scheduler), lease_devices claims a device for each
provided name the run's jobs need, hands the jobs a [devices.NAME] table for
it, and releases every claim when the run ends, however it ends. Before a claim
is made it is written to OUT/device-claims.json (atomically); a farm killed with
claims out finds them there the next time it starts on that OUT
(release_leftovers), and each claim also carries the service's own timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.atomic import write_json
from etdeploy.config import DeviceConfig
from etdeploy.errors import InfraError, UsageError
from etdeploy.farm.sources.parse import DeviceSource
from etdeploy.farm.sources.stf import (
    StfClaim,
    StfClient,
    claim_device,
    release_device,
)
from etdeploy.jsonvalue import JsonObject, JsonValue, read_str

if TYPE_CHECKING:
    from etdeploy.farm.spec import FarmSpec

CLAIMS_NAME = "device-claims.json"


# -- the claims journal --------------------------------------------------------------------


class ClaimJournal:
    """OUT/device-claims.json: every claim that may still be out, written before
    it is made and removed once it is released."""

    def __init__(self, path: Path, source: DeviceSource | None = None) -> None:
        self.path = path
        self.source = source
        self._lock = threading.Lock()

    def entries(self) -> list[JsonObject]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"{self.path}: cannot read the claims of an earlier farm ({exc})",
                "release them in the device farm's UI, then delete the file",
            ) from None
        claims = doc.get("claims") if isinstance(doc, dict) else None
        return [c for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []

    def _write(self, entries: list[JsonObject]) -> None:
        if entries:
            write_json({"claims": entries}, self.path)
        else:
            self.path.unlink(missing_ok=True)

    def note(self, claim: StfClaim) -> None:
        assert self.source is not None
        entry: JsonObject = {"source": self.source.kind, "url": self.source.url,
                             "name": claim.name, "serial": claim.serial, "remote": claim.remote}  # fmt: skip
        with self._lock:
            kept = [e for e in self.entries() if not _same(e, entry)]
            self._write([*kept, entry])

    def drop(self, claim: StfClaim) -> None:
        assert self.source is not None
        entry: JsonObject = {
            "source": self.source.kind,
            "url": self.source.url,
            "serial": claim.serial,
        }
        with self._lock:
            self._write([e for e in self.entries() if not _same(e, entry)])

    def forget(self, entry: Mapping[str, JsonValue]) -> None:
        with self._lock:
            self._write([e for e in self.entries() if not _same(e, entry)])


def _same(a: Mapping[str, JsonValue], b: Mapping[str, JsonValue]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("source", "url", "serial"))


def release_leftovers(
    spec: FarmSpec, out_dir: Path, env: Mapping[str, str] | None = None
) -> list[str]:
    """Release the claims an earlier farm on OUT left out (it was killed); a note
    for each. The caller holds OUT, so no other farm is using them."""
    env = os.environ if env is None else env
    journal = ClaimJournal(out_dir / CLAIMS_NAME)
    notes: list[str] = []
    for entry in journal.entries():
        claim = StfClaim(
            str(entry.get("name")),
            str(entry.get("serial")),
            read_str(entry, "remote", None, CLAIMS_NAME),
        )
        source = next((s for s in spec.sources if s.kind == entry.get("source")
                       and s.url == entry.get("url")), None)  # fmt: skip
        if source is None:
            notes.append(f"an earlier farm's claim of {claim.serial} on {entry.get('url')} is not "
                         "in this spec's sources; it ends at its timeout")  # fmt: skip
            journal.forget(entry)
            continue
        try:
            client: StfClient | None = source.client(env)
        except UsageError:
            client = None
        problems = release_device(source, client, claim)
        notes.append(
            f"released {claim.serial} ({claim.name}), claimed by an earlier farm on this --out"
        )
        notes += problems
        journal.forget(entry)
    return notes


# -- the lease around a run ----------------------------------------------------------------


@dataclass
class Lease:
    """What the sources provide for one run."""

    # name -> the [devices.NAME] table the jobs open it with
    devices: dict[str, DeviceConfig] = field(default_factory=dict)
    # name -> why no device could be had for it (its jobs get this error)
    unavailable: dict[str, InfraError] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def applied(self, spec: FarmSpec) -> FarmSpec:
        """The spec with the leased tables in its config and its `leased` map."""
        config = dataclasses.replace(spec.config, devices={**spec.config.devices, **self.devices})
        return dataclasses.replace(spec, config=config, leased=dict(self.devices))


@contextlib.contextmanager
def lease_devices(
    spec: FarmSpec, out_dir: Path, needed: Sequence[str], env: Mapping[str, str] | None = None
) -> Iterator[Lease]:
    """Claim a device for every provided name in `needed`; release them all on exit.

    A name no device could be had for is in Lease.unavailable (its jobs get that
    error, the others run). A missing or refused token is a UsageError before
    anything is claimed."""
    env = os.environ if env is None else env
    lease = Lease()
    held: list[tuple[DeviceSource, StfClient, StfClaim, ClaimJournal]] = []
    try:
        for source in spec.sources:
            names = [n for n in source.names if n in set(needed)]
            if not names:
                continue
            client = source.client(env)
            journal = ClaimJournal(out_dir / CLAIMS_NAME, source)
            taken: set[str] = set()
            for name in names:
                try:
                    claim = claim_device(source, client, name, taken, journal)
                except InfraError as exc:
                    lease.unavailable[name] = exc
                    lease.notes.append(f"{name}: {exc.message}")
                    continue
                held.append((source, client, claim, journal))
                lease.devices[name] = source.device_table(name, claim.remote or "")
                lease.notes.append(f"claimed {claim.serial} from {source.url} as {name} "
                                   f"(adb {claim.remote})")  # fmt: skip
        yield lease
    finally:
        for source, client, claim, journal in reversed(held):
            problems = release_device(source, client, claim)
            journal.drop(claim)
            lease.notes.append(f"released {claim.serial} ({claim.name})")
            lease.notes += problems
