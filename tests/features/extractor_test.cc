#include "features/extractor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <thread>

#include "common/files.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "data/image_io.h"
#include "data/packed.h"
#include "data/split.h"
#include "features/feature_set.h"
#include "support/damage.h"
#include "support/test_support.h"
#include "support/tiny_tiff.h"

namespace scdino::features {
namespace {

namespace fs = std::filesystem;
using scdino::testing::ScratchDir;

// A small TIFF data set: `n` 16x16 3-channel images in two class folders,
// and a one-block ViT for it.
struct Fixture {
  ScratchDir scratch;
  ExtractJob job;
  explicit Fixture(int64_t n) {
    torch::manual_seed(0);
    for (int64_t i = 0; i < n; ++i) {
      const std::string dir = scratch.file("data/class_" + std::to_string(i % 2));
      EXPECT_TRUE(MakeDirs(dir).ok());
      auto hwc = torch::randint(0, 256, {16, 16, 3}, torch::kInt32).to(torch::kUInt8);
      char name[32];
      std::snprintf(name, sizeof name, "/img_%03lld.tif", static_cast<long long>(i));
      EXPECT_TRUE(data::WriteTiff(dir + name, hwc).ok());
    }
    auto d = data::IndexFolder(scratch.file("data"));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    job.dataset = *d;
    job.splits = *data::AssignSplits(job.dataset, {0.5, 1, "", ""});
    job.prep.resize = 16;
    job.prep.mean = {0.5, 0.5, 0.5};
    job.prep.std = {0.25, 0.25, 0.25};
    auto o = model::VitOptions().in_chans(3).patch_size(4).img_size(16).embed_dim(24).depth(1).num_heads(2);
    job.backbone = RandomBackbone(o, 7, torch::kCPU);
  }
  ExtractOptions Options(const std::string& out, int64_t rank = 0, int64_t world = 1) const {
    ExtractOptions eo;
    eo.out_dir = scratch.file(out);
    eo.batch_size = 2;
    eo.shard_size = 3;
    eo.rank = rank;
    eo.world_size = world;
    eo.wait_timeout = std::chrono::seconds(20);
    return eo;
  }
  // The features computed image by image, straight through the model.
  torch::Tensor Direct() const {
    torch::NoGradGuard g;
    std::vector<torch::Tensor> rows;
    for (size_t i = 0; i < job.dataset.entries.size(); ++i) {
      auto x = *LoadForModel(job.dataset, i, job.prep);
      rows.push_back(model::VisionTransformer(job.backbone.vit)->forward(x.unsqueeze(0)));
    }
    return torch::cat(rows);
  }
};

TEST(ShardRanges, CoverEveryImageOnce) {
  auto r = ShardRanges(10, 3);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[3], (std::pair<int64_t, int64_t>{9, 1}));
  int64_t next = 0;
  for (auto [first, count] : r) {
    EXPECT_EQ(first, next);
    next += count;
  }
  EXPECT_EQ(next, 10);
  EXPECT_TRUE(ShardRanges(0, 3).empty());
}

TEST(ExtractFeatures, ThreeRanksGiveEveryRowOnceInDataSetOrder) {
  Fixture f(11);  // 4 shards of 3, 3, 3, 2 over 3 ranks: rank 0 takes two
  std::vector<std::thread> ranks;
  std::vector<StatusOr<ExtractResult>> results(3, Status::Internal("not run"));
  for (int64_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] { results[static_cast<size_t>(r)] = ExtractFeatures(f.job, f.Options("out3", r, 3)); });
  }
  for (auto& t : ranks) t.join();
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(results[0]->shards_written, 2);
  EXPECT_EQ(results[1]->shards_written, 1);
  EXPECT_EQ(results[2]->shards_written, 1);
  auto set = ReadFeatureSet(f.scratch.file("out3"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->features.size(0), 11);
  auto direct = torch::nn::functional::normalize(f.Direct(), torch::nn::functional::NormalizeFuncOptions().dim(1));
  EXPECT_TRUE(scdino::testing::AllClose(set->features, direct, 1e-4, 1e-5));
  for (size_t i = 0; i < set->rows.size(); ++i) {
    EXPECT_EQ(set->rows[i].path, f.job.dataset.entries[i].path);
    EXPECT_EQ(set->rows[i].class_index, f.job.dataset.entries[i].label);
    EXPECT_EQ(set->rows[i].split, f.job.splits[i]);
  }
  // One rank gives the same file.
  auto single = ExtractFeatures(f.job, f.Options("out1"));
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(torch::equal(*ReadNpy(f.scratch.file("out1/features.npy")), set->features));
  EXPECT_TRUE(FileExists(f.scratch.file("out3/features.h5ad")));
  EXPECT_FALSE(fs::exists(f.scratch.file("out3/shards")));
}

