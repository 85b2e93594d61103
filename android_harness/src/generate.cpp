#include "generate.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>

#include "flags.h"
#include "json_writer.h"
#include "names.h"

namespace etdeploy_runner {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Result;
using executorch::runtime::Tag;
using executorch::runtime::TensorInfo;
using Clock = std::chrono::steady_clock;

constexpr int kExitRuntimeError = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitOutputFailed = 3;

double elapsed_ms(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

bool failed(GenerationFailure& failure, int exit_code, std::string message) {
  failure.exit_code = exit_code;
  failure.message = std::move(message);
  return false;
}

bool failed_et(GenerationFailure& failure, const std::string& what, Error error) {
  return failed(failure, kExitRuntimeError, what + " failed: " + describe_error(error));
}

// The method's shape as --generate reads it from its signature.
struct Signature {
  int64_t max_chunk = 1;        // tokens per call at most (the ids' bound S)
  bool start_position = false;  // positions input is [1]: the chunk's first position
  bool every_position = true;   // logits for every position fed, not just the last
};

std::string tensor_text(const TensorInfo& info) {
  std::string text = dtype_name(info.scalar_type()) + " [";
  for (size_t i = 0; i < info.sizes().size(); ++i) {
    text += (i ? ", " : "") + std::to_string(info.sizes()[i]);
  }
  return text + "]";
}

bool read_signature(const MethodMeta& meta, Signature& signature, GenerationFailure& failure) {
  const std::string wanted =
      "; --generate needs (token ids int64 [1, S], cache positions int64 [S]) -> float32 logits";
  if (meta.num_inputs() != 2 || meta.num_outputs() < 1) {
    return failed(failure, kExitBadInput,
                  "method " + std::string(meta.name()) + " takes " +
                      std::to_string(meta.num_inputs()) + " input(s) and returns " +
                      std::to_string(meta.num_outputs()) + wanted);
  }
  std::vector<TensorInfo> inputs;
  for (size_t i = 0; i < 2; ++i) {
    Result<Tag> tag = meta.input_tag(i);
    Result<TensorInfo> info = meta.input_tensor_meta(i);
    if (!tag.ok() || *tag != Tag::Tensor || !info.ok()) {
      return failed(failure, kExitBadInput, "input " + std::to_string(i) + " is not a tensor" + wanted);
    }
    inputs.push_back(*info);
  }
  const TensorInfo& ids = inputs[0];
  const TensorInfo& positions = inputs[1];
  if (ids.scalar_type() != ScalarType::Long || ids.sizes().size() != 2 || ids.sizes()[0] != 1 ||
      positions.scalar_type() != ScalarType::Long || positions.sizes().size() != 1) {
    return failed(failure, kExitBadInput,
                  "method " + std::string(meta.name()) + " takes (" + tensor_text(ids) + ", " +
                      tensor_text(positions) + ")" + wanted);
  }
  signature.max_chunk = std::max<int64_t>(1, ids.sizes()[1]);
  // ExecuTorch's own LLM export takes the chunk's start position, [1], whatever S is.
  signature.start_position = positions.sizes()[0] == 1 && signature.max_chunk > 1;
  Result<TensorInfo> logits = meta.output_tensor_meta(0);
  if (!logits.ok() || logits->scalar_type() != ScalarType::Float || logits->sizes().empty()) {
    return failed(failure, kExitBadInput,
                  "output 0 of method " + std::string(meta.name()) + " is not float32 logits" + wanted);
  }
  const auto sizes = logits->sizes();
  signature.every_position =
      signature.max_chunk == 1 || (sizes.size() == 3 && sizes[1] == signature.max_chunk);
  return true;
}

// A constant method's Int (get_max_seq_len, written by ExecuTorch's LLM export);
// -1 when the program has no such method.
int64_t constant_int(Program& program, const char* name) {
  // Looked up by listing first: method_meta() logs an error for a name it lacks.
  bool present = false;
  for (size_t i = 0; i < program.num_methods() && !present; ++i) {
    Result<const char*> method_name = program.get_method_name(i);
    present = method_name.ok() && std::string(*method_name) == name;
  }
  if (!present) {
    return -1;
  }
  Result<MethodMeta> meta = program.method_meta(name);
  if (!meta.ok() || meta->num_inputs() != 0 || meta->num_outputs() != 1) {
    return -1;
  }
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  std::vector<executorch::runtime::Span<uint8_t>> spans;
  for (size_t id = 0; id < meta->num_memory_planned_buffers(); ++id) {
    const size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(id).get());
    storage.push_back(std::make_unique<uint8_t[]>(size));
    spans.emplace_back(storage.back().get(), size);
  }
  executorch::runtime::HierarchicalAllocator planned({spans.data(), spans.size()});
  executorch::extension::MallocMemoryAllocator allocator;
  executorch::runtime::MemoryManager memory(&allocator, &planned);
  Result<Method> method = program.load_method(name, &memory);
  if (!method.ok() || method->execute() != Error::Ok) {
    return -1;
  }
  const EValue& value = method->get_output(0);
  return value.isInt() ? value.toInt() : -1;
}

// Feeds tokens through the method and reads the logits they produce.
class Stepper {
 public:
  Stepper(Method& method, const Signature& signature)
      : method_(method), signature_(signature) {}

