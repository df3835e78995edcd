// WriteH5ad: AnnData's on-disk encoding (anndata >= 0.8) written with the
// libhdf5 C API. The details below were checked against anndata 0.8's own
// reader and writer (anndata/_io/specs/methods.py) and against files written
// by anndata itself:
//  - every group and dataset carries "encoding-type" and "encoding-version"
//    as scalar variable-length UTF-8 string attributes; the reader dispatches
//    on exactly these two strings;
//  - strings are variable-length UTF-8 (h5py's string_dtype), because the
//    reader decodes them with `.asstr()`;
//  - a categorical's "ordered" attribute is h5py's bool, i.e. an HDF5 enum
//    over int8 with members FALSE = 0 and TRUE = 1;
//  - link names are created with the UTF-8 character set, as h5py does for
//    non-ASCII names, so column and uns names may be any UTF-8 text.
// The HDF5 C API has no exceptions and no destructors, so every id is held by
// an RAII holder and errors travel as Status values naming the operation.
#include "features/anndata.h"

#include <hdf5.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/env.h"

namespace scdino::features {
namespace {

// ---------------------------------------------------------------------------
// HDF5 plumbing.

// Owns one HDF5 id and closes it with the matching H5?close, so early returns
// on error paths cannot leak handles (which would also keep the file open).
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      Close();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  ~H5Id() { Close(); }

