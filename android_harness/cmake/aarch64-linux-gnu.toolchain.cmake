# Cross-compiling the runner for 64-bit ARM Linux (glibc) on an x86_64 Linux host,
# with Debian's g++-aarch64-linux-gnu (its compilers and the arm64 glibc it
# builds against live under /usr/aarch64-linux-gnu).
#
# etdeploy/runner_build.py passes this with -DCMAKE_TOOLCHAIN_FILE and points
# CMAKE_PREFIX_PATH at the unpacked aarch64 executorch wheel. By hand:
#
#   cmake -S android_harness -B /tmp/rb-arm64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=android_harness/cmake/aarch64-linux-gnu.toolchain.cmake \
#         -DCMAKE_PREFIX_PATH=/path/to/unpacked-aarch64-wheel/executorch
#
# ETDEPLOY_CROSS_PREFIX overrides the tool prefix (another distribution's
# triple, or an absolute path to a toolchain's bin/aarch64-linux-gnu-).

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT ETDEPLOY_CROSS_PREFIX)
  set(ETDEPLOY_CROSS_PREFIX "aarch64-linux-gnu-")
endif()
# Toolchain files run again in try_compile projects; pass the prefix on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ETDEPLOY_CROSS_PREFIX)

set(CMAKE_C_COMPILER "${ETDEPLOY_CROSS_PREFIX}gcc")
set(CMAKE_CXX_COMPILER "${ETDEPLOY_CROSS_PREFIX}g++")

# Programs (cmake, ninja) come from the host; libraries and headers from the
# target's directories. Packages are searched on the prefix path as given: the
# aarch64 wheel is an ordinary directory, not inside a sysroot.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
