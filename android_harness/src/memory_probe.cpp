#include "memory_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__) || defined(__ANDROID__)
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <unistd.h>
#define ETDEPLOY_PROC_MEMORY 1
#elif defined(__APPLE__)
// Not built or run on the machine this was written on (no Mac): the task's
// physical footprint (what the OS's memory limits judge an app by) and the
// malloc zones' statistics, from <mach/task_info.h> and <malloc/malloc.h>.
#include <mach/mach.h>
#include <malloc/malloc.h>
#endif

namespace etdeploy_runner {

using executorch::runtime::DataLoader;
using executorch::runtime::Error;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;

// --- the counting allocator -----------------------------------------------------

void* CountingAllocator::allocate(size_t size, size_t alignment) {
  if (!isPowerOf2(alignment)) {
    return nullptr;
  }
  // As MallocMemoryAllocator: malloc guarantees max_align_t; a larger alignment
  // gets alignment - 1 extra bytes to align within.
  if (alignment > alignof(std::max_align_t)) {
    if (alignment - 1 >= SIZE_MAX - size) {
      return nullptr;
    }
    size += alignment - 1;
  }
  void* block = std::malloc(size);
  if (block == nullptr) {
    return nullptr;
  }
  blocks_.push_back(block);
  live_ += size;
  if (live_ > peak_) {
    peak_ = live_;
  }
  return alignPointer(block, alignment);
}

void CountingAllocator::reset() {
  for (void* block : blocks_) {
    std::free(block);
  }
  blocks_.clear();
  live_ = 0;
}

namespace {

#if defined(ETDEPLOY_PROC_MEMORY)

// A /proc file whole; empty when it cannot be read.
std::string read_proc(const char* path) {
  std::string text;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return text;
  }
  char buffer[16384];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got <= 0) {
      break;
    }
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return text;
}

// "Name:   1234 kB" anywhere in `text` (a line start), in bytes; -1 when absent.
int64_t kb_field(const std::string& text, const char* name) {
  const std::string wanted = std::string(name) + ":";
  size_t at = 0;
  while (at < text.size()) {
    if (text.compare(at, wanted.size(), wanted) == 0) {
      return std::strtoll(text.c_str() + at + wanted.size(), nullptr, 10) * 1024;
    }
    const size_t next = text.find('\n', at);
    if (next == std::string::npos) {
      break;
    }
    at = next + 1;
  }
  return -1;
}

int64_t statm_rss() {
  // statm's second field: resident pages, the counter VmRSS reads; cheaper than
  // status, so a checkpoint that finds nothing new costs one small read.
  const std::string text = read_proc("/proc/self/statm");
  const char* rest = std::strchr(text.c_str(), ' ');
  if (rest == nullptr) {
    return -1;
  }
  return std::strtoll(rest + 1, nullptr, 10) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

// Whether a mapping holds the C allocator's own pages: glibc's brk heap, and
// bionic's named anonymous mappings (scudo's and jemalloc's; not run here).
bool is_heap_mapping(const std::string& path) {
  return path == "[heap]" || path == "[anon:libc_malloc]" || path.rfind("[anon:scudo:", 0) == 0;
}

// /proc/self/smaps summed by what the pages belong to: the program's files
// (`paths`), the other files mapped (the runner's and its libraries' code and
// data, written pages included), and the allocator's heap mappings.
void mapping_pages(const std::vector<std::string>& paths, MemorySnapshot& s) {
  const std::string text = read_proc("/proc/self/smaps");
  if (text.empty()) {
    return;
  }
  s.program_rss = s.program_pss = s.files_rss = s.heap_rss = 0;
  enum class Owner { kProgram, kFiles, kHeap, kOther } owner = Owner::kOther;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) {
      end = text.size();
    }
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const std::string first = line.substr(0, line.find(' '));
    if (!first.empty() && first.back() == ':') {
      const bool rss = first == "Rss:";
      if (!rss && first != "Pss:") {
        continue;
      }
      const int64_t bytes = std::strtoll(line.c_str() + 4, nullptr, 10) * 1024;
      if (owner == Owner::kProgram) {
        (rss ? s.program_rss : s.program_pss) += bytes;
      } else if (rss && owner == Owner::kFiles) {
        s.files_rss += bytes;
      } else if (rss && owner == Owner::kHeap) {
        s.heap_rss += bytes;
      }
      continue;
    }
    // A mapping's header: address perms offset dev inode, then the path.
    size_t position = 0;
    for (int field = 0; field < 5 && position != std::string::npos; ++field) {
      position = line.find_first_not_of(' ', position);
      position = position == std::string::npos ? position : line.find(' ', position);
    }
    std::string path;
    if (position != std::string::npos) {
      const size_t start = line.find_first_not_of(' ', position);
      if (start != std::string::npos) {
        path = line.substr(start);
      }
    }
    owner = Owner::kOther;
    for (const std::string& wanted : paths) {
      if (path == wanted) {
        owner = Owner::kProgram;
      }
    }
    if (owner == Owner::kOther && !path.empty() && path[0] == '/') {
      owner = Owner::kFiles;
    } else if (owner == Owner::kOther && is_heap_mapping(path)) {
      owner = Owner::kHeap;
    }
  }
}

