// The thread pool entry points the runner calls.
//
// The executorch 1.5.1 wheel ships libexecutorch_threadpool.so but only
// extension/threadpool/threadpool_guard.h among its headers (checked in the
// wheel's include/ on 2026-12-02). These declarations match upstream's
// extension/threadpool/threadpool.h and cpuinfo_utils.h and the symbols the
// library exports (nm -DC libexecutorch_threadpool.so). Only non-virtual member
// functions are declared and the class is used through a pointer, so the
// layout, which lives in the library, never matters here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <executorch/extension/threadpool/threadpool_guard.h>

namespace executorch::extension::threadpool {

class ThreadPool final {
 public:
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);

 private:
  ThreadPool() = default;
};

ThreadPool* get_threadpool();

}  // namespace executorch::extension::threadpool

namespace executorch::extension::cpuinfo {

uint32_t get_num_performant_cores();

}  // namespace executorch::extension::cpuinfo
