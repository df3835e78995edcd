// Whether a run learned: the teacher's held-out kNN accuracy against the two
// baselines that cost nothing to train, a random ViT of the same shape and
// the raw pixels of the same images (docs/training.md, "Did it learn?").
// Judged by the trainer's end of run, the epoch lines, scdinoctl and the
// eval report, so that each says the same thing in the same words.
// Functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace scdino {

struct LearningScores {
  double trained = 0.0;  ///< the teacher's top-1
  double random = 0.0;   ///< a random ViT's
  /// The raw pixels' (prepared as the features); below 0: not measured
  /// (a status from a trainer that did not measure it).
  double pixels = -1.0;
  /// How much better than each baseline counts as learned
  /// (scdino.learning_margin).
  double margin = 0.0;
  int64_t test_images = 0;
  int64_t k = 20;
};

enum class Learned {
  kYes,         ///< above both baselines by more than the margin
  kNo,          ///< not above one of them (the line says which)
  kCannotTell,  ///< a baseline already classifies every held-out image
};

struct LearningVerdict {
  Learned learned = Learned::kNo;
  /// "learned", "did_not_learn" or "cannot_tell" (the status and metrics).
  std::string name;
  /// One line, e.g. "learned: 20-NN top-1 on 39 held-out images: the
  /// teacher 0.821, a random ViT 0.606 (+0.215), the raw pixels 0.790
  /// (+0.031)"; "did not learn: the trained teacher's features are no
  /// better than the raw pixels' (...)".
  std::string line;
};

LearningVerdict JudgeLearning(const LearningScores& s);

/// "20-NN top-1 on 39 held-out images: the teacher 0.821, a random ViT
/// 0.606 (+0.215), the raw pixels 0.790 (+0.031)": the scores, no verdict.
std::string LearningScoresText(const LearningScores& s);

}  // namespace scdino
