"""A runner that failed, read: the ExecuTorch error its output names, the
operators and backends the runtime missed, and one line with a hint."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etdeploy.errors import RunnerError
from etdeploy.et_errors import ET_ERROR_INFO, ET_ERRORS
from etdeploy.runner.log import parse_log

if TYPE_CHECKING:
    from etdeploy.et_errors import EtErrorInfo

# Our runner: "error: method load failed: OperatorMissing (0x14)".
_OUR_ERROR = re.compile(r"^error: (.+)$", re.MULTILINE)
_NAMED_CODE = re.compile(r"\b([A-Z][A-Za-z]+) \(0x([0-9a-fA-F]+)\)")
# Upstream: "... failed with status 0x14", "Could not prepare inputs: 0x12". Matched
# line by line, and only on lines with a hex code: searched over a whole output its
# lazy prefix retries from every character (~15 s on the 16 MB a runner that logs each
# of its iterations leaves at a deadline, ~30 s on a busy host).
_UPSTREAM_CODE = re.compile(
    r"(?P<what>(?:[A-Za-z][^\]\n]*?)?(?:failed|Could not [a-z ]+))(?: with status)?:? 0x(?P<code>[0-9a-fA-F]+)"
)
_HEX_CODE = re.compile(r" 0x[0-9a-fA-F]")
_MISSING_OPERATOR = re.compile(r"Missing operator: \[\d+\] (\S+)")
_MISSING_BACKEND = re.compile(r"Backend (\S+) is not registered")
# The dynamic loader, when a library the runner links is not beside it.
_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^:\s]+)")
_INPUT_SIZE = re.compile(r"input (\d+) \(.*\) has (\d+) bytes, expected (\d+) bytes")


@dataclass(frozen=True)
class EtError:
    """An ExecuTorch runtime error named in a runner's output."""

    name: str
    code: int

    def __str__(self) -> str:
        return f"{self.name} (0x{self.code:x})"

    @property
    def info(self) -> EtErrorInfo | None:
        # Here: the table is ~0.003 s to import, and only a failure explains itself.

        return ET_ERROR_INFO.get(self.code)

    @property
    def cause(self) -> str | None:
        return self.info.cause if self.info else None

    @property
    def hint(self) -> str | None:
        return self.info.hint if self.info else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "code": self.code, "cause": self.cause, "hint": self.hint}


class RunnerFailure(RunnerError):
    """A runner that exited non-zero, with what its output says went wrong."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        exit_code: int | None,
        et_error: EtError | None = None,
        missing_operators: Sequence[str] = (),
        missing_backends: Sequence[str] = (),
        device: str | None = None,
        command: str | None = None,
        log: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(
            message, hint, device=device, command=command, log=log, retryable=retryable
        )
        self.runner_exit_code = exit_code
        self.et_error = et_error
        self.missing_operators = tuple(missing_operators)
        self.missing_backends = tuple(missing_backends)


def find_et_error(text: str) -> EtError | None:
    """The first ExecuTorch error a runner's output names, from either runner."""
    for line in _OUR_ERROR.findall(text):
        if (match := _NAMED_CODE.search(line)) is not None:
            return EtError(match.group(1), int(match.group(2), 16))
    if (match := _upstream_code(text)) is not None:
        code = int(match.group("code"), 16)
        return EtError(ET_ERRORS.get(code, "Unknown"), code)
    return None


def _upstream_code(text: str) -> re.Match[str] | None:
    """The first upstream error-code line of `text`, in time linear in its length."""
    searched_to = 0
    for hex_code in _HEX_CODE.finditer(text):
        if hex_code.start() < searched_to:
            continue  # a second code on a line already searched
        start = text.rfind("\n", 0, hex_code.start()) + 1
        end = text.find("\n", hex_code.end())
        end = len(text) if end < 0 else end
        if (match := _UPSTREAM_CODE.search(text, start, end)) is not None:
            return match
        searched_to = end
    return None


def _signal_name(exit_code: int) -> str | None:
    # subprocess reports a signal as -N; a shell (adb shell, ssh) as 128+N.
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def runner_failure(
    exit_code: int | None,
    stdout: str,
    stderr: str,
    *,
    device_log: str = "",
    timed_out: bool = False,
    command: str | None = None,
    device: str | None = None,
    silent_for_s: float | None = None,
) -> RunnerFailure:
    """Turn a failed run into one error line and a hint, the log attached.

    The message names the ExecuTorch error when the output has one, plus the
    missing operators or backends the runtime logged; `exit_code` None means
    the runner never reported one (it was killed on a deadline). `silent_for_s`
    (with timed_out): it was stopped by --idle-timeout after that much silence.
    """
    said = _FailureOutput.read("\n".join(part for part in (stdout, stderr, device_log) if part))
    return RunnerFailure(
        _failure_message(said, exit_code, timed_out, silent_for_s),
        _failure_hint(said, exit_code, timed_out, silent_for_s),
        exit_code=exit_code,
        et_error=said.et_error,
        missing_operators=said.operators,
        missing_backends=said.backends,
        device=device,
        command=command,
        log=_failure_log(command, stdout, stderr, device_log),
    )