  // Feeds ids[0..count) at positions start..start+count-1. `rows` is then how
  // many logits rows `logits` points at: count, or 1 (the last position's).
  bool step(const int64_t* ids, int64_t count, int64_t start, const float*& logits,
            int64_t& rows, GenerationFailure& failure) {
    ids_.assign(ids, ids + count);
    positions_.resize(signature_.start_position ? 1 : static_cast<size_t>(count));
    for (size_t i = 0; i < positions_.size(); ++i) {
      positions_[i] = start + static_cast<int64_t>(i);
    }
    auto id_tensor = executorch::extension::make_tensor_ptr(
        {1, static_cast<executorch::aten::SizesType>(count)}, ids_.data(), ScalarType::Long);
    auto position_tensor = executorch::extension::make_tensor_ptr(
        {static_cast<executorch::aten::SizesType>(positions_.size())}, positions_.data(),
        ScalarType::Long);
    const std::string where = " at position " + std::to_string(start);
    if (const Error status = method_.set_input(EValue(*id_tensor), 0); status != Error::Ok) {
      return failed_et(failure, "setting " + std::to_string(count) + " token id(s)" + where, status);
    }
    if (const Error status = method_.set_input(EValue(*position_tensor), 1); status != Error::Ok) {
      return failed_et(failure, "setting the cache positions" + where, status);
    }
    if (const Error status = method_.execute(); status != Error::Ok) {
      return failed_et(failure, "execution" + where, status);
    }
    const EValue& output = method_.get_output(0);
    if (!output.isTensor() || output.toTensor().scalar_type() != ScalarType::Float) {
      return failed(failure, kExitRuntimeError, "output 0" + where + " is not float32 logits");
    }
    const Tensor tensor = output.toTensor();
    vocab_ = tensor.size(tensor.dim() - 1);
    rows = vocab_ > 0 ? static_cast<int64_t>(tensor.numel()) / vocab_ : 0;
    if (vocab_ < 1 || (rows != count && rows != 1)) {
      return failed(failure, kExitRuntimeError,
                    "the logits" + where + " hold " + std::to_string(rows) + " row(s) of " +
                        std::to_string(vocab_) + " for " + std::to_string(count) + " token(s)");
    }
    logits = tensor.const_data_ptr<float>();
    return true;
  }

  int64_t vocab() const { return vocab_; }

