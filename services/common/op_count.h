// What a step asks of a GPU, counted on any device: every operator call
// LibTorch's dispatcher records (RecordFunction, every scope, nested calls
// included: what torch.profiler lists), and the host synchronisations among
// them, the calls after which a GPU's queue is empty until the host speaks
// again. docs/performance.md compares both with PyTorch's DINO step.
//
// A host synchronisation is counted for
// - aten::_local_scalar_dense: every item() and tensor-as-bool reaches it;
// - a blocking copy from a device into CPU memory (aten::copy_, not
//   non_blocking; on a CPU run there is none to see, so every read of a
//   step's values goes through training::Readback, which is marked);
// - scdino's own waits (HostWaitScope): a collective waited on the host, a
//   step's values read back.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace scdino {

/// Counts while it lives, on every thread (a global RecordFunction
/// callback). At most one at a time in a process. Thread-safe.
class OpCounter {
 public:
  struct Counts {
    int64_t ops = 0;         ///< every recorded call, all threads
    int64_t host_syncs = 0;  ///< the synchronisations among them
    /// Of `ops` and `host_syncs`: those on threads other than the one that
    /// created the counter (a loader's prefetch threads, other ranks run as
    /// threads).
    int64_t other_thread_ops = 0, other_thread_syncs = 0;
    /// Of `ops`: the calls LibTorch's CPU bmm makes inside itself (without
    /// MKL it loops over the matrices of a batch: a select, as_strided and
    /// resolve_conj for each), which a GPU's one bmm call does not. The
    /// same correction bench/python_train_step.py makes of PyTorch's count.
    int64_t inside_cpu_bmm = 0;
    std::map<std::string, int64_t> by_name;  ///< calls per name (all threads)
    std::map<std::string, int64_t> syncs_by_name;
  };

  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  /// The counts since construction or the last Take, and a fresh start.
  Counts Take();

  /// Called by the callback (public for it; not for other callers).
  void Record(const at::RecordFunction& fn);

 private:
  at::CallbackHandle handle_ = 0;
  std::thread::id owner_;
  std::mutex mu_;
  Counts counts_;  // guarded by mu_
};

/// Marks the enclosing scope as a host wait, "scdino::host_wait" in
/// torch.profiler's trace and a host synchronisation for OpCounter.
class HostWaitScope {
 public:
  HostWaitScope();

 private:
  at::RecordFunction guard_;
};

}  // namespace scdino
