// Classification metrics against hand-worked examples. Every expected number
// is derived in the comments from the confusion matrix, as sklearn
// (zero_division=0) would report it, and written as a literal fraction so
// that the test does not repeat the implementation's formulas.
#include "eval/classification_metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace scdino::eval {
namespace {

constexpr double kTol = 1e-12;

void ExpectClass(const ClassMetrics& m, const std::string& name, double p, double r, double f1, int64_t support,
                 int64_t predicted) {
  SCOPED_TRACE(name);
  EXPECT_EQ(m.name, name);
  EXPECT_NEAR(m.precision, p, kTol);
  EXPECT_NEAR(m.recall, r, kTol);
  EXPECT_NEAR(m.f1, f1, kTol);
  EXPECT_EQ(m.support, support);
  EXPECT_EQ(m.predicted, predicted);
}

TEST(EvaluateTest, ThreeClassImbalanced) {
  // Confusion [true][pred]:
  //        a  b  c   support
  //   a  [ 4  1  0 ]  5
  //   b  [ 1  2  0 ]  3
  //   c  [ 0  1  1 ]  2
  //   predicted 5 4 1
  // precision: a 4/5, b 2/4, c 1/1
  // recall:    a 4/5, b 2/3, c 1/2
  // f1 = 2tp/(support+predicted): a 8/10, b 4/7, c 2/3
  // accuracy = 7/10
  // macro P = (0.8 + 0.5 + 1)/3 = 2.3/3
  // macro R = (72/90 + 60/90 + 45/90)/3 = 59/90 (= balanced accuracy)
  // macro F1 = (84/105 + 60/105 + 70/105)/3 = 214/315
  // weighted F1 = (5*0.8 + 3*4/7 + 2*2/3)/10 = (84+36+28)/21/10 = 74/105
  const std::vector<int64_t> y_true = {0, 0, 0, 0, 0, 1, 1, 1, 2, 2};
  const std::vector<int64_t> y_pred = {0, 0, 0, 0, 1, 0, 1, 1, 1, 2};
  auto r = Evaluate(y_true, y_pred, {"a", "b", "c"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n, 10);
  EXPECT_NEAR(r->accuracy, 0.7, kTol);
  EXPECT_NEAR(r->balanced_accuracy, 59.0 / 90, kTol);
  EXPECT_NEAR(r->macro_precision, 2.3 / 3, kTol);
  EXPECT_NEAR(r->macro_recall, 59.0 / 90, kTol);
  EXPECT_NEAR(r->macro_f1, 214.0 / 315, kTol);
  EXPECT_NEAR(r->weighted_f1, 74.0 / 105, kTol);
  ASSERT_EQ(r->per_class.size(), 3u);
  ExpectClass(r->per_class[0], "a", 0.8, 0.8, 0.8, 5, 5);
  ExpectClass(r->per_class[1], "b", 0.5, 2.0 / 3, 4.0 / 7, 3, 4);
  ExpectClass(r->per_class[2], "c", 1.0, 0.5, 2.0 / 3, 2, 1);
  const std::vector<std::vector<int64_t>> confusion = {{4, 1, 0}, {1, 2, 0}, {0, 1, 1}};
  EXPECT_EQ(r->confusion, confusion);
}

TEST(EvaluateTest, ClassPredictedButNeverTrue) {
  // Confusion:
  //        x  y  z   support
  //   x  [ 1  0  1 ]  2
  //   y  [ 0  2  0 ]  2
  //   z  [ 0  0  0 ]  0
  //   predicted 1 2 1
  // x: P 1, R 1/2, F1 2/3;  y: P 1, R 1, F1 1;  z: P 0/1 = 0, R 0 (0/0), F1 0
  // labels = {x, y, z} (z is in y_pred), so the macro averages divide by 3:
  // macro P = 2/3, macro R = 1.5/3 = 1/2, macro F1 = (2/3 + 1)/3 = 5/9
  // weighted F1 = (2*2/3 + 2*1 + 0*0)/4 = 5/6
  // balanced accuracy drops z (nan recall): (1/2 + 1)/2 = 3/4
  // accuracy = 3/4
  auto r = Evaluate({0, 0, 1, 1}, {0, 2, 1, 1}, {"x", "y", "z"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->accuracy, 0.75, kTol);
  EXPECT_NEAR(r->balanced_accuracy, 0.75, kTol);
  EXPECT_NEAR(r->macro_precision, 2.0 / 3, kTol);
  EXPECT_NEAR(r->macro_recall, 0.5, kTol);
  EXPECT_NEAR(r->macro_f1, 5.0 / 9, kTol);
  EXPECT_NEAR(r->weighted_f1, 5.0 / 6, kTol);
  ExpectClass(r->per_class[0], "x", 1.0, 0.5, 2.0 / 3, 2, 1);
  ExpectClass(r->per_class[1], "y", 1.0, 1.0, 1.0, 2, 2);
  ExpectClass(r->per_class[2], "z", 0.0, 0.0, 0.0, 0, 1);
}

TEST(EvaluateTest, ClassAbsentFromBothIsInNoAverage) {
  // q (index 1) never occurs. Confusion:
  //        p  q  r   support
  //   p  [ 2  0  0 ]  2
  //   q  [ 0  0  0 ]  0
  //   r  [ 1  0  1 ]  2
  //   predicted 3 0 1
  // p: P 2/3, R 1, F1 4/5;  r: P 1, R 1/2, F1 2/3;  q: all 0
  // labels = {p, r}: macro P = (2/3 + 1)/2 = 5/6, macro R = 3/4,
  // macro F1 = (12/15 + 10/15)/2 = 11/15; weighted F1 (equal supports) 11/15
  // balanced = 3/4, accuracy = 3/4
  auto r = Evaluate({0, 2, 2, 0}, {0, 2, 0, 0}, {"p", "q", "r"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->accuracy, 0.75, kTol);
  EXPECT_NEAR(r->balanced_accuracy, 0.75, kTol);
  EXPECT_NEAR(r->macro_precision, 5.0 / 6, kTol);
  EXPECT_NEAR(r->macro_recall, 0.75, kTol);
  EXPECT_NEAR(r->macro_f1, 11.0 / 15, kTol);
  EXPECT_NEAR(r->weighted_f1, 11.0 / 15, kTol);
  ExpectClass(r->per_class[0], "p", 2.0 / 3, 1.0, 0.8, 2, 3);
  ExpectClass(r->per_class[1], "q", 0.0, 0.0, 0.0, 0, 0);
  ExpectClass(r->per_class[2], "r", 1.0, 0.5, 2.0 / 3, 2, 1);
  const std::vector<std::vector<int64_t>> confusion = {{2, 0, 0}, {0, 0, 0}, {1, 0, 1}};
  EXPECT_EQ(r->confusion, confusion);
}

TEST(EvaluateTest, Perfect) {
  // Diagonal confusion; the unused class "unused" is outside every average,
  // so all scores are exactly 1.
  auto r = Evaluate({0, 1, 2, 1}, {0, 1, 2, 1}, {"a", "b", "c", "unused"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n, 4);
  EXPECT_DOUBLE_EQ(r->accuracy, 1.0);
  EXPECT_DOUBLE_EQ(r->balanced_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(r->macro_precision, 1.0);
  EXPECT_DOUBLE_EQ(r->macro_recall, 1.0);
  EXPECT_DOUBLE_EQ(r->macro_f1, 1.0);
  EXPECT_DOUBLE_EQ(r->weighted_f1, 1.0);
  ExpectClass(r->per_class[1], "b", 1.0, 1.0, 1.0, 2, 2);
  ExpectClass(r->per_class[3], "unused", 0.0, 0.0, 0.0, 0, 0);
  const std::vector<std::vector<int64_t>> confusion = {
      {1, 0, 0, 0}, {0, 2, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 0}};
  EXPECT_EQ(r->confusion, confusion);
}

TEST(EvaluateTest, AllWrong) {
  // Confusion:
  //        a  b  c   support
  //   a  [ 0  2  0 ]  2
  //   b  [ 0  0  1 ]  1
  //   c  [ 0  0  0 ]  0
  //   predicted 0 2 1
  // No true positives: every precision, recall and F1 is 0 (a's precision
  // is 0/0, set to 0 by zero_division). Accuracy and balanced accuracy 0.
  auto r = Evaluate({0, 0, 1}, {1, 1, 2}, {"a", "b", "c"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->accuracy, 0.0);
  EXPECT_EQ(r->balanced_accuracy, 0.0);
  EXPECT_EQ(r->macro_precision, 0.0);
  EXPECT_EQ(r->macro_recall, 0.0);
  EXPECT_EQ(r->macro_f1, 0.0);
  EXPECT_EQ(r->weighted_f1, 0.0);
  ExpectClass(r->per_class[0], "a", 0.0, 0.0, 0.0, 2, 0);
  ExpectClass(r->per_class[1], "b", 0.0, 0.0, 0.0, 1, 2);
  ExpectClass(r->per_class[2], "c", 0.0, 0.0, 0.0, 0, 1);
  const std::vector<std::vector<int64_t>> confusion = {{0, 2, 0}, {0, 0, 1}, {0, 0, 0}};
  EXPECT_EQ(r->confusion, confusion);
}

TEST(EvaluateTest, SizeMismatchNamesBothSizes) {
  auto r = Evaluate({0, 1, 0}, {0, 1}, {"a", "b"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("y_true has 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("y_pred has 2"), std::string::npos) << r.status().message();
}

TEST(EvaluateTest, EmptyInputIsInvalid) {
  auto r = Evaluate({}, {}, {"a", "b"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("empty"), std::string::npos) << r.status().message();
}

TEST(EvaluateTest, NegativeTrueLabelNamesPositionAndValue) {
  auto r = Evaluate({0, 1, -1}, {0, 1, 1}, {"a", "b"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("y_true[2] = -1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("[0, 2)"), std::string::npos) << r.status().message();
}

TEST(EvaluateTest, TooLargePredictedLabelNamesPositionAndValue) {
  auto r = Evaluate({0, 1, 1}, {0, 2, 1}, {"a", "b"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("y_pred[1] = 2"), std::string::npos) << r.status().message();
}

TEST(EvaluateTest, NoClassNamesRejectsEveryLabel) {
  auto r = Evaluate({0}, {0}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("y_true[0] = 0"), std::string::npos) << r.status().message();
}

TEST(TopKAccuracyTest, RankedListsWithoutTies) {
  // Position of the true label in each list (1-based):
  //   sample 0: true 0 in {0,1,2} -> 1
  //   sample 1: true 1 in {2,1,0} -> 2
  //   sample 2: true 2 in {1,0,2} -> 3
  //   sample 3: true 3 in {2,0,1} -> absent
  // top-1 = 1/4, top-2 = 2/4, top-3 = 3/4
  const std::vector<int64_t> y_true = {0, 1, 2, 3};
  const std::vector<std::vector<int64_t>> ranked = {{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}};
  EXPECT_DOUBLE_EQ(TopKAccuracy(y_true, ranked, 1).value(), 0.25);
  EXPECT_DOUBLE_EQ(TopKAccuracy(y_true, ranked, 2).value(), 0.5);
  EXPECT_DOUBLE_EQ(TopKAccuracy(y_true, ranked, 3).value(), 0.75);
}

TEST(TopKAccuracyTest, KLargerThanListCountsWhatItHas) {
  // Lists of length 2, 1 and 0; k = 5 looks at all of each:
  //   sample 0: true 1 in {0,1} -> hit
  //   sample 1: true 0 in {0}   -> hit
  //   sample 2: true 2 in {}    -> miss
  // top-5 = 2/3; top-1 = 1/3 (only sample 1)
  const std::vector<int64_t> y_true = {1, 0, 2};
  const std::vector<std::vector<int64_t>> ranked = {{0, 1}, {0}, {}};
  EXPECT_DOUBLE_EQ(TopKAccuracy(y_true, ranked, 5).value(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(TopKAccuracy(y_true, ranked, 1).value(), 1.0 / 3);
}

TEST(TopKAccuracyTest, SizeMismatchIsInvalid) {
  auto r = TopKAccuracy({0, 1}, {{0}}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("y_true has 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("ranked has 1"), std::string::npos) << r.status().message();
}

TEST(TopKAccuracyTest, KBelowOneIsInvalid) {
  for (int64_t k : {0, -3}) {
    auto r = TopKAccuracy({0}, {{0}}, k);
    ASSERT_FALSE(r.ok()) << k;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("k = " + std::to_string(k)), std::string::npos) << r.status().message();
  }
}

TEST(TopKAccuracyTest, EmptyInputIsInvalid) {
  auto r = TopKAccuracy({}, {}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scdino::eval
