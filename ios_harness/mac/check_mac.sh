#!/usr/bin/env bash
# Run on the Mac (or over ssh: `ssh mac bash -s < ios_harness/mac/check_mac.sh`)
# to see whether etdeploy's ssh and ios-simulator transports can use it. Prints
# one line per check and exits non-zero if a required one fails.
set -uo pipefail

failed=0
ok() { printf 'ok    %s\n' "$*"; }
bad() { printf 'FAIL  %s\n' "$*"; failed=1; }
note() { printf 'note  %s\n' "$*"; }

[[ "$(uname -s)" == Darwin ]] || { bad "this is $(uname -s), not macOS"; exit 1; }
ok "macOS $(sw_vers -productVersion) on $(uname -m)"

# etdeploy hashes remote files with shasum -a 256 on macOS to skip unchanged pushes.
if command -v shasum >/dev/null; then ok "shasum: $(command -v shasum)"; else bad "shasum missing"; fi

developer_dir="$(xcode-select -p 2>/dev/null || true)"
if [[ "$developer_dir" == *CommandLineTools* || -z "$developer_dir" ]]; then
  bad "xcode-select points at '${developer_dir:-nothing}': simctl needs a full Xcode (sudo xcode-select -s /Applications/Xcode.app)"
else
  ok "Xcode: $developer_dir ($(xcodebuild -version 2>/dev/null | head -n 1))"
fi

if xcrun simctl help >/dev/null 2>&1; then
  ok "xcrun simctl works"
  runtimes="$(xcrun simctl list runtimes 2>/dev/null | grep -c '^iOS' || true)"
  if [[ "$runtimes" -gt 0 ]]; then
    ok "$runtimes iOS simulator runtime(s):"
    xcrun simctl list runtimes | grep '^iOS' | sed 's/^/        /'
  else
    bad "no iOS simulator runtime: Xcode > Settings > Platforms, or xcodebuild -downloadPlatform iOS"
  fi
  booted="$(xcrun simctl list devices booted | grep -c '(Booted)' || true)"
  note "$booted simulator(s) booted now; etdeploy boots the one it picks"
else
  bad "xcrun simctl does not run (accept the Xcode licence: sudo xcodebuild -license accept)"
fi

# A non-interactive ssh session gets a short PATH; xcrun lives in /usr/bin.
note "PATH for this shell: $PATH"
if command -v cmake >/dev/null; then ok "cmake $(cmake --version | head -n 1 | awk '{print $3}') (for build_runner.sh)"; else note "cmake missing (only needed to build the runner here)"; fi

exit "$failed"
