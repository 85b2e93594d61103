// etdeploy_runner: runs one method of an ExecuTorch program on real inputs and
// times it.
//
// The command line and the timing lines are those of upstream's
// examples/portable/executor_runner, so etdeploy can drive either binary:
//   Model loaded in X ms.
//   Iteration i of N: X ms
//   Model executed successfully N time(s) in X ms.
// With --data_path it loads the program's external data (.ptd) as upstream
// does. It adds --warmup (untimed runs first), --result_json (the same facts as a
// document, plus each output's dtype and shape), --next_sample (more samples
// through the program loaded once: a large program's load, XNNPACK's weight
// packing included, is paid once per call, not once per sample) and --describe
// (the kernels, backends and versions it was built with, as JSON). Unlike
// upstream it never aborts: every failure is one line
// "error: <what> failed: <Error> (0x..)" on stderr and a non-zero exit status
// (see usage_text() in src/flags.cpp). --generate runs a causal language model
// token by token instead (src/generate.h).
//
// Built on the runtime API (Program, Method, MemoryManager) rather than
// extension::Module so that each stage reports its own error: a program that
// does not parse, a method that does not load (a missing operator or backend),
// an execution that fails.

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/flat_tensor/flat_tensor_data_map.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/method_meta.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include "src/batch.h"
#include "src/describe.h"
#include "src/flags.h"
#include "src/generate.h"
#include "src/json_writer.h"
#include "src/memory_probe.h"
#include "src/names.h"
#include "src/threadpool_api.h"

#ifndef ETDEPLOY_RUNNER_VERSION
#define ETDEPLOY_RUNNER_VERSION "unknown"
#endif
#ifndef ETDEPLOY_EXECUTORCH_VERSION
#define ETDEPLOY_EXECUTORCH_VERSION "unknown"
#endif
#ifndef ETDEPLOY_BUNDLE_KIND
#define ETDEPLOY_BUNDLE_KIND "unknown"
#endif
#ifndef ETDEPLOY_BUNDLE_ABI
#define ETDEPLOY_BUNDLE_ABI "unknown"
#endif
#ifndef ETDEPLOY_KERNEL_LIBRARIES
#define ETDEPLOY_KERNEL_LIBRARIES ""
#endif
#ifndef ETDEPLOY_BACKEND_LIBRARIES
#define ETDEPLOY_BACKEND_LIBRARIES ""
#endif

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::extension::FlatTensorDataMap;
using executorch::extension::MmapDataLoader;
using executorch::extension::TensorPtr;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Result;
using executorch::runtime::Span;
using executorch::runtime::Tag;
using executorch::runtime::TensorInfo;
using etdeploy_runner::describe_error;
using etdeploy_runner::dtype_name;
using etdeploy_runner::Flags;
using etdeploy_runner::JsonWriter;
using etdeploy_runner::MemoryProbe;

constexpr int kExitRuntimeError = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitOutputFailed = 3;

// Inputs are copied in at this alignment: enough for any SIMD load a kernel or
// XNNPACK may issue on a non-memory-planned input.
constexpr size_t kInputAlignment = 64;

using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// The CPU time of every thread of this process so far, in ms (POSIX
// CLOCK_PROCESS_CPUTIME_ID: Linux, bionic and Darwin have it; clock_gettime(3),
// read 2026-12-05). An iteration's CPU time does not grow while another process
// holds the core, where its wall time does: what tells a busy host from a slower
// program (etdeploy.results.baseline). It includes the thread pool's workers,
// their spinning while they wait for work included. -1 where the clock fails.
double process_cpu_ms() {
  timespec now{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now) != 0) {
    return -1.0;
  }
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// One line on stderr that etdeploy.runner.runner_failure() parses.
int fail(int exit_code, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  return exit_code;
}

int fail_et(const std::string& what, Error error) {
  return fail(kExitRuntimeError, what + " failed: " + describe_error(error));
}

std::string shape_text(Span<const int32_t> sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return text + "]";
}

