#pragma once
// scdino's one-pass float32 CPU kernels over raw buffers, without LibTorch:
// cpu_kernels.cc compiles alone, without the precompiled LibTorch header and
// with -fno-math-errno, so that GCC keeps their loops in vector registers
// (services/model/CMakeLists.txt; docs/performance.md, "AdamW in vector
// registers").

#include <cstdint>

namespace scdino::model {

/// The scalars of one AdamW update (optim.cc computes them per step).
struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, correction2, eps, step_size;
};

/// AdamW on elements [begin, end) of the parameters p, their gradients g
/// and the two moments ma, va (none of them overlapping), in the reference's
/// operations and order: the same bits as the scalar loop.
void AdamWRange(float* p, const float* g, float* ma, float* va, int64_t begin, int64_t end, AdamWScalars k);

}  // namespace scdino::model
