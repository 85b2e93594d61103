"""Exports of a farm spec to device-farm services that run tests on hosts of
their own: what `etdeploy farm export TARGET SPEC.toml` writes.

One module per service, registered in EXPORTERS: today aws-device-farm
(etdeploy.farm.export.aws_device_farm).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from etdeploy.farm.export.aws_device_farm import TARGET as AWS_DEVICE_FARM
from etdeploy.farm.export.aws_device_farm import Export, export_aws_device_farm

# target name -> exporter(spec_path, out_dir, device) -> what it wrote
EXPORTERS: dict[str, Callable[[Path, Path, str | None], Export]] = {
    AWS_DEVICE_FARM: export_aws_device_farm,
}

__all__ = ["AWS_DEVICE_FARM", "EXPORTERS", "Export", "export_aws_device_farm"]
