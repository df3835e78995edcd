// Barnes-Hut t-SNE. Every per-point quantity (forces, the point's share of
// Z, its update) is computed from the tree and the sparse P alone, and the
// only reductions (Z, the KL divergence, P's normalisation) run in point
// order on one thread: that is what makes the output independent of the
// thread count, at no measurable cost.
#include "eval/tsne.h"
#include "eval/tsne_affinities.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace scdino::eval {
namespace {


using detail::JointProbabilities;
using detail::kChunk;
using detail::kLanes;
using detail::SparseP;

// A quadtree over the layout, rebuilt every iteration. Cells are square.
// The points of every cell are contiguous in tree order (`order`, with their
// positions in `pos`), so "cell A lies inside cell B" is a range test, a
// leaf's points are one short run, and neighbouring entries are close in
// the plane.
struct QuadTree {
  struct Cell {
    double com_x = 0, com_y = 0;  // centre of mass
    double mid_x = 0, mid_y = 0;  // geometric centre
    double half = 0;              // half the side
    int32_t count = 0;
    int32_t first_child = -1;  // four consecutive cells, or -1 for a leaf
    int32_t begin = 0;         // first point in order
  };
  static constexpr int kLeaf = 8;
  // Target groups: the largest cells with at most kGroup points; together
  // they hold every point once.
  static constexpr int kGroup = 32;
  // Below 2^-40 of the root side only coincident points remain together.
  static constexpr int kMaxDepth = 40;

  std::vector<Cell> cells;
  std::vector<int32_t> groups, order, scratch_order;
  std::vector<double> pos, scratch_pos;  // x, y per point, in tree order

  void Build(const std::vector<double>& y, int64_t n) {
    cells.clear();
    groups.clear();
    order.resize(static_cast<size_t>(n));
    pos.assign(y.begin(), y.begin() + 2 * n);
    double x0 = y[0], x1 = y[0], y0 = y[1], y1 = y[1];
    for (int64_t i = 0; i < n; ++i) {
      order[i] = static_cast<int32_t>(i);
      x0 = std::min(x0, y[2 * i]), x1 = std::max(x1, y[2 * i]);
      y0 = std::min(y0, y[2 * i + 1]), y1 = std::max(y1, y[2 * i + 1]);
    }
    Cell root;
    root.mid_x = 0.5 * (x0 + x1);
    root.mid_y = 0.5 * (y0 + y1);
    // Slightly larger than the data so that no point lies on the boundary.
    root.half = 0.5 * std::max(x1 - x0, y1 - y0) * (1 + 1e-9) + 1e-300;
    root.count = static_cast<int32_t>(n);
    cells.push_back(root);
    Split(0, 0, true);
  }

