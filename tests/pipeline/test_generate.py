"""Generation on every device kind etdeploy has: the runner's greedy ids and
teacher-forced logits are what ExecuTorch's Python runtime gives for the same
.pte and ids.

The model is the tiny Llama trained on license texts (tests/support/tiny_lm.py),
its programs built once per session (tests/support/lm_programs.py), its prompts
real held-out sentences tokenized on the host. The devices are real: this machine,
a loopback phone behind the real adb server, a real sshd on loopback, and an arm64
phone running the arm64 bundle under qemu-user (tests/support/arm64.py). Each goes
through etdeploy.pipeline.generate as the LLM pipeline calls it.

The comparison must be able to fail: a program of the differently trained twin, and
the right program given a wrong prompt length, are held against the reference and
must not pass it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.devices.base import Device
from etdeploy.devices.local import LocalDevice
from etdeploy.errors import RunnerError
from etdeploy.pipeline.deploy import Target
from etdeploy.pipeline.generate import (
    Generated,
    GenerationSettings,
    check_generation,
    generate_on_device,
)
from etdeploy.preflight import PreflightError
from etdeploy.runner import RunnerFailure
from etdeploy.runner.generation import GenerationRequest
from etdeploy.runner_build import RunnerBundle, runner_for_device, runner_from_path
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.arm64 import require_arm64
from tests.support.device_config import ssh_settings
from tests.support.lm_programs import MAX_CACHE_LEN, LmPrograms, runtime_generation
from tests.support.sshd import SshServer, start_sshd

pytestmark = pytest.mark.slow

SETTINGS = GenerationSettings(deadline_s=300.0)
# Logits against the Python runtime on this machine: the same kernels, so equal to
# float rounding. On ARM other kernels run (XNNPACK's NEON and KleidiAI paths, another
# summation order, and for 8da4w another rounding of the activations' per-token int8
# quantization), so within these fractions of the logits' range; ids and every
# position's argmax must still be equal. Measured 2026-12-05 under qemu (max,sme=off),
# two prompts each: float at most 2.7e-7 of the range; 8da4w 1.1e-7 on one prompt and
# 4.8e-3 (0.094 of 19.3) on the other (likely an activation rounding to another int8).
ARM_TOLERANCE = {"float": 1e-4, "int4": 2e-2}

_references: dict[tuple[Path, GenerationRequest], tuple[tuple[int, ...], Any]] = {}


def reference(pte: Path, request: GenerationRequest) -> tuple[tuple[int, ...], Any]:
    """The Python runtime's ids and logits, computed once per program and request."""
    key = (pte, request)
    if key not in _references:
        _references[key] = runtime_generation(pte, request)
    return _references[key]


def departures(generated: Generated, pte: Path, tolerance: float = 0.0) -> list[str]:
    """How the runner's outputs depart from the Python runtime's for `pte` (none: they
    agree): greedy ids exactly, every position's argmax exactly, logits within
    `tolerance` of their range (0: to float32 rounding)."""
    ids, logits = reference(pte, generated.request)
    found = []
    if generated.result.generated_ids != ids:
        found.append(f"ids {generated.result.generated_ids} != {ids}")
    table = generated.result.logits
    assert table is not None and table.shape == logits.shape
    if not np.array_equal(table.argmax(axis=1), logits.argmax(axis=1)):
        found.append("the argmax of some position differs")
    limit = max(tolerance * float(np.ptp(logits)), 1e-5)
    worst = float(np.abs(table - logits).max())
    if worst > limit:
        found.append(f"logits off by {worst:.3g} (limit {limit:.3g})")
    return found


def on_device(
    device: Device,
    pte: Path,
    requests: Sequence[GenerationRequest],
    tmp_path: Path,
    bundle: RunnerBundle | None = None,
) -> tuple[Generated, ...]:
    info = device.info()
    target = Target(device, info, bundle or runner_for_device(info))
    check_generation(device, target.bundle, pte)
    local = tmp_path / "pulled"
    local.mkdir(exist_ok=True)
    return generate_on_device(target, pte, requests, SETTINGS, "gen-job", local).calls


@pytest.fixture
def local(tmp_path: Path) -> LocalDevice:
    return LocalDevice(workdir=tmp_path / "device")


