// The one verdict every surface gives (run/learning_verdict.h): above
// both baselines, above one of them, within the margin, and the ties at
// the ceiling, where no model can do better than a baseline.
#include "run/learning_verdict.h"

#include <gtest/gtest.h>

namespace scdino {
namespace {

LearningScores Scores(double trained, double random, double pixels, double margin = 0.0) {
  LearningScores s;
  s.trained = trained;
  s.random = random;
  s.pixels = pixels;
  s.margin = margin;
  s.test_images = 39;
  return s;
}

TEST(LearningVerdict, AboveBothBaselinesLearned) {
  const auto v = JudgeLearning(Scores(0.821, 0.606, 0.790));
  EXPECT_EQ(v.learned, Learned::kYes);
  EXPECT_EQ(v.name, "learned");
  EXPECT_EQ(v.line,
            "learned: 20-NN top-1 on 39 held-out images: the teacher 0.821, a random ViT 0.606 (+0.215), the raw "
            "pixels 0.790 (+0.031)");
}

TEST(LearningVerdict, AboveARandomViTButNotThePixelsDidNotLearn) {
  // The case: 0.603 against a random ViT's 0.513 and the pixels' 0.785.
  const auto v = JudgeLearning(Scores(0.603, 0.513, 0.785));
  EXPECT_EQ(v.learned, Learned::kNo);
  EXPECT_EQ(v.name, "did_not_learn");
  EXPECT_EQ(v.line.rfind("did not learn: the trained teacher's features are no better than the raw pixels' (", 0), 0u)
      << v.line;
  EXPECT_NE(v.line.find("the raw pixels 0.785 (-0.182)"), std::string::npos) << v.line;
}

TEST(LearningVerdict, AboveThePixelsButNotARandomViTDidNotLearn) {
  const auto v = JudgeLearning(Scores(0.70, 0.72, 0.65));
  EXPECT_EQ(v.learned, Learned::kNo);
  EXPECT_EQ(v.line.rfind("did not learn: the trained teacher's features are no better than a random ViT's (", 0), 0u)
      << v.line;
}

TEST(LearningVerdict, BelowBothNamesBoth) {
  const auto v = JudgeLearning(Scores(0.40, 0.50, 0.60));
  EXPECT_EQ(v.line.rfind("did not learn: the trained teacher's features are no better than a random ViT's or the raw "
                         "pixels' (",
                         0),
            0u)
      << v.line;
}

TEST(LearningVerdict, WithinTheMarginIsNotLearned) {
  EXPECT_EQ(JudgeLearning(Scores(0.80, 0.60, 0.78, 0.03)).learned, Learned::kNo);
  const auto v = JudgeLearning(Scores(0.80, 0.60, 0.78, 0.03));
  EXPECT_NE(v.line.find("by more than 0.030 (scdino.learning_margin)"), std::string::npos) << v.line;
  EXPECT_EQ(JudgeLearning(Scores(0.82, 0.60, 0.78, 0.03)).learned, Learned::kYes);
  // A tie is not better, margin or none.
  EXPECT_EQ(JudgeLearning(Scores(0.78, 0.60, 0.78)).learned, Learned::kNo);
}

TEST(LearningVerdict, TiesAtTheCeilingCannotTellAndSayOneThing) {
  // The contradiction: teacher and random ViT both at 1.000.
  auto v = JudgeLearning(Scores(1.0, 1.0, 0.95));
  EXPECT_EQ(v.learned, Learned::kCannotTell);
  EXPECT_EQ(v.name, "cannot_tell");
  EXPECT_EQ(v.line.rfind("cannot tell whether it learned: a random ViT already classifies every held-out image", 0), 0u)
      << v.line;
  EXPECT_EQ(v.line.find("did not learn"), std::string::npos) << v.line;
  v = JudgeLearning(Scores(1.0, 0.9, 1.0));
  EXPECT_EQ(v.learned, Learned::kCannotTell);
  EXPECT_EQ(v.line.rfind("cannot tell whether it learned: the raw pixels already classify", 0), 0u) << v.line;
  // Below a baseline at the ceiling is worse, not undecided.
  EXPECT_EQ(JudgeLearning(Scores(0.95, 1.0, 0.9)).learned, Learned::kNo);
}

TEST(LearningVerdict, WithoutThePixelsOnlyTheRandomViTCounts) {
  const auto v = JudgeLearning(Scores(0.7, 0.6, -1.0));
  EXPECT_EQ(v.learned, Learned::kYes);
  EXPECT_EQ(v.line, "learned: 20-NN top-1 on 39 held-out images: the teacher 0.700, a random ViT 0.600 (+0.100)");
}

}  // namespace
}  // namespace scdino
