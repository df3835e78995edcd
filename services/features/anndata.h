// An AnnData (.h5ad) writer for extracted features, on the plain libhdf5 C
// API. The features go to scanpy/anndata users, and .h5ad is what they open;
// writing it here keeps Python out of the extraction service. The layout
// follows the on-disk AnnData encoding of anndata >= 0.8 (every element
// carries "encoding-type"/"encoding-version" attributes), so
// `anndata.read_h5ad` reads the file without conversion or warnings.
// A writer is used by one thread; distinct files may be written concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace scdino::features {

/// One obs column: strings (written as a pandas categorical when categorical,
/// else a string array) or int64 values. Exactly one of strings/ints is
/// filled, with n_obs entries. With n_obs == 0 both are empty and the column
/// is written as an (empty) string column.
struct ObsColumn {
  std::string name;                  ///< Column name; not "_index", no '/'.
  std::vector<std::string> strings;  ///< UTF-8 values, n_obs of them, or empty.
  std::vector<int64_t> ints;         ///< n_obs values, or empty.
  bool categorical = true;           ///< Strings only: pandas category dtype.
};

/// One obsm entry: an n_obs x cols float32 array, e.g. "X_umap" (2 columns).
struct ObsmArray {
  std::string name;           ///< no '/'; unique within obsm
  int64_t cols = 0;
  std::vector<float> values;  ///< n_obs x cols, row-major
};

/// One obsp entry: an n_obs x n_obs sparse matrix in compressed rows
/// (scipy's csr_matrix), e.g. scanpy's "distances" and "connectivities".
struct ObspMatrix {
  std::string name;             ///< no '/'; unique within obsp
  std::vector<int64_t> indptr;   ///< n_obs + 1 row starts, from 0, non-decreasing
  std::vector<int64_t> indices;  ///< column of each value, in [0, n_obs); int64 as indptr (scipy wants one type)
  std::vector<float> data;      ///< the values, finite
};

/// A dict in uns (a nested mapping, as scanpy's uns['neighbors'] and
/// uns['pca']): scalars, float64 arrays and dicts, each name unique in it.
struct UnsDict {
  std::string name;
  std::vector<std::pair<std::string, std::string>> strings;
  std::vector<std::pair<std::string, int64_t>> ints;
  std::vector<std::pair<std::string, double>> numbers;
  std::vector<std::pair<std::string, std::vector<double>>> arrays;
  std::vector<UnsDict> dicts;
};

/// What WriteH5ad writes: a dense float32 matrix with its obs and var
/// annotations, embeddings, sparse graphs and uns entries. All strings must be valid UTF-8
/// without NUL characters (h5py decodes them strictly).
struct AnnData {
  int64_t n_obs = 0, n_vars = 0;
  std::vector<float> X;                ///< n_obs x n_vars, row-major
  std::vector<std::string> obs_names;  ///< n_obs unique names (the obs index)
  std::vector<ObsColumn> obs;          ///< obs columns, in this order
  std::vector<std::string> var_names;  ///< n_vars names, unique
  std::vector<ObsmArray> obsm;         ///< per-observation arrays (embeddings)
  std::vector<ObspMatrix> obsp;        ///< observation x observation graphs
  std::vector<std::pair<std::string, std::string>> uns_strings;  ///< uns scalars
  std::vector<std::pair<std::string, double>> uns_numbers;       ///< uns scalars
  std::vector<UnsDict> uns_dicts;                                ///< uns dicts
};

/// Checks `a` before anything is written: InvalidArgument naming the field,
/// the expected and the actual count, or the name or string that HDF5 or
/// h5py could not hold.
Status ValidateAnnData(const AnnData& a);

/// Writes `a` to `path` atomically (a temporary file beside it, then rename),
/// so an existing file is never left half-written. Validates sizes first
/// (InvalidArgument naming the field, the expected and the actual count);
/// IOError names the path and the HDF5 operation that failed.
Status WriteH5ad(const std::string& path, const AnnData& a);

}  // namespace scdino::features