@pytest.mark.parametrize("program", ["float_s1", "float_chunked", "int4"])
def test_this_machine_generates_what_the_python_runtime_generates(
    program: str, lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    pte = getattr(lm_programs, program)
    generated = on_device(local, pte, lm_programs.requests, tmp_path)
    assert len(generated) == len(lm_programs.requests)
    for one in generated:
        assert departures(one, pte) == []
        result = one.result
        assert result.vocab_size == lm_programs.vocab_size
        assert result.tokens_per_call == (
            min(16, one.request.prompt_len) if program == "float_chunked" else 1
        )
        timings = result.timings
        assert len(timings.decode_ms) == one.request.max_new_tokens - 1
        assert timings.prefill_ms > 0 and timings.decode_tokens_per_s is not None
        assert timings.teacher_forced_ms is not None and result.peak_rss_bytes


def test_a_program_of_another_model_does_not_pass_for_the_model(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    generated = on_device(local, lm_programs.other_s1, lm_programs.requests[:2], tmp_path)
    for one in generated:
        assert departures(one, lm_programs.other_s1) == []  # it is itself...
        found = departures(one, lm_programs.float_s1)  # ...but not the model
        assert any(f.startswith("ids") for f in found) and any("logits" in f for f in found)


def test_a_wrong_prompt_length_does_not_pass(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    right = lm_programs.requests[0]
    wrong = GenerationRequest(right.token_ids, right.prompt_len - 2, right.max_new_tokens)
    (generated,) = on_device(local, lm_programs.float_s1, [wrong], tmp_path)
    reference_ids, _ = reference(lm_programs.float_s1, right)
    assert generated.result.generated_ids != reference_ids
    # The teacher-forced pass does not depend on the prompt length: still the same.
    assert generated.result.logits is not None
    assert np.array_equal(generated.result.logits, reference(lm_programs.float_s1, right)[1])


def test_generation_alone_writes_no_logits_and_leaves_nothing_but_content_addressed_files(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    request = lm_programs.requests[1]
    alone = GenerationRequest(request.token_ids, request.prompt_len, 20, teacher_forced=False)
    (generated,) = on_device(local, lm_programs.float_s1, [alone], tmp_path)
    assert generated.result.logits is None and generated.result.timings.teacher_forced_ms is None
    assert len(generated.result.generated_ids) == 20
    assert generated.result.generated_ids[:12] == reference(lm_programs.float_s1, request)[0]
    left = sorted(f.path for f in local.listing().files)
    assert left and all(p.split("/")[0] in ("runners", "programs", "inputs") for p in left), left
    assert not list((tmp_path / "pulled").iterdir())


def test_teacher_forcing_a_generation_reuses_its_rows_and_still_equals_the_runtime(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    # The prompt, then the runtime's own greedy continuation: the generation pass fed
    # these ids at these positions already, so only the last one is fed again.
    for pte in (lm_programs.float_s1, lm_programs.float_chunked):
        request = lm_programs.requests[2]
        ids, _ = reference(pte, request)
        prompt = request.token_ids[: request.prompt_len]
        along = GenerationRequest(prompt + ids, request.prompt_len, request.max_new_tokens)
        (generated,) = on_device(local, pte, [along], tmp_path)
        assert generated.result.timings.teacher_forced_reused == len(along.token_ids) - 1
        assert departures(generated, pte) == []
        # Ids that leave the generated ones after 3 tokens: fed again from there.
        parted = prompt + ids[:3] + tuple((t + 1) % 512 for t in ids[3:])
        apart = GenerationRequest(parted, request.prompt_len, request.max_new_tokens)
        (generated,) = on_device(local, pte, [apart], tmp_path)
        assert generated.result.timings.teacher_forced_reused == request.prompt_len + 3
        assert departures(generated, pte) == []


def test_a_request_past_the_programs_cache_fails_in_one_line_naming_the_position(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    ids = tuple(lm_programs.requests[0].token_ids) * 10  # well past MAX_CACHE_LEN
    assert len(ids) > MAX_CACHE_LEN
    request = GenerationRequest(ids, 4, 2)
    with pytest.raises(RunnerFailure) as failure:
        on_device(local, lm_programs.float_s1, [request], tmp_path)
    assert f"at position {MAX_CACHE_LEN}" in failure.value.message
    assert "\n" not in failure.value.message and failure.value.exit_code == 3
    assert not (tmp_path / "device" / "gen-job").exists()


def test_preflight_refuses_a_runner_that_cannot_generate_before_pushing_the_program(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    ours = runner_for_device(local.info())
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for path in ours.files:  # our binary renamed: taken as upstream's executor_runner
        name = "executor_runner" if path.name == ours.executable else path.name
        shutil.copy2(path, upstream / name)
    with pytest.raises(PreflightError, match="executor_runner cannot generate"):
        check_generation(local, runner_from_path(upstream / "executor_runner"), lm_programs.int4)
    assert not (tmp_path / "device" / "programs").exists()


def test_preflight_refuses_a_program_with_llm_custom_ops_saying_where_they_are(
    local: LocalDevice, tmp_path: Path
) -> None:
    from etdeploy.builder import BuildOptions, build

    sdpa = Path(__file__).resolve().parent.parent / "data" / "models" / "llm_sdpa.py"
    pte = build(f"{sdpa}:build", BuildOptions(backend="xnnpack")).pte
    with pytest.raises(PreflightError) as refused:
        check_generation(local, runner_for_device(local.info()), pte)
    assert "llama::custom_sdpa.out" in refused.value.message
    assert "libcustom_ops_aot_lib.so" in (refused.value.hint or "")
    assert not (tmp_path / "device" / "programs").exists()


def test_a_result_that_disagrees_with_the_request_names_the_file(
    lm_programs: LmPrograms, local: LocalDevice, tmp_path: Path
) -> None:
    from etdeploy.runner.generation import read_generation

    request = lm_programs.requests[0]
    (generated,) = on_device(local, lm_programs.float_s1, [request], tmp_path)
    # The files of that call, rewritten as a runner that ran something else would.
    document = tmp_path / "g0.json"
    ids = tmp_path / "g0.generated.bin"
    np.asarray(generated.result.generated_ids[:-1], dtype="<i8").tofile(ids)
    document.write_text(
        json.dumps(
            {"schema": "etdeploy.runner_generation/1", "token_count": len(request.token_ids),
             "prompt_len": request.prompt_len, "max_new_tokens": request.max_new_tokens,
             "vocab_size": 512}
        )
    )  # fmt: skip
    with pytest.raises(RunnerError, match=r"^g0\.generated\.bin: has 88 bytes; 12 generated"):
        read_generation(request, document, ids, None)


# -- the other device kinds ------------------------------------------------------------


@pytest.fixture(scope="module")
def phones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    """A real adb server with two loopback phones: an x86_64 one (an emulator's ABI,
    running the host build with its own glibc) and an arm64 Pixel 8 running ARM code
    under qemu-user."""
    with adb_testbed(
        tmp_path_factory.mktemp("adb-gen"), {"x86": {}, "pixel": {"arm64": True}}
    ) as bed:
        yield bed


def _adb(bed: AdbTestbed, phone: str) -> Device:
    from etdeploy.devices.adb import AdbDevice, AdbSettings

    return AdbDevice(phone, AdbSettings(port=bed.server.port, serial=bed.serial(phone)))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with start_sshd(tmp_path_factory.mktemp("sshd-gen")) as server:
        yield server


def test_a_phone_over_adb_generates_what_the_python_runtime_generates(
    lm_programs: LmPrograms, phones: AdbTestbed, tmp_path: Path
) -> None:
    device = _adb(phones, "x86")
    try:
        for pte in (lm_programs.float_s1, lm_programs.int4):
            for one in on_device(device, pte, lm_programs.requests[:3], tmp_path):
                assert departures(one, pte) == []
    finally:
        device.close()


def test_a_host_over_ssh_generates_what_the_python_runtime_generates(
    lm_programs: LmPrograms, sshd: SshServer, tmp_path: Path
) -> None:
    from etdeploy.devices.ssh import SshDevice

    device = SshDevice(ssh_settings(sshd, tmp_path, persist_s=0.0), name="box")
    try:
        pte = lm_programs.float_chunked
        for one in on_device(device, pte, lm_programs.requests[:3], tmp_path):
            assert departures(one, pte) == []
    finally:
        device.close()


def test_an_arm64_phone_generates_what_the_python_runtime_generates(
    lm_programs: LmPrograms, phones: AdbTestbed, tmp_path: Path
) -> None:
    require_arm64()
    device = _adb(phones, "pixel")
    try:
        assert device.info().abi == "arm64-v8a"
        for kind, pte in (("float", lm_programs.float_s1), ("int4", lm_programs.int4)):
            generated = on_device(device, pte, lm_programs.requests[:2], tmp_path)
            for one in generated:
                assert departures(one, pte, ARM_TOLERANCE[kind]) == [], kind
        # ...and the twin's program on ARM departs from the model's reference.
        (other,) = on_device(device, lm_programs.other_s1, lm_programs.requests[:1], tmp_path)
        assert departures(other, lm_programs.float_s1, ARM_TOLERANCE["float"]) != []
    finally:
        device.close()
