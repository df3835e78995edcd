#include "features/feature_job.h"

#include <gtest/gtest.h>

#include "config/config.h"
#include "launch/coordinator.h"
#include "plan/source.h"

namespace scdino::features {
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

}  // namespace
}  // namespace scdino::features
