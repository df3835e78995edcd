#include "data/dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include <unistd.h>

#include "data/image_io.h"
#include "support/other_user.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

namespace fs = std::filesystem;

void Image(const std::string& path, int64_t c = 3, int64_t value = 100) {
  fs::create_directories(fs::path(path).parent_path());
  auto t = torch::arange(5 * 6 * c, torch::kInt32).remainder(200).to(torch::kUInt8).view({5, 6, c});
  t.select(2, 0).fill_(static_cast<uint8_t>(value));
  ASSERT_TRUE(WriteTiff(path, t).ok());
}

TEST(IndexFolder, ClassFoldersSortedAndStable) {
  scdino::testing::ScratchDir d;
  Image(d.file("root/zebra/a.tif"));
  Image(d.file("root/apple/b.tif"));
  Image(d.file("root/apple/c.tiff"));
  std::ofstream(d.file("root/apple/.DS_Store")) << "x";
  auto ds = IndexFolder(d.file("root"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->classes, (std::vector<std::string>{"apple", "zebra"}));
  ASSERT_EQ(ds->entries.size(), 3u);
  EXPECT_EQ(ds->entries[0].label, 0);
  EXPECT_EQ(ds->entries[2].label, 1);
}

TEST(IndexFolder, DeeperTreesLabelledAtDepth) {
  // Test/<Donor>/<Condition>/<class>/image, as the reference test set.
  scdino::testing::ScratchDir d;
  Image(d.file("Test/donor1/ctrl/Tcell/1.tif"));
  Image(d.file("Test/donor2/stim/Bcell/2.tif"));
  Image(d.file("Test/donor2/ctrl/Tcell/3.tif"));
  auto by_class = IndexFolder(d.file("Test"));
  ASSERT_TRUE(by_class.ok());
  EXPECT_EQ(by_class->classes, (std::vector<std::string>{"Bcell", "Tcell"}));
  IndexOptions o;
  o.folder_depth_for_labels = 1;
  auto by_condition = IndexFolder(d.file("Test"), o);
  ASSERT_TRUE(by_condition.ok());
  EXPECT_EQ(by_condition->classes, (std::vector<std::string>{"ctrl", "stim"}));
  o.folder_depth_for_labels = 3;
  auto too_deep = IndexFolder(d.file("Test"), o);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("folder_depth_for_labels = 3"), std::string::npos);
}

// A flat folder of unlabelled images (no class folders) is one class named
// after the folder: it trains; a folder that mixes both is refused naming
// an image of each.
TEST(IndexFolder, AFlatFolderIsOneClassNamedAfterIt) {
  scdino::testing::ScratchDir d;
  Image(d.file("plate7/b.tif"));
  Image(d.file("plate7/a.png"));
  auto flat = IndexFolder(d.file("plate7"));
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_EQ(flat->classes, (std::vector<std::string>{"plate7"}));
  ASSERT_EQ(flat->entries.size(), 2u);
  EXPECT_EQ(flat->entries[0].path, d.file("plate7/a.png"));
  EXPECT_EQ(flat->entries[0].label, 0);
  EXPECT_EQ(flat->entries[1].label, 0);
  auto slash = IndexFolder(d.file("plate7") + "/");
  ASSERT_TRUE(slash.ok()) << slash.status().ToString();
  EXPECT_EQ(slash->classes, (std::vector<std::string>{"plate7"}));
  IndexOptions deeper;
  deeper.folder_depth_for_labels = 1;
  auto shallow = IndexFolder(d.file("plate7"), deeper);
  ASSERT_FALSE(shallow.ok());
  EXPECT_NE(shallow.status().message().find("too shallow for folder_depth_for_labels = 1"), std::string::npos);
  Image(d.file("plate7/ctrl/c.tif"));
  auto mixed = IndexFolder(d.file("plate7"));
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("in the data set folder itself (" + d.file("plate7/a.png") +
                                          ") and in class folders (" + d.file("plate7/ctrl/c.tif") + ")"),
            std::string::npos)
      << mixed.status().message();
}

