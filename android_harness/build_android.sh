#!/usr/bin/env bash
# Build the etdeploy runner for Android (arm64-v8a by default) into a bundle
# directory that can be pushed to a device as it is.
#
# NOT RUN IN etdeploy's CI: the machine it was written on had neither an NDK nor
# an ExecuTorch built for Android (see README.md). `etdeploy runner build --abi
# arm64-v8a` runs the same CMake configure as step 2 below.
#
# Needs:
#   ANDROID_NDK                 an unpacked Android NDK (r26 or newer)
#   EXECUTORCH_ANDROID_PREFIX   where an ExecuTorch built for the ABI is (or will
#                               be) installed: its lib/cmake/ExecuTorch package
# Optional:
#   EXECUTORCH_SRC              an executorch source checkout (same version as
#                               the Python wheel, with submodules); when given,
#                               step 1 builds and installs ExecuTorch into
#                               EXECUTORCH_ANDROID_PREFIX first
#   ANDROID_ABI                 default arm64-v8a
#   ANDROID_PLATFORM            default android-26
#   OUT                         bundle directory (default ./runner-$ANDROID_ABI)
#   CMAKE                       default: cmake on PATH (must be 3.28 or newer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
: "${ANDROID_NDK:?set ANDROID_NDK to the Android NDK directory}"
: "${EXECUTORCH_ANDROID_PREFIX:?set EXECUTORCH_ANDROID_PREFIX to an ExecuTorch install for Android}"
abi="${ANDROID_ABI:-arm64-v8a}"
platform="${ANDROID_PLATFORM:-android-26}"
out="${OUT:-$PWD/runner-$abi}"
cmake="${CMAKE:-cmake}"
jobs="$(nproc 2>/dev/null || echo 2)"
toolchain="$ANDROID_NDK/build/cmake/android.toolchain.cmake"
[ -f "$toolchain" ] || { echo "no $toolchain: is ANDROID_NDK an NDK?" >&2; exit 2; }

# 1. ExecuTorch for the ABI (only when a source tree is given). The options are
#    those the runner links: optimized and quantized kernels, XNNPACK, the data
#    loader and tensor extensions, the thread pool, and ETDump with the event
#    tracer. PAL "posix" rather than Android's default, so runtime messages
#    ("Missing operator: ...") reach stderr over `adb shell` instead of logcat.
if [ -n "${EXECUTORCH_SRC:-}" ]; then
  "$cmake" -S "$EXECUTORCH_SRC" -B "$EXECUTORCH_SRC/cmake-android-$abi" \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DANDROID_ABI="$abi" \
    -DANDROID_PLATFORM="$platform" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$EXECUTORCH_ANDROID_PREFIX" \
    -DEXECUTORCH_PAL_DEFAULT=posix \
    -DEXECUTORCH_ENABLE_LOGGING=ON \
    -DEXECUTORCH_BUILD_XNNPACK=ON \
    -DEXECUTORCH_BUILD_KERNELS_OPTIMIZED=ON \
    -DEXECUTORCH_BUILD_KERNELS_QUANTIZED=ON \
    -DEXECUTORCH_BUILD_EXTENSION_DATA_LOADER=ON \
    -DEXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR=ON \
    -DEXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP=ON \
    -DEXECUTORCH_BUILD_EXTENSION_MODULE=ON \
    -DEXECUTORCH_BUILD_EXTENSION_TENSOR=ON \
    -DEXECUTORCH_BUILD_DEVTOOLS=ON \
    -DEXECUTORCH_ENABLE_EVENT_TRACER=ON
  "$cmake" --build "$EXECUTORCH_SRC/cmake-android-$abi" --parallel "$jobs" --target install
fi

# 2. The runner, against that install. Static libraries: the bundle is the
#    runner alone (plus libc++_shared.so if the NDK links it shared).
build="$(mktemp -d "${TMPDIR:-/tmp}/etdeploy-runner-$abi.XXXXXX")"
trap 'rm -rf "$build"' EXIT
"$cmake" -S "$here" -B "$build/build" \
  -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
  -DANDROID_ABI="$abi" \
  -DANDROID_PLATFORM="$platform" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$EXECUTORCH_ANDROID_PREFIX" \
  -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH
"$cmake" --build "$build/build" --parallel "$jobs"
"$cmake" --install "$build/build" --prefix "$build/bundle"

# Written beside, then renamed: a half-built bundle never sits under $out.
rm -rf "$out.previous"
[ -e "$out" ] && mv "$out" "$out.previous"
mv "$build/bundle" "$out"
rm -rf "$out.previous"
echo "$out"
echo "push it with: adb push $out /data/local/tmp/etdeploy && adb shell /data/local/tmp/etdeploy/$(basename "$out")/etdeploy_runner --version" >&2
