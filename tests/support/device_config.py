"""etdeploy.toml files for device tests: tables that reach the test's own servers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.sshd import SshServer

if TYPE_CHECKING:
    from etdeploy.devices.ssh import SshSettings


def ssh_table(server: SshServer, tmp_path: Path, **overrides: object) -> dict[str, object]:
    """A [devices.NAME] table that reaches `server` with its own key and known_hosts,
    never the user's ~/.ssh."""
    table: dict[str, object] = {
        "transport": "ssh",
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "key_filename": str(server.key_filename),
        "known_hosts": str(server.known_hosts),
        "ssh_config": str(tmp_path / "no-ssh-config"),
        "workdir": str(tmp_path / "remote-work"),
        "allow_agent": False,
    }
    table.update(overrides)
    return table


def write_config(
    path: Path, devices: dict[str, dict[str, object]], run: dict[str, object] | None = None
) -> Path:
    """An etdeploy.toml with these [devices.NAME] tables (strings, ints, floats, bools)."""

    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines: list[str] = []
    if run:
        lines.append("[run]")
        lines += [f"{k} = {value(v)}" for k, v in run.items()]
    for name, table in devices.items():
        lines.append(f'[devices."{name}"]')
        lines += [f"{k} = {value(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def through_proxy(server: SshServer, proxy_port: int, tmp_path: Path) -> dict[str, object]:
    """The port and known_hosts keys that reach `server` through a proxy on `proxy_port`
    (tests/support/sshd.py's CuttingProxy): ssh checks the host key under that port."""
    known = tmp_path / "known_hosts_proxy"
    known.write_text(server.known_hosts_line(port=proxy_port))
    return {"port": proxy_port, "known_hosts": str(known)}


def ssh_settings(server: SshServer, tmp_path: Path, **overrides: object) -> SshSettings:
    """SshSettings that reach `server` as ssh_table's table does (ssh-agent left to the
    test), with connect, banner and auth timeouts short enough for a test."""
    from etdeploy.devices.ssh import SshSettings

    values = {k: v for k, v in ssh_table(server, tmp_path).items() if k not in _NOT_SETTINGS}
    values.update(connect_timeout_s=5.0, banner_timeout_s=5.0, auth_timeout_s=5.0)
    values.update(overrides)
    return SshSettings(**values)  # type: ignore[arg-type]


# ssh_table's keys that are the table's, not SshSettings' (or left to each test).
_NOT_SETTINGS = ("transport", "allow_agent")
