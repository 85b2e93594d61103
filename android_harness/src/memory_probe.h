// What the runner measures of its own memory with --memory, per phase of a run:
// load (program and method), the first execution, and the steady state (the
// rest of the warm-ups and the timed executions).
//
// No thread polls: the process is read at the edges of each phase, and during the
// load also at the moments memory is about to fall (a delegate handing back the
// program bytes it compiled from: the peak is just before). The kernel keeps the
// peak itself: VmHWM, reset at the start of each phase where the kernel allows
// (see reset_peak in memory_probe.cpp).
//
// Per snapshot: the process's resident set (anonymous, file-backed, shared) and
// its PSS; the resident pages of the mapped program and data files; the heap the
// C allocator has handed out (glibc: mallinfo2; bionic: mallinfo; macOS: the
// malloc zones' statistics); and what ExecuTorch's allocators hold (the method
// allocator's bytes, the temp allocator's, the planned buffers' sizes). etdeploy
// turns these into one account whose parts sum to the phase's peak
// (etdeploy/memory/account.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <executorch/runtime/core/data_loader.h>
#include <executorch/runtime/core/memory_allocator.h>

#include "json_writer.h"

namespace etdeploy_runner {

// MallocMemoryAllocator's behaviour (every allocate() a malloc, reset() frees
// them all; size() stays 0, so the runtime never carves tensor metadata out of
// it) that also counts what it holds now and the most it held since
// reset_peak(). ExecuTorch's MallocMemoryAllocator does not override
// used_size(), so this is where the method and temp allocators' bytes come from.
class CountingAllocator : public executorch::runtime::MemoryAllocator {
 public:
  CountingAllocator() : MemoryAllocator(0, nullptr) {}
  ~CountingAllocator() override { reset(); }
  CountingAllocator(const CountingAllocator&) = delete;
  CountingAllocator& operator=(const CountingAllocator&) = delete;

  void* allocate(size_t size, size_t alignment = kDefaultAlignment) override;
  void reset() override;
  size_t used_size() const override { return live_; }

  size_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_; }

 private:
  std::vector<void*> blocks_;
  size_t live_ = 0;
  size_t peak_ = 0;
};

// One reading of the process. A field the platform cannot give is -1 (written
// as null).
struct MemorySnapshot {
  int64_t rss = -1;          // resident set (VmRSS)
  int64_t rss_anon = -1;     // of it: anonymous (RssAnon)
  int64_t rss_file = -1;     // file-backed (RssFile)
  int64_t rss_shmem = -1;    // shared memory (RssShmem)
  int64_t pss = -1;          // proportional set size (smaps_rollup)
  int64_t hwm = -1;          // the peak resident set so far (VmHWM)
  int64_t footprint = -1;    // macOS: the task's physical footprint
  int64_t program_rss = -1;  // resident pages of the mapped .pte/.ptd
  int64_t program_pss = -1;
  int64_t files_rss = -1;    // resident pages of every other file mapped (code, data)
  int64_t heap_rss = -1;     // resident pages of the allocator's heap mappings
  int64_t heap = -1;         // bytes the C allocator handed out and not freed
  int64_t heap_mmapped = -1; // of them: in chunks of their own mapping (glibc)
  int64_t heap_free = -1;    // bytes it holds free (arenas' free chunks)
  int64_t method_allocator = 0;
  int64_t temp_allocator = 0;
  int64_t runner_io = 0;     // the runner's own input buffers
};

class MemoryProbe {
 public:
  // `program_files`: the .pte and .ptd as given; their mappings are found by
  // their real paths.
  MemoryProbe(const std::vector<std::string>& program_files,
              CountingAllocator* method_allocator, CountingAllocator* temp_allocator);

  // The process before the program: taken once, before the load phase.
  void take_baseline();
  void set_planned_buffers(std::vector<int64_t> sizes) { planned_ = std::move(sizes); }
  void set_runner_io_bytes(int64_t bytes) { runner_io_ = bytes; }

  void begin_phase(const char* name);
  // Memory may be about to fall: keep this reading if it is the phase's highest.
  void checkpoint();
  void end_phase();
  bool in_phase() const { return in_phase_; }
  // The highest peak of the phases so far (VmHWM is reset between them).
  int64_t highest_peak() const { return highest_peak_; }
  // Time the probe's own reads took, in milliseconds (taken out of load_ms).
  double spent_ms() const { return spent_s_ * 1000.0; }

  // The "memory" object of --result_json.
  void write_json(JsonWriter& json) const;

 private:
  struct Phase {
    std::string name;
    int64_t peak = -1;
    bool peak_reset = false;
    int64_t temp_peak = 0;
    int checkpoints = 0;
    MemorySnapshot at_peak;
    MemorySnapshot end;
  };

  MemorySnapshot take() const;

  std::vector<std::string> program_paths_;
  CountingAllocator* method_allocator_;
  CountingAllocator* temp_allocator_;
  std::vector<int64_t> planned_;
  int64_t runner_io_ = 0;
  MemorySnapshot baseline_;
  std::vector<Phase> phases_;
  bool in_phase_ = false;
  int64_t best_rss_ = -1;
  int64_t highest_peak_ = -1;
  mutable double spent_s_ = 0.0;
};

// A DataLoader that hands out its inner loader's buffers and, when the runtime
// frees one (a delegate done with the program bytes it compiled from), lets the
// probe read the process first: the load phase's peak is just before such a
// free. Used only with --memory.
class CheckpointingDataLoader : public executorch::runtime::DataLoader {
 public:
  CheckpointingDataLoader(const executorch::runtime::DataLoader* inner, MemoryProbe* probe)
      : inner_(inner), probe_(probe) {}

  executorch::runtime::Result<executorch::runtime::FreeableBuffer> load(
      size_t offset, size_t size, const SegmentInfo& segment_info) const override;
  executorch::runtime::Error load_into(size_t offset, size_t size,
                                       const SegmentInfo& segment_info,
                                       void* buffer) const override;
  executorch::runtime::Result<size_t> size() const override;

 private:
  const executorch::runtime::DataLoader* inner_;
  MemoryProbe* probe_;
};

}  // namespace etdeploy_runner
