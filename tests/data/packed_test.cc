#include "data/packed.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <zlib.h>

#include <atomic>
#include <numeric>
#include <thread>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/files.h"
#include "data/block_cache.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "support/other_user.h"
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
  UseBlockShuffle(**reopened, 4, &lo.sampler);  // blocks of 4, windows of one block
  FileLoader loader(DatasetOf(*reopened), lo);
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

// pack.json and index.csv from another writer: truncated, reordered, with
// hostile values (index.csv's size and CRC fixed up in pack.json, as such a
// writer would). Opening never crashes; a set that opens reads every image
// and block inside its shards or says why not (the AddressSanitizer tree
// runs this test too: a read out of bounds fails it there).
TEST(PackedSet, FuzzedManifestsAndIndexesNeverReadOutOfBounds) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 6);
  const std::string set_dir = dir.path() + "/packed";
  ASSERT_TRUE(PackDataset(d, Small(set_dir)).ok());
  const std::string manifest = *ReadFile(set_dir + "/pack.json");
  const std::string index = *ReadFile(set_dir + "/index.csv");
  std::vector<std::string> rows;
  {
    std::istringstream in(index);
    for (std::string line; std::getline(in, line);) rows.push_back(line);
  }
  std::mt19937_64 rng(20261127);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> hostile = {"-1", "0", "1", "9223372036854775807", "-9223372036854775808",
                                            "99999999999999999999", "", "abc", "0x10", "4294967296", "12abc", "\"\""};
  auto join = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  };
  auto split = [](const std::string& row) {
    std::vector<std::string> f;
    std::string cur;
    for (char c : row) {
      if (c == ',') {
        f.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    f.push_back(cur);
    return f;
  };
  auto join_fields = [](const std::vector<std::string>& f) {
    std::string out;
    for (size_t i = 0; i < f.size(); ++i) out += (i ? "," : "") + f[i];
    return out;
  };
  auto mutate_index = [&]() -> std::string {
    std::vector<std::string> r = rows;
    switch (pick(7)) {
      case 0:
        return index.substr(0, pick(index.size()));
      case 1:
        std::shuffle(r.begin() + 1, r.end(), rng);
        break;
      case 2: {  // two images' offsets (or sizes) exchanged
        const size_t a = 1 + pick(r.size() - 1), b = 1 + pick(r.size() - 1), field = 4 + pick(2);
        auto fa = split(r[a]), fb = split(r[b]);
        if (fa.size() > field && fb.size() > field) std::swap(fa[field], fb[field]);
        r[a] = join_fields(fa);
        r[b] = join_fields(fb);
        break;
      }
      case 3: {  // one field hostile
        const size_t a = 1 + pick(r.size() - 1);
        auto f = split(r[a]);
        f[pick(f.size())] = hostile[pick(hostile.size())];
        r[a] = join_fields(f);
        break;
      }
      case 4:
        r.erase(r.begin() + 1 + static_cast<long>(pick(r.size() - 1)));
        break;
      case 5:
        r.push_back(r[1 + pick(r.size() - 1)]);
        break;
      default: {  // an offset moved by a few bytes
        const size_t a = 1 + pick(r.size() - 1);
        auto f = split(r[a]);
        if (f.size() > 4) f[4] = std::to_string(std::atoll(f[4].c_str()) + static_cast<long long>(pick(4097)) - 2048);
        r[a] = join_fields(f);
        break;
      }
    }
    return join(r);
  };
  auto mutate_manifest = [&]() -> std::string {
    auto j = nlohmann::json::parse(manifest);
    switch (pick(8)) {
      case 0:
        return manifest.substr(0, pick(manifest.size()));
      case 1:
        j["samples"] = std::stoll(hostile[pick(5)]);
        break;
      case 2:
        j["block_samples"] = std::stoll(hostile[pick(5)]);
        break;
      case 3:
        j["shards"][0]["file"] = std::vector<std::string>{"../packed/shard-00000.tar", "/etc/passwd", "shard-0.tar",
                                                          "shard-00000.tar/", "index.csv"}[pick(5)];
        break;
      case 4:
        j["shards"][0]["bytes"] = std::stoll(hostile[pick(5)]);
        break;
      case 5:
        j["classes"] = nlohmann::json::array();
        break;
      case 6:
        j.erase(std::vector<std::string>{"shards", "classes", "index", "samples", "channels"}[pick(5)]);
        break;
      default:
        j["shards"].push_back(j["shards"][0]);
        break;
    }
    return j.dump();
  };
  auto with_index = [&](std::string m, const std::string& idx) {
    auto j = nlohmann::json::parse(m, nullptr, false);
    if (!j.is_object() || !j.contains("index") || !j["index"].is_object()) return m;
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08lx",
                  ::crc32(0, reinterpret_cast<const Bytef*>(idx.data()), static_cast<uInt>(idx.size())));
    j["index"]["bytes"] = idx.size();
    j["index"]["crc32"] = crc;
    return j.dump();
  };
  int opened = 0, refused = 0;
  for (int round = 0; round < 400; ++round) {
    const bool both = round % 5 == 4;
    const std::string idx = round % 2 == 0 || both ? mutate_index() : index;
    const std::string m = round % 2 == 1 || both ? mutate_manifest() : manifest;
    ASSERT_TRUE(WriteFileAtomic(set_dir + "/index.csv", idx).ok());
    ASSERT_TRUE(WriteFileAtomic(set_dir + "/pack.json", with_index(m, idx)).ok());
    auto set = PackedSet::Open(set_dir);
    if (!set.ok()) {
      ++refused;
      EXPECT_FALSE(set.status().message().empty());
      continue;
    }
    ++opened;
    const auto& s = **set;
    for (size_t i = 0; i < s.entries().size(); ++i) (void)s.Read(static_cast<int64_t>(i));
    for (int64_t b = 0; b < s.blocks(); ++b) {
      auto bytes = s.ReadBlock(b);
      if (!bytes.ok()) continue;
      const int64_t first = b * s.block_samples();
      const int64_t last = std::min<int64_t>(first + s.block_samples(), static_cast<int64_t>(s.pack_order().size()));
      for (int64_t p = first; p < last; ++p) (void)s.DecodeFromBlock(s.pack_order()[p], **bytes, b);
    }
  }
  EXPECT_GT(refused, 100) << "most mutations are refused at open";
  EXPECT_GT(opened, 10) << "some mutations (rows reordered) still make a readable set";
  // Restored, the set reads as packed.
  ASSERT_TRUE(WriteFileAtomic(set_dir + "/index.csv", index).ok());
  ASSERT_TRUE(WriteFileAtomic(set_dir + "/pack.json", manifest).ok());
  auto good = PackedSet::Open(set_dir);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  for (size_t i = 0; i < (*good)->entries().size(); ++i) EXPECT_TRUE((*good)->Read(static_cast<int64_t>(i)).ok());
}