  void Split(int32_t id, int depth, bool above_group) {
    const Cell c = cells[id];
    if (above_group && c.count <= kGroup) groups.push_back(id), above_group = false;
    double sx = 0, sy = 0;
    if (c.count <= kLeaf || depth >= kMaxDepth) {
      if (above_group) groups.push_back(id);
      for (int32_t q = c.begin; q < c.begin + c.count; ++q) sx += pos[2 * q], sy += pos[2 * q + 1];
      cells[id].com_x = sx / c.count;
      cells[id].com_y = sy / c.count;
      return;
    }
    // Stable counting sort of the cell's points into its four quadrants.
    auto quadrant = [&](int32_t q) { return (pos[2 * q] >= c.mid_x ? 1 : 0) | (pos[2 * q + 1] >= c.mid_y ? 2 : 0); };
    int32_t cnt[4] = {0, 0, 0, 0};
    for (int32_t q = c.begin; q < c.begin + c.count; ++q) ++cnt[quadrant(q)];
    int32_t at[4] = {0, cnt[0], cnt[0] + cnt[1], cnt[0] + cnt[1] + cnt[2]};
    scratch_order.resize(static_cast<size_t>(c.count));
    scratch_pos.resize(static_cast<size_t>(2 * c.count));
    for (int32_t q = c.begin; q < c.begin + c.count; ++q) {
      const int32_t s = at[quadrant(q)]++;
      scratch_order[s] = order[q];
      scratch_pos[2 * s] = pos[2 * q];
      scratch_pos[2 * s + 1] = pos[2 * q + 1];
    }
    std::copy(scratch_order.begin(), scratch_order.begin() + c.count, order.begin() + c.begin);
    std::copy(scratch_pos.begin(), scratch_pos.begin() + 2 * c.count, pos.begin() + 2 * c.begin);
    const int32_t first = static_cast<int32_t>(cells.size());
    cells[id].first_child = first;
    for (int q = 0, begin = c.begin; q < 4; begin += cnt[q], ++q) {
      Cell child;
      child.half = 0.5 * c.half;
      child.mid_x = c.mid_x + ((q & 1) ? child.half : -child.half);
      child.mid_y = c.mid_y + ((q & 2) ? child.half : -child.half);
      child.count = cnt[q];
      child.begin = begin;
      cells.push_back(child);
    }
    for (int q = 0; q < 4; ++q) {
      if (cnt[q] == 0) continue;
      Split(first + q, depth + 1, above_group);
      sx += cells[first + q].com_x * cnt[q];
      sy += cells[first + q].com_y * cnt[q];
    }
    cells[id].com_x = sx / c.count;
    cells[id].com_y = sy / c.count;
  }
};

// Per point: the attraction sum_j p_ij w_ij (y_i - y_j), the Barnes-Hut
// repulsion sum_j w_ij^2 (y_i - y_j) and the point's share of Z.
struct Forces {
  std::vector<double> ax, ay, rx, ry, z;
  std::vector<float> yf;  // the layout in float, for Attraction
  explicit Forces(int64_t n) : ax(n), ay(n), rx(n), ry(n), z(n), yf(2 * n) {}
};

// Sources acting on one target group: (x, y) relative to the group's centre
// and a mass (1 for a point, the count for a summarised cell). Padded with
// massless entries to a multiple of kLanes so the sweep has no remainder.
struct SourceList {
  std::vector<float> x, y, m;
  void Clear() { x.clear(), y.clear(), m.clear(); }
  void Add(double px, double py, double mass) {
    x.push_back(static_cast<float>(px));
    y.push_back(static_cast<float>(py));
    m.push_back(static_cast<float>(mass));
  }
};

// Repulsion on the points of one group, Barnes-Hut style but decided once
// per group: a cell of side s is summarised for the whole group when
// s < theta * (r - radius), r being its distance from the group's centre,
// which bounds s / r < theta for every member; so it is at least as
// accurate as the per-point test, and the interactions become one dense,
// vectorised sweep. The group's own points always come in exactly, the
// point itself included: its term is w = 1 with no force, removed from z.
void GroupRepulsion(const QuadTree& tree, int32_t group, double theta, SourceList& src, Forces& f) {
  const auto& cells = tree.cells;
  const double* pos = tree.pos.data();
  const QuadTree::Cell& g = cells[group];
  double x0 = pos[2 * g.begin], x1 = x0, y0 = pos[2 * g.begin + 1], y1 = y0;
  for (int32_t q = g.begin; q < g.begin + g.count; ++q) {
    x0 = std::min(x0, pos[2 * q]), x1 = std::max(x1, pos[2 * q]);
    y0 = std::min(y0, pos[2 * q + 1]), y1 = std::max(y1, pos[2 * q + 1]);
  }
  const double cx = 0.5 * (x0 + x1), cy = 0.5 * (y0 + y1);
  const double radius = 0.5 * std::sqrt((x1 - x0) * (x1 - x0) + (y1 - y0) * (y1 - y0));
  src.Clear();
  int32_t stack[4 * QuadTree::kMaxDepth + 8];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const QuadTree::Cell& c = cells[stack[--top]];
    if (c.count == 0) continue;
    const bool holds_group = c.begin <= g.begin && g.begin < c.begin + c.count;
    const bool in_group = g.begin <= c.begin && c.begin < g.begin + g.count;
    if (!holds_group && !in_group) {
      const double dx = cx - c.com_x, dy = cy - c.com_y;
      const double r = std::sqrt(dx * dx + dy * dy) - radius;
      if (r > 0 && 2 * c.half < theta * r) {
        src.Add(c.com_x - cx, c.com_y - cy, c.count);
        continue;
      }
    }
    if (c.first_child < 0) {
      for (int32_t q = c.begin; q < c.begin + c.count; ++q) src.Add(pos[2 * q] - cx, pos[2 * q + 1] - cy, 1);
    } else {
      for (int q = 3; q >= 0; --q) stack[top++] = c.first_child + q;
    }
  }
  while (src.x.size() % kLanes != 0) src.Add(0, 0, 0);
  const size_t len = src.x.size();
  const float* __restrict sx = src.x.data();
  const float* __restrict sy = src.y.data();
  const float* __restrict sm = src.m.data();
  for (int32_t q = g.begin; q < g.begin + g.count; ++q) {
    const float x = static_cast<float>(pos[2 * q] - cx), y = static_cast<float>(pos[2 * q + 1] - cy);
    float fx[kLanes] = {}, fy[kLanes] = {}, fz[kLanes] = {};
    for (size_t j = 0; j < len; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float dx = x - sx[j + l], dy = y - sy[j + l];
        const float w = 1.0f / (1.0f + dx * dx + dy * dy);
        const float mw = sm[j + l] * w;
        fz[l] += mw;
        fx[l] += mw * w * dx;
        fy[l] += mw * w * dy;
      }
    }
    double tx = 0, ty = 0, tz = -1.0;  // -1: the point's own term
    for (int l = 0; l < kLanes; ++l) {
      tx += fx[l];
      ty += fy[l];
      tz += fz[l];
    }
    const int32_t i = tree.order[q];
    f.rx[i] = tx;
    f.ry[i] = ty;
    f.z[i] = tz;
  }
}

