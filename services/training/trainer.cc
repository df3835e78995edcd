#include "training/trainer.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "common/files.h"
#include "data/in_memory_source.h"
#include "data/loader.h"
#include "data/stats.h"
#include "data/sampler.h"
#include "data/synthetic.h"
#include "model/schedules.h"
#include "training/checkpoint.h"
#include "training/device_memory.h"

namespace scdino::training {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

char* Format(char* buf, size_t n, const char* fmt, int64_t v) {
  std::snprintf(buf, n, fmt, static_cast<long long>(v));
  return buf;
}
}  // namespace

int ConfigureThreads(int64_t threads) {
  int n = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  // Matrix products run on the BLAS library's own thread pool, which
  // set_num_threads does not reach; OpenBLAS exposes a setter.
  using SetThreads = void (*)(int);
  if (auto* set_blas = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(n);
  return n;
}

StatusOr<std::unique_ptr<data::MultiCropSource>> MakeSource(const TrainConfig& c, int64_t rank, int64_t world,
                                                            torch::Device device) {
  data::MultiCropOptions crops = c.multicrop_options();
  data::SamplerOptions sampler;
  sampler.batch_size = c.train.batch_size_per_gpu;
  sampler.rank = rank;
  sampler.world_size = world;
  sampler.seed = static_cast<uint64_t>(c.meta.seed);
  if (c.scdino.data_source == "synthetic") {
    auto set = data::MakeSyntheticSet(c.scdino.synthetic);
    auto images = set.images.index_select(1, torch::tensor(c.channels(), torch::kInt64)).contiguous();
    // Per-channel statistics of the in-memory images for normalisation.
    auto mean = images.mean({0, 2, 3}, false, torch::kFloat64);
    auto std = images.to(torch::kFloat64).std({0, 2, 3}).clamp_min(1e-6);
    for (int64_t i = 0; i < mean.size(0); ++i) {
      crops.mean.push_back(mean[i].item<double>());
      crops.std.push_back(std[i].item<double>());
    }
    std::unique_ptr<data::MultiCropSource> src =
        std::make_unique<data::InMemorySource>(images, set.labels, sampler, crops, device, set.class_names);
    return src;
  }
  // Files: index, statistics (read or computed), then the loader.
  auto dataset = IndexDataset(c);
  if (!dataset.ok()) return dataset.status();
  for (const auto& why : dataset->skipped) std::cerr << "scdino: skipping " << why << "\n";
  const data::ImagePrep prep = c.image_prep();
  auto stats = LoadOrComputeStats(c, *dataset, prep);
  if (!stats.ok()) return stats.status();
  crops.mean = stats->mean;
  crops.std = stats->std;
  if (auto s = MakeDirs(c.run_dir()); !s.ok()) return s;
  nlohmann::json classes = dataset->classes;
  if (auto s = WriteFileAtomic(c.run_dir() + "/classes.json", classes.dump() + "\n"); !s.ok()) return s;
  data::LoaderOptions lo;
  lo.prep = prep;
  lo.sampler = sampler;
  lo.crops = crops;
  lo.threads = static_cast<int>(std::max<int64_t>(1, c.train.num_workers));
  lo.prefetch = static_cast<int>(c.scdino.prefetch_batches);
  lo.cache = c.scdino.cache_images;
  lo.on_bad_image = c.bad_image_policy();
  try {
    std::unique_ptr<data::MultiCropSource> src = std::make_unique<data::FileLoader>(std::move(dataset).value(), lo, device);
    return src;
  } catch (const StatusError& e) {
    return e.status();
  }
}

StatusOr<data::Dataset> IndexDataset(const TrainConfig& c) {
  if (c.scdino.data_source == "csv") return data::IndexCsv(c.scdino.index_csv);
  data::IndexOptions io;
  io.folder_depth_for_labels = c.meta.folder_depth_for_labels;
  io.on_bad_image = c.bad_image_policy();
  return data::IndexFolder(c.meta.dataset_dir, io);
}

StatusOr<data::ChannelStats> LoadOrComputeStats(const TrainConfig& c, const data::Dataset& d,
                                                const data::ImagePrep& prep) {
  const std::string path = c.stats_path();
  if (FileExists(path)) {
    auto s = data::ReadStats(path);
    if (!s.ok()) return s.status();
    if (s->channels != prep.channels) {
      return Status::FailedPrecondition(path + ": statistics are for other channels than this run's; delete it to "
                                        "recompute, or point scdino.stats_file elsewhere");
    }
    return s;
  }
  data::StatsOptions so;
  so.fraction = c.train.fraction_for_mean_std_calc;
  so.seed = static_cast<uint64_t>(c.meta.seed);
  so.threads = static_cast<int>(std::max<int64_t>(1, c.train.num_workers));
  so.on_bad_image = c.bad_image_policy();
  auto s = data::ComputeChannelStats(d, prep, so);
  if (!s.ok()) return s.status();
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    if (auto st = MakeDirs(dir.string()); !st.ok()) return st;
  }
  if (auto st = data::WriteStats(path, *s); !st.ok()) return st;
  return s;
}

