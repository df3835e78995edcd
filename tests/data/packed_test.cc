#include "data/packed.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/files.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

namespace fs = std::filesystem;

// A class-folder TIFF set of synthetic cells; 16-bit when `bits` is 16.
Dataset WriteCells(const std::string& root, int64_t classes, int64_t per_class, int64_t channels = 3, int bits = 8) {
  SyntheticOptions o;
  o.classes = classes;
  o.per_class = per_class;
  o.channels = channels;
  o.size = 20;
  for (int64_t k = 0; k < classes; ++k) {
    fs::create_directories(root + "/k" + std::to_string(k));
    for (int64_t i = 0; i < per_class; ++i) {
      auto cell = SyntheticCell(o, k, i).permute({1, 2, 0});
      auto hwc = bits == 16 ? (cell * 65535).round().to(torch::kInt32) : (cell * 255).round().to(torch::kUInt8);
      EXPECT_TRUE(WriteTiff(root + "/k" + std::to_string(k) + "/" + std::to_string(i) + ".tif", hwc).ok());
    }
  }
  auto d = IndexFolder(root);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return *d;
}

PackOptions Small(const std::string& out) {
  PackOptions o;
  o.out = out;
  o.shard_mb = 1;
  o.block_samples = 4;
  o.seed = 3;
  return o;
}

std::shared_ptr<const PackedSet> Open(const std::string& dir) {
  auto s = PackedSet::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

TEST(PackedSet, EveryImageReadsBackAsItsFileDecodes) {
  scdino::testing::ScratchDir dir;
  for (int bits : {8, 16}) {
    const std::string src = dir.path() + "/src" + std::to_string(bits), out = dir.path() + "/packed" + std::to_string(bits);
    auto d = WriteCells(src, 3, 7, 3, bits);
    auto o = Small(out);
    o.shard_mb = 1;
    auto r = PackDataset(d, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->finished);
    EXPECT_EQ(r->images, 21);
    auto set = Open(out);
    ASSERT_TRUE(set);
    EXPECT_EQ(set->dataset().classes, d.classes);
    ASSERT_EQ(set->dataset().entries.size(), d.entries.size());
    EXPECT_EQ(set->fingerprint(), PackFingerprint(d));
    std::set<int64_t> positions;
    for (size_t i = 0; i < d.entries.size(); ++i) {
      const auto& packed_path = set->dataset().entries[i].path;
      EXPECT_EQ(fs::path(packed_path).lexically_relative(out), fs::path(d.entries[i].path).lexically_relative(src));
      EXPECT_EQ(set->dataset().entries[i].label, d.entries[i].label);
      auto want = ReadImage(d.entries[i].path);
      auto got = set->Read(static_cast<int64_t>(i));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->scalar_type(), want->scalar_type());
      EXPECT_TRUE(got->equal(*want)) << d.entries[i].path;
      // A path inside the set reads the image wherever a file is taken.
      auto prepared = LoadImage(packed_path, {{2, 0}, 0});
      ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
      EXPECT_TRUE(prepared->equal(*LoadImage(d.entries[i].path, {{2, 0}, 0})));
      positions.insert(set->entries()[i].position);
    }
    EXPECT_EQ(positions.size(), d.entries.size());
    // Blocks decode the same images.
    for (int64_t b = 0; b < set->blocks(); ++b) {
      auto bytes = set->ReadBlock(b);
      ASSERT_TRUE(bytes.ok());
      for (int64_t p = b * 4; p < std::min<int64_t>((b + 1) * 4, 21); ++p) {
        const int64_t idx = set->pack_order()[p];
        auto img = set->DecodeFromBlock(idx, **bytes, b);
        ASSERT_TRUE(img.ok()) << img.status().ToString();
        EXPECT_TRUE(img->equal(*set->Read(idx)));
      }
    }
    EXPECT_EQ(LoadImage(out + "/k0/nope.tif", {}).status().code(), StatusCode::kNotFound);
  }
}

