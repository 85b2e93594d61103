"""What a command or helper script on the host gave back, and the one rule that turns
a failed helper script into an error: shared by the in-process link (wire.py) and the
keeper's client (keeper_client.py), neither of them needing paramiko for it."""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.devices.ssh.host_settings import SshTarget
from etdeploy.errors import DeviceError


class Cancelled(Exception):
    """The caller of an operation the keeper runs for it went away or asked it to stop:
    the operation stops as an interrupted one does in-process (a command's group is
    killed on the way out, wire.HostLink.execute)."""


@dataclass
class Completed:
    exit_code: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float
    timed_out: bool
    pid: int | None
    pgid: int | None
    # With timed_out: stopped for its silence (idle_timeout_s), not at its deadline.
    idle: bool = False


class HelperResult:
    """What a helper script did: its status (None: stopped at its deadline) and output."""

    def __init__(self, exit_code: int | None, stdout: bytes, stderr: bytes) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


def checked_output(
    done: HelperResult, script: str, what: str, deadline_s: float, target: SshTarget, name: str
) -> str:
    """A helper script's stdout, or the DeviceError saying why it failed."""
    if done.timed_out or done.exit_code != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        reason = detail[-1] if detail else f"exit status {done.exit_code}"
        if done.timed_out:
            reason = f"no answer within {deadline_s:.0f} s"
        raise DeviceError(
            f"{what} failed on {target.display}: {reason}",
            "check the remote account can do this by hand over ssh",
            device=name,
            command=script,
        )
    return done.stdout.decode(errors="replace")