Trainer::Trainer(TrainConfig config, std::unique_ptr<data::MultiCropSource> source, TrainerOptions options)
    : config_(std::move(config)),
      source_(std::move(source)),
      options_(options),
      device_(options_.device ? *options_.device
                              : torch::Device(config_.scdino.device == "cuda" ? torch::kCUDA : torch::kCPU)) {
  torch::manual_seed(static_cast<uint64_t>(config_.meta.seed));
  dino_ = std::make_unique<model::Dino>(config_.dino_options(), device_);
  TORCH_CHECK(source_->channels() == dino_->options().vit.in_chans(), "the data source gives ", source_->channels(),
              " channels, the model expects ", dino_->options().vit.in_chans());
  if (auto c = options_.collective) {
    dino_->loss->set_all_reduce([c](torch::Tensor& t) { c->AllReduceSum(t); }, c->world_size());
    reducer_ = std::make_unique<GradientAllReducer>(c, dino_->trainable(), options_.bucket_bytes);
  }
}

std::vector<double> Trainer::SumOverRanks(std::vector<double> values) {
  if (!options_.collective) return values;
  auto t = torch::tensor(values, torch::kFloat64);
  options_.collective->AllReduceSum(t);
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  return values;
}

Status Trainer::WriteCheckpoint(const std::string& path, int64_t iteration, int64_t niter) {
  const auto t0 = Clock::now();
  Status written = Status::Ok();
  const bool writer = !options_.collective || options_.collective->rank() == 0;
  if (writer) {
    CheckpointInfo info;
    info.world_size = options_.collective ? options_.collective->world_size() : 1;
    info.iteration = iteration;
    info.epoch = iteration / niter;
    info.config_text = config_.source_text;
    info.classes = source_->class_names();
    written = SaveCheckpoint(path, *dino_, info);
  }
  // Every rank learns whether rank 0's write worked, so that a failed write
  // stops all of them now rather than leaving the others in the next
  // collective until the timeout.
  if (options_.collective && SumOverRanks({written.ok() ? 0.0 : 1.0})[0] > 0 && written.ok()) {
    return Status::IOError("rank 0 could not write checkpoint " + path + " (its log says why); stopping");
  }
  if (written.ok() && writer) {
    CheckpointReport report;
    report.path = std::filesystem::absolute(path).string();
    report.seconds = Seconds(t0, Clock::now());
    report.unix_ms = UnixMs();
    report.iteration = iteration;
    if (options_.on_checkpoint) options_.on_checkpoint(report);
    Publish([&](RunStatus& st) {
      st.last_checkpoint = report.path;
      st.last_checkpoint_unix_ms = report.unix_ms;
    });
  }
  return written;
}

void Trainer::Publish(const std::function<void(RunStatus&)>& change) {
  if (options_.control) options_.control->Update(change);
}

StatusOr<TrainResult> Trainer::Run() {
  auto result = RunLoop();
  Publish([&](RunStatus& st) {
    if (!result.ok()) {
      st.state = RunState::kFailed;
      st.error = result.status().ToString();
    } else {
      st.state = result->completed ? RunState::kCompleted : RunState::kStopped;
    }
  });
  if (options_.control && !result.ok()) options_.control->CompleteCheckpoints(result.status(), 0);
  return result;
}

