"""The documentation: the reference pages are generated from the code and list every
setting, key, limit, command and exit code the code has; the site builds strictly
(a broken link fails); the README is a README.

The generators live in docs/hooks/ (run by MkDocs at every build); these tests call
them directly, then build the real site once with mkdocs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy import config, settings
from etdeploy.devices import registry
from etdeploy.devices.simulator import SIMULATOR_SETTING_TYPES
from etdeploy.devices.ssh.connection import SSH_SETTING_TYPES, SshSettings
from etdeploy.errors import UsageError
from etdeploy.farm import exclude, spec
from etdeploy.sizecheck import limits

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "docs" / "hooks"
sys.path.insert(0, str(HOOKS))

import cli_page  # noqa: E402
import config_page  # noqa: E402
import devices_page  # noqa: E402
import farm_page  # noqa: E402
import pagetext  # noqa: E402


def section(page: str, heading: str) -> str:
    """The text under the heading `## heading` (or `### heading`) up to the next
    level-2 heading."""
    lines = page.splitlines()
    starts = [
        i for i, line in enumerate(lines)
        if line.startswith("#") and line.lstrip("#").strip() == heading
    ]  # fmt: skip
    assert starts, f"no section {heading!r}"
    body = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("## "):
            break
        body.append(line)
    return "\n".join(body)


def rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| `")]


def keys_in(text: str) -> set[str]:
    """The first cell's key of each table row: | `key`<br>... |."""
    return {row.split("`")[1] for row in rows(text)}


def missing_settings(page: str) -> list[str]:
    """Declared run settings the configuration page does not list where they belong."""
    missing = []
    for entry in settings.declared():
        if entry.option.section:
            text = section(page, f"[{entry.option.section}]")
            if entry.key not in keys_in(text) or (entry.flag and entry.flag not in text):
                missing.append(entry.key)
        else:
            text = section(page, "Run settings without a key in etdeploy.toml")
            if not entry.flag or entry.flag not in text:
                missing.append(entry.name)
    return missing


# -- [build], [run], [verify] ---------------------------------------------------------------


def test_every_declared_setting_is_in_the_configuration_reference() -> None:
    assert missing_settings(config_page.render()) == []


def test_a_setting_missing_from_the_page_is_caught() -> None:
    page = config_page.render()
    planted = "\n".join(line for line in page.splitlines() if not line.startswith("| `warmup`"))
    assert missing_settings(planted) == ["warmup"]


def test_a_new_setting_is_listed_at_the_next_build(monkeypatch: pytest.MonkeyPatch) -> None:
    original = settings.declared
    option = settings.Option("Seconds to let a phone cool down.", flags=("--cool-down",),
                             metavar="SECONDS", section="run", low=0)  # fmt: skip
    new = settings.Declared("cool_down_s", option, float, 5.0)

    def with_new(
        cls: type[settings.RunSettings] = settings.RunSettings,
    ) -> Iterator[settings.Declared]:
        yield from original(cls)
        yield new

    monkeypatch.setattr(settings, "declared", with_new)
    run = section(config_page.render(), "[run]")
    row = next(r for r in rows(run) if r.startswith("| `cool_down_s`"))
    assert "`--cool-down SECONDS`" in row
    assert "number, ≥ 0" in row and "`5.0`" in row
    assert "Seconds to let a phone cool down." in row


def test_every_declared_setting_has_help_text() -> None:
    assert [d.name for d in settings.declared() if not d.option.help.strip()] == []


def test_settings_rows_carry_type_default_range_and_flag() -> None:
    run = section(config_page.render(), "[run]")
    iterations = next(r for r in rows(run) if r.startswith("| `iterations`"))
    assert "`--iterations N`, `-n`" in iterations
    assert "int, ≥ 1" in iterations and "`10`" in iterations and "| yes |" in iterations
    budget = next(r for r in rows(run) if r.startswith("| `localize_budget`"))
    assert "a size" in budget
    verify = section(config_page.render(), "[verify]")
    top1 = next(r for r in rows(verify) if r.startswith("| `min_top1`"))
    assert "0 to 1" in top1


# -- [sizecheck] and [limits] -------------------------------------------------------------