#endif  // ETDEPLOY_PROC_MEMORY

void read_heap(MemorySnapshot& snapshot) {
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33)
  // glibc 2.33 added mallinfo2 (size_t fields; mallinfo's ints wrap at 2 GiB).
  // uordblks: in-use bytes of every arena; hblkhd: chunks served by mmap
  // (malloc/malloc.c, __libc_mallinfo2 sums all arenas).
  const struct mallinfo2 info = mallinfo2();
#else
  const struct mallinfo info = mallinfo();
#endif
  snapshot.heap = static_cast<int64_t>(info.uordblks) + static_cast<int64_t>(info.hblkhd);
  snapshot.heap_mmapped = static_cast<int64_t>(info.hblkhd);
  snapshot.heap_free = static_cast<int64_t>(info.fordblks);
#elif defined(__BIONIC__)
  // Not run on a phone here. bionic's mallinfo has size_t fields; its uordblks is
  // the allocated bytes for both of its allocators (scudo and jemalloc), while
  // jemalloc's hblkhd is everything mapped, so it is not added.
  const struct mallinfo info = mallinfo();
  snapshot.heap = static_cast<int64_t>(info.uordblks);
  snapshot.heap_free = static_cast<int64_t>(info.fordblks);
#elif defined(__APPLE__)
  malloc_statistics_t stats;
  malloc_zone_statistics(nullptr, &stats);
  snapshot.heap = static_cast<int64_t>(stats.size_in_use);
  snapshot.heap_free = static_cast<int64_t>(stats.size_allocated - stats.size_in_use);
#else
  (void)snapshot;
#endif
}

// Resets the kernel's peak resident set (VmHWM) to the current one. Linux 4.0
// added this: writing "5" to /proc/PID/clear_refs "resets the peak resident set
// size" (commit 695f055936938c674473ea071ca7359a863551e7, 2015, documented in
// Documentation/filesystems/proc.rst and proc_pid_clear_refs(5); read
// 2026-12-04). The file is writable by the process's owner; unlike 1-4 this
// value walks no page table, so the reset itself costs nothing later. False
// where it is refused (an older kernel, a sandbox): the peak then runs from the
// process's start.
bool reset_peak() {
#if defined(ETDEPLOY_PROC_MEMORY)
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  const bool written = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return written;
#else
  return false;
#endif
}

