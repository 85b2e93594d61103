#!/usr/bin/env bash
# Fetch ExecuTorch's prebuilt Apple .xcframeworks (the executorch Swift package) and
# collect them in one directory for cmake/executorch-config.cmake. Runs on a Mac
# with Xcode 15+ (swift on PATH).
#
#   ios_harness/fetch_frameworks.sh [--branch swiftpm-1.5.1] [--out DIR]
#
# The branch must match the executorch wheel that exported the .pte: a program
# from one release is not promised to load on another's runtime.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
branch="${ETDEPLOY_EXECUTORCH_BRANCH:-swiftpm-1.5.1}"
out="$here/build/frameworks"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --branch) branch="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "fetch_frameworks.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ "$(uname -s)" != Darwin ]]; then
  echo "fetch_frameworks.sh: needs macOS with Xcode (this is $(uname -s))" >&2
  exit 2
fi
command -v swift >/dev/null || { echo "swift not found: install Xcode 15+" >&2; exit 2; }

work="$here/build/spm"
mkdir -p "$work"
# A private copy, so .build/ and Package.resolved stay out of the source tree.
rsync -a --delete --exclude .build "$here/spm/" "$work/"
echo "resolving pytorch/executorch at branch $branch"
(cd "$work" && ETDEPLOY_EXECUTORCH_BRANCH="$branch" swift package resolve)

mkdir -p "$out"
found=0
# SwiftPM unpacks binary targets below .build/artifacts/<package>/<target>/.
while IFS= read -r -d '' framework; do
  name="$(basename "$framework")"
  rm -rf "${out:?}/$name"
  cp -R "$framework" "$out/$name"
  echo "  $name"
  found=$((found + 1))
done < <(find "$work/.build/artifacts" -name '*.xcframework' -type d -prune -print0)

if [[ $found -eq 0 ]]; then
  echo "no .xcframework found under $work/.build/artifacts" >&2
  exit 1
fi
echo "$found frameworks in $out"
echo "next: ios_harness/build_runner.sh --platform simulator --frameworks $out"
