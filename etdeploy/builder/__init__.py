"""The build stage: model -> export -> (quantize) -> lower -> .pte + manifest.

    cached_build.py     build(): content-addressed, served from the cache without running
                        the factory or torch.export when nothing changed
    options.py          BuildOptions, BuildResult, the paths beside a .pte
    manifest.py         the build manifest's record (BuildManifest; its parts in
                        manifest_records.py)
    export.py, quantize.py, calibration.py, lower.py, ptd.py   the steps
    tapped*.py, tap_plan.py   the tapped twin (--localize)
    artifact.py         `etdeploy build -o`: the exported files

Importing the package imports none of them: a reader of a program's manifest (a job
bundle's run, preflight) takes the record without the build's modules (~0.03 s), and
these names are imported when first asked for (etdeploy.lazy).
"""

from typing import TYPE_CHECKING

from etdeploy.lazy import lazy_exports

if TYPE_CHECKING:
    from etdeploy.builder.artifact import (
        Exported,
        check_output_free,
        default_output_name,
        export_artifact,
    )
    from etdeploy.builder.cached_build import (
        PlannedBuild,
        build,
        cache_key,
        parse_dynamic,
        planned_build,
        versions,
    )
    from etdeploy.builder.calibration import calibration_warning
    from etdeploy.builder.options import (
        EXTERNAL_WEIGHT_BACKENDS,
        BuildOptions,
        BuildResult,
        InputsCheck,
        StatusCallback,
        data_file_of,
        data_path,
        etrecord_path,
        quantized_program_path,
        unsupported,
    )

_AT = "etdeploy.builder."
_EXPORTS = {
    **dict.fromkeys(("Exported", "check_output_free", "default_output_name", "export_artifact"),
                    _AT + "artifact"),
    **dict.fromkeys(("PlannedBuild", "build", "cache_key", "parse_dynamic", "planned_build",
                     "versions"), _AT + "cached_build"),
    "calibration_warning": _AT + "calibration",
    **dict.fromkeys(("EXTERNAL_WEIGHT_BACKENDS", "BuildOptions", "BuildResult", "InputsCheck",
                     "StatusCallback", "data_file_of", "data_path", "etrecord_path",
                     "quantized_program_path", "unsupported"), _AT + "options"),
}  # fmt: skip
__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "EXTERNAL_WEIGHT_BACKENDS", "BuildOptions", "BuildResult", "Exported", "InputsCheck",
    "PlannedBuild", "StatusCallback", "build", "cache_key", "calibration_warning",
    "check_output_free", "data_file_of", "data_path", "default_output_name", "etrecord_path",
    "export_artifact", "parse_dynamic", "planned_build", "quantized_program_path", "unsupported",
    "versions",
]  # fmt: skip
