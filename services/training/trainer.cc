#include "training/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <ostream>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/files.h"
#include "common/progress.h"
#include "data/sampler.h"
#include "training/checkpoint.h"
#include "training/device_memory.h"

namespace scdino::training {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool AnyRequest(const run::Agreement& a) {
  return a.stop() || a.pause || a.checkpoint_by_api || a.checkpoint_by_time;
}

run::Agreement Merge(const run::Agreement& a, const run::Agreement& b) {
  run::Agreement m;
  m.stop_by_api = a.stop_by_api || b.stop_by_api;
  m.stop_by_signal = a.stop_by_signal || b.stop_by_signal;
  m.pause = a.pause || b.pause;
  m.checkpoint_by_api = a.checkpoint_by_api || b.checkpoint_by_api;
  m.checkpoint_by_time = a.checkpoint_by_time || b.checkpoint_by_time;
  return m;
}
}  // namespace

Trainer::Trainer(TrainPlan plan, std::unique_ptr<data::MultiCropSource> source, TrainerOptions options)
    : source_(std::move(source)),
      options_(std::move(options)),
      coordinator_(options_.coordinator ? options_.coordinator : run::Coordinator::Single()),
      device_(plan.device),
      plan_(std::move(plan)),
      out_(options_.control) {
  if (source_->channels() != static_cast<int64_t>(plan_.channels.size())) {
    std::string list;
    for (size_t i = 0; i < plan_.channels.size(); ++i) list += (i ? "," : "") + std::to_string(plan_.channels[i]);
    ThrowIfError(Status::InvalidArgument("the data source has " + std::to_string(source_->channels()) +
                                         " input channel(s), but " + plan_.origin + " selects " +
                                         std::to_string(plan_.channels.size()) + ": [" + list + "] (" +
                                         plan_.channels_key + ")"));
  }
  RebuildModel();
  if (auto c = options_.collective) {
    // An NCCL collective that never completes ends the rank from the
    // collective's watchdog: the roll call names who is gone.
    c->set_describe_lost([coordinator = coordinator_] {
      const auto lost = coordinator->RollCall(std::chrono::seconds(3));
      return lost.empty() ? std::string("every rank answered the roll call")
                          : "lost contact with " + coordinator->DescribeRanks(lost);
    });
    coordinator_->set_sum([c](std::vector<double>& v) {
      auto t = torch::tensor(v, torch::kFloat64);
      c->AllReduceSum(t);
      for (size_t i = 0; i < v.size(); ++i) v[i] = t[static_cast<int64_t>(i)].item<double>();
    });
  }
}

Trainer::~Trainer() {
  // The sum captured the process group: the group now ends with its last
  // owner (the process's shutdown), not with the coordinator.
  if (options_.collective) coordinator_->set_sum(nullptr);
}

void Trainer::RebuildModel() {
  torch::manual_seed(plan_.seed);
  // In place: the checkpointer holds a reference to it.
  if (dino_) {
    *dino_ = model::Dino(plan_.dino, device_);
  } else {
    dino_ = std::make_unique<model::Dino>(plan_.dino, device_);
  }
  // One rank has nothing to exchange, however it was launched.
  if (auto c = options_.collective; c && c->world_size() > 1) {
    reducer_ = std::make_unique<GradientAllReducer>(c, &dino_->student_flat(), options_.bucket_bytes);
  } else {
    reducer_.reset();
  }
}

Status Trainer::RebuildSchedules(const std::string& when) {
  model::ScheduleOptions o = plan_.schedule;
  o.niter_per_epoch = steps_.niter;
  o.global_batch = plan_.batch_size_per_gpu * coordinator_->world_size();
  try {
    steps_.schedules = model::MakeSchedules(o);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(plan_.origin + when + ": " + e.what());
  }
  return Status::Ok();
}

Status Trainer::ApplyRecoverySettings(const std::vector<SettingChange>& settings, const std::string& what) {
  if (auto s = ApplySettings(plan_, settings, what); !s.ok()) return s;
  loop_.recovery.settings.insert(loop_.recovery.settings.end(), settings.begin(), settings.end());
  if (auto s = RebuildSchedules(" after a recovery"); !s.ok()) return s;
  RebuildModel();
  nlohmann::json j{{"count", loop_.recovery.count}, {"settings", nlohmann::json::array()}};
  for (const auto& v : loop_.recovery.settings) j["settings"].push_back({{"key", v.key}, {"value", v.value}});
  if (out_.checkpointer) out_.checkpointer->set_recoveries(j.dump());
  return Status::Ok();
}

StatusOr<std::string> Trainer::RollbackTarget(const std::string& verdict, int64_t it) const {
  const std::string path = out_.checkpointer->HealthyPath();
  if (FileExists(path)) return std::string("healthy");
  // The latest checkpoint holds weights trained under another on_collapse
  // setting: never replaced by untrained ones.
  if (loop_.resumed.from > 0 && !loop_.resumed.under_recover) {
    return Status::Diverged("training collapsed (" + verdict + " at iteration " + std::to_string(it) +
                            "), and no checkpoint was judged healthy to roll back to (" + path +
                            " is not there): " + out_.checkpointer->latest() + " (iteration " +
                            std::to_string(loop_.resumed.from) +
                            ") was trained without scdino.on_collapse: recover, and a rollback to the start would "
                            "replace it with untrained weights; it is kept as it is. Start afresh with the safer "
                            "settings (docs/training.md) in another run directory, or with --no-resume");
  }
  return std::string("start");
}