// An index row's bytes are bounded by its shape (an .npy header and 4
// bytes a sample), not only by its shard: with a sparse 1 GB shard, a row of
// a 20 x 20 image claiming 100 MB is refused at open, naming the row's value.
TEST(PackedSet, AnImagesBytesBeyondWhatItsShapeNeedsAreRefused) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 3);
  const std::string set_dir = dir.path() + "/packed";
  ASSERT_TRUE(PackDataset(d, Small(set_dir)).ok());
  auto manifest = nlohmann::json::parse(*ReadFile(set_dir + "/pack.json"));
  ASSERT_EQ(manifest["shards"].size(), 1u);
  const std::string shard = set_dir + "/" + manifest["shards"][0]["file"].get<std::string>();
  fs::resize_file(shard, int64_t{1} << 30);  // sparse
  manifest["shards"][0]["bytes"] = int64_t{1} << 30;
  std::string index = *ReadFile(set_dir + "/index.csv");
  // The first row's bytes (field 5).
  const size_t row = index.find('\n') + 1;
  size_t at = row;
  for (int f = 0; f < 5; ++f) at = index.find(',', at) + 1;
  index.replace(at, index.find(',', at) - at, "100000000");
  ASSERT_TRUE(WriteFileAtomic(set_dir + "/index.csv", index).ok());
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08lx",
                ::crc32(0, reinterpret_cast<const Bytef*>(index.data()), static_cast<uInt>(index.size())));
  manifest["index"]["bytes"] = index.size();
  manifest["index"]["crc32"] = crc;
  ASSERT_TRUE(WriteFileAtomic(set_dir + "/pack.json", manifest.dump()).ok());
  auto set = PackedSet::Open(set_dir);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kDataLoss) << set.status().ToString();
  EXPECT_NE(set.status().message().find("bytes"), std::string::npos) << set.status().message();
  EXPECT_NE(set.status().message().find("100000000"), std::string::npos) << set.status().message();
  EXPECT_NE(set.status().message().find("at most"), std::string::npos) << set.status().message();
}