// A packed set's images are read by their index (one pread each), never
// found by their paths (the folders above probed, the path hashed), and
// give the folders' features and rows.
TEST(ExtractFeatures, APackedSetIsReadByIndexWithTheFoldersFeatures) {
  Fixture f(8);
  data::PackOptions po;
  po.out = f.scratch.file("packed");
  po.block_samples = 2;
  ASSERT_TRUE(data::PackDataset(f.job.dataset, po).ok());
  auto set = data::PackedSet::Open(po.out);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ExtractJob packed = f.job;
  packed.dataset = data::DatasetOf(*set);
  const int64_t lookups = data::PackedPathLookups();
  ASSERT_TRUE(ExtractFeatures(packed, f.Options("from_pack")).ok());
  EXPECT_EQ(data::PackedPathLookups() - lookups, 0);
  ASSERT_TRUE(ExtractFeatures(f.job, f.Options("from_files")).ok());
  EXPECT_TRUE(torch::equal(*ReadNpy(f.scratch.file("from_pack/features.npy")),
                           *ReadNpy(f.scratch.file("from_files/features.npy"))));
}

// The raw-pixel baseline is the prepared images themselves: each row of
// features.npy is an image as the model would see it, L2-normalised, and
// metadata.json says what it is.
TEST(ExtractFeatures, TheRawPixelsAreThePreparedImagesAsRows) {
  Fixture f(6);
  ExtractJob pixels = f.job;
  pixels.backbone = PixelBackbone(3, 16);
  ASSERT_TRUE(ExtractFeatures(pixels, f.Options("raw_pixels")).ok());
  auto set = ReadFeatureSet(f.scratch.file("raw_pixels"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->features.size(0), 6);
  ASSERT_EQ(set->features.size(1), 3 * 16 * 16);
  for (int64_t i = 0; i < 6; ++i) {
    auto x = LoadForModel(f.job.dataset, static_cast<size_t>(i), f.job.prep)->flatten();
    EXPECT_TRUE(torch::allclose(set->features[i], x / x.norm(), 1e-5, 1e-6)) << "row " << i;
  }
  for (const char* field : {"\"key\": \"raw_pixels\"", "\"kept_side\": 16", "\"in_chans\": 3"}) {
    EXPECT_NE(set->metadata_json.find(field), std::string::npos) << field << " in " << set->metadata_json;
  }
}

// Larger images are area-averaged to at most kPixelValues values: a 2 x 2
// block pattern at 128 px becomes its block means at 64 px.
TEST(PixelFeatures, AreaAveragedToAtMostTheirBound) {
  EXPECT_EQ(PixelSide(5, 50), 28);  // 5 x 28 x 28 = 3,920; 29 px would be 4,205
  EXPECT_EQ(PixelSide(3, 32), 32);
  EXPECT_EQ(PixelSide(1, 96), 64);
  auto blocks = torch::arange(64 * 64, torch::kFloat32).reshape({1, 1, 64, 64});
  auto image = blocks.repeat_interleave(2, 2).repeat_interleave(2, 3);  // 128 x 128
  const auto rows = PixelFeatures(image);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{1, 4096}));
  EXPECT_TRUE(torch::equal(rows, blocks.flatten(1)));
}