StatusOr<std::string> Trainer::LoadRollbackPoint(const std::string& path) {
  auto loaded = LoadCheckpoint(path, *dino_);
  if (!loaded.ok()) return loaded.status();
  // What the state holds (the optimizer's moments included), for ranks
  // that have not trained it.
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, t] : dino_->StateDict()) {
    tensors.push_back({name, static_cast<int>(t.scalar_type()), t.sizes().vec()});
  }
  return nlohmann::json{{"iteration", loaded->iteration},
                        {"epoch_position", loaded->epoch_position},
                        {"has_run", loaded->has_run_shape},
                        {"run", loaded->run.ToJson()},
                        {"tensors", tensors}}
      .dump();
}

StatusOr<int64_t> Trainer::TakeRollbackPoint(const std::string& path) {
  // Rank 0 reads the file; its iteration, position and weights go to
  // every rank.
  auto info = coordinator_->RankZeroDecides("rollback-info-" + std::to_string(loop_.recovery.count),
                                            [&] { return LoadRollbackPoint(path); });
  if (!info.ok()) return info.status();
  CheckpointInfo saved;
  nlohmann::json tensors;
  try {
    const auto j = nlohmann::json::parse(*info);
    tensors = j.at("tensors");
    saved.iteration = j.at("iteration").get<int64_t>();
    saved.epoch_position = j.at("epoch_position").get<int64_t>();
    saved.has_run_shape = j.at("has_run").get<bool>();
    if (saved.has_run_shape) {
      auto run = RunShape::FromJson(j.at("run").get<std::string>(), path);
      if (!run.ok()) return run.status();
      saved.run = *run;
    }
  } catch (const std::exception& e) {
    return Status::Internal("rank 0's rollback point is not what it sends: " + std::string(e.what()));
  }
  if (options_.collective) {
    if (auto s = TakeRankZeroState(tensors); !s.ok()) return s;
  } else if (!coordinator_->is_rank_zero()) {
    auto loaded = LoadCheckpoint(path, *dino_);
    if (!loaded.ok()) return loaded.status();
  }
  // Converted like a resume: the healthy point may be of another global
  // batch (an elastic resume since).
  auto place = PlaceAt(saved, path);
  if (!place.ok()) return place.status();
  return place->iteration;
}

StatusOr<int64_t> Trainer::Rollback(const std::string& verdict, int64_t it) {
  // Back to the last epoch end judged healthy or, when none was (the first
  // epoch is not judged), to the start: fresh weights of the run's seed.
  // Rank 0 decides which; its view of the run directory is the one that
  // counts, and its weights reach every rank (a node whose file system
  // shows no last_healthy, or an older one, trains the same weights).
  const std::string path = out_.checkpointer->HealthyPath();
  auto target = coordinator_->RankZeroDecides("rollback-" + std::to_string(loop_.recovery.count + 1),
                                              [&] { return RollbackTarget(verdict, it); });
  if (!target.ok()) return target.status();
  const bool from_start = *target == "start";
  ++loop_.recovery.count;
  RecoveryReport r;
  r.recovery = loop_.recovery.count;
  r.max_recoveries = plan_.max_recoveries;
  r.verdict = verdict;
  r.from_iteration = it;
  r.checkpoint = from_start ? "the initial weights" : path;
  const auto settings = SaferSettings(plan_, verdict);
  for (const auto& v : settings) r.changes.push_back(v.key + ": " + v.value + " (" + v.why + ")");
  // The model is rebuilt: fresh weights.
  if (auto s = ApplyRecoverySettings(settings, "the recovery from " + verdict); !s.ok()) return s;
  loop_.resumed.epoch = -1;
  if (!from_start) {
    auto to = TakeRollbackPoint(path);
    if (!to.ok()) return to.status();
    r.to_iteration = *to;
  }
  loop_.recovery.collapse = from_start ? "" : "healthy";
  loop_.interval = Interval();
  out_.epoch_log.Reset();
  loop_.result.recoveries = loop_.recovery.count;
  // A restart now goes on from here, with these settings.
  out_.checkpointer->set_epoch_position(EpochPosition(r.to_iteration));
  if (auto s = out_.checkpointer->ResumePoint(r.to_iteration, steps_.niter); !s.ok()) return s;
  ReportRecovery(r);
  return r.to_iteration;
}

void Trainer::ReportRecovery(const RecoveryReport& r) {
  if (options_.progress && coordinator_->is_rank_zero()) {
    *options_.progress << "scdino-trainer: recovering from " << r.verdict << " at iteration " << r.from_iteration
                       << " (" << r.recovery << " of at most " << r.max_recoveries
                       << ", scdino.on_collapse: recover): back to iteration " << r.to_iteration << ", "
                       << r.checkpoint << ", with\n";
    for (const auto& c : r.changes) *options_.progress << "scdino-trainer:   " << c << "\n";
    *options_.progress << std::flush;
  }
  out_.reporter.Recovery(r);
  if (options_.on_recovery) options_.on_recovery(r);
}

Status Trainer::TakeRankZeroState(const nlohmann::json& tensors) {
  // An all-reduce per tensor in which every other rank adds zeros of the
  // shape rank 0 names (its optimizer state may hold tensors theirs does
  // not yet): at a rollback only.
  const TensorMap mine = dino_->StateDict();
  TensorMap state;
  try {
    for (const auto& entry : tensors) {
      const auto name = entry.at(0).get<std::string>();
      torch::Tensor x;
      if (coordinator_->is_rank_zero()) {
        x = mine.at(name).detach().clone().contiguous();
      } else {
        x = torch::zeros(entry.at(2).get<std::vector<int64_t>>(),
                         torch::TensorOptions(static_cast<torch::ScalarType>(entry.at(1).get<int>())).device(device_));
      }
      options_.collective->AllReduceSum(x);
      state[name] = x;
    }
  } catch (const std::exception& e) {
    return Status::Internal("rank 0's rollback state did not reach rank " + std::to_string(coordinator_->rank()) +
                            ": " + e.what());
  }
  return dino_->LoadStateDict(state, "rank 0's rollback point");
}

