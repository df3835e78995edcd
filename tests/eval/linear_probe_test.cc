// The linear probe: separable classes are learned, C is chosen on the
// validation part, one class is refused with the reason, a stop ends it.
#include "eval/linear_probe.h"

#include <gtest/gtest.h>

namespace scdino::eval {
namespace {

// Three classes around well separated centres in 6 dimensions.
void Classes(int64_t per, uint64_t seed, torch::Tensor* x, torch::Tensor* y) {
  torch::manual_seed(static_cast<int64_t>(seed));
  auto centres = torch::randn({3, 6}) * 4;
  *y = torch::arange(3).repeat_interleave(per);
  *x = centres.index_select(0, *y) + torch::randn({3 * per, 6});
}

TEST(LinearProbe, LearnsSeparableClassesAndChoosesCOnTheValidationPart) {
  torch::Tensor x, y, xt, yt;
  Classes(50, 1, &x, &y);
  torch::manual_seed(1);
  auto centres = torch::randn({3, 6}) * 4;
  yt = torch::arange(3).repeat_interleave(20);
  xt = centres.index_select(0, yt) + torch::randn({60, 6});
  auto r = LinearProbe(x, y, xt, 3, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t right = 0;
  for (int64_t i = 0; i < 60; ++i) right += r->predicted[static_cast<size_t>(i)] == yt[i].item<int64_t>();
  EXPECT_GE(right, 57);
  EXPECT_EQ(r->grid.size(), 6u);
  EXPECT_EQ(r->validation.size(), 6u);
  EXPECT_EQ(r->n_validation, 30);  // 20 % of each class's 50
  EXPECT_NE(std::find(r->grid.begin(), r->grid.end(), r->c), r->grid.end());
}

TEST(LinearProbe, OneClassIsRefusedWithTheReasonAndAStopEndsIt) {
  auto one = LinearProbe(torch::randn({10, 4}), torch::zeros({10}, torch::kInt64), torch::randn({3, 4}), 2, {});
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(one.status().message().find("1 class: a linear probe needs at least two"), std::string::npos);
  torch::Tensor x, y;
  Classes(10, 2, &x, &y);
  LinearProbeOptions o;
  o.should_stop = [] { return true; };
  EXPECT_EQ(LinearProbe(x, y, x, 3, o).status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace scdino::eval
