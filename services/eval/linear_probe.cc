#include "eval/linear_probe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

namespace scdino::eval {

namespace {

struct LogisticFit {
  torch::Tensor w, b;  // [d, classes], [classes]
  int64_t iterations = 0;
  bool stopped = false;
};

// Minimises mean cross-entropy + ||w||^2 / (2 c n), starting from `start`.
LogisticFit FitLogistic(const torch::Tensor& x, const torch::Tensor& y, int64_t classes, double c, const LogisticFit* start,
                const LinearProbeOptions& o) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  LogisticFit fit;
  fit.w = (start ? start->w.clone() : torch::zeros({x.size(1), classes}, f32)).set_requires_grad(true);
  fit.b = (start ? start->b.clone() : torch::zeros({classes}, f32)).set_requires_grad(true);
  const double strength = 1.0 / (2.0 * c * static_cast<double>(x.size(0)));
  constexpr int64_t kChunk = 25;
  torch::optim::LBFGS lbfgs({fit.w, fit.b}, torch::optim::LBFGSOptions(1)
                                                .max_iter(kChunk)
                                                .history_size(20)
                                                .tolerance_grad(o.tolerance)
                                                .tolerance_change(1e-12)
                                                .line_search_fn("strong_wolfe"));
  auto closure = [&] {
    torch::AutoGradMode grad(true);
    lbfgs.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(torch::addmm(fit.b, x, fit.w), y) +
                strength * fit.w.pow(2).sum();
    loss.backward();
    return loss;
  };
  double last = std::numeric_limits<double>::infinity();
  while (fit.iterations < o.max_iterations) {
    if (o.should_stop && o.should_stop()) {
      fit.stopped = true;
      break;
    }
    const double loss = lbfgs.step(closure).item<double>();
    fit.iterations += kChunk;
    const double grad = std::max(fit.w.grad().abs().max().item<double>(), fit.b.grad().abs().max().item<double>());
    if (grad <= o.tolerance || std::abs(last - loss) <= 1e-12 * std::max(1.0, std::abs(loss))) break;
    last = loss;
  }
  fit.w = fit.w.detach();
  fit.b = fit.b.detach();
  return fit;
}

torch::Tensor Predict(const LogisticFit& f, const torch::Tensor& x) { return torch::addmm(f.b, x, f.w).argmax(1); }

}  // namespace

StatusOr<LinearProbeResult> LinearProbe(const torch::Tensor& x_train_in, const torch::Tensor& y_train_in,
                                        const torch::Tensor& x_test_in, int64_t classes,
                                        const LinearProbeOptions& o) {
  torch::NoGradGuard outer;  // the fits enable gradients themselves
  auto x_train = x_train_in.to(torch::kCPU, torch::kFloat32).contiguous();
  auto y_train = y_train_in.to(torch::kCPU, torch::kInt64).contiguous();
  auto x_test = x_test_in.to(torch::kCPU, torch::kFloat32).contiguous();
  std::map<int64_t, std::vector<int64_t>> by_class;
  const int64_t* y = y_train.data_ptr<int64_t>();
  for (int64_t i = 0; i < y_train.size(0); ++i) by_class[y[i]].push_back(i);
  if (by_class.size() < 2) {
    return Status::FailedPrecondition("the training rows have " + std::to_string(by_class.size()) +
                                      " class: a linear probe needs at least two");
  }
  LinearProbeResult r;
  // A stratified validation part: a share of each class that has at least
  // two training rows, the rest to fit.
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> fit_rows, val_rows;
  for (auto& [label, rows] : by_class) {
    std::shuffle(rows.begin(), rows.end(), rng);
    const auto n = static_cast<int64_t>(rows.size());
    const int64_t take = n < 2 ? 0 : std::clamp<int64_t>(std::llround(o.validation_fraction * n), 1, n - 1);
    val_rows.insert(val_rows.end(), rows.begin(), rows.begin() + take);
    fit_rows.insert(fit_rows.end(), rows.begin() + take, rows.end());
  }
  r.c = 1.0;
  const bool choose = !val_rows.empty() && o.c_grid.size() > 1;
  const auto fits = static_cast<int64_t>(choose ? o.c_grid.size() + 1 : 1);
  if (o.on_progress) o.on_progress(0, fits);
  if (choose) {
    auto fi = torch::tensor(fit_rows), vi = torch::tensor(val_rows);
    auto xf = x_train.index_select(0, fi), yf = y_train.index_select(0, fi);
    auto xv = x_train.index_select(0, vi), yv = y_train.index_select(0, vi);
    std::vector<double>& grid = r.grid;
    grid = o.c_grid;
    std::sort(grid.begin(), grid.end());
    LogisticFit previous;
    double best = -1;
    for (size_t i = 0; i < grid.size(); ++i) {
      // Warm start from the next stronger penalty's solution.
      LogisticFit f = FitLogistic(xf, yf, classes, grid[i], i ? &previous : nullptr, o);
      if (f.stopped) return Status::Aborted("stopped while choosing the linear probe's C");
      const double acc = Predict(f, xv).eq(yv).to(torch::kFloat64).mean().item<double>();
      r.validation.push_back(acc);
      if (acc > best) {  // ties keep the stronger penalty
        best = acc;
        r.c = grid[i];
      }
      previous = std::move(f);
      if (o.on_progress) o.on_progress(static_cast<int64_t>(i) + 1, fits);
    }
    r.n_validation = static_cast<int64_t>(val_rows.size());
  } else if (o.c_grid.size() == 1) {
    r.c = o.c_grid[0];
  }
  LogisticFit final_fit = FitLogistic(x_train, y_train, classes, r.c, nullptr, o);
  if (final_fit.stopped) return Status::Aborted("stopped while fitting the linear probe");
  if (o.on_progress) o.on_progress(fits, fits);
  r.iterations = final_fit.iterations;
  auto pred = Predict(final_fit, x_test).contiguous();
  r.predicted.assign(pred.data_ptr<int64_t>(), pred.data_ptr<int64_t>() + pred.numel());
  return r;
}

}  // namespace scdino::eval