def test_sizecheck_keys_are_listed_with_their_flag() -> None:
    text = section(config_page.render(), "[sizecheck]")
    assert keys_in(text) == set(config._SIZECHECK_KEYS)
    assert "`--delivery`" in text  # deliveries is --delivery


def test_every_limit_is_listed_with_its_source_and_date() -> None:
    text = section(config_page.render(), "[limits]")
    for limit in limits.default_limits().values():
        row = next(r for r in rows(text) if r.startswith(f"| `{limit.key}`"))
        assert limit.source in row and limit.read_on in row


def test_the_config_sections_are_those_the_parser_takes() -> None:
    with pytest.raises(UsageError) as refused:
        config.parse_config({"nope": {}})
    for name in config_page._config_sections():
        assert name in (refused.value.hint or "")
    assert {"build", "run", "verify", "sizecheck", "limits", "devices"} <= set(
        config_page._config_sections()
    )


# -- device tables ------------------------------------------------------------------------------


def _accepted_keys(open_table: object) -> set[str]:
    """The keys a transport says it takes when given one it does not."""
    with pytest.raises(UsageError) as refused:
        open_table()  # type: ignore[operator]
    hint = refused.value.hint or ""
    return {k.strip() for k in hint.split(":", 1)[1].split(",")} - set(registry.COMMON_KEYS)


def test_device_reference_lists_the_keys_each_transport_accepts() -> None:
    page = devices_page.render()
    options = registry.OpenOptions(where="etdeploy.toml: devices.x", base_dir=REPO)
    accepted = {
        "local": _accepted_keys(lambda: registry.TRANSPORTS["local"]("x", {"bogus": 1}, options)),
        "adb": _accepted_keys(lambda: registry.TRANSPORTS["adb"]("x", {"bogus": 1}, options)),
        "ssh": _accepted_keys(lambda: SshSettings.from_mapping({"host": "h", "bogus": 1})),
        "ios-simulator": set(SSH_SETTING_TYPES) | set(SIMULATOR_SETTING_TYPES),
    }  # fmt: skip
    for transport, keys in accepted.items():
        text = section(page, f'`transport = "{transport}"`')
        listed = keys_in(text) | (set(SSH_SETTING_TYPES) if transport == "ios-simulator" else set())
        assert listed == keys, transport
    assert keys_in(section(page, "Every table")) == {"transport", *registry.COMMON_KEYS}


def test_device_defaults_come_from_the_settings() -> None:
    ssh = section(devices_page.render(), '`transport = "ssh"`')
    assert (
        next(r for r in rows(ssh) if r.startswith("| `host`")).split("|")[3].strip() == "required"
    )
    policy = next(r for r in rows(ssh) if r.startswith("| `host_key_policy`"))
    assert '`"strict"` or `"accept-new"`' in policy
    adb = section(devices_page.render(), '`transport = "adb"`')
    assert "A push or pull with no progress" in next(
        r for r in rows(adb) if r.startswith("| `transfer_idle_timeout_s`")
    )


def test_a_transport_registered_without_a_reference_fails_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(registry.TRANSPORTS, "usb-serial", registry.TRANSPORTS["local"])
    with pytest.raises(LookupError, match="usb-serial"):
        devices_page.render()


# -- farm spec ------------------------------------------------------------------------------------


def test_farm_reference_lists_every_key_the_spec_parser_takes(tmp_path: Path) -> None:
    page = farm_page.render()
    job = keys_in(section(page, "Job settings"))
    assert job == set(spec.JOB_SETTING_TYPES)
    assert keys_in(section(page, "[farm]")) | job == set(spec.FARM_KEYS)
    assert keys_in(section(page, "[[farm.job]]")) | job == set(spec._ENTRY_KEYS)
    assert keys_in(section(page, "[[farm.exclude]]")) == set(exclude.EXCLUDE_KEYS)
    # What the parser itself says [farm] takes, when given a key it does not.
    with pytest.raises(UsageError) as refused:
        spec.parse_farm_spec({"farm": {"bogus": 1}}, tmp_path / "farm.toml")
    said = {k.strip() for k in (refused.value.hint or "").split(":", 1)[1].split(",")}
    assert said == set(spec.FARM_KEYS)


