"""Job bundles: a job made once where torch is (`etdeploy bundle MODEL -o DIR`), run
anywhere without it (`etdeploy run --bundle DIR -d DEVICE`).

A bundle is a folder (job_bundle.py has its layout): the program with its build
manifest and .ptd, a runner bundle per ABI (prebuilt by runner_build: a device host
compiles nothing), the staged samples, the reference tables (float eager; quantized
eager for a quantized build; the host runtime's with --host-check), the job's
settings, and bundle.json listing each file with its sha256. A run of it takes the
same stages as `etdeploy run MODEL` from deploy on, so it reaches the same verdict.

    job_bundle.py  bundle.json: the typed manifest and the layout; a bundle opened
                   as a run's records (Program, Staged, runners): one more source of
                   a run's program, beside a build and a --pte

A bundle sits below the pipeline and imports none of it: making one runs the
pipeline's own stages (etdeploy.pipeline.make_bundle), and a run of one takes its
settings in etdeploy.pipeline.job (bundle_job).
"""

from etdeploy.bundle.job_bundle import BUNDLE_FILE, BUNDLE_SCHEMA, BundleManifest, is_bundle

__all__ = ["BUNDLE_FILE", "BUNDLE_SCHEMA", "BundleManifest", "is_bundle"]
