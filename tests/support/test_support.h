// Helpers shared by the test suites: where the reference fixtures are, a
// scratch directory per test, and tensor comparisons that report where and by
// how much two tensors differ.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/status.h"
#include "support/test_paths.h"

namespace scdino::testing {

/// A build with AddressSanitizer or ThreadSanitizer (SCDINO_SANITIZE): its
/// allocator replaces glibc's, so tests of glibc's allocator settings skip.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedAllocator = true;
#else
inline constexpr bool kSanitizedAllocator = false;
#endif

/// ../shared beside the repository (CI has it there), or $SCDINO_SHARED_DIR.
inline std::string SharedDir() {
  if (const char* d = std::getenv("SCDINO_SHARED_DIR")) return d;
  return std::string(SourceDir()) + "/../shared";
}

/// The device the device checks run on: $SCDINO_TEST_DEVICE, "cpu" unless
/// set (scripts/gpu-first-contact.sh sets "cuda" on a lent GPU). A device
/// this process cannot use is an error, never a quiet CPU run.
inline torch::Device TestDevice() {
  const char* d = std::getenv("SCDINO_TEST_DEVICE");
  const torch::Device device(d && *d ? d : "cpu");
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error(std::string("SCDINO_TEST_DEVICE=") + d +
                             ", but this process sees no GPU (or LibTorch has no CUDA)");
  }
  return device;
}

/// A fresh directory under the build tree, removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "scratch";
    path_ = std::filesystem::path(BinaryDir()) / "test-scratch" / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(path_);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// `s` is InvalidArgument and its message mentions `needle`.
inline void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << " should mention " << needle;
}

/// |a - b| <= atol + rtol * |b| elementwise; on failure reports the worst
/// element, its values and the tensor's scale.
inline ::testing::AssertionResult AllClose(const torch::Tensor& a_in, const torch::Tensor& b_in, double rtol,
                                           double atol) {
  auto a = a_in.detach().to(torch::kCPU, torch::kFloat64);
  auto b = b_in.detach().to(torch::kCPU, torch::kFloat64);
  if (a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << "shape " << a.sizes() << " vs expected " << b.sizes();
  }
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  auto excess = (a - b).abs() - (b.abs() * rtol + atol);
  auto worst = excess.flatten().argmax().item<int64_t>();
  if (excess.flatten()[worst].item<double>() <= 0 && !a.isnan().any().item<bool>()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "element " << worst << ": got " << a.flatten()[worst].item<double>()
                                       << ", expected " << b.flatten()[worst].item<double>() << " (rtol " << rtol
                                       << ", atol " << atol << ", max |expected| " << b.abs().max().item<double>()
                                       << ", max |diff| " << (a - b).abs().max().item<double>() << ")";
}

/// The largest difference is within 1e-5 of the largest |want| (float32
/// products summed in another order: the fast paths against LibTorch's ops).
inline void ExpectCloseToScale(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (want.numel() == 0) return;
  const double err = (got - want).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * scale + 1e-7) << what << ": largest difference " << err << " of " << scale;
}

}  // namespace scdino::testing
