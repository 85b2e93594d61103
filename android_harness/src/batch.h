// Many samples through one runner call with few files (etdeploy run over a test
// set of thousands of samples): the samples are listed in a file instead of on
// the command line, their inputs are byte ranges of one packed file, and every
// output goes into one data file beside one result document. A phone then takes
// one push and gives back two files, whatever the number of samples.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "flags.h"

namespace etdeploy_runner {

// --samples_file PATH: one sample a line, four tab-separated fields (inputs,
// input_shapes, output_file, result_json: what --next_sample takes; an empty
// field is not given). Appends them to `samples`; false and `error` on a bad file.
bool read_samples_file(const std::string& path, std::vector<SampleFlags>& samples,
                       std::string& error);

// An input named "PATH@OFFSET": `nbytes` bytes of PATH from OFFSET (a packed
// file of many samples' inputs); a plain PATH must hold exactly `nbytes`. On
// failure false, and `error` says what the file holds instead.
bool read_input(const std::string& spec, void* data, size_t nbytes, std::string& error);

// --batch_output BASE: every sample's tensor outputs appended to BASE.bin and its
// result document to BASE.json ({"schema": "etdeploy.runner_batch/1", "samples":
// [...]}), each written under a temporary name and renamed when the call ends,
// so a failed call leaves neither.
class BatchSink {
 public:
  explicit BatchSink(std::string base);
  ~BatchSink();
  BatchSink(const BatchSink&) = delete;
  BatchSink& operator=(const BatchSink&) = delete;

  bool open(std::string& error);
  // Appends `size` bytes; `offset` is where they start in BASE.bin.
  bool append(const void* data, size_t size, uint64_t& offset, std::string& error);
  void add_document(std::string document) { documents_.push_back(std::move(document)); }
  // Both files renamed into place.
  bool finish(std::string& error);

 private:
  std::string base_;
  std::string data_temporary_;
  FILE* data_ = nullptr;
  uint64_t written_ = 0;
  std::vector<std::string> documents_;
};

}  // namespace etdeploy_runner
