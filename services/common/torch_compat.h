// Every difference between the LibTorch versions scdino builds against, in
// one place: Debian 12's 1.13 (the host build), Debian 13's 2.6 with CUDA
// (containers/Dockerfile.cuda) and NVIDIA's NGC 2.x. The rest of the code
// calls what is here and tests no version itself.
//
// What changed, and where it is used:
// - autocast: 2.4 replaced the per-device setters (set_enabled,
//   set_cpu_enabled, ...) with ones taking the device type (model/precision).
// - scaled_dot_product_attention: 2.0 added the fused attention (flash and
//   memory-efficient kernels on CUDA), 2.1 its `scale` argument and the
//   choice it makes, _fused_sdp_choice (model/attention_core, the step
//   benchmark).
// - _fused_adamw_: the fused AdamW, on CUDA from 2.1, on the CPU from 2.4
//   (model/optim).
// - SDPA's cuDNN backend and its switch: 2.4 (launch/environment).
// - c10d: 2.0 moved the collectives of Gloo and NCCL onto c10d::Backend;
//   2.4 gave ProcessGroupNCCL an explicit shutdown (training/distributed), which
//   2.6 made wait for pending work (abort is the forceful end), and
//   made TCPStore's libuv server the default (launch/coordinator).
// Stateless; every function is as thread-safe as the LibTorch call it wraps.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#define SCDINO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if SCDINO_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
// Only in the targets that have NCCL's header on their include path
// (training/, run/ define SCDINO_WITH_NCCL with it). USE_C10D_NCCL, c10d's own
// guard, is not enough: a pip torch's CMake package exports it to every
// target that links LibTorch, Debian's does not export it at all.
#if defined(SCDINO_WITH_NCCL) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace scdino::compat {

/// "1.13.1", "2.6.0": the LibTorch this program was compiled against.
inline const char* TorchVersion() { return TORCH_VERSION; }

// ---- autocast --------------------------------------------------------------

inline bool AutocastEnabled(torch::DeviceType t) {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(t);
#else
  return t == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void SetAutocastEnabled(torch::DeviceType t, bool on) {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(t, on);
#else
  t == torch::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
#endif
}

inline torch::ScalarType AutocastDtype(torch::DeviceType t) {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(t);
#else
  return t == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void SetAutocastDtype(torch::DeviceType t, torch::ScalarType d) {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(t, d);
#else
  t == torch::kCUDA ? at::autocast::set_autocast_gpu_dtype(d) : at::autocast::set_autocast_cpu_dtype(d);
#endif
}

// ---- fused attention -------------------------------------------------------

/// Whether this LibTorch has scaled_dot_product_attention with a scale.
constexpr bool kHaveScaledDotProductAttention = SCDINO_TORCH_AT_LEAST(2, 1);

/// softmax(q k^T * scale) v over [B, heads, N, d] tensors by LibTorch's fused
/// kernels (flash or memory-efficient attention on sm80+ GPUs, a math
/// fallback elsewhere). Only where kHaveScaledDotProductAttention.
inline torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               double scale) {
#if SCDINO_TORCH_AT_LEAST(2, 1)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/false, scale);
#else
  (void)q, (void)k, (void)v, (void)scale;
  TORCH_CHECK(false, "scaled_dot_product_attention needs LibTorch 2.1 or later; this is ", TORCH_VERSION);
#endif
}

// ---- cuDNN -----------------------------------------------------------------

/// Switches cuDNN off for this process, and SDPA's cuDNN attention backend
/// (2.4+; before, SDPA has none): what an image carrying the cuDNN
/// stand-in does at start, so that no call ever reaches it.
inline void SwitchCudnnOff() {
  at::globalContext().setUserEnabledCuDNN(false);
#if SCDINO_TORCH_AT_LEAST(2, 4)
  at::globalContext().setSDPUseCuDNN(false);
#endif
}

/// Whether cuDNN, and SDPA's cuDNN backend where there is one, may be used.
inline bool CudnnEnabled() { return at::globalContext().userEnabledCuDNN(); }
inline bool SdpaCudnnEnabled() {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  return at::globalContext().userEnabledCuDNNSDP();
#else
  return false;
#endif
}

// ---- fused AdamW -----------------------------------------------------------

/// Whether this LibTorch has the fused AdamW kernel (_fused_adamw_, one
/// launch for a whole parameter list) on CUDA: 2.1 and later; on the CPU
/// from 2.4.
constexpr bool kHaveFusedAdamW = SCDINO_TORCH_AT_LEAST(2, 1);
constexpr bool kHaveFusedAdamWOnCpu = SCDINO_TORCH_AT_LEAST(2, 4);

/// One AdamW update of every tensor of `params` (weight decay left to the
/// caller), each with its own step count (float32 scalars on the device,
/// already counted), skipped as a whole where found_inf (a float scalar)
/// is not 0. Only where kHaveFusedAdamW.
inline void FusedAdamW(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>& exp_avgs, std::vector<torch::Tensor>& exp_avg_sqs,
                       const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2, double eps,
                       const torch::Tensor& found_inf) {
#if SCDINO_TORCH_AT_LEAST(2, 1)
  std::vector<torch::Tensor> max_exp_avg_sqs;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
                    /*weight_decay=*/0.0, eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/{},
                    found_inf);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1, (void)beta2,
      (void)eps, (void)found_inf;
  TORCH_CHECK(false, "the fused AdamW needs LibTorch 2.1 or later; this is ", TORCH_VERSION);
#endif
}

