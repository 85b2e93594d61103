"""What a user would script instead of `etdeploy run --bundle JOB -d PHONE`, for
bench_bundle.py (issue 27): the runner and the program already on the phone (a warm run
sends neither),

    adb push job.tar          the bundle's samples packed in one file, and a samples list
    adb shell ...             unpack, the runner over every sample in one call, outputs tarred
    adb pull out.tar          the outputs' bytes and their per-sample documents
    numpy                     each output against the bundle's float reference (allclose,
                              atol=rtol=1e-4, etdeploy's float default), top-1 against labels

(script_many_samples.py's steps, on the bundle's own files), and an exit code: 0 when
every output is within the tolerance, 1 otherwise. No etdeploy import: only the
standard library, numpy and that script.

    python benchmarks/scripted_bundle_run.py PORT:SERIAL:DIR RUNNER PTE BUNDLE [RUNNER FLAGS...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from script_many_samples import outputs, pack, run_job

ATOL = RTOL = 1e-4


def main(argv: list[str]) -> int:
    target, runner, pte, bundle_dir = argv[:4]
    bundle = Path(bundle_dir)
    # A static model's bundle stacks each input and output over the samples (i0, o<k>).
    with np.load(bundle / "inputs.npz") as archive:
        inputs = [row.tobytes() for row in archive["i0"]]
    count = len(inputs)
    got = outputs(run_job("adb", target, runner, pte, pack(inputs), argv[4:]))
    with np.load(bundle / "references" / "float.npz") as archive:
        references = {key: archive[key] for key in archive.files}
    labels = np.load(bundle / "labels.npz")["y"] if (bundle / "labels.npz").exists() else None
    ok, correct = len(got) == count, 0
    for s, sample in enumerate(got):
        for k, array in enumerate(sample):
            ok &= bool(np.allclose(array, references[f"o{k}"][s], atol=ATOL, rtol=RTOL))
        if labels is not None:
            correct += int(sample[0].argmax() == labels[s])
    print(f"{'PASS' if ok else 'FAIL'}: {len(got)} samples, top-1 {correct / max(1, len(got)):.2%}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