Status Trainer::OutOfMemory(const std::string& what) const {
  const auto gib = [](int64_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
    return std::string(b);
  };
  std::string peak;
  if (auto mem = QueryDeviceMemory(device_)) {
    peak = "peak " + gib(mem->peak_allocated_bytes) + " allocated of the device's " + gib(mem->total_bytes);
  } else {
    struct rusage u {};
    ::getrusage(RUSAGE_SELF, &u);
    peak = "the process's peak resident memory " + gib(static_cast<int64_t>(u.ru_maxrss) * 1024);
  }
  // The allocator's first sentence or two ("CUDA out of memory. Tried to
  // allocate 2.00 GiB."), not its advice on fragmentation.
  std::string said = what.substr(0, what.find('\n'));
  if (const auto cut = said.find(". ", said.find("allocate")); cut != std::string::npos && said.size() > 160) {
    said = said.substr(0, cut + 1);
  }
  const auto& d = plan_.dino;
  return Status::InvalidArgument(
      "out of memory on " + device_.str() + " at iteration " + std::to_string(loop_.result.iteration) + " (" + said +
      "): train_scDINO.batch_size_per_gpu " + std::to_string(plan_.batch_size_per_gpu) + " with 2 global crops of " +
      std::to_string(plan_.global_crops_size) + " px and " + std::to_string(d.local_crops_number) +
      " local crops of " + std::to_string(plan_.local_crops_size) + " px (" + plan_.arch + ", patch " +
      std::to_string(d.vit.patch_size()) + ", out_dim " + std::to_string(d.out_dim) + ", precision " +
      model::PrecisionName(d.precision) + ") needs more; " + peak +
      ". Lower train_scDINO.batch_size_per_gpu (more GPUs keep the global batch), "
      "hyperparameters.local_crops_number or the crop sizes");
}

std::optional<LearningReport> Trainer::CheckLearning(int64_t epoch, int64_t it) {
  const bool numbered = (epoch + 1) % plan_.checkpoints.every_epochs == 0 || it == steps_.total;
  if (!options_.learning_check || !numbered || !coordinator_->is_rank_zero()) return std::nullopt;
  const std::optional<LearningReport> checked = options_.learning_check(dino_->teacher->backbone, epoch + 1, it);
  if (!checked) return std::nullopt;
  const LearningReport& r = *checked;
  loop_.result.learning = r;
  out_.reporter.Learning(r);
  if (options_.on_learning) options_.on_learning(r);
  if (options_.progress) {
    char tail[96];
    std::snprintf(tail, sizeof tail, "; %lld classes, %.1f s: ", static_cast<long long>(r.classes), r.seconds);
    *options_.progress << "scdino-trainer: learning check at epoch " << epoch + 1 << ": "
                       << LearningScoresText(r.scores()) << tail << r.verdict().name << std::endl;
  }
  return r;
}

