"""The typer app. Commands live one file each in this package; they parse flags,
call the core, and render what it returns. Nothing here imports torch at module
level, so `etdeploy --help`, `sizecheck`, `devices` and `doctor` start fast.
"""

from __future__ import annotations

from etdeploy.cli._app import app, main

# Each import registers its commands on `app`.
from etdeploy.cli import build as _build  # noqa: F401  isort: skip
from etdeploy.cli import bundle as _bundle  # noqa: F401  isort: skip
from etdeploy.cli import clean as _clean  # noqa: F401  isort: skip
from etdeploy.cli import devices as _devices  # noqa: F401  isort: skip
from etdeploy.cli import doctor as _doctor  # noqa: F401  isort: skip
from etdeploy.cli import explore as _explore  # noqa: F401  isort: skip
from etdeploy.cli import farm as _farm  # noqa: F401  isort: skip
from etdeploy.cli import release as _release  # noqa: F401  isort: skip
from etdeploy.cli import run as _run  # noqa: F401  isort: skip
from etdeploy.cli import runner as _runner  # noqa: F401  isort: skip
from etdeploy.cli import sizecheck as _sizecheck  # noqa: F401  isort: skip

__all__ = ["app", "main"]
