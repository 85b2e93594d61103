"""etdeploy.lazy: a name a package hands on lazily is never also the name of one of
its modules. Once that module is imported (by anyone, in any order), the package's
attribute is the module and `from package import name` returns it instead of the
function: a failure that shows only in some test orders."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import etdeploy

PACKAGES = sorted(
    name
    for _, name, is_package in pkgutil.walk_packages(etdeploy.__path__, "etdeploy.")
    if is_package and not name.startswith("etdeploy.pte.generated")
)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_lazily_exported_name_is_also_a_module_of_the_package(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(getattr(module, "__all__", ()))
    if getattr(module, "__getattr__", None) is None:
        return  # nothing is handed on lazily
    modules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert not exported & modules, f"{package}: {sorted(exported & modules)} name modules too"
