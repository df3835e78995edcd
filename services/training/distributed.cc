#include "training/distributed.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#ifdef SCDINO_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>

namespace scdino::training {

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
    opts->timeout = options.timeout;
    c->pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(world_size),
                                                         opts);
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
  if (!pg_) return;
#ifdef SCDINO_WITH_NCCL
  if (device_.is_cuda()) {
    if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg_.get())) compat::ShutdownNccl(*nccl);
  }
#endif
  pg_.reset();
}

Collective::~Collective() { Shutdown(); }

c10::intrusive_ptr<c10d::Work> Collective::AllReduceSumAsync(torch::Tensor& t) {
  std::vector<torch::Tensor> v{t};
  return pg_->allreduce(v);
}

void Collective::Wait(const c10::intrusive_ptr<c10d::Work>& work) {
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


GradientAllReducer::GradientAllReducer(std::shared_ptr<Collective> collective, std::vector<model::NamedParam> params,
                                       int64_t bucket_bytes)
    : collective_(std::move(collective)), params_(std::move(params)), bucket_of_(params_.size()) {
  Bucket current;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k].param;
    if (!current.params.empty() && bytes + p.numel() * p.element_size() > bucket_bytes) {
      buckets_.push_back(std::move(current));
      current = Bucket();
      bytes = 0;
    }
    bucket_of_[k] = buckets_.size();
    current.params.push_back(k);
    current.numel += p.numel();
    bytes += p.numel() * p.element_size();
  }
  if (!current.params.empty()) buckets_.push_back(std::move(current));
  for (auto& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    // The accumulator runs once per backward, after the incoming gradients
    // of every use of the parameter are summed into .grad.
    auto acc = torch::autograd::impl::grad_accumulator(params_[k].param);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          MarkReady(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

void GradientAllReducer::MarkReady(size_t k) {
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) Launch(b);
}

void GradientAllReducer::Launch(Bucket& b) {
  torch::NoGradGuard guard;
  std::vector<torch::Tensor> parts;
  for (size_t k : b.params) {
    const auto& p = params_[k].param;
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
  }
  b.flat = torch::cat(parts);
  b.work = collective_->AllReduceSumAsync(b.flat);
}

void GradientAllReducer::Finish() {
  torch::NoGradGuard guard;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) {
    if (!b.work) Launch(b);
  }
  const double inv = 1.0 / static_cast<double>(collective_->world_size());
  for (auto& b : buckets_) {
    collective_->Wait(b.work);
    int64_t offset = 0;
    for (size_t k : b.params) {
      auto& p = params_[k].param;
      auto avg = b.flat.slice(0, offset, offset + p.numel()).view(p.sizes()).mul_(inv);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        p.mutable_grad() = avg.clone();
      }
      offset += p.numel();
    }
    b.work.reset();
    b.flat = torch::Tensor();
    b.pending = static_cast<int64_t>(b.params.size());
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double GradientAllReducer::TakeWaitSeconds() {
  double w = wait_seconds_;
  wait_seconds_ = 0.0;
  return w;
}

}  // namespace scdino::training
