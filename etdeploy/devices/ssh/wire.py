"""Commands and files over one SSH connection: exec channels and SFTP.

Commands run under a small POSIX sh wrapper that reports its pid and process group
on the first stdout line, so a command past its deadline can be killed as a group
from a second channel. A session costs the host a login shell (its rc files: 0.1 s
and more), so the next command's session can be started ahead (start_command_session:
a shell that waits for its script on stdin), while other work goes on. The wrapper
stays the command's parent (no `exec`) and runs it in a process group of its own
(_wrapper): a command killed by a signal, even with its whole group, is reported as
the shell's status 128+N, as adb's shell does, never as sshd's exit-signal, which
paramiko reads as no status (-1). stdout and stderr are drained by two threads, so
a command writing megabytes to both never blocks on a full window.

Uploads are written pipelined, each SFTP write sized to one SSH packet, to the
temporary name the caller gives and renamed into place (posix-rename@openssh.com);
downloads keep up to 64 reads in flight. A connection cut mid-transfer raises
TransportError(retryable=True) and the next call reconnects.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import shlex
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import paramiko

from etdeploy.devices.process import (
    BoundedOutput,
    OutputPump,
    RunClock,
    killed_if_interrupted,
    wait_until_ended,
)
from etdeploy.devices.ssh.command_results import Cancelled, Completed, HelperResult, checked_output
from etdeploy.devices.ssh.connection import SshConnection
from etdeploy.devices.ssh.helper import HelperShell
from etdeploy.devices.transfer import HASH_CHUNK, Download, Upload, copy_stream
from etdeploy.errors import DeviceError, EtdeployError, TransportError

# Marker the wrapper prints first on stdout: "<marker> <pid> <pgid> <command's pgid>",
# "-" for a group that is not known.
_PID_MARKER = "ETDEPLOY-PID"
# The start of the token each command's wrapper carries as its $0.
_TOKEN_PREFIX = "etdeploy-run-"
# How long the wrapper waits after SIGTERM before SIGKILL, in tenths of a second.
_KILL_GRACE_TENTHS = 20
# SFTP reads and writes in this many bytes per local read; paramiko splits each
# write into 32 KiB requests and pipelines them.
_TRANSFER_CHUNK = 1 << 20
# Room for the SFTP write header (length, type, id, handle, offset, data length) and
# the channel framing, so one SFTP write fits one SSH packet instead of two.
_SFTP_WRITE_HEADROOM = 128
# How often a running command is checked against its deadline and idle timeout.
_POLL_S = 0.1
# A session started ahead: its shell runs, as $0 its token, the script it is sent.
_LAUNCHER = 'eval "$(cat)"'


def server_refused(exc: BaseException) -> bool:
    """Whether an SFTP failure is the server's own answer (no such file, permission
    denied, a failed write): paramiko raises those from the status reply it read,
    in SFTPClient._convert_status (paramiko 5.1, read 2026-12-03). Anything else in
    the middle of a transfer (EOF, a socket error, "Server connection dropped",
    "Socket is closed") is a lost connection, whether or not the transport has
    noticed yet: a status reply is the only proof that the server is still there."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_convert_status":
            return True
        tb = tb.tb_next
    return False


@contextlib.contextmanager
def _remote_file(sftp: paramiko.SFTPClient, path: str, mode: str) -> Iterator[paramiko.SFTPFile]:
    """An SFTP file, closed on the way out; when something already ends the transfer
    (Ctrl-C, SIGTERM, a lost connection), a failure of the close itself does not
    replace it.

    Closing asks the server and waits for its answer (SFTPFile.close sends CLOSE and
    reads the reply; paramiko 5.1, sftp_file.py, read 2026-12-05). An interruption
    that unwinds through a link that hangs waits there, and when the link then drops
    the close raises "Server connection dropped": a run stopped by SIGINT would end
    as a lost connection (exit 3), not as an interruption (130)."""
    remote = sftp.open(path, mode)
    try:
        yield remote
    except BaseException:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            remote.close()
        raise
    remote.close()


@dataclass
class _Started:
    """A command session started ahead, waiting for its script on stdin."""

    channel: paramiko.Channel
    transport: paramiko.Transport
    token: str


def _new_token() -> str:
    return f"{_TOKEN_PREFIX}{uuid.uuid4().hex[:16]}"


