// t-SNE's input affinities: the conditional Gaussian of every point over its
// k nearest neighbours, its bandwidth set by the perplexity, then
// symmetrised and normalised into a sparse P (van der Maaten 2014). Used by
// eval/tsne.cc only. Reentrant; a WorkerPool serves one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "eval/neighbor_graph.h"

namespace scdino::eval::detail {

// Points handled per work chunk: enough to amortise the hand-out, small
// enough that two threads stay balanced.
constexpr int64_t kChunk = 256;

// Independent accumulators in the force sweeps: the compiler may not
// reorder float additions, so without them each sum is one serial chain;
// with them the sweeps vectorise (SSE at -O2).
constexpr int kLanes = 8;

// Sparse symmetric P in compressed rows; both (i, j) and (j, i) are stored.
// Rows are padded to a multiple of kLanes with (i, 0) entries, which add
// nothing to any sum, so that the attraction sweep has no remainder loop.
struct SparseP {
  std::vector<int64_t> offsets;  // n + 1
  std::vector<int32_t> cols;
  std::vector<float> vals;
};

/// Symmetrised, normalised P = (P_cond + P_cond^T) / sum from the first
/// `kuse` neighbours of every row, rows padded for the attraction sweep.
/// *aborted: `stop` said so before the end (P is then empty).
SparseP JointProbabilities(const NeighborGraph& g, int64_t kuse, double perplexity, WorkerPool& pool,
                           const std::function<bool()>& stop, bool* aborted);

}  // namespace scdino::eval::detail
