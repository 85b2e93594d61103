// A minimal JSON emitter for the runner's --result_json: objects, arrays,
// strings, numbers and booleans, written in order. No dependency is shipped in
// the ExecuTorch wheel for this, and the document is small and flat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace etdeploy_runner {

class JsonWriter {
 public:
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Inside an object: the next value's key.
  void key(const std::string& name);
  void value(const std::string& text);
  void value(const char* text);
  void value(double number);
  void value(int64_t number);
  void value(uint64_t number);
  void value(int number) { value(static_cast<int64_t>(number)); }
  void value(bool flag);
  void null();
  // A value that is already JSON text (a number or literal formatted elsewhere).
  void raw(const std::string& json_text);

  const std::string& text() const { return out_; }

 private:
  void before_value();
  std::string out_;
  // One entry per open container: true once it holds a member.
  std::vector<bool> has_member_;
  bool after_key_ = false;
};

std::string json_escape(const std::string& text);

// Writes `contents` to a temporary name beside `path`, then renames it over
// `path`, so a reader never sees a half-written file. Returns false and sets
// `error` on failure.
bool write_file_atomically(
    const std::string& path, const void* data, size_t size, std::string& error);

}  // namespace etdeploy_runner