/// The kernel scaled_dot_product_attention takes for these inputs here:
/// "flash", "memory-efficient", "cuDNN", "math" (2.1+); where the LibTorch
/// has no SDPA, says so.
inline std::string SdpaBackend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
#if SCDINO_TORCH_AT_LEAST(2, 1)
  switch (at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/false, scale)) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "memory-efficient";
    case 3: return "cuDNN";
    default: return "other";
  }
#else
  (void)q, (void)k, (void)v, (void)scale;
  return std::string("none (LibTorch ") + TORCH_VERSION + " has no SDPA)";
#endif
}

// ---- c10d ------------------------------------------------------------------

/// TCPStore options for the rendezvous. 2.4 made the libuv server the
/// default (useLibUV); Debian's LibTorch 2.6 is built without libuv and
/// refuses it ("use_libuv was requested but PyTorch was build without libuv
/// support"), so the classic server is asked for, which every version has.
inline c10d::TCPStoreOptions TcpStoreOptions() {
  c10d::TCPStoreOptions o;
#if SCDINO_TORCH_AT_LEAST(2, 2)
  o.useLibUV = false;
#endif
  return o;
}

/// Whether a TCPStore server takes over a socket the caller bound
/// (TCPStoreOptions::masterListenFd, LibTorch 2.2 on), so the rendezvous
/// can listen on one address; LibTorch 1.13's listens on every interface.
inline constexpr bool kStoreTakesListeningSocket = SCDINO_TORCH_AT_LEAST(2, 2);

/// Hands `fd`, bound and listening on the store's port, to the server.
/// Only where kStoreTakesListeningSocket.
inline void SetStoreListeningSocket(c10d::TCPStoreOptions& o, int fd) {
#if SCDINO_TORCH_AT_LEAST(2, 2)
  o.masterListenFd = fd;
#else
  (void)o, (void)fd;
  TORCH_CHECK(false, "TCPStoreOptions::masterListenFd needs LibTorch 2.2 or later; this is ", TORCH_VERSION);
#endif
}

/// What a Gloo or NCCL process group is an instance of.
#if SCDINO_TORCH_AT_LEAST(2, 0)
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

#if defined(SCDINO_WITH_NCCL) && defined(USE_C10D_NCCL)
/// Ends an NCCL process group's communicators now (2.4+); before, the
/// destructor does, and may wait on work of peers that already exited.
inline void ShutdownNccl(c10d::ProcessGroupNCCL& pg) {
#if SCDINO_TORCH_AT_LEAST(2, 4)
  pg.shutdown();
#else
  (void)pg;
#endif
}

/// Aborts an NCCL process group's communicators now, without waiting for
/// work in flight (which a lost peer never completes): the failure path.
inline void AbortNccl(c10d::ProcessGroupNCCL& pg) { pg.abort(); }
#endif

}  // namespace scdino::compat
