"""The optional `explore` extra (pyproject.toml): Google's Model Explorer and
ExecuTorch's extension for it. The base install never needs them."""

from __future__ import annotations

import importlib.util

from etdeploy.errors import UsageError

# The distributions the extra installs and the modules etdeploy imports from them.
EXTRA_MODULES = {
    "model_explorer": "ai-edge-model-explorer",
    "executorch_extension_model_explorer": "executorch-extension-model-explorer",
}
INSTALL_HINT = "pip install 'etdeploy[explore]' (Model Explorer and ExecuTorch's adapter for it)"


def require_explore_extra() -> None:
    """Raise a UsageError (exit 2) naming what is missing when the extra is not installed."""
    missing = [dist for module, dist in EXTRA_MODULES.items() if not _importable(module)]
    if missing:
        raise UsageError(
            f"etdeploy explore needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            "not installed",
            INSTALL_HINT,
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (a None entry)
        return False