// A shard name from pack.json is never joined unchecked: "../" and
// absolute names are refused naming the name and what was expected.
TEST(PackedSet, AShardNameOutsideTheSetIsRefused) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 3);
  const std::string set_dir = dir.path() + "/packed";
  ASSERT_TRUE(PackDataset(d, Small(set_dir)).ok());
  auto j = nlohmann::json::parse(*ReadFile(set_dir + "/pack.json"));
  fs::copy_file(set_dir + "/shard-00000.tar", dir.path() + "/elsewhere.tar");
  j["shards"][0]["file"] = "../elsewhere.tar";
  ASSERT_TRUE(WriteFileAtomic(set_dir + "/pack.json", j.dump()).ok());
  auto set = PackedSet::Open(set_dir);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(set.status().message().find("shard file '../elsewhere.tar': expected a name shard-NNNNN.tar"),
            std::string::npos)
      << set.status().message();
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
  EXPECT_EQ(*StagedCopy(*set, dir.path() + "/local"), "");
  auto first = StagePackedSet(*set, dir.path() + "/local");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(first->dir, dir.path() + "/local/" + set->content_fingerprint());
  EXPECT_EQ(*StagedCopy(*set, dir.path() + "/local"), first->dir);
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
  EXPECT_EQ(*StagedCopy(*set, dir.path() + "/full"), "");
  for (const auto& e : fs::directory_iterator(dir.path() + "/full/" + set->content_fingerprint())) {
    ADD_FAILURE() << "left behind: " << e.path();
  }
  auto bad = StagePackedSet(*set, dir.path() + "/other");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(set->shards()[0].file), std::string::npos) << bad.status().message();
  EXPECT_EQ(*StagedCopy(*set, dir.path() + "/other"), "");
}

// Makes zlib's CRC-32 of `data` equal `wanted` by rewriting the 4 bytes at
// `pos`: what another user does to keep a CRC while changing the data
// (CRC-32 is linear, so 4 bytes force any value).
std::string ForgeCrc32(const std::string& data, size_t pos, uint32_t wanted) {
  uint32_t table[256], reverse[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) reverse[table[i] >> 24] = (table[i] << 8) ^ i;
  uint32_t fwd = 0xFFFFFFFFu;
  for (size_t i = 0; i < pos; ++i) fwd = (fwd >> 8) ^ table[(fwd ^ static_cast<unsigned char>(data[i])) & 0xFF];
  uint32_t bkd = wanted ^ 0xFFFFFFFFu;
  for (size_t i = data.size(); i-- > pos + 4;) {
    bkd = (bkd << 8) ^ reverse[bkd >> 24] ^ static_cast<unsigned char>(data[i]);
  }
  for (int k = 3; k >= 0; --k) bkd = (bkd << 8) ^ reverse[bkd >> 24] ^ ((fwd >> (8 * k)) & 0xFF);
  std::string out = data;
  for (int k = 0; k < 4; ++k) out[pos + static_cast<size_t>(k)] = static_cast<char>((bkd >> (8 * k)) & 0xFF);
  return out;
}

uint32_t ZlibCrc(const std::string& s) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

