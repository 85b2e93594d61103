# find_package(executorch) for iOS builds, served from ExecuTorch's prebuilt Apple
# .xcframeworks instead of the Python wheel (whose libraries are host binaries).
#
# It defines the same namespaced targets and variables as the wheel's
# share/cmake/executorch-config.cmake (executorch 1.5.1, read 2026-12-02), so the
# runner's CMake project in android_harness/ configures unchanged when pointed here
# with -Dexecutorch_DIR=<this directory>:
#
#   executorch::runtime            executorch.xcframework (runtime, module, tensor, data loaders)
#   executorch::threadpool         threadpool.xcframework
#   executorch::kernels_optimized  kernels_optimized.xcframework (+ Accelerate)
#   executorch::kernels_quantized  kernels_quantized.xcframework
#   executorch::backend_xnnpack    backend_xnnpack.xcframework
#   executorch::backend_coreml     backend_coreml.xcframework (+ CoreML, Accelerate, sqlite3)
#   EXECUTORCH_FOUND, EXECUTORCH_INCLUDE_DIRS, EXECUTORCH_LIBRARIES,
#   EXECUTORCH_COMPILE_DEFINITIONS, EXECUTORCH_CXX_STANDARD, EXECUTORCH_BUILD_VERSION,
#   EXECUTORCH_RUNTIME_LIBRARY_DIR
#
# Inputs (cache variables):
#   ET_XCFRAMEWORKS_DIR  directory holding the *.xcframework folders
#                        (ios_harness/fetch_frameworks.sh fills one)
#   ET_APPLE_SLICE       xcframework slice, e.g. ios-arm64-simulator or ios-arm64;
#                        default: picked from CMAKE_OSX_SYSROOT and CMAKE_OSX_ARCHITECTURES
#   ET_APPLE_DEBUG       link the *_debug frameworks (they keep ExecuTorch's logs)
#   ET_APPLE_VERSION     the ExecuTorch version the frameworks were built from
#
# Library and slice names follow ExecuTorch's scripts/create_frameworks.sh: each
# slice holds one merged static library lib<framework>_<ios|simulator|macos>.a,
# and executorch.xcframework carries the headers (read 2026-12-02).
#
# Backends and kernels register themselves from static initialisers, which the
# linker drops unless forced: ExecuTorch's docs ask for -all_load or -force_load
# ("Linkage" in using-executorch-ios.md), so every registering library here is
# linked with -force_load.

cmake_minimum_required(VERSION 3.19)

set(ET_XCFRAMEWORKS_DIR "" CACHE PATH "Directory with ExecuTorch's .xcframework folders")
set(ET_APPLE_SLICE "" CACHE STRING "xcframework slice (ios-arm64-simulator, ios-arm64, ...)")
option(ET_APPLE_DEBUG "Link ExecuTorch's *_debug frameworks" OFF)
set(ET_APPLE_VERSION "1.5.1" CACHE STRING "ExecuTorch version of the frameworks")

set(executorch_FOUND FALSE)
set(EXECUTORCH_FOUND FALSE)

if(NOT ET_XCFRAMEWORKS_DIR OR NOT IS_DIRECTORY "${ET_XCFRAMEWORKS_DIR}")
  set(executorch_NOT_FOUND_MESSAGE
      "ET_XCFRAMEWORKS_DIR is not set to a directory of ExecuTorch .xcframework folders; run ios_harness/fetch_frameworks.sh")
  return()
endif()

set(_et_suffix "")
if(ET_APPLE_DEBUG)
  set(_et_suffix "_debug")
endif()

# Pick the slice from the SDK being built for, unless told.
set(_et_slice "${ET_APPLE_SLICE}")
if(NOT _et_slice)
  if(CMAKE_OSX_SYSROOT MATCHES "[Ss]imulator")
    set(_et_slice_glob "ios-*-simulator")
  elseif(CMAKE_SYSTEM_NAME STREQUAL "iOS")
    set(_et_slice_glob "ios-arm64")
  else()
    set(_et_slice_glob "macos-*")
  endif()
  file(GLOB _et_slices RELATIVE "${ET_XCFRAMEWORKS_DIR}/executorch${_et_suffix}.xcframework"
       "${ET_XCFRAMEWORKS_DIR}/executorch${_et_suffix}.xcframework/${_et_slice_glob}")
  set(_et_arch "${CMAKE_OSX_ARCHITECTURES}")
  if(NOT _et_arch)
    set(_et_arch "arm64")
  endif()
  foreach(_candidate IN LISTS _et_slices)
    # A slice name lists its architectures: ios-arm64_x86_64-simulator.
    if(_candidate MATCHES "(^|[-_])${_et_arch}([-_]|$)")
      set(_et_slice "${_candidate}")
      break()
    endif()
  endforeach()
  if(NOT _et_slice)
    set(executorch_NOT_FOUND_MESSAGE
        "no ${_et_slice_glob} slice for ${_et_arch} in ${ET_XCFRAMEWORKS_DIR}/executorch${_et_suffix}.xcframework (have: ${_et_slices}); ExecuTorch's prebuilt simulator slice is arm64 only, build x86_64 from source (see ios_harness/README.md)")
    return()
  endif()