 private:
  Method& method_;
  const Signature& signature_;
  std::vector<int64_t> ids_;
  std::vector<int64_t> positions_;
  int64_t vocab_ = 0;
};

// The first index of the largest value, as torch.argmax and numpy.argmax pick.
int64_t argmax(const float* row, int64_t size) {
  return static_cast<int64_t>(std::max_element(row, row + size) - row);
}

bool read_token_ids(const std::string& path, std::vector<int64_t>& ids, GenerationFailure& failure) {
  std::ifstream stream(path, std::ios::binary | std::ios::ate);
  if (!stream) {
    return failed(failure, kExitBadInput, "--token_ids: cannot open " + path);
  }
  const std::streamoff size = stream.tellg();
  if (size <= 0 || size % 8 != 0) {
    return failed(failure, kExitBadInput,
                  "--token_ids " + path + " has " + std::to_string(size) +
                      " bytes; expected a positive multiple of 8 (raw int64 ids)");
  }
  ids.resize(static_cast<size_t>(size / 8));
  stream.seekg(0);
  if (!stream.read(reinterpret_cast<char*>(ids.data()), size)) {
    return failed(failure, kExitBadInput, "--token_ids: cannot read " + path);
  }
  return true;
}

struct Timings {
  double prefill_ms = 0.0;
  std::vector<double> decode_ms;
  double teacher_forced_ms = -1.0;  // < 0: not run
  int64_t tokens_per_call = 1;
  // Leading positions whose teacher-forced logits the generation pass computed.
  int64_t teacher_forced_reused = 0;
};

// Appends the logits rows of one call to `table` while every position so far has
// its row; a call that returned the last position's only ends the capture.
void capture(std::vector<float>* table, bool& complete, const float* logits, int64_t rows,
             int64_t count, int64_t vocab) {
  if (table == nullptr || !complete) {
    return;
  }
  if (rows != count) {
    complete = false;
    table->clear();
    return;
  }
  table->insert(table->end(), logits, logits + rows * vocab);
}

// --eos_ids "A,B": the ids, each 0 or more; empty text gives none.
bool parse_eos_ids(const std::string& text, std::vector<int64_t>& eos, GenerationFailure& failure) {
  for (const std::string& field : split_commas(text)) {
    char* end = nullptr;
    const long long value = std::strtoll(field.c_str(), &end, 10);
    if (field.empty() || end == nullptr || *end != '\0' || value < 0) {
      return failed(failure, kExitBadInput,
                    "--eos_ids: '" + field + "' is not a token id (comma-separated ids, 0 or more)");
    }
    eos.push_back(static_cast<int64_t>(value));
  }
  return true;
}

// (a) Prefill of the prompt, then greedy decoding one token a call, until
// `new_tokens` ids or one of `eos` (written, then the stop: as a model's generate
// stops). With `table`, every position's logits are kept as they come (the
// teacher-forced pass reuses those whose ids are the ones it feeds); `captured`
// is then how many.
bool generate(Stepper& stepper, const Signature& signature, const std::vector<int64_t>& ids,
              int64_t prompt_len, int64_t new_tokens, const std::vector<int64_t>& eos,
              std::vector<int64_t>& generated, std::vector<float>* table, int64_t& captured,
              Timings& timings, GenerationFailure& failure) {
  const auto ended = [&eos](int64_t token) {
    return std::find(eos.begin(), eos.end(), token) != eos.end();
  };
  const float* logits = nullptr;
  int64_t rows = 0;
  bool complete = true;
  const Clock::time_point start = Clock::now();
  for (int64_t at = 0; at < prompt_len; at += signature.max_chunk) {
    const int64_t count = std::min(signature.max_chunk, prompt_len - at);
    timings.tokens_per_call = std::max(timings.tokens_per_call, count);
    if (!stepper.step(ids.data() + at, count, at, logits, rows, failure)) {
      return false;
    }
    capture(table, complete, logits, rows, count, stepper.vocab());
  }
  generated.push_back(argmax(logits + (rows - 1) * stepper.vocab(), stepper.vocab()));
  timings.prefill_ms = elapsed_ms(start, Clock::now());
  for (int64_t k = 1; k < new_tokens && !ended(generated.back()); ++k) {
    const Clock::time_point token_start = Clock::now();
    if (!stepper.step(&generated.back(), 1, prompt_len + k - 1, logits, rows, failure)) {
      return false;
    }
    generated.push_back(argmax(logits, stepper.vocab()));
    timings.decode_ms.push_back(elapsed_ms(token_start, Clock::now()));
    capture(table, complete, logits, rows, 1, stepper.vocab());
  }
  captured = complete ? prompt_len + static_cast<int64_t>(generated.size()) - 1 : 0;
  return true;
}

// How many leading positions of the ids the generation pass fed exactly: the
// prompt, then as long as the ids go on as the generated tokens did. Their logits
// are the teacher-forced ones (the same ids at the same positions through the same
// cache), and the cache already holds them.
int64_t reusable_positions(const std::vector<int64_t>& ids, int64_t prompt_len,
                           const std::vector<int64_t>& generated, int64_t captured) {
  if (captured == 0) {
    return 0;
  }
  const int64_t total = static_cast<int64_t>(ids.size());
  int64_t same = prompt_len;
  while (same < captured && same < total &&
         ids[static_cast<size_t>(same)] == generated[static_cast<size_t>(same - prompt_len)]) {
    ++same;
  }
  return std::min(same, total);
}

// (b) The ids from position `from` on (the rows before it are in `table`), every
// position's logits appended.
bool teacher_force(Stepper& stepper, const Signature& signature, const std::vector<int64_t>& ids,
                   int64_t from, std::vector<float>& table, Timings& timings,
                   GenerationFailure& failure) {
  const int64_t total = static_cast<int64_t>(ids.size());
  // Logits of the last position only: one token a call, so every position has its row.
  const int64_t chunk = signature.every_position ? signature.max_chunk : 1;
  table.resize(static_cast<size_t>(from * stepper.vocab()));
  table.reserve(static_cast<size_t>(total * stepper.vocab()));
  const Clock::time_point start = Clock::now();
  for (int64_t at = from; at < total; at += chunk) {
    const int64_t count = std::min(chunk, total - at);
    const float* logits = nullptr;
    int64_t rows = 0;
    if (!stepper.step(ids.data() + at, count, at, logits, rows, failure)) {
      return false;
    }
    if (rows != count) {
      return failed(failure, kExitRuntimeError,
                    "the method returned logits for 1 of " + std::to_string(count) +
                        " positions although its signature says every position");
    }
    table.insert(table.end(), logits, logits + rows * stepper.vocab());
  }
  timings.teacher_forced_ms = elapsed_ms(start, Clock::now());
  timings.teacher_forced_reused = from;
  return true;
}

double per_second(double count, double ms) { return ms > 0.0 ? count / (ms / 1000.0) : 0.0; }

std::string result_document(const GenerationCall& call, int64_t token_count, int64_t vocab,
                            int64_t max_seq_len, const std::vector<int64_t>& generated,
                            bool stopped_at_eos, const Timings& timings) {
  JsonWriter json;
  json.begin_object();
  json.key("schema");
  json.value("etdeploy.runner_generation/1");
  json.key("runner_version");
  json.value(call.runner_version);
  json.key("executorch_version");
  json.value(call.executorch_version);
  json.key("model_path");
  json.value(call.model_path);
  json.key("data_path");
  call.data_path.empty() ? json.null() : json.value(call.data_path);
  json.key("method");
  json.value(call.method_name);
  json.key("cpu_threads");
  json.value(call.pool_threads);
  json.key("load_ms");
  json.value(call.load_ms);
  json.key("vocab_size");
  json.value(vocab);
  json.key("max_seq_len");
  max_seq_len < 0 ? json.null() : json.value(max_seq_len);
  json.key("tokens_per_call");
  json.value(timings.tokens_per_call);
  json.key("token_count");
  json.value(token_count);
  json.key("prompt_len");
  json.value(call.prompt_len);
  json.key("max_new_tokens");
  json.value(call.max_new_tokens);
  json.key("generated_count");
  json.value(static_cast<int64_t>(generated.size()));
  json.key("stopped_at_eos");
  json.value(stopped_at_eos);
  json.key("prefill_ms");
  json.value(timings.prefill_ms);
  json.key("prefill_tokens_per_s");
  json.value(per_second(static_cast<double>(call.prompt_len), timings.prefill_ms));
  json.key("decode_ms");
  json.begin_array();
  double decode_total = 0.0;
  for (const double ms : timings.decode_ms) {
    json.value(ms);
    decode_total += ms;
  }
  json.end_array();
  json.key("decode_tokens_per_s");
  timings.decode_ms.empty()
      ? json.null()
      : json.value(per_second(static_cast<double>(timings.decode_ms.size()), decode_total));
  json.key("teacher_forced_ms");
  timings.teacher_forced_ms < 0 ? json.null() : json.value(timings.teacher_forced_ms);
  json.key("teacher_forced_reused");
  timings.teacher_forced_ms < 0 ? json.null() : json.value(timings.teacher_forced_reused);
  json.key("peak_rss_bytes");
  json.value(call.peak_rss_bytes ? call.peak_rss_bytes() : static_cast<uint64_t>(0));
  json.key("generated_file");
  json.value(call.generated_file);
  json.key("logits_file");
  call.logits_file.empty() ? json.null() : json.value(call.logits_file);
  json.end_object();
  return json.text() + "\n";
}

// GEN and OUT, then the document last: a reader that finds the document finds
// both whole. A later failure removes what was already put in place.
bool write_outputs(const GenerationCall& call, const std::vector<int64_t>& generated,
                   const std::vector<float>& table, const std::string& document,
                   GenerationFailure& failure) {
  std::vector<std::string> placed;
  const auto write = [&](const std::string& path, const void* data, size_t size) {
    std::string error;
    if (write_file_atomically(path, data, size, error)) {
      placed.push_back(path);
      return true;
    }
    for (const std::string& done : placed) {
      std::remove(done.c_str());
    }
    return failed(failure, kExitOutputFailed, "writing " + path + ": " + error);
  };
  return write(call.generated_file, generated.data(), generated.size() * sizeof(int64_t)) &&
         (call.logits_file.empty() ||
          write(call.logits_file, table.data(), table.size() * sizeof(float))) &&
         write(call.result_json, document.data(), document.size());
}

}  // namespace

