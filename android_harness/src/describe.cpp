#include "describe.h"

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include "json_writer.h"

namespace etdeploy_runner {
namespace {

void string_list(JsonWriter& json, const std::string& comma_list) {
  json.begin_array();
  size_t start = 0;
  while (start < comma_list.size()) {
    size_t end = comma_list.find(',', start);
    if (end == std::string::npos) {
      end = comma_list.size();
    }
    if (end > start) {
      json.value(comma_list.substr(start, end - start));
    }
    start = end + 1;
  }
  json.end_array();
}

}  // namespace

std::string describe_json(const BuildFacts& facts) {
  JsonWriter json;
  json.begin_object();
  json.key("schema");
  json.value("etdeploy.runner_describe/1");
  json.key("runner_version");
  json.value(facts.runner_version);
  json.key("executorch_version");
  json.value(facts.executorch_version);
  json.key("bundle");
  json.begin_object();
  json.key("kind");
  json.value(facts.bundle_kind);
  json.key("abi");
  json.value(facts.bundle_abi);
  json.key("kernel_libraries");
  string_list(json, facts.kernel_libraries);
  json.key("backend_libraries");
  string_list(json, facts.backend_libraries);
  json.end_object();
  // What the runner can do besides running one method on input files; etdeploy's
  // preflight refuses a generation job to a runner without "generate".
  json.key("capabilities");
  json.begin_array();
  json.value("generate");
  json.end_array();

  // Static initializers of the linked kernel libraries filled this registry
  // before main(); it is exactly what Method::load resolves operators against.
  json.key("kernels");
  json.begin_array();
  const executorch::runtime::Span<const executorch::runtime::Kernel> kernels =
      executorch::runtime::get_registered_kernels();
  for (const executorch::runtime::Kernel& kernel : kernels) {
    json.begin_object();
    json.key("op");
    json.value(kernel.name_ != nullptr ? kernel.name_ : "");
    // A fallback kernel serves every dtype; a specialised one only the key's
    // "v1/<dtype>;<dim order>|..." (runtime/kernel/operator_registry.h).
    json.key("key");
    if (kernel.kernel_key_.is_fallback()) {
      json.null();
    } else {
      json.value(kernel.kernel_key_.data());
    }
    json.end_object();
  }
  json.end_array();

  // The delegates a program's BackendDelegate ids are looked up against
  // (runtime/backend/interface.h: get_backend_class by name).
  json.key("backends");
  json.begin_array();
  const size_t backends = executorch::runtime::get_num_registered_backends();
  for (size_t i = 0; i < backends; ++i) {
    executorch::runtime::Result<const char*> name = executorch::runtime::get_backend_name(i);
    if (name.ok() && *name != nullptr) {
      json.value(*name);
    }
  }
  json.end_array();
  json.end_object();
  return json.text() + "\n";
}

}  // namespace etdeploy_runner