void write_snapshot(JsonWriter& json, const MemorySnapshot& s) {
  const auto field = [&json](const char* name, int64_t value) {
    json.key(name);
    if (value < 0) {
      json.null();
    } else {
      json.value(value);
    }
  };
  json.begin_object();
  field("rss", s.rss);
  field("rss_anon", s.rss_anon);
  field("rss_file", s.rss_file);
  field("rss_shmem", s.rss_shmem);
  field("pss", s.pss);
  field("hwm", s.hwm);
  field("footprint", s.footprint);
  field("program_rss", s.program_rss);
  field("program_pss", s.program_pss);
  field("files_rss", s.files_rss);
  field("heap_rss", s.heap_rss);
  field("heap", s.heap);
  field("heap_mmapped", s.heap_mmapped);
  field("heap_free", s.heap_free);
  field("method_allocator", s.method_allocator);
  field("temp_allocator", s.temp_allocator);
  field("runner_io", s.runner_io);
  json.end_object();
}

const char* platform_source() {
#if defined(ETDEPLOY_PROC_MEMORY)
  return "linux-proc";
#elif defined(__APPLE__)
  return "macos-task";
#else
  return "unavailable";
#endif
}

const char* heap_source() {
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33)
  return "mallinfo2";
#else
  return "mallinfo";
#endif
#elif defined(__BIONIC__)
  return "mallinfo";
#elif defined(__APPLE__)
  return "malloc_zone_statistics";
#else
  return nullptr;
#endif
}

}  // namespace

// --- the probe -------------------------------------------------------------------

MemoryProbe::MemoryProbe(const std::vector<std::string>& program_files,
                         CountingAllocator* method_allocator,
                         CountingAllocator* temp_allocator)
    : method_allocator_(method_allocator), temp_allocator_(temp_allocator) {
  for (const std::string& file : program_files) {
    if (file.empty()) {
      continue;
    }
#if defined(ETDEPLOY_PROC_MEMORY)
    // smaps names a mapping by its file's canonical path.
    char resolved[PATH_MAX];
    program_paths_.push_back(::realpath(file.c_str(), resolved) != nullptr ? resolved : file);
#else
    program_paths_.push_back(file);
#endif
  }
}

MemorySnapshot MemoryProbe::take() const {
  const auto started = std::chrono::steady_clock::now();
  MemorySnapshot s;
#if defined(ETDEPLOY_PROC_MEMORY)
  const std::string status = read_proc("/proc/self/status");
  s.rss = kb_field(status, "VmRSS");
  s.rss_anon = kb_field(status, "RssAnon");
  s.rss_file = kb_field(status, "RssFile");
  s.rss_shmem = kb_field(status, "RssShmem");
  s.hwm = kb_field(status, "VmHWM");
  // smaps_rollup (Linux 4.14) sums every mapping's Pss in the kernel.
  s.pss = kb_field(read_proc("/proc/self/smaps_rollup"), "Pss");
  mapping_pages(program_paths_, s);
#elif defined(__APPLE__)
  task_vm_info_data_t info;
  mach_msg_type_number_t count = TASK_VM_INFO_COUNT;
  if (task_info(mach_task_self(), TASK_VM_INFO, reinterpret_cast<task_info_t>(&info), &count) ==
      KERN_SUCCESS) {
    s.rss = static_cast<int64_t>(info.resident_size);
    s.footprint = static_cast<int64_t>(info.phys_footprint);
    // The footprint's lifetime peak (TASK_VM_INFO revision 4); no call resets it.
    s.hwm = count >= TASK_VM_INFO_REV4_COUNT
                ? static_cast<int64_t>(info.ledger_phys_footprint_peak)
                : static_cast<int64_t>(info.resident_size_peak);
  }
#endif
  read_heap(s);
  s.method_allocator = static_cast<int64_t>(method_allocator_->used_size());
  s.temp_allocator = static_cast<int64_t>(temp_allocator_->used_size());
  s.runner_io = runner_io_;
  spent_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return s;
}

void MemoryProbe::take_baseline() { baseline_ = take(); }

void MemoryProbe::begin_phase(const char* name) {
  Phase phase;
  phase.name = name;
  phase.peak_reset = reset_peak();
  phases_.push_back(std::move(phase));
  temp_allocator_->reset_peak();
  best_rss_ = -1;
  in_phase_ = true;
}

