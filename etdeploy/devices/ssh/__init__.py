"""A remote Mac or Linux box over SSH (paramiko): SFTP for files, exec channels to run.

- connection.py: SshSettings, their resolution against ~/.ssh/config (as the ssh
  command line does), host-key checking like StrictHostKeyChecking ("strict" or
  "accept-new"), and the connection itself, reopened after a failure.
- wire.py: the sh wrapper that reports a command's pid and group so a deadline
  can kill the group, both streams drained on threads, SFTP writes sized to one
  SSH packet and prefetched reads.
- helper.py: one long-lived shell for the short helper scripts (probes, digest
  records, hashes), so they do not each pay for a session.
- keeper.py, keeper_client.py, keeper_ipc.py: the connection and its sessions kept
  in a background process between commands (persist_s), and its client.
- device.py, SshDevice: the Device on top (uname facts, the work dir, the push
  decision by the digest record, else remote sha256sum or shasum).
"""

from typing import TYPE_CHECKING

from etdeploy.lazy import lazy_exports

# Imported when first asked for: the settings and the keeper's client need no
# paramiko, and a command a keeper serves never imports it.
_EXPORTS = {
    "DEFAULT_SSH_PORT": "etdeploy.devices.ssh.host_settings",
    "SSH_SETTING_TYPES": "etdeploy.devices.ssh.host_settings",
    "HostKeyPolicy": "etdeploy.devices.ssh.host_settings",
    "SshSettings": "etdeploy.devices.ssh.host_settings",
    "SshTarget": "etdeploy.devices.ssh.host_settings",
    "check_setting_types": "etdeploy.devices.ssh.host_settings",
    "KnownHostsPolicy": "etdeploy.devices.ssh.connection",
    "UnknownHostKey": "etdeploy.devices.ssh.connection",
    "openssh_fingerprint": "etdeploy.devices.ssh.connection",
    "resolve_target": "etdeploy.devices.ssh.connection",
    "SshDevice": "etdeploy.devices.ssh.device",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from etdeploy.devices.ssh.connection import (
        KnownHostsPolicy,
        UnknownHostKey,
        openssh_fingerprint,
        resolve_target,
    )
    from etdeploy.devices.ssh.device import SshDevice
    from etdeploy.devices.ssh.host_settings import (
        DEFAULT_SSH_PORT,
        SSH_SETTING_TYPES,
        HostKeyPolicy,
        SshSettings,
        SshTarget,
        check_setting_types,
    )

__all__ = [
    "DEFAULT_SSH_PORT",
    "SSH_SETTING_TYPES",
    "HostKeyPolicy",
    "KnownHostsPolicy",
    "SshDevice",
    "SshSettings",
    "SshTarget",
    "UnknownHostKey",
    "check_setting_types",
    "openssh_fingerprint",
    "resolve_target",
]
