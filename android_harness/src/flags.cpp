#include "flags.h"

#include "batch.h"

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace etdeploy_runner {
namespace {

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') {
    return false;
  }
  out = static_cast<int64_t>(value);
  return true;
}

// --generate's own flags belong to it, and the sample flags do not apply to it.
bool check_generation_flags(const Flags& flags, std::string& error) {
  const bool any_generation_flag = !flags.token_ids.empty() || !flags.generated_file.empty() ||
                                   !flags.logits_file.empty() || flags.prompt_len != 0 ||
                                   flags.max_new_tokens != 0 || !flags.eos_ids.empty();
  if (!flags.generate) {
    if (any_generation_flag) {
      error = "--token_ids, --prompt_len, --max_new_tokens, --eos_ids, --generated_file and "
              "--logits_file go with --generate";
      return false;
    }
    return true;
  }
  const std::vector<std::pair<const char*, bool>> not_with = {
      {"inputs", !flags.inputs.empty()},           {"output_file", !flags.output_file.empty()},
      {"input_shapes", !flags.input_shapes.empty()}, {"etdump_path", !flags.etdump_path.empty()},
      {"next_sample", !flags.next_samples.empty()}, {"samples_file", !flags.samples_file.empty()},
      {"batch_output", !flags.batch_output.empty()}, {"memory", flags.memory},
      {"warmup", flags.warmup != 0},               {"num_executions", flags.num_executions != 1},
  };
  for (const auto& [name, given] : not_with) {
    if (given) {
      error = std::string("flag --") + name + " does not apply to --generate";
      return false;
    }
  }
  for (const auto& [name, value] : std::vector<std::pair<const char*, const std::string*>>{
           {"token_ids", &flags.token_ids},
           {"generated_file", &flags.generated_file},
           {"result_json", &flags.result_json}}) {
    if (value->empty()) {
      error = std::string("--generate needs --") + name;
      return false;
    }
  }
  if (flags.prompt_len < 1 || flags.max_new_tokens < 1) {
    error = "--generate needs --prompt_len and --max_new_tokens of at least 1, got " +
            std::to_string(flags.prompt_len) + " and " + std::to_string(flags.max_new_tokens);
    return false;
  }
  return true;
}

}  // namespace

bool parse_flags(int argc, char** argv, Flags& flags, std::string& error) {
  std::map<std::string, std::string*> string_flags = {
      {"model_path", &flags.model_path},
      {"data_path", &flags.data_path},
      {"inputs", &flags.inputs},
      {"output_file", &flags.output_file},
      {"method_name", &flags.method_name},
      {"etdump_path", &flags.etdump_path},
      {"result_json", &flags.result_json},
      {"input_shapes", &flags.input_shapes},
      {"samples_file", &flags.samples_file},
      {"batch_output", &flags.batch_output},
      {"token_ids", &flags.token_ids},
      {"generated_file", &flags.generated_file},
      {"logits_file", &flags.logits_file},
      {"eos_ids", &flags.eos_ids},
  };
  std::map<std::string, int64_t*> int_flags = {
      {"num_executions", &flags.num_executions},
      {"warmup", &flags.warmup},
      {"cpu_threads", &flags.cpu_threads},
      {"prompt_len", &flags.prompt_len},
      {"max_new_tokens", &flags.max_new_tokens},
  };
  std::map<std::string, bool*> bool_flags = {
      {"help", &flags.help},
      {"version", &flags.version},
      {"describe", &flags.describe},
      {"memory", &flags.memory},
      {"generate", &flags.generate},
  };
  // After a --next_sample only these name the new sample's files; anything else
  // belongs to the whole call and must come before the first --next_sample.
  const auto sample_flag = [](SampleFlags& sample, const std::string& name) -> std::string* {
    if (name == "inputs") return &sample.inputs;
    if (name == "input_shapes") return &sample.input_shapes;
    if (name == "output_file") return &sample.output_file;
    if (name == "result_json") return &sample.result_json;
    return nullptr;
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      error = "unexpected argument '" + arg + "' (flags are --name=value or --name value)";
      return false;
    }
    // gflags accepts one or two dashes; so do we.
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body;
    std::string value;
    bool has_value = false;
    const size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }

    if (name == "next_sample") {
      if (has_value) {
        error = "flag --next_sample takes no value, got '" + value + "'";
        return false;
      }
      flags.next_samples.emplace_back();
      continue;
    }
    if (!flags.next_samples.empty() && sample_flag(flags.next_samples.back(), name) == nullptr) {
      error = "flag --" + name +
              " applies to the whole call: give it before the first --next_sample";
      return false;
    }

    if (auto it = bool_flags.find(name); it != bool_flags.end()) {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0") {
        error = "flag --" + name + " takes no value or true/false, got '" + value + "'";
        return false;
      }
      *it->second = !has_value || value == "true" || value == "1";
      continue;
    }

    const bool known = string_flags.count(name) > 0 || int_flags.count(name) > 0;
    if (!known) {
      error = "unknown flag --" + name + " (see --help)";
      return false;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        error = "flag --" + name + " needs a value";
        return false;
      }
      value = argv[++i];
    }

    if (!flags.next_samples.empty()) {
      *sample_flag(flags.next_samples.back(), name) = value;
      continue;
    }
    if (auto it = string_flags.find(name); it != string_flags.end()) {
      *it->second = value;
      continue;
    }
    int64_t number = 0;
    if (!parse_int(value, number)) {
      error = "flag --" + name + " needs an integer, got '" + value + "'";
      return false;
    }
    *int_flags[name] = number;
  }

  if (flags.num_executions < 1) {
    error = "--num_executions must be at least 1, got " + std::to_string(flags.num_executions);
    return false;
  }
  if (flags.warmup < 0) {
    error = "--warmup must be 0 or more, got " + std::to_string(flags.warmup);
    return false;
  }
  if (flags.cpu_threads == 0 || flags.cpu_threads < -1) {
    error = "--cpu_threads must be -1 (performant cores) or a positive count, got " +
        std::to_string(flags.cpu_threads);
    return false;
  }
  if (flags.method_name.empty()) {
    error = "--method_name must not be empty";
    return false;
  }
  if (!check_generation_flags(flags, error)) {
    return false;
  }
  if (!flags.samples_file.empty() && !read_samples_file(flags.samples_file, flags.next_samples, error)) {
    return false;
  }
  return true;
}

