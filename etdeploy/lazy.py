"""A package's re-exported names, each imported when first asked for (PEP 562).

A package whose __init__ imports every submodule to re-export their names makes
whoever needs one name pay for all of them: `from etdeploy.runner_build import
RunnerBundle` imported the runner build, its toolchain probing and filelock
(~0.02 s of every warm run that only reads a runner bundle's manifest). A package
lists its names here instead, each with its module, and keeps the imports under
TYPE_CHECKING for the type checker.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(module: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `module`: exports maps each name to the module that
    defines it ("package.module", or "package.module:attribute" for a name
    re-exported under another name)."""

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(source), attribute or name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
