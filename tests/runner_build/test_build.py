"""Building the runner bundle (etdeploy/runner_build/runner_cache.py) and the `runner build` command.

Real cmake, the real compiler and the installed executorch wheel; no torch.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from etdeploy.errors import RunnerError, UsageError
from etdeploy.runner import runner_failure
from etdeploy.runner_build import (
    BUNDLE_MANIFEST,
    EXECUTABLE,
    binary_abi,
    bundle_key,
    ensure_runner,
    external_runner,
    harness_dir,
)

REPO = Path(__file__).resolve().parents[2]
HOST_IS_X86_64_LINUX = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
# readelf, the .so names and the loader's exit status 127 are Linux's.
linux_only = pytest.mark.skipif(platform.system() != "Linux", reason="ELF/ld.so specifics")

# The registration-only libraries: nothing in the runner calls them, so only
# --no-as-needed keeps them, and without them no model runs.
REQUIRED_LIBRARIES = {
    "libexecutorch.so",
    "libexecutorch_kernels_optimized.so",
    "libexecutorch_kernels_quantized.so",
    "libexecutorch_backend_xnnpack.so",
    "libexecutorch_threadpool.so",
    "libexecutorch_etdump.so",
}

BUILD_IN_CHILD = """
import json, sys
from etdeploy.runner_build import ensure_runner
bundle = ensure_runner(progress=lambda m: print(m, file=sys.stderr, flush=True))
print(json.dumps({"fresh": bundle.fresh, "dir": str(bundle.directory),
                  "build_id": bundle.info["build_id"]}))
"""


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two processes asked for the same runner at the same time, in an empty cache."""
    cache = tmp_path_factory.mktemp("runner-build-cache")
    env = {**os.environ, "ETDEPLOY_CACHE_DIR": str(cache)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_IN_CHILD],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    answers = []
    for child in children:
        stdout, stderr = child.communicate(timeout=600)
        assert child.returncode == 0, stderr
        answers.append((json.loads(stdout.strip().splitlines()[-1]), stderr))
    return {"cache": cache, "answers": answers}


@pytest.mark.slow
def test_concurrent_builds_build_once_and_agree(built_cache: dict[str, object]) -> None:
    answers = built_cache["answers"]
    assert isinstance(answers, list)
    fresh = [answer for answer, _ in answers if answer["fresh"]]
    assert len(fresh) == 1, answers
    assert len({answer["dir"] for answer, _ in answers}) == 1
    assert len({answer["build_id"] for answer, _ in answers}) == 1
    builder_log = next(log for answer, log in answers if answer["fresh"])
    assert "configuring" in builder_log and "compiling" in builder_log
    cache = built_cache["cache"]
    assert isinstance(cache, Path)
    leftovers = [p.name for p in (cache / "runners").iterdir() if p.name.startswith(".build-")]
    assert leftovers == [], "a staging directory was left behind"


