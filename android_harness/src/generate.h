// --generate: greedy generation and teacher-forced logits for a causal language
// model exported with a static KV cache (etdeploy/runner/generation.py holds the
// contract: the files, the passes, the result document).
//
// The method takes (token ids int64 [1, S], cache positions int64 [S]) and
// returns float32 logits for every position fed ([1, S, V]) or for the last one
// ([1, V] or [1, 1, V]). S fixed at 1 runs one token per call; S dynamic up to M
// runs chunks of up to M tokens where it can.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/method_meta.h>
#include <executorch/runtime/executor/program.h>

namespace etdeploy_runner {

// What one --generate call was asked for, and what the call shares with any run.
struct GenerationCall {
  std::string model_path;
  std::string data_path;
  std::string method_name;
  std::string token_ids_file;
  std::string generated_file;
  std::string logits_file;  // empty: no teacher-forced pass
  std::string result_json;
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  int64_t pool_threads = 1;
  double load_ms = 0.0;
  std::string runner_version;
  std::string executorch_version;
  // The process's peak resident memory when the document is written.
  std::function<uint64_t()> peak_rss_bytes;
  // Comma-separated end-of-sequence ids (--eos_ids); empty: no stop.
  std::string eos_ids;
};

// Why a call failed: the runner's exit status and one line for stderr.
struct GenerationFailure {
  int exit_code = 0;
  std::string message;
};

// Runs both passes on the loaded method and writes the files. Returns true, or
// false with `failure` set (nothing of GEN, OUT or the document left behind).
bool run_generation(executorch::runtime::Program& program, executorch::runtime::Method& method,
                    const executorch::runtime::MethodMeta& meta, const GenerationCall& call,
                    GenerationFailure& failure);

}  // namespace etdeploy_runner