def test_farm_defaults_come_from_the_dataclasses() -> None:
    page = farm_page.render()
    timeout = next(
        r for r in rows(section(page, "Job settings")) if r.startswith("| `job_timeout_s`")
    )
    assert f"`{spec.DEFAULT_JOB_TIMEOUT_S}`" in timeout
    cooldown = next(r for r in rows(section(page, "[farm]")) if r.startswith("| `cooldown_s`"))
    assert "heated up" in cooldown  # FarmSpec.cooldown_s's comment


# -- command line and exit codes -------------------------------------------------------------


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    page = cli_page.render_cli()
    for path, command in cli_page.commands():
        text = section(page, f"`{path}`")
        for param in command.params:
            if param.param_type_name == "option" and not set(param.opts) & set(
                cli_page.GLOBAL_FLAGS
            ):
                assert param.opts[0] in text, (path, param.opts)


def test_exit_codes_page_has_each_code_with_its_meaning() -> None:
    page = cli_page.render_exit_codes()
    for value in (0, 1, 2, 3, 130, 141, 143):
        row = next(r for r in rows(page) if r.startswith(f"| `{value}`"))
        assert row.split("|")[3].strip() not in ("", pagetext.NONE)
    assert "`DeviceError`" in next(r for r in rows(page) if r.startswith("| `3`"))


# -- the site and the README ----------------------------------------------------------------------


def _build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
         "-d", str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_the_site_builds_strictly_with_the_generated_reference(tmp_path: Path) -> None:
    built = _build(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    html = (tmp_path / "site" / "reference" / "configuration.html").read_text()
    for entry in settings.declared():
        assert entry.key in html or (entry.flag and entry.flag in html), entry.name
    assert "fonts.googleapis.com" not in (tmp_path / "site" / "index.html").read_text()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    with (copy / "docs" / "guides" / "farms.md").open("a") as page:
        page.write("\nSee [the old page](../nightly.md).\n")
    built = _build(copy, tmp_path / "site")
    assert built.returncode != 0
    assert "nightly.md" in built.stderr


def test_a_checked_in_copy_of_a_generated_page_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "docs" / "reference").mkdir()
    (copy / "docs" / "reference" / "configuration.md").write_text("# stale\n")
    built = _build(copy, tmp_path / "site")
    assert built.returncode != 0
    assert "generated" in built.stderr + built.stdout


def test_the_readme_is_a_readme() -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    assert len(readme) <= 150
    start = readme.index("## Quick start") + 1
    end = next(i for i in range(start, len(readme)) if readme[i].startswith("## "))
    commands = [line.strip() for line in readme[start:end] if line.startswith("    ")]
    assert commands == ["make demo", "make test"]


# -- the documents' schemas ------------------------------------------------------------------

SCHEMA_ID = re.compile(r"etdeploy\.([a-z_-]+)/(\d+)")


def test_every_schema_the_docs_name_is_the_version_the_code_writes() -> None:
    """A document's schema named in the docs (etdeploy.result/2) is the newest version of
    that schema in the code: the docs move when a schema does."""
    newest: dict[str, int] = {}
    for path in (REPO / "etdeploy").rglob("*.py"):
        for name, version in re.findall(r'"etdeploy\.([a-z_-]+)/(\d+)"', path.read_text()):
            newest[name] = max(newest.get(name, 0), int(version))
    pages = [*(REPO / "docs").rglob("*.md"), REPO / "README.md"]
    named = [
        (page.relative_to(REPO), m) for page in pages for m in SCHEMA_ID.finditer(page.read_text())
    ]
    assert named
    for page, found in named:
        name, version = found.group(1), int(found.group(2))
        assert name in newest, (page, found.group(0))
        assert version == newest[name], (
            f"{page} names {found.group(0)}, the code writes /{newest[name]}"
        )


def test_every_command_with_json_is_named_where_the_guide_says_it_takes_a_dash() -> None:
    """Each command's --json takes PATH or - (stdout), and the command-line guide says so
    for each of them."""
    guide = (REPO / "docs" / "guides" / "command-line.md").read_text()
    paragraph = " ".join(guide[guide.index("`--json PATH`") :].split("\n\n")[0].split())
    for path, command in cli_page.commands():
        option = next((p for p in command.params if "--json" in getattr(p, "opts", [])), None)
        if option is None:
            continue
        assert option.metavar == "PATH|-", path
        assert f"`{path.removeprefix('etdeploy ')}`" in paragraph, path
