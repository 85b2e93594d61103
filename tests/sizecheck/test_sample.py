"""The sampled download-size estimate: within its stated bound (and 1%) of the exact figure on
real trained weights, float and int8, in real programs and in bigger payloads; a small share
of the bytes deflated; small parts measured exactly; verdicts judged at the top of the bound.

The weights are a real MLP trained on scikit-learn's digits (tests/sizecheck/weights.py says
why trained weights and not noise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from etdeploy.pte.reader import read_pte
from etdeploy.sizecheck.breakdown import layout_parts
from etdeploy.sizecheck.check import FITS, OVER, check_size
from etdeploy.sizecheck.compress import EXACT, SAMPLED, measure
from etdeploy.sizecheck.sample import DEFAULT_PLAN, SamplePlan, sample_measure
from tests.support.programs import TrainedPrograms

# The programs are 17 MB (float) and 4.4 MB (int8): a plan with smaller chunks draws enough
# of them there (the default plan deflates those whole; it is tested on the 48 MB payloads).
SMALL_PLAN = SamplePlan(chunk_bytes=32 * 1024, fraction=1 / 16, min_samples=24)


def _parts(path: Path) -> list[tuple[int, int, str]]:
    return [(p.offset, p.size, p.kind) for p in layout_parts(read_pte(path))]


def _exact_and_sampled(path: Path, parts: list[tuple[int, int, str]], plan: SamplePlan):  # type: ignore[no-untyped-def]
    exact = measure(path, levels=(6,), boundaries=[off for off, _, _ in parts])
    sampled = sample_measure(path, parts, levels=(6,), plan=plan)
    return exact, sampled


def _assert_within_bound(exact, sampled) -> float:  # type: ignore[no-untyped-def]
    truth = exact.gzip_bytes(6)
    error = abs(sampled.gzip_bytes(6) - truth) / truth
    assert sampled.estimate == SAMPLED
    assert error <= sampled.bound(6), (error, sampled.bound(6))
    assert error < 0.01 and sampled.bound(6) < 0.01
    return error


@pytest.mark.parametrize("which", ["float_pte", "int8_pte"])
def test_a_real_program_of_trained_weights_is_estimated_within_its_bound(
    trained: TrainedPrograms, which: str
) -> None:
    path = getattr(trained, which)
    parts = _parts(path)
    exact, sampled = _exact_and_sampled(path, parts, SMALL_PLAN)
    _assert_within_bound(exact, sampled)
    # The same parts as the exact measurement, and the parts too small to sample (header,
    # program, delegate blob, padding) measured exactly: to the byte.
    assert sampled.part_bounds == exact.part_bounds
    weights_kinds = {"constant_segment", "named_data"}
    for (_, _, kind), e, s in zip(
        parts, exact.part_deflate_bytes, sampled.part_deflate_bytes, strict=True
    ):
        if kind not in weights_kinds:
            assert s == e, kind
    assert sampled.deflated_bytes is not None
    assert sampled.deflated_bytes < exact.raw_bytes / 3


@pytest.mark.parametrize("which", ["float_payload", "int8_payload"])
def test_48_mb_of_trained_weights_are_estimated_within_the_bound_from_a_sixth(
    trained: TrainedPrograms, which: str
) -> None:
    path = getattr(trained, which)
    size = path.stat().st_size
    exact, sampled = _exact_and_sampled(path, [(0, size, "file")], DEFAULT_PLAN)
    _assert_within_bound(exact, sampled)
    # The default plan draws its minimum, 32 chunks of 256 KiB, from 48 MB: a sixth of it.
    assert sampled.deflated_bytes == DEFAULT_PLAN.min_samples * DEFAULT_PLAN.chunk_bytes
    assert 0.85 < exact.ratio(6) < 1.0  # weights barely compress, and the estimate knows it


def test_the_same_file_gives_the_same_estimate(trained: TrainedPrograms) -> None:
    parts = _parts(trained.float_pte)
    first = sample_measure(trained.float_pte, parts, plan=SMALL_PLAN)
    again = sample_measure(trained.float_pte, parts, plan=SMALL_PLAN, workers=1)
    assert first.gzip_bytes(6) == again.gzip_bytes(6) and first.bound(6) == again.bound(6)


def test_a_payload_that_changes_along_the_file_widens_the_bound_and_still_holds_it(
    trained: TrainedPrograms, tmp_path: Path
) -> None:
    # Trained int8 weights, then the same weights as float, then a stretch of int8 again:
    # chunk ratios from 0.92 to 0.96 in one population, as an LLM's layers are not alike.
    mixed = tmp_path / "mixed.bin"
    int8 = trained.int8_payload.read_bytes()
    floats = trained.float_payload.read_bytes()
    mixed.write_bytes(int8[: 16 << 20] + floats[: 24 << 20] + int8[16 << 20 : 24 << 20])
    size = mixed.stat().st_size
    exact, sampled = _exact_and_sampled(mixed, [(0, size, "file")], DEFAULT_PLAN)
    _assert_within_bound(exact, sampled)
    whole = trained.float_payload.stat().st_size
    uniform = sample_measure(trained.float_payload, [(0, whole, "file")])
    assert sampled.bound(6) > uniform.bound(6)


def test_a_run_of_zeros_is_estimated_from_a_thirty_second_within_its_bound(
    tmp_path: Path,
) -> None:
    # A sparse file (holes read as zeros, no disk used): zeros deflate to almost nothing, so
    # the few bytes each sampled chunk's end costs are 5% of the figure unless taken off.
    big = tmp_path / "zeros.bin"
    with big.open("wb") as fh:
        fh.truncate(256 << 20)
    sampled = sample_measure(big, [(0, 256 << 20, "file")])
    assert sampled.deflated_bytes == (256 << 20) // 32 and sampled.chunks == 32
    exact = measure(big)
    error = abs(sampled.gzip_bytes(6) - exact.gzip_bytes(6)) / exact.gzip_bytes(6)
    assert error <= sampled.bound(6) < 0.01


def test_a_small_file_is_measured_whole_and_says_exact(trained: TrainedPrograms) -> None:
    parts = _parts(trained.int8_pte)
    m = sample_measure(trained.int8_pte, parts)  # 4.4 MB: under the default plan's minimum
    exact = measure(trained.int8_pte, boundaries=[off for off, _, _ in parts])
    assert m.estimate == EXACT and m.bound(6) == 0.0
    assert m.part_deflate_bytes == exact.part_deflate_bytes
    assert m.label(6) == "exact"


def test_a_sampled_verdict_is_judged_at_the_top_of_its_bound(trained: TrainedPrograms) -> None:
    path = trained.float_payload
    exact = check_size([path], any_file=True, levels=(6,), use_cache=False)
    sampled = check_size([path], any_file=True, levels=(6,), estimate="sample", use_cache=False)
    (f,) = sampled.files
    assert f.estimate_label.startswith("sampled ±") and f.download_uncertainty_bytes > 0
    assert sampled.estimate_label == f.estimate_label
    # A budget between the estimate and the top of its bound: the exact check passes it
    # (the truth is inside the bound, below the top), the sampled check must not.
    budget = sampled.download_bytes + f.download_uncertainty_bytes // 2
    assert exact.download_bytes <= budget
    close = check_size(
        [path], any_file=True, levels=(6,), estimate="sample", budget=budget, use_cache=False
    )
    (verdict,) = [v for v in close.verdicts if v.limit.key == "budget"]
    assert verdict.status == OVER and close.failed
    assert verdict.excess_bytes == sampled.download_bytes + f.download_uncertainty_bytes - budget
    assert "sampled ±" in verdict.describe()
    # With room past the bound it fits, and says how sure.
    roomy = check_size(
        [path], any_file=True, levels=(6,), estimate="sample", use_cache=False,
        budget=sampled.download_bytes + 2 * f.download_uncertainty_bytes,
    )  # fmt: skip
    (verdict,) = [v for v in roomy.verdicts if v.limit.key == "budget"]
    assert verdict.status == FITS and verdict.headroom_bytes == f.download_uncertainty_bytes
    assert any("sampled" in n and "exact" in n for n in roomy.notes)


def test_a_bad_plan_is_a_usage_error(trained: TrainedPrograms) -> None:
    from etdeploy.errors import UsageError

    size = trained.float_payload.stat().st_size
    with pytest.raises(UsageError, match="fraction"):
        sample_measure(trained.float_payload, [(0, size, "file")], plan=SamplePlan(fraction=0.9))
    with pytest.raises(UsageError, match="do not tile"):
        sample_measure(trained.float_payload, [(0, 10, "a"), (20, size - 20, "b")])