// sum_j p_ij w_ij (y_i - y_j) over row i of P, in float lanes. `yf` is a
// float copy of the layout: the neighbours' positions are gathered from
// all over it, and at half the size of the double layout it stays in cache.
void Attraction(int32_t i, const std::vector<float>& yf, const SparseP& P, double* ax, double* ay) {
  const float xi = yf[2 * i], yi = yf[2 * i + 1];
  float sx[kLanes] = {}, sy[kLanes] = {};
  for (int64_t e = P.offsets[i]; e < P.offsets[i + 1]; e += kLanes) {
    float dx[kLanes], dy[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      const int32_t j = P.cols[e + l];
      dx[l] = xi - yf[2 * j];
      dy[l] = yi - yf[2 * j + 1];
    }
    for (int l = 0; l < kLanes; ++l) {
      const float pw = P.vals[e + l] / (1.0f + dx[l] * dx[l] + dy[l] * dy[l]);
      sx[l] += pw * dx[l];
      sy[l] += pw * dy[l];
    }
  }
  double tx = 0, ty = 0;
  for (int l = 0; l < kLanes; ++l) {
    tx += sx[l];
    ty += sy[l];
  }
  *ax = tx;
  *ay = ty;
}

// Fills `f` for the layout `y` and returns Z = sum_{i != j} w_ij, summed in
// point order.
double ComputeForces(const std::vector<double>& y, const SparseP& P, double theta, QuadTree& tree,
                     detail::WorkerPool& pool, Forces& f) {
  const int64_t n = static_cast<int64_t>(P.offsets.size()) - 1;
  tree.Build(y, n);
  for (int64_t e = 0; e < 2 * n; ++e) f.yf[e] = static_cast<float>(y[e]);
  const auto& groups = tree.groups;
  constexpr int64_t kGroupsPerChunk = 8;
  const int64_t ng = static_cast<int64_t>(groups.size());
  pool.Run((ng + kGroupsPerChunk - 1) / kGroupsPerChunk, [&](int64_t c) {
    SourceList src;
    for (int64_t gi = c * kGroupsPerChunk; gi < std::min(ng, (c + 1) * kGroupsPerChunk); ++gi) {
      GroupRepulsion(tree, groups[gi], theta, src, f);
      const QuadTree::Cell& g = tree.cells[groups[gi]];
      for (int32_t q = g.begin; q < g.begin + g.count; ++q) {
        const int32_t i = tree.order[q];
        Attraction(i, f.yf, P, &f.ax[i], &f.ay[i]);
      }
    }
    return true;
  });
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += f.z[i];
  return z;
}

