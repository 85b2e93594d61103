"""The one exception type the core raises, and its kinds.

The CLI turns an EtdeployError into one line and a hint with the documented exit
code; nothing else in the package prints. Exit codes (design.md):
0 all checks pass, 1 a check failed, 2 bad input or usage, 3 device/transport/runner.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INFRA = 3


class EtdeployError(Exception):
    """An error a user can act on: what went wrong, and what to do about it."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        exit_code: int | None = None,
        log: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code
        # Runner or device output that explains the failure; kept with the result.
        self.log = log

    def __str__(self) -> str:
        return self.message


class UsageError(EtdeployError):
    """Bad flags, bad config, a file that is not what it should be."""

    exit_code = EXIT_BAD_INPUT


class ModelError(EtdeployError):
    """The model could not be loaded or exported."""

    exit_code = EXIT_BAD_INPUT


class InputError(EtdeployError):
    """Sample inputs that do not match the program, or cannot be read."""

    exit_code = EXIT_BAD_INPUT


class CheckFailed(EtdeployError):
    """A check ran and failed: numerics diverged, a size limit was exceeded."""

    exit_code = EXIT_CHECK_FAILED


class InfraError(EtdeployError):
    """Something outside the model broke: device, transport or runner.

    `device` and `command` say where it happened (as Mobly's errors do), so a farm
    report can tell a broken phone from a broken model.
    """

    exit_code = EXIT_INFRA

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        device: str | None = None,
        command: str | None = None,
        log: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message, hint, log=log)
        self.device = device
        self.command = command
        # True for faults that a retry can cure (a dropped connection, a device
        # that went offline); farm retries only these.
        self.retryable = retryable

    def __str__(self) -> str:
        where = f"[{self.device}] " if self.device else ""
        return f"{where}{self.message}"


class DeviceError(InfraError):
    """The device is unreachable, offline, locked by another job, or out of space."""


class TransportError(InfraError):
    """The connection to the device failed or dropped mid-operation."""


class RunnerError(InfraError):
    """The runner failed to start, crashed, hung, or reported a runtime error."""


class Interruption(InfraError):
    """The run was stopped from outside (Ctrl-C, SIGTERM) before it finished: what its
    result document records (exit_code 3, as the schema allows); the process itself
    exits as a shell reports that signal (130, 143: etdeploy.interrupts)."""