struct AlignedFree {
  void operator()(uint8_t* data) const { std::free(data); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuffer allocate_aligned(size_t size) {
  // aligned_alloc wants a multiple of the alignment; a zero-byte tensor still
  // gets a valid pointer.
  const size_t rounded = ((size + kInputAlignment - 1) / kInputAlignment) * kInputAlignment;
  return AlignedBuffer(static_cast<uint8_t*>(
      std::aligned_alloc(kInputAlignment, rounded == 0 ? kInputAlignment : rounded)));
}

// Fills a tensor's bytes with ones of its dtype, upstream's default input.
bool fill_ones(uint8_t* data, size_t nbytes, ScalarType type) {
  switch (type) {
#define ETDEPLOY_FILL_ONES(ctype, name)                       \
  case ScalarType::name: {                                    \
    ctype* typed = reinterpret_cast<ctype*>(data);            \
    for (size_t i = 0; i < nbytes / sizeof(ctype); ++i) {     \
      typed[i] = static_cast<ctype>(1);                       \
    }                                                         \
    return true;                                              \
  }
    ETDEPLOY_FILL_ONES(uint8_t, Byte)
    ETDEPLOY_FILL_ONES(int8_t, Char)
    ETDEPLOY_FILL_ONES(int16_t, Short)
    ETDEPLOY_FILL_ONES(int32_t, Int)
    ETDEPLOY_FILL_ONES(int64_t, Long)
    ETDEPLOY_FILL_ONES(float, Float)
    ETDEPLOY_FILL_ONES(double, Double)
    ETDEPLOY_FILL_ONES(bool, Bool)
#undef ETDEPLOY_FILL_ONES
    case ScalarType::Half:
      // IEEE half 1.0 is 0x3c00.
      for (size_t i = 0; i < nbytes / 2; ++i) {
        reinterpret_cast<uint16_t*>(data)[i] = 0x3c00;
      }
      return true;
    case ScalarType::BFloat16:
      // bfloat16 1.0 is the top half of float 1.0, 0x3f80.
      for (size_t i = 0; i < nbytes / 2; ++i) {
        reinterpret_cast<uint16_t*>(data)[i] = 0x3f80;
      }
      return true;
    default:
      return false;
  }
}

// Strides for `sizes` laid out in `dim_order` (outermost first), the layout the
// input file's bytes are in.
std::vector<executorch::aten::StridesType> strides_for(
    const std::vector<executorch::aten::SizesType>& sizes,
    const std::vector<executorch::aten::DimOrderType>& dim_order) {
  std::vector<executorch::aten::StridesType> strides(sizes.size(), 1);
  executorch::aten::StridesType stride = 1;
  for (size_t i = dim_order.size(); i-- > 0;) {
    strides[dim_order[i]] = stride;
    stride *= sizes[dim_order[i]];
  }
  return strides;
}

struct PreparedInput {
  size_t index = 0;
  std::string file;  // empty: filled with ones
  std::string dtype;
  std::vector<int32_t> shape;
  size_t nbytes = 0;
  AlignedBuffer data;
  TensorPtr tensor;
};

// Reads the input files against the method's signature. Returns the exit
// status on failure, 0 on success.
// "3x5" -> {3, 5}; false when a dim is not a non-negative integer.
bool parse_shape(const std::string& text, std::vector<int32_t>& shape) {
  shape.clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('x', start);
    const std::string field = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (field.empty() || field.find_first_not_of("0123456789") != std::string::npos ||
        field.size() > 9) {
      return false;
    }
    shape.push_back(static_cast<int32_t>(std::stol(field)));
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return true;
}

int prepare_inputs(
    const MethodMeta& meta,
    const std::vector<std::string>& files,
    const std::vector<std::string>& shapes,
    std::vector<PreparedInput>& prepared) {
  const size_t count = meta.num_inputs();
  if (!files.empty() && files.size() != count) {
    return fail(
        kExitBadInput,
        "--inputs has " + std::to_string(files.size()) + " file(s) but method " +
            meta.name() + " has " + std::to_string(count) + " input(s)");
  }
  if (!shapes.empty() && shapes.size() != count) {
    return fail(kExitBadInput, "--input_shapes has " + std::to_string(shapes.size()) +
                                   " shape(s) but method " + meta.name() + " has " +
                                   std::to_string(count) + " input(s)");
  }
  for (size_t i = 0; i < count; ++i) {
    Result<Tag> tag = meta.input_tag(i);
    if (!tag.ok()) {
      return fail_et("reading input " + std::to_string(i) + " tag", tag.error());
    }
    if (*tag != Tag::Tensor) {
      return fail(
          kExitBadInput,
          "input " + std::to_string(i) + " is a " + etdeploy_runner::tag_name(*tag) +
              ", not a tensor; this runner feeds tensors only");
    }
    Result<TensorInfo> info = meta.input_tensor_meta(i);
    if (!info.ok()) {
      return fail_et("reading input " + std::to_string(i) + " metadata", info.error());
    }
    PreparedInput input;
    input.index = i;
    input.dtype = dtype_name(info->scalar_type());
    input.nbytes = info->nbytes();
    input.shape.assign(info->sizes().begin(), info->sizes().end());
    if (!shapes.empty() && !shapes[i].empty()) {
      // A dynamic input at a size within its bounds: set_input resizes the
      // method's tensor, and the runtime refuses a size beyond the bound.
      std::vector<int32_t> given;
      if (!parse_shape(shapes[i], given) || given.size() != input.shape.size()) {
        return fail(kExitBadInput, "--input_shapes: input " + std::to_string(i) + " shape '" +
                                       shapes[i] + "' is not " +
                                       std::to_string(input.shape.size()) +
                                       " dims joined by 'x'");
      }
      size_t numel = 1;
      for (const int32_t dim : given) {
        numel *= static_cast<size_t>(dim);
      }
      input.nbytes = numel * executorch::runtime::elementSize(info->scalar_type());
      input.shape = given;
    }
    input.data = allocate_aligned(input.nbytes);
    if (!input.data) {
      return fail(kExitRuntimeError, "cannot allocate " + std::to_string(input.nbytes) +
                                         " bytes for input " + std::to_string(i));
    }
    const std::string described =
        input.dtype + " " + shape_text(Span<const int32_t>(input.shape.data(), input.shape.size()));
    if (files.empty()) {
      if (!fill_ones(input.data.get(), input.nbytes, info->scalar_type())) {
        return fail(kExitBadInput, "input " + std::to_string(i) + " (" + described +
                                       ") has no default value; pass --inputs");
      }
    } else {
      input.file = files[i];
      std::string read_error;
      if (!etdeploy_runner::read_input(input.file, input.data.get(), input.nbytes, read_error)) {
        return fail(kExitBadInput, "input " + std::to_string(i) + " (" + input.file + ") " +
                                       read_error + " bytes for " + described);
      }
    }
    std::vector<executorch::aten::SizesType> sizes(input.shape.begin(), input.shape.end());
    std::vector<executorch::aten::DimOrderType> dim_order(
        info->dim_order().begin(), info->dim_order().end());
    std::vector<executorch::aten::StridesType> strides = strides_for(sizes, dim_order);
    // The buffer stays owned by PreparedInput; the tensor only points at it.
    input.tensor = executorch::extension::make_tensor_ptr(
        std::move(sizes),
        input.data.get(),
        std::move(dim_order),
        std::move(strides),
        info->scalar_type(),
        executorch::aten::Device(executorch::aten::DeviceType::CPU),
        executorch::aten::TensorShapeDynamism::STATIC,
        nullptr);
    prepared.push_back(std::move(input));
  }
  return 0;
}

// Inputs are set before every execution, as upstream does: memory planning may
// let a method reuse an input's storage, so an input set once is not
// guaranteed to survive a run.
Error set_inputs(Method& method, std::vector<PreparedInput>& inputs) {
  for (PreparedInput& input : inputs) {
    const Error status = method.set_input(EValue(*input.tensor), input.index);
    if (status != Error::Ok) {
      return status;
    }
  }
  return Error::Ok;
}

uint64_t process_peak_rss_bytes() {
#if defined(__linux__)
  // VmHWM starts afresh at exec; ru_maxrss is inherited across fork+exec, so
  // under a big parent (a Python host) it would report the parent's peak.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;  // kB
    }
  }
#endif
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) {
    return 0;
  }