TEST(ExtractFeatures, AStoppedRunResumesFromItsCompleteShards) {
  Fixture f(10);
  auto o = f.Options("out", 0, 1);
  o.write_raw = true;
  std::atomic<int> polls{0};
  o.stop_signal = [&] { return ++polls > 3; };  // two shards (of two batches) get done
  auto first = ExtractFeatures(f.job, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->completed);
  EXPECT_EQ(first->shards_written, 1);
  EXPECT_FALSE(FileExists(o.out_dir + "/metadata.json"));
  o.stop_signal = nullptr;
  auto second = ExtractFeatures(f.job, o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->completed);
  EXPECT_EQ(second->shards_skipped, 1);
  EXPECT_EQ(second->shards_written, 3);
  auto raw = ReadFeatureSet(o.out_dir, /*raw=*/true);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_TRUE(scdino::testing::AllClose(raw->features, f.Direct(), 1e-4, 1e-5));
  // A third run finds it complete and leaves it.
  auto third = ExtractFeatures(f.job, o);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->already_complete);
}

TEST(ExtractFeatures, ABadImageNamesTheFile) {
  Fixture f(4);
  ASSERT_TRUE(WriteFileAtomic(f.job.dataset.entries[2].path, "not a tiff").ok());
  auto r = ExtractFeatures(f.job, f.Options("out"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(f.job.dataset.entries[2].path), std::string::npos) << r.status().ToString();
}

// The issue's 162-byte TIFF claiming a terabyte tile, among good images:
// under on_bad_image: fail the run's error names it (exit 2), under skip it
// is left out of every output and listed, the other rows as before.
TEST(ExtractFeatures, AHostileTiffFailsNamingItOrIsSkippedAndListed) {
  Fixture f(7);
  const std::string bad = f.job.dataset.entries[4].path;
  ASSERT_TRUE(WriteFileAtomic(bad, scdino::testing::TiffClaimingAHugeTile()).ok());
  auto failed = ExtractFeatures(f.job, f.Options("fail"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDataLoss) << failed.status().ToString();
  EXPECT_NE(failed.status().message().find(bad), std::string::npos) << failed.status().ToString();

  auto eo = f.Options("skip");
  eo.on_bad_image = data::BadImagePolicy::kSkip;
  auto skipped = ExtractFeatures(f.job, eo);
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_EQ(skipped->images_skipped, 1);
  EXPECT_EQ(skipped->images_written, 6);
  auto set = ReadFeatureSet(f.scratch.file("skip"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->rows.size(), 6u);
  ASSERT_EQ(set->features.size(0), 6);
  for (const auto& r : set->rows) EXPECT_NE(r.path, bad);
  auto meta = nlohmann::json::parse(*ReadFile(f.scratch.file("skip/metadata.json")));
  EXPECT_EQ(meta["skipped_images"], nlohmann::json::array({bad}));
  EXPECT_EQ(meta["n"], 6);
  // The good images' rows are those of a run without the bad one.
  ExtractJob without = f.job;
  without.dataset.entries.erase(without.dataset.entries.begin() + 4);
  without.splits.erase(without.splits.begin() + 4);
  ASSERT_TRUE(ExtractFeatures(without, f.Options("good")).ok());
  EXPECT_TRUE(scdino::testing::AllClose(set->features, *ReadNpy(f.scratch.file("good/features.npy")), 1e-5, 1e-6));
}

TEST(LoadBackbone, AWrongKeyListsWhatTheFileHolds) {
  ScratchDir s;
  ASSERT_TRUE(WriteSafetensors(s.file("w.safetensors"), {{"teacher.backbone.cls_token", torch::zeros({1, 1, 4})}},
                               {{"model", R"({"in_chans":1,"patch_size":4,"img_size":8,"embed_dim":4,"depth":1,"num_heads":1})"}})
                  .ok());
  auto b = LoadBackbone(s.file("w.safetensors"), "student", torch::kCPU);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("the file holds: teacher"), std::string::npos) << b.status().ToString();
  auto m = LoadBackbone(s.file("w.safetensors"), "teacher", torch::kCPU);
  ASSERT_FALSE(m.ok());  // the other tensors are missing
  EXPECT_NE(m.status().message().find("is missing"), std::string::npos) << m.status().ToString();
}

TEST(IndexCsv, RoundTripsQuotedFieldsAndNamesBadLines) {
  std::vector<IndexRow> rows = {{"/d/a,b.tif", "CD4 \"naive\"", 0, data::Split::kTrain},
                                {"/d/c.tif", "B", 1, data::Split::kTest}};
  auto back = ParseIndexCsv(IndexCsv(rows), "index.csv");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].path, "/d/a,b.tif");
  EXPECT_EQ((*back)[0].class_name, "CD4 \"naive\"");
  EXPECT_EQ((*back)[1].split, data::Split::kTest);
  auto bad = ParseIndexCsv("index,path,class_name,class_index,split\n0,/a,B,1,validation\n", "x/index.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x/index.csv: line 2"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("validation"), std::string::npos);
}