StatusOr<TrainResult> Trainer::Run() {
  StatusOr<TrainResult> r = Status::Internal("the training loop did not run");
  // A peer that died surfaces as an exception from a collective; it must
  // become this run's FAILED state with the reason, not a crash.
  try {
    r = RunLoop();
  } catch (const StatusError& e) {
    r = e.status();
  } catch (const c10::OutOfMemoryError& e) {
    r = OutOfMemory(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // LibTorch 1.13's CPU allocator says it in a plain error.
    const bool oom = what.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
                     what.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
    r = oom ? OutOfMemory(what) : Status::Internal(what);
  } catch (const std::bad_alloc&) {
    r = OutOfMemory("std::bad_alloc");
  } catch (const std::exception& e) {
    r = Status::Internal(e.what());
  }
  // A collective that failed on a run of several ranks: which of them are
  // gone, and on which node (a node lost, a rank killed), so that the
  // message names it and the job is requeued to resume without it (also
  // after a stop signal: Slurm signals the ranks left when a node fails).
  if (!r.ok() && r.status().code() == StatusCode::kAborted && options_.collective) {
    const auto lost = coordinator_->RollCall(std::chrono::seconds(3));
    if (!lost.empty()) {
      r = Status::PeerLost("rank " + std::to_string(coordinator_->rank()) + " of " +
                           std::to_string(coordinator_->world_size()) + ": lost contact with " +
                           coordinator_->DescribeRanks(lost) + " at iteration " +
                           std::to_string(loop_.result.iteration) + "; the last complete checkpoint, " +
                           out_.checkpointer->latest() + ", is where the job resumes (" + r.status().message() + ")");
    }
  }
  out_.reporter.End(r.ok() && r->completed, r.ok() ? Status::Ok() : r.status());
  if (r.ok() && options_.collective) options_.collective->Shutdown();
  return r;
}

StatusOr<int64_t> Trainer::Resume() {
  const std::string& latest = out_.checkpointer->latest();
  // Rank 0 decides whether there is a checkpoint to resume from: a node
  // whose view of the shared file system lags must not start afresh alone.
  auto decided = coordinator_->RankZeroDecides("resume", [&]() -> StatusOr<std::string> {
    return std::string(options_.resume && FileExists(latest) ? "resume" : "fresh");
  });
  if (!decided.ok()) return decided.status();
  if (*decided == "fresh") return int64_t{0};
  // Rank 0 saw it; this node's view of a shared file system may lag
  // (NFS): a missing or cut file is looked at again before it is bad input.
  StatusOr<CheckpointInfo> info = Status::Internal("not loaded");
  const Status visible = RetryWhileFileLags(
      [&]() -> Status {
        if (auto s = CheckOwnPath(latest, "the checkpoint to resume from"); !s.ok()) return s;
        info = LoadCheckpoint(latest, *dino_);
        return info.status();
      },
      "rank " + std::to_string(coordinator_->rank()) + ": resume", &std::cerr);
  if (!visible.ok()) return visible;
  // A run that recovered from a collapse goes on with the settings it
  // recovered with: the model is rebuilt with them and loaded again.
  if (!info->recoveries_json.empty()) {
    std::vector<SettingChange> settings;
    try {
      const auto j = nlohmann::json::parse(info->recoveries_json);
      loop_.recovery.count = j.at("count").get<int64_t>();
      for (const auto& v : j.at("settings")) {
        settings.push_back({v.at("key").get<std::string>(), v.at("value").get<std::string>(), ""});
      }
    } catch (const std::exception& e) {
      return Status::DataLoss(latest + ": metadata 'recoveries' is not what scdino writes: " + e.what());
    }
    if (auto s = ApplyRecoverySettings(settings, latest); !s.ok()) return s;
    info = LoadCheckpoint(latest, *dino_);
    if (!info.ok()) return info.status();
    loop_.result.recoveries = loop_.recovery.count;
    if (coordinator_->is_rank_zero()) {
      std::cerr << "scdino-trainer: resume: with the settings of " << loop_.recovery.count
                << " recovery(ies) from a collapse\n";
    }
  }
  // Every rank loaded the same iteration (the sums of it and its square
  // tell every rank at once whether any differs).
  const auto world = static_cast<double>(coordinator_->world_size());
  const auto at = static_cast<double>(info->iteration);
  const auto sums = coordinator_->Sum({at, at * at});
  if (sums[1] * world != sums[0] * sums[0]) {
    return Status::FailedPrecondition(
        "rank " + std::to_string(coordinator_->rank()) + " loaded iteration " + std::to_string(info->iteration) +
        " from " + latest + ", but the ranks' mean is " + std::to_string(sums[0] / world) +
        ": the nodes do not see the same file (a shared file system's cache?); run again once every node sees it");
  }
  loop_.resumed.from = info->iteration;
  loop_.resumed.under_recover =
      loop_.recovery.count > 0 || (plan_.recorded_recover && plan_.recorded_recover(info->config_text));
  const RunShape now{coordinator_->world_size(), plan_.batch_size_per_gpu, plan_.epochs, steps_.niter,
                     source_->dataset_size(), plan_.channels, source_->epoch_order()};
  if (info->has_run_shape) {
    auto notes = CheckResume(info->run, now, info->iteration, latest, plan_.elastic_resume);
    if (!notes.ok()) return notes.status();
    if (coordinator_->is_rank_zero()) {
      for (const auto& n : *notes) std::cerr << "scdino-trainer: resume: " << n << "\n";
    }
  } else if (coordinator_->is_rank_zero()) {
    std::cerr << "scdino-trainer: resume: " << latest << " was written by an older version and does not record its "
              << "run's shape (batch, epochs, channels); they are not checked\n";
  }
  loop_.result.checkpoint = latest;
  auto place = PlaceAt(*info, latest);
  if (!place.ok()) return place.status();
  if (options_.progress && coordinator_->is_rank_zero()) {
    *options_.progress << "scdino-trainer: resuming from iteration " << place->iteration << " (epoch "
                       << place->epoch + 1 << ", batch " << place->iteration % steps_.niter << " of " << steps_.niter
                       << ", image " << place->position << " of the epoch's order) of " << latest << std::endl;
  }
  return place->iteration;
}

StatusOr<Trainer::Place> Trainer::PlaceAt(const CheckpointInfo& info, const std::string& path) {
  // The checkpoint's position in the epoch's order, laid over this run's
  // global batch (another world size or batch per GPU: an elastic resume).
  const int64_t global = plan_.batch_size_per_gpu * coordinator_->world_size();
  const int64_t saved_niter = info.has_run_shape ? info.run.niter_per_epoch : steps_.niter;
  const int64_t saved_global = info.has_run_shape ? info.run.global_batch() : global;
  Place p;
  p.epoch = info.iteration / saved_niter;
  const int64_t done = info.iteration % saved_niter;
  p.position = info.epoch_position >= 0 ? info.epoch_position : done * saved_global;
  p.iteration = info.iteration;
  loop_.resumed.epoch_start = data::EpochStart(done);
  if (saved_niter != steps_.niter || p.position != done * global) {
    try {
      loop_.resumed.epoch_start = source_->ResumeAt(p.position);
    } catch (const std::exception& e) {
      return Status::FailedPrecondition(path + ": " + e.what());
    }
    p.iteration = p.epoch * steps_.niter + loop_.resumed.epoch_start.batch;
  }
  loop_.resumed.epoch = p.epoch;
  return p;
}

int64_t Trainer::EpochPosition(int64_t it) const {
  const int64_t global = source_->batch_size() * coordinator_->world_size();
  if (it % steps_.niter == 0) return 0;
  if (it / steps_.niter != loop_.resumed.epoch) return (it % steps_.niter) * global;
  const int64_t first = loop_.resumed.epoch_start.position < 0 ? loop_.resumed.epoch_start.batch * global
                                                               : loop_.resumed.epoch_start.position;
  return first + (it % steps_.niter - loop_.resumed.epoch_start.batch) * global;
}

Status Trainer::LogSamples(int64_t it, const torch::Tensor& indices, const model::StepInput& in) {
  auto idx = indices.to(torch::kCPU, torch::kInt64).contiguous();
  nlohmann::json line{
      {"iteration", it},
      {"epoch", in.epoch},
      {"rank", coordinator_->rank()},
      {"world_size", coordinator_->world_size()},
      {"lr", in.lr},
      {"weight_decay", in.weight_decay},
      {"momentum", in.momentum},
      {"teacher_temp", dino_->loss->teacher_temp_schedule()[static_cast<size_t>(in.epoch)]},
      {"samples", std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel())}};
  return out_.samples->Append(line.dump() + "\n");
}

