// Printable names for ExecuTorch's enums, as the runner reports them.
#pragma once

#include <string>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/tag.h>

namespace etdeploy_runner {

// "OperatorMissing (0x14)": the enumerator of runtime/core/error.h and its code,
// the form etdeploy.runner parses back.
std::string describe_error(executorch::runtime::Error error);

// numpy-style dtype names ("float32", "int8", "bool"); unknown types read
// "scalar_type_<n>" so a report still says which one it was.
std::string dtype_name(executorch::aten::ScalarType type);

// The EValue tag's name ("Tensor", "Int", "None", ...).
std::string tag_name(executorch::runtime::Tag tag);

}  // namespace etdeploy_runner
