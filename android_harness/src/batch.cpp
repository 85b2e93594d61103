#include "batch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "json_writer.h"

namespace etdeploy_runner {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) {
      return fields;
    }
    start = tab + 1;
  }
}

}  // namespace

bool read_samples_file(const std::string& path, std::vector<SampleFlags>& samples,
                       std::string& error) {
  std::ifstream stream(path);
  if (!stream) {
    error = "--samples_file: cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string line;
  size_t number = 0;
  while (std::getline(stream, line)) {
    ++number;
    if (line.empty()) {
      continue;
    }
    const std::vector<std::string> fields = split_tabs(line);
    if (fields.size() != 4) {
      error = "--samples_file " + path + " line " + std::to_string(number) + ": " +
              std::to_string(fields.size()) +
              " field(s), expected 4 (inputs, input_shapes, output_file, result_json)";
      return false;
    }
    samples.push_back({fields[0], fields[1], fields[2], fields[3]});
  }
  return true;
}

bool read_input(const std::string& spec, void* data, size_t nbytes, std::string& error) {
  std::string path = spec;
  long long offset = -1;
  const size_t at = spec.rfind('@');
  if (at != std::string::npos && at + 1 < spec.size() &&
      spec.find_first_not_of("0123456789", at + 1) == std::string::npos) {
    path = spec.substr(0, at);
    offset = std::strtoll(spec.c_str() + at + 1, nullptr, 10);
  }
  std::ifstream stream(path, std::ios::binary | std::ios::ate);
  if (!stream) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  const long long size = static_cast<long long>(stream.tellg());
  const long long start = offset < 0 ? 0 : offset;
  const long long wanted = static_cast<long long>(nbytes);
  if (offset < 0 ? size != wanted : start + wanted > size) {
    error = offset < 0 ? "has " + std::to_string(size) + " bytes, expected " + std::to_string(wanted)
                       : "holds " + std::to_string(size) + " bytes, fewer than " +
                             std::to_string(wanted) + " from offset " + std::to_string(start);
    return false;
  }
  stream.seekg(start, std::ios::beg);
  if (nbytes > 0 && !stream.read(static_cast<char*>(data), static_cast<std::streamsize>(nbytes))) {
    error = "cannot read " + path;
    return false;
  }
  return true;
}

BatchSink::BatchSink(std::string base) : base_(std::move(base)) {}

BatchSink::~BatchSink() {
  if (data_ != nullptr) {
    std::fclose(data_);
    std::remove(data_temporary_.c_str());
  }
}

bool BatchSink::open(std::string& error) {
  data_temporary_ = base_ + ".bin.tmp" + std::to_string(static_cast<long>(getpid()));
  data_ = std::fopen(data_temporary_.c_str(), "wb");
  if (data_ == nullptr) {
    error = "cannot open " + data_temporary_ + " for writing: " + std::strerror(errno);
    return false;
  }
  return true;
}

bool BatchSink::append(const void* data, size_t size, uint64_t& offset, std::string& error) {
  offset = written_;
  if (size > 0 && std::fwrite(data, 1, size, data_) != size) {
    error = "cannot write " + data_temporary_ + ": " + std::strerror(errno);
    return false;
  }
  written_ += size;
  return true;
}

bool BatchSink::finish(std::string& error) {
  const bool flushed = std::fflush(data_) == 0;
  const bool closed = std::fclose(data_) == 0;
  data_ = nullptr;
  if (!flushed || !closed) {
    error = "cannot write " + data_temporary_ + ": " + std::strerror(errno);
    std::remove(data_temporary_.c_str());
    return false;
  }
  std::string document = "{\"schema\": \"etdeploy.runner_batch/1\", \"samples\": [\n";
  for (size_t i = 0; i < documents_.size(); ++i) {
    document += documents_[i] + (i + 1 < documents_.size() ? ",\n" : "\n");
  }
  document += "]}\n";
  // The document names the data file's bytes: it goes into place last, so a
  // reader that finds it finds the data whole.
  const std::string data_path = base_ + ".bin";
  if (std::rename(data_temporary_.c_str(), data_path.c_str()) != 0) {
    error = "cannot rename " + data_temporary_ + " to " + data_path + ": " + std::strerror(errno);
    std::remove(data_temporary_.c_str());
    return false;
  }
  return write_file_atomically(base_ + ".json", document.data(), document.size(), error);
}

}  // namespace etdeploy_runner