run::Agreement Trainer::LocalView() const {
  run::Agreement a;
  a.stop_by_signal = stop_.load();
  if (options_.control) {
    const RunRequests r = options_.control->Requests();
    a.stop_by_api = r.stop;
    a.pause = r.pause;
    a.checkpoint_by_api = r.checkpoint;
  }
  a.checkpoint_by_time = out_.checkpointer && out_.checkpointer->TimeDue();
  return a;
}

Status Trainer::Launch(int64_t it) {
  const int64_t epoch = it / steps_.niter;
  Pending p;
  p.launched = Clock::now();
  std::optional<data::MultiCropBatch> b = source_->Next();
  StepReport& report = p.report;
  // Next() covers the whole wait for the batch (queue included), once: the
  // data wait on the CPU. On a GPU the device's own wait replaces it once
  // read (Complete): the host waits here while the device still works.
  report.data_wait_seconds = Seconds(p.launched, Clock::now());
  p.ready = DeviceMark::Now(device_);
  if (!b) {
    return Status::Internal("data source ended epoch " + std::to_string(epoch) + " after " +
                            std::to_string(it % steps_.niter) + " of " + std::to_string(steps_.niter) + " batches");
  }
  // Stochastic depth draws from a stream seeded per iteration, so a resumed
  // run repeats exactly the draws of an uninterrupted one.
  torch::manual_seed(data::MixSeed({plan_.seed, static_cast<uint64_t>(it), 0xd809}));
  report.images = b->indices.size(0);
  report.skipped_images = source_->batch_size() - report.images;  // a skipped bad image makes a batch smaller
  model::StepInput in;
  in.crops = std::move(b->crops);
  in.epoch = epoch;
  in.lr = steps_.schedules.lr[it];
  in.weight_decay = steps_.schedules.weight_decay[it];
  in.momentum = steps_.schedules.momentum[it];
  if (out_.samples) {
    if (auto s = LogSamples(it, b->indices, in); !s.ok()) return s;
  }
  model::StepHooks hooks;
  if (reducer_) {
    hooks.after_backward = [this] { reducer_->Finish(); };
    hooks.sum_over_ranks = [this](torch::Tensor& t) { options_.collective->AllReduceSum(t); };
    // The step's one exchange also carries this rank's view of the
    // requests; the sums come back in the step's readout.
    hooks.step_exchange = [this](torch::Tensor& t) {
      TORCH_CHECK(t.dim() == 1, "the step's exchange is 1-D, got ", t.sizes());
      auto flags = torch::tensor(run::AgreementToVector(LocalView()), torch::TensorOptions(t.scalar_type()));
      if (t.is_cuda()) flags = flags.pin_memory();
      t = torch::cat({t, flags.to(t.device(), /*non_blocking=*/true)});
      options_.collective->AllReduceSum(t);
    };
  }
  auto out = dino_->Step(in, hooks);
  report.iteration = it + 1;
  report.epoch = epoch;
  report.iterations_to_process = steps_.total;
  report.epochs_to_process = plan_.epochs;
  report.lr = in.lr;
  report.weight_decay = in.weight_decay;
  report.momentum = in.momentum;
  report.teacher_temp = dino_->loss->teacher_temp_schedule()[static_cast<size_t>(epoch)];
  report.allreduce_wait_seconds = reducer_ ? reducer_->TakeWaitSeconds() : 0.0;
  p.values = Readback(out.readout);
  p.done = DeviceMark::Now(device_);
  loop_.pending.push_back(std::move(p));
  return Status::Ok();
}

StatusOr<StepReport> Trainer::Complete() {
  Pending p = std::move(loop_.pending.front());
  loop_.pending.pop_front();
  const auto values = model::ReadStepValues(p.values.Get(), dino_->options().out_dim);
  StepReport report = p.report;
  // On a GPU, the data wait is the device's: from the previous step's end to
  // this step's crops being ready on its stream.
  if (const auto gap = DeviceMark::Between(loop_.last_done, p.ready)) report.data_wait_seconds = *gap;
  loop_.last_done = loop_.pending.empty() ? DeviceMark() : p.done;
  // The agreement of this step's exchange, or (one process) the local view.
  loop_.agreed =
      Merge(loop_.agreed, reducer_ ? run::AgreementFromSums(values.extra) : coordinator_->Agree(LocalView()));
  const int64_t it = report.iteration - 1;
  if (!values.finite && plan_.stop_on_nonfinite_loss) {
    return Status::Diverged("loss is " + std::to_string(values.loss) + " at iteration " + std::to_string(it) +
                            " (epoch " + std::to_string(report.epoch) +
                            "); stopping (scdino.on_nonfinite_loss: skip would skip such steps). The last "
                            "checkpoint is " +
                            (loop_.result.checkpoint.empty() ? std::string("none") : loop_.result.checkpoint));
  }
  if (values.finite) {
    loop_.result.last_loss = values.loss;
  } else {
    ++loop_.result.nonfinite_steps;
  }
  report.finite = values.finite;
  report.loss = loop_.result.last_loss;
  report.health = values.health;
  // Until the next step was queued: the step's share of the loop's time.
  report.step_seconds = Seconds(p.launched, loop_.pending.empty() ? Clock::now() : loop_.pending.front().launched);
  return report;
}