void MemoryProbe::checkpoint() {
  if (!in_phase_) {
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  Phase& phase = phases_.back();
  ++phase.checkpoints;
#if defined(ETDEPLOY_PROC_MEMORY)
  const int64_t rss = statm_rss();
#else
  const int64_t rss = 0;
#endif
  spent_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (rss > best_rss_) {
    phase.at_peak = take();
    best_rss_ = rss;
  }
}

void MemoryProbe::end_phase() {
  if (!in_phase_) {
    return;
  }
  Phase& phase = phases_.back();
  phase.end = take();
  phase.temp_peak = static_cast<int64_t>(temp_allocator_->peak());
  if (phase.end.rss >= best_rss_) {
    phase.at_peak = phase.end;
  }
  // The kernel's RSS counters are summed lazily across CPUs (mm_struct's
  // rss_stat), so a reading taken mid-phase can stand a few pages above the
  // VmHWM read at its end; the peak is at least what was read.
  phase.peak = phase.end.hwm < 0 ? -1 : std::max(phase.end.hwm, phase.at_peak.rss);
  if (phase.peak > highest_peak_) {
    highest_peak_ = phase.peak;
  }
  in_phase_ = false;
}

void MemoryProbe::write_json(JsonWriter& json) const {
  json.begin_object();
  json.key("schema");
  json.value("etdeploy.runner_memory/1");
  json.key("source");
  json.value(platform_source());
  json.key("heap_source");
  if (const char* heap = heap_source(); heap != nullptr) {
    json.value(heap);
  } else {
    json.null();
  }
  json.key("program_files");
  json.begin_array();
  for (const std::string& path : program_paths_) {
    json.value(path);
  }
  json.end_array();
  json.key("planned_buffers");
  json.begin_array();
  for (const int64_t size : planned_) {
    json.value(size);
  }
  json.end_array();
  json.key("probe_ms");
  json.value(spent_s_ * 1000.0);
  json.key("baseline");
  write_snapshot(json, baseline_);
  json.key("phases");
  json.begin_array();
  for (const Phase& phase : phases_) {
    json.begin_object();
    json.key("name");
    json.value(phase.name);
    json.key("peak");
    if (phase.peak < 0) {
      json.null();
    } else {
      json.value(phase.peak);
    }
    json.key("peak_reset");
    json.value(phase.peak_reset);
    json.key("temp_allocator_peak");
    json.value(phase.temp_peak);
    json.key("checkpoints");
    json.value(static_cast<int64_t>(phase.checkpoints));
    json.key("at_peak");
    write_snapshot(json, phase.at_peak);
    json.key("end");
    write_snapshot(json, phase.end);
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

// --- the checkpointing loader -------------------------------------------------------

namespace {

// A buffer of the inner loader, held until the runtime frees the one it was given.
struct HeldBuffer {
  FreeableBuffer buffer;
  MemoryProbe* probe;

  static void free(void* context, void* /*data*/, size_t /*size*/) {
    auto* held = static_cast<HeldBuffer*>(context);
    held->probe->checkpoint();
    delete held;  // frees the inner buffer (an mmap'd range is unmapped)
  }
};

}  // namespace

Result<FreeableBuffer> CheckpointingDataLoader::load(
    size_t offset, size_t size, const SegmentInfo& segment_info) const {
  Result<FreeableBuffer> loaded = inner_->load(offset, size, segment_info);
  if (!loaded.ok() || !loaded->data_safe().ok()) {
    return loaded;  // an error, or a buffer that is not a pointer: handed on as it is
  }
  auto* held = new (std::nothrow) HeldBuffer{std::move(loaded.get()), probe_};
  if (held == nullptr) {
    return Error::MemoryAllocationFailed;
  }
  return FreeableBuffer(held->buffer.data(), held->buffer.size(), &HeldBuffer::free, held);
}

Error CheckpointingDataLoader::load_into(size_t offset, size_t size,
                                         const SegmentInfo& segment_info, void* buffer) const {
  return inner_->load_into(offset, size, segment_info, buffer);
}

Result<size_t> CheckpointingDataLoader::size() const { return inner_->size(); }

}  // namespace etdeploy_runner
