"""Android phones over ADB: files by the sync protocol, commands by shell v2.

Everything goes through an adb server (adb's own smart-socket protocol, spoken
by server.py), never through the `adb` command line:

- server.py: the smart-socket protocol's client (host requests, a connection
  switched to a phone's service).
- connection.py, the server: ANDROID_ADB_SERVER_HOST/PORT unless settings say
  otherwise, as adb does. When nothing answers on a local host, `adb -P PORT
  start-server` starts one with the adb binary adbutils ships (the only use of
  adbutils). A running server is never killed: one too old for this client is a
  DeviceError that says so; nothing is started on 5037 behind the user's back.
- phones.py: which phones the server has and which one a --device name means.
- wire.py, one phone's services: shell v2 (else v1 with an exit marker) and the
  sync protocol (STA2/SND2/RCV2 when the phone has them, else v1).
- device.py, AdbDevice: the Device on top (the push decision with digests
  recorded on the phone, the run wrapper that can kill a command's group,
  logcat after each run).
"""

from etdeploy.devices.adb.connection import (
    DEFAULT_ADB_HOST,
    DEFAULT_ADB_PORT,
    ENV_HOST,
    ENV_PORT,
    ENV_SERIAL,
    MIN_SERVER_VERSION,
    AdbSettings,
    connect_server,
)
from etdeploy.devices.adb.device import LOGCAT_TAG, WORKDIR, AdbDevice
from etdeploy.devices.adb.phones import friendly_matches, list_attached, resolve_serial
from etdeploy.devices.adb.wire import SYNC_DATA_MAX, SYNC_PATH_MAX, RemoteStat

__all__ = [
    "DEFAULT_ADB_HOST",
    "DEFAULT_ADB_PORT",
    "ENV_HOST",
    "ENV_PORT",
    "ENV_SERIAL",
    "LOGCAT_TAG",
    "MIN_SERVER_VERSION",
    "SYNC_DATA_MAX",
    "SYNC_PATH_MAX",
    "WORKDIR",
    "AdbDevice",
    "AdbSettings",
    "RemoteStat",
    "connect_server",
    "friendly_matches",
    "list_attached",
    "resolve_serial",
]
