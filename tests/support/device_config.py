"""etdeploy.toml files for device tests: tables that reach the test's own servers."""

from __future__ import annotations

from pathlib import Path

from tests.support.sshd import SshServer


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