// The first image of `set` altered, with its CRC and the shard's CRC kept:
// a shard of the same size that every CRC check takes for the packed one.
std::string ForgedShard(const PackedSet& set, const std::string& shard_path) {
  std::string shard = *ReadFile(shard_path);
  const auto& e = set.entries()[set.pack_order()[0]];
  std::string image = shard.substr(static_cast<size_t>(e.offset), static_cast<size_t>(e.bytes));
  for (size_t i = 128; i < 160 && i + 4 < image.size(); ++i) image[i] = '\xff';  // past the .npy header
  image = ForgeCrc32(image, image.size() - 4, e.crc32);
  shard.replace(static_cast<size_t>(e.offset), image.size(), image);
  // The shard's own CRC, through 4 bytes of the end-of-archive zeros.
  return ForgeCrc32(shard, shard.size() - 8, set.shards()[e.shard].crc32);
}

// Another user makes the stage directory first (or a copy in it) and puts
// in a shard of the same size whose altered image keeps every CRC: the
// staging refuses the directory, naming it, its owner and mode, and
// touches nothing in it. A shard changed after staging is found and staged
// again; a source shard with forged CRCs fails its SHA-256.
TEST(PackedSet, AStageDirectoryOrShardAnotherUserPlantedIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving files to another user needs root (CI runs as root)";
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 6);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  const std::string shard_name = set->shards()[0].file;
  const std::string forged = ForgedShard(*set, dir.path() + "/packed/" + shard_name);
  ASSERT_EQ(static_cast<int64_t>(forged.size()), set->shards()[0].bytes);
  ASSERT_EQ(ZlibCrc(forged), set->shards()[0].crc32) << "the forged shard keeps the shard's CRC-32";
  ASSERT_NE(forged, *ReadFile(dir.path() + "/packed/" + shard_name));

  // The planted stage directory: uid 65534, mode 0755, a copy in it with
  // the forged shard and the markers a copy has.
  const std::string plant = dir.path() + "/stage-of-someone", copy = plant + "/" + set->content_fingerprint();
  fs::create_directories(copy);
  ASSERT_TRUE(WriteFileAtomic(copy + "/" + shard_name, forged).ok());
  fs::copy_file(dir.path() + "/packed/index.csv", copy + "/index.csv");
  fs::copy_file(dir.path() + "/packed/pack.json", copy + "/pack.json");
  ASSERT_TRUE(WriteFileAtomic(copy + "/.staged", set->content_fingerprint() + "\n").ok());
  for (const auto& p : {plant, copy, copy + "/" + shard_name, copy + "/.staged"}) {
    ASSERT_TRUE(scdino::testing::GiveToOtherUser(p));
    ::chmod(p.c_str(), fs::is_directory(p) ? 0755 : 0644);
  }
  auto found = StagedCopy(*set, plant);
  ASSERT_FALSE(found.ok()) << "a planted copy was taken for a staged one: " << *found;
  EXPECT_EQ(found.status().code(), StatusCode::kFailedPrecondition);
  for (const auto& part : std::vector<std::string>{plant + ": the stage directory is a directory of uid 65534 with mode 0755",
                                                  "expected a directory of yours (uid 0) with mode 0700",
                                                  "SCDINO_STAGE_DIR"}) {
    EXPECT_NE(found.status().message().find(part), std::string::npos) << found.status().message();
  }
  auto staged = StagePackedSet(*set, plant);
  ASSERT_FALSE(staged.ok());
  EXPECT_EQ(staged.status().message(), found.status().message());
  EXPECT_EQ(*ReadFile(copy + "/" + shard_name), forged) << "nothing another user made is touched";
  // The root ours but the copy in it not (made while the root was open).
  const std::string mine = dir.path() + "/stage", theirs = mine + "/" + set->content_fingerprint();
  fs::create_directories(theirs);
  ::chmod(mine.c_str(), 0700);
  ASSERT_TRUE(scdino::testing::GiveToOtherUser(theirs));
  auto refused = StagePackedSet(*set, mine);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(theirs + ": the staged copy is a directory of uid 65534"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(fs::exists(theirs));

  // A copy of ours whose shard is replaced after staging (same size, same
  // CRCs): found changed, staged again, and the images read as packed.
  const std::string own = dir.path() + "/own";
  auto first = StagePackedSet(*set, own);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(WriteFileAtomic(first->dir + "/" + shard_name, forged, 0644).ok());
  auto changed = StagedCopy(*set, own);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(changed.status().message().find("changed since it was verified"), std::string::npos);
  auto again = StagePackedSet(*set, own);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->reused);
  auto reread = Open(again->dir);
  for (size_t i = 0; i < d.entries.size(); ++i) EXPECT_TRUE(reread->Read(i)->equal(*set->Read(i))) << i;

  // The shared set's own shard forged: its CRCs pass, its SHA-256 does not.
  ASSERT_TRUE(WriteFileAtomic(dir.path() + "/packed/" + shard_name, forged, 0644).ok());
  auto from_forged = StagePackedSet(*set, dir.path() + "/fresh");
  ASSERT_FALSE(from_forged.ok());
  EXPECT_EQ(from_forged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(from_forged.status().message().find("SHA-256"), std::string::npos) << from_forged.status().message();
  EXPECT_EQ(*StagedCopy(*set, dir.path() + "/fresh"), "");
}