endif()

# Headers ship in the executorch framework's slice.
set(_et_headers "${ET_XCFRAMEWORKS_DIR}/executorch${_et_suffix}.xcframework/${_et_slice}/Headers")
if(NOT IS_DIRECTORY "${_et_headers}")
  set(executorch_NOT_FOUND_MESSAGE "no Headers in ${_et_headers}")
  return()
endif()

function(_et_library out framework)
  file(GLOB _libs "${ET_XCFRAMEWORKS_DIR}/${framework}${_et_suffix}.xcframework/${_et_slice}/lib*.a")
  list(LENGTH _libs _count)
  if(_count EQUAL 1)
    set(${out} "${_libs}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

_et_library(_et_runtime_lib executorch)
if(NOT _et_runtime_lib)
  set(executorch_NOT_FOUND_MESSAGE
      "no static library in ${ET_XCFRAMEWORKS_DIR}/executorch${_et_suffix}.xcframework/${_et_slice}")
  return()
endif()

if(NOT TARGET executorch::runtime)
  add_library(executorch::runtime STATIC IMPORTED)
  set_target_properties(executorch::runtime PROPERTIES
    IMPORTED_LOCATION "${_et_runtime_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${_et_headers}"
    INTERFACE_COMPILE_FEATURES cxx_std_17
    INTERFACE_LINK_LIBRARIES "c++")
endif()
set(EXECUTORCH_LIBRARIES executorch::runtime)

_et_library(_et_threadpool_lib threadpool)
if(_et_threadpool_lib AND NOT TARGET executorch::threadpool)
  add_library(executorch::threadpool STATIC IMPORTED)
  set_target_properties(executorch::threadpool PROPERTIES
    IMPORTED_LOCATION "${_et_threadpool_lib}"
    INTERFACE_LINK_LIBRARIES executorch::runtime)
  list(APPEND EXECUTORCH_LIBRARIES executorch::threadpool)
endif()

# name, framework, system frameworks, system libraries
function(_et_registering_component name framework frameworks libraries)
  _et_library(_lib "${framework}")
  if(NOT _lib OR TARGET executorch::${name})
    return()
  endif()
  set(_links executorch::runtime)
  if(TARGET executorch::threadpool)
    list(APPEND _links executorch::threadpool)
  endif()
  foreach(_fw IN LISTS frameworks)
    list(APPEND _links "-framework ${_fw}")
  endforeach()
  list(APPEND _links ${libraries})
  add_library(executorch::${name} INTERFACE IMPORTED)
  set_target_properties(executorch::${name} PROPERTIES
    INTERFACE_LINK_OPTIONS "LINKER:-force_load,${_lib}"
    INTERFACE_LINK_LIBRARIES "${_links}")
  set(_et_components_found ${_et_components_found} executorch::${name} PARENT_SCOPE)
endfunction()

set(_et_components_found "")
_et_registering_component(kernels_optimized kernels_optimized "Accelerate" "")
_et_registering_component(kernels_quantized kernels_quantized "" "")
_et_registering_component(backend_xnnpack backend_xnnpack "" "")
_et_registering_component(backend_coreml backend_coreml "CoreML;Accelerate" "sqlite3")

# Like the wheel's package, the aggregate leaves the quantized kernels out: a
# consumer names executorch::kernels_quantized explicitly.
foreach(_component IN LISTS _et_components_found)
  if(NOT _component STREQUAL "executorch::kernels_quantized")
    list(APPEND EXECUTORCH_LIBRARIES ${_component})
  endif()
endforeach()

set(EXECUTORCH_INCLUDE_DIRS "${_et_headers}")
# build_apple_frameworks.sh already writes C10_USING_CUSTOM_GENERATED_MACROS into the
# exported c10 headers; defining it again on the command line would only warn.
set(EXECUTORCH_COMPILE_DEFINITIONS "")
set(EXECUTORCH_CXX_STANDARD 17)
set(EXECUTORCH_BUILD_VERSION "${ET_APPLE_VERSION}")
# Static libraries: nothing to find at run time.
set(EXECUTORCH_RUNTIME_LIBRARY_DIR "")
set(executorch_FOUND TRUE)
set(EXECUTORCH_FOUND TRUE)
message(STATUS "ExecuTorch ${ET_APPLE_VERSION} xcframeworks, slice ${_et_slice}: ${EXECUTORCH_LIBRARIES}")
