// Validation of an AnnData before it is written (features/anndata.h): sizes,
// unique names, keys HDF5 can hold and strings h5py can decode.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "features/anndata.h"

namespace scdino::features {
namespace {

// ---------------------------------------------------------------------------
// Validation: everything is checked before the first byte is written, so a
// bad AnnData never costs the caller an existing file.

std::string Count(size_t n) { return std::to_string(n); }

// h5py decodes strings strictly as UTF-8 and HDF5 stores them as C strings, so
// invalid UTF-8 or an embedded NUL would give a file anndata cannot read back
// (or silently truncated values). Returns an empty string when `s` is fine.
std::string BadStringReason(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c == 0) return "contains a NUL character at byte " + Count(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return "is not valid UTF-8 (byte " + Count(i) + ")";
    }
    if (i + len > n) return "is not valid UTF-8 (truncated sequence at byte " + Count(i) + ")";
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return "is not valid UTF-8 (byte " + Count(i + k) + ")";
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return "is not valid UTF-8 (byte " + Count(i) + ")";
    }
    i += len;
  }
  return {};
}

Status CheckStrings(const std::string& field, const std::vector<std::string>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    std::string why = BadStringReason(values[i]);
    if (!why.empty()) return Status::InvalidArgument(field + " entry " + Count(i) + " " + why);
  }
  return Status::Ok();
}

// Names become HDF5 link names: '/' would make a path, "." is the group
// itself, and an empty name is refused by HDF5.
Status CheckKey(const std::string& field, const std::string& key) {
  if (key.empty() || key == "." || key.find('/') != std::string::npos) {
    return Status::InvalidArgument(field + " name '" + key +
                                   "' is not usable as an HDF5 name (empty, \".\" or contains '/')");
  }
  std::string why = BadStringReason(key);
  if (!why.empty()) return Status::InvalidArgument(field + " name '" + key + "' " + why);
  return Status::Ok();
}

// anndata warns on duplicate obs/var names, and pandas categories must be
// unique, so duplicates are refused here rather than discovered by the reader.
Status CheckUnique(const std::string& field, const std::vector<std::string>& names) {
  std::unordered_map<std::string, size_t> first;
  first.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto [it, inserted] = first.emplace(names[i], i);
    if (!inserted) {
      return Status::InvalidArgument(field + ": '" + names[i] + "' appears more than once (entries " +
                                     Count(it->second) + " and " + Count(i) + "); names must be unique");
    }
  }
  return Status::Ok();
}

// An uns dict and the dicts in it: names usable and unique, strings valid.
Status CheckUnsDict(const UnsDict& d, const std::string& path) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : d.strings) {
    if (Status s = CheckKey(path, key); !s.ok()) return s;
    std::string why = BadStringReason(value);
    if (!why.empty()) return Status::InvalidArgument(path + "['" + key + "'] " + why);
    keys.push_back(key);
  }
  for (const auto& entry : d.ints) {
    if (Status s = CheckKey(path, entry.first); !s.ok()) return s;
    keys.push_back(entry.first);
  }
  for (const auto& entry : d.numbers) {
    if (Status s = CheckKey(path, entry.first); !s.ok()) return s;
    keys.push_back(entry.first);
  }
  for (const auto& entry : d.arrays) {
    if (Status s = CheckKey(path, entry.first); !s.ok()) return s;
    keys.push_back(entry.first);
  }
  for (const auto& sub : d.dicts) {
    if (Status s = CheckKey(path, sub.name); !s.ok()) return s;
    if (Status s = CheckUnsDict(sub, path + "['" + sub.name + "']"); !s.ok()) return s;
    keys.push_back(sub.name);
  }
  return CheckUnique(path + " keys", keys);
}

// A compressed-row matrix of n x n: row starts from 0 to the value count,
// never decreasing, columns in range, values finite.
Status CheckObsp(const ObspMatrix& m, uint64_t n) {
  const std::string field = "obsp['" + m.name + "']";
  if (m.indptr.size() != n + 1) {
    return Status::InvalidArgument(field + " has " + Count(m.indptr.size()) + " row starts, expected n_obs + 1 = " +
                                   std::to_string(n + 1));
  }
  if (m.indices.size() != m.data.size()) {
    return Status::InvalidArgument(field + " has " + Count(m.indices.size()) + " column indices for " +
                                   Count(m.data.size()) + " values");
  }
  if (m.indptr.front() != 0 || m.indptr.back() != static_cast<int64_t>(m.data.size())) {
    return Status::InvalidArgument(field + ": row starts run from " + std::to_string(m.indptr.front()) + " to " +
                                   std::to_string(m.indptr.back()) + ", expected 0 to the value count " +
                                   Count(m.data.size()));
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (m.indptr[i + 1] < m.indptr[i]) {
      return Status::InvalidArgument(field + ": row " + std::to_string(i) + " ends before it starts");
    }
  }
  for (size_t e = 0; e < m.indices.size(); ++e) {
    if (m.indices[e] < 0 || static_cast<uint64_t>(m.indices[e]) >= n) {
      return Status::InvalidArgument(field + ": value " + Count(e) + " is in column " + std::to_string(m.indices[e]) +
                                     ", outside [0, " + std::to_string(n) + ")");
    }
    if (!std::isfinite(m.data[e])) {
      return Status::InvalidArgument(field + ": value " + Count(e) + " is not finite");
    }
  }
  return Status::Ok();
}