@pytest.mark.slow
@linux_only
def test_second_call_is_a_cache_hit_that_runs_no_build(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    messages: list[str] = []
    bundle = ensure_runner(progress=messages.append)
    (first, _), _ = built_cache["answers"]  # type: ignore[misc]
    assert bundle.fresh is False
    assert messages == []  # no configure, no compile
    assert bundle.info["build_id"] == first["build_id"]
    assert str(bundle.directory) == first["dir"]
    assert {path.name for path in bundle.files} == REQUIRED_LIBRARIES | {EXECUTABLE}
    assert all(path.parent == bundle.directory for path in bundle.files)


@pytest.mark.slow
@linux_only
def test_bundle_keeps_every_registration_library_needed_and_finds_them_beside_itself(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    bundle = ensure_runner()
    dynamic = subprocess.run(
        ["readelf", "-d", str(bundle.executable_path)], capture_output=True, text=True, check=True
    ).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    assert needed >= REQUIRED_LIBRARIES
    runpath = next(line for line in dynamic.splitlines() if "(RUNPATH)" in line)
    # Only $ORIGIN: a copied bundle loads its own libraries, never the wheel's.
    assert runpath.split("[")[1].rstrip("]") == "$ORIGIN"
    version = subprocess.run(
        [str(bundle.executable_path), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.startswith("etdeploy_runner ") and bundle.info["executorch_version"] in version


@pytest.mark.slow
@linux_only
def test_executable_without_its_libraries_fails_naming_the_missing_one(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    alone = tmp_path / EXECUTABLE
    shutil.copy2(ensure_runner().executable_path, alone)
    done = subprocess.run([str(alone), "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 127
    failure = runner_failure(done.returncode, done.stdout, done.stderr)
    assert failure.message.startswith("runner cannot load libexecutorch")
    assert "bundle" in (failure.hint or "")


@pytest.mark.slow
def test_rebuild_replaces_the_cached_bundle(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    before = ensure_runner()
    rebuilt = ensure_runner(rebuild=True)
    assert rebuilt.fresh is True
    assert rebuilt.directory == before.directory
    assert rebuilt.info["build_id"] != before.info["build_id"]
    assert (
        json.loads((rebuilt.directory / BUNDLE_MANIFEST).read_text())["build_id"]
        == (rebuilt.info["build_id"])
    )


def _copy_harness(tmp_path: Path) -> Path:
    copy = tmp_path / "android_harness"
    shutil.copytree(harness_dir(), copy)
    return copy


def test_key_follows_the_harness_sources_but_not_its_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = _copy_harness(tmp_path)
    monkeypatch.setenv("ETDEPLOY_HARNESS_DIR", str(harness))
    original = bundle_key("host")
    (harness / "README.md").write_text("changed\n")
    assert bundle_key("host") == original
    names = harness / "src" / "names.cpp"
    names.write_text(names.read_text() + "\n// a change\n")
    assert bundle_key("host") != original


@pytest.mark.slow
def test_build_failure_carries_the_compiler_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = _copy_harness(tmp_path)
    # The runner's main source: ninja compiles it among the first, so the failed build
    # stops after two of the nine objects (4 s of CPU, not the 15 s of a whole compile).
    broken = harness / "etdeploy_runner.cpp"
    broken.write_text(broken.read_text() + "\nthis is not C++;\n")
    monkeypatch.setenv("ETDEPLOY_HARNESS_DIR", str(harness))
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RunnerError, match="while compiling") as caught:
        ensure_runner()
    assert caught.value.log is not None
    assert "etdeploy_runner.cpp" in caught.value.log and "error" in caught.value.log
    runners = tmp_path / "cache" / "runners"
    assert [p.name for p in runners.iterdir() if not p.name.endswith(".lock")] == []


def test_the_ndk_build_names_both_variables_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from etdeploy.runner_build.plans import android_plan

    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)
    with pytest.raises(UsageError) as caught:
        android_plan("x86_64")
    assert "ANDROID_NDK" in caught.value.message
    assert "EXECUTORCH_ANDROID_PREFIX" in caught.value.message
    assert "README.md" in (caught.value.hint or "")


def test_unknown_abi_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown runner ABI 'mips'"):
        ensure_runner("mips")


def test_x86_64_with_an_ndk_set_up_is_the_ndk_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Without one it is the host build with its glibc (tests/runner_build/test_x86_64.py).
    monkeypatch.setenv("ANDROID_NDK", str(tmp_path / "ndk"))
    monkeypatch.setenv("EXECUTORCH_ANDROID_PREFIX", str(tmp_path / "et-android"))
    with pytest.raises(UsageError, match=r"android\.toolchain\.cmake"):
        ensure_runner("x86_64")


@pytest.mark.slow
def test_external_runner_is_the_upstream_flavor_with_its_abi_read_from_the_binary(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    binary = ensure_runner().executable_path
    external = external_runner(binary)
    assert external.flavor == "upstream"
    assert external.files == (binary.resolve(),)
    assert external.abi == binary_abi(binary)
    if HOST_IS_X86_64_LINUX:
        assert external.abi == "x86_64"
    with pytest.raises(UsageError, match="does not exist"):
        external_runner(tmp_path / "executor_runner")
    not_executable = tmp_path / "runner.txt"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(UsageError, match="not executable"):
        external_runner(not_executable)


@pytest.mark.slow
def test_cli_runner_build_prints_the_bundle_directory(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    import etdeploy.cli.runner  # noqa: F401  registers `runner` on the app
    from etdeploy.cli import app

    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    result = CliRunner().invoke(app, ["runner", "build"])
    assert result.exit_code == 0, result.output
    directory = Path(result.stdout.strip())
    assert (directory / EXECUTABLE).is_file()
    assert directory == ensure_runner().directory


@pytest.mark.slow
def test_cli_runner_build_for_android_x86_64_without_ndk_prints_the_glibc_bundle(
    built_cache: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    import etdeploy.cli.runner  # noqa: F401
    from etdeploy.cli import app

    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(built_cache["cache"]))
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.delenv("EXECUTORCH_ANDROID_PREFIX", raising=False)
    result = CliRunner().invoke(app, ["runner", "build", "--abi", "x86_64"])
    assert result.exit_code == 0, result.output
    directory = Path(result.stdout.strip())
    assert directory.name.startswith("x86_64-glibc-")
    assert json.loads((directory / BUNDLE_MANIFEST).read_text())["kind"] == "x86_64-glibc"
