"""ARM code executed on this x86_64 machine, for the stand-ins of arm64 devices.

An arm64 phone or board runs an aarch64 ELF directly. This kernel cannot, and
binfmt_misc (which would hand such a file to qemu-user on every exec) is not
available in this container, so the stand-ins invoke qemu explicitly, at the
point where the kernel would: `Arm64Emulation` builds a small LD_PRELOAD library
whose execve() hands any aarch64 ELF executable to

    qemu-aarch64 -cpu max,sme=off -L <empty directory> -U LD_PRELOAD -0 ARGV0 PATH ARGS...

and the stand-ins' shells (tests/support/loopback_adb.py's arm64 phone,
tests/support/sshd.py's aarch64 host) run with it. The ARM program runs under
emulation, instruction by instruction; everything else (the shell, sha256sum, mv,
the stand-ins' own tools) stays this machine's, as toybox or coreutils would be
on the device. The sysroot qemu gets is an empty directory, so a program must
bring its own loader and libraries, as it must on a device. `uname -m` answers
aarch64 through a wrapper first on the stand-in's PATH.

The emulated CPU (CPU_MODEL) is an Armv9 core with NEON, dot product, I8MM, BF16
and SVE2, as a Pixel 8's Tensor G3 cores are, so XNNPACK and the optimized kernels
take their ARM paths. SME is off: under Debian 12's qemu 7.2, `-cpu max` (SME on)
made the int8 digits program compute garbage (SQNR -5 dB against eager), while
the same bundle and inputs were bit-exact with this machine's runner under
`max,sme=off`, under every named CPU model of qemu 7.2, and under qemu 10.0.2
(bookworm-backports) with `max` and SME on; so it is qemu 7.2's SME emulation,
not ExecuTorch (tried 2026-12-03).

Debian's qemu-user and g++-aarch64-linux-gnu come from `make setup`; without them
`require_arm64()` skips the test and says what to install. Emulated timings are
not a device's and no test reads them as one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

QEMU_PACKAGE = "qemu-user"
CPU_MODEL = "max,sme=off"
CROSS_PACKAGE = "g++-aarch64-linux-gnu"

_SHIM_SOURCE = r"""
/* execve() for the arm64 stand-ins (tests/support/arm64.py): an aarch64 ELF
   executable is started under qemu-aarch64 with an empty sysroot, as binfmt_misc
   would; anything else is executed as it is. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

static int is_aarch64_elf(const char *path) {
  unsigned char header[20];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t got = read(fd, header, sizeof header);
  close(fd);
  /* ELF magic, little-endian, e_machine 183 (EM_AARCH64). */
  return got == (ssize_t)sizeof header && memcmp(header, "\177ELF", 4) == 0 &&
         header[5] == 1 && header[18] == 183 && header[19] == 0;
}

int execve(const char *path, char *const argv[], char *const envp[]) {
  execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
  const char *qemu = getenv("ARM64_STANDIN_QEMU");
  const char *sysroot = getenv("ARM64_STANDIN_SYSROOT");
  const char *cpu = getenv("ARM64_STANDIN_CPU");
  if (!qemu || !sysroot || access(path, X_OK) != 0 || !is_aarch64_elf(path))
    return real(path, argv, envp);
  size_t argc = 0;
  while (argv && argv[argc]) argc++;
  char **args = calloc(argc + 12, sizeof *args);
  if (!args) { errno = ENOMEM; return -1; }
  size_t n = 0;
  args[n++] = (char *)qemu;
  if (cpu && *cpu) {
    args[n++] = "-cpu";
    args[n++] = (char *)cpu;
  }
  args[n++] = "-L";
  args[n++] = (char *)sysroot;
  args[n++] = "-U";
  args[n++] = "LD_PRELOAD";
  args[n++] = "-0";
  args[n++] = argc ? argv[0] : (char *)path;
  args[n++] = (char *)path;
  for (size_t i = 1; i < argc; i++) args[n++] = argv[i];
  args[n] = NULL;
  int rc = real(qemu, args, envp);
  int saved = errno;
  free(args);
  errno = saved;
  return rc;
}
"""

_UNAME = """#!/bin/sh
# uname of an aarch64 stand-in (tests/support/arm64.py): this machine's, with its
# architecture reported as an arm64 board's.
{uname} "$@" | sed 's/x86_64/aarch64/g'
"""


def arm64_missing_reason() -> str | None:
    """Why ARM code cannot run here, or None when it can."""
    from etdeploy.runner_build.arm64 import cross_tool

    if shutil.which("qemu-aarch64") is None:
        return (
            f"qemu-aarch64 is missing: install Debian's {QEMU_PACKAGE} (make setup does this "
            "as root) to execute the arm64 runner in the tests"
        )
    if cross_tool("g++") is None:
        return (
            f"aarch64-linux-gnu-g++ is missing: install Debian's {CROSS_PACKAGE} (make setup "
            "does this as root) to build the arm64 runner"
        )
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build the qemu exec shim: install build-essential"
    return None


def require_arm64() -> None:
    reason = arm64_missing_reason()
    if reason:
        pytest.skip(reason)


@dataclass(frozen=True)
class Arm64Emulation:
    """What a stand-in's shell needs to run aarch64 programs: `env()` and `bin_dir`."""

    shim: Path
    sysroot: Path
    qemu: Path
    # Holds `uname`; goes first on the stand-in's PATH.
    bin_dir: Path

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(self.shim),
            "ARM64_STANDIN_QEMU": str(self.qemu),
            "ARM64_STANDIN_SYSROOT": str(self.sysroot),
            "ARM64_STANDIN_CPU": CPU_MODEL,
        }

    def path(self, rest: str = "/usr/local/bin:/usr/bin:/bin") -> str:
        return f"{self.bin_dir}:{rest}"

    def run(
        self, argv: Sequence[str | Path], *, cwd: Path | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run argv here as the stand-ins would (an aarch64 program under qemu)."""
        env = {**os.environ, **self.env(), "PATH": self.path(os.environ.get("PATH", "/usr/bin"))}
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def arm64_emulation(root: Path) -> Arm64Emulation:
    """Build the exec shim and the empty sysroot under root (skips when qemu or
    the cross compiler is missing)."""
    require_arm64()
    root.mkdir(parents=True, exist_ok=True)
    source = root / "arm64_exec_shim.c"
    source.write_text(_SHIM_SOURCE)
    shim = root / "arm64_exec_shim.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(source), "-ldl"],
        check=True,
        capture_output=True,
    )
    sysroot = root / "empty-sysroot"
    sysroot.mkdir(exist_ok=True)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    uname = bin_dir / "uname"
    uname.write_text(_UNAME.format(uname=shutil.which("uname") or "/bin/uname"))
    uname.chmod(0o755)
    qemu = shutil.which("qemu-aarch64")
    assert qemu is not None
    return Arm64Emulation(shim=shim, sysroot=sysroot, qemu=Path(qemu), bin_dir=bin_dir)
