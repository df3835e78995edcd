// Linear probe on frozen features: multinomial logistic regression with an
// L2 penalty on the weights (not the intercepts), fitted full-batch with
// L-BFGS in float32 on the CPU, its strength chosen on a stratified
// validation part of the training rows. The objective is scikit-learn's
// LogisticRegression(C) divided by C * n: mean cross-entropy +
// ||W||^2 / (2 C n), so C means what it means there. docs/eval.md says
// how it differs from DINO's eval_linear.py.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

struct LinearProbeOptions {
  /// Inverse strengths tried on the validation part, as scikit-learn's C.
  std::vector<double> c_grid{0.01, 0.1, 1, 10, 100, 1000};
  double validation_fraction = 0.2;
  uint64_t seed = 0;
  /// L-BFGS iterations per fit at most; a fit also ends when the largest
  /// gradient element is below `tolerance`. scikit-learn's defaults
  /// (LogisticRegression's max_iter and tol, on the same mean-loss scale):
  /// the accuracy it reaches, in its time (bench/probe_vs_sklearn.py).
  int64_t max_iterations = 100;
  double tolerance = 1e-4;
  /// Asked between chunks of iterations: true ends with Aborted.
  std::function<bool()> should_stop;
  /// Called after each fit (one per C of the grid, then the final one) with
  /// (fits done, fits).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct LinearProbeResult {
  double c = 0;                     ///< the chosen C
  std::vector<double> grid;         ///< the C tried, ascending (empty: no validation part)
  std::vector<double> validation;   ///< validation accuracy per C of `grid`
  int64_t n_validation = 0;
  int64_t iterations = 0;           ///< of the final fit on every training row
  std::vector<int64_t> predicted;   ///< per test row
};

/// x_train [n, d], y_train [n] int64 in [0, classes), x_test [m, d].
/// FailedPrecondition when the training rows have fewer than two classes.
StatusOr<LinearProbeResult> LinearProbe(const torch::Tensor& x_train, const torch::Tensor& y_train,
                                        const torch::Tensor& x_test, int64_t classes,
                                        const LinearProbeOptions& options);

}  // namespace scdino::eval
