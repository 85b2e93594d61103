"""Digest records on a device: what etdeploy put there, recognised without reading it.

Re-hashing an unchanged 256 MB program on the phone at every run cost as much as
sending it again. So every file a push writes (or verifies) gets a record in the
work dir, `.etdeploy-digests/<sha256 of its path>`, holding the path, the sha256
and the file's stat as the device's own `stat` prints it (size, ctime and mtime
to the nanosecond where the filesystem keeps them), written to a temporary name
and renamed into place. A later push trusts the record only while the file's
stat is exactly what was recorded; a file altered behind etdeploy's back, or half
written by someone else, has another size, mtime or ctime and is hashed again.
ctime is there because a tool can set mtime back (`touch -r`) but not ctime.

As git does with its index ("racy git": read-cache.c, is_racy_timestamp, read
2026-12-03), a record is not trusted when the filesystem stamps whole seconds
only and the record was written within RACY_MARGIN_S of the file's last change: a
rewrite of the same size in that second would keep its stat. Sub-second stamps
(ext4, f2fs, APFS, tmpfs) make that window one clock tick, inside the push itself.

Every probe touches the record, so its mtime says when the file was last wanted;
`etdeploy clean --device` prunes by that. `--verify-remote` hashes on the device
regardless, and rewrites the record. The listing of the whole work dir (Listing)
reads the same stat formats.

The stat formats: GNU coreutils and toybox take `stat -c` (toybox's %y and %z
print nanoseconds, toys/other/stat.c, read 2026-12-03); macOS and the BSDs take
`stat -f`, where %Fm and %Fc print seconds with nine decimals (FreeBSD
usr.bin/stat/stat.c, format1 with FMTF_FLOAT, read 2026-12-03).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from etdeploy.devices.transfer import partial_prefix

RECORD_DIR = ".etdeploy-digests"
RECORD_FORMAT = "etdeploy-digest/1"
RACY_MARGIN_S = 2
# How long one probe script may grow. A request to the adb server is at most 65535
# bytes (its length is four hex digits: AOSP packages/modules/adb OVERVIEW.TXT, read
# 2026-12-04) and the shell service's name carries the script; half of that leaves
# room for the rest of the request. More files than fit go in several probes.
PROBE_SCRIPT_MAX = 32 * 1024
# What a probe prints before the identity lines, and before the records.
_IDENTITY_MARK = "--etdeploy-identities--"
_RECORDS_MARK = "--etdeploy-records--"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_FRACTION = re.compile(r"\.(\d+)")

StatFlavour = Literal["gnu", "bsd"]  # stat -c (GNU coreutils, toybox) | stat -f (BSD, macOS)

# size, ctime (seconds), ctime, mtime (seconds), mtime: the ctime's fraction comes first.
_IDENTITY_FORMAT = {"gnu": "%s %Z %z %Y %y", "bsd": "%z %c %Fc %m %Fm"}


def identity_command(path: str, flavour: StatFlavour, *, with_mode: bool = False) -> str:
    """A shell command printing the file's identity line (with its octal mode in
    front when asked; the mode is not part of the identity)."""
    fmt = _IDENTITY_FORMAT[flavour]
    if with_mode:
        fmt = ("%a " if flavour == "gnu" else "%Lp ") + fmt
    flag = "-c" if flavour == "gnu" else "-f"
    return f"stat {flag} {shlex.quote(fmt)} {shlex.quote(path)}"


def record_path(workdir: str, target: str) -> str:
    """Where target's record lives: below the device's work dir, named by its path."""
    name = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{workdir.rstrip('/')}/{RECORD_DIR}/{name}"


def record_command(workdir: str, target: str, digest: str, flavour: StatFlavour) -> str:
    """A shell command recording target's digest with its stat now: a temporary name,
    then a rename, so a cut leaves the old record or the new one. Empty for a path a
    one-line record cannot hold (a newline in it): such a file is simply hashed."""
    if "\n" in target or not _DIGEST.fullmatch(digest):
        return ""
    record = record_path(workdir, target)
    quoted = shlex.quote(record)
    temporary = shlex.quote(record + ".tmp") + "$$"
    lines = (
        " ".join(shlex.quote(part) for part in (RECORD_FORMAT, target, digest))
        + f' "$(date +%s)" "$({identity_command(target, flavour)})"'
    )
    # A write cut by a full disk leaves no temporary record behind.
    return (
        f"{{ mkdir -p {shlex.quote(record.rpartition('/')[0])} && "
        f"printf '%s\\n' {lines} > {temporary} && mv -f {temporary} {quoted}; }} || "
        f"{{ rm -f {temporary}; false; }}"
    )


def probes_script(
    workdir: str,
    targets: Sequence[str],
    flavour: StatFlavour,
    *,
    with_mode: bool,
    directories: Sequence[str] = (),
) -> str:
    """One round trip before pushing files, in four processes however many there are:
    make `directories` and each target's directory; drop what cut pushes of each
    target left (found by the shell's own glob: no process when there are none); say
    `present` or `absent` for each target; then one `stat` of the present ones (their
    [mode and] identity lines, in order), every target's record after a line of its
    own (read by the shell itself: a record names its file by a path a stand-in
    device may have rewritten, so records are told apart by their order), and one
    `touch` of them all (a record's mtime says when its file was last wanted).
    read_probes reads the answer."""
    q = shlex.quote
    parents = sorted({*directories, *(t.rpartition("/")[0] or "/" for t in targets)})
    script = f"mkdir -p {' '.join(q(d) for d in parents)} || exit 1; " if parents else ""
    if not targets:
        return script + "true"
    fmt = _IDENTITY_FORMAT[flavour]
    if with_mode:
        fmt = ("%a " if flavour == "gnu" else "%Lp ") + fmt
    flag = "-c" if flavour == "gnu" else "-f"
    stale = " ".join(q(partial_prefix(t)) + "*" for t in targets)
    records = " ".join(q(record_path(workdir, t)) for t in targets)
    return script + (
        f'for f in {stale}; do [ -e "$f" ] && {{ rm -f "$f" || exit 1; }}; done; set --; '
        f"for t in {' '.join(q(t) for t in targets)}; do "
        'if [ -f "$t" ]; then echo present; set -- "$@" "$t"; else echo absent; fi; done; '
        f'echo {_IDENTITY_MARK}; [ $# -eq 0 ] || stat {flag} {q(fmt)} "$@" || exit 1; '
        f"for r in {records}; do echo {_RECORDS_MARK}; "
        '[ -f "$r" ] && while IFS= read -r l; do echo "$l"; done < "$r"; done 2>/dev/null; '
        f"touch -c {records} 2>/dev/null; true"
    )


def probe_batches(workdir: str, targets: Sequence[str]) -> list[list[str]]:
    """`targets` in runs whose probes_script stays within PROBE_SCRIPT_MAX."""
    batches: list[list[str]] = [[]]
    size = 0
    for target in targets:
        # The target, its partials' glob and its record, twice (the cat and the touch).
        cost = 2 * len(shlex.quote(record_path(workdir, target))) + 3 * len(target) + 64
        if batches[-1] and size + cost > PROBE_SCRIPT_MAX - 1024:
            batches.append([])
            size = 0
        batches[-1].append(target)
        size += cost
    return batches


@dataclass(frozen=True)
class Probe:
    """What a probe found at the target."""

    size: int
    mode: int | None
    identity: str
    # The recorded digest, when the record is trusted (see the module docstring).
    recorded: str | None


def read_probes(output: str, targets: Sequence[str], *, with_mode: bool) -> list[Probe | None]:
    """probes_script's answer: what is at each target (None: nothing), in order. An
    answer that cannot be read is a ValueError (the caller names the device and the
    command)."""
    if not targets:
        return []
    lines = output.splitlines()
    try:
        identities_at, records_at = lines.index(_IDENTITY_MARK), lines.index(_RECORDS_MARK)
    except ValueError:
        raise ValueError(f"unexpected probe output: {output[:200]!r}") from None
    said, identities = lines[:identities_at], iter(lines[identities_at + 1 : records_at])
    records = _records(lines[records_at:])
    if (
        len(said) != len(targets)
        or said.count("present") != records_at - identities_at - 1
        or len(records) != len(targets)
    ):
        raise ValueError(f"unexpected probe output: {output[:200]!r}")
    found: list[Probe | None] = []
    for state, record in zip(said, records, strict=True):
        if state != "present":
            found.append(None)
            continue
        line = next(identities).strip()
        mode: int | None = None
        if with_mode:
            mode_text, _, line = line.partition(" ")
            mode = int(mode_text, 8)
        size = int(line.split(" ", 1)[0])
        found.append(Probe(size, mode, line, _trusted_digest(record, line)))
    return found


def _records(lines: Sequence[str]) -> list[list[str]]:
    """Each target's record (empty: none), as the lines after each records mark."""
    records: list[list[str]] = []
    for line in lines:
        if line == _RECORDS_MARK:
            records.append([])
        elif records:
            records[-1].append(line)
    return records


def _trusted_digest(record: list[str], identity: str) -> str | None:
    # The record's name is its path's digest; the path line is for people reading it.
    if len(record) < 5 or record[0] != RECORD_FORMAT:
        return None
    digest, recorded_at, recorded_identity = record[2], record[3], record[4]
    if not _DIGEST.fullmatch(digest) or recorded_identity != identity:
        return None
    if not recorded_at.isdigit() or _racy(identity, int(recorded_at)):
        return None
    return digest


def _racy(identity: str, recorded_at: int) -> bool:
    """Whether a record written at `recorded_at` (device seconds) could miss a rewrite
    of the same size: only on a filesystem that stamps whole seconds."""
    fields = identity.split(" ", 2)
    if len(fields) < 3 or not fields[1].isdigit():
        return True
    fraction = _FRACTION.search(fields[2])
    if fraction is not None and int(fraction.group(1)) != 0:
        return False
    return recorded_at < int(fields[1]) + RACY_MARGIN_S


_LISTING_LINE = re.compile(r"^(\d+) (\d+) \./(.+)$")


@dataclass(frozen=True)
class StoredFile:
    """One file in a device's work dir."""

    path: str  # relative to the work dir
    size: int
    mtime: int  # the device's clock, seconds


@dataclass(frozen=True)
class Listing:
    """Every file in a work dir, and the device's clock when it was read."""

    workdir: str
    now: int
    files: tuple[StoredFile, ...]


def listing_script(workdir: str, flavour: StatFlavour, names: Sequence[str] = ()) -> str:
    """Size, mtime and path (relative, so a stand-in device that rewrites paths
    cannot confuse it) of every file below workdir, after `now SECONDS`; with
    `names`, only the files whose name matches one of those find patterns (only
    those are stat'ed). toybox's find takes `-exec ... {} +` as GNU's and BSD's do
    (toys/posix/find.c, read 2026-12-03), and POSIX's parenthesised -o (the same
    file: "Parentheses can only stack 4096 deep", read 2026-12-04)."""
    fmt = "%s %Y %n" if flavour == "gnu" else "%z %m %N"
    flag = "-c" if flavour == "gnu" else "-f"
    chosen = ""
    if names:
        chosen = "\\( " + " -o ".join(f"-name {shlex.quote(n)}" for n in names) + " \\) "
    return (
        'echo "now $(date +%s)"; '
        f"cd {shlex.quote(workdir)} 2>/dev/null || exit 0; "
        f"find . -type f {chosen}-exec stat {flag} {shlex.quote(fmt)} {{}} +"
    )


def parse_listing(output: str, workdir: str) -> Listing:
    now = 0
    files: list[StoredFile] = []
    for line in output.splitlines():
        if line.startswith("now "):
            with contextlib.suppress(ValueError):
                now = int(line[4:].strip())
            continue
        match = _LISTING_LINE.match(line)
        if match:  # a name with a newline in it splits: not ours, and left alone
            files.append(StoredFile(match.group(3), int(match.group(1)), int(match.group(2))))
    return Listing(workdir.rstrip("/"), now, tuple(files))
