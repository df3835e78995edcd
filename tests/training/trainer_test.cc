#include "training/trainer.h"
#include "trainer/resolve_plan.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/files.h"
#include "common/safetensors.h"
#include "support/cell_folders.h"
#include "support/other_user.h"
#include "support/test_support.h"
#include "data/image_io.h"
#include "data/synthetic.h"
#include "plan/source.h"
#include "training/checkpoint.h"

namespace scdino::training {
namespace {

// scdino-trainer as a user runs it, from the build tree (tests/training/CMakeLists.txt
// builds it before this suite).
const std::string& TrainerBin() {
  static const std::string bin = std::string(scdino::testing::BinaryDir()) + "/services/trainer/scdino-trainer";
  return bin;
}

using scdino::testing::ScratchDir;

// A model and data set small enough for many runs per second: 3 epochs of 4
// iterations, stochastic depth on (so its random stream is exercised).
std::string TinyConfig(const std::string& out_dir, const std::string& name, int64_t embed_dim = 32) {
  return R"(
meta:
  name_of_run: ")" + name + R"("
  output_dir: ")" + out_dir + R"("
  seed: 3
  selected_channel_combination_per_run: ["021"]
train_scDINO:
  epochs: 3
  saveckp_freq: 2
  batch_size_per_gpu: 4
  hyperparameters:
    arch: vit_tiny
    embed_dim: )" + std::to_string(embed_dim) + R"(
    depth: 2
    num_heads: 2
    patch_size: 8
    global_crops_size: 16
    local_crops_size: 8
    local_crops_number: 2
    out_dim: 64
    head_hidden_dim: 32
    head_bottleneck_dim: 16
    warmup_epochs: 1
    drop_path_rate: 0.2
    lr: 0.05
scdino:
  threads: 1
  data_source: synthetic
  synthetic: {classes: 2, per_class: 8, channels: 4, size: 16, seed: 1}
)";
}

run::RunConfig Parse(const std::string& yaml) {
  auto c = run::ParseRunConfig(yaml, "tiny.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return std::move(c).value();
}

StatusOr<TrainResult> RunOnce(const std::string& yaml, TrainerOptions opts = {}) {
  auto config = Parse(yaml);
  auto source = run::MakeSource(config, *run::IndexDataset(config), *run::Coordinator::Single(), torch::kCPU);
  if (!source.ok()) return source.status();
  Trainer trainer(scdino::trainer::TrainPlanOf(config), std::move(source).value(), opts);
  return trainer.Run();
}

// Replaces `from` (which must occur) in a config text.
std::string With(std::string yaml, const std::string& from, const std::string& to) {
  const auto at = yaml.find(from);
  if (at == std::string::npos) throw std::runtime_error("'" + from + "' is not in the config");
  return yaml.replace(at, from.size(), to);
}

TensorMap Tensors(const std::string& path) {
  auto f = ReadSafetensors(path);
  if (!f.ok()) throw std::runtime_error(f.status().ToString());
  return f->tensors;
}

void ExpectIdentical(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    EXPECT_TRUE(v.equal(b.at(k))) << k << " differs by " << (v.to(torch::kDouble) - b.at(k).to(torch::kDouble)).abs().max().item<double>();
  }
}

TEST(Trainer, WritesLogLinesAndCheckpoints) {
  ScratchDir dir;
  std::ostringstream log;
  TrainerOptions opts;
  opts.log = &log;
  auto r = RunOnce(TinyConfig(dir.path(), "run"), opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->completed);
  EXPECT_EQ(r->iteration, 12);
  const std::string run = dir.path() + "/run";
  EXPECT_TRUE(FileExists(run + "/checkpoint.safetensors"));
  EXPECT_TRUE(FileExists(run + "/checkpoint0001.safetensors"));  // saveckp_freq 2: after epochs 1 ...
  EXPECT_TRUE(FileExists(run + "/checkpoint0002.safetensors"));  // ... and the last
  EXPECT_FALSE(FileExists(run + "/checkpoint0000.safetensors"));
  std::ifstream in(run + "/log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("epoch").get<int>(), lines);
    for (const char* k : {"loss", "lr", "wd", "momentum", "teacher_temp", "images_per_s"}) EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_TRUE(std::isfinite(j.at("loss").get<double>()));
    ++lines;
  }
  EXPECT_EQ(lines, 3);
  // log.txt as DINO's main_dino.py writes it, line for line with log.jsonl.
  std::ifstream dino(run + "/log.txt"), ours(run + "/log.jsonl");
  std::string d, o;
  int dino_lines = 0;
  while (std::getline(dino, d) && std::getline(ours, o)) {
    const auto dj = nlohmann::json::parse(d), oj = nlohmann::json::parse(o);
    EXPECT_EQ(dj.size(), 4u) << d;
    EXPECT_EQ(dj.at("epoch"), oj.at("epoch"));
    EXPECT_EQ(dj.at("train_loss"), oj.at("loss"));
    EXPECT_EQ(dj.at("train_lr"), oj.at("lr"));
    EXPECT_EQ(dj.at("train_wd"), oj.at("wd"));
    ++dino_lines;
  }
  EXPECT_EQ(dino_lines, 3);
  const std::string logged = log.str();
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 3);
  // The checkpoint names its iteration and carries the config text.
  auto f = ReadSafetensors(run + "/checkpoint.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata.at("iteration"), "12");
  EXPECT_NE(f->metadata.at("config").find("name_of_run"), std::string::npos);
  EXPECT_TRUE(f->tensors.count("teacher.backbone.cls_token"));
  EXPECT_TRUE(f->tensors.count("optimizer.backbone.pos_embed.exp_avg"));
}

// Health every log_every iterations counted from each epoch's start, the
// verdict from the second epoch on, the epoch means in the log line.
TEST(Trainer, ReportsHealthPerLoggingIntervalAndJudgesCollapseFromTheSecondEpoch) {
  ScratchDir dir;
  std::ostringstream log, progress;
  std::vector<HealthReport> reports;
  TrainerOptions opts;
  opts.log = &log;
  opts.progress = &progress;
  opts.on_health = [&](const HealthReport& h) { reports.push_back(h); };
  auto yaml = With(TinyConfig(dir.path(), "health"), "  threads: 1", "  threads: 1\n  log_every: 3");
  auto r = RunOnce(yaml, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // 4 iterations per epoch: intervals end at 3 and 4 in each epoch.
  std::vector<int64_t> ends;
  for (const auto& h : reports) ends.push_back(h.iteration);
  EXPECT_EQ(ends, (std::vector<int64_t>{3, 4, 7, 8, 11, 12}));
  EXPECT_EQ(reports[0].steps, 3);
  EXPECT_EQ(reports[1].steps, 1);
  EXPECT_EQ(reports[1].collapse, "");  // first epoch: not judged
  EXPECT_FALSE(reports[2].collapse.empty());
  for (const auto& h : reports) {
    EXPECT_GT(h.health.teacher_entropy, 0.0);
    EXPECT_LE(h.health.teacher_entropy_ratio, 1.0 + 1e-6);
    EXPECT_GE(h.health.student_teacher_kl, 0.0);
    EXPECT_TRUE(std::isfinite(h.loss));
  }
  const std::string p = progress.str();
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 6) << p;
  EXPECT_NE(p.find("epoch 1/3 iteration 3/12"), std::string::npos) << p;
  EXPECT_NE(p.find("not judged in the first epoch"), std::string::npos) << p;
  std::ifstream in(dir.path() + "/health/log.jsonl");
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  for (const char* k : {"teacher_entropy", "teacher_entropy_ratio", "student_teacher_kl", "teacher_batch_entropy",
                        "center_norm", "backbone_cls_std"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_FALSE(j.contains("collapse"));
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line).at("collapse"), reports[3].collapse);
}

// Temperatures so high that teacher and student are uniform from the start:
// the uniform collapse DINO practitioners fear, made certain.
std::string Uniform(const std::string& yaml, const std::string& on_collapse) {
  auto y = With(yaml, "    lr: 0.05", "    lr: 0.05\n    teacher_temp: 1000\n    warmup_teacher_temp: 1000\n"
                                     "    student_temp: 1000");
  return With(y, "  threads: 1", "  threads: 1\n  log_every: 1\n  on_collapse: " + on_collapse);
}

TEST(Trainer, ACollapseIsReportedOrStopsTheRunNamingTheIterationAndTheSignal) {
  ScratchDir dir;
  std::ostringstream progress;
  std::vector<HealthReport> reports;
  TrainerOptions opts;
  opts.progress = &progress;
  opts.on_health = [&](const HealthReport& h) { reports.push_back(h); };
  auto warned = RunOnce(Uniform(TinyConfig(dir.path(), "warn"), "warn"), opts);
  ASSERT_TRUE(warned.ok()) << warned.status().ToString();
  EXPECT_TRUE(warned->completed);
  EXPECT_EQ(reports.back().collapse, "uniform_collapse");
  EXPECT_NE(progress.str().find("warning: uniform_collapse at iteration 5 (epoch 1)"), std::string::npos)
      << progress.str();

  auto stopped = RunOnce(Uniform(TinyConfig(dir.path(), "stop"), "stop"));
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), StatusCode::kDiverged);
  const std::string msg = stopped.status().message();
  EXPECT_NE(msg.find("uniform_collapse at iteration 5 (epoch 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("student-teacher KL"), std::string::npos) << msg;
  // What was trained is kept: the resume point of iteration 5.
  auto f = ReadSafetensors(dir.path() + "/stop/checkpoint.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata.at("iteration"), "5");
}

// A run trained under on_collapse: warn (collapsed, nothing judged healthy)
// and resumed with recover: no rollback replaces its checkpoint with
// untrained weights; it stops saying why and keeps the checkpoint.
TEST(Trainer, ARecoveryNeverReplacesTrainedWeightsWithUntrainedOnes) {
  ScratchDir dir;
  TrainerOptions first;
  first.stop_after_iterations = 8;
  auto warned = RunOnce(Uniform(TinyConfig(dir.path(), "run"), "warn"), first);
  ASSERT_TRUE(warned.ok()) << warned.status().ToString();
  const std::string latest = dir.path() + "/run/checkpoint.safetensors";
  ASSERT_FALSE(FileExists(dir.path() + "/run/last_healthy.safetensors"));
  const auto trained = Tensors(latest);

  auto recovered = RunOnce(Uniform(TinyConfig(dir.path(), "run"), "recover"));
  ASSERT_FALSE(recovered.ok());
  EXPECT_EQ(recovered.status().code(), StatusCode::kDiverged);
  const std::string msg = recovered.status().message();
  EXPECT_NE(msg.find("was trained without scdino.on_collapse: recover"), std::string::npos) << msg;
  EXPECT_NE(msg.find(latest + " (iteration 8)"), std::string::npos) << msg;
  auto kept = ReadSafetensors(latest);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->metadata.at("iteration"), "8");
  ExpectIdentical(kept->tensors, trained);
}

// The healthy point of a run resumed on another global batch (elastic
// resume, batch_per_gpu) is converted like a resume: 8 iterations of 4
// images are 2 epochs, which at 2 images a step are iteration 16.
TEST(Trainer, ARollbackAfterAnElasticResumeLandsAtTheEpochItSaved) {
  ScratchDir dir;
  TrainerOptions first;
  first.stop_after_iterations = 8;
  ASSERT_TRUE(RunOnce(TinyConfig(dir.path(), "run"), first).ok());
  std::filesystem::copy_file(dir.path() + "/run/checkpoint.safetensors", dir.path() + "/run/last_healthy.safetensors");
  auto yaml = With(Uniform(TinyConfig(dir.path(), "run"), "recover"), "batch_size_per_gpu: 4", "batch_size_per_gpu: 2");
  yaml = With(yaml, "  on_collapse: recover", "  on_collapse: recover\n  elastic_resume: batch_per_gpu");
  std::vector<RecoveryReport> recoveries;
  TrainerOptions opts;
  opts.on_recovery = [&](const RecoveryReport& r) { recoveries.push_back(r); };
  const auto ignored = RunOnce(yaml, opts);  // collapses again: the end does not matter here
  (void)ignored;
  ASSERT_FALSE(recoveries.empty());
  EXPECT_EQ(recoveries[0].from_iteration, 17);
  EXPECT_EQ(recoveries[0].to_iteration, 16);
  EXPECT_EQ(recoveries[0].checkpoint, dir.path() + "/run/last_healthy.safetensors");
}

class ExactResume : public ::testing::TestWithParam<int64_t> {};

TEST_P(ExactResume, StoppedAndResumedRunEndsWithTheSameWeights) {
  ScratchDir dir;
  auto full = RunOnce(TinyConfig(dir.path(), "full"));
  ASSERT_TRUE(full.ok()) << full.status().ToString();

  TrainerOptions stop;
  stop.stop_after_iterations = GetParam();
  auto first = RunOnce(TinyConfig(dir.path(), "resumed"), stop);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->completed);
  EXPECT_EQ(first->iteration, GetParam());
  auto second = RunOnce(TinyConfig(dir.path(), "resumed"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->completed);
  ExpectIdentical(Tensors(dir.path() + "/resumed/checkpoint.safetensors"),
                  Tensors(dir.path() + "/full/checkpoint.safetensors"));
}

// Mid-epoch (5 of 4-iteration epochs) and at an epoch boundary (8).
INSTANTIATE_TEST_SUITE_P(StopPoints, ExactResume, ::testing::Values(5, 8));

TEST(Trainer, FailedCheckpointWriteKeepsThePreviousOneAndSaysWhy) {
  ScratchDir dir;
  const std::string run = dir.path() + "/run";
  // The numbered checkpoint of epoch 1 cannot be written: its path is a
  // non-empty directory.
  std::filesystem::create_directories(run + "/checkpoint0001.safetensors/occupied");
  auto r = RunOnce(TinyConfig(dir.path(), "run"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_NE(r.status().message().find("checkpoint0001.safetensors"), std::string::npos) << r.status().message();
  auto latest = ReadSafetensors(run + "/checkpoint.safetensors");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->metadata.at("iteration"), "8");
}

// In a group only rank 0 writes; when its write fails every rank stops at
// once with an error, instead of the others waiting in the next collective
// until the timeout.
TEST(Trainer, FailedCheckpointWriteStopsEveryRankAtOnce) {
  ScratchDir dir;
  const std::string run = dir.path() + "/run";
  std::filesystem::create_directories(run + "/checkpoint0001.safetensors/occupied");
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions dist;
  dist.timeout = std::chrono::seconds(120);
  std::vector<StatusOr<TrainResult>> results(2, Status::Internal("not run"));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int64_t rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto config = Parse(TinyConfig(dir.path(), "run"));
      TrainerOptions opts;
      opts.coordinator = run::Coordinator::OverStore(store, rank, 2, dist.timeout);
      opts.collective = Collective::Create(store, rank, 2, dist, torch::kCPU);
      auto source = run::MakeSource(config, *run::IndexDataset(config), *opts.coordinator, torch::kCPU);
      if (!source.ok()) {
        results[rank] = source.status();
        return;
      }
      Trainer trainer(scdino::trainer::TrainPlanOf(config), std::move(source).value(), opts);
      results[rank] = trainer.Run();
    });
  }
  for (auto& t : ranks) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 60.0) << "a rank waited for the collective timeout";
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].status().message().find("checkpoint0001.safetensors"), std::string::npos)
      << results[0].status().message();
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].status().code(), StatusCode::kIOError);
  EXPECT_NE(results[1].status().message().find("rank 0 could not write checkpoint"), std::string::npos)
      << results[1].status().message();
  auto latest = ReadSafetensors(run + "/checkpoint.safetensors");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->metadata.at("world_size"), "2");
}

