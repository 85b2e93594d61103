"""What every report format reads from a result document: the job key, the
status in words and clipped text (files are written by etdeploy.atomic).

Kept free of heavy imports: the CLI imports the report package on every start.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

# A log in a report is for a reader, not a forensic copy: the full log is in
# the result JSON. Head and tail keep the command line and the final error.
LOG_CLIP_CHARS = 8000


class JobKey(NamedTuple):
    """What makes two results the same job across runs: a baseline is matched on it.

    `backend` or `quantization` is None when the result does not say (a .pte
    without a manifest, or an error result of a run that never built).
    """

    model: str
    backend: str | None
    quantization: str | None
    device: str

    @property
    def variant(self) -> str:
        """backend and quantization as one token: "xnnpack", "xnnpack+int8"."""
        backend = self.backend or "?"
        return f"{backend}+{self.quantization}" if self.quantization else backend

    @property
    def label(self) -> str:
        return f"{self.model}[{self.variant}] on {self.device}"

    def to_json(self) -> dict[str, str | None]:
        return dict(self._asdict())


def job_key(result: dict[str, Any]) -> JobKey:
    """The key of one result document.

    The artifact block says what was built; an error result may have none, so
    the job block is the fallback (where the pipeline records backend and
    quantization there too).
    """
    job = result.get("job") or {}
    artifact = result.get("artifact") or {}
    device = (result.get("device") or {}).get("name") or "?"
    model = job.get("model")
    if not model:
        # A run of a bare .pte (--pte with --reference) has no model name.
        pte = artifact.get("pte")
        model = Path(pte).name if pte else "?"
    source = artifact if artifact else job
    return JobKey(str(model), source.get("backend"), source.get("quantization"), str(device))


def is_infrastructure(result: dict[str, Any]) -> bool:
    """A device, transport or runner failure (exit 3), as opposed to bad input (exit 2)."""
    error = result.get("error") or {}
    if "infrastructure" in error:
        return bool(error["infrastructure"])
    return result.get("exit_code") == 3


def failure_kind(result: dict[str, Any]) -> str:
    """For a failed result: "numerics" when the outputs diverged, "size" when only a
    store limit was exceeded."""
    verdict = result.get("verdict") or {}
    if verdict.get("passed", True) is False:
        return "numerics"
    size = result.get("size") or {}
    if size.get("passed", True) is False:
        return "size"
    return "numerics"


def failure_message(result: dict[str, Any]) -> str:
    """One line saying why a failed result failed."""
    if failure_kind(result) == "size":
        over = [
            f"{v.get('label', v.get('key', '?'))}: {v.get('text', 'over')}"
            for v in (result.get("size") or {}).get("verdicts", [])
            if v.get("status") == "over"
        ]
        return "size: " + ("; ".join(over) or "a size limit is exceeded")
    return str(
        (result.get("verdict") or {}).get("reason") or "the outputs differ from the reference"
    )


def error_type(result: dict[str, Any]) -> str:
    """The error's type as a report names it, infrastructure.<Kind> or
    input.<Kind>: a CI reader sees at once whether the phone or the model is to blame."""
    error = result.get("error") or {}
    kind = error.get("kind") or "Error"
    return f"{'infrastructure' if is_infrastructure(result) else 'input'}.{kind}"


def clip(text: str, limit: int = LOG_CLIP_CHARS) -> str:
    """Head and tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


def joined_logs(result: dict[str, Any], limit: int = LOG_CLIP_CHARS) -> str:
    return clip("\n".join(str(log) for log in result.get("logs") or []), limit)


def unique(items: Iterable[Any]) -> list[Any]:
    """Items in first-seen order, each once."""
    return list(dict.fromkeys(items))
