// Data-parallel training across processes: a c10d process group (Gloo for CPU
// tensors, NCCL for CUDA tensors where LibTorch has it) over the store of
// the run's Coordinator (launch/coordinator.h), and gradient all-reduce in
// buckets launched from autograd hooks as soon as a bucket's gradients are
// ready, so communication overlaps the rest of backward. A bucket is a
// slice of the model's flat gradient buffer (model/flat_params.h): reduced
// in place, no copy in or out. NCCL work is waited on the GPU stream, never
// by the host; a watchdog ends a rank whose collective does not complete.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/torch_compat.h"
#include "model/flat_params.h"
#include "training/device_mark.h"


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
  /// What the process does when an NCCL collective, which the host never
  /// waits for, has not completed after `timeout`: given the line that says
  /// so (LostCollectiveMessage), it must end the process, since no
  /// exception can reach a host that never waited. The services' mains
  /// pass process::ExitForLostPeer (exit code 9: the job requeues); this
  /// library never chooses an exit code. Unset, the line is said and the
  /// process aborts (never a silent hang).
  std::function<void(const std::string& message)> on_lost_peer;
};

/// Bounds the collectives the host does not wait for (NCCL work waited on
/// the stream): a thread looks at each in flight, and one unfinished after
/// `timeout` is reported to on_timeout, once. Thread-safe.
class CollectiveWatchdog {
 public:
  using OnTimeout = std::function<void(const std::string& what)>;
  /// `on_start` runs first on the watchdog's own thread: for NCCL it makes
  /// the group's GPU that thread's device, so that querying the work never
  /// makes a CUDA context on GPU 0 of a node whose processes see several.
  CollectiveWatchdog(std::chrono::milliseconds timeout, OnTimeout on_timeout,
                     std::function<void()> on_start = nullptr);
  /// Stops watching (what is in flight is no longer bounded).
  ~CollectiveWatchdog();
  /// Watches `work` from now; `what` names it in the report.
  void Watch(c10::intrusive_ptr<c10d::Work> work, std::string what);
  /// Collectives being watched now.
  size_t in_flight() const;

 private:
  struct Entry {
    c10::intrusive_ptr<c10d::Work> work;
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };
  void Run();

  // Constant after construction.
  std::chrono::milliseconds timeout_;
  OnTimeout on_timeout_;
  std::function<void()> on_start_;
  // State below is protected by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

/// What a rank says when its collective never completed: the rank, what,
/// the timeout and who is lost.
std::string LostCollectiveMessage(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout,
                                  const std::string& what, const std::string& lost);

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
  /// follow. Waits for work in flight: for the success path only.
  void Shutdown();
  /// Ends the group now, whatever is in flight: NCCL's communicators are
  /// aborted (since LibTorch 2.6 Shutdown waits for pending work, which a
  /// lost peer never completes); a Gloo group, whose threads would wait on
  /// the lost peers until its timeout, is left to the exiting process. For
  /// the failure path; no collective may follow.
  void Abort();
  /// Aborts unless Shutdown() ran: a Collective destroyed without it is on
  /// a failure path (an error returned, an exception unwinding).
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
  /// The result usable from here on: with NCCL the current stream waits
  /// for the work (the host does not; the watchdog bounds it), with Gloo
  /// the host waits, throwing Aborted after the timeout.
  void Wait(const c10::intrusive_ptr<c10d::Work>& work);
  /// What names the lost peers when an NCCL collective times out (the
  /// trainer's roll call); by default, "another rank has probably died or
  /// hangs".
  void set_describe_lost(std::function<std::string()> describe) { describe_lost_ = std::move(describe); }

 private:
  Collective() = default;
  c10::intrusive_ptr<compat::CollectiveBackend> pg_;
  torch::Device device_ = torch::kCPU;
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t rank_ = 0, world_size_ = 1;
  DistributedOptions options_;
  std::function<std::string()> describe_lost_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // NCCL only
};

/// Averages gradients over ranks. The trainable parameters' flat gradients
/// are cut into buckets of about bucket_bytes, contiguous slices in the
/// flat layout (about the order backward produces them); a hook on each
/// parameter's gradient accumulator marks a bucket ready when its last
/// gradient is in, and the ready buckets are launched in bucket order. Finish() launches what backward did not reach,
/// waits (on the stream with NCCL) and divides by the world size. Must
/// outlive every backward it hooks; `params` must outlive it.
class GradientAllReducer {
 public:
  GradientAllReducer(std::shared_ptr<Collective> collective, model::FlatParameters* params, int64_t bucket_bytes);
  /// Call after backward, before clipping (StepHooks::after_backward).
  void Finish();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  /// Seconds spent waiting on communication since the last call: the host's
  /// waits in Finish() (Gloo), and on a GPU the step stream's stalls on
  /// NCCL's, counted once the device has passed them (a step late).
  double TakeWaitSeconds();

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // in the flat gradients
    int64_t params = 0, pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void MarkReady(size_t param);
  void Launch(Bucket& b);

  std::shared_ptr<Collective> collective_;
  model::FlatParameters* params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  // Buckets are launched in index order on every rank, a ready one waiting
  // for those before it: NCCL (and Gloo) pair collectives by their order,
  // and backward may complete buckets in another order on each rank.
  size_t next_launch_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  double wait_seconds_ = 0.0;
  std::deque<std::pair<DeviceMark, DeviceMark>> device_waits_;  // not yet passed by the device
};

}  // namespace scdino::training