TEST(Trainer, RefusesACheckpointOfAnotherModel) {
  ScratchDir dir;
  ASSERT_TRUE(RunOnce(TinyConfig(dir.path(), "run")).ok());
  auto r = RunOnce(TinyConfig(dir.path(), "run", /*embed_dim=*/16));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("checkpoint.safetensors"), std::string::npos);
  EXPECT_NE(r.status().message().find("\"embed_dim\":32"), std::string::npos) << r.status().message();
}

// Training from TIFF files through the file loader: statistics and the class
// mapping are written into the run directory, and the statistics are reused.
TEST(Trainer, TrainsFromATiffDataSetThroughTheLoader) {
  ScratchDir dir;
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = 8;
  so.channels = 4;
  so.size = 16;
  for (int64_t k = 0; k < so.classes; ++k) {
    for (int64_t i = 0; i < so.per_class; ++i) {
      const std::string d = dir.path() + "/cells/type_" + std::string(1, static_cast<char>('b' - k));
      std::filesystem::create_directories(d);
      auto hwc = (data::SyntheticCell(so, k, i).permute({1, 2, 0}) * 255).round().to(torch::kUInt8);
      ASSERT_TRUE(data::WriteTiff(d + "/" + std::to_string(i) + ".tif", hwc).ok());
    }
  }
  std::string yaml = TinyConfig(dir.path(), "tiff");
  yaml.replace(yaml.find("  data_source: synthetic\n"), std::string("  data_source: synthetic\n").size(),
               "  data_source: folder\n");
  yaml.replace(yaml.find("  seed: 3\n"), std::string("  seed: 3\n").size(),
               "  seed: 3\n  dataset_dir: \"" + dir.path() + "/cells\"\n");
  auto r = RunOnce(yaml);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->completed);
  const std::string run = dir.path() + "/tiff";
  EXPECT_EQ(*ReadFile(run + "/classes.json"), "[\"type_a\",\"type_b\"]\n");
  auto stats = data::ReadStats(run + "/channel_stats.json");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->channels, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(stats->mean.size(), 3u);
  auto ckpt = ReadSafetensors(run + "/checkpoint.safetensors");
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->metadata.at("classes"), "[\"type_a\",\"type_b\"]");
  // A second run (fresh, not resumed) reads the same statistics file.
  std::filesystem::remove(run + "/checkpoint.safetensors");
  const std::string before = *ReadFile(run + "/channel_stats.json");
  ASSERT_TRUE(RunOnce(yaml).ok());
  EXPECT_EQ(*ReadFile(run + "/channel_stats.json"), before);
}

