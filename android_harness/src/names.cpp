#include "names.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace etdeploy_runner {

std::string describe_error(executorch::runtime::Error error) {
  // to_string() gives "Error::OperatorMissing"; the prefix adds nothing here.
  const char* full = executorch::runtime::to_string(error);
  const char* prefix = "Error::";
  std::string name = std::strncmp(full, prefix, std::strlen(prefix)) == 0
      ? std::string(full + std::strlen(prefix))
      : std::string(full);
  char code[16];
  std::snprintf(code, sizeof(code), "0x%" PRIx32, static_cast<uint32_t>(error));
  return name + " (" + code + ")";
}

std::string dtype_name(executorch::aten::ScalarType type) {
  using executorch::aten::ScalarType;
  switch (type) {
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Short:
      return "int16";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Half:
      return "float16";
    case ScalarType::Float:
      return "float32";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Bool:
      return "bool";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::UInt16:
      return "uint16";
    case ScalarType::UInt32:
      return "uint32";
    case ScalarType::UInt64:
      return "uint64";
    case ScalarType::ComplexFloat:
      return "complex64";
    case ScalarType::ComplexDouble:
      return "complex128";
    default:
      return "scalar_type_" + std::to_string(static_cast<int>(type));
  }
}

std::string tag_name(executorch::runtime::Tag tag) {
  char buffer[executorch::runtime::kTagNameBufferSize + 1] = {0};
  executorch::runtime::tag_to_string(tag, buffer, sizeof(buffer));
  return std::string(buffer);
}

}  // namespace etdeploy_runner
