#include "jobs/feature_job.h"

#include <gtest/gtest.h>

#include <sstream>

#include "config/config.h"
#include "launch/coordinator.h"
#include "plan/source.h"
#include "support/cell_folders.h"
#include "support/test_support.h"

namespace scdino::jobs {
namespace {

// The synthetic source's images live in the trainer's memory: scdino-features
// and scdino-eval read files, so they refuse it by name (they read past the end
// of an empty file list before).
TEST(FeatureRun, TheSyntheticSourceIsRefusedNamingScdinoSynth) {
  const std::string yaml = R"(
meta: {name_of_run: syn, output_dir: /nonexistent/runs, seed: 0, selected_channel_combination_per_run: ["012"]}
train_scDINO: {batch_size_per_gpu: 4}
scdino: {data_source: synthetic, synthetic: {classes: 2, per_class: 4, channels: 3, size: 16}}
)";
  auto config = run::ParseRunConfig(yaml, "syn.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto dataset = run::IndexDataset(*config);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  auto coordinator = run::Coordinator::Single();
  auto r = PrepareFeatureRun(*config, *dataset, "syn.yaml", run::LaunchInfo{}, *coordinator);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("syn.yaml: scdino.data_source is synthetic"), std::string::npos) << m;
  EXPECT_NE(m.find("scdino-synth --out DIR"), std::string::npos) << m;
}

// One checkpoint's extraction as scdino-features and scdino-eval --follow
// both run it: into the run's features directory of its name, saying what
// is extracted, where to and what this rank wrote; a second run finds the
// set complete and leaves it.
TEST(FeatureRun, ExtractCheckpointWritesTheNamedSetAndSaysWhat) {
  scdino::testing::ScratchDir dir;
  data::SyntheticOptions cells;
  cells.classes = 2;
  cells.per_class = 4;
  cells.channels = 3;
  cells.size = 16;
  scdino::testing::WriteCellFolders(dir.file("cells"), cells, "class");
  const std::string yaml = "meta: {name_of_run: ex, output_dir: \"" + dir.file("runs") + "\", dataset_dir: \"" +
                           dir.file("cells") + "\", seed: 0, selected_channel_combination_per_run: [\"012\"]}\n" +
                           "train_scDINO: {batch_size_per_gpu: 4}\nscdino: {data_source: folder}\n";
  auto config = run::ParseRunConfig(yaml, "ex.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto dataset = run::IndexDataset(*config);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  auto coordinator = run::Coordinator::Single();
  auto r = PrepareFeatureRun(*config, *dataset, "ex.yaml", run::LaunchInfo{}, *coordinator);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::ostringstream log;
  ExtractHooks hooks;
  hooks.log = &log;
  hooks.program = "scdino-test";
  auto out = ExtractCheckpoint(*config, *r, kRawPixels, "teacher", run::LaunchInfo{}, torch::kCPU, hooks);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, config->features_dir("raw_pixels"));
  EXPECT_TRUE(std::filesystem::exists(*out + "/features.npy")) << *out;
  EXPECT_NE(log.str().find("scdino-test: the raw pixels (every image "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find(" -> " + *out + "\n"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("scdino-test: rank 0: 8 images, 1 shards written, 0 already complete\n"),
            std::string::npos)
      << log.str();
  log.str("");
  auto again = ExtractCheckpoint(*config, *r, kRawPixels, "teacher", run::LaunchInfo{}, torch::kCPU, hooks);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *out);
  EXPECT_NE(log.str().find("scdino-test: " + *out + " is already complete\n"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace scdino::jobs
