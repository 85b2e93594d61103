#!/usr/bin/env bash
# Run a simulator build of the runner by hand, the way etdeploy's ios-simulator
# transport does: boot the simulator if needed, wait for the boot, then spawn.
#
#   ios_harness/mac/run_in_simulator.sh UDID|booted /path/to/runner [runner args...]
#
# Paths are the Mac's: a simulator process sees the Mac's file system. Variables
# for the runner go through simctl as SIMCTL_CHILD_<NAME>=value.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
udid="$1"; shift
runner="$1"; shift

state="$(xcrun simctl list devices | grep -F "($udid)" | sed -E 's/.*\((Booted|Shutdown|Booting|Shutting Down)\).*/\1/' || true)"
if [[ "$udid" != booted && "$state" == Shutdown ]]; then
  xcrun simctl boot "$udid"
fi
# bootstatus -b boots if needed and returns once the simulator has finished booting.
xcrun simctl bootstatus "$udid" -b >/dev/null
exec xcrun simctl spawn "$udid" "$runner" "$@"