TEST(IndexFolder, BadInputFailsOrIsSkipped) {
  scdino::testing::ScratchDir d;
  Image(d.file("root/a/1.tif"));
  std::ofstream(d.file("root/a/readme.txt")) << "notes";
  fs::create_directories(d.file("root/empty"));
  auto fail = IndexFolder(d.file("root"));
  ASSERT_FALSE(fail.ok());
  EXPECT_NE(fail.status().message().find("readme.txt"), std::string::npos) << fail.status().message();
  fs::remove(d.file("root/a/readme.txt"));
  auto empty = IndexFolder(d.file("root"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty: class folder without images"), std::string::npos);
  std::ofstream(d.file("root/a/readme.txt")) << "notes";
  IndexOptions skip;
  skip.on_bad_image = BadImagePolicy::kSkip;
  auto s = IndexFolder(d.file("root"), skip);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries.size(), 1u);
  EXPECT_EQ(s->skipped.size(), 2u);
  EXPECT_EQ(IndexFolder(d.file("nowhere")).status().code(), StatusCode::kNotFound);
}

// A data set folder, or a class folder inside it, that the user cannot read
// is named with the system's reason (exit 2), never "no images found", and
// never ends the process through a throwing file-system call. As root, in
// a child that becomes nobody (mode 0700 shuts it out); as a plain user,
// in this process, with mode 0 shutting out the owner too.
TEST(IndexFolder, UnreadableFoldersAreNamedWithTheReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  scdino::testing::ScratchDir d;
  Image(d.file("root/a/1.tif"));
  Image(d.file("root/b/2.tif"));
  const bool root = ::geteuid() == 0;
  auto refused = [](const std::string& folder) {
    auto ds = IndexFolder(folder);
    std::fprintf(stderr, "%s\n", ds.ok() ? "indexed" : ds.status().ToString().c_str());
    return !ds.ok() && ds.status().code() == StatusCode::kFailedPrecondition ? ds.status().message() : "";
  };
  auto expect_refused = [&](const std::string& why) {
    if (root) {
      EXPECT_EXIT(
          {
            scdino::testing::BecomeOtherUserIfRoot();
            std::exit(refused(d.file("root")).empty() ? 1 : 0);
          },
          ::testing::ExitedWithCode(0), why);
    } else {
      const std::string m = refused(d.file("root"));
      EXPECT_TRUE(std::regex_search(m, std::regex(why))) << "got '" << m << "', expected /" << why << "/";
    }
  };
  const fs::perms shut = root ? fs::perms::owner_all : fs::perms::none;
  const fs::perms open = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                         fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(d.file("root"), shut);
  expect_refused("root: cannot read the data set folder: Permission denied \\(running as uid [0-9]+\\)");
  fs::permissions(d.file("root"), open);
  fs::permissions(d.file("root/b"), shut);
  expect_refused("root/b: cannot read a folder of the data set: Permission denied");
  fs::permissions(d.file("root/b"), open);  // so that the scratch folder can be removed
}

TEST(IndexCsv, PathsAndLabels) {
  scdino::testing::ScratchDir d;
  Image(d.file("imgs/x.tif"));
  Image(d.file("imgs/y.tif"));
  std::ofstream(d.file("index.csv")) << "path,label\nimgs/x.tif,b\r\n" << d.file("imgs/y.tif") << ",a\n";
  auto ds = IndexCsv(d.file("index.csv"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ds->entries.size(), 2u);
  EXPECT_TRUE(fs::exists(ds->entries[0].path));
  std::ofstream(d.file("bad.csv")) << "imgs/x.tif\n";
  auto bad = IndexCsv(d.file("bad.csv"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos);
  // A path with a comma, quoted as pandas writes it, or not quoted at all:
  // the label is the last field either way.
  Image(d.file("imgs/p,q.tif"));
  Image(d.file("imgs/r,s.tif"));
  std::ofstream(d.file("commas.csv")) << "path,label\n\"imgs/p,q.tif\",\"c,d\"\nimgs/r,s.tif,e\n";
  auto commas = IndexCsv(d.file("commas.csv"));
  ASSERT_TRUE(commas.ok()) << commas.status().ToString();
  EXPECT_EQ(commas->classes, (std::vector<std::string>{"c,d", "e"}));
  ASSERT_EQ(commas->entries.size(), 2u);
  EXPECT_EQ(commas->entries[0].path, d.file("imgs/p,q.tif"));
  std::ofstream(d.file("open.csv")) << "\"imgs/x.tif,b\n";
  auto open = IndexCsv(d.file("open.csv"));
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("open.csv: line 1: expected 'path,label'"), std::string::npos)
      << open.status().message();
}

// One entry point for every source (the CSV, the folder tree; packed sets
// in packed_test), and the first readable image read once for the checks
// before a run: past an unreadable first file, with its refusal of a
// channel selection the image cannot give.
TEST(OpenDataset, EverySourceAndTheFirstReadableImage) {
  scdino::testing::ScratchDir d;
  Image(d.file("root/a/1.tif"), 4);
  Image(d.file("root/a/2.tif"), 4);
  std::ofstream(d.file("root/a/0.tif")) << "not a tiff";
  DataSource folder;
  folder.dir = d.file("root");
  folder.on_bad_image = BadImagePolicy::kSkip;
  auto tree = OpenDataset(folder, nullptr);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  ASSERT_EQ(tree->entries.size(), 3u) << "a damaged file is indexed; reading it is the loader's business";
  const FirstImage first = ProbeFirstImage(*tree, {});
  EXPECT_EQ(first.path, d.file("root/a/1.tif"));
  EXPECT_EQ(first.raw_channels, 4);
  EXPECT_TRUE(first.prepared.ok()) << first.prepared.ToString();
  EXPECT_EQ(first.channels, 4);
  EXPECT_EQ(first.height, 5);
  EXPECT_EQ(first.width, 6);
  ASSERT_FALSE(first.unread.ok());
  EXPECT_NE(first.unread.message().find("0.tif"), std::string::npos) << first.unread.message();
  const FirstImage wide = ProbeFirstImage(*tree, {{0, 6}, 0});
  EXPECT_EQ(wide.raw_channels, 4);
  EXPECT_EQ(wide.prepared.code(), StatusCode::kInvalidArgument) << wide.prepared.ToString();
  EXPECT_TRUE(ProbeFirstImage(Dataset{}, {}).path.empty());

  std::ofstream(d.file("index.csv")) << "path,label\nroot/a/2.tif,x\n";
  DataSource csv;
  csv.kind = DataSource::Kind::kCsv;
  csv.index_csv = d.file("index.csv");
  auto listed = OpenDataset(csv, nullptr);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->entries.size(), 1u);
  DataSource synthetic;
  synthetic.kind = DataSource::Kind::kSynthetic;
  EXPECT_TRUE(OpenDataset(synthetic, nullptr)->entries.empty());
  folder.dir = d.file("nowhere");
  EXPECT_EQ(OpenDataset(folder, nullptr).status().code(), StatusCode::kNotFound);
}

TEST(PrepareImage, SelectsChannelsAndMinMaxesEach) {
  auto hwc = torch::zeros({2, 2, 12}, torch::kInt32);
  hwc.select(2, 11).copy_(torch::tensor({{10, 20}, {30, 50}}));
  hwc.select(2, 3).fill_(7);  // constant channel
  ImagePrep prep;
  prep.channels = {11, 3};
  auto x = PrepareImage(hwc, prep, "img.tif");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->sizes(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_TRUE(x->select(0, 0).allclose(torch::tensor({{0.0f, 0.25f}, {0.5f, 1.0f}})));
  EXPECT_TRUE(x->select(0, 1).eq(0).all().item<bool>()) << "a constant channel becomes 0";
  EXPECT_TRUE(torch::isfinite(*x).all().item<bool>());
  prep.channels = {12};
  auto bad = PrepareImage(hwc, prep, "img.tif");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("img.tif: has 12 channel(s), but channels [12] were selected"),
            std::string::npos)
      << bad.status().message();
}

TEST(PrepareImage, CenterCropAndNonFiniteValues) {
  auto hwc = torch::arange(50, torch::kFloat32).view({5, 10, 1});
  ImagePrep prep;
  prep.center_crop = 4;
  auto x = PrepareImage(hwc, prep, "f.tif");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->sizes(), (std::vector<int64_t>{1, 4, 4}));
  prep.center_crop = 6;
  EXPECT_FALSE(PrepareImage(hwc, prep, "f.tif").ok());
  hwc[0][0][0] = std::nanf("");
  prep.center_crop = 0;
  auto nan = PrepareImage(hwc, prep, "f.tif");
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("NaN"), std::string::npos);
}