StatusOr<TrainResult> Trainer::RunLoop() {
  const std::string run_dir = config_.run_dir();
  if (auto s = MakeDirs(run_dir); !s.ok()) return s;
  const std::string latest = run_dir + "/checkpoint.safetensors";
  const int64_t niter = source_->batches_per_epoch();
  const int64_t epochs = config_.train.epochs;
  const int64_t total = epochs * niter;
  const int64_t world = options_.collective ? options_.collective->world_size() : 1;
  model::Schedules sched;
  try {
    sched = model::MakeSchedules(config_.schedule_options(niter, world));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(config_.source_path + ": " + e.what());
  }
  const auto& temps = dino_->loss->teacher_temp_schedule();

  TrainResult result;
  int64_t it = 0;
  if (options_.resume && FileExists(latest)) {
    auto info = LoadCheckpoint(latest, *dino_);
    if (!info.ok()) return info.status();
    it = info->iteration;
    result.checkpoint = latest;
  }
  const bool writer = !options_.collective || options_.collective->rank() == 0;
  std::ofstream log_file;
  if (writer) {
    log_file.open(run_dir + "/log.jsonl", std::ios::app);
    if (!log_file) return Status::IOError("cannot append to " + run_dir + "/log.jsonl");
  }
  model::StepHooks hooks;
  if (reducer_) {
    hooks.after_backward = [this] { reducer_->Finish(); };
    hooks.all_finite = [this](bool finite) { return SumOverRanks({finite ? 0.0 : 1.0})[0] == 0.0; };
  }
  Publish([&](RunStatus& st) {
    st.state = RunState::kRunning;
    st.epochs = epochs;
    st.iterations = total;
    st.iteration = it;
    st.epoch = it / niter;
    st.items_total = total * source_->batch_size() * world;
    st.items_done = it * source_->batch_size() * world;
  });

  // Requests of rank 0's control channel and this process's signals, agreed
  // over ranks: {stop, pause, checkpoint}.
  auto decide = [&]() {
    const RunRequests r = options_.control ? options_.control->Requests() : RunRequests{};
    std::vector<double> v{(stop_.load() || r.stop) ? 1.0 : 0.0, r.pause ? 1.0 : 0.0, r.checkpoint ? 1.0 : 0.0};
    if (options_.collective) v = SumOverRanks(v);
    return RunRequests{v[1] > 0, v[0] > 0, v[2] > 0};
  };
  // A checkpoint asked for through the API: a kept snapshot named by its
  // iteration, and the resume point.
  auto checkpoint_now = [&]() -> Status {
    Publish([](RunStatus& st) { st.state = RunState::kCheckpointing; });
    char name[64];
    const std::string snapshot = run_dir + "/" + Format(name, sizeof name, "checkpoint_it%08lld.safetensors", it);
    Status s = WriteCheckpoint(snapshot, it, niter);
    if (s.ok()) s = WriteCheckpoint(latest, it, niter);
    if (options_.control) {
      options_.control->CompleteCheckpoints(
          s.ok() ? StatusOr<std::string>(std::filesystem::absolute(snapshot).string()) : StatusOr<std::string>(s), it);
    }
    if (s.ok()) result.checkpoint = latest;
    return s;
  };

  double loss_sum = 0.0;
  int64_t loss_n = 0;
  double data_wait = 0.0, allreduce_wait = 0.0;
  double rate = 0.0;  // iterations/s, smoothed
  int64_t nonfinite = 0, images = 0;
  bool epoch_started = false;
  auto epoch_start = Clock::now();
  const int64_t stop_at = options_.stop_after_iterations;
  while (it < total) {
    const int64_t epoch = it / niter;
    if (!epoch_started) {
      source_->StartEpoch(epoch, it % niter);
      epoch_started = true;
    }
    const auto t0 = Clock::now();
    std::optional<data::MultiCropBatch> b;
    try {
      b = source_->Next();
    } catch (const StatusError& e) {
      return e.status();
    }
    StepReport report;
    report.data_wait_seconds = Seconds(t0, Clock::now()) + source_->TakeWaitSeconds();
    data_wait += report.data_wait_seconds;
    if (!b) return Status::Internal("data source ended epoch " + std::to_string(epoch) + " after " +
                                    std::to_string(it % niter) + " of " + std::to_string(niter) + " batches");
    // Stochastic depth draws from a stream seeded per iteration, so a resumed
    // run repeats exactly the draws of an uninterrupted one.
    torch::manual_seed(data::MixSeed({static_cast<uint64_t>(config_.meta.seed), static_cast<uint64_t>(it), 0xd809}));
    report.images = b->indices.size(0);
    report.skipped_images = source_->batch_size() - report.images;  // a skipped bad image makes a batch smaller
    images += report.images;
    model::StepInput in;
    in.crops = std::move(b->crops);
    in.epoch = epoch;
    in.lr = sched.lr[it];
    in.weight_decay = sched.weight_decay[it];
    in.momentum = sched.momentum[it];
    auto out = dino_->Step(in, hooks);
    if (!out.finite && config_.scdino.on_nonfinite_loss == "stop") {
      return Status::Aborted("loss is " + std::to_string(out.loss.item<double>()) + " at iteration " +
                             std::to_string(it) + " (epoch " + std::to_string(epoch) +
                             "); stopping (scdino.on_nonfinite_loss: skip would skip such steps). The last "
                             "checkpoint is " +
                             (result.checkpoint.empty() ? std::string("none") : result.checkpoint));
    }
    if (out.finite) {
      result.last_loss = out.loss.item<double>();
      loss_sum += result.last_loss;
      ++loss_n;
    } else {
      ++nonfinite;
      ++result.nonfinite_steps;
    }
    ++it;
    result.iteration = it;
    report.iteration = it;
    report.epoch = epoch;
    report.finite = out.finite;
    report.loss = result.last_loss;
    report.lr = in.lr;
    report.weight_decay = in.weight_decay;
    report.momentum = in.momentum;
    report.teacher_temp = temps[epoch];
    report.allreduce_wait_seconds = reducer_ ? reducer_->TakeWaitSeconds() : 0.0;
    allreduce_wait += report.allreduce_wait_seconds;
    report.step_seconds = Seconds(t0, Clock::now());
    if (options_.on_step) options_.on_step(report);
    rate = rate == 0.0 ? 1.0 / report.step_seconds : 0.9 * rate + 0.1 / report.step_seconds;
    Publish([&](RunStatus& st) {
      st.iteration = it;
      st.epoch = it / niter < epochs ? it / niter : epochs - 1;
      st.items_done = it * source_->batch_size() * world;
      st.items_per_second = rate * static_cast<double>(source_->batch_size() * world);
      st.eta_seconds = static_cast<double>(total - it) / rate;
      st.loss = report.loss;
      st.learning_rate = report.lr;
      st.weight_decay = report.weight_decay;
      st.teacher_momentum = report.momentum;
      st.teacher_temperature = report.teacher_temp;
      st.nonfinite_steps = result.nonfinite_steps;
    });

    const bool epoch_end = it % niter == 0;
    if (epoch_end) {
      const double secs = Seconds(epoch_start, Clock::now());
      // Logged figures are over all ranks: mean loss, total images/s.
      const auto sums = SumOverRanks({loss_sum, static_cast<double>(loss_n), static_cast<double>(images)});
      const double mean_loss = sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
      nlohmann::json line = {{"epoch", epoch},
                             {"iteration", it},
                             {"loss", mean_loss},
                             {"lr", in.lr},
                             {"wd", in.weight_decay},
                             {"momentum", in.momentum},
                             {"teacher_temp", temps[epoch]},
                             {"images_per_s", sums[2] / secs},
                             {"data_wait_s", data_wait},
                             {"allreduce_wait_s", allreduce_wait},
                             {"nonfinite_steps", nonfinite},
                             {"epoch_time_s", secs}};
      if (auto mem = QueryDeviceMemory(device_)) {
        line["gpu_mem_peak_bytes"] = mem->peak_allocated_bytes;
        line["gpu_mem_reserved_bytes"] = mem->reserved_bytes;
      }
      if (dino_->scaler) line["loss_scale"] = dino_->scaler->scale();
      if (writer) {
        log_file << line.dump() << "\n";
        log_file.flush();
        if (options_.log) *options_.log << line.dump() << std::endl;
      }
      loss_sum = 0.0;
      loss_n = 0;
      nonfinite = 0;
      images = 0;
      epoch_started = false;
      data_wait = 0.0;
      allreduce_wait = 0.0;
      epoch_start = Clock::now();
      Publish([](RunStatus& st) { st.state = RunState::kCheckpointing; });
      if (auto s = WriteCheckpoint(latest, it, niter); !s.ok()) return s;
      result.checkpoint = latest;
      if ((epoch + 1) % config_.train.saveckp_freq == 0 || it == total) {
        char name[64];
        const std::string numbered = run_dir + "/" + Format(name, sizeof name, "checkpoint%04lld.safetensors", epoch);
        if (auto s = WriteCheckpoint(numbered, it, niter); !s.ok()) return s;
      }
      Publish([](RunStatus& st) { st.state = RunState::kRunning; });
    }
    if (it >= total) break;
    RunRequests r = decide();
    bool stop = r.stop || (stop_at >= 0 && it >= stop_at);
    while (!stop && (r.pause || r.checkpoint)) {
      if (r.checkpoint) {
        if (auto s = checkpoint_now(); !s.ok()) return s;
      }
      if (r.pause) {
        Publish([](RunStatus& st) { st.state = RunState::kPaused; });
        const auto p0 = Clock::now();
        // Rank 0 waits for a request; the others wait in the next agreement,
        // which comes every 200 ms, so a pause may outlast the collective
        // timeout.
        if (options_.control) {
          options_.control->WaitForRequest(std::chrono::milliseconds(200));
        } else if (!options_.collective || options_.collective->rank() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        epoch_start += Clock::now() - p0;  // a pause is not training time
      }
      r = decide();
      stop = r.stop;
    }
    if (stop) {
      Publish([](RunStatus& st) { st.state = RunState::kStopping; });
      if (!epoch_end) {
        if (auto s = WriteCheckpoint(latest, it, niter); !s.ok()) return s;
        result.checkpoint = latest;
      }
      return result;
    }
    Publish([](RunStatus& st) { st.state = RunState::kRunning; });
  }
  result.completed = true;
  return result;
}

}  // namespace scdino::training