// The obs columns: each of strings or ints, n_obs of them, names unique.
Status CheckObsColumns(const AnnData& a, uint64_t n_obs) {
  std::vector<std::string> column_names;
  for (const ObsColumn& c : a.obs) {
    const std::string field = "obs column '" + c.name + "'";
    if (Status s = CheckKey("obs column", c.name); !s.ok()) return s;
    // anndata reserves "_index" for the index dataset of a dataframe.
    if (c.name == "_index") return Status::InvalidArgument("obs column name '_index' is reserved by anndata");
    if (!c.strings.empty() && !c.ints.empty()) {
      return Status::InvalidArgument(field + ": both strings (" + Count(c.strings.size()) + ") and ints (" +
                                     Count(c.ints.size()) + ") are filled; exactly one must be");
    }
    const size_t got = c.ints.empty() ? c.strings.size() : c.ints.size();
    const char* which = c.ints.empty() ? "strings" : "ints";
    if (got != n_obs) {
      return Status::InvalidArgument(field + " has " + Count(got) + " " + which + ", expected n_obs = " +
                                     std::to_string(a.n_obs));
    }
    if (Status s = CheckStrings(field, c.strings); !s.ok()) return s;
    column_names.push_back(c.name);
  }
  return CheckUnique("obs column names", column_names);
}

// The uns entries: strings, numbers and dicts under unique keys.
Status CheckUns(const AnnData& a) {
  std::vector<std::string> uns_keys;
  for (const auto& [key, value] : a.uns_strings) {
    if (Status s = CheckKey("uns", key); !s.ok()) return s;
    std::string why = BadStringReason(value);
    if (!why.empty()) return Status::InvalidArgument("uns string '" + key + "' " + why);
    uns_keys.push_back(key);
  }
  for (const auto& entry : a.uns_numbers) {
    if (Status s = CheckKey("uns", entry.first); !s.ok()) return s;
    uns_keys.push_back(entry.first);
  }
  for (const auto& d : a.uns_dicts) {
    if (Status s = CheckKey("uns", d.name); !s.ok()) return s;
    if (Status s = CheckUnsDict(d, "uns['" + d.name + "']"); !s.ok()) return s;
    uns_keys.push_back(d.name);
  }
  return CheckUnique("uns keys", uns_keys);
}

}  // namespace

Status ValidateAnnData(const AnnData& a) {
  if (a.n_obs < 0 || a.n_vars < 0) {
    return Status::InvalidArgument("n_obs and n_vars must not be negative, got n_obs = " + std::to_string(a.n_obs) +
                                   ", n_vars = " + std::to_string(a.n_vars));
  }
  const auto n_obs = static_cast<uint64_t>(a.n_obs);
  const auto n_vars = static_cast<uint64_t>(a.n_vars);
  if (n_vars != 0 && n_obs > std::numeric_limits<uint64_t>::max() / n_vars) {
    return Status::InvalidArgument("n_obs * n_vars overflows (" + std::to_string(a.n_obs) + " x " +
                                   std::to_string(a.n_vars) + ")");
  }
  if (a.X.size() != n_obs * n_vars) {
    return Status::InvalidArgument("X has " + Count(a.X.size()) + " values, expected n_obs * n_vars = " +
                                   std::to_string(n_obs * n_vars) + " (" + std::to_string(a.n_obs) + " x " +
                                   std::to_string(a.n_vars) + ")");
  }
  if (a.obs_names.size() != n_obs) {
    return Status::InvalidArgument("obs_names has " + Count(a.obs_names.size()) + " entries, expected n_obs = " +
                                   std::to_string(a.n_obs));
  }
  if (a.var_names.size() != n_vars) {
    return Status::InvalidArgument("var_names has " + Count(a.var_names.size()) + " entries, expected n_vars = " +
                                   std::to_string(a.n_vars));
  }
  std::vector<std::string> obsm_names;
  for (const auto& m : a.obsm) {
    if (Status s = CheckKey("obsm", m.name); !s.ok()) return s;
    if (m.cols < 1 || m.values.size() != n_obs * static_cast<uint64_t>(m.cols)) {
      return Status::InvalidArgument("obsm['" + m.name + "'] has " + Count(m.values.size()) +
                                     " values, expected n_obs * cols = " + std::to_string(a.n_obs) + " x " +
                                     std::to_string(m.cols) + " (cols >= 1)");
    }
    obsm_names.push_back(m.name);
  }
  if (Status s = CheckUnique("obsm names", obsm_names); !s.ok()) return s;
  std::vector<std::string> obsp_names;
  for (const auto& m : a.obsp) {
    if (Status s = CheckKey("obsp", m.name); !s.ok()) return s;
    if (Status s = CheckObsp(m, n_obs); !s.ok()) return s;
    obsp_names.push_back(m.name);
  }
  if (Status s = CheckUnique("obsp names", obsp_names); !s.ok()) return s;
  if (Status s = CheckStrings("obs_names", a.obs_names); !s.ok()) return s;
  if (Status s = CheckStrings("var_names", a.var_names); !s.ok()) return s;
  if (Status s = CheckUnique("obs_names", a.obs_names); !s.ok()) return s;
  if (Status s = CheckUnique("var_names", a.var_names); !s.ok()) return s;

  if (Status s = CheckObsColumns(a, n_obs); !s.ok()) return s;
  return CheckUns(a);
}

}  // namespace scdino::features
