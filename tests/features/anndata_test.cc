// WriteH5ad is only correct if anndata itself reads the file back as meant, so
// the round-trip tests run anndata 0.8 (python3-anndata, installed in CI) on
// what was written and check values, dtypes and that reading warns nothing.
#include "features/anndata.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/full_disk.h"
#include "support/test_support.h"

namespace scdino::features {
namespace {

struct PythonResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `script` with the system Python (the one python3-anndata belongs to),
// passing `h5ad` as argv[1].
PythonResult RunPython(const testing::ScratchDir& dir, const std::string& script, const std::string& h5ad) {
  const std::string script_path = dir.file("check.py");
  std::ofstream(script_path) << script;
  const std::string cmd = "/usr/bin/python3 " + ShellQuote(script_path) + " " + ShellQuote(h5ad) + " 2>&1";
  PythonResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    r.output = "popen failed for: " + cmd;
    return r;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t EntriesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

// 5 cells x 3 features with the obs columns the extractor writes.
AnnData SmallAnnData() {
  AnnData a;
  a.n_obs = 5;
  a.n_vars = 3;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) a.X.push_back(static_cast<float>(i * 10 + j) + 0.5f);
  }
  a.obs_names = {"cell0", "cell1", "cell2", "cell3", "cell4"};
  a.obs.push_back({"class", {"tcell", "bcell", "tcell", "mono", "bcell"}, {}, true});
  a.obs.push_back({"path", {"img/0.tif", "img/1.tif", "img/2.tif", "img/3.tif", "img/4.tif"}, {}, false});
  a.obs.push_back({"class_index", {}, {2, 0, 2, 1, int64_t{1} << 40}, true});
  a.obs.push_back({"split", {"train", "train", "val", "train", "val"}, {}, true});
  a.var_names = {"f0", "f1", "f2"};
  a.uns_strings = {{"model", "dino-vits8"}, {"checkpoint", "/ckpt/teacher.pt"}};
  a.uns_numbers = {{"epoch", 100}, {"lr", 5e-4}};
  return a;
}

// Reading must not warn: anndata warns on layouts it only reads for
// backwards compatibility, which would mean the encoding is off.
constexpr const char* kReadPrelude = R"PY(
import sys, warnings
import numpy as np
import anndata, h5py
path = sys.argv[1]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    a = anndata.read_h5ad(path)
assert not caught, "read_h5ad warned: %r" % [str(w.message) for w in caught]
def eq(got, want, what):
    assert got == want, "%s: got %r, want %r" % (what, got, want)
)PY";

