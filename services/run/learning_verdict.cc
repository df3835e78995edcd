#include "run/learning_verdict.h"

#include <cstdio>

namespace scdino {
namespace {

// Accuracies are fractions of at most a few thousand images: closer than
// this is the same count.
constexpr double kSame = 1e-9;

std::string Fixed(const char* format, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::string LearningScoresText(const LearningScores& s) {
  std::string t = std::to_string(s.k) + "-NN top-1 on " + std::to_string(s.test_images) +
                  " held-out images: the teacher " + Fixed("%.3f", s.trained) + ", a random ViT " +
                  Fixed("%.3f", s.random) + " (" + Fixed("%+.3f", s.trained - s.random) + ")";
  if (s.pixels >= 0) {
    t += ", the raw pixels " + Fixed("%.3f", s.pixels) + " (" + Fixed("%+.3f", s.trained - s.pixels) + ")";
  }
  return t;
}

LearningVerdict JudgeLearning(const LearningScores& s) {
  const bool has_pixels = s.pixels >= 0;
  const double best_baseline = has_pixels && s.pixels > s.random ? s.pixels : s.random;
  const bool above_random = s.trained - s.random > s.margin + kSame;
  const bool above_pixels = !has_pixels || s.trained - s.pixels > s.margin + kSame;
  const std::string scores = LearningScoresText(s);
  const std::string margin =
      s.margin > 0 ? " by more than " + Fixed("%.3f", s.margin) + " (scdino.learning_margin)" : "";
  // "no better than a random ViT's or the raw pixels' by more than 0.030
  // (scdino.learning_margin) (scores)"
  LearningVerdict v;
  if (best_baseline >= 1.0 - kSame && s.trained >= best_baseline - kSame) {
    // Nothing can beat a baseline that is right on every held-out image:
    // saying "did not learn" here would blame the model for the data.
    v.learned = Learned::kCannotTell;
    v.name = "cannot_tell";
    const bool pixels_at_ceiling = has_pixels && s.pixels >= 1.0 - kSame;
    v.line = std::string("cannot tell whether it learned: ") +
             (pixels_at_ceiling ? "the raw pixels already classify" : "a random ViT already classifies") +
             " every held-out image, and so does the teacher (" + scores + "); a harder labelled set can tell";
    return v;
  }
  if (above_random && above_pixels) {
    v.learned = Learned::kYes;
    v.name = "learned";
    v.line = "learned: " + scores;
    return v;
  }
  v.learned = Learned::kNo;
  v.name = "did_not_learn";
  std::string than;
  if (!above_random) than = "a random ViT's";
  if (!above_pixels) than += std::string(than.empty() ? "" : " or ") + "the raw pixels'";
  v.line = "did not learn: the trained teacher's features are no better than " + than + margin + " (" + scores + ")";
  return v;
}

}  // namespace scdino