TEST(Npy, NumpyReadsWhatWeWrite) {
  ScratchDir s;
  auto t = torch::arange(12, torch::kFloat32).view({3, 4}) / 7;
  ASSERT_TRUE(WriteNpy(s.file("a.npy"), t).ok());
  EXPECT_TRUE(torch::equal(*ReadNpy(s.file("a.npy")), t));
  const std::string cmd = "/usr/bin/python3 -c \"import numpy as np; a = np.load('" + s.file("a.npy") +
                          "'); assert a.dtype == np.float32 and a.shape == (3, 4) and abs(a[2, 3] - 11 / 7) < 1e-6\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_FALSE(WriteNpy(s.file("b.npy"), torch::zeros({2}, torch::kBool)).ok());
  ASSERT_TRUE(WriteFileAtomic(s.file("c.npy"), "\x93NUMPY\x01\x00").ok());
  auto bad = ReadNpy(s.file("c.npy"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(s.file("c.npy")), std::string::npos);
}

// metadata.json of a features directory, damaged and hostile (as the TIFF,
// .npy and safetensors fuzz tests do): nothing may throw; every refusal
// names the file.
TEST(FeatureSet, DamagedMetadataNeverThrows) {
  Fixture f(4);
  auto eo = f.Options("fuzz");
  auto r = ExtractFeatures(f.job, eo);
  ASSERT_TRUE(r.ok() && r->completed) << r.status().ToString();
  const std::string path = eo.out_dir + "/metadata.json";
  const std::string good = *ReadFile(path);
  std::vector<std::string> cases = {
      R"({"classes": ["class_0", 7]})",      R"({"classes": "class_0"})",       R"({"classes": [null, {}]})",
      R"({"classes": [["a"], "b"]})",        R"([1, 2, 3])",                    R"("just a string")",
      R"({"classes": ["a"]})",               R"({})",                           "",
      R"({"classes": ["class_0", "class_1"], "checkpoint": 5})", "{\"classes\": [\"\xff\xfe\"]}"};
  for (auto& b : scdino::testing::Damaged(good, good.size(), 3)) cases.push_back(std::move(b));
  int rejected = 0;
  for (const auto& c : cases) {
    ASSERT_TRUE(WriteFileAtomic(path, c).ok());
    StatusOr<FeatureSet> s = Status::Internal("not run");
    ASSERT_NO_THROW(s = ReadFeatureSet(eo.out_dir)) << c;
    if (!s.ok()) {
      ++rejected;
      EXPECT_NE(s.status().message().find("metadata.json"), std::string::npos) << s.status().message();
    }
  }
  EXPECT_GE(rejected, 10);
  ASSERT_TRUE(WriteFileAtomic(path, R"({"classes": ["class_0", 7]})").ok());
  auto named = ReadFeatureSet(eo.out_dir);
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("classes[1]: expected a class name"), std::string::npos)
      << named.status().message();
}

}  // namespace
}  // namespace scdino::features
