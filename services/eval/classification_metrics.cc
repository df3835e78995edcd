// Classification metrics as scikit-learn computes them; see the header for
// the zero_division=0 and label-set choices.
#include "eval/classification_metrics.h"

#include <algorithm>
#include <cstddef>
#include <string>

namespace scdino::eval {
namespace {

// sklearn's _prf_divide with zero_division=0.
double SafeDivide(double num, double den) { return den == 0 ? 0.0 : num / den; }

Status CheckLabels(const std::vector<int64_t>& labels, const char* what, size_t n_classes) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t v = labels[i];
    if (v < 0 || static_cast<uint64_t>(v) >= n_classes) {
      return Status::InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                                     " is outside [0, " + std::to_string(n_classes) + ") (class_names has " +
                                     std::to_string(n_classes) + " entries)");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ClassificationReport> Evaluate(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred,
                                        const std::vector<std::string>& class_names) {
  if (y_true.size() != y_pred.size()) {
    return Status::InvalidArgument("y_true has " + std::to_string(y_true.size()) + " labels but y_pred has " +
                                   std::to_string(y_pred.size()));
  }
  if (y_true.empty()) return Status::InvalidArgument("y_true and y_pred are empty: nothing to evaluate");
  const size_t c = class_names.size();
  if (Status s = CheckLabels(y_true, "y_true", c); !s.ok()) return s;
  if (Status s = CheckLabels(y_pred, "y_pred", c); !s.ok()) return s;

  ClassificationReport r;
  r.n = static_cast<int64_t>(y_true.size());
  r.confusion.assign(c, std::vector<int64_t>(c, 0));
  int64_t correct = 0;
  for (size_t i = 0; i < y_true.size(); ++i) {
    ++r.confusion[y_true[i]][y_pred[i]];
    if (y_true[i] == y_pred[i]) ++correct;
  }
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.n);

  r.per_class.resize(c);
  double sum_p = 0, sum_r = 0, sum_f = 0, sum_wf = 0, sum_recall_true = 0;
  int64_t n_union = 0, n_true = 0;
  for (size_t k = 0; k < c; ++k) {
    ClassMetrics& m = r.per_class[k];
    m.name = class_names[k];
    for (size_t j = 0; j < c; ++j) {
      m.support += r.confusion[k][j];
      m.predicted += r.confusion[j][k];
    }
    const auto tp = static_cast<double>(r.confusion[k][k]);
    m.precision = SafeDivide(tp, static_cast<double>(m.predicted));
    m.recall = SafeDivide(tp, static_cast<double>(m.support));
    // 2tp / (2tp + fp + fn): sklearn's form, equal to 2PR/(P+R) wherever
    // that is defined and 0 (zero_division) where tp = 0.
    m.f1 = SafeDivide(2 * tp, static_cast<double>(m.support + m.predicted));

    // Classes absent from both y_true and y_pred are not among sklearn's
    // inferred labels, so they stay out of every average.
    if (m.support == 0 && m.predicted == 0) continue;
    ++n_union;
    sum_p += m.precision;
    sum_r += m.recall;
    sum_f += m.f1;
    sum_wf += m.f1 * static_cast<double>(m.support);
    if (m.support > 0) {
      ++n_true;
      sum_recall_true += m.recall;
    }
  }
  // n >= 1 and every label is valid, so both counts are at least 1.
  r.macro_precision = sum_p / static_cast<double>(n_union);
  r.macro_recall = sum_r / static_cast<double>(n_union);
  r.macro_f1 = sum_f / static_cast<double>(n_union);
  // The supports sum to n, sklearn's normaliser for average="weighted".
  r.weighted_f1 = sum_wf / static_cast<double>(r.n);
  r.balanced_accuracy = sum_recall_true / static_cast<double>(n_true);
  return r;
}

StatusOr<double> TopKAccuracy(const std::vector<int64_t>& y_true, const std::vector<std::vector<int64_t>>& ranked,
                              int64_t k) {
  if (y_true.size() != ranked.size()) {
    return Status::InvalidArgument("y_true has " + std::to_string(y_true.size()) + " labels but ranked has " +
                                   std::to_string(ranked.size()) + " lists");
  }
  if (k < 1) return Status::InvalidArgument("k = " + std::to_string(k) + " must be at least 1");
  if (y_true.empty()) return Status::InvalidArgument("y_true and ranked are empty: top-k accuracy is undefined");
  int64_t hits = 0;
  for (size_t i = 0; i < y_true.size(); ++i) {
    const auto& list = ranked[i];
    const auto end = list.begin() + static_cast<std::ptrdiff_t>(std::min<uint64_t>(list.size(), static_cast<uint64_t>(k)));
    if (std::find(list.begin(), end, y_true[i]) != end) ++hits;
  }
  return static_cast<double>(hits) / static_cast<double>(y_true.size());
}

}  // namespace scdino::eval
