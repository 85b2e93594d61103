// Command-line flags of the runner: upstream executor_runner's names, plus
// --warmup, --result_json, --input_shapes and --describe. The wheel ships no
// gflags, so this is a small parser that accepts the same spellings gflags does
// for these flags: --name=value, --name value, and a single leading dash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace etdeploy_runner {

// What differs between the samples of one call: --next_sample starts another
// sample's group of these, run once each after the first sample's timed runs,
// on the program already loaded.
struct SampleFlags {
  // Comma-separated raw input files, one per method input.
  std::string inputs;
  // Ours: the shape of each input, comma-separated, dims joined by 'x'
  // ("3x5,2x3"); an empty field keeps the method's shape. For dynamic inputs.
  std::string input_shapes;
  // Base name of the output files: BASE-<i>.bin for each tensor output i.
  std::string output_file;
  std::string result_json;
};

struct Flags {
  std::string model_path = "model.pte";
  // The program's external data (.ptd: weights kept outside the .pte); empty
  // when the program carries its own.
  std::string data_path;
  // Comma-separated raw input files, one per method input.
  std::string inputs;
  // Base name of the output files: BASE-<i>.bin for each tensor output i.
  std::string output_file;
  int64_t num_executions = 1;
  int64_t warmup = 0;
  std::string method_name = "forward";
  // Empty: no event tracer is attached, so timings carry no profiling cost.
  std::string etdump_path;
  // -1: size the thread pool by the number of performant cores, as upstream does.
  int64_t cpu_threads = -1;
  std::string result_json;
  // Ours: the shape of each input, comma-separated, dims joined by 'x'
  // ("3x5,2x3"); an empty field keeps the method's shape. For dynamic inputs.
  std::string input_shapes;
  bool help = false;
  bool version = false;
  // Ours: print what this runner can run (kernels, backends, versions) as JSON.
  bool describe = false;
  // Ours: measure memory per phase (load, first execution, steady state) into
  // the first sample's result document (src/memory_probe.h).
  bool memory = false;
  // Ours: the samples after the first, each given after a --next_sample or
  // listed in --samples_file (one a line: a call of thousands of samples).
  std::vector<SampleFlags> next_samples;
  std::string samples_file;
  // Ours: every sample's outputs into BASE.bin and documents into BASE.json.
  std::string batch_output;
  // Ours: --generate runs a causal LM with a static KV cache (src/generate.h):
  // greedy generation from the first prompt_len of the ids in token_ids, and
  // with logits_file every position's logits under teacher forcing.
  bool generate = false;
  std::string token_ids;
  std::string generated_file;
  std::string logits_file;
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  // Comma-separated end-of-sequence ids: generation stops after writing one of
  // them (fewer than max_new_tokens ids then). Empty: exactly max_new_tokens.
  std::string eos_ids;

  // The first sample: the one timed with --warmup and --num_executions.
  SampleFlags first_sample() const { return {inputs, input_shapes, output_file, result_json}; }
};

// Fills `flags` from argv. On a bad command line returns false and sets `error`
// to one line that names the flag.
bool parse_flags(int argc, char** argv, Flags& flags, std::string& error);

// The usage text printed by --help.
std::string usage_text(const char* program);

// Splits "a,b,c" into its fields; an empty string gives no fields.
std::vector<std::string> split_commas(const std::string& text);

}  // namespace etdeploy_runner
