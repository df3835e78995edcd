// The on-disk layout of one checkpoint's features, written by scdino-features
// and read by scdino-eval (docs/features.md):
//   features.npy       float32 n x d, L2-normalised rows (scDINO's default)
//   features_raw.npy   the CLS tokens before normalisation (on request)
//   index.csv          index,path,class_name,class_index,split (row i = feature row i)
//   metadata.json      checkpoint, model, channels, preprocessing, statistics
//   features.h5ad      AnnData: X = features, obs = index columns, uns = metadata
// metadata.json is written last: a directory without it is incomplete.
// Reading and writing are functions of their arguments; thread-compatible.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/split.h"

namespace scdino::features {

struct IndexRow {
  std::string path;
  std::string class_name;
  int64_t class_index = -1;
  data::Split split = data::Split::kTrain;
};

struct FeatureSet {
  std::string dir;
  torch::Tensor features;           ///< [n, d] float32, CPU
  std::vector<IndexRow> rows;       ///< n rows
  std::vector<std::string> classes; ///< index = class_index
  std::string metadata_json;
};

/// RFC 4180 CSV: fields with commas, quotes or line breaks are quoted.
std::string IndexCsv(const std::vector<IndexRow>& rows);
/// Errors name the file, the line and the field.
StatusOr<std::vector<IndexRow>> ParseIndexCsv(const std::string& text, const std::string& origin);

/// Reads features.npy (or features_raw.npy when `raw`), index.csv and
/// metadata.json of a complete directory, checking they agree.
StatusOr<FeatureSet> ReadFeatureSet(const std::string& dir, bool raw = false);

}  // namespace scdino::features