@dataclass(frozen=True)
class _FailureOutput:
    """What a failed runner's output (stdout, stderr and device log together) says."""

    text: str
    et_error: EtError | None
    operators: tuple[str, ...]
    backends: tuple[str, ...]
    # Our runner's own "error: ..." lines.
    our_lines: tuple[str, ...]
    # A shared library the dynamic loader could not find.
    library: str | None

    @classmethod
    def read(cls, text: str) -> _FailureOutput:
        library = _MISSING_LIBRARY.search(text)
        return cls(
            text=text,
            et_error=find_et_error(text),
            operators=tuple(_dedupe(_MISSING_OPERATOR.findall(text))),
            backends=tuple(_dedupe(_MISSING_BACKEND.findall(text))),
            our_lines=tuple(_OUR_ERROR.findall(text)),
            library=library.group(1) if library is not None else None,
        )


def _failure_log(command: str | None, stdout: str, stderr: str, device_log: str) -> str:
    """The command and each of its outputs under a heading, as the error carries them."""
    return "\n".join(
        part
        for part in (
            f"$ {command}" if command else "",
            f"--- stdout\n{stdout.rstrip()}" if stdout.strip() else "",
            f"--- stderr\n{stderr.rstrip()}" if stderr.strip() else "",
            f"--- device log\n{device_log.rstrip()}" if device_log.strip() else "",
        )
        if part
    )


def _failure_message(
    said: _FailureOutput, exit_code: int | None, timed_out: bool, silent_for_s: float | None
) -> str:
    """What happened, then what the runtime said was missing and the likely cause."""
    et_error = said.et_error
    if timed_out:
        message = (
            "runner timed out"
            if silent_for_s is None
            else f"runner said nothing for {silent_for_s:g} s and was stopped (--idle-timeout)"
        )
        if (parsed := parse_log(said.text)).iterations_ms:
            message += f" after {len(parsed.iterations_ms)} iteration(s)"
    elif said.our_lines:
        message = f"runner: {said.our_lines[-1].strip()}"
    elif said.library is not None:
        message = f"runner cannot load {said.library}"
    elif et_error is not None:
        message = f"runner failed: {et_error}"
    elif exit_code is not None and (sig := _signal_name(exit_code)) is not None:
        message = f"runner was killed by {sig}"
    else:
        message = f"runner exited with status {exit_code}"

    operators = said.operators
    if operators:
        shown = ", ".join(operators[:3]) + (
            f" and {len(operators) - 3} more" if len(operators) > 3 else ""
        )
        message += f"; missing operator(s): {shown}"
    if said.backends:
        message += f"; backend not linked: {', '.join(said.backends)}"
    if et_error is not None and str(et_error) not in message:
        message += f" [{et_error}]"
    if et_error is not None and et_error.cause and not timed_out and said.library is None:
        message += f"; likely cause: {et_error.cause}"
    return message


def _failure_hint(
    said: _FailureOutput, exit_code: int | None, timed_out: bool, silent_for_s: float | None
) -> str:
    """What to do about it: the most specific thing the output points at."""
    et_error = said.et_error
    if timed_out and silent_for_s is not None:
        return (
            "it may be hung (the log shows how far it got); if it is only slow to print, "
            "e.g. loading a large program, raise --idle-timeout"
        )
    if timed_out:
        return "raise the deadline, lower --iterations, or check the device is not throttled"
    if said.library is not None:
        return (
            "push the whole runner bundle: its shared libraries must sit in the same "
            "directory as the executable"
        )
    if said.backends:
        return (
            f"the program was lowered for {', '.join(said.backends)}, which this runner does "
            "not link; build the .pte for a backend the runner has (xnnpack, portable), or "
            "build the runner with it (etdeploy runner build --backends ...)"
        )
    if said.operators or (et_error is not None and et_error.name == "OperatorMissing"):
        return (
            "the runner has no kernel for that operator; build the runner with the library "
            "that registers it (etdeploy runner build --kernels ...), or lower with a "
            "partitioner that covers it"
        )
    if _INPUT_SIZE.search(said.text) or "--inputs has" in said.text:
        return (
            "each input file must hold exactly the tensor's bytes in its default dim "
            "order; re-stage the inputs from the model's example shapes"
        )
    if et_error is not None and et_error.hint:
        return et_error.hint
    if exit_code is not None and _signal_name(exit_code) is not None:
        return "the runner crashed; the log below shows how far it got"
    return "see the runner log (--verbose shows it in full)"
