"""The typer app. Commands live one file each in this package; they parse flags,
call the core, and render what it returns. Nothing here imports torch at module
level, so `etdeploy --help`, `sizecheck`, `devices` and `doctor` start fast.

Importing a command's module registers its commands on the app. `etdeploy COMMAND`
imports only COMMAND's module (a run need not import farm's, release's or build's:
~0.05 s of every start-up); `etdeploy` alone, its help, an unknown command and
`etdeploy.cli.app` (the app tests and the docs take) register every command, in
the order their help lists them.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Sequence

from etdeploy.cli import _app
from etdeploy.lazy import lazy_exports

# Each command's module, in the order the help lists them.
MODULES = (
    "build", "bundle", "clean", "devices", "doctor", "explore", "farm", "history", "release", "run",
    "runner", "sizecheck",
)  # fmt: skip
# Commands a module registers besides the one named like it.
_ALSO = {"inspect": "build"}


def load_commands(modules: Sequence[str] = MODULES) -> None:
    """Register the commands of `modules` (every command by default)."""
    for name in MODULES:
        if name in modules:
            importlib.import_module(f"etdeploy.cli.{name}")


def modules_for(argv: Sequence[str]) -> Sequence[str]:
    """The command modules a command line needs: the one its command word names, or
    all (no command, an unknown one, or typer's completion asking); none for
    `--version`, which the root answers before any command is looked at."""
    if any(key.startswith("_ETDEPLOY_COMPLETE") for key in os.environ):
        return MODULES
    # Every option before the command word is a flag of the root (-v, -q, --version).
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        return ()
    module = _ALSO.get(word or "", word)
    return (module,) if module in MODULES else MODULES


# The cyclic GC's first generation: collected every 5,000 container allocations instead of
# CPython's 700 (3.13 took 2,000). Start-up makes ~100,000 objects that live as long as
# the process (modules, classes, functions); walking them ~100 times cost ~0.02 s.
GC_GEN0 = 5_000


def main() -> None:
    gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])
    load_commands(modules_for(sys.argv[1:]))
    # What start-up made is never garbage: the collector stops walking it (gc.freeze).
    gc.freeze()
    _app.main()


# `app` with every command registered (cli/_all_commands.py), made when first asked for.
__getattr__ = lazy_exports(__name__, {"app": "etdeploy.cli._all_commands"})


__all__ = ["app", "main"]
