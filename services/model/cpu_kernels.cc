#include "model/cpu_kernels.h"

#include <cmath>

namespace scdino::model {

// With -fno-math-errno (this file only) std::sqrt is one instruction with no
// errno branch, and GCC vectorizes the loop; vector and scalar square roots
// and divisions are both correctly rounded, so the results do not change.
// The scalars come by value and the buffers are declared unaliased, so
// nothing is reloaded between elements.
void AdamWRange(float* __restrict p, const float* __restrict g, float* __restrict ma, float* __restrict va,
                int64_t begin, int64_t end, const AdamWScalars k) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = ma[i] * k.beta1 + gi * k.one_minus_beta1;
    const float vi = va[i] * k.beta2 + k.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / k.correction2 + k.eps;
    ma[i] = mi;
    va[i] = vi;
    p[i] = p[i] * k.decay + k.step_size * mi / denom;
  }
}

}  // namespace scdino::model
