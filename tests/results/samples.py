"""The real result documents of tests/data/results/ as fixtures (fresh copies), for
the records' tests (tests/results) and the renderers' (tests/report), whose
conftest.py files take them from here."""

from __future__ import annotations

import pytest

from tests.results.docs import Doc, load_farm_sample, load_sample


@pytest.fixture
def passed() -> Doc:
    return load_sample("passed_xnnpack")


@pytest.fixture
def passed_portable() -> Doc:
    return load_sample("passed_portable")


@pytest.fixture
def infra_error() -> Doc:
    return load_sample("error_runner_timeout")


@pytest.fixture
def passed_int8() -> Doc:
    """digits[xnnpack+int8]: passed by its error budget, not allclose to float."""
    return load_farm_sample("passed_xnnpack_int8")


@pytest.fixture
def passed_two_io() -> Doc:
    """two_io.py:build[xnnpack]: two outputs, judged by allclose."""
    return load_farm_sample("passed_two_io_xnnpack")


@pytest.fixture
def passed_memory() -> Doc:
    """two_io.py:dynamic_mlp with its memory account, a limit and three --shapes points."""
    return load_sample("passed_memory_shapes")