// Four steps of the trainer's own step (the loader's workers reading TIFF
// cells and cutting the crops, on side streams on a GPU) on the device
// under test give the losses and weights of the same four steps on the CPU
// at the same seed: a crop read before its stream finished, or a step
// skipped on the device, would not. On the CPU itself the two runs are
// identical. (scripts/gpu-first-contact.sh runs it with SCDINO_TEST_DEVICE=cuda.)
TEST(DeviceCheck, FourTrainerStepsOnTheDeviceMatchTheCpu) {
  const torch::Device device = scdino::testing::TestDevice();
  ScratchDir dir;
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = 8;
  so.channels = 4;
  so.size = 24;
  scdino::testing::WriteCellFolders(dir.path() + "/cells", so, "k");
  std::string yaml = TinyConfig(dir.path(), "cpu");
  yaml = With(yaml, "  data_source: synthetic\n", "  data_source: folder\n  precision: fp32\n");
  yaml = With(yaml, "  seed: 3\n", "  seed: 3\n  dataset_dir: \"" + dir.path() + "/cells\"\n");
  yaml = With(yaml, "  epochs: 3\n", "  epochs: 2\n");           // 2 epochs of 2 steps
  yaml = With(yaml, "batch_size_per_gpu: 4", "batch_size_per_gpu: 8");
  // No stochastic depth: its masks come from the device's generator (CUDA's
  // Philox on a GPU, as DINO's DropPath), so a GPU drops other paths than
  // the CPU at the same seed (on an H200: the first epoch's loss 7% apart).
  yaml = With(yaml, "    drop_path_rate: 0.2\n", "    drop_path_rate: 0.0\n");
  auto train = [&](const std::string& name, torch::Device on) {
    auto config = Parse(With(yaml, "name_of_run: \"cpu\"", "name_of_run: \"" + name + "\""));
    auto source = run::MakeSource(config, *run::IndexDataset(config), *run::Coordinator::Single(), on);
    EXPECT_TRUE(source.ok()) << source.status().ToString();
    TrainerOptions opts;
    Trainer trainer(scdino::trainer::TrainPlanOf(config, on), std::move(source).value(), opts);
    auto r = trainer.Run();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.ok() ? r->iteration : -1, 4);
  };
  train("cpu", torch::kCPU);
  train("device", device);
  std::vector<double> losses[2];
  for (int k = 0; k < 2; ++k) {
    std::ifstream in(dir.path() + (k ? "/device" : "/cpu") + "/log.jsonl");
    for (std::string line; std::getline(in, line);) losses[k].push_back(nlohmann::json::parse(line).at("loss"));
  }
  ASSERT_EQ(losses[0].size(), 2u);
  ASSERT_EQ(losses[1].size(), 2u);
  const auto cpu = Tensors(dir.path() + "/cpu/checkpoint.safetensors");
  const auto dev = Tensors(dir.path() + "/device/checkpoint.safetensors");
  std::cout << "device " << device << ": epoch losses " << losses[1][0] << ", " << losses[1][1] << " against the CPU's "
            << losses[0][0] << ", " << losses[0][1] << std::endl;
  if (device.is_cpu()) {
    EXPECT_EQ(losses[0], losses[1]);
    ExpectIdentical(cpu, dev);
    return;
  }
  // float32 on both: kernels sum in other orders (1e-6 of a value), and
  // four updates carry it on; a stream race or a skipped step moves the
  // loss by far more than 1%.
  for (int e = 0; e < 2; ++e) EXPECT_NEAR(losses[1][e], losses[0][e], 0.01 * std::abs(losses[0][e])) << "epoch " << e;
  // The teacher's biases start at zero, so after four updates they hold
  // AdamW's normalised steps alone (about 1e-5 here); where a gradient
  // element is mostly cancellation, the two devices' rounding flips its sign
  // and the element differs by a whole step (on an H200: 7e-7 of 1.3e-5).
  // So each tensor with values of its own (above 1e-3) agrees within 1% of
  // its largest value, and the teacher as a whole within 1e-4 of its norm.
  double diff2 = 0, norm2 = 0;
  for (const auto& [name, t] : cpu) {
    if (name.rfind("teacher.", 0) != 0) continue;
    ASSERT_TRUE(dev.count(name)) << name;
    const auto d = dev.at(name).to(torch::kDouble) - t.to(torch::kDouble);
    diff2 += d.square().sum().item<double>();
    norm2 += t.to(torch::kDouble).square().sum().item<double>();
    const double scale = t.abs().max().item<double>();
    if (scale > 1e-3) {
      EXPECT_LT(d.abs().max().item<double>(), 1e-2 * scale) << name;
    }
  }
  ASSERT_GT(norm2, 0.0);
  EXPECT_LT(std::sqrt(diff2 / norm2), 1e-4) << "the teacher's relative difference";
}

