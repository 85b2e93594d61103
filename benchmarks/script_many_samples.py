"""What a user would script instead of `etdeploy run ... --inputs DIR --labels FILE` for a
test set of many samples: the yardstick of bench_many_samples.py (issue 31).

    python benchmarks/script_many_samples.py TRANSPORT TARGET RUNNER PTE SAMPLES REFERENCES

It packs every sample's input into one file and a samples list, sends them as one tar,
runs the runner over every sample in one call, brings the outputs back as one tar,
and compares each sample's output with stored references in numpy (max abs error and
top-1 agreement; top-1 against the labels). TRANSPORT is:
- `local`: TARGET is a work directory on this machine (no transfer: files are written
  there directly);
- `adb`: TARGET is `PORT:SERIAL:DIR` (the adb server's port, the phone, a directory on
  it), every step one `adb` command;
- `ssh`: TARGET is `CONFIG:HOST:DIR`, an ssh_config file naming the host's port, key and
  known hosts, every step one `ssh` command (tar in, tar out).
RUNNER and PTE are where the runner and the program already are on the target: pushing
those is not the job a warm run does either. SAMPLES is a folder of .npy files and a
labels.csv; REFERENCES an .npz of the eager outputs, `s<i>` for sample i.

It prints one line: samples, max abs error, top-1 agreement with eager and top-1 accuracy.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np


def _pack(samples: Path, remote_dir: str) -> tuple[bytes, list[str], list[int]]:
    """The tar to send: inputs.bin (every sample back to back) and samples.tsv."""
    files = sorted(samples.glob("*.npy"))
    blob, lines, offset = io.BytesIO(), [], 0
    for path in files:
        data = np.load(path).astype(np.float32).tobytes()
        lines.append(f"{remote_dir}/inputs.bin@{offset}\t\t\t")
        blob.write(data)
        offset += len(data)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("inputs.bin", blob.getvalue()),
                           ("samples.tsv", "\n".join(lines[1:]).encode() + b"\n")):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with open(samples / "labels.csv", newline="") as handle:
        labels = dict(csv.reader(handle))
    return archive.getvalue(), [lines[0].split("\t")[0]], [int(labels[p.stem]) for p in files]


def _runner_line(runner: str, pte: str, first: str, remote_dir: str) -> str:
    return (
        f"cd {remote_dir} && tar xf job.tar && {runner} --model_path={pte} --inputs={first} "
        f"--samples_file={remote_dir}/samples.tsv --batch_output={remote_dir}/batch "
        f"> run.log && tar cf out.tar batch.bin batch.json"
    )


def _run(transport: str, target: str, runner: str, pte: str, job: bytes, first: str) -> bytes:
    """Send the tar, run the runner over every sample, bring the outputs' tar back."""
    if transport == "local":
        work = Path(target)
        work.mkdir(parents=True, exist_ok=True)
        (work / "job.tar").write_bytes(job)
        subprocess.run(["sh", "-c", _runner_line(runner, pte, first, target)], check=True)
        return (work / "out.tar").read_bytes()
    if transport == "adb":
        port, serial, remote = target.split(":", 2)
        adb = ["adb", "-P", port, "-s", serial]
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "job.tar").write_bytes(job)
            subprocess.run([*adb, "shell", f"mkdir -p {remote}"], check=True, capture_output=True)
            subprocess.run([*adb, "push", f"{tmp}/job.tar", f"{remote}/job.tar"], check=True,
                           capture_output=True)  # fmt: skip
            subprocess.run([*adb, "shell", _runner_line(runner, pte, first, remote)], check=True,
                           capture_output=True)  # fmt: skip
            subprocess.run([*adb, "pull", f"{remote}/out.tar", f"{tmp}/out.tar"], check=True,
                           capture_output=True)  # fmt: skip
            return (Path(tmp) / "out.tar").read_bytes()
    config, host, remote = target.split(":", 2)
    ssh = ["ssh", "-F", config, host]
    subprocess.run([*ssh, f"mkdir -p {remote} && cat > {remote}/job.tar"], input=job, check=True)
    subprocess.run(
        [*ssh, _runner_line(runner, pte, first, remote)], check=True, capture_output=True
    )
    return subprocess.run([*ssh, f"cat {remote}/out.tar"], check=True, capture_output=True).stdout


def main(argv: list[str]) -> int:
    transport, target, runner, pte, samples_dir, references = argv
    remote_dir = target.rsplit(":", 1)[-1]
    job, (first,), labels = _pack(Path(samples_dir), remote_dir)
    out = _run(transport, target, runner, pte, job, first)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        data = tar.extractfile("batch.bin").read()  # type: ignore[union-attr]
        documents = json.load(tar.extractfile("batch.json"))["samples"]  # type: ignore[arg-type]
    expected = np.load(references)
    worst, agree, correct = 0.0, 0, 0
    for i, document in enumerate(documents):
        record = document["outputs"][0]
        got = np.frombuffer(data, np.float32, count=int(np.prod(record["shape"])),
                            offset=record["offset"]).reshape(record["shape"])  # fmt: skip
        want = expected[f"s{i}"]
        worst = max(worst, float(np.abs(got - want).max()))
        agree += int(got.argmax() == want.argmax())
        correct += int(got.argmax() == labels[i])
    n = len(documents)
    print(f"{n} samples: max abs error {worst:.3g}, top-1 agreement {agree}/{n}, "
          f"top-1 accuracy {correct / n:.2%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
