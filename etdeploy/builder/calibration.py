"""Where an int8 build's activation ranges come from: real samples (the
factory's or --calibration's), noise (--random-calibration), or nothing
(int8-dynamic); the digest that tells a cached build its samples changed; and
the warning a verdict carries when the ranges are not from real data."""

from __future__ import annotations

import hashlib
from typing import Any

from etdeploy.builder.options import BuildOptions
from etdeploy.errors import EtdeployError, InputError


def calibration_digest(paths: tuple[str, ...]) -> str:
    from etdeploy.inputs import expand_sample_paths

    digest = hashlib.sha256()
    for path in expand_sample_paths(paths) if paths else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def calibration_warning(record: dict[str, Any] | None) -> str | None:
    """What a verdict must say about where int8's ranges came from."""
    kind = (record or {}).get("kind")
    if kind == "random":
        return (
            "int8 calibrated on noise (--random-calibration): activation ranges come from "
            "random inputs, not real data, so accuracy on real inputs is not what it could be"
        )
    if kind == "examples":
        return (
            "int8 calibrated on the model's example inputs only: they fix shapes for export "
            "and are not a calibration set; give --calibration with real samples"
        )
    return None


def calibration_unchanged(manifest: dict[str, Any]) -> bool:
    calibration = (manifest.get("quantization") or {}).get("calibration") or {}
    if "digest" not in calibration:
        return True
    try:
        return calibration_digest(tuple(calibration["sources"])) == calibration["digest"]
    except EtdeployError:  # a source that is gone now
        return False


def no_calibration_error() -> InputError:
    return InputError(
        "--quantize int8 needs real calibration inputs",
        "give --calibration DIR (sample files like the ones you verify with), "
        "or --random-calibration to calibrate on noise (recorded in the manifest)",
    )


def calibration_batches(
    spec: Any, options: BuildOptions
) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    import torch

    from etdeploy.inputs import load_samples, to_tensors

    if options.quantize == "int8-dynamic":
        return [spec.example_inputs], {"kind": "none (dynamic activations)"}
    if options.random_calibration:
        generator = torch.Generator().manual_seed(0)
        batches = [
            tuple(
                torch.randn(t.shape, generator=generator).to(t.dtype) for t in spec.example_inputs
            )
            for _ in range(16)
        ]
        return batches, {
            "kind": "random",
            "samples": 16,
            "note": "calibrated on noise (--random-calibration)",
        }
    paths = options.calibration or tuple(str(p) for p in (spec.calibration or spec.samples))
    if not paths:
        raise no_calibration_error()
    # The example inputs give each input's dtype and shape, so raw .bin and image
    # samples calibrate as they verify.
    names = spec.input_names or [f"input_{i}" for i in range(len(spec.example_inputs))]
    metas = [
        {"name": n, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        for n, t in zip(names, spec.example_inputs, strict=False)
    ]
    samples = load_samples(paths, metas)
    batches = [to_tensors(s) for s in samples]
    for sample, batch in zip(samples, batches, strict=True):
        if len(batch) != len(spec.example_inputs) or any(
            b.shape != e.shape or b.dtype != e.dtype
            for b, e in zip(batch, spec.example_inputs, strict=False)
        ):
            given = ", ".join(f"{b.dtype}{list(b.shape)}" for b in batch)
            want = ", ".join(f"{e.dtype}{list(e.shape)}" for e in spec.example_inputs)
            raise InputError(
                f"calibration sample {sample.name} has the wrong shape: given {given}, the model takes {want}",
                "calibrate on samples shaped like the example inputs",
            )
    on_examples = all(
        all(torch.equal(b, e) for b, e in zip(batch, spec.example_inputs, strict=True))
        for batch in batches
    )
    return batches, {
        # Samples equal to the example inputs are shapes, not a calibration set.
        "kind": "examples" if on_examples else "real",
        "samples": len(samples),
        "sources": list(paths),
        # Checked on every cache hit: the factory's own samples are only known
        # after running it, so they cannot be in the cache key.
        "digest": calibration_digest(tuple(paths)),
    }
