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
regardless, and rewrites the record.

The stat formats: GNU coreutils and toybox take `stat -c` (toybox's %y and %z
print nanoseconds, toys/other/stat.c, read 2026-12-03); macOS and the BSDs take
`stat -f`, where %Fm and %Fc print seconds with nine decimals (FreeBSD
usr.bin/stat/stat.c, format1 with FMTF_FLOAT, read 2026-12-03).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from etdeploy.devices.transfer import prepare_command

RECORD_DIR = ".etdeploy-digests"
RECORD_FORMAT = "etdeploy-digest/1"
RACY_MARGIN_S = 2
# What a probe prints between the file's stat and its record.
_RECORD_MARK = "--etdeploy-record--"
# What ends each probe's answer in a batch of them, with its exit status.
_PROBE_END = "--etdeploy-probe-end--"
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


def probe_script(workdir: str, target: str, flavour: StatFlavour, *, with_mode: bool) -> str:
    """One round trip before a push: make target's directory, drop the partials cut
    pushes of it left, and, when it exists, print `present`, its [mode and] identity
    line, and its record (touched: the record's mtime is when it was last wanted).
    Prints `absent` when it does not exist."""
    quoted = shlex.quote(target)
    record = shlex.quote(record_path(workdir, target))
    return prepare_command(target) + (
        f"if [ -f {quoted} ]; then echo present; "
        f"{identity_command(target, flavour, with_mode=with_mode)} || exit 1; "
        f"echo {_RECORD_MARK}; cat {record} 2>/dev/null && touch {record} 2>/dev/null; true; "
        "else echo absent; fi"
    )


def probes_script(
    workdir: str,
    targets: Sequence[str],
    flavour: StatFlavour,
    *,
    with_mode: bool,
    directories: Sequence[str] = (),
) -> str:
    """One round trip before pushing several files: `directories` made, then each
    target's probe_script in a subshell of its own (its `exit` ends only its own),
    each answer followed by an end line carrying its status (split_probes)."""
    parts = [f"mkdir -p {' '.join(shlex.quote(d) for d in directories)} || exit 1"]
    parts = parts if directories else []
    for target in targets:
        probe = probe_script(workdir, target, flavour, with_mode=with_mode)
        parts.append(f'( {probe} ); echo "{_PROBE_END} $?"')
    return "; ".join(parts) or "true"


class ProbeFailed(ValueError):
    """A probe of a batch exited non-zero (its mkdir or rm failed on the device)."""

    def __init__(self, target: str, status: int, answer: str) -> None:
        last = answer.strip().splitlines()[-1:] or [""]
        super().__init__(f"preparing {target} failed on the device (exit {status}): {last[0]}")
        self.answer = answer


def read_probes(output: str, targets: Sequence[str], *, with_mode: bool) -> list[Probe | None]:
    """probes_script's answer: what each target's probe found (None: absent), in
    order. A probe that failed is a ProbeFailed; an answer that cannot be read, or
    that does not hold one answer per target, a ValueError."""
    answers: list[tuple[int, str]] = []
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith(_PROBE_END):
            answers.append((int(line[len(_PROBE_END) :].strip()), "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    if len(answers) != len(targets):
        raise ValueError(f"expected {len(targets)} probe answers: {output[:200]!r}")
    found = []
    for target, (status, answer) in zip(targets, answers, strict=True):
        if status != 0:
            raise ProbeFailed(target, status, answer)
        found.append(parse_probe(answer, with_mode=with_mode))
    return found


@dataclass(frozen=True)
class Probe:
    """What a probe found at the target."""

    size: int
    mode: int | None
    identity: str
    # The recorded digest, when the record is trusted (see the module docstring).
    recorded: str | None


def parse_probe(output: str, *, with_mode: bool) -> Probe | None:
    """The probe's answer; None when the file is absent. A line it cannot read is a
    ValueError (the caller names the device and the command)."""
    lines = output.splitlines()
    if not lines or lines[0].strip() == "absent":
        return None
    if lines[0].strip() != "present" or len(lines) < 2:
        raise ValueError(f"unexpected probe output: {output[:200]!r}")
    stat_line = lines[1].strip()
    mode: int | None = None
    if with_mode:
        mode_text, _, stat_line = stat_line.partition(" ")
        mode = int(mode_text, 8)
    size_text = stat_line.split(" ", 1)[0]
    size = int(size_text)
    record = lines[3:] if len(lines) > 2 and lines[2] == _RECORD_MARK else []
    return Probe(size, mode, stat_line, _trusted_digest(record, stat_line))


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
