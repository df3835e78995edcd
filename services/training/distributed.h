// Data-parallel training across processes: a c10d process group (Gloo for CPU
// tensors, NCCL for CUDA tensors where LibTorch has it) over the store of
// the run's Coordinator (run/coordinator.h), and gradient all-reduce in
// buckets launched from autograd hooks as soon as a bucket's gradients are
// ready, so communication overlaps the rest of backward.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/torch_compat.h"
#include "model/optim.h"


namespace scdino::training {

/// Whether this build can run NCCL process groups (a CUDA LibTorch with
/// c10d NCCL); Debian's CPU LibTorch cannot.
bool HaveNccl();

struct DistributedOptions {
  /// Rendezvous and collective timeout: a rank that dies or hangs makes the
  /// others fail after this long instead of waiting forever.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Gradient bytes per all-reduce bucket.
  int64_t bucket_bytes = 25 << 20;
};

/// One process's membership of the group. Thread-compatible: one training
/// loop uses it.
class Collective {
 public:
  /// Over the rendezvous store (the Coordinator's; tests run ranks as
  /// threads on a HashStore). NCCL for a CUDA device, Gloo for the CPU.
  /// Unavailable names the rank and the reason when the group cannot form.
  static StatusOr<std::shared_ptr<Collective>> Connect(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                       int64_t world_size, const DistributedOptions& options,
                                                       torch::Device device);
  /// As Connect, throwing StatusError (tests).
  static std::shared_ptr<Collective> Create(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                            int64_t world_size, const DistributedOptions& options,
                                            torch::Device device);
  /// Ends the group cleanly once every rank is done (NCCL's communicators
  /// are shut down rather than left to the destructor); no collective may
  /// follow.
  void Shutdown();
  ~Collective();

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  const DistributedOptions& options() const { return options_; }
  /// "gloo" or "nccl".
  const char* backend() const { return device_.is_cuda() ? "nccl" : "gloo"; }

  /// In-place sum over ranks; throws naming the timeout when a peer is gone.
  /// With NCCL a CPU tensor (a metric, a decision) goes through the device.
  void AllReduceSum(torch::Tensor& t);
  /// `t` must be on the group's device.
  c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor& t);
  void Wait(const c10::intrusive_ptr<c10d::Work>& work);

 private:
  Collective() = default;
  c10::intrusive_ptr<compat::CollectiveBackend> pg_;
  torch::Device device_ = torch::kCPU;
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t rank_ = 0, world_size_ = 1;
  DistributedOptions options_;
};

/// Averages gradients over ranks. Parameters are grouped in reverse order
/// (roughly the order backward produces their gradients) into buckets of
/// about bucket_bytes; a hook on each parameter's gradient accumulator
/// launches a bucket's all-reduce when its last gradient is in. Finish()
/// launches what backward did not reach, waits, and writes the averages
/// back. Must outlive every backward it hooks.
class GradientAllReducer {
 public:
  GradientAllReducer(std::shared_ptr<Collective> collective, std::vector<model::NamedParam> params,
                     int64_t bucket_bytes);
  /// Call after backward, before clipping (StepHooks::after_backward).
  void Finish();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  /// Seconds Finish() spent waiting on communication, summed since the last call.
  double TakeWaitSeconds();

 private:
  struct Bucket {
    std::vector<size_t> params;
    int64_t numel = 0;
    int64_t pending = 0;
    torch::Tensor flat;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void MarkReady(size_t param);
  void Launch(Bucket& b);

  std::shared_ptr<Collective> collective_;
  std::vector<model::NamedParam> params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  double wait_seconds_ = 0.0;
};

}  // namespace scdino::training
