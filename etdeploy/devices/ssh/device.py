"""SshDevice: a remote Mac or Linux box over SSH (paramiko), SFTP for files and
exec channels to run.

The connection (settings, ssh_config, host keys) is connection.py's; the exec
wrapper, the group kill and the SFTP transfers are wire.py's. Uploads go to a
temporary name and are renamed into place; a connection cut mid-transfer raises
TransportError(retryable=True), leaves nothing under the real name, and the next
call reconnects; the next push of that file drops the cut one's partial.
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
from collections.abc import Sequence

from etdeploy.background import supported
from etdeploy.devices.base import Command, DeviceBase, DeviceInfo, RunOutput
from etdeploy.devices.digest_records import StatFlavour, record_command
from etdeploy.devices.process import CWD_FAILED, env_exports
from etdeploy.devices.ssh.host_settings import SshSettings, SshTarget
from etdeploy.devices.ssh.keeper_client import KeeperLink
from etdeploy.devices.ssh.link import SshLink, direct_link
from etdeploy.devices.transfer import (
    NO_SUCH_FILE,
    Download,
    RemoteFile,
    Upload,
    parse_sha256_line,
    sha256_command,
)
from etdeploy.devices.workdir import remove_command
from etdeploy.errors import DeviceError, EtdeployError, UsageError


class SshDevice(DeviceBase):
    """A host reached over SSH: files by SFTP, commands in exec channels."""

    transport = "ssh"

    def __init__(
        self,
        settings: SshSettings,
        *,
        name: str | None = None,
        lock_timeout_s: float = 600.0,
    ) -> None:
        super().__init__(name or settings.host, lock_timeout_s=lock_timeout_s)
        self.settings = settings
        # persist_s > 0: through the host's keeper (keeper.py), else in this process.
        self._link: SshLink = open_link(settings, self.name)
        self._facts: dict[str, str] | None = None
        self._workdir: str | None = None

    @property
    def target(self) -> SshTarget:
        """The settings resolved against ssh_config: what is dialled."""
        return self._link.target

    def counters(self) -> dict[str, int]:
        """What the link opened: connects, helper_sessions, command_sessions,
        sftp_sessions (a keeper's, with its pid, when one serves)."""
        return self._link.counters()

    @property
    def connects(self) -> int:
        """How many times a connection was opened (a reconnect adds one)."""
        return self.counters()["connects"]

    @property
    def helper_sessions(self) -> int:
        """How many sessions the helper scripts used (helper.py: one, unless one failed)."""
        return self.counters()["helper_sessions"]

    def helper(self, script: str, what: str, *, deadline_s: float = 60) -> str:
        """Run a short POSIX sh script on the host in the helper shell; its stdout,
        or a DeviceError naming `what`."""
        return self._link.checked(script, what, deadline_s=deadline_s)

    def close(self) -> None:
        self._link.close()

    # -- identity ---------------------------------------------------------------

    def facts(self) -> dict[str, str]:
        """uname and home directory of the remote, read once per device object."""
        if self._facts is None:
            # Connected, the sessions a job uses next start while this one answers:
            # a command's (start_command_session) and the SFTP session.
            self._link.connect()
            self._link.start_command_session()
            self._link.prefetch_sftp()
            # One uname for three facts: the symbols chosen are written in -a's order,
            # sysname release machine (POSIX.1-2017 uname, STDOUT; GNU and BSD alike,
            # read 2026-12-04), none of them with a space in it.
            out = self._link.checked(
                'set -- $(uname -srm); printf "sysname=%s\\nrelease=%s\\nmachine=%s\\n" '
                '"$1" "$2" "$3"; printf "home=%s\\n" "$HOME"; '
                'printf "user=%s\\n" "${USER:-$(id -un)}"; '
                'if [ -n "$HOME" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; then '
                'printf "home_writable=1\\n"; fi; '
                'if [ "$1" = Darwin ]; then '
                'printf "product_version=%s\\n" "$(sw_vers -productVersion 2>/dev/null)"; '
                'printf "model=%s\\n" "$(sysctl -n hw.model 2>/dev/null)"; fi',
                "reading uname",
            )
            facts: dict[str, str] = {}
            for line in out.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    facts[key] = value.strip()
            self._facts = facts
        return self._facts

    @property
    def os_name(self) -> str:
        """'darwin', 'linux', ... (uname -s, lower case)."""
        return self.facts().get("sysname", "").lower()

    @property
    def arch(self) -> str:
        machine = self.facts().get("machine", "")
        return {"aarch64": "arm64", "amd64": "x86_64"}.get(machine, machine)

    def info(self) -> DeviceInfo:
        facts = self.facts()
        return DeviceInfo(
            name=self.name,
            transport=self.transport,
            serial=self.target.display,
            os=self.os_name,
            abi=f"{self.os_name}-{self.arch}",
            model=facts.get("model", ""),
            os_version=facts.get("product_version") or facts.get("release", ""),
            extra={
                "uname_machine": facts.get("machine", ""),
                "kernel": facts.get("release", ""),
                "home": facts.get("home", ""),
                "workdir": self.workdir,
            },
        )

    def lock_key(self) -> str:
        return f"ssh:{self.target.user}@{self.target.hostname}:{self.target.port}"

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            facts = self.facts()
            home = facts.get("home", "")
            configured = self.settings.workdir
            if configured:
                if configured == "~" or configured.startswith("~/"):
                    configured = home + configured[1:]
                elif not configured.startswith("/"):
                    configured = f"{home}/{configured}"
                self._workdir = posixpath.normpath(configured)
            elif home and facts.get("home_writable"):
                self._workdir = f"{home.rstrip('/')}/etdeploy"
            else:
                self._workdir = f"/tmp/etdeploy-{facts.get('user') or self.target.user}"
        return self._workdir

    def resolve(self, remote: str) -> str:
        """An absolute remote path: ~ is the remote home, relative is below workdir."""
        if remote.startswith("/"):
            return posixpath.normpath(remote)
        if remote == "~" or remote.startswith("~/"):
            return posixpath.normpath(self.facts().get("home", "") + remote[1:])
        return posixpath.normpath(f"{self.workdir}/{remote}")

    # -- files ------------------------------------------------------------------

    def _sha256_command(self, path: str) -> str:
        # macOS has no sha256sum; its shasum (perl) has -a 256.
        return sha256_command(path, "shasum -a 256" if self.os_name == "darwin" else "sha256sum")

    def sha256(self, remote: str) -> str | None:
        return self._remote_sha256(self.resolve(remote))

    def _remote_sha256(self, path: str) -> str | None:
        script = self._sha256_command(path)
        done = self._link.helper_run(script, deadline_s=300)
        if done.exit_code == NO_SUCH_FILE:
            return None
        out = done.stdout.decode(errors="replace").strip()
        if done.timed_out or done.exit_code != 0 or not out:
            raise DeviceError(
                f"cannot hash {path} on {self.target.display}: "
                f"{done.stderr.decode(errors='replace').strip() or f'exit status {done.exit_code}'}",
                "sha256sum (Linux) or shasum (macOS) must be on the remote PATH",
                device=self.name,
            )
        return parse_sha256_line(out)

    @property
    def stat_flavour(self) -> StatFlavour:
        # macOS and the BSDs: stat -f; Linux (GNU coreutils, busybox, toybox): stat -c.
        return "gnu" if self.os_name == "linux" else "bsd"

    def _prepare_push(self, target: str) -> RemoteFile | None:
        return self._prepare_pushes([target], [])[0]

    def _prepare_pushes(
        self, targets: Sequence[str], directories: Sequence[str]
    ) -> list[RemoteFile | None]:
        # One round trip: the directories, no stale partials, each file's stat and record.
        hint = "stat (GNU or BSD) must be on the remote PATH"
        return self._probed(targets, directories, with_mode=False, hint=hint)

    def _helper(self, script: str, what: str, *, deadline_s: float = 120.0) -> str:
        return self.helper(script, what, deadline_s=deadline_s)

    def _verify(self, target: str, found: RemoteFile) -> str | None:
        return self._remote_sha256(target)

    def _record(self, target: str, digest: str) -> None:
        """Record what target holds; a record that cannot be written costs a hash on
        the next push, not this one."""
        command = record_command(self.workdir, target, digest, self.stat_flavour)
        if command:
            with contextlib.suppress(EtdeployError):
                self._link.checked(command, f"recording the digest of {target}")

    def _keep(self, target: str, found: RemoteFile, digest: str, mode: int) -> None:
        # The probe does not read the mode: it stays as the first push set it.
        if found.sha256 != digest:
            self._record(target, digest)

    def _upload(self, upload: Upload) -> int:
        sent = self._link.upload(upload)
        self._record(upload.target, upload.digest.result())
        return sent

    def _download(self, download: Download) -> None:
        self._link.download(download)

    def exists(self, remote: str) -> bool:
        return self._link.exists(self.resolve(remote))

    def makedirs(self, remote: str) -> None:
        path = self.resolve(remote)
        self._link.checked(f"mkdir -p {shlex.quote(path)}", f"creating {path}")

    def _remove(self, paths: Sequence[str], *, recursive: bool) -> None:
        home = self.facts().get("home", "").rstrip("/")
        for path in paths:
            if path in ("/", "", home) or path.count("/") < 2:
                raise UsageError(
                    f"refusing to remove {path} on {self.target.display}",
                    "remove paths below the work dir",
                )
        what = f"removing {paths[0]}" if len(paths) == 1 else f"removing {len(paths)} paths"
        self._link.checked(remove_command(self.workdir, paths, recursive=recursive), what)

    # -- processes ---------------------------------------------------------------

    def _run(self, command: Command) -> RunOutput:
        # What the command writes comes back by SFTP: its session opens meanwhile.
        self._link.prefetch_sftp()
        parts: list[str] = []
        if command.cwd is not None:
            parts.append(f"cd {shlex.quote(self.resolve(command.cwd))} || exit {CWD_FAILED};")
        if command.env:
            parts.append(env_exports(command.env).rstrip())
        # Not `exec`: the shell reports a signal death as 128+N (wire.py); the
        # explicit exit keeps a shell that execs its last command from doing so.
        parts.append(shlex.join(command.argv) + "; exit $?")
        done = self._link.execute(
            " ".join(parts), deadline_s=command.deadline_s, idle_timeout_s=command.idle_timeout_s
        )
        if done.exit_code == -1 and not done.timed_out:
            # sshd sent no exit-status: the wrapper itself was killed from outside
            # (its command dying by a signal is reported as 128+N, wire.py). That
            # is not a status, and -1 would read as SIGHUP where a status is read.
            out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
            raise DeviceError(
                f"{command.argv[0]} ended without an exit status on {self.target.display}: "
                "sshd sent none, as when the shell running it is killed from outside",
                "see what on the host stops it (a `pkill -f` matching its command line "
                "kills that shell too), then run it again",
                device=self.name,
                command=shlex.join(command.argv),
                log=out or None,
            )
        return command.output(
            done.exit_code,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
            elapsed_s=done.elapsed_s,
            timed_out=done.timed_out,
            idle=done.idle,
        )


def open_link(settings: SshSettings, name: str) -> SshLink:
    """A keeper's client when the settings keep the connection, else the direct link."""
    # A keeper needs a Unix socket, fork() and a peer's uid to check
    # (etdeploy.background.supported); without them (Windows, macOS) none is kept.
    if settings.persist_s > 0 and supported():
        return KeeperLink(settings, name)
    return direct_link(settings, name)
