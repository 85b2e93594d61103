#!/usr/bin/env bash
# Wrap the device build of the runner (build_runner.sh --platform device) in a
# signed .app, since iOS only launches signed, installed app bundles. Runs on the
# Mac, with a development certificate in the keychain and a provisioning profile
# that covers the bundle id and the phone.
#
#   ios_harness/device/build_device_app.sh --binary PATH --bundle-id ID \
#       --identity "Apple Development: Name (TEAMID)" --profile FILE.mobileprovision [--out DIR]
#
# Then (xcrun devicectl, Xcode 15+; flags as its help describes them):
#   xcrun devicectl device install app --device UDID OUT/Runner.app
#   xcrun devicectl device copy to --device UDID --domain-type appDataContainer \
#       --domain-identifier ID --source model.pte --destination Documents/model.pte
#   xcrun devicectl device process launch --device UDID --console ID --model_path ...
# The app's sandbox is its only writable place, so inputs and outputs live in its
# data container (Documents/ above) and come back with `devicectl device copy from`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
binary=""; bundle_id=""; identity=""; profile=""
out="$here/../build/device"
min_os="17.0"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --bundle-id) bundle_id="$2"; shift 2 ;;
    --identity) identity="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build_device_app.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for required in binary bundle_id identity profile; do
  [[ -n "${!required}" ]] || { echo "build_device_app.sh: --${required//_/-} is required" >&2; exit 2; }
done
[[ "$(uname -s)" == Darwin ]] || { echo "needs macOS with Xcode" >&2; exit 2; }

name="$(basename "$binary")"
app="$out/Runner.app"
rm -rf "$app"
mkdir -p "$app"
cp "$binary" "$app/$name"
sed -e "s/@BUNDLE_ID@/$bundle_id/" -e "s/@EXECUTABLE@/$name/" -e "s/@MIN_OS@/$min_os/" \
  "$here/Info.plist.in" > "$app/Info.plist"
cp "$profile" "$app/embedded.mobileprovision"

# The profile carries the entitlements the signature must claim (application
# identifier, team, get-task-allow for a development build).
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
security cms -D -i "$profile" > "$scratch/profile.plist"
/usr/libexec/PlistBuddy -x -c 'Print :Entitlements' "$scratch/profile.plist" > "$scratch/entitlements.plist"
codesign --force --sign "$identity" --entitlements "$scratch/entitlements.plist" --timestamp=none "$app"
codesign --verify --verbose=2 "$app"
echo "signed $app"
