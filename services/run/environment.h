// Where a process of a run works: its CPU threads, its device (the GPU of
// its local rank, made current before any CUDA work) and its run directory
// (created, with temporaries of killed writers removed).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "common/status.h"
#include "run/config.h"
#include "run/launch.h"

namespace scdino::run {

/// Sets LibTorch's intra-op threads and OpenBLAS's threads (when it is the
/// BLAS in use) to `threads` (0: all cores), and keeps freed memory in the
/// process for reuse (glibc's mmap threshold at its 32 MiB maximum, no
/// trimming of the heap): every training step allocates and frees the same
/// large tensors, and memory handed back to the kernel costs a page fault
/// per 4 KiB when touched again (docs/performance.md). Returns the thread
/// count set.
int ConfigureCpu(int64_t threads);

/// scdino.device for this process: the CPU, or the GPU of its local rank,
/// which becomes the current CUDA device. Refuses more ranks on a node than
/// it has GPUs (rather than sharing one), and CUDA without a CUDA device or
/// build, naming the config and the counts.
StatusOr<torch::Device> PickDevice(const RunConfig& config, const LaunchInfo& launch);

/// Whether `device` computes in bf16 (CUDA compute capability >= 8.0; the
/// CPU path trains in fp32 whatever this says).
bool DeviceSupportsBf16(torch::Device device);

/// Creates the run directory and removes the temporaries killed writers
/// left in it and in the file_sd directory.
Status PrepareRunDir(const RunConfig& config);

}  // namespace scdino::run
