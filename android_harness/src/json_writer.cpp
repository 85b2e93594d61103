#include "json_writer.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace etdeploy_runner {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_member_.empty()) {
    if (has_member_.back()) {
      out_ += ", ";
    }
    has_member_.back() = true;
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ += "{";
  has_member_.push_back(false);
}

void JsonWriter::end_object() {
  out_ += "}";
  has_member_.pop_back();
}

void JsonWriter::begin_array() {
  before_value();
  out_ += "[";
  has_member_.push_back(false);
}

void JsonWriter::end_array() {
  out_ += "]";
  has_member_.pop_back();
}

void JsonWriter::key(const std::string& name) {
  before_value();
  out_ += json_escape(name);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::value(const std::string& text) {
  before_value();
  out_ += json_escape(text);
}

void JsonWriter::value(const char* text) {
  value(std::string(text));
}

void JsonWriter::value(double number) {
  before_value();
  // JSON has no NaN or infinity; a timing can never be either, so null marks a bug.
  if (!std::isfinite(number)) {
    out_ += "null";
    return;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6f", number);
  out_ += buffer;
}

void JsonWriter::value(int64_t number) {
  before_value();
  out_ += std::to_string(number);
}

void JsonWriter::value(uint64_t number) {
  before_value();
  out_ += std::to_string(number);
}

void JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
}

void JsonWriter::raw(const std::string& json_text) {
  before_value();
  out_ += json_text;
}

std::string json_escape(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

bool write_file_atomically(
    const std::string& path, const void* data, size_t size, std::string& error) {
  const std::string temporary = path + ".tmp" + std::to_string(static_cast<long>(getpid()));
  FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    error = "cannot open " + temporary + " for writing: " + std::strerror(errno);
    return false;
  }
  const size_t written = size == 0 ? 0 : std::fwrite(data, 1, size, file);
  const bool flushed = std::fflush(file) == 0;
  const bool closed = std::fclose(file) == 0;
  if (written != size || !flushed || !closed) {
    error = "cannot write " + temporary + ": " + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + temporary + " to " + path + ": " + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace etdeploy_runner
