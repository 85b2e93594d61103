#!/usr/bin/env bash
# Build ExecuTorch's Apple frameworks from source, for what the prebuilt Swift
# package does not ship: an x86_64 simulator slice (Intel Macs), or a runtime
# with different options. Runs on a Mac with Xcode 15+, CMake 3.24+ and Python 3.10+.
#
#   ios_harness/build_executorch_from_source.sh [--tag v1.5.1] [--src DIR] [--out DIR]
#
# It follows ExecuTorch's "Building from Source" steps (docs/source/
# using-executorch-ios.md): clone with submodules, install_requirements.sh, then
# scripts/build_apple_frameworks.sh, whose presets are ios (OS64), ios-simulator
# (SIMULATORARM64) and macos (CMakePresets.json, read 2026-12-02). For x86_64, set
# ETDEPLOY_SIMULATOR_PLATFORM=SIMULATOR64 to build that slice instead.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tag="v1.5.1"
src="$here/build/executorch-src"
out="$here/build/frameworks"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --src) src="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build_executorch_from_source.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$(uname -s)" == Darwin ]] || { echo "needs macOS with Xcode" >&2; exit 2; }

if [[ ! -d "$src/.git" ]]; then
  git clone -b "$tag" --depth 1 --recurse-submodules --shallow-submodules \
    https://github.com/pytorch/executorch.git "$src"
fi
cd "$src"
python3 -m venv .venv
# shellcheck disable=SC1091
source .venv/bin/activate
./install_requirements.sh
if [[ -n "${ETDEPLOY_SIMULATOR_PLATFORM:-}" ]]; then
  # The ios-simulator preset hard-codes SIMULATORARM64; rewrite it for this build only.
  python3 - "$ETDEPLOY_SIMULATOR_PLATFORM" <<'PY'
import json, sys
presets = json.load(open("CMakePresets.json"))
for preset in presets["configurePresets"]:
    if preset["name"] == "ios-simulator":
        preset["cacheVariables"]["PLATFORM"] = sys.argv[1]
json.dump(presets, open("CMakePresets.json", "w"), indent=2)
PY
fi
./scripts/build_apple_frameworks.sh
mkdir -p "$out"
cp -R cmake-out/*.xcframework "$out/"
echo "frameworks in $out"
