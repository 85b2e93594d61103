// The runner's self-description (--describe): what it can run, so etdeploy can
// compare a program's needs with it before pushing the program.
#pragma once

#include <string>

namespace etdeploy_runner {

// What the build knows about itself; CMakeLists.txt passes these in.
struct BuildFacts {
  std::string runner_version;
  std::string executorch_version;
  std::string bundle_kind;  // host, android-ndk, ... (ETDEPLOY_BUNDLE_KIND)
  std::string bundle_abi;   // x86_64, arm64-v8a, ... (ETDEPLOY_BUNDLE_ABI)
  // The kernel libraries and delegates the build linked, as CMake listed them
  // (comma-separated); informational: the registries below are the authority.
  std::string kernel_libraries;
  std::string backend_libraries;
};

// One JSON document (schema etdeploy.runner_describe/1): the facts above, every
// kernel in ExecuTorch's operator registry (operator name with overload, and
// its kernel key when the kernel is specialised for dtypes and dim orders), and
// every registered backend's name. etdeploy.runner.parse_describe reads it.
std::string describe_json(const BuildFacts& facts);

}  // namespace etdeploy_runner