#if defined(__APPLE__)
  // macOS and iOS report ru_maxrss in bytes.
  return static_cast<uint64_t>(usage.ru_maxrss);
#else
  // Linux and Android report kilobytes (getrusage(2)).
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
#endif
}

// The process's peak resident memory. With --memory the kernel's counter is reset
// between phases, so the highest phase peak is kept too.
uint64_t peak_rss_bytes(const MemoryProbe* probe) {
  const uint64_t now = process_peak_rss_bytes();
  if (probe == nullptr || probe->highest_peak() < 0) {
    return now;
  }
  return std::max(now, static_cast<uint64_t>(probe->highest_peak()));
}

struct OutputRecord {
  size_t index = 0;
  std::string tag;
  bool is_tensor = false;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> dim_order;
  size_t nbytes = 0;
  std::string file;
  // Where its bytes start in the call's batch data file (--batch_output); -1: none.
  int64_t offset = -1;
  // A scalar output's value as JSON text; empty when not a scalar.
  std::string scalar_json;
};

std::string output_file_name(const std::string& base, size_t index) {
  return base + "-" + std::to_string(index) + ".bin";
}

// What every sample of one call shares: the program as loaded.
struct CallFacts {
  std::string model_path;
  std::string data_path;
  std::string method_name;
  int64_t pool_threads = 1;
  double load_ms = 0.0;
};