// Every staging keeps the newest copies per user (scdino.stage_keep) and
// removes the older ones it made, nothing else.
TEST(PackedSet, StagingEvictsTheOldestCopiesBeyondTheKeptNumber) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 2, 4);
  const std::string root = dir.path() + "/stage";
  std::vector<std::string> copies;
  for (uint64_t seed : {1, 2, 3}) {
    PackOptions o = Small(dir.path() + "/packed" + std::to_string(seed));
    o.seed = seed;
    ASSERT_TRUE(PackDataset(d, o).ok());
    auto set = Open(o.out);
    auto r = StagePackedSet(*set, root, {}, 2);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    copies.push_back(r->dir);
    if (seed == 1) fs::create_directories(root + "/notes");  // not a copy: kept
    if (seed < 3) {
      EXPECT_TRUE(r->evicted.empty());
    } else {
      EXPECT_EQ(r->evicted, std::vector<std::string>{copies[0]});
    }
  }
  EXPECT_FALSE(fs::exists(copies[0]));
  EXPECT_TRUE(fs::exists(copies[1]));
  EXPECT_TRUE(fs::exists(copies[2]));
  EXPECT_TRUE(fs::exists(root + "/notes"));
  // A reuse counts as a use: the second copy is now the newest.
  auto second = Open(dir.path() + "/packed2");
  auto reused = StagePackedSet(*second, root, {}, 1);
  ASSERT_TRUE(reused.ok());
  EXPECT_TRUE(reused->reused);
  EXPECT_EQ(reused->evicted, std::vector<std::string>{copies[2]});
  EXPECT_EQ(fs::status(root).permissions() & fs::perms::all, fs::perms::owner_all) << "the stage root is 0700";
}

// Batches of a loader over `d` (the packed set's dataset or the folders').
std::vector<MultiCropBatch> LoaderBatches(const Dataset& d, LoaderOptions o, int64_t epoch, int64_t first_batch) {
  FileLoader l(d, o);
  l.StartEpoch(epoch, first_batch);
  std::vector<MultiCropBatch> out;
  while (auto b = l.Next()) out.push_back(*b);
  return out;
}

// Rank 1 of 2, small crops of 3 channels, two reading threads.
LoaderOptions RankOneOfTwo(int64_t batch_size) {
  LoaderOptions o;
  o.sampler.batch_size = batch_size;
  o.sampler.seed = 5;
  o.sampler.world_size = 2;
  o.sampler.rank = 1;
  o.crops.global_size = 12;
  o.crops.local_size = 6;
  o.crops.local_crops_number = 2;
  o.crops.mean.assign(3, 0.5);
  o.crops.std.assign(3, 0.2);
  o.threads = 2;
  return o;
}

