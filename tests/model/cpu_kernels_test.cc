// The float kernels of services/model/cpu_kernels.cc, vectorized there,
// against the same operations one element at a time here: the same bits.
#include "model/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using scdino::model::AdamWRange;
using scdino::model::AdamWScalars;

// The reference: DINO's AdamW step as optim.cc computed it before the
// kernel moved, one element at a time (volatile keeps GCC from vectorizing
// it, so this side is scalar whatever the flags).
void ScalarAdamW(float* p, const float* g, float* ma, float* va, int64_t begin, int64_t end, const AdamWScalars& k) {
  for (volatile int64_t i = begin; i < end; i = i + 1) {
    const float gi = g[i];
    const float mi = ma[i] * k.beta1 + gi * k.one_minus_beta1;
    const float vi = va[i] * k.beta2 + k.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / k.correction2 + k.eps;
    ma[i] = mi;
    va[i] = vi;
    p[i] = p[i] * k.decay + k.step_size * mi / denom;
  }
}

TEST(CpuKernels, AdamWRangeGivesTheScalarLoopsBitsOnEverySliceAndLength) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 4099;  // not a multiple of any vector width
  std::vector<float> p(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = normal(rng);
    g[i] = normal(rng) * (i % 97 == 0 ? 1e-20f : 1e-2f);  // tiny gradients too: eps dominates
    m[i] = normal(rng) * 1e-3f;
    v[i] = std::abs(normal(rng)) * (i % 5 == 0 ? 0.0f : 1e-5f);  // zero second moments: sqrt(0)
  }
  const AdamWScalars k{0.9996f, 0.9f, 0.1f, 0.999f, 0.001f, std::sqrt(1.0f - std::pow(0.999f, 3.0f)), 1e-8f,
                       -1e-3f / (1.0f - std::pow(0.9f, 3.0f))};
  // Slices as ParallelFor hands them out, starting unaligned, and a few
  // steps so that the moments carry over.
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {1, 2050}, {3, 4}, {7, n - 5}}) {
    auto p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
    for (int step = 0; step < 3; ++step) {
      AdamWRange(p1.data(), g.data(), m1.data(), v1.data(), begin, end, k);
      ScalarAdamW(p2.data(), g.data(), m2.data(), v2.data(), begin, end, k);
    }
    EXPECT_EQ(std::memcmp(p1.data(), p2.data(), n * sizeof(float)), 0) << "parameters, slice " << begin << "-" << end;
    EXPECT_EQ(std::memcmp(m1.data(), m2.data(), n * sizeof(float)), 0) << "first moment, slice " << begin << "-" << end;
    EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * sizeof(float)), 0) << "second moment, slice " << begin << "-" << end;
    // Outside the slice nothing moved.
    if (begin > 0) {
      EXPECT_EQ(p1[begin - 1], p[begin - 1]);
    }
    if (end < n) {
      EXPECT_EQ(p1[end], p[end]);
    }
  }
}

}  // namespace
