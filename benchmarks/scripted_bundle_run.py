"""What a user would script instead of `etdeploy run --bundle`, for bench_bundle.py:
the runner and the program already on the phone (a warm run sends nothing either),

    adb shell RUNNER ...             the runner call, the same argv etdeploy makes
    adb pull BATCH.bin BATCH.json    its outputs and its per-sample documents
    numpy                            each output against the bundle's float reference

and an exit code: 0 when every output is within atol=rtol=1e-4 (etdeploy's float
default), 1 otherwise. No etdeploy import: only the standard library and numpy.

    python benchmarks/scripted_bundle_run.py ADB SERIAL PORT BUNDLE BATCH_BASE -- RUNNER ARGS...
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ATOL = RTOL = 1e-4


def main(argv: list[str]) -> int:
    adb, serial, port, bundle, batch = argv[:5]
    command = argv[argv.index("--") + 1 :]
    base = [adb, "-P", port, "-s", serial]
    subprocess.run([*base, "shell", " ".join(command)], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp)
        subprocess.run(
            [*base, "pull", f"{batch}.bin", f"{batch}.json", str(local)],
            check=True,
            capture_output=True,
        )
        data = (local / Path(batch).name).with_suffix(".bin").read_bytes()
        documents = json.loads((local / Path(batch).name).with_suffix(".json").read_text())
    references = np.load(Path(bundle) / "references" / "float.npz")
    ok = True
    for s, sample in enumerate(documents["samples"]):
        for k, output in enumerate(o for o in sample["outputs"] if o.get("offset") is not None):
            dtype = np.dtype(output["dtype"])
            count = int(np.prod(output["shape"]))
            start = output["offset"]
            got = np.frombuffer(data, dtype, count, start).reshape(output["shape"])
            ok &= bool(np.allclose(got, references[f"s{s}_o{k}"], atol=ATOL, rtol=RTOL))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