std::string usage_text(const char* program) {
  std::string text = "usage: ";
  text += program;
  text +=
      " --model_path=PATH [flags]\n"
      "\n"
      "Runs one method of an ExecuTorch program (.pte) and times it.\n"
      "\n"
      "  --model_path PATH      the .pte to run (default model.pte)\n"
      "  --data_path PATH       the program's external data (.ptd), for a program\n"
      "                         whose weights were written beside it\n"
      "  --inputs A,B,...       raw input files, one per method input, each exactly\n"
      "                         the tensor's byte size in its default dim order\n"
      "                         (default: every input filled with ones)\n"
      "  --output_file BASE     write tensor output i to BASE-<i>.bin\n"
      "  --num_executions N     timed executions (default 1)\n"
      "  --warmup N             untimed executions before the timed ones (default 0)\n"
      "  --method_name NAME     the method to run (default forward)\n"
      "  --etdump_path PATH     record an ETDump profile and write it here\n"
      "  --cpu_threads N        thread pool size; -1 = performant cores (default)\n"
      "  --result_json PATH     write load time, per-iteration times and the outputs'\n"
      "                         dtype and shape as JSON\n"
      "  --input_shapes S,S,... each input's shape as AxBxC (empty: the method's);\n"
      "                         for inputs exported with dynamic dims\n"
      "  --next_sample          start another sample: the --inputs, --input_shapes,\n"
      "                         --output_file and --result_json after it are its\n"
      "                         own; it runs once on the program already loaded,\n"
      "                         after the first sample's timed executions\n"
      "  --samples_file PATH    more samples, one a line: inputs, input_shapes,\n"
      "                         output_file and result_json, tab-separated; an\n"
      "                         input may be PATH@OFFSET, bytes of a packed file\n"
      "  --batch_output BASE    every sample's tensor outputs into BASE.bin and\n"
      "                         its result document into BASE.json\n"
      "  --memory               measure memory per phase (load, first execution,\n"
      "                         steady state) into the first --result_json\n"
      "  --generate             run a causal language model with a static KV cache:\n"
      "                         greedy generation and teacher-forced logits (below)\n"
      "  --token_ids PATH       with --generate: token ids, raw int64 little-endian\n"
      "  --prompt_len P         the first P ids are the prompt to generate from\n"
      "  --max_new_tokens N     tokens to generate greedily (ids to --generated_file)\n"
      "  --eos_ids A,B          stop generating after one of these ids (written)\n"
      "  --generated_file PATH  the generated ids (N, or fewer after an end id), int64\n"
      "  --logits_file PATH     every id teacher-forced, their logits (T x V float32);\n"
      "                         timings and counts go to --result_json\n"
      "  --version              print the runner and ExecuTorch versions\n"
      "  --describe             print, as JSON, the ExecuTorch version, every\n"
      "                         registered kernel and backend, and the bundle's\n"
      "                         kind and ABI; runs no program\n"
      "\n"
      "Exit status: 0 ok, 1 ExecuTorch runtime error, 2 bad command line or input\n"
      "file, 3 an output could not be written.\n";
  return text;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> fields;
  if (text.empty()) {
    return fields;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    if (comma == std::string::npos) {
      fields.push_back(text.substr(start));
      break;
    }
    fields.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return fields;
}

}  // namespace etdeploy_runner
