"""The real result documents as fixtures, the same the records' tests use
(tests/results/samples.py)."""

from tests.results.samples import (  # noqa: F401 - fixtures
    infra_error,
    passed,
    passed_int8,
    passed_memory,
    passed_portable,
    passed_two_io,
)