// KL(P || Q) with q_ij = w_ij / Z.
double KlDivergence(const std::vector<double>& y, const SparseP& P, double z) {
  const int64_t n = static_cast<int64_t>(P.offsets.size()) - 1;
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = P.offsets[i]; e < P.offsets[i + 1]; ++e) {
      const int32_t j = P.cols[e];
      const double dx = y[2 * i] - y[2 * j], dy = y[2 * i + 1] - y[2 * j + 1];
      const double p = P.vals[e];
      if (p > 0) kl += p * std::log(p * z * (1.0 + dx * dx + dy * dy));
    }
  }
  return kl;
}

Status CheckOptions(const NeighborGraph& g, const BarnesHutTsneOptions& o) {
  if (Status s = ValidateNeighborGraph(g, "BarnesHutTsne"); !s.ok()) return s;
  auto bad = [](const std::string& what) { return Status::InvalidArgument("BarnesHutTsne: " + what); };
  if (g.n > std::numeric_limits<int32_t>::max()) return bad("n = " + std::to_string(g.n) + " exceeds 2^31 - 1");
  if (!(std::isfinite(o.perplexity) && o.perplexity > 0)) {
    return bad("perplexity must be a positive number, got " + FormatNumber(o.perplexity));
  }
  if (o.iterations < 0) return bad("iterations must be >= 0, got " + std::to_string(o.iterations));
  if (!(std::isfinite(o.learning_rate) && o.learning_rate >= 0)) {
    return bad("learning_rate must be > 0, or 0 for \"auto\", got " + FormatNumber(o.learning_rate));
  }
  if (!(std::isfinite(o.early_exaggeration) && o.early_exaggeration > 0)) {
    return bad("early_exaggeration must be a positive number, got " + FormatNumber(o.early_exaggeration));
  }
  if (o.exaggeration_iterations < 0) {
    return bad("exaggeration_iterations must be >= 0, got " + std::to_string(o.exaggeration_iterations));
  }
  if (!(o.theta >= 0 && o.theta <= 1)) return bad("theta must be in [0, 1], got " + FormatNumber(o.theta));
  if (o.threads < 1) return bad("threads must be >= 1, got " + std::to_string(o.threads));
  if (!o.initial_layout.empty()) return detail::CheckRows("BarnesHutTsne", "initial_layout", o.initial_layout, g.n, 2);
  return Status::Ok();
}

}  // namespace

