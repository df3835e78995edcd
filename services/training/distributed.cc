#include "training/distributed.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#ifdef SCDINO_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef SCDINO_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/op_count.h"

namespace scdino::training {

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout, OnTimeout on_timeout,
                                       std::function<void()> on_start)
    : timeout_(timeout), on_timeout_(std::move(on_timeout)), on_start_(std::move(on_start)), thread_([this] {
        if (on_start_) on_start_();
        Run();
      }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::Watch(c10::intrusive_ptr<c10d::Work> work, std::string what) {
  std::lock_guard<std::mutex> l(mu_);
  entries_.push_back({std::move(work), std::move(what), std::chrono::steady_clock::now() + timeout_});
  cv_.notify_all();
}

size_t CollectiveWatchdog::in_flight() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

void CollectiveWatchdog::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    cv_.wait_for(l, std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::string> late;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->work->isCompleted()) {
        it = entries_.erase(it);
      } else if (now >= it->deadline) {
        late.push_back(std::move(it->what));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    if (late.empty()) continue;
    l.unlock();
    for (const auto& what : late) on_timeout_(what);
    l.lock();
  }
}

std::string LostCollectiveMessage(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout,
                                  const std::string& what, const std::string& lost) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ": " + what +
         " did not complete within " + std::to_string(timeout.count()) + " ms (scdino.distributed_timeout_s): " +
         lost;
}

bool HaveNccl() {
#ifdef SCDINO_WITH_NCCL
  return true;
#else
  return false;
#endif
}

StatusOr<std::shared_ptr<Collective>> Collective::Connect(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                          int64_t world_size, const DistributedOptions& options,
                                                          torch::Device device) {
  try {
    return Create(store, rank, world_size, options, device);
  } catch (const StatusError& e) {
    return e.status();
  } catch (const std::exception& e) {
    return Status::Unavailable("rank " + std::to_string(rank) + ": process group: " + e.what());
  }
}

std::shared_ptr<Collective> Collective::Create(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                               int64_t world_size, const DistributedOptions& options,
                                               torch::Device device) {
  std::shared_ptr<Collective> c(new Collective());
  c->store_ = store;
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->options_ = options;
  c->device_ = device;
  if (device.is_cuda()) {
#ifdef SCDINO_WITH_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    // NCCL's own watchdog aborts the process (exit 134, no word of the
    // peer) after its timeout: it comes a minute after ours.
    opts->timeout = options.timeout + std::chrono::minutes(1);
    c->pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(world_size),
                                                         opts);
    Collective* self = c.get();
    const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    c->watchdog_ = std::make_unique<CollectiveWatchdog>(
        options.timeout,
        [self](const std::string& what) {
          const std::string lost = self->describe_lost_ ? self->describe_lost_()
                                                        : std::string("another rank has probably died or hangs");
          const std::string message =
              LostCollectiveMessage(self->rank_, self->world_size_, self->options_.timeout, what, lost);
          if (self->options_.on_lost_peer) self->options_.on_lost_peer(message);
          std::cerr << "scdino: " << message << "; DistributedOptions::on_lost_peer "
                    << (self->options_.on_lost_peer ? "returned" : "is not set") << ": aborting" << std::endl;
          std::abort();
        },
        [index] { c10::cuda::set_device(index); });
    return c;
#else
    ThrowIfError(Status::FailedPrecondition(
        "a CUDA device needs an NCCL process group, and this build of scdino has none (LibTorch without CUDA/NCCL); "
        "build against a CUDA LibTorch (scripts/gpu-check.sh shows how)"));
#endif
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
  // The interface named by GLOO_SOCKET_IFNAME, else the one this host's
  // name resolves to (reachable from other nodes), else loopback.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    try {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    } catch (const std::exception&) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    }
  }
  try {
    c->pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(world_size),
                                                         opts);
  } catch (const std::exception& e) {
    ThrowIfError(Status::Unavailable("rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                                     ": the process group did not form within " +
                                     std::to_string(options.timeout.count()) +
                                     " ms (scdino.distributed_timeout_s): a rank never came or cannot be reached: " +
                                     e.what()));
  }
  return c;
}

void Collective::Shutdown() {
  watchdog_.reset();
  if (!pg_) return;
#ifdef SCDINO_WITH_NCCL
  if (device_.is_cuda()) {
    if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg_.get())) compat::ShutdownNccl(*nccl);
  }
#endif
  pg_.reset();
}

