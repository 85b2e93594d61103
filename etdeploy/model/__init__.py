"""Loading a model: `file.py:factory`, `package.module:factory`, a `.pt2`, or a
built-in example. The result is a ModelSpec plus what identifies its source."""

from etdeploy.model.spec import ModelSpec

__all__ = ["ModelSpec"]
