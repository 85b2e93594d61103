"""A stand-in STF/DeviceFarmer server on loopback that hands out loopback phones.

It stands for an STF installation (its API unit and the providers behind it)
and speaks the parts of STF's REST API a farm uses, as DeviceFarmer/stf
documents and implements them (read 2026-12-03 at commit c7b928f of 2026-07-31,
package version 3.7.9, Swagger document version "2.4.1"): doc/API.md,
lib/units/api/swagger/api_v1.yaml, lib/units/api/controllers/user.js and
devices.js, lib/units/api/helpers/securityHandlers.js, lib/util/datautil.js and
deviceutil.js, lib/units/device/plugins/group.js and connect.js.

What is real:
- Auth: `Authorization: Bearer TOKEN` on every request; no header, another
  scheme or an unknown token is 401 {"success": false, "description": ...}.
- GET /api/v1/devices[?fields=a,b] and /devices/{serial}: every device with
  serial, model, marketName, manufacturer, sdk (a string, as STF stores
  getprop's answer), abi, version, present, ready, owner ({email, name, group}
  or null) and `using` (owned by the caller); remoteConnectUrl only for its owner.
- GET /api/v1/user, /user/devices.
- POST /api/v1/user/devices {serial, timeout}: 404 unknown device; 403 "Device is
  being used or not available" unless present, ready and unowned (isAddable);
  else the caller owns it, for `timeout` ms of idle time (default: the group
  timeout), 200 "Device successfully added".
- DELETE /api/v1/user/devices/{serial}: 403 unless the caller owns it, else it
  is free again and its remote debugging ends, 200 "Device successfully removed".
- POST /api/v1/user/devices/{serial}/remoteConnect: 403 unless owned, else 200
  with remoteConnectUrl, an address `adb connect` takes; DELETE ends it.
- Expiry: an owned device left idle for its timeout goes back to the pool
  (STF's group "automatic_timeout"). Activity is a request about the device, or
  an adb service opened on it through the remote connection (what STF's connect
  plugin reports as userActivity).

What stands in, and how: each device is a LoopbackAdbDevice (tests/support/
loopback_adb.py), its STF identity read from its properties as a provider
reads getprop. Its remote-debugging port is the phone's own listener, which
refuses connections (the phone's `offline` flag) unless remote debugging is on:
the provider's port only forwards while remote connect is active. There is no
web UI, no websocket, no user or group administration, no provider processes.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.loopback_adb import LoopbackAdbDevice

# STF's default group timeout (lib/cli/api: --group-timeout, 900 s), used when a
# claim gives none.
GROUP_TIMEOUT_S = 900.0
# How often the expiry timer looks at the devices.
_TICK_S = 0.1


@dataclass
class StfDevice:
    serial: str
    phone: LoopbackAdbDevice
    owner: str | None = None  # the owner's email
    timeout_s: float = GROUP_TIMEOUT_S
    last_activity: float = 0.0
    seen_services: int = 0
    remote: bool = False

    def identity(self) -> dict[str, Any]:
        props = self.phone.properties
        return {
            "serial": self.serial,
            "model": props.get("ro.product.model"),
            "marketName": props.get("ro.product.model"),
            "manufacturer": props.get("ro.product.manufacturer"),
            "sdk": props.get("ro.build.version.sdk"),
            "abi": props.get("ro.product.cpu.abi"),
            "version": props.get("ro.build.version.release"),
            "product": props.get("ro.product.name"),
            "present": True,
            "ready": True,
            "provider": {"name": "loopback"},
        }


@dataclass
class StfServer:
    """The server: its devices by STF serial, its users by token, and a record of
    what happened (events: (what, serial, email); requests: (method, path, status))."""

    devices: dict[str, StfDevice]
    tokens: dict[str, str] = field(default_factory=lambda: {"stf-test-token": "ci@example.org"})
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _http: ThreadingHTTPServer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        assert self._http is not None
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def claims(self) -> dict[str, str]:
        """serial -> owner, of the devices someone holds."""
        with self._lock:
            return {s: d.owner for s, d in self.devices.items() if d.owner is not None}

    def take(self, serial: str, email: str) -> None:
        """Someone else uses a device (as from the UI)."""
        with self._lock:
            device = self.devices[serial]
            device.owner, device.last_activity = email, time.monotonic()
            self.events.append(("claimed", serial, email))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> StfServer:
        for device in self.devices.values():
            device.phone.offline = True  # no remote debugging yet
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._http = server
        threading.Thread(target=server.serve_forever, name="stf-http", daemon=True).start()
        threading.Thread(target=self._expire_loop, name="stf-expiry", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    # -- the API -----------------------------------------------------------------------
    def user_of(self, header: str | None) -> str | None:
        scheme, _, token = (header or "").partition(" ")
        return self.tokens.get(token) if scheme == "Bearer" and token else None

    def public(self, device: StfDevice, email: str) -> dict[str, Any]:
        doc = device.identity()
        owner = device.owner
        doc["owner"] = (
            {"email": owner, "name": owner.split("@")[0], "group": "default"} if owner else None
        )
        doc["using"] = owner == email
        # datautil.applyOwnerOnlyInfo: only the owner sees the remote address.
        doc["remoteConnect"] = device.remote if owner == email else False
        doc["remoteConnectUrl"] = device.phone.address if device.remote and owner == email else None
        return doc

    def handle(self, method: str, path: str, query: Mapping[str, list[str]], body: Any,
               email: str) -> tuple[int, dict[str, Any]]:  # fmt: skip
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if parts[:2] != ["api", "v1"]:
            return 404, {"success": False, "description": "Not Found"}
        route = parts[2:]
        fields = (query.get("fields") or [""])[0]
        pick = (
            (lambda d: {k: v for k, v in d.items() if k in fields.split(",")})
            if fields
            else (lambda d: d)
        )
        with self._lock:
            if method == "GET" and route == ["devices"]:
                listed = [pick(self.public(d, email)) for d in self.devices.values()]
                return 200, {
                    "success": True,
                    "description": "Devices Information",
                    "devices": listed,
                }
            if method == "GET" and len(route) == 2 and route[0] == "devices":
                device = self.devices.get(route[1])
                if device is None:
                    return 404, {"success": False, "description": "Device not found"}
                return 200, {"success": True, "description": "Device Information",
                             "device": pick(self.public(device, email))}  # fmt: skip
            if method == "GET" and route == ["user"]:
                return 200, {"success": True, "user": {"email": email, "name": email.split("@")[0]}}
            if route[:2] == ["user", "devices"]:
                return self._user_devices(method, route[2:], body, email, pick)
        return 404, {"success": False, "description": "Not Found"}

    def _user_devices(self, method: str, rest: list[str], body: Any, email: str,
                      pick: Any) -> tuple[int, dict[str, Any]]:  # fmt: skip
        if method == "GET" and not rest:
            mine = [pick(self.public(d, email)) for d in self.devices.values() if d.owner == email]
            return 200, {
                "success": True,
                "description": "Controlled devices information",
                "devices": mine,
            }
        if method == "POST" and not rest:
            serial = body.get("serial") if isinstance(body, dict) else None
            device = self.devices.get(str(serial))
            if device is None:
                return 404, {"success": False, "description": "Device not found"}
            if device.owner is not None:
                return 403, {
                    "success": False,
                    "description": "Device is being used or not available",
                }
            timeout = body.get("timeout")
            device.owner = email
            device.timeout_s = (
                timeout / 1000 if isinstance(timeout, int) and timeout > 0 else GROUP_TIMEOUT_S
            )
            self._touch(device)
            self.events.append(("claimed", device.serial, email))
            return 200, {"success": True, "description": "Device successfully added"}
        device = self.devices.get(rest[0]) if rest else None
        if device is None:
            return 404, {"success": False, "description": "Device not found"}
        owned = device.owner == email
        if rest[1:] == [] and method == "DELETE":
            if not owned:
                return 403, {
                    "success": False,
                    "description": "You cannot release this device. Not owned by you",
                }
            self._free(device, "released")
            return 200, {"success": True, "description": "Device successfully removed"}
        if rest[1:] == ["remoteConnect"]:
            if not owned:
                return 403, {"success": False,
                             "description": "Device is not owned by you or is not available"}  # fmt: skip
            self._touch(device)
            if method == "POST":
                device.remote, device.phone.offline = True, False
                self.events.append(("remote-connect", device.serial, email))
                return 200, {"success": True, "description": "Remote connection is enabled",
                             "remoteConnectUrl": device.phone.address}  # fmt: skip
            if method == "DELETE":
                self._end_remote(device)
                self.events.append(("remote-disconnect", device.serial, email))
                return 200, {
                    "success": True,
                    "description": "Device remote disconnected successfully",
                }
        return 404, {"success": False, "description": "Not Found"}

    # -- ownership ---------------------------------------------------------------------
    def _touch(self, device: StfDevice) -> None:
        device.last_activity = time.monotonic()
        device.seen_services = len(device.phone.opened_services)

    def _end_remote(self, device: StfDevice) -> None:
        device.remote = False
        device.phone.offline = True
        device.phone.drop_connections()

    def _free(self, device: StfDevice, why: str) -> None:
        owner = device.owner or ""
        device.owner = None
        if device.remote:
            self._end_remote(device)
        self.events.append((why, device.serial, owner))

    def _expire_loop(self) -> None:
        while not self._stop.wait(_TICK_S):
            now = time.monotonic()
            with self._lock:
                for device in self.devices.values():
                    if device.owner is None:
                        continue
                    opened = len(device.phone.opened_services)
                    if opened != device.seen_services:  # adb activity through the remote link
                        device.seen_services, device.last_activity = opened, now
                    elif now - device.last_activity > device.timeout_s:
                        self._free(device, "expired")


def _handler(server: StfServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            parsed = urllib.parse.urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            email = server.user_of(self.headers.get("Authorization"))
            if email is None:
                status, doc = 401, {"success": False, "description": "Bad Credentials"}
            else:
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                status, doc = server.handle(method, parsed.path,
                                            urllib.parse.parse_qs(parsed.query), body, email)  # fmt: skip
            server.requests.append((method, parsed.path, status))
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the record is server.requests

    return Handler


@contextlib.contextmanager
def stf_server(phones: Mapping[str, LoopbackAdbDevice]) -> Iterator[StfServer]:
    """A running server over `phones` (STF serial -> phone); stopped on exit, the
    phones' remote debugging off."""
    server = StfServer({serial: StfDevice(serial, phone) for serial, phone in phones.items()})
    server.start()
    try:
        yield server
    finally:
        server.stop()
        for device in server.devices.values():
            device.phone.offline = True