TEST(WriteH5ad, AnndataReadsBackValuesNamesColumnsAndUns) {
  testing::ScratchDir dir;
  const std::string path = dir.file("features.h5ad");
  Status s = WriteH5ad(path, SmallAnnData());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(EntriesIn(dir.path()), 1u) << "a temporary file was left behind";

  const std::string script = std::string(kReadPrelude) + R"PY(
eq(a.shape, (5, 3), "shape")
eq(a.X.dtype, np.float32, "X dtype")
want = np.array([[i * 10 + j + 0.5 for j in range(3)] for i in range(5)], dtype=np.float32)
assert np.array_equal(a.X, want), "X: %r" % a.X
eq(list(a.obs_names), ["cell0", "cell1", "cell2", "cell3", "cell4"], "obs_names")
eq(list(a.obs.columns), ["class", "path", "class_index", "split"], "obs columns")
eq(a.obs["class"].dtype.name, "category", "class dtype")
eq(list(a.obs["class"].cat.categories), ["bcell", "mono", "tcell"], "class categories")
eq(bool(a.obs["class"].cat.ordered), False, "class ordered")
eq(list(a.obs["class"]), ["tcell", "bcell", "tcell", "mono", "bcell"], "class")
eq(a.obs["path"].dtype, np.dtype(object), "path dtype")
eq(list(a.obs["path"]), ["img/%d.tif" % i for i in range(5)], "path")
eq(a.obs["class_index"].dtype, np.dtype(np.int64), "class_index dtype")
eq(list(a.obs["class_index"]), [2, 0, 2, 1, 1 << 40], "class_index")
eq(a.obs["split"].dtype.name, "category", "split dtype")
eq(list(a.obs["split"]), ["train", "train", "val", "train", "val"], "split")
eq(list(a.var_names), ["f0", "f1", "f2"], "var_names")
eq(list(a.var.columns), [], "var columns")
eq(a.uns["model"], "dino-vits8", "uns model")
assert isinstance(a.uns["model"], str), type(a.uns["model"])
eq(a.uns["checkpoint"], "/ckpt/teacher.pt", "uns checkpoint")
eq(float(a.uns["epoch"]), 100.0, "uns epoch")
eq(float(a.uns["lr"]), 0.0005, "uns lr")
for k in ("obsm", "varm", "obsp", "varp", "layers"):
    eq(len(getattr(a, k)), 0, k)

# The raw layout, where anndata's reader is lenient.
with h5py.File(path, "r") as f:
    eq(f.attrs["encoding-type"], "anndata", "root encoding-type")
    eq(f.attrs["encoding-version"], "0.1.0", "root encoding-version")
    eq(f["X"].chunks, None, "X chunks")
    eq(f["obs/class/codes"].dtype, np.dtype(np.int8), "codes dtype")
    eq(f["obs/class"].attrs["ordered"].dtype, np.dtype(bool), "ordered dtype")
    eq(f["obs"].attrs["_index"], "_index", "obs _index")
    for name in ("obsm", "varm", "obsp", "varp", "layers", "uns"):
        eq(f[name].attrs["encoding-type"], "dict", name)
print("OK")
)PY";
  PythonResult r = RunPython(dir, script, path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

TEST(WriteH5ad, SizeMismatchNamesTheFieldAndBothCounts) {
  testing::ScratchDir dir;
  const std::string path = dir.file("bad.h5ad");
  struct Case {
    const char* field;
    void (*spoil)(AnnData&);
    const char* got;
    const char* want;
  };
  const Case cases[] = {
      {"X", [](AnnData& a) { a.X.pop_back(); }, "14", "15"},
      {"obs_names", [](AnnData& a) { a.obs_names.push_back("cell5"); }, "6", "5"},
      {"var_names", [](AnnData& a) { a.var_names.pop_back(); }, "2", "3"},
      {"obs column 'split'", [](AnnData& a) { a.obs[3].strings.pop_back(); }, "4", "5"},
      {"obs column 'class_index'", [](AnnData& a) { a.obs[2].ints.push_back(7); }, "6", "5"},
  };
  for (const Case& c : cases) {
    AnnData a = SmallAnnData();
    c.spoil(a);
    Status s = WriteH5ad(path, a);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.got), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s.message();
  }
  // Not sizes, but equally unreadable for anndata: refused before writing.
  AnnData both = SmallAnnData();
  both.obs[0].ints = {1, 2, 3, 4, 5};
  EXPECT_EQ(WriteH5ad(path, both).code(), StatusCode::kInvalidArgument);
  AnnData dup = SmallAnnData();
  dup.obs_names[4] = "cell0";
  Status d = WriteH5ad(path, dup);
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.message().find("cell0"), std::string::npos) << d.message();
  AnnData reserved = SmallAnnData();
  reserved.obs[1].name = "_index";
  EXPECT_EQ(WriteH5ad(path, reserved).code(), StatusCode::kInvalidArgument);
  AnnData bad_utf8 = SmallAnnData();
  bad_utf8.obs[1].strings[2] = "img/\xff.tif";
  Status u = WriteH5ad(path, bad_utf8);
  EXPECT_EQ(u.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(u.message().find("UTF-8"), std::string::npos) << u.message();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(EntriesIn(dir.path()), 0u);
}

