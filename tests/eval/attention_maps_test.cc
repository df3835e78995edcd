// Attention maps stay small and stop: the side they are drawn at (the
// features' own by default, capped by a token budget with a warning that
// names the key, the tokens and the memory), and a SIGTERM that ends a map
// over 14,401 tokens (480 px, patch 4) within seconds, between blocks.
#include "eval/attention_maps.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "data/image_io.h"
#include "process/signals.h"
#include "support/test_support.h"

namespace scdino::eval {
namespace {

TEST(ChooseAttentionSide, DefaultsToTheSideTheFeaturesWereExtractedAt) {
  EXPECT_EQ(ChooseAttentionSide(0, 64, 8, 6, 4096).side, 64);
  EXPECT_TRUE(ChooseAttentionSide(0, 64, 8, 6, 4096).warning.empty());
  EXPECT_EQ(ChooseAttentionSide(0, 0, 8, 6, 4096).side, 0);  // not resized: the images as they are
  EXPECT_EQ(ChooseAttentionSide(100, 64, 16, 6, 4096).side, 96);  // a multiple of the patch
  EXPECT_EQ(ChooseAttentionSide(480, 224, 8, 6, 4096).side, 480);  // DINO's own: 3,600 patches
}

TEST(ChooseAttentionSide, ARequestOverTheTokenBudgetIsDrawnSmallerAndSaysWhy) {
  const auto a = ChooseAttentionSide(480, 32, 4, 6, 4096);
  EXPECT_EQ(a.side, 256);  // 64 x 64 patches
  for (const char* want : {"480 px with patch 4 are 14401 tokens", "9.3 GiB per image (6 heads)", "256 px (4097 tokens",
                           "downstream_analyses.attention_visualisation.image_size",
                           "scdino.evaluation.attention_max_tokens (now 4096)"}) {
    EXPECT_NE(a.warning.find(want), std::string::npos) << want << " not in: " << a.warning;
  }
  EXPECT_EQ(AttentionBytes(14401, 6), int64_t{2} * 6 * 14401 * 14401 * 4);
  EXPECT_EQ(ChooseAttentionSide(480, 32, 4, 6, 20000).side, 480);  // a raised budget draws it
}

struct TinySet {
  features::FeatureSet set;
  features::FeaturePrep prep;
};

TinySet TwoClasses(const std::string& dir, int64_t side = 16) {
  TinySet t;
  t.set.dir = dir;
  t.set.classes = {"a", "b"};
  for (int c = 0; c < 2; ++c) {
    const std::string path = dir + "/" + t.set.classes[c] + ".tif";
    auto img = torch::randint(0, 255, {side, side, 2}, torch::TensorOptions().dtype(torch::kUInt8));
    EXPECT_TRUE(data::WriteTiff(path, img).ok());
    t.set.rows.push_back({path, t.set.classes[c], c, data::Split::kTest});
  }
  t.prep.image.channels = {0, 1};
  t.prep.mean = {0.5, 0.5};
  t.prep.std = {0.25, 0.25};
  return t;
}

features::Backbone PatchFour(int64_t depth) {
  return features::RandomBackbone(
      model::VitOptions().in_chans(2).patch_size(4).img_size(16).embed_dim(32).depth(depth).num_heads(2), 3,
      torch::kCPU);
}

TEST(AttentionMaps, DrawnAtTheChosenSideOnePngPerImage) {
  scdino::testing::ScratchDir scratch;
  const std::string dir = scratch.path();
  auto t = TwoClasses(dir);
  auto backbone = PatchFour(2);
  t.prep.resize = ChooseAttentionSide(0, 32, 4, 2, 4096).side;
  AttentionMapOptions o;
  o.channel_names = {"DNA", "actin"};
  auto written = WriteAttentionMaps(t.set, backbone, t.prep, dir + "/out", o);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, (std::vector<std::string>{"attention/a_0.png", "attention/b_0.png"}));
  for (const auto& f : *written) EXPECT_GT(std::filesystem::file_size(dir + "/out/" + f), 0u) << f;
}

// Features extracted without resizing: each image's own size sets the
// tokens, and one over the budget is drawn smaller, told once.
TEST(AttentionMaps, UnresizedImagesOverTheBudgetAreDrawnSmallerAndSaySo) {
  scdino::testing::ScratchDir scratch;
  const std::string dir = scratch.path();
  auto t = TwoClasses(dir, 64);  // 256 patches of 4 px
  auto backbone = PatchFour(2);
  t.prep.resize = ChooseAttentionSide(0, 0, 4, 2, 64).side;
  ASSERT_EQ(t.prep.resize, 0);
  AttentionMapOptions o;
  o.max_tokens = 64;
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& w) { warnings.push_back(w); };
  auto written = WriteAttentionMaps(t.set, backbone, t.prep, dir + "/out", o);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->size(), 2u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(dir + "/a.tif: attention maps at 64 px with patch 4 are 257 tokens"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("drawing them at 32 px (65 tokens"), std::string::npos) << warnings[0];
  o.max_tokens = 4096;  // within the budget: drawn as they are, nothing said
  warnings.clear();
  ASSERT_TRUE(WriteAttentionMaps(t.set, backbone, t.prep, dir + "/out2", o).ok());
  EXPECT_TRUE(warnings.empty());
}

// Without a check between blocks, one image at 480 px and patch 4 takes the
// whole forward (16 blocks over 14,401 tokens: tens of seconds here) before a
// stop is seen. A TERM that arrives while block 0 runs must end the maps at
// the check before block 1: counted in checks, not seconds, so a loaded
// machine cannot make it fail or pass.
TEST(AttentionMaps, TermEndsAMapOverFourteenThousandTokensAtTheNextBlock) {
  scdino::testing::ScratchDir scratch;
  const std::string dir = scratch.path();
  auto t = TwoClasses(dir);
  auto backbone = PatchFour(16);
  t.prep.resize = ChooseAttentionSide(480, 16, 4, 2, 20000).side;
  ASSERT_EQ(t.prep.resize, 480);
  process::InstallStopSignals("scdino-eval", "stopping at the next chunk of work");
  AttentionMapOptions o;
  int checks = 0;
  // Check 1 is before the first image, check 2 before block 0: there the
  // TERM is sent and awaited (the signal thread takes it), and this check
  // still answers "go on", as if it had come a moment later.
  o.should_stop = [&checks] {
    ++checks;
    if (checks == 2) {
      ::kill(::getpid(), SIGTERM);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!process::StopSignalReceived() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return false;
    }
    return process::StopSignalReceived();
  };
  auto written = WriteAttentionMaps(t.set, backbone, t.prep, dir + "/out", o);
  ASSERT_TRUE(process::StopSignalReceived()) << "the TERM never reached the signal thread";
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), StatusCode::kAborted) << written.status().ToString();
  EXPECT_NE(written.status().message().find("stopped while drawing attention maps (0 written"), std::string::npos)
      << written.status().message();
  EXPECT_EQ(checks, 3) << "the TERM during block 0 of 16 was seen at check " << checks
                       << " (3 is the check before block 1)";
}

}  // namespace
}  // namespace scdino::eval