// An lr of 1e30 sends the weights to infinity after the first update, so
// the second step's loss is not finite.
TEST(Trainer, NonFiniteLossStopsNamingTheIterationOrIsSkipped) {
  ScratchDir dir;
  std::string yaml = TinyConfig(dir.path(), "nan");
  yaml.replace(yaml.find("lr: 0.05"), 8, "lr: 1.0e+30");
  yaml.replace(yaml.find("warmup_epochs: 1"), 16, "warmup_epochs: 0");
  auto stop = RunOnce(yaml);
  ASSERT_FALSE(stop.ok());
  EXPECT_EQ(stop.status().code(), StatusCode::kDiverged);
  EXPECT_NE(stop.status().message().find("at iteration 1 (epoch 0)"), std::string::npos) << stop.status().message();
  std::filesystem::remove_all(dir.path() + "/nan");
  const std::string key = "  data_source: synthetic";
  yaml.replace(yaml.find(key), key.size(), "  on_nonfinite_loss: skip\n" + key);
  auto skip = RunOnce(yaml);
  ASSERT_TRUE(skip.ok()) << skip.status().ToString();
  EXPECT_TRUE(skip->completed);
  EXPECT_EQ(skip->nonfinite_steps, 11);
  std::ifstream log(dir.path() + "/nan/log.jsonl");
  std::string first;
  std::getline(log, first);
  EXPECT_EQ(nlohmann::json::parse(first).at("nonfinite_steps").get<int>(), 3);
}


// Two ranks as threads over one store, rank 0 with a control channel.
// Ranks as threads over one store, each with its own config (a rank's own
// view of the file system: another output_dir).
std::vector<StatusOr<TrainResult>> RunRanks(const std::vector<std::string>& yamls, RunControl* control,
                                            const std::function<void(int64_t rank, Trainer&)>& before = {},
                                            const std::function<void(int64_t rank, TrainerOptions&)>& configure = {}) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions dist;
  dist.timeout = std::chrono::seconds(60);
  const auto world = static_cast<int64_t>(yamls.size());
  std::vector<StatusOr<TrainResult>> results(yamls.size(), Status::Internal("not run"));
  std::vector<std::thread> ranks;
  for (int64_t rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      auto config = Parse(yamls[static_cast<size_t>(rank)]);
      TrainerOptions opts;
      opts.coordinator = run::Coordinator::OverStore(store, rank, world, dist.timeout);
      opts.collective = Collective::Create(store, rank, world, dist, torch::kCPU);
      opts.control = rank == 0 ? control : nullptr;
      if (configure) configure(rank, opts);
      auto source = run::MakeSource(config, *run::IndexDataset(config), *opts.coordinator, torch::kCPU);
      if (!source.ok()) {
        results[rank] = source.status();
        return;
      }
      Trainer trainer(scdino::trainer::TrainPlanOf(config), std::move(source).value(), opts);
      if (before) before(rank, trainer);
      results[rank] = trainer.Run();
    });
  }
  for (auto& t : ranks) t.join();
  return results;
}

std::vector<StatusOr<TrainResult>> RunTwoRanks(const std::string& yaml, RunControl* control,
                                               const std::function<void(int64_t rank, Trainer&)>& before = {}) {
  return RunRanks({yaml, yaml}, control, before);
}

// Rank 0 decides the rollback target and its weights reach every rank:
// rank 1, whose view of the run directory (its own copy, as a node with a
// stale NFS cache sees it) has no last_healthy, trains the same weights.
TEST(Trainer, EveryRankRollsBackToRankZerosHealthyPoint) {
  ScratchDir dir;
  TrainerOptions first;
  first.stop_after_iterations = 2;
  ASSERT_TRUE(RunOnce(With(TinyConfig(dir.path(), "run"), "batch_size_per_gpu: 4", "batch_size_per_gpu: 8"), first).ok());
  namespace fs = std::filesystem;
  fs::copy_file(dir.path() + "/run/checkpoint.safetensors", dir.path() + "/run/last_healthy.safetensors");
  fs::create_directories(dir.path() + "/view1");
  fs::copy(dir.path() + "/run", dir.path() + "/view1/run", fs::copy_options::recursive);
  fs::remove(dir.path() + "/view1/run/last_healthy.safetensors");
  const auto yaml = Uniform(TinyConfig(dir.path(), "run"), "recover");
  const auto yaml1 = Uniform(TinyConfig(dir.path() + "/view1", "run"), "recover");
  std::vector<Trainer*> trainers(2, nullptr);
  std::vector<TensorMap> at_recovery(2);
  std::vector<int64_t> to(2, -1);
  auto results = RunRanks(
      {yaml, yaml1}, nullptr, [&](int64_t rank, Trainer& t) { trainers[rank] = &t; },
      [&](int64_t rank, TrainerOptions& o) {
        o.on_recovery = [&, rank](const RecoveryReport& r) {
          if (to[rank] >= 0) return;
          to[rank] = r.to_iteration;
          for (const auto& [k, v] : trainers[rank]->dino().StateDict()) at_recovery[rank][k] = v.detach().clone();
        };
      });
  ASSERT_GE(to[0], 0) << (results[0].ok() ? "no recovery" : results[0].status().ToString());
  EXPECT_EQ(to[1], to[0]);
  EXPECT_EQ(to[0], 2);
  ExpectIdentical(at_recovery[1], at_recovery[0]);
  ExpectIdentical(at_recovery[0], Tensors(dir.path() + "/run/last_healthy.safetensors"));
}

