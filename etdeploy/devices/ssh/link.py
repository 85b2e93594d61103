"""What SshDevice needs from the host's link, and the direct link (device.py's
open_link chooses between it and a keeper's client).

With persist_s > 0 (the user turned it on) the link is a keeper's client (keeper_client.py): the connection,
its helper shell, its SFTP session and a command session started ahead live in a
background process that outlives the command, and this process never imports
paramiko. With persist_s = 0 it is wire.HostLink in this process, as before keepers.
"""

from __future__ import annotations

from typing import Protocol

from etdeploy.devices.ssh.command_results import Completed, HelperResult
from etdeploy.devices.ssh.host_settings import SshSettings, SshTarget
from etdeploy.devices.transfer import Download, Upload


class SshLink(Protocol):
    """Commands and files on one host; every failure is an EtdeployError naming it."""

    name: str

    @property
    def target(self) -> SshTarget: ...

    def connect(self) -> None: ...

    def start_command_session(self) -> None: ...

    def prefetch_sftp(self) -> None: ...

    def helper_run(self, script: str, *, deadline_s: float) -> HelperResult: ...

    def checked(self, script: str, what: str, *, deadline_s: float = 60) -> str: ...

    def execute(
        self, script: str, *, deadline_s: float, idle_timeout_s: float | None = None
    ) -> Completed: ...

    def upload(self, upload: Upload) -> int: ...

    def download(self, download: Download) -> None: ...

    def exists(self, path: str) -> bool: ...

    def counters(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def direct_link(settings: SshSettings, name: str) -> SshLink:
    """The link in this process (imports paramiko); ssh_config is read now."""
    from etdeploy.devices.ssh.connection import SshConnection, resolve_target
    from etdeploy.devices.ssh.wire import HostLink

    return HostLink(SshConnection(settings, resolve_target(settings), name))
