"""What a user would script instead of `etdeploy run ... --inputs DIR --labels FILE` for a
test set of many samples: the yardstick of bench_many_samples.py (issue 31), and the
transport part of scripted_bundle_run.py's (issue 27).

    python benchmarks/script_many_samples.py TRANSPORT TARGET RUNNER PTE SAMPLES REFERENCES

It packs every sample's input into one file and a samples list, sends them as one tar,
runs the runner over every sample in one call (in the directory the tar went to, which
the samples list's names are relative to), brings the outputs back as one tar, and
compares each sample's output with stored references in numpy (max abs error and top-1
agreement; top-1 against the labels). TRANSPORT is:
- `local`: TARGET is a work directory on this machine (no transfer: files are written
  there directly);
- `adb`: TARGET is `PORT:SERIAL:DIR` (the adb server's port, the phone, a directory on
  it), every step one `adb` command (`adb push` makes the directory);
- `ssh`: TARGET is `CONFIG:HOST:DIR`, an ssh_config file naming the host's port, key and
  known hosts, every step one `ssh` command (tar in, tar out).
RUNNER and PTE are where the runner and the program already are on the target: pushing
those is not the job a warm run does either. SAMPLES is a folder of .npy files and a
labels.csv; REFERENCES an .npz of the eager outputs, `s<i>` for sample i.

It prints one line: samples, max abs error, top-1 agreement with eager and top-1 accuracy.
No etdeploy import: only the standard library and numpy.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def pack(inputs: Sequence[bytes]) -> bytes:
    """The tar to send: inputs.bin (every sample's input back to back) and samples.tsv
    (every sample after the first: its input as a byte range of inputs.bin)."""
    blob, lines, offset = io.BytesIO(), [], 0
    for data in inputs:
        lines.append(f"inputs.bin@{offset}\t\t\t")
        blob.write(data)
        offset += len(data)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("inputs.bin", blob.getvalue()),
                           ("samples.tsv", "".join(f"{line}\n" for line in lines[1:]).encode())):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()


def _runner_line(runner: str, pte: str, remote_dir: str, flags: Sequence[str]) -> str:
    return (
        f"cd {remote_dir} && tar xf job.tar && {runner} --model_path={pte} "
        f"--inputs=inputs.bin@0 --samples_file=samples.tsv --batch_output=batch "
        f"{' '.join(flags)} > run.log && tar cf out.tar batch.bin batch.json"
    )


def run_job(
    transport: str, target: str, runner: str, pte: str, job: bytes, flags: Sequence[str] = ()
) -> bytes:
    """Send the tar, run the runner over every sample, bring the outputs' tar back."""
    remote = target.rsplit(":", 1)[-1]
    line = _runner_line(runner, pte, remote, flags)
    if transport == "local":
        work = Path(target)
        work.mkdir(parents=True, exist_ok=True)
        (work / "job.tar").write_bytes(job)
        subprocess.run(["sh", "-c", line], check=True)
        return (work / "out.tar").read_bytes()
    if transport == "adb":
        port, serial, _ = target.split(":", 2)
        adb = ["adb", "-P", port, "-s", serial]
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "job.tar").write_bytes(job)
            subprocess.run([*adb, "push", f"{tmp}/job.tar", f"{remote}/job.tar"], check=True,
                           capture_output=True)  # fmt: skip
            subprocess.run([*adb, "shell", line], check=True, capture_output=True)
            subprocess.run([*adb, "pull", f"{remote}/out.tar", f"{tmp}/out.tar"], check=True,
                           capture_output=True)  # fmt: skip
            return (Path(tmp) / "out.tar").read_bytes()
    config, host, _ = target.split(":", 2)
    ssh = ["ssh", "-F", config, host]
    subprocess.run([*ssh, f"mkdir -p {remote} && cat > {remote}/job.tar"], input=job, check=True)
    subprocess.run([*ssh, line], check=True, capture_output=True)
    return subprocess.run([*ssh, f"cat {remote}/out.tar"], check=True, capture_output=True).stdout


def outputs(out: bytes) -> list[list[np.ndarray]]:
    """Per sample, its tensor outputs: views of batch.bin as batch.json places them."""
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        data = tar.extractfile("batch.bin").read()  # type: ignore[union-attr]
        documents = json.load(tar.extractfile("batch.json"))["samples"]  # type: ignore[arg-type]
    return [
        [_view(data, record) for record in document["outputs"] if record.get("offset") is not None]
        for document in documents
    ]


def _view(data: bytes, record: dict) -> np.ndarray:
    count = int(np.prod(record["shape"]))
    array = np.frombuffer(data, np.dtype(record["dtype"]), count=count, offset=record["offset"])
    return array.reshape(record["shape"])


def main(argv: list[str]) -> int:
    transport, target, runner, pte, samples_dir, references = argv
    files = sorted(Path(samples_dir).glob("*.npy"))
    with open(Path(samples_dir) / "labels.csv", newline="") as handle:
        labels = dict(csv.reader(handle))
    job = pack([np.load(path).astype(np.float32).tobytes() for path in files])
    got = outputs(run_job(transport, target, runner, pte, job))
    expected = np.load(references)
    worst, agree, correct = 0.0, 0, 0
    for i, (path, sample) in enumerate(zip(files, got, strict=True)):
        want = expected[f"s{i}"]
        worst = max(worst, float(np.abs(sample[0] - want).max()))
        agree += int(sample[0].argmax() == want.argmax())
        correct += int(sample[0].argmax() == int(labels[path.stem]))
    n = len(got)
    print(f"{n} samples: max abs error {worst:.3g}, top-1 agreement {agree}/{n}, "
          f"top-1 accuracy {correct / n:.2%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