TEST(PrepareImage, TheDirectLoopsGiveTheTensorOpsValuesBitForBit) {
  // Contiguous 8-bit, 16-bit and float images take the direct loops; the
  // same values as a strided view take the tensor ops.
  torch::manual_seed(3);
  for (auto type : {torch::kUInt8, torch::kInt32, torch::kFloat32}) {
    auto hwc = type == torch::kFloat32 ? torch::rand({13, 11, 4}) * 7 - 2
                                       : torch::randint(0, type == torch::kUInt8 ? 256 : 65536, {13, 11, 4}).to(type);
    hwc.select(2, 3).fill_(type == torch::kFloat32 ? 0.5 : 9);  // a constant channel becomes 0
    const auto strided = hwc.transpose(0, 1).contiguous().transpose(0, 1);
    ASSERT_FALSE(strided.is_contiguous());
    for (const ImagePrep& prep : {ImagePrep{}, ImagePrep{{3, 0, 2}, 0}, ImagePrep{{1}, 9}, ImagePrep{{2, 3}, 10}}) {
      auto direct = PrepareImage(hwc, prep, "a.tif"), ops = PrepareImage(strided, prep, "a.tif");
      ASSERT_TRUE(direct.ok() && ops.ok());
      EXPECT_EQ(direct->sizes(), ops->sizes());
      EXPECT_TRUE(direct->equal(*ops)) << "dtype " << type << ", center crop " << prep.center_crop;
    }
  }
}

}  // namespace
}  // namespace scdino::data