TEST(PackedSet, TheLoaderGivesTheFoldersBatchesInEitherShuffleAndOnResume) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 3, 11);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  LoaderOptions o = RankOneOfTwo(4);
  for (bool blocks : {false, true}) {
    LoaderOptions folder = o;
    if (blocks) {
      UseBlockShuffle(*set, 2 * set->block_samples(), &folder.sampler);  // windows of 2 blocks
    }
    for (int64_t first : {0, 2}) {  // a fresh epoch, and one resumed at batch 2
      auto a = LoaderBatches(d, folder, 1, first), b = LoaderBatches(DatasetOf(set), folder, 1, first);
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

// Threads that want the same blocks in any order, through a cache of one
// block (every new block evicts the last) or of three: every image is the
// one the set reads alone, and a block read by one thread is waited for,
// never lost, by the others.
TEST(PackedSet, TheBlockCacheGivesEveryThreadTheImageTheSetReads) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 3, 10);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  const auto n = static_cast<int64_t>(set->entries().size());
  std::vector<torch::Tensor> alone;
  for (int64_t i = 0; i < n; ++i) alone.push_back(*set->Read(i));
  std::string plan;
  EXPECT_EQ(BlockCache::Capacity(*set, set->block_samples(), 2, 8, 1, int64_t{1} << 30, &plan), 6u);
  EXPECT_NE(plan.find("at most 6 blocks"), std::string::npos) << plan;
  EXPECT_EQ(BlockCache::Capacity(*set, set->block_samples(), 2, 8, 1, 1, &plan), 0u);
  EXPECT_NE(plan.find("read image by image"), std::string::npos) << plan;
  for (size_t capacity : {size_t{1}, size_t{3}}) {
    BlockCache cache(*set, capacity, 2);
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    cache.SetOrder(order, 0);
    std::atomic<int> wrong{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t) {
      readers.emplace_back([&, t] {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = order[static_cast<size_t>((k + 7 * t) % n)];
          auto img = cache.Read(i);
          if (!img.ok() || !img->equal(alone[static_cast<size_t>(i)])) ++wrong;
        }
      });
    }
    for (auto& r : readers) r.join();
    EXPECT_EQ(wrong.load(), 0) << "capacity " << capacity;
  }
}

// The blocks held grow with the ranks (a global batch spans them all): at
// 64 ranks they would need many times what 2 ranks need. Held to a bound in
// bytes, the loader reads image by image beyond it, in the same order, and
// says so with the figures and the key.
TEST(PackedSet, TheBlocksHeldStayWithinTheirByteBoundAtAnyWorldSize) {
  scdino::testing::ScratchDir dir;
  auto d = WriteCells(dir.path() + "/src", 4, 40);
  ASSERT_TRUE(PackDataset(d, Small(dir.path() + "/packed")).ok());
  auto set = Open(dir.path() + "/packed");
  LoaderOptions o = RankOneOfTwo(2);
  UseBlockShuffle(*set, 2 * set->block_samples(), &o.sampler);  // windows of 2 blocks
  LoaderOptions packed = o;
  int64_t two_ranks = 0;
  {
    FileLoader l(DatasetOf(set), packed);
    EXPECT_NE(l.read_plan().find("read in blocks of 4 images"), std::string::npos) << l.read_plan();
    two_ranks = l.block_cache_bytes();
    EXPECT_GT(two_ranks, 0);
    EXPECT_LE(two_ranks, packed.block_cache_max_bytes);
  }
  // What 2 ranks hold is the bound; 64 ranks of 2 images a batch would need
  // the blocks of 4 more windows.
  packed.block_cache_max_bytes = two_ranks;
  for (LoaderOptions* many : {&o, &packed}) {
    many->sampler.world_size = 64;
    many->sampler.rank = 63;
  }
  FileLoader l(DatasetOf(set), packed);
  EXPECT_LE(l.block_cache_bytes(), packed.block_cache_max_bytes);
  EXPECT_EQ(l.block_cache_bytes(), 0);
  EXPECT_NE(l.read_plan().find("read image by image: the blocks of the windows in flight at 64 rank(s)"),
            std::string::npos) << l.read_plan();
  EXPECT_NE(l.read_plan().find("scdino.block_cache_mb"), std::string::npos) << l.read_plan();
  // The same batches as the image files give.
  auto a = LoaderBatches(d, o, 1, 0), b = LoaderBatches(DatasetOf(set), packed, 1, 0);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].indices.equal(b[i].indices)) << "batch " << i;
    for (size_t c = 0; c < a[i].crops.size(); ++c) EXPECT_TRUE(a[i].crops[c].equal(b[i].crops[c]));
  }
}

}  // namespace
}  // namespace scdino::data