bool run_generation(Program& program, Method& method, const MethodMeta& meta,
                    const GenerationCall& call, GenerationFailure& failure) {
  Signature signature;
  if (!read_signature(meta, signature, failure)) {
    return false;
  }
  std::vector<int64_t> ids;
  std::vector<int64_t> eos;
  if (!parse_eos_ids(call.eos_ids, eos, failure) ||
      !read_token_ids(call.token_ids_file, ids, failure)) {
    return false;
  }
  const int64_t total = static_cast<int64_t>(ids.size());
  if (call.prompt_len > total) {
    return failed(failure, kExitBadInput,
                  "--prompt_len " + std::to_string(call.prompt_len) + " is more than the " +
                      std::to_string(total) + " ids in " + call.token_ids_file);
  }
  const int64_t max_seq_len = constant_int(program, "get_max_seq_len");
  const int64_t needed = std::max(call.prompt_len + call.max_new_tokens - 1,
                                  call.logits_file.empty() ? int64_t{0} : total);
  if (max_seq_len > 0 && needed > max_seq_len) {
    return failed(failure, kExitBadInput,
                  "the call needs " + std::to_string(needed) + " cache positions but the "
                  "program's get_max_seq_len is " + std::to_string(max_seq_len));
  }

  Stepper stepper(method, signature);
  Timings timings;
  std::vector<int64_t> generated;
  std::vector<float> table;
  const bool teacher_forced = !call.logits_file.empty();
  int64_t captured = 0;
  if (!generate(stepper, signature, ids, call.prompt_len, call.max_new_tokens, eos, generated,
                teacher_forced ? &table : nullptr, captured, timings, failure)) {
    return false;
  }
  std::printf("Prefilled %" PRId64 " token(s) in %f ms; generated %zu token(s)\n",
              call.prompt_len, timings.prefill_ms, generated.size());
  if (teacher_forced) {
    const int64_t from = reusable_positions(ids, call.prompt_len, generated, captured);
    if (!teacher_force(stepper, signature, ids, from, table, timings, failure)) {
      return false;
    }
    std::printf("Teacher-forced %" PRId64 " token(s) in %f ms (%" PRId64
                " reused from generation)\n",
                total, timings.teacher_forced_ms, from);
  }
  const bool stopped_at_eos =
      std::find(eos.begin(), eos.end(), generated.back()) != eos.end();
  const std::string document = result_document(call, total, stepper.vocab(), max_seq_len,
                                               generated, stopped_at_eos, timings);
  return write_outputs(call, generated, table, document, failure);
}

}  // namespace etdeploy_runner