def token_kill(token: str, tool: str = "pkill -KILL") -> str:
    """A shell command that sends `tool` (pkill with a signal; pgrep to list) to the
    processes whose command line holds `token`, and to nothing else.

    The token is put together when the command runs, from two variables, so that
    the command's own command line, which holds the halves apart, never matches
    it. A token that is not etdeploy's (prefix and 16 hex digits) gives no command:
    an empty pattern would match every process."""
    suffix = token[len(_TOKEN_PREFIX) :]
    if not token.startswith(_TOKEN_PREFIX) or not re.fullmatch(r"[0-9a-f]{16}", suffix):
        raise ValueError(f"not a command token: {token!r}")
    return (
        f'p={_TOKEN_PREFIX}; s={suffix}; [ -n "$p" ] && [ -n "$s" ] && '
        f'{tool} -f "$p$s" 2>/dev/null; '
    )


def _wrapper(script: str) -> str:
    """The sh that runs `script` and reports, on the first stdout line, its own pid,
    its session's group and the group the script runs in.

    The script runs in a process group of its own (setsid(1): util-linux and
    busybox; else sh job control, which bash as macOS's /bin/sh has without a
    terminal while dash and busybox sh refuse it, checked 2026-12-05 with dash
    0.5.12, bash 5.2 and busybox 1.35), under this sh that waits for it. So a
    command that kills its whole group (`kill -KILL 0`) leaves this sh to report
    the death as 128+N in an exit-status: sshd would otherwise send exit-signal,
    which paramiko 5.1 does not read (Channel._handle_request, read 2026-12-05).
    Without either way the script runs in this sh's group, as before. The script's
    sh carries the token as its $0 too, so the token kill finds it."""
    # The group kill is only safe when the group is this session's own: sshd
    # setsid()s each session, so its leader is this sh ($$) or the login shell
    # that started it ($PPID). Otherwise fall back to killing the pid alone.
    inner = (
        'g=-; [ "$3" = own ] && g=$$; '
        f'printf "%s %s %s %s\\n" {_PID_MARKER} "$1" "${{2:--}}" "$g"; shift 3; ' + script
    )
    run = '/bin/sh -c "$c" "$0" "$$" "$pg"'
    return (
        'pg=$(ps -o pgid= -p $$ 2>/dev/null | tr -d " "); '
        'case "$pg" in "$$"|"$PPID") ;; *) pg="";; esac; '
        f"c={shlex.quote(inner)}; "
        f"if command -v setsid >/dev/null 2>&1; then setsid {run} own; "
        # A job's status notice ("Killed") goes to the shell's stderr: not the command's.
        f"else {{ set -m; }} 2>/dev/null; case $- in *m*) {run} own & wait $! 2>/dev/null;; "
        f'*) {run} "";; esac; fi; exit $?'
    )


class _PidHeader:
    """stdout's writer: takes the wrapper's first line (pid and groups) off the
    stream and passes the rest on."""

    def __init__(self, stdout: BoundedOutput) -> None:
        self.stdout = stdout
        self.pid: int | None = None
        self.pgid: int | None = None
        #: The group the command runs in, when it has one of its own.
        self.command_pgid: int | None = None
        self.known = threading.Event()
        self._header = bytearray()

    def write(self, data: bytes) -> None:
        if self.known.is_set():
            self.stdout.append(data)
            return
        self._header.extend(data)
        newline = self._header.find(b"\n")
        if newline < 0:
            return
        fields = self._header[:newline].decode(errors="replace").split()
        if len(fields) >= 2 and fields[0] == _PID_MARKER:
            self.pid = int(fields[1])
            groups = [int(f) if f.isdigit() else None for f in fields[2:4]] + [None, None]
            self.pgid, self.command_pgid = groups[0], groups[1]
            self.stdout.append(bytes(self._header[newline + 1 :]))
        else:
            self.stdout.append(bytes(self._header))
        self.known.set()

    def end(self) -> None:
        if not self.known.is_set():
            self.stdout.append(bytes(self._header))
        self.known.set()