bool Trainer::MustDrain(int64_t launched) const {
  // Only what every rank knows alike: where the iterations are, and the
  // agreement's sums (a rank's own view reaches the others one step later).
  const int64_t in_epoch = launched % steps_.niter;
  return in_epoch == 0 || in_epoch % plan_.log_every == 0 || launched >= steps_.total ||
         (options_.stop_after_iterations >= 0 && launched >= options_.stop_after_iterations) ||
         AnyRequest(loop_.agreed);
}

Status Trainer::EndOfInterval(int64_t it, const StepReport& last) {
  HealthReport h;
  h.iteration = it;
  h.epoch = last.epoch;
  h.steps = loop_.interval.health.steps();
  h.health = loop_.interval.health.Mean();
  h.loss = h.steps > 0 ? loop_.interval.loss / static_cast<double>(h.steps) : last.loss;
  const double step_s =
      loop_.interval.steps > 0 ? loop_.interval.seconds / static_cast<double>(loop_.interval.steps) : 0.0;
  const double data_s =
      loop_.interval.steps > 0 ? loop_.interval.data_wait / static_cast<double>(loop_.interval.steps) : 0.0;
  loop_.interval = Interval();
  // A fresh network's outputs are near-identical for every image, which
  // reads as a one-hot collapse: the verdict starts with the second epoch.
  Status stop;
  if (h.steps > 0 && last.epoch >= 1) {
    const auto verdict = model::JudgeCollapse(h.health);
    h.collapse = model::CollapseName(verdict);
    if (h.collapse != loop_.recovery.collapse && verdict != model::Collapse::kHealthy) {
      const std::string what = std::string(h.collapse) + " at iteration " + std::to_string(it) + " (epoch " +
                               std::to_string(last.epoch) + "): " + model::DescribeCollapse(verdict, h.health) +
                               " over the last " + std::to_string(h.steps) + " iterations";
      const bool recover = plan_.on_collapse == OnCollapse::kRecover;
      if (recover && loop_.recovery.count < plan_.max_recoveries) {
        loop_.recovery.rollback = h.collapse;
      } else if (recover) {
        stop =
            Status::Diverged("training collapsed again, " + what + ", after " + std::to_string(loop_.recovery.count) +
                             " recoveries (scdino.max_recoveries); stopping. docs/training.md says what to change; "
                             "the last checkpoint is kept");
      } else if (plan_.on_collapse == OnCollapse::kStop) {
        stop = Status::Diverged("training collapsed, " + what +
                                          "; stopping (scdino.on_collapse: stop). docs/training.md says what to "
                                          "change; the last checkpoint is kept");
      } else if (options_.progress && coordinator_->is_rank_zero()) {
        *options_.progress << "scdino-trainer: warning: " << what
                           << "; docs/training.md says what to change (scdino.on_collapse: stop would stop here)"
                           << std::endl;
      }
    } else if (verdict == model::Collapse::kHealthy && !loop_.recovery.collapse.empty() &&
               loop_.recovery.collapse != h.collapse && options_.progress && coordinator_->is_rank_zero()) {
      *options_.progress << "scdino-trainer: healthy again at iteration " << it << std::endl;
    }
    loop_.recovery.collapse = h.collapse;
  }
  out_.reporter.Health(h);
  if (options_.on_health) options_.on_health(h);
  if (options_.progress && coordinator_->is_rank_zero()) {
    // What DINO's MetricLogger says of a step too: the time left, the
    // step's time and its wait for data, the device's peak memory.
    const std::string eta = FormatDuration(step_s * static_cast<double>(std::max<int64_t>(0, steps_.total - it)));
    std::string memory;
    if (auto mem = QueryDeviceMemory(device_)) {
      memory = ", max mem " + std::to_string(mem->peak_allocated_bytes >> 20) + " MB";
    }
    char buf[700];
    std::snprintf(buf, sizeof buf,
                  "scdino-trainer: epoch %lld/%lld iteration %lld/%lld loss %.4f lr %.3g | teacher entropy %.3f "
                  "(%.2f of ln K), KL %.3f, batch entropy %.3f, center norm %.3g, CLS std %.3g | %s | eta %s, "
                  "time %.3f s a step, data %.3f s%s",
                  static_cast<long long>(last.epoch + 1), static_cast<long long>(plan_.epochs),
                  static_cast<long long>(it), static_cast<long long>(steps_.total), h.loss, last.lr,
                  h.health.teacher_entropy, h.health.teacher_entropy_ratio, h.health.student_teacher_kl,
                  h.health.teacher_batch_entropy, h.health.center_norm, h.health.backbone_cls_std,
                  h.collapse.empty() ? "not judged in the first epoch" : h.collapse.c_str(), eta.c_str(), step_s,
                  data_s, memory.c_str());
    *options_.progress << buf << std::endl;
  }
  return stop;
}

