// Classification metrics for the kNN evaluation, computed as scikit-learn
// computes them (accuracy_score, balanced_accuracy_score,
// precision_recall_fscore_support, confusion_matrix; zero_division=0), so
// that numbers reported here can be compared with the reference Python
// evaluation without depending on torch or Python.
//
// Choices, all sklearn's with zero_division=0:
//  - A ratio whose denominator is 0 (precision of a class never predicted,
//    recall of a class never true) is 0.
//  - The macro averages run over the labels sklearn infers by default: the
//    union of the classes present in y_true or y_pred. A class predicted but
//    never true therefore counts in them with recall 0 and F1 0.
//  - A class absent from both y_true and y_pred is reported with all zeros
//    in per_class and enters no average.
//  - weighted_f1 weighs each class by its support, so classes never true
//    have weight 0.
//  - balanced_accuracy drops classes absent from y_true (sklearn removes
//    their nan recalls), i.e. it is the mean recall over classes in y_true.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

/// Metrics of one class, one-vs-rest.
struct ClassMetrics {
  /// The class's entry of class_names.
  std::string name;
  /// tp / predicted, tp / support, their harmonic mean; 0 where undefined.
  double precision = 0, recall = 0, f1 = 0;
  int64_t support = 0;    ///< true samples of the class
  int64_t predicted = 0;  ///< samples predicted as the class
};

/// Everything Evaluate computes over one set of predictions.
struct ClassificationReport {
  /// Number of samples.
  int64_t n = 0;
  double accuracy = 0;            ///< top-1
  double balanced_accuracy = 0;   ///< mean recall over classes present in y_true
  double macro_precision = 0, macro_recall = 0, macro_f1 = 0;   ///< over classes present in y_true or y_pred
  double weighted_f1 = 0;         ///< support-weighted over classes in y_true
  std::vector<ClassMetrics> per_class;              ///< every class of class_names, in order
  std::vector<std::vector<int64_t>> confusion;      ///< [true][predicted], class_names.size() squared
};

/// Scores y_pred against y_true; labels index class_names.
/// InvalidArgument (naming the position and value) when sizes differ, the input is empty, or a label is outside [0, class_names.size()).
StatusOr<ClassificationReport> Evaluate(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred,
                                        const std::vector<std::string>& class_names);

/// Fraction of samples whose true label is among the first k entries of its ranked prediction list (ranked[i] best first; lists shorter than k count what they have). InvalidArgument on size mismatch or k < 1, and on empty input (the fraction would be 0/0).
StatusOr<double> TopKAccuracy(const std::vector<int64_t>& y_true, const std::vector<std::vector<int64_t>>& ranked,
                              int64_t k);

}  // namespace scdino::eval