// Only rank 0 has the control API; every rank must still say the run was
// stopped through it (and so exit 4, which the batch script does not requeue).
// The request travels in step 0's exchange, whose values are read once step
// 1 is queued (the device never waits for the host): every rank stops after
// iteration 2, the same one.
TEST(Trainer, AnApiStopIsSeenByEveryRank) {
  ScratchDir dir;
  RunControl control;
  ASSERT_TRUE(control.Stop().ok());
  auto results = RunTwoRanks(With(TinyConfig(dir.path(), "api"), "epochs: 3", "epochs: 40"), &control);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << r << ": " << results[r].status().ToString();
    EXPECT_FALSE(results[r]->completed);
    EXPECT_EQ(results[r]->stopped_by, StopReason::kApi) << "rank " << r;
    EXPECT_EQ(results[r]->iteration, 2) << "rank " << r;
  }
  EXPECT_EQ(control.Snapshot().state, RunState::kStopped);
  // A signal on rank 1 alone stops both, as a signal.
  RunControl quiet;
  auto sig = RunTwoRanks(With(TinyConfig(dir.path(), "sig"), "epochs: 3", "epochs: 40"), &quiet,
                         [](int64_t rank, Trainer& t) {
                           if (rank == 1) t.RequestStop();
                         });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(sig[r].ok()) << sig[r].status().ToString();
    EXPECT_EQ(sig[r]->stopped_by, StopReason::kSignal) << "rank " << r;
  }
}

// Every teacher centering, with and without KoLeo, trains on two ranks
// through the trainer's own rank exchange: Sinkhorn-Knopp sums [K, 1]
// tensors over ranks once per iteration, besides the step's one exchange
// that carries the agreement (a 2-D sum through that exchange crashed every
// multi-rank run of configs/small-data.yaml).
TEST(Trainer, EveryTeacherCenteringAndKoLeoTrainOnTwoRanks) {
  for (const std::string centering : {"center", "sinkhorn_knopp"}) {
    for (const std::string koleo : {"0", "0.1"}) {
      SCOPED_TRACE(centering + ", KoLeo " + koleo);
      ScratchDir dir;
      const std::string key = "  data_source: synthetic";
      const auto yaml = With(TinyConfig(dir.path(), "run"), key,
                             "  teacher_centering: " + centering + "\n  koleo_loss_weight: " + koleo + "\n" + key);
      auto results = RunTwoRanks(yaml, nullptr);
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
        EXPECT_TRUE(results[r]->completed) << "rank " << r;
        EXPECT_EQ(results[r]->iteration, 6) << "rank " << r;  // 16 images, 2 x 4 a step, 3 epochs
        EXPECT_TRUE(std::isfinite(results[r]->last_loss)) << "rank " << r;
      }
      const auto state = Tensors(dir.path() + "/run/checkpoint.safetensors");
      const double center = state.at("dino_loss.center").abs().max().item<double>();
      if (centering == "sinkhorn_knopp") {
        EXPECT_EQ(center, 0.0) << "Sinkhorn-Knopp leaves the center alone";
      } else {
        EXPECT_GT(center, 0.0) << "the center did not move";
      }
    }
  }
}

// A source standing in for what a dead peer or a broken node does to the
// loop: an exception from the middle of an epoch.
class ThrowingSource : public data::MultiCropSource {
 public:
  explicit ThrowingSource(std::unique_ptr<data::MultiCropSource> inner, int64_t throw_at, double sleep_s = 0)
      : inner_(std::move(inner)), throw_at_(throw_at), sleep_s_(sleep_s) {}
  int64_t channels() const override { return inner_->channels(); }
  int64_t batches_per_epoch() const override { return inner_->batches_per_epoch(); }
  int64_t batch_size() const override { return inner_->batch_size(); }
  int64_t dataset_size() const override { return inner_->dataset_size(); }
  void StartEpoch(int64_t e, data::EpochStart b) override { inner_->StartEpoch(e, b); }
  data::EpochStart ResumeAt(int64_t p) const override { return inner_->ResumeAt(p); }
  std::optional<data::MultiCropBatch> Next() override {
    if (calls_++ == throw_at_) throw std::runtime_error("Connection reset by peer (rank 1)");
    if (sleep_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s_));
    return inner_->Next();
  }
  std::vector<std::string> class_names() const override { return inner_->class_names(); }

 private:
  std::unique_ptr<data::MultiCropSource> inner_;
  int64_t throw_at_, calls_ = 0;
  double sleep_s_;
};

TEST(Trainer, AnExceptionInTheLoopBecomesAFailedStateWithTheReason) {
  ScratchDir dir;
  auto config = Parse(TinyConfig(dir.path(), "dies"));
  auto inner = run::MakeSource(config, *run::IndexDataset(config), *run::Coordinator::Single(), torch::kCPU);
  ASSERT_TRUE(inner.ok());
  RunControl control;
  TrainerOptions opts;
  opts.control = &control;
  Trainer trainer(scdino::trainer::TrainPlanOf(config), std::make_unique<ThrowingSource>(std::move(inner).value(), 6),
                  opts);
  StatusOr<TrainResult> r = Status::Internal("not run");
  ASSERT_NO_THROW(r = trainer.Run());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Connection reset by peer"), std::string::npos) << r.status().message();
  const RunStatus st = control.Snapshot();
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_NE(st.error.find("Connection reset by peer"), std::string::npos) << st.error;
}

