"""`etdeploy run`: the stages of design.md, one module each, read top to bottom.

    job.py         resolve   the frozen RunJob (flags over etdeploy.toml over defaults;
                             a --bundle's over its settings)
    plan.py                  the RunJob read once into each stage's narrow record
    build.py       build     the .pte (cached build, or --pte) as a Program (etdeploy.program);
                             a job bundle's Program and Staged come from etdeploy.bundle.job_bundle
    stage.py       stage     real inputs checked against the method, encoded for the runner
    references.py            what each sample should give (eager model, file, host runtime)
    deploy.py      deploy    the runner that fits the device (runner_for); then runner, .pte
                             and inputs pushed, each skipped when unchanged
    (etdeploy.preflight)     between the two: can that runner run the program? (asked
                             before anything of the program is pushed)
    execute.py     execute   the runner per sample under a deadline; outputs, timings, logs
    verify.py      verify    metrics and verdict per output, host check, the size verdict;
                             the run's one verdict, memory's limit among its inputs
                             (etdeploy.memory.limit.judge_memory)
    localize.py    localize  (--localize) the tapped twin on the device; the first operator
    taps.py                  whose error outgrows its inputs' (localize_runs.py: the
                             tapped twin run on the device and eagerly)
    run.py         run_job   the stages composed into one RunResult (etdeploy.results.result)
    shapes.py                (--shapes) the program run at points of its dynamic range
                             (shape_points.py: the points parsed and resolved)
    make_bundle.py           `etdeploy bundle`: build, stage and references written as a job
                             bundle a device host runs without torch

Nothing here prints: progress goes through callbacks, failures raise EtdeployError
kinds, and the result is data for the report writers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from etdeploy.lazy import lazy_exports

if TYPE_CHECKING:
    from etdeploy.pipeline.job import RunContext, RunJob, StatusCallback, new_job_id
    from etdeploy.pipeline.run import (
        as_error,
        error_result,
        run_job,
        write_result_json,
    )
    from etdeploy.results.result import RESULT_SCHEMA_ID as RESULT_SCHEMA
    from etdeploy.results.result import RunResult

# Where each public name lives: imported on first use (etdeploy.lazy), so naming the
# job (the CLI parsing a command line) does not import the stages (numpy, the devices).
_EXPORTS = {
    **dict.fromkeys(("RunContext", "RunJob", "StatusCallback", "new_job_id"),
                    "etdeploy.pipeline.job"),
    **dict.fromkeys(("as_error", "error_result", "run_job", "write_result_json"),
                    "etdeploy.pipeline.run"),
    "RunResult": "etdeploy.results.result",
    "RESULT_SCHEMA": "etdeploy.results.result:RESULT_SCHEMA_ID",
}  # fmt: skip
__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "RESULT_SCHEMA",
    "RunContext",
    "RunJob",
    "RunResult",
    "StatusCallback",
    "as_error",
    "error_result",
    "new_job_id",
    "run_job",
    "write_result_json",
]