class HostLink:
    """Commands and transfers on one host's connection; errors name the device."""

    def __init__(self, connection: SshConnection) -> None:
        self.connection = connection
        self.name = connection.name
        self.target = connection.target
        # Short helper scripts (probes, records, hashes) share one session.
        self.helper = HelperShell(connection)
        self._started: _Started | None = None
        self._starting = threading.Lock()
        #: How many command sessions were opened (started ahead or not).
        self.command_sessions = 0

    def connect(self) -> None:
        """Open the connection now (a failure is the connect error)."""
        self.connection.client()

    def prefetch_sftp(self) -> None:
        self.connection.prefetch_sftp()

    def counters(self) -> dict[str, int]:
        """What this link opened: connections, helper, command and SFTP sessions."""
        return {
            "connects": self.connection.connects,
            "helper_sessions": self.helper.sessions,
            "command_sessions": self.command_sessions,
            "sftp_sessions": self.connection.sftp_sessions,
        }

    def close(self) -> None:
        self.connection.close()

    def start_command_session(self) -> None:
        """Start the next command's session on a thread: its login shell starts now,
        and execute() sends it its script when there is one. A session that cannot be
        started is opened again by execute(), which reports what fails."""

        def start() -> None:
            with self._starting:
                if self._started is not None:
                    return
                with contextlib.suppress(EtdeployError, paramiko.SSHException, EOFError, OSError):
                    transport = self.connection.client().get_transport()
                    if transport is None:
                        return
                    token = _new_token()
                    channel = transport.open_session(
                        timeout=self.connection.settings.connect_timeout_s
                    )
                    self.command_sessions += 1
                    channel.exec_command(f"/bin/sh -c {shlex.quote(_LAUNCHER)} {token}")
                    self._started = _Started(channel, transport, token)

        threading.Thread(target=start, name="etdeploy-ssh-session", daemon=True).start()

    def _session(self, transport: paramiko.Transport, script: str) -> tuple[paramiko.Channel, str]:
        """A channel running `script` under its wrapper, and its token: the session
        started ahead when it is still there, else a new one."""
        with self._starting:  # one being started is worth waiting for
            started, self._started = self._started, None
        wrapped = _wrapper(script)
        if started is not None:
            channel = started.channel
            if started.transport is transport and not channel.closed:
                try:
                    channel.sendall(wrapped.encode())
                    channel.shutdown_write()
                    return channel, started.token
                except (paramiko.SSHException, EOFError, OSError):
                    pass  # nothing of the script ran: start it in a session of its own
            with contextlib.suppress(Exception):
                channel.close()
        token = _new_token()
        channel = transport.open_session(timeout=self.connection.settings.connect_timeout_s)
        self.command_sessions += 1
        channel.exec_command(f"/bin/sh -c {shlex.quote(wrapped)} {token}")
        channel.shutdown_write()
        return channel, token

    # -- commands ---------------------------------------------------------------

    def _kill(self, header: _PidHeader, token: str) -> None:
        """Stop a command: TERM to its groups (and the wrapper), CONT so a stopped
        process acts on it now, KILL to what is left after the grace period; then
        KILL to anything still carrying the command's token (a wrapper that had not
        said its pid yet, a login shell outside the group)."""
        by_token = token_kill(token)
        if header.pid is None:
            script = by_token + "exit 0"
        else:
            kill = self._group_kill(header.pid, header.pgid, header.command_pgid)
            script = kill + by_token + "exit 0"
        with contextlib.suppress(Exception):
            self.execute(script, deadline_s=15, kill_on_timeout=False)

    @staticmethod
    def _group_kill(pid: int, pgid: int | None, command_pgid: int | None = None) -> str:
        """A shell script that stops the wrapper `pid`, its session's group `pgid` and
        the group its command runs in, `command_pgid` (each where known)."""
        # The command's group first: the wrapper outlives it, not the reverse.
        targets = " ".join([f"-{g}" for g in (command_pgid, pgid) if g] + [str(pid)])
        # Liveness ignores zombies: an orphan whose reaper is slow (or a container
        # init that never reaps) is dead for our purpose. ps -A -o pgid,stat works
        # on macOS and procps alike; without ps, kill -0 is the fallback.
        group, command_group = pgid or 0, command_pgid or 0
        # Without a group of its own the wrapper's children (the command) are sent
        # the signal by their parent's pid first, while that parent still has them.
        children = (
            "" if pgid else f"pkill -TERM -P {pid} 2>/dev/null; pkill -CONT -P {pid} 2>/dev/null; "
        )
        return (
            f"alive() {{ if command -v ps >/dev/null 2>&1; then "
            f"ps -A -o pgid= -o pid= -o stat= 2>/dev/null | awk -v g={group} "
            f"-v c={command_group} -v p={pid} "
            "'($1==g || $1==c || $2==p) && $3 !~ /^Z/ {n++} END {exit n ? 0 : 1}'; "
            f"else kill -s 0 -- {pid} 2>/dev/null; fi; }}; "
            f"{children}for t in {targets}; do kill -s TERM -- $t 2>/dev/null; "
            "kill -s CONT -- $t 2>/dev/null; done; i=0; "
            f"while [ $i -lt {_KILL_GRACE_TENTHS} ]; do alive || break; "
            "sleep 0.1; i=$((i+1)); done; "
            f"for t in {targets}; do kill -s KILL -- $t 2>/dev/null; done; "
        )

    def execute(
        self,
        script: str,
        *,
        deadline_s: float,
        idle_timeout_s: float | None = None,
        kill_on_timeout: bool = True,
        cancel: threading.Event | None = None,
    ) -> Completed:
        """Run a POSIX sh script remotely; drain both streams; kill the group on timeout.
        `cancel` set (by a keeper whose client went away) stops it as an interruption
        does: the group is killed and Cancelled raised."""
        transport = self.connection.client().get_transport()
        clock = RunClock(deadline_s, idle_timeout_s)
        # The wrapper's $0 is its token: its command line (and its login shell's) carry
        # it, so the kill finds them even before the wrapper has said its pid.
        try:
            assert transport is not None
            channel, token = self._session(transport, script)
        except (paramiko.SSHException, EOFError, OSError, AssertionError) as exc:
            raise self.connection.lost(exc, "command start") from exc

        stdout = BoundedOutput()
        stderr = BoundedOutput()
        header = _PidHeader(stdout)
        pumps = [
            OutputPump(
                lambda: channel.recv(65536),
                header.write,
                clock,
                name="ssh-stdout",
                on_end=header.end,
            ),
            OutputPump(lambda: channel.recv_stderr(65536), stderr.append, clock, name="ssh-stderr"),
        ]
        for pump in pumps:
            pump.start()

        def ended(timeout: float) -> bool:
            if cancel is not None and cancel.is_set():
                raise Cancelled("the command's caller went away")
            pumps[0].join(timeout=timeout)
            if not pumps[0].is_alive():
                pumps[1].join(timeout=timeout)
            return not any(p.is_alive() for p in pumps)

        def kill() -> None:
            if kill_on_timeout:
                self._kill(header, token)

        def kill_and_close() -> None:
            try:
                kill()
            finally:
                channel.close()

        with killed_if_interrupted(kill_and_close):
            timed_out = wait_until_ended(ended, clock, poll_s=_POLL_S)

        if timed_out:
            header.known.wait(timeout=2)
            kill()
            for pump in pumps:
                pump.join(timeout=5)
            channel.close()
        return Completed(
            exit_code=self._exit_code(channel, pumps, clock, timed_out),
            stdout=stdout.data(),
            stderr=stderr.data(),
            elapsed_s=clock.elapsed_s,
            timed_out=timed_out,
            pid=header.pid,
            pgid=header.pgid,
            idle=timed_out and clock.idle,
        )

    def _exit_code(
        self,
        channel: paramiko.Channel,
        pumps: list[OutputPump[bytes]],
        clock: RunClock,
        timed_out: bool,
    ) -> int:
        """The ended command's status (-1: none came); a lost connection raised."""
        exit_code = -1
        if not timed_out:
            if channel.status_event.wait(timeout=max(1.0, clock.deadline - time.monotonic())):
                exit_code = channel.recv_exit_status()
            channel.close()
        elif channel.exit_status_ready():
            exit_code = channel.recv_exit_status()
        errors = [p.error for p in pumps if p.error is not None]
        if errors and not timed_out:
            raise self.connection.lost(errors[0], "a command")
        if not self.connection.alive() and not timed_out and exit_code == -1:
            raise self.connection.lost(EOFError("channel closed without exit status"), "a command")
        return exit_code

    def helper_run(self, script: str, *, deadline_s: float) -> HelperResult:
        """Run a helper script in the helper shell (helper.py): no session of its own."""
        return self.helper.run(script, deadline_s=deadline_s)

    def checked(self, script: str, what: str, *, deadline_s: float = 60) -> str:
        """Run a short helper script; its stdout, or a DeviceError."""
        done = self.helper_run(script, deadline_s=deadline_s)
        return checked_output(done, script, what, deadline_s, self.target, self.name)

    # -- files ------------------------------------------------------------------

    def upload(self, upload: Upload) -> int:
        """Write upload.local to upload.partial by SFTP, check its size, then set its
        mode and rename it to upload.target; the bytes sent."""
        local, target, partial, size = upload.local, upload.target, upload.partial, upload.size
        sftp = self.connection.sftp()
        try:
            with open(local, "rb") as src, _remote_file(sftp, partial, "wb") as dst:
                dst.set_pipelined(True)
                # paramiko writes 32 KiB per request, which with its header overflows
                # the server's 32 KiB packet into two; size requests to fit one.
                packet = sftp.get_channel().out_max_packet_size
                dst.MAX_REQUEST_SIZE = max(4096, min(32768, packet - _SFTP_WRITE_HEADROOM))
                sent = copy_stream(src, dst, upload.progress, _TRANSFER_CHUNK)
            landed = sftp.stat(partial).st_size
            if landed != size:
                # paramiko does not wait for the status of the last pipelined writes
                # before it closes a file (SFTPFile._close, 5.1, read 2026-12-03), so
                # a disk that filled up shows here as a short file: ask the disk.
                free = self._free_bytes(posixpath.dirname(target))
                if free is not None and free < size - landed:
                    self._discard(partial)
                    raise DeviceError(
                        f"the disk is full on {self.target.display}: {landed} of {size} bytes "
                        f"of {local.name} fit in {posixpath.dirname(target)}, {free} bytes are free",
                        f"free space there: `etdeploy clean --device {self.name}` removes what "
                        "earlier runs left (add --dry-run to see it first)",
                        device=self.name,
                    )
                raise TransportError(
                    f"upload of {local.name} to {target} is short: {landed} of {size} bytes",
                    "retry the push",
                    device=self.name,
                    retryable=True,
                )
            sftp.chmod(partial, upload.mode)
            sftp.posix_rename(partial, target)
        except TransportError:
            self._discard(partial)
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not server_refused(exc):
                # The next push of this file drops the partial (transfer.prepare_command).
                raise self.connection.lost(
                    exc,
                    f"upload of {local.name} ({upload.progress.done} of {size} bytes "
                    "handed to the connection, none confirmed written)",
                ) from exc
            self._discard(partial)
            raise DeviceError(
                f"cannot write {target} on {self.target.display}: {exc}",
                "check the directory is writable and the disk has room: "
                f"`etdeploy clean --device {self.name}` removes what earlier runs left there",
                device=self.name,
            ) from exc
        except BaseException:
            # An interruption (Ctrl-C, SIGTERM as SystemExit) with the link still up:
            # what was sent is removed now, not left for the next push to find.
            self._discard(partial)
            raise
        return sent

    def _free_bytes(self, directory: str) -> int | None:
        """Bytes free for this user on directory's filesystem (POSIX `df -P`), or None."""
        try:
            done = self.helper_run(f"df -Pk {shlex.quote(directory)}", deadline_s=15)
            fields = done.stdout.decode(errors="replace").strip().splitlines()[-1].split()
            return int(fields[3]) * 1024
        except (EtdeployError, IndexError, ValueError):
            return None

    def _discard(self, partial: str) -> None:
        if self.connection.alive():
            with contextlib.suppress(Exception):
                self.connection.sftp().remove(partial)

    def exists(self, path: str) -> bool:
        """Whether path exists on the host (SFTP stat)."""
        sftp = self.connection.sftp()
        try:
            sftp.stat(path)
        except FileNotFoundError:
            return False
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not server_refused(exc):
                raise self.connection.lost(exc, f"stat of {path}") from exc
            raise DeviceError(
                f"cannot stat {path} on {self.target.display}: {exc}", None, device=self.name
            ) from exc
        return True

    def download(self, download: Download) -> None:
        """Write the remote download.source to download.partial by SFTP."""
        source = download.source
        sftp = self.connection.sftp()
        try:
            try:
                size = sftp.stat(source).st_size or 0
            except FileNotFoundError as exc:
                raise DeviceError(
                    f"no such file on {self.target.display}: {source}",
                    "check the runner wrote it; its log says why not",
                    device=self.name,
                ) from exc
            progress = download.progress(size)
            with _remote_file(sftp, source, "rb") as src, open(download.partial, "wb") as dst:
                # OpenSSH's own sftp keeps at most 64 reads in flight; so do we.
                src.prefetch(size, max_concurrent_requests=64)
                received = copy_stream(src, dst, progress, HASH_CHUNK)
            if received != size:
                raise TransportError(
                    f"download of {source} is short: {received} of {size} bytes",
                    "retry the pull",
                    device=self.name,
                    retryable=True,
                )
        except (DeviceError, TransportError):
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not server_refused(exc):
                raise self.connection.lost(exc, f"download of {source}") from exc
            raise DeviceError(
                f"cannot read {source} on {self.target.display}: {exc}",
                "check the file is readable by the ssh user",
                device=self.name,
            ) from exc