Status Trainer::EndOfEpoch(int64_t epoch, int64_t it) {
  out_.reporter.State(RunState::kCheckpointing);
  Status s = out_.checkpointer->EndOfEpoch(epoch, it, steps_.niter, it == steps_.total);
  if (s.ok()) loop_.result.checkpoint = out_.checkpointer->latest();
  // What recover rolls back to: an epoch end judged healthy.
  if (s.ok() && plan_.on_collapse == OnCollapse::kRecover && loop_.recovery.rollback.empty() &&
      loop_.recovery.collapse == "healthy") {
    s = out_.checkpointer->KeepAsHealthy();
  }
  out_.reporter.State(RunState::kRunning);
  return s;
}

StatusOr<StopReason> Trainer::Act(run::Agreement agreed, int64_t it) {
  bool paused = false;
  while (true) {
    if (agreed.stop()) return agreed.stop_by_api ? StopReason::kApi : StopReason::kSignal;
    if (agreed.checkpoint_by_api) {
      out_.reporter.State(RunState::kCheckpointing);
      auto path = out_.checkpointer->Snapshot(it, steps_.niter);
      if (options_.control) {
        options_.control->CompleteCheckpoints(path.ok() ? StatusOr<std::string>(*path) : path.status(), it);
      }
      if (!path.ok()) return path.status();
      loop_.result.checkpoint = out_.checkpointer->latest();
    } else if (agreed.checkpoint_by_time) {
      out_.reporter.State(RunState::kCheckpointing);
      if (auto s = out_.checkpointer->ResumePoint(it, steps_.niter); !s.ok()) return s;
      loop_.result.checkpoint = out_.checkpointer->latest();
    }
    if (!agreed.pause) break;
    out_.reporter.State(RunState::kPaused);
    paused = true;
    // Rank 0 waits for a request; the others wait in the next agreement,
    // which comes every 200 ms, so a pause may outlast the collective
    // timeout.
    if (options_.control) {
      options_.control->WaitForRequest(std::chrono::milliseconds(200));
    } else if (coordinator_->is_rank_zero()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    agreed = coordinator_->Agree(LocalView());
  }
  if (paused || agreed.checkpoint_by_api || agreed.checkpoint_by_time) out_.reporter.State(RunState::kRunning);
  return StopReason::kNone;
}

StatusOr<int64_t> Trainer::Start() {
  const std::string& run_dir = plan_.run_dir;
  if (auto s = MakeDirs(run_dir); !s.ok()) return s;
  steps_.niter = source_->batches_per_epoch();
  const int64_t epochs = plan_.epochs;
  steps_.total = epochs * steps_.niter;
  const int64_t world = coordinator_->world_size();
  if (auto s = RebuildSchedules(""); !s.ok()) return s;
  CheckpointInfo info;
  info.world_size = world;
  info.config_text = plan_.recorded_config;
  info.classes = source_->class_names();
  info.run = RunShape{world, plan_.batch_size_per_gpu, epochs, steps_.niter, source_->dataset_size(),
                      plan_.channels, source_->epoch_order()};
  out_.checkpointer = std::make_unique<Checkpointer>(run_dir, plan_.checkpoints, *coordinator_, *dino_, info,
                                                 [this](const CheckpointReport& r) {
                                                   out_.reporter.Checkpoint(r);
                                                   if (options_.on_checkpoint) options_.on_checkpoint(r);
                                                 });
  auto resumed = Resume();
  if (!resumed.ok()) return resumed.status();
  const int64_t it = *resumed;
  loop_.result.iteration = it;
  // A run that starts afresh (--no-resume, a reused run directory) must not
  // roll back to another run's healthy checkpoint.
  if (it == 0 && coordinator_->is_rank_zero()) std::remove(out_.checkpointer->HealthyPath().c_str());
  if (coordinator_->is_rank_zero()) {
    auto f = Env::Default()->NewAppendableFile(run_dir + "/log.jsonl");
    if (!f.ok()) return f.status();
    out_.epoch_file = std::move(f).value();
    auto dino = Env::Default()->NewAppendableFile(run_dir + "/log.txt");
    if (!dino.ok()) return dino.status();
    out_.dino_log = std::move(dino).value();
  }
  if (plan_.log_samples) {
    if (auto s = MakeDirs(run_dir + "/samples"); !s.ok()) return s;
    auto f = Env::Default()->NewAppendableFile(run_dir + "/samples/rank" + std::to_string(coordinator_->rank()) +
                                               ".jsonl");
    if (!f.ok()) return f.status();
    out_.samples = std::move(f).value();
  }
  out_.reporter.Start(it, steps_.niter, epochs, source_->batch_size() * world);
  // A resume with a larger global batch can find less than one batch left
  // in its epoch: that epoch ends here, with its checkpoints (the last
  // epoch's end completes the run).
  if (loop_.resumed.epoch >= 0 && it > 0 && it % steps_.niter == 0 && it / steps_.niter - 1 == loop_.resumed.epoch) {
    out_.checkpointer->set_epoch_position(0);
    if (auto s = EndOfEpoch(loop_.resumed.epoch, it); !s.ok()) return s;
  }
  return it;
}

Status Trainer::LogEpoch(int64_t epoch, int64_t it, double seconds, const StepReport& last) {
  const auto sum = [this](std::vector<double> v) { return coordinator_->Sum(std::move(v)); };
  auto line = out_.epoch_log.Line(epoch, it, seconds, last, sum);
  if (!loop_.recovery.collapse.empty()) line["collapse"] = loop_.recovery.collapse;
  if (loop_.recovery.count > 0) line["recoveries"] = loop_.recovery.count;
  if (loop_.recovery.rollback.empty()) {
    if (auto check = CheckLearning(epoch, it)) {
      line["knn_top1"] = check->trained_top1;
      line["knn_random_top1"] = check->random_top1;
      line["knn_pixels_top1"] = check->pixels_top1;
      line["learning_verdict"] = check->verdict().name;
    }
  }
  if (auto mem = QueryDeviceMemory(device_)) {
    line["gpu_mem_peak_bytes"] = mem->peak_allocated_bytes;
    line["gpu_mem_reserved_bytes"] = mem->reserved_bytes;
  }
  if (dino_->scaler) line["loss_scale"] = dino_->scaler->scale();
  // The intra-op threads the steps computed on, read on the steps' own
  // thread: what scdino.threads (or --threads) asked for, or a library
  // changed the process's count behind the edge's back.
  line["cpu_threads"] = at::get_num_threads();
  out_.epoch_log.Reset();
  if (!out_.epoch_file) return Status::Ok();
  if (auto s = out_.epoch_file->Append(line.dump() + "\n"); !s.ok()) return s;
  if (auto s = out_.dino_log->Append(EpochLog::DinoLine(line).dump() + "\n"); !s.ok()) return s;
  if (options_.log) *options_.log << line.dump() << std::endl;
  return Status::Ok();
}

void Trainer::Count(const StepReport& report) {
  loop_.result.iteration = report.iteration;
  out_.checkpointer->set_epoch_position(EpochPosition(report.iteration));
  out_.epoch_log.Add(report);
  out_.reporter.Step(report, loop_.result.nonfinite_steps);
  if (options_.on_step) options_.on_step(report);
  if (report.finite) {
    loop_.interval.health.Add(report.health);
    loop_.interval.loss += report.loss;
  }
  ++loop_.interval.steps;
  loop_.interval.seconds += report.step_seconds;
  loop_.interval.data_wait += report.data_wait_seconds;
}

StatusOr<StopReason> Trainer::Stop(int64_t it) {
  const auto paused_from = Clock::now();
  auto reason = Act(std::exchange(loop_.agreed, run::Agreement()), it);
  loop_.epoch_began += Clock::now() - paused_from;  // a pause is not training time
  if (!reason.ok()) return reason.status();
  if (*reason == StopReason::kNone && options_.stop_after_iterations >= 0 && it >= options_.stop_after_iterations) {
    reason = StopReason::kIterationLimit;
  }
  if (*reason != StopReason::kNone) {
    out_.reporter.State(RunState::kStopping);
    if (it % steps_.niter != 0) {
      if (auto s = out_.checkpointer->ResumePoint(it, steps_.niter); !s.ok()) return s;
      loop_.result.checkpoint = out_.checkpointer->latest();
    }
    loop_.result.stopped_by = *reason;
  }
  return reason;
}

StatusOr<TrainResult> Trainer::RunLoop() {
  auto started = Start();
  if (!started.ok()) return started.status();
  int64_t it = *started;
  bool epoch_started = false;
  loop_.agreed = run::Agreement();
  // `launched` steps are queued on the device; `it` of them are read. A
  // step's values are read once the next is queued, or at once where
  // something needs them (MustDrain); checkpoints, the agreement's actions
  // and rollbacks come only when every queued step is read.
  int64_t launched = it;
  while (it < steps_.total) {
    if (!epoch_started) {
      const int64_t epoch = launched / steps_.niter;
      source_->StartEpoch(epoch, epoch == loop_.resumed.epoch ? loop_.resumed.epoch_start
                                                         : data::EpochStart(launched % steps_.niter));
      epoch_started = true;
      loop_.epoch_began = Clock::now();
    }
    if (auto s = Launch(launched); !s.ok()) return s;
    ++launched;
    while (!loop_.pending.empty() && (loop_.pending.size() > 1 || MustDrain(launched))) {
      auto report = Complete();
      if (!report.ok()) return report.status();
      Count(*report);
      it = report->iteration;
      // Intervals count from the start of each epoch, which ends one.
      const Status collapsed =
          (it % steps_.niter) % plan_.log_every == 0 ? EndOfInterval(it, *report) : Status::Ok();
      if (it % steps_.niter == 0) {
        if (auto s = LogEpoch(report->epoch, it, Seconds(loop_.epoch_began, Clock::now()), *report); !s.ok()) return s;
        epoch_started = false;
        if (auto s = EndOfEpoch(report->epoch, it); !s.ok()) return s;
      }
      if (!collapsed.ok()) {
        if (it % steps_.niter != 0) {
          if (auto s = out_.checkpointer->ResumePoint(it, steps_.niter); !s.ok()) return s;
        }
        return collapsed;
      }
      if (!loop_.recovery.rollback.empty()) {
        auto back = Rollback(std::exchange(loop_.recovery.rollback, ""), it);
        if (!back.ok()) return back.status();
        loop_.result.iteration = it = launched = *back;
        loop_.agreed = run::Agreement();
        epoch_started = false;
        break;
      }
      if (it >= steps_.total) break;
      if (!loop_.pending.empty()) continue;  // acted on once every queued step is read
      auto reason = Stop(it);
      if (!reason.ok()) return reason.status();
      if (*reason != StopReason::kNone) return loop_.result;
    }
  }
  loop_.result.completed = true;
  return loop_.result;
}

}  // namespace scdino::training
