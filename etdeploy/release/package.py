"""`release build`: the variants built and sized (variants.py), laid out for Play and
Apple, with selection.json, in OUT, whole or not at all.

Everything is written to a fresh folder beside OUT, then renamed into place; a failure
or an interruption leaves OUT as it was (the earlier release, or nothing). An OUT that
exists but is not a release written here (no selection.json) is never replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from etdeploy.errors import UsageError
from etdeploy.release import apple, play
from etdeploy.release.rules import with_spellings
from etdeploy.release.selection import (
    AppleEntry,
    AppleTable,
    DeliveredFile,
    Selection,
    TableGroup,
)
from etdeploy.release.spec import AppleRule, ReleaseSpec
from etdeploy.release.variants import BuiltVariant, Status, build_variants

SELECTION = "selection.json"


@dataclass(frozen=True)
class Release:
    """A release as built: its spec, its variants, and the selection table."""

    spec: ReleaseSpec
    variants: tuple[BuiltVariant, ...]
    selection: Selection

    def built(self, variant: str) -> BuiltVariant | None:
        return next((b for b in self.variants if b.variant.name == variant), None)

    @property
    def notes(self) -> tuple[str, ...]:
        delivered = set(self.spec.used_variants)
        unused = [v.name for v in self.spec.variants if v.name not in delivered]
        out = [f"variant {n} is delivered by no group and was not built" for n in unused]
        out += [f"{k}: {why}" for k, why in (self.selection.not_built or {}).items()]
        return tuple(out)


def _delivered(built: BuiltVariant, folder: str, asset_folder: str) -> tuple[DeliveredFile, ...]:
    """The variant's files as they sit in `folder` of OUT (and `asset_folder` for the app)."""
    sized = {
        f.path: f for report in (built.play_size, built.apple_size) if report for f in report.files
    }
    digests = built.digests()
    out = []
    for path in built.files:
        found = sized.get(path)
        out.append(DeliveredFile(
            path=f"{folder}/{path.name}", asset_path=f"{asset_folder}/{path.name}",
            size_bytes=path.stat().st_size,
            download_bytes=found.download_bytes if found else path.stat().st_size,
            sha256=digests[path],
        ))  # fmt: skip
    return tuple(out)


def selection_of(spec: ReleaseSpec, variants: Sequence[BuiltVariant]) -> Selection:
    """The table: each group whose variant was built, in order, then "other"."""
    built = {b.variant.name: b for b in variants if b.built}
    not_built = {b.variant.name: f"not built: {b.not_built}" for b in variants if not b.built}
    if spec.fallback not in built:
        raise UsageError(
            f"{spec.path.name}: the fallback variant {spec.fallback} was not built "
            f"({not_built.get(spec.fallback, '')}), so devices in no group would get nothing",
            "make release.fallback a variant this machine builds (xnnpack)",
        )
    pack_assets = f"play/{spec.name}/src/main/assets"
    groups: list[TableGroup] = []
    for group in spec.groups:
        if group.variant not in built:
            not_built[f"group {group.name}"] = (
                f"left out: its variant {group.variant} was not built; its devices get the next "
                "group they match, or the fallback"
            )
            continue
        folder = play.group_folder(spec.asset_dir, group.name)
        files = _delivered(built[group.variant], f"{pack_assets}/{folder}", spec.asset_dir)
        groups.append(TableGroup(group.name, group.variant,
                                 tuple(with_spellings(s) for s in group.selectors), files,
                                 group.max_memory_bytes))  # fmt: skip
    other_folder = f"{pack_assets}/{play.group_folder(spec.asset_dir, 'other')}"
    other = TableGroup("other", spec.fallback, (),
                       _delivered(built[spec.fallback], other_folder, spec.asset_dir))  # fmt: skip
    return Selection(
        release=spec.name, model=spec.model, pack=spec.name, delivery=spec.delivery,
        asset_dir=spec.asset_dir, groups=tuple(groups), other=other,
        apple=_apple_table(spec, built), not_built=not_built,
    )  # fmt: skip


