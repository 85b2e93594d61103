#!/usr/bin/env bash
# Build the etdeploy C++ runner (the CMake project in android_harness/) for the iOS
# simulator or an iOS device, linking ExecuTorch's Apple .xcframeworks through
# ios_harness/cmake/executorch-config.cmake. Runs on a Mac with Xcode 15+ and
# CMake 3.24+.
#
#   ios_harness/build_runner.sh --platform simulator|device [--arch arm64|x86_64]
#       [--frameworks DIR] [--source DIR] [--target NAME] [--out DIR] [--debug]
#
# The simulator build is a plain Mach-O executable for the iphonesimulator SDK,
# which `xcrun simctl spawn UDID PATH` runs (etdeploy's ios-simulator transport).
# The device build is the same program for iphoneos; wrap and sign it with
# device/build_device_app.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
platform=""
arch="arm64"
frameworks="$here/build/frameworks"
source_dir="$repo/android_harness"
target="${ETDEPLOY_RUNNER_TARGET:-etdeploy_runner}"
out=""
debug=OFF
# ExecuTorch's Swift package declares iOS 17 as its minimum (Package.swift,
# read 2026-12-02).
deployment_target="17.0"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --platform) platform="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --frameworks) frameworks="$2"; shift 2 ;;
    --source) source_dir="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --debug) debug=ON; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build_runner.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

case "$platform" in
  simulator) sdk=iphonesimulator; slice_kind=simulator ;;
  device) sdk=iphoneos; slice_kind=ios
    if [[ "$arch" != arm64 ]]; then echo "iOS devices are arm64" >&2; exit 2; fi ;;
  *) echo "build_runner.sh: --platform simulator or --platform device" >&2; exit 2 ;;
esac
if [[ "$(uname -s)" != Darwin ]]; then
  echo "build_runner.sh: needs macOS with Xcode (this is $(uname -s))" >&2
  exit 2
fi
[[ -f "$source_dir/CMakeLists.txt" ]] || {
  echo "no CMakeLists.txt in $source_dir (the runner project)" >&2; exit 2; }
[[ -d "$frameworks/executorch.xcframework" || -d "$frameworks/executorch_debug.xcframework" ]] || {
  echo "no executorch.xcframework in $frameworks: run ios_harness/fetch_frameworks.sh" >&2; exit 2; }

build="$here/build/runner-$platform-$arch"
out="${out:-$here/build/bin/$platform-$arch}"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

# CMake's own iOS support (CMAKE_SYSTEM_NAME=iOS) picks the SDK from
# CMAKE_OSX_SYSROOT; no toolchain file is needed.
cmake -S "$source_dir" -B "$build" "${generator[@]}" \
  -DCMAKE_SYSTEM_NAME=iOS \
  -DCMAKE_OSX_SYSROOT="$sdk" \
  -DCMAKE_OSX_ARCHITECTURES="$arch" \
  -DCMAKE_OSX_DEPLOYMENT_TARGET="$deployment_target" \
  -DCMAKE_BUILD_TYPE=Release \
  -Dexecutorch_DIR="$here/cmake" \
  -DET_XCFRAMEWORKS_DIR="$frameworks" \
  -DET_APPLE_DEBUG="$debug"
cmake --build "$build" --target "$target" -j "$(sysctl -n hw.ncpu)"

binary="$(find "$build" -type f -name "$target" -perm -u+x | head -n 1)"
[[ -n "$binary" ]] || { echo "built, but found no executable named $target in $build" >&2; exit 1; }
mkdir -p "$out"
cp "$binary" "$out/$target"
# arm64 code must be signed to run, in the simulator too; ld signs ad hoc, and
# re-signing keeps that true after the copy.
codesign --force --sign - "$out/$target"
echo "built $out/$target ($slice_kind slice):"
xcrun vtool -show-build "$out/$target" | sed 's/^/  /'
