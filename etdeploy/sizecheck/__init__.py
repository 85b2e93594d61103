"""Size checks for what etdeploy ships: parallel deflate estimates
(compress), a sampled estimate with its error bound for multi-GB files (sample), the cache
that measures a content once (cache), the stores' limits (limits), verdicts (check), what to
cut (breakdown), and the settings from etdeploy.toml with the verdict `run` and `farm` report
(summary).

Nothing here imports torch or executorch, so `etdeploy sizecheck` starts fast.
"""

from __future__ import annotations

from etdeploy.sizecheck.breakdown import Breakdown, breakdown, build_breakdown
from etdeploy.sizecheck.cache import measure_file
from etdeploy.sizecheck.check import (
    SCHEMA,
    SizedFile,
    SizeReport,
    Verdict,
    check_size,
    report_to_json,
)
from etdeploy.sizecheck.compress import Measurement, gzip_size, measure
from etdeploy.sizecheck.limits import Limit, apply_overrides, default_limits
from etdeploy.sizecheck.sample import SamplePlan, sample_measure
from etdeploy.sizecheck.summary import (
    SUMMARY_SCHEMA,
    Settings,
    resolve_settings,
    summary_for_result,
)

__all__ = [
    "SCHEMA",
    "SUMMARY_SCHEMA",
    "Breakdown",
    "Limit",
    "Measurement",
    "SamplePlan",
    "Settings",
    "SizeReport",
    "SizedFile",
    "Verdict",
    "apply_overrides",
    "breakdown",
    "build_breakdown",
    "check_size",
    "default_limits",
    "gzip_size",
    "measure",
    "measure_file",
    "report_to_json",
    "resolve_settings",
    "sample_measure",
    "summary_for_result",
]