def _apple_table(spec: ReleaseSpec, built: dict[str, BuiltVariant]) -> AppleTable | None:
    section = spec.apple
    if section is None:
        return None

    def entry(rule: AppleRule) -> AppleEntry:
        if rule.variant not in built:
            raise UsageError(
                f"{spec.path.name}: Apple rule {rule.name} delivers variant {rule.variant}, "
                "which was not built",
                "point the Apple rules at variants this machine builds",
            )
        pack = section.pack_id(rule.variant)
        return AppleEntry(rule, pack, _delivered(built[rule.variant], f"apple/{pack}", pack))

    rules = tuple(entry(r) for r in section.rules)
    fallback = entry(AppleRule("other", section.fallback))
    return AppleTable(section.delivery, section.download_policy, rules, fallback)


def _write(root: Path, relative: str, data: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _place(release: Release, root: Path) -> None:
    """Every file of the release under `root` (a fresh folder)."""
    spec, table = release.spec, release.selection
    for group in (*table.groups, table.other):
        source = release.built(group.variant)
        assert source is not None
        for delivered, path in zip(group.files, source.files, strict=True):
            _copy(path, root / delivered.path)
    pack = root / "play" / spec.name
    _write(pack, play.PACK_MANIFEST, play.pack_manifest_xml(spec.delivery))
    _write(pack, "build.gradle", play.pack_gradle(spec.name, spec.delivery))
    _write(root / "play", play.TARGETING_CONFIG, play.targeting_config_xml(table.groups))
    if table.apple is not None and spec.apple is not None:
        for entry in {e.pack_id: e for e in (*table.apple.rules, table.apple.fallback)}.values():
            source = release.built(entry.rule.variant)
            assert source is not None
            for delivered, path in zip(entry.files, source.files, strict=True):
                _copy(path, root / delivered.path)
            if spec.apple.delivery == "background-assets":
                _write(root / "apple" / entry.pack_id, apple.MANIFEST,
                       apple.pack_manifest(spec.apple, entry))  # fmt: skip
        if spec.apple.delivery == "background-assets":
            _write(root / "apple", apple.INFO_PLIST_FRAGMENT,
                   apple.info_plist_fragment(spec.apple, table.apple))  # fmt: skip
    _write(root, SELECTION, (json.dumps(table.to_json(), indent=2) + "\n").encode())


def _copy(source: Path, target: Path) -> None:
    # A copy, not a link: a file edited in OUT must never change the build cache.
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def write_release(release: Release, out: Path) -> None:
    """The release into `out`, whole: written beside it, then renamed into place."""
    out = out.absolute()
    if out.exists() and not (
        out.is_dir() and (not any(out.iterdir()) or (out / SELECTION).is_file())
    ):
        raise UsageError(
            f"{out} exists and is not a release folder (no {SELECTION} in it)",
            "give -o a new folder, or one an earlier `etdeploy release build` wrote",
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"cannot write beside {out}: {exc.strerror or exc}",
                         "give -o a folder in a writable place") from None  # fmt: skip
    old: Path | None = None
    try:
        _place(release, staging)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
        os.replace(staging, out)
    except BaseException as exc:  # an interruption too: the earlier release goes back
        if old is not None and not out.exists():
            os.replace(old, out)
            old = None
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write the release to {out}: {exc.strerror or exc}",
                             "free space there, or give -o another folder") from None  # fmt: skip
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def prepare_release(
    spec: ReleaseSpec, *, skip_unavailable: bool = False, use_cache: bool = True,
    status: Status | None = None,
) -> Release:  # fmt: skip
    """Build and size every variant, and the selection table; nothing is written to OUT."""
    say = status or (lambda _text: None)
    variants = build_variants(spec, skip_unavailable=skip_unavailable, use_cache=use_cache, say=say)
    return Release(spec, tuple(variants), selection_of(spec, variants))


def build_release(
    spec: ReleaseSpec, out: Path, *, skip_unavailable: bool = False, use_cache: bool = True,
    status: Status | None = None,
) -> Release:  # fmt: skip
    """`etdeploy release build SPEC -o OUT`."""
    release = prepare_release(spec, skip_unavailable=skip_unavailable, use_cache=use_cache,
                              status=status)  # fmt: skip
    write_release(release, out)
    return release
