"""Where an int8 build's activation ranges come from: real samples (the
factory's or --calibration's), noise (--random-calibration), or nothing
(int8-dynamic); the digest that tells a cached build its samples changed; and
the warning a verdict carries when the ranges are not from real data."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from etdeploy.builder.manifest import BuildManifest
from etdeploy.builder.manifest_records import Calibration, JsonObject, ManifestError
from etdeploy.builder.options import BuildOptions
from etdeploy.errors import EtdeployError, InputError
from etdeploy.model.spec import ModelSpec

if TYPE_CHECKING:
    import torch

    from etdeploy.builder.tapped_manifest import TappedManifest


def calibration_digest(paths: tuple[str, ...]) -> str:
    from etdeploy.inputs import expand_sample_paths

    digest = hashlib.sha256()
    for path in expand_sample_paths(paths) if paths else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def calibration_warning(record: Mapping[str, object] | None) -> str | None:
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


def calibration_unchanged(manifest: BuildManifest | TappedManifest) -> bool:
    """False when the sample files a build was calibrated on have changed since, or gone."""
    quantization = manifest.quantization
    return calibration_current(quantization.calibration if quantization is not None else None)


def recorded_calibration_unchanged(record: Mapping[str, object]) -> bool:
    """calibration_unchanged for a record that keeps its calibration as a manifest
    does (under "calibration"); one that cannot be read counts as changed."""
    found = record.get("calibration")
    try:
        calibration = Calibration.from_json(cast(JsonObject, found)) if found else None
    except ManifestError:
        return False
    return calibration_current(calibration)


def calibration_current(calibration: Calibration | None) -> bool:
    if calibration is None or calibration.digest is None:
        return True
    try:
        return calibration_digest(calibration.sources or ()) == calibration.digest
    except EtdeployError:  # a source that is gone now
        return False


def no_calibration_error() -> InputError:
    return InputError(
        "--quantize int8 needs real calibration inputs",
        "give --calibration DIR (sample files like the ones you verify with), "
        "or --random-calibration to calibrate on noise (recorded in the manifest)",
    )


def example_metas(spec: ModelSpec) -> list[dict[str, Any]]:
    """What the model's example inputs say of each input (name, dtype, shape) and
    the dims its build makes dynamic ({dim: [min, max]}), in the form etdeploy.inputs
    reads: what samples are checked against before anything is exported."""
    names = spec.input_names or [f"input_{i}" for i in range(len(spec.example_inputs))]
    return [
        {
            "name": name,
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": list(tensor.shape),
            "dynamic": {str(d): list(r) for d, r in (spec.dynamic or {}).get(name, {}).items()},
        }
        for name, tensor in zip(names, spec.example_inputs, strict=False)
    ]


def calibration_batches(
    spec: ModelSpec, options: BuildOptions
) -> tuple[list[tuple[torch.Tensor, ...]], JsonObject]:
    import torch

    from etdeploy.dataset import load_labelled
    from etdeploy.inputs import check_against, to_tensors

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
    # The example inputs give each input's dtype and shape, and the dims declared
    # dynamic (--dynamic or the factory's) their ranges: raw .bin and image samples
    # calibrate as they verify, and samples of several lengths are one calibration set.
    metas = example_metas(spec)
    # A labelled set (an .npz with y, a folder a class) calibrates on its samples.
    samples = load_labelled(paths, metas, None).samples
    for sample in samples:
        check_against(sample, metas, "calibration sample")
    batches = [to_tensors(s) for s in samples]
    on_examples = all(
        all(
            b.shape == e.shape and torch.equal(b, e)
            for b, e in zip(batch, spec.example_inputs, strict=True)
        )
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
