#include "eval/knn.h"

#include <algorithm>
#include <limits>

namespace scdino::eval {

namespace F = torch::nn::functional;

StatusOr<NeighborGraph> NearestNeighborGraph(const torch::Tensor& x_in, int64_t k, int64_t memory_bytes,
                                             const std::function<bool()>& should_stop,
                                             const std::function<void(int64_t, int64_t)>& on_progress) {
  if (x_in.dim() != 2 || x_in.size(0) < 2) {
    return Status::InvalidArgument("neighbour graph: expected [n, d] rows with n >= 2, got " + c10::str(x_in.sizes()));
  }
  const int64_t n = x_in.size(0);
  if (k < 1 || k > n - 1) {
    return Status::InvalidArgument("neighbour graph: k = " + std::to_string(k) + " outside [1, " + std::to_string(n - 1) +
                                   "] for " + std::to_string(n) + " rows");
  }
  torch::NoGradGuard no_grad;
  auto x = x_in.to(torch::kFloat32).contiguous();
  auto sq = (x * x).sum(1);
  const int64_t block = std::max<int64_t>(1, memory_bytes / (n * 4 * 2));  // distances and top-k scratch
  NeighborGraph g;
  g.n = n;
  g.k = k;
  g.indices.resize(static_cast<size_t>(n * k));
  g.distances.resize(static_cast<size_t>(n * k));
  for (int64_t first = 0; first < n; first += block) {
    if (should_stop && should_stop()) {
      return Status::Aborted("neighbour graph stopped after " + std::to_string(first) + " of " + std::to_string(n) +
                             " rows");
    }
    const int64_t rows = std::min(block, n - first);
    // |a - b|^2 = |a|^2 + |b|^2 - 2 a.b, clamped at 0 against rounding.
    auto d2 = (sq.slice(0, first, first + rows).unsqueeze(1) + sq.unsqueeze(0) -
               2 * x.slice(0, first, first + rows).mm(x.t()))
                  .clamp_min_(0);
    d2.narrow(1, first, rows).diagonal().fill_(std::numeric_limits<float>::infinity());
    auto [values, indices] = d2.topk(k, 1, /*largest=*/false, /*sorted=*/true);
    auto v = values.sqrt_().to(torch::kCPU).contiguous();
    auto i = indices.to(torch::kCPU, torch::kInt64).contiguous();
    std::copy(v.data_ptr<float>(), v.data_ptr<float>() + rows * k, g.distances.begin() + first * k);
    std::copy(i.data_ptr<int64_t>(), i.data_ptr<int64_t>() + rows * k, g.indices.begin() + first * k);
    if (on_progress) on_progress(first + rows, n);
  }
  return g;
}

KnnResult WeightedKnn(const torch::Tensor& train_in, const torch::Tensor& train_labels, const torch::Tensor& test_in,
                      int64_t classes, const KnnOptions& o) {
  TORCH_CHECK(train_in.dim() == 2 && test_in.dim() == 2 && train_in.size(1) == test_in.size(1),
              "kNN expects train [n, d] and test [q, d] features of one d, got ", train_in.sizes(), " and ",
              test_in.sizes());
  TORCH_CHECK(train_labels.dim() == 1 && train_labels.size(0) == train_in.size(0), "kNN expects ", train_in.size(0),
              " train labels, got ", train_labels.sizes());
  TORCH_CHECK(train_in.size(0) > 0, "kNN needs at least one training row");
  TORCH_CHECK(classes > 0, "kNN needs at least one class, got ", classes);
  TORCH_CHECK(!o.ks.empty(), "kNN needs at least one k");
  for (auto k : o.ks) TORCH_CHECK(k >= 1, "kNN: k must be at least 1, got ", k);
  TORCH_CHECK(o.temperature > 0, "kNN: temperature must be positive, got ", o.temperature);
  auto labels = train_labels.to(train_in.device(), torch::kInt64);
  TORCH_CHECK(labels.numel() == 0 || (labels.min().item<int64_t>() >= 0 && labels.max().item<int64_t>() < classes),
              "kNN: train labels must lie in [0, ", classes, ")");

  torch::NoGradGuard no_grad;
  const auto norm = F::NormalizeFuncOptions().p(2).dim(1);
  auto train = F::normalize(train_in.to(torch::kFloat32), norm);
  auto test = F::normalize(test_in.to(torch::kFloat32), norm);
  const int64_t n = train.size(0), q = test.size(0);
  KnnResult r;
  int64_t kmax = 0;
  for (auto k : o.ks) {
    r.k_used.push_back(std::min(k, n));
    kmax = std::max(kmax, r.k_used.back());
  }
  const int64_t keep = std::min(o.ranks, classes);
  for (size_t i = 0; i < o.ks.size(); ++i) {
    r.ranked.push_back(torch::empty({q, keep}, torch::TensorOptions().dtype(torch::kInt64).device(test.device())));
  }
  r.chunk = std::max<int64_t>(1, o.memory_bytes / (n * static_cast<int64_t>(sizeof(float))));
  auto train_t = train.t().contiguous();
  for (int64_t first = 0; first < q; first += r.chunk) {
    const int64_t c = std::min(r.chunk, q - first);
    auto sim = torch::mm(test.narrow(0, first, c), train_t);
    auto [values, index] = sim.topk(kmax, /*dim=*/1, /*largest=*/true, /*sorted=*/true);
    sim = torch::Tensor();
    auto neighbour_labels = labels.index_select(0, index.flatten()).view({c, kmax});
    auto weights = values.div(o.temperature).exp_();
    for (size_t i = 0; i < o.ks.size(); ++i) {
      const int64_t k = r.k_used[i];
      auto votes = torch::zeros({c, classes}, weights.options());
      votes.scatter_add_(1, neighbour_labels.narrow(1, 0, k), weights.narrow(1, 0, k));
      auto order = std::get<1>(votes.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
      r.ranked[i].narrow(0, first, c).copy_(order.narrow(1, 0, keep));
    }
    if (o.on_chunk && !o.on_chunk(first + c, q)) return r;
  }
  r.completed = true;
  return r;
}

}  // namespace scdino::eval
