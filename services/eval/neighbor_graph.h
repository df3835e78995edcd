// The k-nearest-neighbour graph that t-SNE and UMAP start from, a brute-force
// exact builder for tests and small inputs (the evaluation service builds the
// graph with LibTorch: blocked matrix products and top-k), and the small
// pieces the embedding code shares: symmetrisation of kNN edge values, a
// fixed worker pool, a seeded generator whose numbers do not depend on the
// standard library, input checks.
// Thread-safety: NeighborGraph is a plain value; the free functions are
// reentrant; one WorkerPool serves one caller at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

/// The k nearest neighbours of each of n points, the point itself excluded.
struct NeighborGraph {
  /// Points.
  int64_t n = 0;
  /// Neighbours per point.
  int64_t k = 0;
  /// n x k, row-major: indices[i * k + r] is the (r+1)-th nearest neighbour of i.
  std::vector<int64_t> indices;
  /// n x k, row-major, ascending within a row: Euclidean distances (or cosine
  /// distances where the consumer is told so).
  std::vector<float> distances;
};

/// Checks what the embeddings rely on: n >= 2, 1 <= k <= n - 1, both arrays
/// n * k long, indices in [0, n) and never the row itself, distances finite,
/// >= 0 and ascending within each row. InvalidArgument, prefixed by `who`,
/// names the first offending row, column and value.
Status ValidateNeighborGraph(const NeighborGraph& g, const std::string& who);

/// Settings of ExactKnn.
struct ExactKnnOptions {
  /// Worker threads (>= 1); the result does not depend on it.
  int threads = 1;
  /// Polled between row blocks; returning true ends the search with Aborted.
  std::function<bool()> should_stop;
};

/// Exact Euclidean k nearest neighbours of the rows of x (n x d, row-major)
/// by brute force: O(n^2 d) time, O(n k) memory. Candidates are compared in
/// single precision (ties: lower index first) and the kept distances are
/// recomputed in double. For tests and small inputs; n = 20000, d = 384,
/// k = 91 takes about 8 s on 2 threads. InvalidArgument when n < 2, d < 1,
/// x.size() != n * d, a value is not finite, k is outside [1, n - 1] or
/// threads < 1.
StatusOr<NeighborGraph> ExactKnn(const std::vector<float>& x, int64_t n, int64_t d, int64_t k,
                                 const ExactKnnOptions& options = {});

namespace detail {

/// InvalidArgument (prefixed by `who`, naming `what`) unless n >= 2, d >= 1,
/// x.size() == n * d and every value is finite.
Status CheckRows(const std::string& who, const char* what, const std::vector<float>& x, int64_t n, int64_t d);

/// Sum of squared differences of two float rows, in float with independent
/// lanes so that it vectorises. Relative error below (d + 16) * 2^-24.
float SquaredDistanceF(const float* a, const float* b, int64_t d);

/// The same in double: differences and squares of floats are (nearly)
/// exact in double, so the relative error is about d * 2^-53.
double SquaredDistanceD(const float* a, const float* b, int64_t d);

/// splitmix64 (Steele, Lea, Flood 2014): a counter-based 64-bit generator,
/// identical on every platform and cheap to seed per point or per epoch.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  /// Integer in [0, n), n > 0; the modulo bias, below n / 2^64, is immaterial here.
  uint64_t Below(uint64_t n) { return Next() % n; }
  /// Standard normal by Box-Muller (one value per call; no cached spare so
  /// the stream position is simple to reason about).
  double Normal();

 private:
  uint64_t state_;
};

/// Mixes several words into one seed, so that (seed, epoch, point) streams
/// are independent.
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0);

/// A fixed set of threads that run numbered chunks of work. The calling
/// thread works too, so threads == 1 starts no thread at all. Chunks are
/// handed out dynamically; callers keep results deterministic by writing
/// only per-chunk or per-point outputs and reducing them in a fixed order.
class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Runs fn(c) for every c in [0, chunks) and waits for all of them. A call
  /// returning false stops the hand-out of further chunks; Run then returns
  /// false. An exception thrown by fn is rethrown here after the others end.
  bool Run(int64_t chunks, const std::function<bool(int64_t)>& fn);
  /// The same, fn(c, worker) also told which thread runs it, in
  /// [0, threads()), for per-thread scratch that is reduced afterwards.
  bool RunIndexed(int64_t chunks, const std::function<bool(int64_t, int)>& fn);

 private:
  void WorkLoop(int worker);
  void Drain(int worker);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool quit_ = false;
  const std::function<bool(int64_t, int)>* job_ = nullptr;
  int64_t chunks_ = 0;
  int64_t next_ = 0;
  bool stopped_ = false;
  std::exception_ptr error_;
};

}  // namespace detail

/// A symmetric sparse matrix in compressed rows: both directions of every
/// edge stored, columns ascending within a row, no self loops.
struct SparseGraph {
  /// n + 1 row starts into cols and vals.
  std::vector<int64_t> offsets;
  std::vector<int32_t> cols;
  std::vector<float> vals;
  int64_t n() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

/// How SymmetrizeNeighbors joins the values a = v(i -> j) and b = v(j -> i)
/// (a missing direction counts as 0).
enum class Symmetrize {
  kSum,         ///< a + b: t-SNE's P_cond + P_cond^T
  kFuzzyUnion,  ///< a + b - a b: UMAP's fuzzy set union
};

/// The symmetric matrix made from a value per directed kNN edge: v[i * kuse
/// + r] belongs to the edge from i to its r-th neighbour (r < kuse <= g.k).
/// O(n kuse) time and memory; the result does not depend on the pool's
/// thread count. g must be valid and g.n < 2^31.
SparseGraph SymmetrizeNeighbors(const NeighborGraph& g, int64_t kuse, const std::vector<float>& v, Symmetrize how,
                                detail::WorkerPool& pool);

}  // namespace scdino::eval