// The wait for a batch is the time spent in the loader's Next, counted once
// (the loader's queue wait used to be added on top of it): so it can never
// exceed the iteration it is part of. Large images on one reading thread
// make the loader the bottleneck.
TEST(Trainer, DataWaitIsCountedOnce) {
  ScratchDir dir;
  for (int k = 0; k < 2; ++k) {
    const std::string d = dir.path() + "/big/c" + std::to_string(k);
    std::filesystem::create_directories(d);
    for (int i = 0; i < 4; ++i) {
      auto img = torch::randint(0, 255, {1500, 1500, 4}, torch::kInt64).to(torch::kUInt8);
      ASSERT_TRUE(data::WriteTiff(d + "/" + std::to_string(i) + ".tif", img).ok());
    }
  }
  std::string yaml = With(TinyConfig(dir.path(), "slow"), "epochs: 3", "epochs: 1");
  yaml = With(yaml, "  data_source: synthetic\n", "  data_source: folder\n  prefetch_batches: 1\n");
  yaml = With(yaml, "  seed: 3\n", "  seed: 3\n  dataset_dir: \"" + dir.path() + "/big\"\n");
  yaml = With(yaml, "  batch_size_per_gpu: 4\n", "  batch_size_per_gpu: 4\n  num_workers: 1\n");
  std::vector<StepReport> steps;
  TrainerOptions opts;
  opts.on_step = [&](const StepReport& r) { steps.push_back(r); };
  auto r = RunOnce(yaml, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(steps.size(), 2u);
  double waited = 0;
  for (const auto& st : steps) {
    EXPECT_LE(st.data_wait_seconds, st.step_seconds) << "the wait was counted twice";
    EXPECT_GT(st.data_wait_seconds, 0.0);
    waited += st.data_wait_seconds;
  }
  std::ifstream log(dir.path() + "/slow/log.jsonl");
  std::string line;
  std::getline(log, line);
  EXPECT_NEAR(nlohmann::json::parse(line).at("data_wait_s").get<double>(), waited, 1e-9);
}

// Resume points every few milliseconds (scdino.checkpoint_every_minutes), so
// a crash loses little; numbered checkpoints beyond keep_checkpoints go.
TEST(Trainer, TimeBasedCheckpointsAndRetention) {
  ScratchDir dir;
  std::string yaml = With(TinyConfig(dir.path(), "time"), "saveckp_freq: 2", "saveckp_freq: 1");
  yaml = With(yaml, "  threads: 1", "  threads: 1\n  checkpoint_every_minutes: 0.0001\n  keep_checkpoints: 2");
  auto config = Parse(yaml);
  auto inner = run::MakeSource(config, *run::IndexDataset(config), *run::Coordinator::Single(), torch::kCPU);
  ASSERT_TRUE(inner.ok());
  std::vector<int64_t> at;
  TrainerOptions opts;
  opts.on_checkpoint = [&](const CheckpointReport& r) {
    if (r.path.find("checkpoint.safetensors") != std::string::npos) at.push_back(r.iteration);
  };
  Trainer trainer(scdino::trainer::TrainPlanOf(config),
                  std::make_unique<ThrowingSource>(std::move(inner).value(), -1, 0.02), opts);
  auto r = trainer.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t mid_epoch = 0;
  for (auto i : at) mid_epoch += i % 4 != 0;
  EXPECT_GE(mid_epoch, 3) << "resume points within epochs";
  const std::string run = dir.path() + "/time";
  EXPECT_FALSE(FileExists(run + "/checkpoint0000.safetensors")) << "retention keeps 2";
  EXPECT_TRUE(FileExists(run + "/checkpoint0001.safetensors"));
  EXPECT_TRUE(FileExists(run + "/checkpoint0002.safetensors"));
}

// A resume must agree with the checkpoint on what shapes the run: each
// difference is named; more epochs are allowed and said.
// A resume with a larger global batch (scdino.elastic_resume:
// batch_per_gpu) that finds less than one new batch left in its epoch ends
// that epoch at once, with its checkpoints: here the last epoch, so the run
// completes with its final checkpoint instead of leaving the stopped one.
TEST(Trainer, AnElasticResumeWithNoBatchLeftEndsTheEpoch) {
  ScratchDir dir;
  TrainerOptions stop;
  stop.stop_after_iterations = 11;  // 16 images, 4 a step: epoch 3, 12 of its images trained on
  auto first = RunOnce(TinyConfig(dir.path(), "tail"), stop);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->iteration, 11);
  auto resumed = RunOnce(With(With(TinyConfig(dir.path(), "tail"), "batch_size_per_gpu: 4", "batch_size_per_gpu: 8"),
                              "threads: 1", "threads: 1\n  elastic_resume: batch_per_gpu"));
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->completed);
  EXPECT_EQ(resumed->iteration, 6);  // 3 epochs of 2 steps of 8
  const std::string run = dir.path() + "/tail";
  auto meta = ReadSafetensorsMetadata(run + "/checkpoint.safetensors");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->at("iteration"), "6");
  EXPECT_EQ(meta->at("epoch_position"), "0");
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoint0002.safetensors"));
}

TEST(Trainer, ResumeChecksTheRunShape) {
  ScratchDir dir;
  ASSERT_TRUE(RunOnce(TinyConfig(dir.path(), "shape")).ok());
  auto batch = RunOnce(With(TinyConfig(dir.path(), "shape"), "batch_size_per_gpu: 4", "batch_size_per_gpu: 2"));
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(batch.status().message().find("global batch 4 (1 ranks x 4) then, 2 (1 ranks x 2) now"), std::string::npos)
      << batch.status().message();
  EXPECT_EQ(batch.status().message().find("iterations per epoch"), std::string::npos) << "named twice";
  auto channels = RunOnce(With(With(TinyConfig(dir.path(), "shape"), "[\"021\"]", "[\"012\"]"), "epochs: 3", "epochs: 2"));
  ASSERT_FALSE(channels.ok());
  EXPECT_NE(channels.status().message().find("channels [0,2,1] then, [0,1,2] now"), std::string::npos)
      << channels.status().message();
  EXPECT_NE(channels.status().message().find("3 epochs then, 2 now"), std::string::npos) << channels.status().message();
  auto longer = RunOnce(With(TinyConfig(dir.path(), "shape"), "epochs: 3", "epochs: 4"));
  ASSERT_TRUE(longer.ok()) << longer.status().ToString();
  EXPECT_EQ(longer->iteration, 16);
}

TEST(CheckResume, AnotherEpochOrderIsRefusedInsideAnEpochAndNotedAtItsEnd) {
  const RunShape saved{1, 4, 3, 10, 40, {0, 1}, "blocks of 8 in windows of 2 of packed set 0123"};
  RunShape now = saved;
  now.epoch_order = "global";
  auto inside = CheckResume(saved, now, 15, "ckpt", "global_batch");
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.status().message().find("each epoch's order was blocks of 8 in windows of 2 of packed set 0123, now "
                                           "global: inside an epoch the rest of it would repeat or skip images"),
            std::string::npos)
      << inside.status().message();
  auto at_end = CheckResume(saved, now, 20, "ckpt", "global_batch");
  ASSERT_TRUE(at_end.ok()) << at_end.status().ToString();
  ASSERT_EQ(at_end->size(), 1u);
  EXPECT_NE(at_end->front().find("each epoch's order is now global"), std::string::npos) << at_end->front();
  // A checkpoint that does not record its order (older versions): not checked.
  RunShape older = saved;
  older.epoch_order.clear();
  EXPECT_TRUE(CheckResume(older, now, 15, "ckpt", "global_batch").ok());
  auto round_trip = RunShape::FromJson(saved.ToJson(), "ckpt");
  ASSERT_TRUE(round_trip.ok());
  EXPECT_EQ(round_trip->epoch_order, saved.epoch_order);
}