  bool valid() const { return id_ >= 0; }
  hid_t get() const { return id_; }
  /// Closes now; the result matters for files, where closing flushes.
  herr_t Close() {
    herr_t r = 0;
    if (id_ >= 0) r = closer_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// The automatic handler prints the error stack to stderr; a service wants
// the reason in its Status instead. Scoped so that other HDF5 users in the
// process keep their own setting.
class SilenceHdf5Errors {
 public:
  SilenceHdf5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~SilenceHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  SilenceHdf5Errors(const SilenceHdf5Errors&) = delete;
  SilenceHdf5Errors& operator=(const SilenceHdf5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

herr_t TakeInnermost(unsigned n, const H5E_error2_t* err, void* out) {
  // Walking upward, entry 0 is where the error was detected: the most
  // specific reason (e.g. errno text for a missing directory).
  if (n == 0 && err != nullptr && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

std::string Hdf5Reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, TakeInnermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "unknown HDF5 error" : reason;
}

using Dims = std::vector<hsize_t>;

// The in-file path of `name` under `parent_path`, for error messages.
std::string Join(const std::string& parent_path, const std::string& name) {
  return parent_path == "/" ? "/" + name : parent_path + "/" + name;
}

H5Id CreateSpace(const Dims& dims) {
  // No dims means a scalar: uns values and the encoding attributes.
  return H5Id(dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
              H5Sclose);
}

// Writes one file. `target` is the path the caller asked for; messages name
// it and the element being written, not just the temporary file.
class Writer {
 public:
  Writer(std::string target, std::string tmp) : target_(std::move(target)), tmp_(std::move(tmp)) {}

  Status Write(const AnnData& a) {
    if (Status s = MakeTypes(); !s.ok()) return s;
    file_ = H5Id(H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) return Fail("H5Fcreate of temporary file " + tmp_);
    const hid_t root = file_.get();
    if (Status s = SetEncoding(root, "/", "anndata", "0.1.0"); !s.ok()) return s;

    const Dims x_dims = {static_cast<hsize_t>(a.n_obs), static_cast<hsize_t>(a.n_vars)};
    if (Status s = WriteDataset(root, "/", "X", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x_dims, a.X.data(), "array");
        !s.ok()) {
      return s;
    }
    if (Status s = WriteObs(root, a); !s.ok()) return s;
    if (Status s = WriteVar(root, a); !s.ok()) return s;
    // Empty, but anndata always writes them; matching its layout keeps
    // other readers of .h5ad (R, Julia) on their tested path.
    for (const char* name : {"obsm", "varm", "obsp", "varp", "layers"}) {
      H5Id g;
      if (Status s = CreateDict(root, "/", name, &g); !s.ok()) return s;
      if (std::string(name) == "obsp") {
        for (const auto& m : a.obsp) {
          if (Status s = WriteCsr(g.get(), "/obsp", m, a.n_obs); !s.ok()) return s;
        }
      }
      if (std::string(name) != "obsm") continue;
      // Embeddings (X_pca, X_umap, ...): n_obs x cols arrays scanpy plots.
      for (const auto& m : a.obsm) {
        const Dims dims = {static_cast<hsize_t>(a.n_obs), static_cast<hsize_t>(m.cols)};
        if (Status s = WriteDataset(g.get(), "/obsm", m.name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, m.values.data(),
                                    "array");
            !s.ok()) {
          return s;
        }
      }
    }
    if (Status s = WriteUns(root, a); !s.ok()) return s;

    // Closing flushes: a full disk shows up here, so it must be checked.
    if (file_.Close() < 0) return Fail("H5Fclose (flushing " + tmp_ + ")");
    return Status::Ok();
  }

 private:
  Status Fail(const std::string& what) {
    // HDF5 writes through its own driver, whose innermost error says the
    // system's reason: a full disk or quota is NoSpace (exit 8), as elsewhere.
    const std::string reason = Hdf5Reason();
    const bool full = reason.find(std::strerror(ENOSPC)) != std::string::npos ||
                      reason.find(std::strerror(EDQUOT)) != std::string::npos;
    return WriteError(full ? ENOSPC : EIO, "cannot write " + target_ + ": " + what + " failed: " + reason +
                                               "; a previous file there, if any, is unchanged");
  }

  Status MakeTypes() {
    // Variable-length UTF-8, h5py's string_dtype(); the same type in memory
    // and on disk, so HDF5 stores the bytes unchanged.
    str_ = H5Id(H5Tcopy(H5T_C_S1), H5Tclose);
    if (!str_.valid() || H5Tset_size(str_.get(), H5T_VARIABLE) < 0 || H5Tset_cset(str_.get(), H5T_CSET_UTF8) < 0) {
      return Fail("creating the UTF-8 string type");
    }
    // h5py's bool: an int8 enum FALSE/TRUE. anndata reads "ordered" through
    // h5py, which maps exactly this enum to numpy.bool_.
    bool_ = H5Id(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
    const int8_t no = 0, yes = 1;
    if (!bool_.valid() || H5Tenum_insert(bool_.get(), "FALSE", &no) < 0 ||
        H5Tenum_insert(bool_.get(), "TRUE", &yes) < 0) {
      return Fail("creating the bool enum type");
    }
    // UTF-8 link names, as h5py creates them, so non-ASCII names read back
    // as the same str.
    lcpl_ = H5Id(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    if (!lcpl_.valid() || H5Pset_char_encoding(lcpl_.get(), H5T_CSET_UTF8) < 0) {
      return Fail("creating the link creation properties");
    }
    return Status::Ok();
  }

  // Attributes -------------------------------------------------------------

  // `data` may be null only for an empty array: there is nothing to write,
  // and H5Awrite refuses a null buffer.
  Status WriteAttr(hid_t obj, const std::string& path, const char* name, hid_t type, const Dims& dims,
                   const void* data) {
    const std::string what = "attribute " + path + "@" + name;
    H5Id space = CreateSpace(dims);
    if (!space.valid()) return Fail("H5Screate for " + what);
    H5Id attr(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.valid()) return Fail("H5Acreate2 of " + what);
    if (data != nullptr && H5Awrite(attr.get(), type, data) < 0) return Fail("H5Awrite of " + what);
    return Status::Ok();
  }

  Status SetStringAttr(hid_t obj, const std::string& path, const char* name, const std::string& value) {
    const char* p = value.c_str();
    return WriteAttr(obj, path, name, str_.get(), {}, &p);
  }

  Status SetEncoding(hid_t obj, const std::string& path, const char* type, const char* version) {
    if (Status s = SetStringAttr(obj, path, "encoding-type", type); !s.ok()) return s;
    return SetStringAttr(obj, path, "encoding-version", version);
  }

  // Datasets and groups ----------------------------------------------------

  // Creates, fills and tags one dataset (encoding version "0.2.0", the one
  // version every dataset encoding written here has). Contiguous layout, no
  // filters: features are written once and read whole.
  Status WriteDataset(hid_t parent, const std::string& parent_path, const std::string& name, hid_t file_type,
                      hid_t mem_type, const Dims& dims, const void* data, const char* encoding) {
    const std::string path = Join(parent_path, name);
    H5Id space = CreateSpace(dims);
    if (!space.valid()) return Fail("H5Screate for dataset " + path);
    // No encoding: a part of an element whose group carries it (a sparse
    // matrix's data, indices and indptr).
    H5Id dset(H5Dcreate2(parent, name.c_str(), file_type, space.get(), lcpl_.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
    if (!dset.valid()) return Fail("H5Dcreate2 of dataset " + path);
    hsize_t n = 1;
    for (hsize_t d : dims) n *= d;
    // Zero elements: nothing to write, and the buffer may be null.
    if (n > 0 && H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
      return Fail("H5Dwrite of dataset " + path);
    }
    if (encoding == nullptr) return Status::Ok();
    return SetEncoding(dset.get(), path, encoding, "0.2.0");
  }

  // scipy's csr_matrix as anndata writes it: a group tagged csr_matrix with
  // its shape, holding data, indices and indptr.
  Status WriteCsr(hid_t parent, const std::string& parent_path, const ObspMatrix& m, int64_t n) {
    const std::string path = Join(parent_path, m.name);
    H5Id g;
    if (Status s = CreateGroup(parent, parent_path, m.name, &g); !s.ok()) return s;
    if (Status s = SetEncoding(g.get(), path, "csr_matrix", "0.1.0"); !s.ok()) return s;
    const int64_t shape[2] = {n, n};
    if (Status s = WriteAttr(g.get(), path, "shape", H5T_STD_I64LE, {2}, shape); !s.ok()) return s;
    if (Status s = WriteDataset(g.get(), path, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {m.data.size()},
                                m.data.data(), nullptr);
        !s.ok()) {
      return s;
    }
    if (Status s = WriteDataset(g.get(), path, "indices", H5T_STD_I64LE, H5T_NATIVE_INT64, {m.indices.size()},
                                m.indices.data(), nullptr);
        !s.ok()) {
      return s;
    }
    return WriteDataset(g.get(), path, "indptr", H5T_STD_I64LE, H5T_NATIVE_INT64, {m.indptr.size()},
                        m.indptr.data(), nullptr);
  }

  Status WriteStringArray(hid_t parent, const std::string& parent_path, const std::string& name,
                          const std::vector<std::string>& values) {
    std::vector<const char*> ptrs;
    ptrs.reserve(values.size());
    for (const auto& v : values) ptrs.push_back(v.c_str());
    return WriteDataset(parent, parent_path, name, str_.get(), str_.get(), {values.size()}, ptrs.data(),
                        "string-array");
  }

  Status CreateGroup(hid_t parent, const std::string& parent_path, const std::string& name, H5Id* out) {
    *out = H5Id(H5Gcreate2(parent, name.c_str(), lcpl_.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!out->valid()) return Fail("H5Gcreate2 of group " + Join(parent_path, name));
    return Status::Ok();
  }

  Status CreateDict(hid_t parent, const std::string& parent_path, const std::string& name, H5Id* out) {
    if (Status s = CreateGroup(parent, parent_path, name, out); !s.ok()) return s;
    return SetEncoding(out->get(), Join(parent_path, name), "dict", "0.1.0");
  }

  // Dataframes -------------------------------------------------------------

  // The dataframe group: "_index" names the index dataset and "column-order"
  // lists the columns (the reader reads exactly those, in that order).
  Status CreateDataframe(hid_t parent, const std::string& name, const std::vector<std::string>& index,
                         const std::vector<std::string>& columns, H5Id* out) {
    if (Status s = CreateGroup(parent, "/", name, out); !s.ok()) return s;
    const hid_t g = out->get();
    const std::string path = Join("/", name);
    if (Status s = SetEncoding(g, path, "dataframe", "0.2.0"); !s.ok()) return s;
    if (Status s = SetStringAttr(g, path, "_index", "_index"); !s.ok()) return s;
    std::vector<const char*> ptrs;
    for (const auto& c : columns) ptrs.push_back(c.c_str());
    // No columns: a zero-length float64 array, exactly what anndata (via
    // h5py's np.array([])) writes, so other .h5ad readers see the familiar
    // form. There is nothing to write into it.
    Status order = columns.empty()
                       ? WriteAttr(g, path, "column-order", H5T_IEEE_F64LE, {0}, nullptr)
                       : WriteAttr(g, path, "column-order", str_.get(), {columns.size()}, ptrs.data());
    if (!order.ok()) return order;
    return WriteStringArray(g, path, "_index", index);
  }

  Status WriteCategorical(hid_t parent, const std::string& parent_path, const ObsColumn& c) {
    const std::string path = Join(parent_path, c.name);
    H5Id g;
    if (Status s = CreateGroup(parent, parent_path, c.name, &g); !s.ok()) return s;
    if (Status s = SetEncoding(g.get(), path, "categorical", "0.2.0"); !s.ok()) return s;
    const int8_t ordered = 0;
    if (Status s = WriteAttr(g.get(), path, "ordered", bool_.get(), {}, &ordered); !s.ok()) return s;

    // Sorted categories, as pandas makes them: std::string compares bytes as
    // unsigned, and UTF-8 byte order is code point order, like Python's sort.
    const std::set<std::string> unique(c.strings.begin(), c.strings.end());
    const std::vector<std::string> categories(unique.begin(), unique.end());
    std::unordered_map<std::string, int32_t> code_of;
    code_of.reserve(categories.size());
    for (size_t i = 0; i < categories.size(); ++i) code_of.emplace(categories[i], static_cast<int32_t>(i));
    std::vector<int32_t> codes;
    codes.reserve(c.strings.size());
    for (const auto& s : c.strings) codes.push_back(code_of.at(s));

    // The narrowest signed type for the codes, as pandas picks it; HDF5
    // converts the int32 buffer to that file type while writing.
    hid_t code_type = H5T_STD_I32LE;
    if (categories.size() <= 127) {
      code_type = H5T_STD_I8LE;
    } else if (categories.size() <= 32767) {
      code_type = H5T_STD_I16LE;
    }
    if (Status s = WriteDataset(g.get(), path, "codes", code_type, H5T_NATIVE_INT32, {codes.size()}, codes.data(),
                                "array");
        !s.ok()) {
      return s;
    }
    return WriteStringArray(g.get(), path, "categories", categories);
  }

  Status WriteObs(hid_t root, const AnnData& a) {
    std::vector<std::string> columns;
    for (const auto& c : a.obs) columns.push_back(c.name);
    H5Id obs;
    if (Status s = CreateDataframe(root, "obs", a.obs_names, columns, &obs); !s.ok()) return s;
    for (const ObsColumn& c : a.obs) {
      Status s;
      if (!c.ints.empty()) {
        s = WriteDataset(obs.get(), "/obs", c.name, H5T_STD_I64LE, H5T_NATIVE_INT64, {c.ints.size()}, c.ints.data(),
                         "array");
      } else if (c.categorical) {
        s = WriteCategorical(obs.get(), "/obs", c);
      } else {
        s = WriteStringArray(obs.get(), "/obs", c.name, c.strings);
      }
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  Status WriteVar(hid_t root, const AnnData& a) {
    H5Id var;
    return CreateDataframe(root, "var", a.var_names, {}, &var);
  }

  Status WriteUns(hid_t root, const AnnData& a) {
    H5Id uns;
    if (Status s = CreateDict(root, "/", "uns", &uns); !s.ok()) return s;
    for (const auto& [key, value] : a.uns_strings) {
      const char* p = value.c_str();
      if (Status s = WriteDataset(uns.get(), "/uns", key, str_.get(), str_.get(), {}, &p, "string"); !s.ok()) {
        return s;
      }
    }
    for (const auto& [key, value] : a.uns_numbers) {
      if (Status s = WriteDataset(uns.get(), "/uns", key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &value,
                                  "numeric-scalar");
          !s.ok()) {
        return s;
      }
    }
    for (const auto& d : a.uns_dicts) {
      if (Status s = WriteUnsDict(uns.get(), "/uns", d); !s.ok()) return s;
    }
    return Status::Ok();
  }

  Status WriteUnsDict(hid_t parent, const std::string& parent_path, const UnsDict& d) {
    const std::string path = Join(parent_path, d.name);
    H5Id g;
    if (Status s = CreateDict(parent, parent_path, d.name, &g); !s.ok()) return s;
    for (const auto& [key, value] : d.strings) {
      const char* p = value.c_str();
      if (Status s = WriteDataset(g.get(), path, key, str_.get(), str_.get(), {}, &p, "string"); !s.ok()) return s;
    }
    for (const auto& [key, value] : d.ints) {
      if (Status s = WriteDataset(g.get(), path, key, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value, "numeric-scalar");
          !s.ok()) {
        return s;
      }
    }
    for (const auto& [key, value] : d.numbers) {
      if (Status s =
              WriteDataset(g.get(), path, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &value, "numeric-scalar");
          !s.ok()) {
        return s;
      }
    }
    for (const auto& [key, values] : d.arrays) {
      if (Status s = WriteDataset(g.get(), path, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {values.size()},
                                  values.data(), "array");
          !s.ok()) {
        return s;
      }
    }
    for (const auto& sub : d.dicts) {
      if (Status s = WriteUnsDict(g.get(), path, sub); !s.ok()) return s;
    }
    return Status::Ok();
  }

  std::string target_;
  std::string tmp_;
  H5Id str_, bool_, lcpl_;
  H5Id file_;  // declared last, so closed first when a failure unwinds
};

}  // namespace

Status WriteH5ad(const std::string& path, const AnnData& a) {
  if (Status s = ValidateAnnData(a); !s.ok()) return s;

  // The error-printing switch is per thread in thread-safe builds but global
  // otherwise; serialising our own writes keeps it consistent either way.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  SilenceHdf5Errors silence;

  // The temporary is created exclusively (never through a planted file or
  // symlink) and reopened by libhdf5; AtomicFile removes it on failure.
  AtomicFile out(path);
  if (Status s = out.Create(0644, /*open=*/false); !s.ok()) {
    return Status::WriteFailed(s, "cannot write " + path + ": " + s.message());
  }
  Status s;
  {
    Writer writer(path, out.path());  // every HDF5 id is closed when this scope ends
    s = writer.Write(a);
  }
  // HDF5 closes through the OS page cache; Commit fsyncs before the rename
  // so a crash cannot leave a complete-looking name over incomplete data.
  if (s.ok()) s = out.Commit();
  if (!s.ok()) return s;
  return Status::Ok();
}

}  // namespace scdino::features