// How one sample of a call runs: the first is timed and may be profiled; with
// --batch_output its outputs and document go to the call's batch files, and a
// sample after the first prints nothing unless it fails.
struct SamplePlan {
  int64_t warmup = 0;
  int64_t executions = 1;
  executorch::etdump::ETDumpGen* etdump = nullptr;
  std::string etdump_path;  // empty: no ETDump for this sample
  etdeploy_runner::BatchSink* batch = nullptr;
  bool quiet = false;
  MemoryProbe* probe = nullptr;  // the timed sample's phases (--memory)
};

// One sample on the loaded method: `warmup` untimed and `executions` timed runs,
// then its outputs and (when asked) its result document, the same document
// whether it is the call's first sample or a later one.
int run_sample(Method& method, const MethodMeta& meta, const CallFacts& call,
               const etdeploy_runner::SampleFlags& sample, const SamplePlan& plan) {
  const int64_t warmup = plan.warmup;
  const int64_t executions = plan.executions;
  executorch::etdump::ETDumpGen* etdump = plan.etdump;
  const std::string& etdump_path = plan.etdump_path;
  MemoryProbe* probe = plan.probe;
  std::vector<PreparedInput> inputs;
  if (const int status = prepare_inputs(
          meta, etdeploy_runner::split_commas(sample.inputs),
          etdeploy_runner::split_commas(sample.input_shapes), inputs);
      status != 0) {
    return status;
  }
  // --memory: the first execution is a phase of its own (kernels and delegates
  // touch their weights and set up their workspaces); every later one, warm-ups
  // and timed, is the steady state. Phases change between executions, outside
  // the timed interval.
  int64_t executed = 0;
  const auto before_execution = [&]() {
    if (probe != nullptr && executed == 0) {
      int64_t io_bytes = 0;
      for (const PreparedInput& input : inputs) {
        io_bytes += static_cast<int64_t>(input.nbytes);
      }
      probe->set_runner_io_bytes(io_bytes);
      probe->begin_phase("first_execution");
    }
  };
  const auto after_execution = [&]() {
    if (probe != nullptr && executed == 0) {
      probe->end_phase();
      if (warmup + executions > 1) {
        probe->begin_phase("steady_state");
      }
    }
    ++executed;
  };

  for (int64_t i = 0; i < warmup; ++i) {
    if (const Error status = set_inputs(method, inputs); status != Error::Ok) {
      return fail_et("setting inputs", status);
    }
    before_execution();
    const Clock::time_point start = Clock::now();
    if (const Error status = method.execute(); status != Error::Ok) {
      return fail_et("warm-up execution " + std::to_string(i + 1), status);
    }
    const double ms = elapsed_ms(start, Clock::now());
    after_execution();
    std::printf("Warm-up %" PRId64 " of %" PRId64 ": %f ms\n", i + 1, warmup, ms);
  }

  std::vector<double> iterations_ms;
  std::vector<double> iterations_cpu_ms;
  bool cpu_clock_ok = true;
  double total_ms = 0.0;
  for (int64_t i = 0; i < executions; ++i) {
    if (const Error status = set_inputs(method, inputs); status != Error::Ok) {
      return fail_et("setting inputs", status);
    }
    before_execution();
    const double cpu_start = process_cpu_ms();
    const Clock::time_point start = Clock::now();
    const Error status = method.execute();
    const double ms = elapsed_ms(start, Clock::now());
    const double cpu_end = process_cpu_ms();
    if (status != Error::Ok) {
      return fail_et("execution " + std::to_string(i + 1), status);
    }
    after_execution();
    iterations_ms.push_back(ms);
    cpu_clock_ok = cpu_clock_ok && cpu_start >= 0 && cpu_end >= 0;
    iterations_cpu_ms.push_back(cpu_end - cpu_start);
    total_ms += ms;
    if (!plan.quiet) {
      std::printf("Iteration %" PRId64 " of %" PRId64 ": %f ms\n", i + 1, executions, ms);
    }
  }
  if (!plan.quiet) {
    std::printf("Model executed successfully %" PRId64 " time(s) in %f ms.\n", executions,
                total_ms);
  }
  if (probe != nullptr) {
    probe->end_phase();  // the steady state, when there was one
  }

  std::vector<EValue> outputs(method.outputs_size());
  if (const Error status = method.get_outputs(outputs.data(), outputs.size());
      status != Error::Ok) {
    return fail_et("reading outputs", status);
  }
  if (!plan.quiet) {
    std::printf("%zu outputs: \n", outputs.size());
  }

  std::vector<OutputRecord> records;
  for (size_t i = 0; i < outputs.size(); ++i) {
    OutputRecord record;
    record.index = i;
    record.tag = etdeploy_runner::tag_name(outputs[i].tag);
    if (outputs[i].isTensor()) {
      const Tensor tensor = outputs[i].toTensor();
      record.is_tensor = true;
      record.dtype = dtype_name(tensor.scalar_type());
      record.nbytes = tensor.nbytes();
      for (const auto size : tensor.sizes()) {
        record.shape.push_back(size);
      }
      for (const auto dim : tensor.dim_order()) {
        record.dim_order.push_back(dim);
      }
      std::string shape = "[";
      for (size_t d = 0; d < record.shape.size(); ++d) {
        shape += (d ? ", " : "") + std::to_string(record.shape[d]);
      }
      shape += "]";
      if (!plan.quiet) {
        std::printf("Output %zu: tensor %s %s\n", i, record.dtype.c_str(), shape.c_str());
      }
      if (plan.batch != nullptr) {
        uint64_t offset = 0;
        std::string write_error;
        if (!plan.batch->append(tensor.const_data_ptr(), tensor.nbytes(), offset, write_error)) {
          return fail(kExitOutputFailed, "writing output " + std::to_string(i) + ": " +
                                             write_error);
        }
        record.offset = static_cast<int64_t>(offset);
      } else if (!sample.output_file.empty()) {
        record.file = output_file_name(sample.output_file, i);
        std::string write_error;
        if (!etdeploy_runner::write_file_atomically(
                record.file, tensor.const_data_ptr(), tensor.nbytes(), write_error)) {
          return fail(kExitOutputFailed, "writing output " + std::to_string(i) + ": " +
                                             write_error);
        }
        std::printf("Writing output to file: %s\n", record.file.c_str());
      }
    } else {
      // Non-tensor outputs keep their index (upstream writes no file for them).
      if (outputs[i].isInt()) {
        record.scalar_json = std::to_string(outputs[i].toInt());
      } else if (outputs[i].isDouble()) {
        JsonWriter number;
        number.value(outputs[i].toDouble());
        record.scalar_json = number.text();
      } else if (outputs[i].isBool()) {
        record.scalar_json = outputs[i].toBool() ? "true" : "false";
      }
      if (!plan.quiet) {
        std::printf("Output %zu: %s\n", i, record.tag.c_str());
      }
    }
    records.push_back(std::move(record));
  }

  if (etdump != nullptr && !etdump_path.empty()) {
    executorch::etdump::ETDumpResult dump = etdump->get_etdump_data();
    if (dump.buf == nullptr || dump.size == 0) {
      return fail(kExitOutputFailed, "writing etdump: the event tracer recorded nothing");
    }
    std::string write_error;
    const bool written = etdeploy_runner::write_file_atomically(
        etdump_path, dump.buf, dump.size, write_error);
    // ETDumpGen allocated the buffer with malloc when it was given none.
    std::free(dump.buf);
    if (!written) {
      return fail(kExitOutputFailed, "writing etdump: " + write_error);
    }
    std::printf("ETDump written to file '%s'.\n", etdump_path.c_str());
  }

  if (!sample.result_json.empty() || plan.batch != nullptr) {
    JsonWriter json;
    json.begin_object();
    json.key("schema");
    json.value("etdeploy.runner_result/1");
    json.key("runner_version");
    json.value(ETDEPLOY_RUNNER_VERSION);
    json.key("executorch_version");
    json.value(ETDEPLOY_EXECUTORCH_VERSION);
    json.key("model_path");
    json.value(call.model_path);
    json.key("data_path");
    if (call.data_path.empty()) {
      json.null();
    } else {
      json.value(call.data_path);
    }
    json.key("method");
    json.value(call.method_name);
    json.key("cpu_threads");
    json.value(call.pool_threads);
    json.key("load_ms");
    json.value(call.load_ms);
    json.key("warmup");
    json.value(warmup);
    json.key("num_executions");
    json.value(executions);
    json.key("iterations_ms");
    json.begin_array();
    for (const double ms : iterations_ms) {
      json.value(ms);
    }
    json.end_array();
    if (cpu_clock_ok) {
      json.key("iterations_cpu_ms");
      json.begin_array();
      for (const double ms : iterations_cpu_ms) {
        json.value(ms);
      }
      json.end_array();
    }
    json.key("total_ms");
    json.value(total_ms);
    json.key("peak_rss_bytes");
    json.value(peak_rss_bytes(probe));
    if (probe != nullptr) {
      json.key("memory");
      probe->write_json(json);
    }
    json.key("inputs");
    json.begin_array();
    for (const PreparedInput& input : inputs) {
      json.begin_object();
      json.key("index");
      json.value(static_cast<int64_t>(input.index));
      json.key("dtype");
      json.value(input.dtype);
      json.key("shape");
      json.begin_array();
      for (const int32_t size : input.shape) {
        json.value(static_cast<int64_t>(size));
      }
      json.end_array();
      json.key("nbytes");
      json.value(static_cast<uint64_t>(input.nbytes));
      json.key("file");
      if (input.file.empty()) {
        json.null();
      } else {
        json.value(input.file);
      }
      json.end_object();
    }
    json.end_array();
    json.key("outputs");
    json.begin_array();
    for (const OutputRecord& record : records) {
      json.begin_object();
      json.key("index");
      json.value(static_cast<int64_t>(record.index));
      json.key("tag");
      json.value(record.tag);
      if (record.is_tensor) {
        json.key("dtype");
        json.value(record.dtype);
        json.key("shape");
        json.begin_array();
        for (const int64_t size : record.shape) {
          json.value(size);
        }
        json.end_array();
        json.key("dim_order");
        json.begin_array();
        for (const int64_t dim : record.dim_order) {
          json.value(dim);
        }
        json.end_array();
        json.key("nbytes");
        json.value(static_cast<uint64_t>(record.nbytes));
        json.key("file");
        if (record.file.empty()) {
          json.null();
        } else {
          json.value(record.file);
        }
        if (record.offset >= 0) {
          json.key("offset");
          json.value(record.offset);
        }
      } else if (!record.scalar_json.empty()) {
        json.key("value");
        json.raw(record.scalar_json);
      }
      json.end_object();
    }
    json.end_array();
    json.key("etdump_path");
    if (etdump_path.empty()) {
      json.null();
    } else {
      json.value(etdump_path);
    }
    json.end_object();
    if (plan.batch != nullptr) {
      plan.batch->add_document(json.text());
      return 0;
    }
    std::string document = json.text() + "\n";
    std::string write_error;
    if (!etdeploy_runner::write_file_atomically(
            sample.result_json, document.data(), document.size(), write_error)) {
      return fail(kExitOutputFailed, "writing result json: " + write_error);
    }
  }

  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  executorch::runtime::runtime_init();

  Flags flags;
  std::string flag_error;
  if (!etdeploy_runner::parse_flags(argc, argv, flags, flag_error)) {
    return fail(kExitBadInput, flag_error);
  }
  if (flags.help) {
    std::fputs(etdeploy_runner::usage_text(argv[0]).c_str(), stdout);
    return 0;
  }
  if (flags.version) {
    std::printf("etdeploy_runner %s (executorch %s)\n", ETDEPLOY_RUNNER_VERSION,
                ETDEPLOY_EXECUTORCH_VERSION);
    return 0;
  }
  if (flags.describe) {
    // Before the thread pool or any program: this answers what the registries
    // hold, which static initializers filled before main().
    const std::string document = etdeploy_runner::describe_json(
        {ETDEPLOY_RUNNER_VERSION, ETDEPLOY_EXECUTORCH_VERSION, ETDEPLOY_BUNDLE_KIND,
         ETDEPLOY_BUNDLE_ABI, ETDEPLOY_KERNEL_LIBRARIES, ETDEPLOY_BACKEND_LIBRARIES});
    std::fputs(document.c_str(), stdout);
    std::fflush(stdout);
    return 0;
  }

  // Thread pool: the same policy as upstream, -1 means one thread per
  // performant core, 1 means run on the calling thread only.
  auto* threadpool = executorch::extension::threadpool::get_threadpool();
  const uint32_t threads = flags.cpu_threads == -1
      ? executorch::extension::cpuinfo::get_num_performant_cores()
      : static_cast<uint32_t>(flags.cpu_threads);
  if (threadpool != nullptr && threads > 0) {
    std::printf("Resetting threadpool with num threads = %" PRIu32 "\n", threads);
    threadpool->_unsafe_reset_threadpool(threads);
  }
  std::optional<executorch::extension::threadpool::NoThreadPoolGuard> single_thread;
  if (flags.cpu_threads == 1) {
    single_thread.emplace();
  }
  const int64_t pool_threads =
      threadpool != nullptr ? static_cast<int64_t>(threadpool->get_thread_count()) : 1;

  // --memory: the method's and the kernels' scratch allocators count what they
  // hold (they behave as MallocMemoryAllocator either way), and the probe reads
  // the process before the program and at the edges of each phase.
  etdeploy_runner::CountingAllocator method_allocator;
  etdeploy_runner::CountingAllocator temp_allocator;
  std::unique_ptr<MemoryProbe> probe;
  if (flags.memory) {
    probe = std::make_unique<MemoryProbe>(
        std::vector<std::string>{flags.model_path, flags.data_path}, &method_allocator,
        &temp_allocator);
    probe->take_baseline();
    probe->begin_phase("load");
  }

  const double probe_ms_before_load = probe ? probe->spent_ms() : 0.0;
  const Clock::time_point load_start = Clock::now();
  // mmap rather than reading the file: weights are paged in on use, so a large
  // program does not count twice towards peak memory. No mlock: it can fail
  // for unprivileged processes on Android.
  Result<MmapDataLoader> loader =
      MmapDataLoader::from(flags.model_path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
  if (!loader.ok()) {
    return fail_et("opening model " + flags.model_path, loader.error());
  }
  // With --memory the runtime gets the mapped file through a loader that lets the
  // probe read the process before a delegate frees what it compiled from.
  std::optional<etdeploy_runner::CheckpointingDataLoader> checkpointing;
  if (probe) {
    checkpointing.emplace(&loader.get(), probe.get());
  }
  executorch::runtime::DataLoader* program_loader =
      checkpointing.has_value() ? static_cast<executorch::runtime::DataLoader*>(&*checkpointing)
                                : &loader.get();
  // InternalConsistency verifies the flatbuffer, so a truncated or corrupt file
  // is reported here rather than crashing a later stage.
  Result<Program> program =
      Program::load(program_loader, Program::Verification::InternalConsistency);
  if (!program.ok()) {
    return fail_et("program load", program.error());
  }

  // The program's external data (--data_path, as upstream's executor_runner
  // takes it): a .ptd mapped like the program, so its weights are paged in on
  // use too; the runtime resolves the program's external tensors and a
  // delegate's named data against it when the method loads. Both the loader
  // and the map must outlive the method.
  std::optional<MmapDataLoader> data_loader;
  std::optional<etdeploy_runner::CheckpointingDataLoader> data_checkpointing;
  std::optional<FlatTensorDataMap> data_map;
  if (!flags.data_path.empty()) {
    Result<MmapDataLoader> opened =
        MmapDataLoader::from(flags.data_path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
    if (!opened.ok()) {
      return fail_et("opening data " + flags.data_path, opened.error());
    }
    data_loader.emplace(std::move(opened.get()));
    executorch::runtime::DataLoader* data_source = &data_loader.value();
    if (probe) {
      data_checkpointing.emplace(&data_loader.value(), probe.get());
      data_source = &*data_checkpointing;
    }
    Result<FlatTensorDataMap> loaded = FlatTensorDataMap::load(data_source);
    if (!loaded.ok()) {
      return fail_et("data load " + flags.data_path, loaded.error());
    }
    data_map.emplace(std::move(loaded.get()));
  }

  Result<MethodMeta> meta = program->method_meta(flags.method_name.c_str());
  if (!meta.ok()) {
    std::string names;
    for (size_t i = 0; i < program->num_methods(); ++i) {
      Result<const char*> name = program->get_method_name(i);
      names += std::string(i ? ", " : "") + (name.ok() ? *name : "?");
    }
    return fail(kExitRuntimeError, "method " + flags.method_name + " lookup failed: " +
                                       describe_error(meta.error()) +
                                       " (program has: " + names + ")");
  }
  std::printf("Using method %s\n", flags.method_name.c_str());

  // Memory: malloc-backed allocators for the method's metadata and kernels'
  // scratch, and one buffer per memory-planned arena, sized by the program.
  std::vector<std::unique_ptr<uint8_t[]>> planned_storage;
  std::vector<Span<uint8_t>> planned_spans;
  for (size_t id = 0; id < meta->num_memory_planned_buffers(); ++id) {
    const size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(id).get());
    planned_storage.push_back(std::make_unique<uint8_t[]>(size));
    planned_spans.emplace_back(planned_storage.back().get(), size);
  }
  HierarchicalAllocator planned_memory({planned_spans.data(), planned_spans.size()});
  MemoryManager memory_manager(&method_allocator, &planned_memory, &temp_allocator);

  // The event tracer only when an ETDump is asked for, so plain timings carry
  // no profiling overhead.
  std::unique_ptr<executorch::etdump::ETDumpGen> etdump;
  if (!flags.etdump_path.empty()) {
    etdump = std::make_unique<executorch::etdump::ETDumpGen>();
  }

  Result<Method> method =
      program->load_method(flags.method_name.c_str(), &memory_manager, etdump.get(),
                           data_map.has_value() ? &data_map.value() : nullptr);
  if (!method.ok()) {
    return fail_et("method load", method.error());
  }
  // The probe's own reads during the load (a few /proc files) are not the load's.
  const double load_ms =
      elapsed_ms(load_start, Clock::now()) - (probe ? probe->spent_ms() - probe_ms_before_load : 0.0);
  if (probe) {
    std::vector<int64_t> planned_sizes;
    for (const Span<uint8_t>& span : planned_spans) {
      planned_sizes.push_back(static_cast<int64_t>(span.size()));
    }
    probe->set_planned_buffers(std::move(planned_sizes));
    probe->end_phase();
  }
  std::printf("Model loaded in %f ms.\n", load_ms);
  std::fflush(stdout);

  if (flags.generate) {
    etdeploy_runner::GenerationCall generation{
        flags.model_path,     flags.data_path,   flags.method_name, flags.token_ids,
        flags.generated_file, flags.logits_file, flags.result_json, flags.prompt_len,
        flags.max_new_tokens, pool_threads,      load_ms,           ETDEPLOY_RUNNER_VERSION,
        ETDEPLOY_EXECUTORCH_VERSION, [] { return process_peak_rss_bytes(); }, flags.eos_ids};
    etdeploy_runner::GenerationFailure failure;
    if (!etdeploy_runner::run_generation(*program, *method, *meta, generation, failure)) {
      return fail(failure.exit_code, failure.message);
    }
    std::fflush(stdout);
    return 0;
  }

  const CallFacts call{flags.model_path, flags.data_path, flags.method_name, pool_threads,
                       load_ms};
  // The first sample is the timed one (and the only one an ETDump covers: it is
  // written before the next sample runs); the rest run once each, each one's
  // "Sample k of N" line first so a failure's log says which sample it was in.
  std::optional<etdeploy_runner::BatchSink> batch;
  if (!flags.batch_output.empty()) {
    std::string open_error;
    batch.emplace(flags.batch_output);
    if (!batch->open(open_error)) {
      return fail(kExitOutputFailed, "batch output: " + open_error);
    }
  }
  const size_t total = 1 + flags.next_samples.size();
  for (size_t k = 0; k < total; ++k) {
    const bool first = k == 0;
    SamplePlan plan;
    plan.warmup = first ? flags.warmup : 0;
    plan.executions = first ? flags.num_executions : 1;
    plan.etdump = etdump.get();
    plan.etdump_path = first ? flags.etdump_path : std::string();
    plan.batch = batch.has_value() ? &batch.value() : nullptr;
    plan.quiet = batch.has_value() && !first;
    plan.probe = first ? probe.get() : nullptr;
    if (total > 1 && !plan.quiet) {
      std::printf("Sample %zu of %zu\n", k + 1, total);
    }
    const int status = run_sample(
        *method, *meta, call, first ? flags.first_sample() : flags.next_samples[k - 1], plan);
    if (status != 0) {
      if (plan.quiet) {
        std::fprintf(stderr, "(in sample %zu of %zu)\n", k + 1, total);
      }
      return status;
    }
    std::fflush(stdout);
  }
  if (batch.has_value()) {
    std::string finish_error;
    if (!batch->finish(finish_error)) {
      return fail(kExitOutputFailed, "batch output: " + finish_error);
    }
    std::printf("Ran %zu sample(s); outputs in %s.bin and %s.json\n", total,
                flags.batch_output.c_str(), flags.batch_output.c_str());
  }

  std::fflush(stdout);
  return 0;
}