TEST(WriteH5ad, FailuresNameThePathAndKeepAnExistingFile) {
  testing::ScratchDir dir;
  const std::string missing = dir.file("no/such/dir/features.h5ad");
  Status m = WriteH5ad(missing, SmallAnnData());
  EXPECT_EQ(m.code(), StatusCode::kIOError) << m.ToString();
  EXPECT_NE(m.message().find(missing), std::string::npos) << m.message();

  const std::string path = dir.file("features.h5ad");
  ASSERT_TRUE(WriteH5ad(path, SmallAnnData()).ok());
  const std::string before = ReadBytes(path);
  ASSERT_FALSE(before.empty());
  AnnData bad = SmallAnnData();
  bad.var_names.push_back("f3");
  EXPECT_EQ(WriteH5ad(path, bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBytes(path), before);

  // A failure after the data is written (the rename onto a non-empty
  // directory) removes the temporary and names the path.
  const std::string blocked = dir.file("blocked.h5ad");
  std::filesystem::create_directories(blocked + "/inside");
  Status r = WriteH5ad(blocked, SmallAnnData());
  EXPECT_EQ(r.code(), StatusCode::kIOError) << r.ToString();
  EXPECT_NE(r.message().find(blocked), std::string::npos) << r.message();
  EXPECT_TRUE(std::filesystem::is_directory(blocked + "/inside"));
  EXPECT_EQ(EntriesIn(dir.path()), 2u) << "a temporary file was left behind";
  EXPECT_EQ(ReadBytes(path), before);
}

// A full disk while HDF5 writes is NoSpace (exit 8) naming the file, with
// the temporary removed and the previous file intact: a real 256 KiB tmpfs
// and 1 MB of features.
TEST(WriteH5ad, AFullDiskIsNoSpaceAndKeepsThePreviousFile) {
  testing::ScratchDir dir;
  AnnData big = SmallAnnData();
  big.n_vars = 50000;
  big.X.assign(static_cast<size_t>(big.n_obs * big.n_vars), 0.25f);
  big.var_names.clear();
  for (int64_t j = 0; j < big.n_vars; ++j) big.var_names.push_back("cls_" + std::to_string(j));
  std::string why;
  auto full = testing::OnAFullDisk(dir.path(), 256, [&] {
    const std::string path = dir.file("features.h5ad");
    if (Status s = WriteH5ad(path, SmallAnnData()); !s.ok()) return s;
    const std::string before = ReadBytes(path);
    Status s = WriteH5ad(path, big);
    if (s.ok()) return Status::Internal("wrote 1 MB of features onto a 256 KiB disk");
    if (ReadBytes(path) != before) return Status::Internal("the previous file changed");
    if (EntriesIn(dir.path()) != 1u) return Status::Internal("a temporary was left behind");
    return s;
  }, &why);
  if (!full) GTEST_SKIP() << why;
  EXPECT_EQ(full->code(), StatusCode::kNoSpace) << full->ToString();
  EXPECT_NE(full->message().find(dir.file("features.h5ad")), std::string::npos) << full->message();
}

TEST(WriteH5ad, ZeroObsRoundTrips) {
  testing::ScratchDir dir;
  const std::string path = dir.file("empty.h5ad");
  AnnData a;
  a.n_obs = 0;
  a.n_vars = 3;
  a.var_names = {"f0", "f1", "f2"};
  a.obs.push_back({"class", {}, {}, true});
  a.obs.push_back({"path", {}, {}, false});
  Status s = WriteH5ad(path, a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string script = std::string(kReadPrelude) + R"PY(
eq(a.shape, (0, 3), "shape")
eq(a.X.dtype, np.float32, "X dtype")
eq(list(a.obs.columns), ["class", "path"], "obs columns")
eq(a.obs["class"].dtype.name, "category", "class dtype")
eq(len(a.obs), 0, "obs rows")
eq(list(a.var_names), ["f0", "f1", "f2"], "var_names")
print("OK")
)PY";
  PythonResult r = RunPython(dir, script, path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(WriteH5ad, UnicodeRoundTrips) {
  testing::ScratchDir dir;
  const std::string path = dir.file("unicode.h5ad");
  AnnData a;
  a.n_obs = 2;
  a.n_vars = 1;
  a.X = {1.0f, -2.0f};
  a.obs_names = {"Zelle-\u03b1", "Zelle-\u03b2"};
  a.obs.push_back({"Klasse-\u03b3", {"T-Zelle", "Gr\u00fc\u00dfe \U0001F52C"}, {}, true});
  a.obs.push_back({"Pfad", {"bilder/\u00e4.tif", ""}, {}, false});
  a.var_names = {"Merkmal-\u00b5"};
  a.uns_strings = {{"Notiz-\u03b4", "fr\u00fche Epoche \u2713"}};
  Status s = WriteH5ad(path, a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string script = std::string(kReadPrelude) + R"PY(
eq(list(a.obs_names), ["Zelle-\u03b1", "Zelle-\u03b2"], "obs_names")
eq(list(a.obs.columns), ["Klasse-\u03b3", "Pfad"], "obs columns")
eq(list(a.obs["Klasse-\u03b3"]), ["T-Zelle", "Gr\u00fc\u00dfe \U0001F52C"], "Klasse")
eq(list(a.obs["Pfad"]), ["bilder/\u00e4.tif", ""], "Pfad")
eq(list(a.var_names), ["Merkmal-\u00b5"], "var_names")
eq(a.uns["Notiz-\u03b4"], "fr\u00fche Epoche \u2713", "uns")
print("OK")
)PY";
  PythonResult r = RunPython(dir, script, path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace scdino::features
