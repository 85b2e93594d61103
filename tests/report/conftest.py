"""The real result documents of tests/data/results/ as fixtures (fresh copies)."""

from __future__ import annotations

import pytest

from tests.report.docs import Doc, load_sample


@pytest.fixture
def passed() -> Doc:
    return load_sample("passed_xnnpack")


@pytest.fixture
def passed_portable() -> Doc:
    return load_sample("passed_portable")


@pytest.fixture
def infra_error() -> Doc:
    return load_sample("error_runner_timeout")