void Collective::Abort() {
  watchdog_.reset();
  if (!pg_) return;
#ifdef SCDINO_WITH_NCCL
  if (device_.is_cuda()) {
    if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg_.get())) {
      compat::AbortNccl(*nccl);
      pg_.reset();
      return;
    }
  }
#endif
  // Gloo's destructor joins threads that wait on the lost peers until its
  // timeout. The group is kept, unreleased and reachable, for the process
  // that is about to exit.
  static auto* abandoned = new std::vector<c10::intrusive_ptr<compat::CollectiveBackend>>();
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  abandoned->push_back(std::move(pg_));
}

Collective::~Collective() { Abort(); }

c10::intrusive_ptr<c10d::Work> Collective::AllReduceSumAsync(torch::Tensor& t) {
  std::vector<torch::Tensor> v{t};
  return pg_->allreduce(v);
}

void Collective::Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (watchdog_) {
    // The current stream waits for NCCL's; the host goes on.
    work->synchronize();
    watchdog_->Watch(work, "an all-reduce");
    return;
  }
  HostWaitScope host_wait;
  auto failed = [&](const std::string& why) {
    ThrowIfError(Status::Aborted("rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
                                 ": a collective failed or did not complete within " +
                                 std::to_string(options_.timeout.count()) +
                                 " ms; another rank has probably died or hangs: " + why));
  };
  try {
    work->wait(options_.timeout);
  } catch (const c10::Error& e) {
    failed(e.what_without_backtrace());
  } catch (const std::exception& e) {
    failed(e.what());
  }
}

void Collective::AllReduceSum(torch::Tensor& t) {
  if (t.device() == device_) {
    Wait(AllReduceSumAsync(t));
    return;
  }
  auto staged = t.to(device_);
  Wait(AllReduceSumAsync(staged));
  t.copy_(staged);
}


GradientAllReducer::GradientAllReducer(std::shared_ptr<Collective> collective, model::FlatParameters* params,
                                       int64_t bucket_bytes)
    : collective_(std::move(collective)), params_(params), bucket_of_(params_->trainable().size()) {
  const auto& entries = params_->entries();
  const int64_t element = params_->grads().element_size();
  Bucket current;
  for (size_t k = 0; k < params_->trainable().size(); ++k) {
    const auto& e = entries[k];
    if (current.params > 0 && (e.offset + e.numel - current.begin) * element > bucket_bytes) {
      buckets_.push_back(current);
      current = Bucket();
      current.begin = e.offset;
    }
    bucket_of_[k] = buckets_.size();
    current.end = e.offset + e.numel;
    ++current.params;
  }
  if (current.params > 0) buckets_.push_back(current);
  for (auto& b : buckets_) b.pending = b.params;
  const auto& trainable = params_->trainable();
  for (size_t k = 0; k < trainable.size(); ++k) {
    // The accumulator runs once per backward, after the incoming gradients
    // of every use of the parameter are summed into .grad (its view of the
    // flat gradients).
    auto acc = torch::autograd::impl::grad_accumulator(trainable[k].param);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          MarkReady(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

void GradientAllReducer::MarkReady(size_t k) {
  if (--buckets_[bucket_of_[k]].pending > 0) return;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) Launch(buckets_[next_launch_++]);
}

void GradientAllReducer::Launch(Bucket& b) {
  auto slice = params_->grads().narrow(0, b.begin, b.end - b.begin);
  b.work = collective_->AllReduceSumAsync(slice);
}

void GradientAllReducer::Finish() {
  torch::NoGradGuard guard;
  const auto t0 = std::chrono::steady_clock::now();
  while (next_launch_ < buckets_.size()) Launch(buckets_[next_launch_++]);
  const auto device = params_->grads().device();
  auto before = DeviceMark::Now(device);
  for (auto& b : buckets_) {
    collective_->Wait(b.work);
    b.work.reset();
    b.pending = b.params;
  }
  if (!before.empty()) device_waits_.emplace_back(std::move(before), DeviceMark::Now(device));
  next_launch_ = 0;
  params_->grads().div_(static_cast<double>(collective_->world_size()));
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double GradientAllReducer::TakeWaitSeconds() {
  double w = wait_seconds_;
  wait_seconds_ = 0.0;
  while (!device_waits_.empty()) {
    const auto passed = DeviceMark::Between(device_waits_.front().first, device_waits_.front().second);
    if (!passed) break;
    w += *passed;
    device_waits_.pop_front();
  }
  return w;
}

}  // namespace scdino::training