TEST(PackedSet, ACorruptByteNamesTheShardOffsetAndImage) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 5);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  const auto& e = set->entries()[3];
  const std::string shard = dir.path() + "/packed/" + set->shards()[e.shard].file;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(e.offset + e.bytes - 7);
    f.put('\x5a');
  }
  auto reopened = PackedSet::Open(dir.path() + "/packed");  // same size: opens
  ASSERT_TRUE(reopened.ok());
  auto img = (*reopened)->Read(3);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(img.status().message().find(set->shards()[e.shard].file + " offset " + std::to_string(e.offset)),
            std::string::npos) << img.status().message();
  EXPECT_NE(img.status().message().find("k0/3.tif"), std::string::npos) << img.status().message();
  // Through the loader: the batch's error names it too.
  LoaderOptions lo;
  lo.sampler.batch_size = 10;
  lo.crops.global_size = 8;
  lo.crops.local_size = 4;
  lo.crops.local_crops_number = 1;
  lo.crops.mean.assign(3, 0.5);
  lo.crops.std.assign(3, 0.2);
  lo.packed = *reopened;
  UseBlockShuffle(**reopened, 4, &lo.sampler);  // blocks of 4, windows of one block
  FileLoader loader((*reopened)->dataset(), lo);
  loader.StartEpoch(0, 0);
  try {
    loader.Next();
    FAIL() << "a corrupt image loaded";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32 mismatch"), std::string::npos) << e.what();
  }
  // An index.csv that is not the pack's is refused at open.
  const std::string index = dir.path() + "/packed/index.csv";
  auto text = ReadFile(index);
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(WriteFileAtomic(index, *text + "\n").ok());
  auto other_index = PackedSet::Open(dir.path() + "/packed");
  ASSERT_FALSE(other_index.ok());
  EXPECT_NE(other_index.status().message().find("not this pack's index"), std::string::npos)
      << other_index.status().message();
  ASSERT_TRUE(WriteFileAtomic(index, *text).ok());
  // A shard cut short (or of another set) is refused at open, naming sizes.
  fs::resize_file(shard, fs::file_size(shard) - 512);
  auto cut = PackedSet::Open(dir.path() + "/packed");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("cut short, or a shard of another packed set"), std::string::npos)
      << cut.status().message();
  // An image path of that set says so too, not "no such file".
  auto through_path = LoadImage(dir.path() + "/packed/k0/3.tif", {});
  ASSERT_FALSE(through_path.ok());
  EXPECT_NE(through_path.status().message().find("cut short"), std::string::npos) << through_path.status().message();
}

TEST(PackedSet, MixedChannelCountsAreRefusedNamingTheFile) {
  scdino::testing::ScratchDir dir;
  WriteCells(dir.path() + "/src", 2, 3, 3);
  auto odd = (SyntheticCell({}, 0, 0).permute({1, 2, 0}) * 255).round().to(torch::kUInt8);  // 5 channels
  ASSERT_TRUE(WriteTiff(dir.path() + "/src/k1/odd.tif", odd).ok());
  auto d = IndexFolder(dir.path() + "/src");
  ASSERT_TRUE(d.ok());
  auto o = Small(dir.path() + "/packed");
  o.block_samples = 100;  // one shard: the check inside it
  auto r = PackDataset(*d, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("odd.tif"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("5 channel(s) of uint8"), std::string::npos) << r.status().message();
  EXPECT_FALSE(IsPackedSet(dir.path() + "/packed"));
  // One image per shard on two ranks: the shards of one rank may agree
  // among themselves; the last rank finds the mismatch across shards.
  o.block_samples = 1;
  o.shard_images = 1;
  o.world_size = 2;
  fs::remove_all(dir.path() + "/packed");
  std::string errors;
  for (int64_t rank : {0, 1}) {
    o.rank = rank;
    auto rr = PackDataset(*d, o);
    if (!rr.ok()) errors += rr.status().message() + "\n";
  }
  EXPECT_NE(errors.find("odd.tif"), std::string::npos) << errors;
  EXPECT_FALSE(IsPackedSet(dir.path() + "/packed"));
}

TEST(PackedSet, RanksPackTheirShardsTheLastWritesTheIndexAndARerunResumes) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 20);
  auto o = Small(dir.path() + "/packed");
  o.shard_images = 8;  // 40 images: 5 shards of 2 blocks
  o.world_size = 2;
  o.rank = 0;
  auto r0 = PackDataset(d, o);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ(r0->shards_written, 3);  // shards 0, 2, 4
  EXPECT_FALSE(r0->finished);
  EXPECT_EQ(r0->shards_of_others, 4);  // from shard 1 on, not all there
  EXPECT_FALSE(IsPackedSet(o.out));
  o.rank = 1;
  auto r1 = PackDataset(d, o);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->shards_written, 2);
  EXPECT_TRUE(r1->finished);
  auto set = Open(o.out);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->shards().size(), 5u);
  for (size_t i = 0; i < d.entries.size(); ++i) EXPECT_TRUE(set->Read(i)->equal(*ReadImage(d.entries[i].path)));
  // A rerun keeps every complete shard.
  o.rank = 0;
  o.world_size = 1;
  auto again = PackDataset(d, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->shards_written, 0);
  EXPECT_EQ(again->shards_reused, 5);
  EXPECT_TRUE(again->finished);
  // Packed again with another seed: every shard changes, and pack.json goes
  // first, so a reader never mixes old and new shards.
  o.seed = 99;
  o.rank = 1;
  o.world_size = 2;
  auto half = PackDataset(d, o);
  ASSERT_TRUE(half.ok());
  EXPECT_FALSE(half->finished);
  EXPECT_FALSE(IsPackedSet(o.out));
  o.rank = 0;
  ASSERT_TRUE(PackDataset(d, o).ok());
  EXPECT_TRUE(IsPackedSet(o.out));
  o.world_size = 1;
  // Another data set into the same directory is refused.
  auto other = WriteCells(dir.path() + "/other", 2, 3);
  auto clash = PackDataset(other, o);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(clash.status().message().find("another data set"), std::string::npos);
}