StatusOr<BarnesHutTsneResult> BarnesHutTsne(const NeighborGraph& g, const BarnesHutTsneOptions& o) {
  if (Status s = CheckOptions(g, o); !s.ok()) return s;
  const int64_t n = g.n;
  BarnesHutTsneResult out;
  out.perplexity = std::min(o.perplexity, std::max(1.0, (n - 1) / 3.0));
  out.neighbors = std::min<int64_t>(n - 1, static_cast<int64_t>(std::floor(3 * out.perplexity + 1)));
  if (g.k < out.neighbors) {
    return Status::InvalidArgument("BarnesHutTsne: the neighbour graph has k = " + std::to_string(g.k) +
                                   " neighbours per point; perplexity " + FormatNumber(out.perplexity) + " needs " +
                                   std::to_string(out.neighbors) + " (min(n - 1, floor(3 * perplexity + 1)))");
  }
  out.learning_rate = o.learning_rate > 0 ? o.learning_rate : std::max(n / o.early_exaggeration / 4, 50.0);

  std::vector<double> y(static_cast<size_t>(2 * n));
  if (!o.initial_layout.empty()) {
    double scale = 1;
    if (o.rescale_initial_layout) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += o.initial_layout[2 * i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (o.initial_layout[2 * i] - mean) * (o.initial_layout[2 * i] - mean);
      const double sd = std::sqrt(var / n);
      if (!(sd > 0)) {
        return Status::InvalidArgument("BarnesHutTsne: initial_layout column 0 is constant; it cannot be rescaled "
                                       "to standard deviation 1e-4");
      }
      scale = 1e-4 / sd;
    }
    for (int64_t e = 0; e < 2 * n; ++e) y[e] = o.initial_layout[e] * scale;
  } else {
    detail::SplitMix64 rng(o.seed);
    for (auto& v : y) v = 1e-4 * rng.Normal();
  }

  detail::WorkerPool pool(o.threads);
  bool aborted = false;
  const SparseP P = JointProbabilities(g, out.neighbors, out.perplexity, pool, o.should_stop, &aborted);
  if (aborted) return Status::Aborted("BarnesHutTsne: stopped on request while computing affinities");

  QuadTree tree;
  Forces f(n);
  std::vector<double> update(static_cast<size_t>(2 * n), 0.0), gains(static_cast<size_t>(2 * n), 1.0);
  const int64_t early = std::min(o.exaggeration_iterations, o.iterations);
  for (int64_t it = 0; it < o.iterations; ++it) {
    if (o.should_stop && o.should_stop()) {
      return Status::Aborted("BarnesHutTsne: stopped on request at iteration " + std::to_string(it));
    }
    if (it == early) {
      // scikit-learn runs the two phases as separate descents, each starting
      // from zero momentum and unit gains; the schedule is tuned for that.
      std::fill(update.begin(), update.end(), 0.0);
      std::fill(gains.begin(), gains.end(), 1.0);
    }
    const double exag = it < early ? o.early_exaggeration : 1.0;
    const double momentum = it < early ? 0.5 : 0.8;
    const double inv_z = 1.0 / ComputeForces(y, P, o.theta, tree, pool, f);
    pool.Run((n + kChunk - 1) / kChunk, [&](int64_t c) {
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        // dC/dy_i = 4 sum_j (p_ij - q_ij) w_ij (y_i - y_j).
        const double grad[2] = {4.0 * (exag * f.ax[i] - f.rx[i] * inv_z), 4.0 * (exag * f.ay[i] - f.ry[i] * inv_z)};
        for (int a = 0; a < 2; ++a) {
          const int64_t e = 2 * i + a;
          // Delta-bar-delta: a larger step where the gradient keeps its sign
          // against the last update, a smaller one where it flips.
          gains[e] = update[e] * grad[a] < 0 ? gains[e] + 0.2 : gains[e] * 0.8;
          gains[e] = std::max(gains[e], 0.01);
          update[e] = momentum * update[e] - out.learning_rate * gains[e] * grad[a];
          y[e] += update[e];
        }
      }
      return true;
    });
    if (o.on_progress) o.on_progress(it + 1, o.iterations);
  }

  out.kl_divergence = KlDivergence(y, P, ComputeForces(y, P, o.theta, tree, pool, f));
  out.y.resize(static_cast<size_t>(2 * n));
  for (int64_t e = 0; e < 2 * n; ++e) out.y[e] = static_cast<float>(y[e]);
  return out;
}

}  // namespace scdino::eval