// In a group-writable project directory another user could leave weights
// where a resume looks for them: a checkpoint that is not the user's is
// refused, naming its owner. As root with a checkpoint given to `nobody`,
// and as `nobody` (a child that drops root) with one that root owns.
TEST(Trainer, ResumeRefusesACheckpointOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another user (CI runs as root)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string yaml = TinyConfig(dir.path(), "owner");
  ASSERT_TRUE(RunOnce(yaml).ok());
  const std::string ckpt = dir.path() + "/owner/checkpoint.safetensors";
  ASSERT_TRUE(scdino::testing::GiveToOtherUser(ckpt));
  auto planted = RunOnce(yaml);
  ASSERT_FALSE(planted.ok());
  EXPECT_EQ(planted.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(planted.status().message().find(ckpt + ": the checkpoint to resume from belongs to nobody (uid 65534), "
                                            "not to you (root (uid 0))"),
            std::string::npos)
      << planted.status().message();
  // The run directory becomes nobody's, the checkpoint root's.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    ASSERT_TRUE(scdino::testing::GiveToOtherUser(e.path().string()));
  }
  ASSERT_TRUE(scdino::testing::GiveToOtherUser(dir.path()));
  ASSERT_EQ(::chown(ckpt.c_str(), 0, 0), 0);
  EXPECT_EXIT(
      {
        scdino::testing::BecomeOtherUserIfRoot();
        auto r = RunOnce(yaml);
        std::fprintf(stderr, "%s\n", r.ok() ? "resumed" : r.status().ToString().c_str());
        std::exit(!r.ok() && r.status().code() == StatusCode::kFailedPrecondition ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "the checkpoint to resume from belongs to root \\(uid 0\\), not to you");
}

// The binary as a user runs it: exit codes and messages.
// Starts the trainer with `args`, this process's environment plus `env`
// (NAME=value, replacing a variable of that name), stdout and stderr both
// into `out` (one open file). posix_spawn: nothing of this threaded test
// process runs between fork and exec.
pid_t SpawnTrainer(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& out) {
  std::vector<std::string> vars = env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('=') + 1);
    bool replaced = false;
    for (const auto& v : env) replaced = replaced || v.rfind(name, 0) == 0;
    if (!replaced) vars.push_back(var);
  }
  std::vector<std::string> argv_s{TrainerBin()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  for (auto& v : vars) envp.push_back(v.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, TrainerBin().c_str(), &files, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  EXPECT_EQ(rc, 0) << "posix_spawn " << TrainerBin() << ": " << std::strerror(rc);
  return rc == 0 ? pid : -1;
}

pid_t Spawn(const std::vector<std::string>& env, const std::string& config, const std::string& out) {
  return SpawnTrainer({"--config", config, "--threads", "1"}, env, out);
}

int RunTrainer(const std::string& args, const std::string& out_file) {
  const std::string cmd = TrainerBin() + " " + args + " > " + out_file + " 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(TrainerBinary, ExitCodesAndMessages) {
  ScratchDir dir;
  const std::string cfg = dir.file("config.yaml");
  const std::string out = dir.file("out.txt");
  std::ofstream(cfg) << TinyConfig(dir.path(), "bin");
  EXPECT_EQ(RunTrainer("--config " + cfg + " --stop-after-iterations 6", out), 3);
  EXPECT_NE(ReadFile(out)->find("stopped after iteration 6"), std::string::npos) << *ReadFile(out);
  EXPECT_EQ(RunTrainer("--config " + cfg, out), 0);
  EXPECT_NE(ReadFile(out)->find("done, 12 iterations"), std::string::npos) << *ReadFile(out);

  const std::string bad = dir.file("bad.yaml");
  std::ofstream(bad) << "train_scDINO:\n  batch_size_per_gpu: -4\n";
  EXPECT_EQ(RunTrainer("--config " + bad, out), 2);
  EXPECT_NE(ReadFile(out)->find(bad + ": line 2: train_scDINO.batch_size_per_gpu"), std::string::npos) << *ReadFile(out);
  EXPECT_EQ(RunTrainer("--config " + dir.file("missing.yaml"), out), 2);
  EXPECT_NE(ReadFile(out)->find("missing.yaml"), std::string::npos);
  EXPECT_EQ(RunTrainer("--threads many --config " + cfg, out), 2);
  EXPECT_NE(ReadFile(out)->find("--threads"), std::string::npos) << *ReadFile(out);
  EXPECT_EQ(RunTrainer("--frobnicate", out), 2);
  EXPECT_NE(ReadFile(out)->find("frobnicate"), std::string::npos) << *ReadFile(out);
  EXPECT_EQ(RunTrainer("--help", out), 0);
  for (const char* f : {"--config", "--threads", "--stop-after-iterations", "--no-resume", "--version"}) {
    EXPECT_NE(ReadFile(out)->find(f), std::string::npos) << f << " in " << *ReadFile(out);
  }
  EXPECT_EQ(RunTrainer("--version", out), 0);
  EXPECT_NE(ReadFile(out)->find(SCDINO_VERSION), std::string::npos) << *ReadFile(out);
  // A channel selection the data set cannot satisfy is bad input (2), not a failure.
  const std::string cells = dir.path() + "/cells/a";
  std::filesystem::create_directories(cells);
  ASSERT_TRUE(data::WriteTiff(cells + "/0.tif", torch::zeros({16, 16, 2}, torch::kUInt8)).ok());
  ASSERT_TRUE(data::WriteTiff(cells + "/1.tif", torch::ones({16, 16, 2}, torch::kUInt8)).ok());
  std::string files = With(TinyConfig(dir.path(), "files"), "  data_source: synthetic\n", "  data_source: folder\n");
  files = With(files, "  seed: 3\n", "  seed: 3\n  dataset_dir: \"" + dir.path() + "/cells\"\n");
  std::ofstream(dir.file("files.yaml")) << files;
  EXPECT_EQ(RunTrainer("--config " + dir.file("files.yaml"), out), 2) << *ReadFile(out);
  EXPECT_NE(ReadFile(out)->find("selects channel 2 (2), but the images have 2 channel(s)"), std::string::npos)
      << *ReadFile(out);
}

// The trainer computes on the threads it was given, with the loader's
// reading threads and the channel statistics' running beside it: every
// epoch's line says the step's thread saw 3 (it saw 1, whatever --threads
// said, when those threads lowered the process's count).
TEST(TrainerBinary, ComputesOnTheThreadsItWasGiven) {
  ScratchDir dir;
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = 8;
  so.channels = 4;
  so.size = 16;
  scdino::testing::WriteCellFolders(dir.path() + "/cells", so, "k");
  std::string yaml = With(TinyConfig(dir.path(), "threads"), "  data_source: synthetic\n", "  data_source: folder\n");
  yaml = With(yaml, "  seed: 3\n", "  seed: 3\n  dataset_dir: \"" + dir.path() + "/cells\"\n");
  std::ofstream(dir.file("threads.yaml")) << yaml;
  const std::string out = dir.file("out.txt");
  ASSERT_EQ(RunTrainer("--config " + dir.file("threads.yaml") + " --threads 3", out), 0) << *ReadFile(out);
  std::ifstream in(dir.path() + "/threads/log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(nlohmann::json::parse(line).value("cpu_threads", 0), 3) << line;
  }
  EXPECT_EQ(lines, 3);
}

// A batch and crops that do not fit the device's memory end the run with
// exit code 2 and what to lower: the batch, the crops, the peak memory
// (here the CPU's allocator, held below the step's need by an address
// space limit; a GPU's says "CUDA out of memory" the same way).
TEST(TrainerBinary, OutOfMemoryExitsTwoNamingTheBatchTheCropsAndThePeak) {
  if (scdino::testing::kSanitizedAllocator) GTEST_SKIP() << "a sanitizer's shadow memory needs more address space";
  ScratchDir dir;
  std::string yaml = With(TinyConfig(dir.path(), "oom"), "    global_crops_size: 16\n", "    global_crops_size: 2048\n");
  yaml = With(yaml, "    patch_size: 8\n", "    patch_size: 16\n");
  yaml = With(yaml, "    local_crops_size: 8\n", "    local_crops_size: 16\n");
  std::ofstream(dir.file("oom.yaml")) << yaml;
  const std::string out = dir.file("oom.txt");
  // 10 GB of address space: room for LibTorch (a CUDA build's libraries
  // too), not for the attention over 16,385 tokens (13 GB).
  const std::string cmd = "ulimit -v 10000000; exec " + TrainerBin() + " --config " +
                          dir.file("oom.yaml") + " > " + out + " 2>&1";
  const int rc = std::system(("bash -c '" + cmd + "'").c_str());
  ASSERT_TRUE(WIFEXITED(rc)) << *ReadFile(out);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << *ReadFile(out);
  const std::string said = *ReadFile(out);
  for (const char* want : {"out of memory on cpu at iteration 0", "train_scDINO.batch_size_per_gpu 4",
                           "2 global crops of 2048 px and 2 local crops of 16 px", "peak resident memory",
                           "Lower train_scDINO.batch_size_per_gpu"}) {
    EXPECT_NE(said.find(want), std::string::npos) << want << " in " << said;
  }
}

// Preemption as Slurm does it (--signal=USR1@120, or SIGTERM at the time
// limit): the trainer finishes its step, checkpoints and exits with 75; run
// again, it resumes and ends with the weights of an uninterrupted run.
TEST(TrainerBinary, SignalStopsWithACheckpointAndResumesExactly) {
  ScratchDir dir;
  std::string yaml = TinyConfig(dir.path(), "sig");
  yaml.replace(yaml.find("epochs: 3"), 9, "epochs: 40");
  std::ofstream(dir.file("sig.yaml")) << yaml;
  std::string full_yaml = TinyConfig(dir.path(), "full");
  full_yaml.replace(full_yaml.find("epochs: 3"), 9, "epochs: 40");
  std::ofstream(dir.file("full.yaml")) << full_yaml;
  for (int sig : {SIGUSR1, SIGTERM}) {
    std::filesystem::remove_all(dir.path() + "/sig");
    const pid_t pid = SpawnTrainer({"--config", dir.file("sig.yaml")}, {}, dir.file("sig.err"));
    ASSERT_GT(pid, 0);
    // Signal once the first epoch is logged.
    const std::string log = dir.path() + "/sig/log.jsonl";
    for (int i = 0; i < 600 && !(FileExists(log) && !ReadFile(log)->empty()); ++i) usleep(50 * 1000);
    ASSERT_TRUE(FileExists(log)) << *ReadFile(dir.file("sig.err"));
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "; its stderr:\n"
                                   << *ReadFile(dir.file("sig.err"));
    EXPECT_EQ(WEXITSTATUS(status), 75) << *ReadFile(dir.file("sig.err"));
    auto ckpt = ReadSafetensors(dir.path() + "/sig/checkpoint.safetensors");
    ASSERT_TRUE(ckpt.ok());
    const int64_t stopped_at = std::stoll(ckpt->metadata.at("iteration"));
    EXPECT_GT(stopped_at, 0);
    EXPECT_LT(stopped_at, 160) << "the run was stopped before its end";
    EXPECT_NE(ReadFile(dir.file("sig.err"))->find("finishing the current step"), std::string::npos);
  }
  const std::string out = dir.file("out.txt");
  EXPECT_EQ(RunTrainer("--config " + dir.file("sig.yaml"), out), 0) << *ReadFile(out);
  EXPECT_EQ(RunTrainer("--config " + dir.file("full.yaml"), out), 0);
  ExpectIdentical(Tensors(dir.path() + "/sig/checkpoint.safetensors"),
                  Tensors(dir.path() + "/full/checkpoint.safetensors"));
}

int Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Two trainer processes (torchrun-style variables, Gloo over loopback), each
// with half of the global batch, end where one process with the whole batch
// ends: same data, schedules, center or Sinkhorn-Knopp targets, and teacher,
// up to float32 summation order.
void ExpectTwoProcessesMatchOne(const std::string& centering) {
  ScratchDir dir;
  auto config = [&](const std::string& name, int batch) {
    std::string y = With(TinyConfig(dir.path(), name), "batch_size_per_gpu: 4", "batch_size_per_gpu: " + std::to_string(batch));
    y = With(y, "drop_path_rate: 0.2", "drop_path_rate: 0.0");
    y = With(y, "  threads: 1", "  threads: 1\n  teacher_centering: " + centering);
    std::ofstream(dir.file(name + ".yaml")) << y;
    return dir.file(name + ".yaml");
  };
  const std::string one = config("one", 4), two = config("two", 2);
  const std::string port = std::to_string(21000 + getpid() % 11000);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(Spawn({"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                         two, dir.file("rank" + std::to_string(r) + ".out")));
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Reap(pids[r]), 0) << *ReadFile(dir.file("rank" + std::to_string(r) + ".out"));
  }
  EXPECT_EQ(Reap(Spawn({}, one, dir.file("one.out"))), 0) << *ReadFile(dir.file("one.out"));
  EXPECT_NE(ReadFile(dir.file("rank1.out"))->find("rank 1 of 2"), std::string::npos);
  auto a = ReadSafetensors(dir.path() + "/two/checkpoint.safetensors");
  auto b = ReadSafetensors(dir.path() + "/one/checkpoint.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->metadata.at("world_size"), "2");
  EXPECT_EQ(a->metadata.at("iteration"), b->metadata.at("iteration"));
  for (const auto& [name, t] : b->tensors) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    // See distributed_test.cc for the tolerance on the key bias.
    const double tol = name.find("attn.qkv.bias") != std::string::npos ? 0.1 : 2e-4;
    EXPECT_TRUE(scdino::testing::AllClose(a->tensors.at(name), t, 0, tol)) << name;
  }
  // The log is written once, by rank 0, with the loss over both ranks.
  std::ifstream log(dir.path() + "/two/log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) ++lines;
  EXPECT_EQ(lines, 3);
}

TEST(TrainerBinary, TwoRanksMatchOneProcessWithTheWholeBatch) { ExpectTwoProcessesMatchOne("center"); }

TEST(TrainerBinary, TwoRanksMatchOneProcessWithSinkhornKnoppTargets) { ExpectTwoProcessesMatchOne("sinkhorn_knopp"); }

// A rank that dies mid-run: the survivor stops within the configured
// timeout with an error, instead of hanging.
TEST(TrainerBinary, ARankThatDiesStopsTheOthersWithinTheTimeout) {
  ScratchDir dir;
  std::string y = TinyConfig(dir.path(), "dies");
  y.replace(y.find("epochs: 3"), 9, "epochs: 200");
  y.replace(y.find("  threads: 1"), 12, "  threads: 1\n  distributed_timeout_s: 10");
  std::ofstream(dir.file("dies.yaml")) << y;
  const std::string port = std::to_string(21000 + (getpid() + 7) % 11000);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(Spawn({"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                         dir.file("dies.yaml"), dir.file("rank" + std::to_string(r) + ".out")));
  }
  const std::string log = dir.path() + "/dies/log.jsonl";
  for (int i = 0; i < 600 && !(FileExists(log) && !ReadFile(log)->empty()); ++i) usleep(50 * 1000);
  ASSERT_TRUE(FileExists(log)) << *ReadFile(dir.file("rank0.out"));
  kill(pids[1], SIGKILL);
  Reap(pids[1]);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = Reap(pids[0]);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 9: a peer lost, requeued by the batch scripts to resume without it.
  EXPECT_EQ(rc, 9) << *ReadFile(dir.file("rank0.out"));
  // Bounded by distributed_timeout_s (10 s) and the roll call (3 s), not by
  // Gloo's default (30 min), and the survivor names the rank and node it lost.
  EXPECT_LT(secs, 25.0);
  EXPECT_NE(ReadFile(dir.file("rank0.out"))->find("rank 0 of 2: lost contact with " + ThisHostName() + " (rank 1)"),
            std::string::npos)
      << *ReadFile(dir.file("rank0.out"));
  EXPECT_NE(ReadFile(dir.file("rank0.out"))->find("another rank has probably died or hangs"), std::string::npos)
      << *ReadFile(dir.file("rank0.out"));
  // The last checkpoint survives.
  EXPECT_TRUE(ReadSafetensors(dir.path() + "/dies/checkpoint.safetensors").ok());
}

}  // namespace
}  // namespace scdino::training
