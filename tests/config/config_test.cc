#include "config/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/files.h"
#include "config/config_schema.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

// The layout and spellings of scDINO's scDINO_full_pipeline.yaml, including
// its `techer_temp`, `warump_epochs` and python tuples (three combinations).
const std::string kScdinoStyle = [] {
  auto text = ReadFile(std::string(scdino::testing::SourceDir()) + "/tests/config/scdino_full_pipeline.yaml");
  return text.ok() ? *text : std::string();
}();

TEST(RunConfig, AcceptsScdinoPipelineFileAsItIs) {
  ASSERT_FALSE(kScdinoStyle.empty()) << "cannot read tests/config/scdino_full_pipeline.yaml";
  auto c = ParseRunConfig(kScdinoStyle, "pipeline.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run_dir(), "/tmp/out/pbmc_run/vit_channel_AF647_BF_DAPI_CD3_PE");  // entry 0 of three
  EXPECT_DOUBLE_EQ(c->train.hyperparameters.teacher_temp, 0.07);
  EXPECT_EQ(c->train.hyperparameters.warmup_epochs, 5);
  EXPECT_EQ(c->train.hyperparameters.global_crops_scale[0], 0.14);
  EXPECT_EQ(c->meta.channel_dict.at(2), "DAPI");
  ASSERT_EQ(c->meta.selected_channel_combination_per_run.size(), 3u);
  EXPECT_EQ(c->meta.selected_channel_combination_per_run[2], (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c->downstream.knn_n_neighbors, (std::vector<int64_t>{5, 10, 50}));
  auto o = c->dino_options();
  EXPECT_EQ(o.vit.embed_dim(), 384);
  EXPECT_EQ(o.vit.in_chans(), 5);
  EXPECT_EQ(o.vit.img_size(), 224);
  EXPECT_EQ(o.out_dim, 65536);
}

TEST(RunConfig, ChannelCountIsCheckedAgainstTheSelection) {
  auto c = ParseRunConfig(kScdinoStyle, "pipeline.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->CheckChannelCount(5, "the data").ok());
  const Status s = c->CheckChannelCount(3, "ckpt.safetensors (its teacher)");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "ckpt.safetensors (its teacher) has 3 input channel(s), but pipeline.yaml selects 5: "
                         "[0,1,2,3,4] (meta.selected_channel_combination_per_run[0], scdino.channel_combination)");
}

TEST(RunConfig, DefaultsAreScdinos) {
  auto c = ParseRunConfig("meta: {dataset_dir: /data}\ntrain_scDINO: {}\n", "min.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto& h = c->train.hyperparameters;
  EXPECT_EQ(h.arch, "vit_small");
  EXPECT_EQ(h.local_crops_number, 8);
  EXPECT_DOUBLE_EQ(h.lr, 0.0005);
  EXPECT_DOUBLE_EQ(h.momentum_teacher, 0.996);
  EXPECT_EQ(c->channels(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(RunConfig, AugmentationKeys) {
  auto c = ParseRunConfig(R"(
meta: {dataset_dir: /d}
scdino:
  augmentation: {hflip_p: 0, brightness: [0.8, 1.1], blur_p: [0.5, 0.5, 0], blur_sigma: [0.2, 2], solarize_p: 0.5}
)",
                            "aug.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto& a = c->scdino.augmentation;
  EXPECT_EQ(a.hflip_p, 0.0);
  EXPECT_EQ(a.vflip_p, 0.5);
  EXPECT_EQ(a.brightness[1], 1.1);
  EXPECT_EQ(a.blur_p[2], 0.0);
  EXPECT_EQ(a.solarize_p, 0.5);
}

// Mixed precision follows scDINO's use_fp16 on the GPU a rank was placed on
// unless scdino.precision says otherwise; CPU runs always train in fp32.
TEST(RunConfig, PrecisionResolvesForTheDevice) {
  const torch::Device gpu(torch::kCUDA, 0);
  auto precision = [](const std::string& yaml, torch::Device device) {
    auto c = ParseRunConfig("meta: {dataset_dir: /d}\n" + yaml, "p.yaml");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->precision(device) : model::Precision::kFp32;
  };
  EXPECT_EQ(precision("", gpu), model::Precision::kBf16);  // use_fp16 defaults to true
  EXPECT_EQ(precision("scdino: {device: cuda}\n", gpu), model::Precision::kBf16);
  EXPECT_EQ(precision("train_scDINO: {hyperparameters: {use_fp16: false}}\n", gpu), model::Precision::kFp32);
  EXPECT_EQ(precision("scdino: {precision: fp16}\n", gpu), model::Precision::kFp16);
  EXPECT_EQ(precision("scdino: {precision: bf16}\n", torch::kCPU), model::Precision::kFp32);
  EXPECT_EQ(precision("scdino: {device: cuda}\n", torch::kCPU), model::Precision::kFp32);
  // A GPU without bf16 (compute capability < 8.0) trains scDINO's use_fp16
  // in fp16 with loss scaling.
  auto old_gpu = ParseRunConfig("meta: {dataset_dir: /d}\nscdino: {device: cuda}\n", "p.yaml");
  ASSERT_TRUE(old_gpu.ok());
  EXPECT_EQ(old_gpu->precision(gpu, /*bf16_supported=*/false), model::Precision::kFp16);
  EXPECT_TRUE(old_gpu->dino_options(gpu, /*bf16_supported=*/false).loss_scaling);
  auto c = ParseRunConfig("meta: {dataset_dir: /d}\nscdino: {device: cuda, precision: fp16}\n", "p.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->dino_options(gpu).loss_scaling);
  EXPECT_FALSE(c->dino_options(torch::kCPU).loss_scaling);
}

// The small-data recipe's keys reach the model; KoLeo needs a neighbour.
TEST(RunConfig, TeacherCenteringAndKoLeo) {
  auto c = ParseRunConfig("meta: {dataset_dir: /d}\nscdino: {teacher_centering: sinkhorn_knopp, koleo_loss_weight: 0.1}\n",
                          "r.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dino_options().centering, model::TeacherCentering::kSinkhornKnopp);
  EXPECT_EQ(c->dino_options().koleo_loss_weight, 0.1);
  auto plain = ParseRunConfig("meta: {dataset_dir: /d}\n", "r.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->dino_options().centering, model::TeacherCentering::kCenter);
  EXPECT_EQ(plain->dino_options().koleo_loss_weight, 0.0);
  auto bad = ParseRunConfig("meta: {dataset_dir: /d}\ntrain_scDINO: {batch_size_per_gpu: 1}\n"
                            "scdino: {koleo_loss_weight: 0.1}\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("scdino.koleo_loss_weight"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().ToString().find("batch_size_per_gpu 1"), std::string::npos) << bad.status().ToString();
  auto unknown = ParseRunConfig("meta: {dataset_dir: /d}\nscdino: {teacher_centering: sinkhorn}\n", "r.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().ToString().find("sinkhorn_knopp"), std::string::npos) << unknown.status().ToString();
}

TEST(RunConfig, ChannelsByNameAndAboveNine) {
  auto c = ParseRunConfig(R"(
meta:
  channel_dict: {2: DAPI, 1: BF, 11: CD45}
  selected_channel_combination_per_run: [[DAPI, BF], [11, 0], "0A1b"]
scdino: {data_source: synthetic, channel_combination: 1, synthetic: {channels: 12}}
)",
                            "x.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->meta.selected_channel_combination_per_run[0], (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(c->channels(), (std::vector<int64_t>{11, 0}));
  // One hexadecimal character per channel, as scDINO reads its strings.
  EXPECT_EQ(c->meta.selected_channel_combination_per_run[2], (std::vector<int64_t>{0, 10, 1, 11}));
}

// Each combination of several is a run of its own, in the folder scDINO
// gives its ViT (<dino_vit_name>_channel_<names>) under name_of_run, and
// named so in metrics and the control API; one combination keeps
// output_dir/name_of_run.
TEST(RunConfig, EachOfSeveralCombinationsHasAFolderOfItsOwn) {
  auto c = ParseRunConfig(kScdinoStyle, "pipeline.yaml", {"scdino.channel_combination=2"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->combination_dir(0), "vit_channel_AF647_BF_DAPI_CD3_PE");
  EXPECT_EQ(c->run_name(), "pbmc_run/" + c->combination_dir(2));
  EXPECT_EQ(c->run_dir(), "/tmp/out/" + c->run_name());
  // The channel statistics are computed once for all (scDINO's), beside them.
  EXPECT_EQ(c->stats_path(), "/tmp/out/pbmc_run/channel_stats.json");
  std::set<std::string> dirs;
  for (int64_t i = 0; i < 3; ++i) dirs.insert(c->combination_dir(i));
  EXPECT_EQ(dirs.size(), 3u);
  auto one = ParseRunConfig(kScdinoStyle, "pipeline.yaml", {"meta.selected_channel_combination_per_run=[\"024\"]"});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->run_dir(), "/tmp/out/pbmc_run");
  EXPECT_EQ(one->run_name(), "pbmc_run");
  EXPECT_EQ(one->stats_path(), "/tmp/out/pbmc_run/channel_stats.json");
  // Names that cannot make one folder per combination are refused.
  auto bad = [](const std::vector<std::string>& settings, const std::string& part) {
    auto r = ParseRunConfig(kScdinoStyle, "pipeline.yaml", settings);
    ASSERT_FALSE(r.ok()) << settings[0];
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  bad({"meta.channel_dict={0: a/b, 1: BF, 2: DAPI, 3: CD3, 4: PE}"},
      "meta.channel_dict: channel 0: expected a name without '/' (it names the folder of each combination that "
      "holds it), got 'a/b'");
  bad({"meta.channel_dict={0: A_B, 1: C, 2: A, 3: B_C, 4: PE}", "meta.selected_channel_combination_per_run=[\"01\", \"23\"]"},
      "meta.selected_channel_combination_per_run: entries 0 and 1 both train in the folder vit_channel_A_B_C");
  bad({"train_scDINO.dino_vit_name=a/b"}, "train_scDINO.dino_vit_name: expected a folder name without '/'");
  bad({"meta.name_of_run=exp1/pbmc"}, "meta.name_of_run: expected a name without '/' with 3 channel combinations");
  bad({"scdino.channel_combination=3", "scdino.recipe=auto"},
      "scdino.channel_combination: expected an index below the 3 entries");
}

// Keys scDINO's file has that scdino reads and does not use: each says so
// once, with why.
TEST(RunConfig, IgnoredKeysAreNamedWithWhy) {
  auto c = ParseRunConfig(kScdinoStyle, "pipeline.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string all;
  for (const auto& w : c->warnings) all += w + "\n";
  for (const char* k : {"meta.images_are_RGB is ignored", "train_scDINO.num_gpus is ignored",
                        "train_scDINO.dist_url is ignored", "compute_cls_features.num_gpus is ignored",
                        "umap_eval.topometry_plots is ignored"}) {
    EXPECT_NE(all.find(k), std::string::npos) << k << " in:\n" << all;
  }
  EXPECT_NE(all.find("Slurm tasks"), std::string::npos) << all;
  // scDINO trains every combination of the list; a run of scdino trains
  // one, and says which, where, and how to train them all.
  EXPECT_NE(all.find("meta.selected_channel_combination_per_run: 2 of its 3 combinations are not trained by this "
                     "run: it trains entry 0 in /tmp/out/pbmc_run/vit_channel_AF647_BF_DAPI_CD3_PE "
                     "(scdino.channel_combination); train every one, each a run of its own, with sbatch --array=0-2 "
                     "deploy/slurm/train.sbatch FILE, or one with --set scdino.channel_combination=K"),
            std::string::npos)
      << all;
  EXPECT_EQ(c->warnings.size(), 6u) << all;
  auto chosen = ParseRunConfig(std::string(kScdinoStyle) + "scdino: {channel_combination: 2}\n", "pipeline.yaml");
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(chosen->warnings.size(), 5u) << "a run that names its combination is not told again";
  auto quiet = ParseRunConfig("meta: {dataset_dir: /d}\n", "min.yaml");
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->warnings.empty());
}

// docs/config.md's key reference is the schema's: regenerate it with
// `build/services/tools/scdino-config doc` when a key changes.
// `--set KEY=VALUE`: each setting as if the file gave it, scDINO's
// spellings included; the file's own spelling of a key gives way; what the
// run was given is its source_text, which parses back to the same config.
TEST(RunConfig, SettingsFromTheCommandLineAreMergedAsTheFilesKeys) {
  auto c = ParseRunConfig(kScdinoStyle, "scdino.yaml",
                          {"train_scDINO.epochs=50", "train_scDINO.hyperparameters.teacher_temp=0.05",
                           "meta.name_of_run=lr-sweep-1", "train_scDINO.hyperparameters.global_crops_scale=[0.3, 1.0]",
                           "scdino.threads=3", "train_scDINO.epochs=60"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->train.epochs, 60);  // a later setting wins
  EXPECT_DOUBLE_EQ(c->train.hyperparameters.teacher_temp, 0.05);  // over the file's techer_temp: 0.07
  EXPECT_EQ(c->meta.name_of_run, "lr-sweep-1");
  EXPECT_DOUBLE_EQ(c->train.hyperparameters.global_crops_scale[0], 0.3);
  EXPECT_EQ(c->scdino.threads, 3);  // a section the file does not have
  EXPECT_EQ(c->train.hyperparameters.warmup_epochs, 5);  // the rest as the file says
  EXPECT_TRUE(c->given_keys.count("train_scDINO.epochs"));  // given: a recipe keeps it
  EXPECT_TRUE(c->given_keys.count("scdino.threads"));
  // The record names the file and the settings, and is the merged document.
  EXPECT_EQ(c->source_text.rfind("# scdino.yaml --set train_scDINO.epochs=50 --set ", 0), 0u) << c->source_text;
  auto again = ParseRunConfig(c->source_text, "recorded");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->train.epochs, 60);
  EXPECT_DOUBLE_EQ(again->train.hyperparameters.teacher_temp, 0.05);
  EXPECT_EQ(again->meta.name_of_run, "lr-sweep-1");
  EXPECT_EQ(again->channels(), c->channels());
  EXPECT_EQ(again->meta.channel_dict, c->meta.channel_dict);
  // The alias itself may be given too.
  auto alias = ParseRunConfig(kScdinoStyle, "scdino.yaml", {"train_scDINO.hyperparameters.warump_epochs=2"});
  ASSERT_TRUE(alias.ok()) << alias.status().ToString();
  EXPECT_EQ(alias->train.hyperparameters.warmup_epochs, 2);
  // Without settings the text is the file's, untouched.
  EXPECT_EQ(ParseRunConfig(kScdinoStyle, "scdino.yaml")->source_text, kScdinoStyle);
}

TEST(RunConfig, ABadSettingIsRefusedNamingItTheKeyAndWhatWasExpected) {
  auto expect = [](const std::vector<std::string>& settings, const std::vector<std::string>& parts) {
    auto c = ParseRunConfig(kScdinoStyle, "scdino.yaml", settings);
    ASSERT_FALSE(c.ok()) << settings[0];
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    for (const auto& part : parts) EXPECT_NE(c.status().message().find(part), std::string::npos) << c.status().message();
    EXPECT_EQ(c.status().message().find("line "), std::string::npos) << c.status().message();  // no line of the file
  };
  expect({"train_scDINO.epochz=3"},
         {"scdino.yaml: --set train_scDINO.epochz=3: unknown key 'train_scDINO.epochz' (known keys of train_scDINO: "
          "dino_vit_name,",
          "epochs"});
  expect({"trian.epochs=3"}, {"--set trian.epochs=3: unknown key 'trian.epochs' (known keys: meta, train_scDINO"});
  expect({"train_scDINO.epochs"}, {"--set train_scDINO.epochs: expected KEY=VALUE"});
  expect({"train_scDINO.epochs=-4"}, {"--set train_scDINO.epochs=-4: train_scDINO.epochs: expected", "got '-4'"});
  expect({"train_scDINO.hyperparameters.lr=[1, 2"}, {"--set train_scDINO.hyperparameters.lr=[1, 2: the value is not YAML"});
  expect({"train_scDINO.hyperparameters"}, {"expected KEY=VALUE"});
  // Across keys: named with the settings that made it.
  expect({"scdino.recipe=manual", "train_scDINO.hyperparameters.warmup_epochs=40"},
         {"scdino.yaml --set scdino.recipe=manual --set train_scDINO.hyperparameters.warmup_epochs=40: "
          "train_scDINO.hyperparameters.warmup_epochs: expected at most train_scDINO.epochs (10), got 40"});
}

TEST(RunConfig, DocumentationMatchesTheSchema) {
  auto doc = ReadFile(std::string(scdino::testing::SourceDir()) + "/docs/config.md");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const std::string begin = "<!-- generated by scdino-config doc: begin -->\n";
  const std::string end = "<!-- generated by scdino-config doc: end -->";
  const auto b = doc->find(begin), e = doc->find(end);
  ASSERT_NE(b, std::string::npos) << "docs/config.md lacks the marker " << begin;
  ASSERT_NE(e, std::string::npos);
  const std::string documented = doc->substr(b + begin.size(), e - b - begin.size());
  const std::string schema = ConfigReference();
  if (documented != schema) {
    std::istringstream d(documented), g(schema);
    std::string dl, gl;
    int line = 0;
    while (std::getline(d, dl) && std::getline(g, gl)) {
      ++line;
      if (dl != gl) break;
    }
    FAIL() << "docs/config.md differs from the schema at generated line " << line << ":\n  doc:    " << dl
           << "\n  schema: " << gl << "\nregenerate with: build/services/tools/scdino-config doc";
  }
  // Every key is documented with a type and a meaning.
  for (const auto& k : ConfigKeys()) {
    EXPECT_FALSE(k.type.empty()) << k.path;
    EXPECT_TRUE(!k.meaning.empty() || !k.ignored.empty()) << k.path;
  }
}

struct BadCase {
  const char* yaml;
  std::vector<const char*> message_parts;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.yaml; }

class BadConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, StopsWithAnErrorNamingKeyValueAndExpectation) {
  auto c = ParseRunConfig(GetParam().yaml, "bad.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = c.status().message();
  EXPECT_EQ(m.rfind("bad.yaml: ", 0), 0u) << m;
  for (const char* part : GetParam().message_parts) EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfig,
    ::testing::Values(
        BadCase{"train_scDINO:\n  hyperparameters:\n    lrr: 0.1\n",
                {"line 3", "unknown key 'train_scDINO.hyperparameters.lrr'", "known keys of train_scDINO.hyperparameters", "lr"}},
        BadCase{"metadata: {}\n", {"unknown key 'metadata'", "meta, train_scDINO"}},
        BadCase{"train_scDINO:\n  epochs: ten\n", {"train_scDINO.epochs", "expected an integer >= 1", "got 'ten'"}},
        BadCase{"train_scDINO:\n  epochs: 2.5\n", {"train_scDINO.epochs", "got '2.5'"}},
        BadCase{"train_scDINO:\n  epochs: 0\n", {"train_scDINO.epochs", "got '0'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {lr: -1}\n", {"hyperparameters.lr", "a number > 0", "got '-1'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {momentum_teacher: 1.5}\n",
                {"momentum_teacher", "number in [0, 1]", "'1.5'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {drop_path_rate: 1}\n", {"drop_path_rate", "number in [0, 1)"}},
        BadCase{"train_scDINO:\n  hyperparameters: {norm_last_layer: maybe}\n",
                {"norm_last_layer", "true or false", "'maybe'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {arch: resnet50}\n",
                {"hyperparameters.arch", "vit_tiny | vit_small | vit_base", "'resnet50'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {optimizer: sgd}\n", {"optimizer", "adamw", "'sgd'"}},
        BadCase{"train_scDINO:\n  hyperparameters: {local_crops_scale: [0.5, 0.2]}\n",
                {"local_crops_scale", "min <= max", "a list"}},
        BadCase{"train_scDINO:\n  hyperparameters: {teacher_temp: 0.04, techer_temp: 0.05}\n",
                {"teacher_temp", "only once"}},
        BadCase{"train_scDINO:\n  epochs: 3\n  hyperparameters: {warmup_epochs: 5}\n",
                {"warmup_epochs", "at most train_scDINO.epochs (3)", "got 5"}},
        BadCase{"train_scDINO:\n  hyperparameters: {patch_size: 16, local_crops_size: 40}\n",
                {"local_crops_size", "multiple of patch_size (16)", "got 40"}},
        BadCase{"train_scDINO:\n  hyperparameters: {use_bn_in_head: true}\n", {"use_bn_in_head", "expected false"}},
        BadCase{"meta:\n  selected_channel_combination_per_run: [\"0g\"]\n",
                {"selected_channel_combination_per_run[0]", "0-9 and a-f for channels 10-15", "'0g'"}},
        BadCase{"meta:\n  channel_dict: {0: DAPI}\n  selected_channel_combination_per_run: [[DAPI, GFP]]\n",
                {"selected_channel_combination_per_run[0]", "meta.channel_dict (DAPI)", "'GFP'"}},
        BadCase{"meta:\n  selected_channel_combination_per_run: [\"00\"]\n", {"each channel at most once"}},
        BadCase{"meta:\n  selected_channel_combination_per_run: [\"01\", \"2\", \"10\"]\n",
                {"selected_channel_combination_per_run[2]", "other channels than entry 0 ('01'", "got '10'"}},
        BadCase{"meta:\n  selected_channel_combination_per_run: [\"7\"]\nscdino: {data_source: synthetic}\n",
                {"channel 7", "scdino.synthetic.channels = 5"}},
        BadCase{"scdino: {channel_combination: 3}\n", {"scdino.channel_combination", "below the 1 entries"}},
        BadCase{"scdino: {device: tpu}\n", {"scdino.device", "cpu | cuda", "'tpu'"}},
        BadCase{"scdino: {control: {tls_cert_file: c.pem}}\n", {"scdino.control", "tls_key_file", "go together"}},
        BadCase{"scdino: {control: {listen: localhost}}\n", {"scdino.control.listen", "host:port", "'localhost'"}},
        BadCase{"scdino: {metrics: {port: 70000}}\n", {"scdino.metrics.port", "70000"}},
        BadCase{"scdino: {precision: half}\n", {"scdino.precision", "auto | fp32 | bf16 | fp16", "'half'"}},
        BadCase{"meta: [1, 2\n", {"not valid YAML", "line"}},
        BadCase{"meta: {}\n", {"meta.dataset_dir", "data set folder"}},
        BadCase{"scdino: {data_source: csv}\n", {"scdino.index_csv", "path,label"}},
        BadCase{"scdino: {on_bad_image: ignore}\n", {"scdino.on_bad_image", "fail | skip", "'ignore'"}},
        BadCase{"scdino: {augmentation: {blur_p: [1, 0.1]}}\n", {"scdino.augmentation.blur_p", "3 probabilities"}},
        BadCase{"scdino: {augmentation: {solarize_p: 1.5}}\n", {"scdino.augmentation.solarize_p", "'1.5'"}},
        BadCase{"scdino: {augmentation: {blur_kernel: 4}}\n", {"blur_kernel", "odd", "got 4"}},
        BadCase{"", {"empty"}}));

}  // namespace
}  // namespace scdino::run
