"""Reaching an SSH host: its settings, ssh_config, host keys and the connection.

Behaviour follows OpenSSH's client where a user would expect it to:

- ~/.ssh/config is honoured (HostName, User, Port, IdentityFile, UserKnownHostsFile)
  through paramiko.SSHConfig; explicit settings win over it, as flags do for ssh.
- Host keys are checked like StrictHostKeyChecking: "strict" (yes) refuses a host
  missing from known_hosts, "accept-new" records a new host's key (under a file
  lock) and refuses a changed one. A changed key is always an error.
- Keys: the configured identity files (key_filename, else IdentityFile) and
  ssh-agent; ~/.ssh/id_* only when no identity file is named.

SshConnection holds one live connection (and its SFTP session) and reconnects
after a failure; every failure is a DeviceError or TransportError naming the device.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import socket
import threading
from pathlib import Path
from typing import cast

import paramiko

from etdeploy.devices.ssh.host_settings import (  # the settings, also importable from here
    DEFAULT_SSH_PORT,
    SSH_SETTING_TYPES,
    HostKeyPolicy,
    SshSettings,
    SshTarget,
    check_setting_types,
)
from etdeploy.errors import DeviceError, EtdeployError, TransportError, UsageError

__all__ = [
    "DEFAULT_SSH_PORT",
    "SSH_SETTING_TYPES",
    "HostKeyPolicy",
    "KnownHostsPolicy",
    "SshConnection",
    "SshSettings",
    "SshTarget",
    "UnknownHostKey",
    "check_setting_types",
    "openssh_fingerprint",
    "resolve_target",
]

# paramiko's transport thread logs a failed connection at ERROR with its traceback
# (Transport.run, paramiko 5.1), which Python's last-resort handler prints to
# stderr under etdeploy's one-line error; the error this module raises says it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def _transport_preferring_aead(sock: object, **kwargs: object) -> paramiko.Transport:
    """A paramiko Transport that offers AES-GCM first.

    paramiko's default order starts with aes-ctr plus a separate HMAC computed per
    packet; with GCM the MAC comes from the same C call that encrypts. Together with
    one-packet SFTP writes (see push) a 256 MB upload on loopback went from 110 to
    185 MB/s (measured 2026-12-02, paramiko 5.1, OpenSSH 9.2). Servers without GCM
    still negotiate the rest of the list.
    """
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        # Requests are small and each waits for its answer (an SFTP stat, a helper
        # script): with Nagle's algorithm one could sit behind the peer's delayed
        # ACK (40 ms on Linux): a warm run over loopback went from ~0.40 s to ~0.26 s.
        # OpenSSH sets it on its connections whatever the session (packet.c,
        # ssh_packet_set_interactive calls set_nodelay; read 2026-12-05); paramiko
        # 5.1 does not.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport = paramiko.Transport(sock, **kwargs)  # type: ignore[arg-type]
    options = transport.get_security_options()
    ciphers = list(options.ciphers)
    options.ciphers = [c for c in ciphers if "gcm" in c] + [c for c in ciphers if "gcm" not in c]
    return transport


def _expand_local(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _local_user() -> str:
    return getpass.getuser()


def resolve_target(settings: SshSettings) -> SshTarget:
    """Merge settings with ssh_config the way the ssh command line does."""
    config_path = Path(_expand_local(settings.ssh_config or "~/.ssh/config"))
    options: dict[str, object] = {}
    if config_path.is_file():
        try:
            options = dict(paramiko.SSHConfig.from_path(str(config_path)).lookup(settings.host))
        except (paramiko.ssh_exception.ConfigParseError, OSError, ValueError) as exc:
            raise UsageError(
                f"cannot read ssh config {config_path}: {exc}",
                "fix the file, or point ssh_config at another one",
            ) from exc
    hostname = str(options.get("hostname") or settings.host)
    user = settings.user or str(options.get("user") or _local_user())
    port_value = settings.port if settings.port is not None else options.get("port")
    try:
        port = int(port_value) if port_value is not None else DEFAULT_SSH_PORT  # type: ignore[call-overload]
    except ValueError as exc:
        raise UsageError(
            f"bad ssh port {port_value!r} for host {settings.host}", "use a number"
        ) from exc
    if settings.key_filename:
        keys: tuple[str, ...] = (_expand_local(settings.key_filename),)
    else:
        configured = cast("list[str]", options.get("identityfile") or [])
        keys = tuple(
            _expand_local(str(k)) for k in configured if Path(_expand_local(str(k))).exists()
        )
    known: tuple[Path, ...]
    if settings.known_hosts:
        known = (Path(_expand_local(settings.known_hosts)),)
    elif options.get("userknownhostsfile"):
        # OpenSSH allows several files; new keys go to the first.
        known = tuple(Path(_expand_local(p)) for p in str(options["userknownhostsfile"]).split())
    else:
        known = (Path(_expand_local("~/.ssh/known_hosts")),)
    return SshTarget(
        alias=settings.host,
        hostname=hostname,
        port=port,
        user=user,
        key_filenames=keys,
        known_hosts=known,
    )


def openssh_fingerprint(key: paramiko.PKey) -> str:
    """SHA256:base64 fingerprint, as ssh-keygen -l prints it."""
    return str(key.fingerprint)


class UnknownHostKey(paramiko.SSHException):
    """Raised by the strict policy; turned into a DeviceError with a fix."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's StrictHostKeyChecking for hosts absent from known_hosts.

    paramiko calls this only for hosts it has no key for; a host whose key differs
    from the recorded one raises BadHostKeyException before it gets here, under
    either policy. "accept-new" appends the key to the first known_hosts file under
    a lock, re-reading it first so two processes meeting a new host at once cannot
    record it twice or let a second, different key in.
    """

    def __init__(self, policy: HostKeyPolicy, known_hosts: Path) -> None:
        self.policy = policy
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.policy != "accept-new":
            raise UnknownHostKey(hostname, key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        import filelock  # only to record a new host's key

        lock = filelock.FileLock(str(self.known_hosts) + ".etdeploy.lock")
        with lock:
            if self.known_hosts.exists():
                current = paramiko.HostKeys(str(self.known_hosts))
                recorded = current.lookup(hostname)
                if recorded is not None:
                    mine = recorded.get(key.get_name())
                    if mine is None or mine != key:
                        expected = mine or next(iter(recorded.values()))
                        raise paramiko.BadHostKeyException(hostname, key, expected)
                    client.get_host_keys().add(hostname, key.get_name(), key)
                    return
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            with open(self.known_hosts, "a", encoding="ascii") as f:
                f.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


class SshConnection:
    """One host's connection and SFTP session, opened on first use and again after
    a failure. `name` is the device's name, for the errors."""

    def __init__(self, settings: SshSettings, target: SshTarget, name: str) -> None:
        self.settings = settings
        self.target = target
        self.name = name
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        # Held while an SFTP session opens (~0.2 s where the login shell sources rc
        # files), not the connection's lock: commands go on meanwhile (prefetch_sftp).
        self._sftp_lock = threading.Lock()
        #: How many times a connection was opened (a reconnect adds one).
        self.connects = 0
        #: How many SFTP sessions were opened.
        self.sftp_sessions = 0

    def alive(self) -> bool:
        client = self._client
        if client is None:
            return False
        transport = client.get_transport()
        return transport is not None and transport.is_active()

    def current_transport(self) -> paramiko.Transport | None:
        """The open connection's transport, if there is one; never (re)connects."""
        client = self._client
        return client.get_transport() if client is not None else None

    def client(self) -> paramiko.SSHClient:
        """The live connection, opened (again) when there is none."""
        with self._lock:
            if self.alive():
                assert self._client is not None
                return self._client
            self.drop()
            client = self._open_client()
            self._client = client
            self.connects += 1
        return client

    def _open_client(self) -> paramiko.SSHClient:
        target = self.target
        client = self._new_client()
        try:
            client.connect(
                target.hostname,
                port=target.port,
                username=target.user,
                key_filename=list(target.key_filenames) or None,
                timeout=self.settings.connect_timeout_s,
                banner_timeout=self.settings.banner_timeout_s,
                auth_timeout=self.settings.auth_timeout_s,
                channel_timeout=self.settings.connect_timeout_s,
                allow_agent=self.settings.allow_agent,
                # OpenSSH tries ~/.ssh/id_* only when no identity was named.
                look_for_keys=not target.key_filenames,
                transport_factory=_transport_preferring_aead,
            )
        except (paramiko.SSHException, EOFError, OSError) as exc:
            client.close()
            raise self._connect_error(exc) from exc
        transport = client.get_transport()
        if transport is not None and self.settings.keepalive_s > 0:
            transport.set_keepalive(max(1, int(self.settings.keepalive_s)))
        return client

    def _new_client(self) -> paramiko.SSHClient:
        """A client with the host keys it trusts and the policy for others; the keys it
        is to offer checked to exist."""
        target = self.target
        client = paramiko.SSHClient()
        for path in target.known_hosts:
            if path.is_file():
                try:
                    client.get_host_keys().load(str(path))
                except OSError as exc:
                    raise DeviceError(
                        f"cannot read known_hosts file {path}: {exc}",
                        "check its permissions",
                        device=self.name,
                    ) from exc
        client.set_missing_host_key_policy(
            KnownHostsPolicy(self.settings.host_key_policy, target.known_hosts[0])
        )
        for key in target.key_filenames:
            if not Path(key).is_file():
                raise UsageError(
                    f"ssh key {key} does not exist",
                    f"fix key_filename / IdentityFile for host {target.alias}",
                )
        return client

    def _connect_error(self, exc: BaseException) -> EtdeployError:
        """What a failed connect means, with what to do about it."""
        target = self.target
        if isinstance(exc, UnknownHostKey):
            return DeviceError(
                f"host key for {exc.hostname} is not in {target.known_hosts[0]} "
                f"({exc.key.get_name()} {openssh_fingerprint(exc.key)})",
                f"check the fingerprint, then run `ssh-keyscan -p {target.port} "
                f"{target.hostname} >> {target.known_hosts[0]}`, or set "
                'host_key_policy = "accept-new"',
                device=self.name,
            )
        if isinstance(exc, paramiko.BadHostKeyException):
            return DeviceError(
                f"host key for {target.host_key_name} has CHANGED: the server sent "
                f"{exc.key.get_name()} {openssh_fingerprint(exc.key)}, known_hosts has "
                f"{exc.expected_key.get_name()} {openssh_fingerprint(exc.expected_key)}",
                "if the host was reinstalled, remove the old key with `ssh-keygen -R "
                f"'{target.host_key_name}' -f {target.known_hosts[0]}` and connect again; "
                "otherwise someone may be intercepting the connection",
                device=self.name,
            )
        if isinstance(exc, paramiko.PasswordRequiredException):
            return DeviceError(
                f"ssh key {', '.join(target.key_filenames) or '(default)'} is encrypted",
                "load it into ssh-agent (`ssh-add KEY`) and keep allow_agent on",
                device=self.name,
            )
        if isinstance(exc, paramiko.AuthenticationException):
            tried = ", ".join(target.key_filenames) or "ssh-agent and ~/.ssh/id_* keys"
            return DeviceError(
                f"authentication failed for {target.user}@{target.hostname}:{target.port} "
                f"(tried key {tried})",
                f"authorise the key on the host (`ssh-copy-id -i KEY.pub -p {target.port} "
                f"{target.user}@{target.hostname}`) or set key_filename to one it accepts",
                device=self.name,
            )
        if isinstance(exc, TimeoutError):
            return DeviceError(
                f"timed out connecting to {target.hostname}:{target.port}",
                "check the host is up and reachable, or raise connect_timeout_s",
                device=self.name,
                retryable=True,
            )
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            return DeviceError(
                f"cannot connect to {target.hostname}:{target.port}: connection refused",
                "check that sshd runs there and listens on that port",
                device=self.name,
                retryable=True,
            )
        return TransportError(
            f"ssh connection to {target.hostname}:{target.port} failed: {exc}",
            "check the host and port; a retry may succeed",
            device=self.name,
            retryable=True,
        )

    def drop(self) -> None:
        """Forget the connection (after a failure, or on close)."""
        sftp, client = self._sftp, self._client
        self._sftp = None
        self._client = None
        if sftp is not None:
            with contextlib.suppress(Exception):
                sftp.close()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP session, opened on first use."""
        with self._sftp_lock:
            sftp = self._sftp
            if sftp is not None and self.alive():
                return sftp
            client = self.client()
            try:
                self.sftp_sessions += 1
                sftp = client.open_sftp()
            except (paramiko.SSHException, EOFError, OSError) as exc:
                with self._lock:
                    if self._client is client:  # not a connection opened since
                        self.drop()
                raise TransportError(
                    f"cannot open an SFTP session on {self.target.display}: {exc}",
                    "the host's sshd needs the sftp subsystem enabled",
                    device=self.name,
                    retryable=True,
                ) from exc
            sftp.get_channel().settimeout(self.settings.io_timeout_s)
            with self._lock:
                if self._client is client:
                    self._sftp = sftp
            return sftp

    def prefetch_sftp(self) -> None:
        """Open the SFTP session on a thread of its own, if it is not open: a run's
        outputs are pulled through it right after the command that is starting."""
        if self._sftp is not None or self._sftp_lock.locked():
            return

        def open_quietly() -> None:
            # A failure here is met again, and reported, by the pull that needs it.
            with contextlib.suppress(EtdeployError):
                self.sftp()

        threading.Thread(target=open_quietly, name="etdeploy-sftp", daemon=True).start()

    def lost(self, exc: BaseException, what: str) -> TransportError:
        """The connection is gone: forget it (the next call reconnects) and say so."""
        self.drop()
        return TransportError(
            f"connection to {self.target.display} lost during {what}: {exc or type(exc).__name__}",
            "the host or network dropped the connection; a retry reconnects",
            device=self.name,
            retryable=True,
        )

    def close(self) -> None:
        with self._lock:
            self.drop()
