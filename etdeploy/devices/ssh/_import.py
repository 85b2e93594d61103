"""paramiko, imported without invoke until an ssh_config needs it.

paramiko 5.1's config module imports invoke (paramiko/config.py, read 2026-12-04),
which brings asyncio, unittest.mock and a vendored YAML: about half of importing
paramiko, for `Match exec` lines alone, which run a command through invoke.run. So
paramiko is imported with invoke held back, and paramiko.config is given a stand-in
that imports invoke the first time a `Match exec` line runs: the same behaviour, and
a connection that needs none of it does not pay for it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any


class _InvokeOnDemand:
    """invoke, imported when paramiko.config first uses it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("invoke"), name)


def import_paramiko() -> None:
    """Import paramiko as above (nothing when it is imported already)."""
    if "paramiko" in sys.modules:
        return
    held = "invoke" not in sys.modules
    if held:
        sys.modules["invoke"] = None  # type: ignore[assignment]  # an ImportError for now
    try:
        import paramiko.config
    finally:
        if held:
            with contextlib.suppress(KeyError):
                if sys.modules["invoke"] is None:
                    del sys.modules["invoke"]
    if held and getattr(paramiko.config, "invoke", False) is None:
        paramiko.config.invoke = _InvokeOnDemand()  # type: ignore[attr-defined]


import_paramiko()

import paramiko as paramiko  # noqa: E402  the module, for `from _import import paramiko`
