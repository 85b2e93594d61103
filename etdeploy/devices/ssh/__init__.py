"""A remote Mac or Linux box over SSH (paramiko): SFTP for files, exec channels to run.

- connection.py: SshSettings, their resolution against ~/.ssh/config (as the ssh
  command line does), host-key checking like StrictHostKeyChecking ("strict" or
  "accept-new"), and the connection itself, reopened after a failure.
- wire.py: the sh wrapper that reports a command's pid and group so a deadline
  can kill the group, both streams drained on threads, SFTP writes sized to one
  SSH packet and prefetched reads.
- helper.py: one long-lived shell for the short helper scripts (probes, digest
  records, hashes), so they do not each pay for a session.
- device.py, SshDevice: the Device on top (uname facts, the work dir, the push
  decision by the digest record, else remote sha256sum or shasum).
"""

from etdeploy.devices.ssh._import import import_paramiko

import_paramiko()  # before any module here imports it: without invoke (see _import.py)

from etdeploy.devices.ssh.connection import (  # noqa: E402  isort: skip
    DEFAULT_SSH_PORT,
    SSH_SETTING_TYPES,
    HostKeyPolicy,
    KnownHostsPolicy,
    SshSettings,
    SshTarget,
    UnknownHostKey,
    check_setting_types,
    openssh_fingerprint,
    resolve_target,
)
from etdeploy.devices.ssh.device import SshDevice  # noqa: E402  isort: skip

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
