"""What etdeploy.extras tells about installed packages without importing them."""

from __future__ import annotations

import importlib.metadata

import pytest

from etdeploy.extras import installed_version


@pytest.mark.parametrize("package", ["numpy", "torch", "executorch", "typer"])
def test_an_installed_version_is_what_importlib_metadata_says(package: str) -> None:
    assert installed_version(package) == importlib.metadata.version(package)


def test_a_missing_package_is_a_missing_package() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        installed_version("no-such-package-etdeploy")