TEST(PackedSet, AFullDiskLeavesNothingALaterRunTrusts) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 40);
  const std::string out = dir.path() + "/packed";
  // The file-size limit stands in for a full disk: write() fails (EFBIG)
  // part way through the first shard.
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit old {};
  ::getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit small = old;
  small.rlim_cur = 20000;
  ::setrlimit(RLIMIT_FSIZE, &small);
  auto r = PackDataset(d, Small(out));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shard-00000.tar"), std::string::npos) << r.status().message();
  EXPECT_FALSE(IsPackedSet(out));
  for (const auto& e : fs::directory_iterator(out)) ADD_FAILURE() << "left behind: " << e.path();
  // With room, the same call packs it.
  auto ok = PackDataset(d, Small(out));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(IsPackedSet(out));
}

TEST(PackedSet, StagingCopiesVerifiesAndReusesAndRefusesACorruptSource) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 6);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  EXPECT_EQ(StagedCopy(*set, dir.path() + "/local"), "");
  auto first = StagePackedSet(*set, dir.path() + "/local");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(first->dir, dir.path() + "/local/" + set->content_fingerprint());
  EXPECT_EQ(StagedCopy(*set, dir.path() + "/local"), first->dir);
  auto staged = Open(first->dir);
  for (size_t i = 0; i < d.entries.size(); ++i) EXPECT_TRUE(staged->Read(i)->equal(*set->Read(i)));
  // Read in place of the shared set: the shared set's paths, the copy's files.
  auto in_place = PackedSet::Open(first->dir, dir.path() + "/packed");
  ASSERT_TRUE(in_place.ok());
  EXPECT_EQ((*in_place)->dataset().root, dir.path() + "/packed");
  EXPECT_EQ((*in_place)->dataset().entries[0].path, set->dataset().entries[0].path);
  EXPECT_EQ((*in_place)->ShardPath(0), first->dir + "/" + set->shards()[0].file);
  auto second = StagePackedSet(*set, dir.path() + "/local");
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->reused);
  // A corrupt source shard: staging elsewhere fails and marks nothing staged.
  const std::string shard = dir.path() + "/packed/" + set->shards()[0].file;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(700);
    f.put('\x11');
  }
  // A disk that fills while staging (the file-size limit stands in): an
  // error naming the file, and nothing marked staged.
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit old {};
  ::getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit small = old;
  small.rlim_cur = 3000;
  ::setrlimit(RLIMIT_FSIZE, &small);
  auto full = StagePackedSet(*set, dir.path() + "/full");
  ::setrlimit(RLIMIT_FSIZE, &old);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find(set->shards()[0].file), std::string::npos) << full.status().message();
  EXPECT_EQ(StagedCopy(*set, dir.path() + "/full"), "");
  for (const auto& e : fs::directory_iterator(dir.path() + "/full/" + set->content_fingerprint())) {
    ADD_FAILURE() << "left behind: " << e.path();
  }
  auto bad = StagePackedSet(*set, dir.path() + "/other");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(set->shards()[0].file), std::string::npos) << bad.status().message();
  EXPECT_EQ(StagedCopy(*set, dir.path() + "/other"), "");
}

// Batches of a loader over `d` (the packed set's dataset or the folders').
std::vector<MultiCropBatch> LoaderBatches(const Dataset& d, LoaderOptions o, int64_t epoch, int64_t first_batch) {
  FileLoader l(d, o);
  l.StartEpoch(epoch, first_batch);
  std::vector<MultiCropBatch> out;
  while (auto b = l.Next()) out.push_back(*b);
  return out;
}

TEST(PackedSet, TheLoaderGivesTheFoldersBatchesInEitherShuffleAndOnResume) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 3, 11);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  LoaderOptions o;
  o.sampler.batch_size = 4;
  o.sampler.seed = 5;
  o.sampler.world_size = 2;
  o.sampler.rank = 1;
  o.crops.global_size = 12;
  o.crops.local_size = 6;
  o.crops.local_crops_number = 2;
  o.crops.mean.assign(3, 0.5);
  o.crops.std.assign(3, 0.2);
  o.threads = 2;
  for (bool blocks : {false, true}) {
    LoaderOptions folder = o;
    if (blocks) {
      UseBlockShuffle(*set, 2 * set->block_samples(), &folder.sampler);  // windows of 2 blocks
    }
    LoaderOptions packed = folder;
    packed.packed = set;
    for (int64_t first : {0, 2}) {  // a fresh epoch, and one resumed at batch 2
      auto a = LoaderBatches(d, folder, 1, first), b = LoaderBatches(set->dataset(), packed, 1, first);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), static_cast<size_t>(4 - first));
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(a[i].indices.equal(b[i].indices)) << "blocks " << blocks << " batch " << i;
        EXPECT_TRUE(a[i].labels.equal(b[i].labels));
        for (size_t c = 0; c < a[i].crops.size(); ++c) EXPECT_TRUE(a[i].crops[c].equal(b[i].crops[c]));
      }
    }
  }
}

}  // namespace
}  // namespace scdino::data
