"""Phones from an STF/DeviceFarmer server: claimed over its REST API, reached with
`adb connect`, released whatever happens.

The spec names the server and the devices it provides (see StfSource.parse):

    [farm.sources.stf]
    url = "https://stf.example.org"
    token_env = "STF_TOKEN"       # the access token is read from this variable
    claim_timeout_s = 3600        # STF takes a phone back after this long idle
    runner = "runners/android-arm64"
    model = "Pixel 8"             # the filter every device below starts from
    devices = ["pixel8-a", "pixel8-b"]   # names for farm.devices: one phone each

    [farm.sources.stf.devices.galaxy]    # or a table per name, with its own filter
    model = "SM-S911B"
    min_sdk = 34

For each name a job needs, the farm (etdeploy.farm.sources.lease_devices):
lists the server's devices, claims a free one that matches (POST /user/devices
with the timeout, in ms), asks for remote debugging (POST .../remoteConnect,
which answers an `adb connect`-able host:port), connects the local adb server to
it, and hands the jobs an adb device table with that serial. Afterwards, and on
any error or Ctrl-C, it disconnects, ends remote debugging and releases the
claim (DELETE). Claims are recorded in the farm's OUT before they are made, so a
farm that was killed releases them when it next starts on that OUT; and each
claim carries the timeout after which STF ends it on its own.

The API as read on 2026-12-03 from DeviceFarmer/stf (commit c7b928f, 2026-07-31,
package version 3.7.9): doc/API.md (the user and devices endpoints, Bearer
tokens, remoteConnectUrl), lib/units/api/swagger/api_v1.yaml (Swagger "2.4.1":
AddUserDevicePayload {serial, timeout}, timeout in milliseconds of idle time,
403 for a device in use or not owned, 404 unknown) and
lib/units/api/controllers/user.js (what 200, 403 and 504 answer).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from etdeploy.config import DeviceConfig
from etdeploy.devices.adb import AdbSettings, connect_server
from etdeploy.devices.adb.server import AdbError
from etdeploy.errors import DeviceError, EtdeployError, InfraError, UsageError
from etdeploy.jsonvalue import JsonObject, JsonValue, read_float, read_int, read_str
from etdeploy.settings import expect_type

if TYPE_CHECKING:
    from etdeploy.devices.adb.connection import Server

KIND = "stf"
API = "/api/v1"
DEFAULT_TOKEN_ENV = "STF_TOKEN"
DEFAULT_CLAIM_TIMEOUT_S = 3600.0
# How long `adb connect` and the phone coming online may take.
DEFAULT_CONNECT_TIMEOUT_S = 30.0
# Every REST request; STF itself answers 504 after 5 s when a device is silent.
HTTP_TIMEOUT_S = 30.0
# How often a farm waiting for a free phone (claim_wait_s) asks again.
CLAIM_POLL_S = 5.0
# The device fields the claim reads (GET /devices?fields=...).
DEVICE_FIELDS = "serial,model,marketName,sdk,abi,version,present,ready,using,owner"

_FILTER_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": str, "sdk": int, "min_sdk": int, "abi": str, "serial": str,
}  # fmt: skip
_SOURCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "url": str, "token_env": str, "claim_timeout_s": (int, float), "claim_wait_s": (int, float),
    "connect_timeout_s": (int, float), "adb_host": str, "adb_port": int, "runner": str,
    "devices": (list, dict), **_FILTER_KEYS,
}  # fmt: skip


def _normalize(text: str) -> str:
    # As etdeploy.devices.adb matches friendly names: "Pixel 8" is "pixel8".
    return re.sub(r"[\s_\-]+", "", text.lower())


@dataclass(frozen=True)
class StfFilter:
    """Which STF devices may stand for one farm device name."""

    model: str | None = None  # the device's model or market name, ignoring case and spaces
    sdk: int | None = None
    min_sdk: int | None = None
    abi: str | None = None
    serial: str | None = None

    def matches(self, device: Mapping[str, JsonValue]) -> bool:
        if self.serial is not None and device.get("serial") != self.serial:
            return False
        if self.model is not None:
            names = {_normalize(str(device.get(k) or "")) for k in ("model", "marketName")}
            if _normalize(self.model) not in names:
                return False
        if self.abi is not None and str(device.get("abi") or "").lower() != self.abi.lower():
            return False
        if self.sdk is not None or self.min_sdk is not None:
            try:
                sdk = int(str(device.get("sdk")))  # STF reports it as a string
            except ValueError:
                return False
            if (self.sdk is not None and sdk != self.sdk) or (
                self.min_sdk is not None and sdk < self.min_sdk
            ):
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in vars(self).items() if v is not None]
        return ", ".join(parts) or "any device"


@dataclass(frozen=True)
class StfSource:
    """[farm.sources.stf] of a spec: the server, how to claim, and the device names
    it provides with the filter of each."""

    url: str
    devices: Mapping[str, StfFilter]
    token_env: str = DEFAULT_TOKEN_ENV
    claim_timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S
    claim_wait_s: float = 0.0
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    adb_host: str | None = None
    adb_port: int | None = None
    runner: str | None = None  # absolute: resolved against the spec's folder
    where: str = "farm.sources.stf"
    kind: str = field(default=KIND, init=False)

    @classmethod
    def parse(cls, given: object, label: str, base_dir: Path) -> StfSource:
        """The source of a [farm.sources.stf] table; a bad key or value is a
        UsageError naming it."""
        where = "farm.sources.stf"
        if not isinstance(given, dict):
            raise UsageError(f"{label}: {where}: expected a table", "write [farm.sources.stf]")
        table: JsonObject = given
        for key, value in table.items():
            if key not in _SOURCE_KEYS:
                raise UsageError(f"{label}: unknown key {where}.{key}",
                                 f"keys of [{where}]: {', '.join(_SOURCE_KEYS)}")  # fmt: skip
            expect_type(value, _SOURCE_KEYS[key], f"{where}.{key}", label)
        url = read_str(table, "url", "", where)
        if not url:
            raise UsageError(
                f"{label}: {where}.url is required", 'add url = "https://stf.example.org"'
            )
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(f"{label}: {where}.url: not an http(s) URL: {url!r}",
                             "give the STF server's address, e.g. https://stf.example.org")  # fmt: skip
        for key in ("claim_timeout_s", "connect_timeout_s"):
            if read_float(table, key, 1.0, where) <= 0:
                raise UsageError(f"{label}: {where}.{key}: must be greater than 0, got {table[key]}",
                                 f"fix {where}.{key}")  # fmt: skip
        if read_float(table, "claim_wait_s", 0.0, where) < 0:
            raise UsageError(f"{label}: {where}.claim_wait_s: must not be negative",
                             f"fix {where}.claim_wait_s")  # fmt: skip
        base = _filter({k: v for k, v in table.items() if k in _FILTER_KEYS}, where, label)
        devices = _devices(table.get("devices"), base, where, label)
        runner = read_str(table, "runner", None, where)
        if runner is not None:
            path = Path(runner).expanduser()
            runner = str(path if path.is_absolute() else base_dir / path)
        return cls(
            url=url.rstrip("/"),
            devices=devices,
            token_env=read_str(table, "token_env", DEFAULT_TOKEN_ENV, where),
            claim_timeout_s=read_float(table, "claim_timeout_s", DEFAULT_CLAIM_TIMEOUT_S, where),
            claim_wait_s=read_float(table, "claim_wait_s", 0.0, where),
            connect_timeout_s=read_float(
                table, "connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S, where
            ),
            adb_host=read_str(table, "adb_host", None, where),
            adb_port=read_int(table, "adb_port", None, where),
            runner=runner,
            where=where,
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.devices)

    def token(self, env: Mapping[str, str]) -> str:
        token = env.get(self.token_env, "").strip()
        if not token:
            raise UsageError(
                f"{self.where}.token_env: ${self.token_env} is not set",
                f"export the STF access token (STF: Settings > Keys > Access Tokens) as {self.token_env}",
            )
        return token

    def client(self, env: Mapping[str, str]) -> StfClient:
        return StfClient(self.url, self.token(env), token_env=self.token_env)

    def adb_client(self) -> Server:
        """The adb server that `adb connect`s the phones (the jobs' server too)."""
        settings = AdbSettings(host=self.adb_host or "", port=self.adb_port or 0)
        return connect_server(settings)

    def device_table(self, name: str, remote: str) -> DeviceConfig:
        """The [devices.NAME] table the jobs open the connected phone with."""
        table: JsonObject = {"serial": remote}
        if self.adb_host:
            table["adb_host"] = self.adb_host
        if self.adb_port:
            table["adb_port"] = self.adb_port
        if self.runner:
            table["runner"] = self.runner
        return DeviceConfig(name=name, transport="adb", settings=table)


def _filter(
    table: Mapping[str, JsonValue], where: str, label: str, base: StfFilter | None = None
) -> StfFilter:
    for key, value in table.items():
        if key not in _FILTER_KEYS:
            raise UsageError(f"{label}: unknown key {where}.{key}",
                             f"a device filter takes: {', '.join(_FILTER_KEYS)}")  # fmt: skip
        expect_type(value, _FILTER_KEYS[key], f"{where}.{key}", label)
    values = {**(vars(base) if base else {}), **{k: v for k, v in table.items()}}
    return StfFilter(**values)


def _devices(value: JsonValue, base: StfFilter, where: str, label: str) -> dict[str, StfFilter]:
    from etdeploy.farm.checks import strings

    if value is None or not value:
        raise UsageError(
            f"{label}: {where}.devices: no devices",
            'name the devices it provides, e.g. devices = ["pixel8-a", "pixel8-b"]',
        )
    if isinstance(value, list):
        return dict.fromkeys(strings(value, f"{where}.devices", label), base)
    if not isinstance(value, dict):  # the spec's types were checked: a list or a table
        raise UsageError(f"{label}: {where}.devices: expected a list or a table",
                         'devices = ["pixel8-a"], or [farm.sources.stf.devices.NAME] tables')  # fmt: skip
    devices: dict[str, StfFilter] = {}
    for name, table in value.items():
        if not isinstance(table, dict):
            raise UsageError(f"{label}: {where}.devices.{name}: expected a table of filter keys",
                             f'write [{where}.devices.{name}] with e.g. model = "Pixel 8"')  # fmt: skip
        devices[name] = _filter(table, f"{where}.devices.{name}", label, base)
    return devices


# -- the REST API --------------------------------------------------------------------------


class StfClient:
    """The few endpoints a farm needs, with a Bearer token; each failure an
    EtdeployError that says what the server answered."""

    def __init__(self, url: str, token: str, *, token_env: str = DEFAULT_TOKEN_ENV) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._token_env = token_env

    def request(self, method: str, path: str, body: Mapping[str, JsonValue] | None = None,
                *, ok: Sequence[int] = (200,)) -> tuple[int, JsonObject]:  # fmt: skip
        """(HTTP status, JSON body). Statuses outside `ok` raise, except 403/404
        when listed in `ok` by the caller (a release of what is already gone)."""
        data = json.dumps(dict(body)).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{API}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DeviceError(
                f"the STF server at {self.url} does not answer: {reason}",
                "check the url in [farm.sources.stf] and that this host can reach it",
                command=f"{method} {path}", retryable=True,
            ) from None  # fmt: skip
        doc: JsonObject
        try:
            answer: JsonValue = json.loads(raw or b"{}")
        except ValueError:
            answer = {"description": raw[:200].decode(errors="replace")}
        doc = answer if isinstance(answer, dict) else {"description": str(answer)[:200]}
        if status == 401:
            raise UsageError(
                f"the STF server at {self.url} refused the token in ${self._token_env} "
                f"({doc.get('description', 'unauthorized')})",
                "generate a new access token in STF (Settings > Keys) and export it",
            )
        if status not in ok:
            raise DeviceError(
                f"STF {method} {path} answered {status}: {doc.get('description', '')}".rstrip(": "),
                "see the STF server's log; the device may be busy or gone",
                command=f"{method} {path}", retryable=status >= 500,
            )  # fmt: skip
        return status, doc

    def devices(self) -> list[JsonObject]:
        _status, doc = self.request("GET", f"/devices?fields={DEVICE_FIELDS}")
        devices = doc.get("devices")
        return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []

    def claim(self, serial: str, timeout_s: float) -> bool:
        """Take the device (STF's "Use"); False when someone else has it (403)."""
        status, _doc = self.request(
            "POST", "/user/devices", {"serial": serial, "timeout": int(timeout_s * 1000)},
            ok=(200, 403),
        )  # fmt: skip
        return status == 200

    def remote_connect(self, serial: str) -> str:
        _status, doc = self.request("POST", f"/user/devices/{_quote(serial)}/remoteConnect")
        url = doc.get("remoteConnectUrl")
        if not isinstance(url, str) or ":" not in url:
            raise DeviceError(f"STF gave no adb address for {serial} (remoteConnectUrl: {url!r})",
                              "see the STF provider's log", command="remoteConnect")  # fmt: skip
        return url

    def remote_disconnect(self, serial: str) -> int:
        status, _doc = self.request(
            "DELETE", f"/user/devices/{_quote(serial)}/remoteConnect", ok=(200, 403, 404)
        )
        return status

    def release(self, serial: str) -> int:
        """Stop using the device; 403/404 say it was no longer ours (it expired)."""
        status, _doc = self.request("DELETE", f"/user/devices/{_quote(serial)}", ok=(200, 403, 404))
        return status


def _quote(serial: str) -> str:
    return urllib.parse.quote(serial, safe="")


# -- claiming and releasing ----------------------------------------------------------------


@dataclass(frozen=True)
class StfClaim:
    """One claimed phone: the farm's name for it, STF's serial, the adb address
    (None until remote debugging is on)."""

    name: str
    serial: str
    remote: str | None = None


class ClaimRecord(Protocol):
    """Where claims are written down before they are made (the farm's journal)."""

    def note(self, claim: StfClaim) -> None: ...

    def drop(self, claim: StfClaim) -> None: ...


def claim_device(
    source: StfSource,
    client: StfClient,
    name: str,
    taken: set[str],
    record: ClaimRecord,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> StfClaim:
    """Claim, remote-connect and `adb connect` a phone for `name`, noting each
    step in `record` before it leaves something to release. On failure, what was
    taken is released and an InfraError says why."""
    wanted = source.devices[name]
    deadline = time.monotonic() + source.claim_wait_s
    claim: StfClaim | None = None
    while claim is None:
        devices = client.devices()
        matching = [d for d in devices if wanted.matches(d) and d.get("serial") not in taken]
        for device in (d for d in matching if _addable(d)):
            attempt = StfClaim(name, str(device["serial"]))
            record.note(attempt)  # before the claim: a farm killed now still releases it
            if client.claim(attempt.serial, source.claim_timeout_s):
                claim = attempt
                break
            record.drop(attempt)  # someone else took it first
        if claim is None:
            if time.monotonic() >= deadline:
                raise _none_free(name, wanted, devices, matching, source)
            sleep(min(CLAIM_POLL_S, max(0.0, deadline - time.monotonic())))
    taken.add(claim.serial)
    try:
        claim = StfClaim(name, claim.serial, client.remote_connect(claim.serial))
        record.note(claim)
        connect_adb(source, claim.remote or "", name)
    except BaseException:
        release_device(source, client, claim)
        record.drop(claim)
        raise
    return claim


def _addable(device: Mapping[str, JsonValue]) -> bool:
    # As STF's deviceutil.isAddable: present, ready, and nobody's.
    present, ready = bool(device.get("present")), bool(device.get("ready"))
    return present and ready and not device.get("using") and not device.get("owner")


def _none_free(name: str, wanted: StfFilter, devices: list[JsonObject],
               matching: list[JsonObject], source: StfSource) -> InfraError:  # fmt: skip
    if matching:
        busy = ", ".join(str(d.get("serial")) for d in matching)
        waited = f" after waiting {source.claim_wait_s:g} s" if source.claim_wait_s else ""
        return DeviceError(
            f"every STF device that matches {name} ({wanted.describe()}) is in use{waited}: {busy}",
            "raise claim_wait_s in [farm.sources.stf] to wait for one, or free a device in STF",
            device=name,
        )
    seen = sorted({f"{d.get('model')} (sdk {d.get('sdk')}, {d.get('abi')})" for d in devices})
    return DeviceError(
        f"no STF device matches {name} ({wanted.describe()})",
        f"the server at {source.url} has: {', '.join(seen) or 'no devices'}; "
        "fix the filter in [farm.sources.stf]",
        device=name,
    )


def connect_adb(source: StfSource, remote: str, name: str) -> None:
    """`adb connect REMOTE` on the jobs' adb server, then wait until it is online."""
    command = f"adb connect {remote}"
    client = source.adb_client()
    try:
        answer = client.connect(remote, timeout=source.connect_timeout_s)
    except (AdbError, OSError) as exc:
        raise DeviceError(f"{command} failed: {exc}", "can this host reach the STF provider?",
                          device=name, command=command) from None  # fmt: skip
    if "connected to" not in answer:
        raise DeviceError(f"{command}: {answer.strip()}", "can this host reach the STF provider?",
                          device=name, command=command)  # fmt: skip
    deadline = time.monotonic() + source.connect_timeout_s
    state = "absent"
    while time.monotonic() < deadline:
        try:
            state = next((d.state for d in client.list() if d.serial == remote), "absent")
        except (AdbError, OSError):
            state = "absent"
        if state == "device":
            return
        time.sleep(0.2)
    hint = (
        "add this host's adb key to STF (Settings > Keys > ADB keys)"
        if state == "unauthorized"
        else "see the STF provider's log"
    )
    raise DeviceError(f"{remote} stayed {state} after adb connect", hint, device=name,
                      command=command)  # fmt: skip


def release_device(source: StfSource, client: StfClient | None, claim: StfClaim) -> list[str]:
    """Disconnect adb, end remote debugging, give the phone back. Every step is
    tried; what failed comes back as notes (the claim still ends at its timeout)."""
    notes: list[str] = []
    if claim.remote:
        try:
            source.adb_client().disconnect(claim.remote)
        except (EtdeployError, AdbError, OSError) as exc:
            notes.append(f"adb disconnect {claim.remote}: {exc}")
    if client is None:
        notes.append(f"STF device {claim.serial} ({claim.name}) was not released: no token; "
                     f"STF ends the claim after {source.claim_timeout_s:g} s idle")  # fmt: skip
        return notes
    try:
        if claim.remote:
            client.remote_disconnect(claim.serial)
        status = client.release(claim.serial)
        if status != 200:
            notes.append(f"STF device {claim.serial} ({claim.name}) was no longer ours "
                         f"(HTTP {status}): its claim had ended")  # fmt: skip
    except EtdeployError as exc:
        notes.append(f"could not release STF device {claim.serial} ({claim.name}): {exc}; STF "
                     f"ends the claim after {source.claim_timeout_s:g} s idle")  # fmt: skip
    return notes
