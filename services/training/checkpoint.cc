#include "training/checkpoint.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <tuple>

#include "common/safetensors.h"
#include "model/shape.h"

namespace scdino::training {

std::string RunShape::ToJson() const {
  return nlohmann::json{{"world_size", world_size},
                        {"batch_size_per_gpu", batch_size_per_gpu},
                        {"global_batch", global_batch()},
                        {"epochs", epochs},
                        {"niter_per_epoch", niter_per_epoch},
                        {"dataset_size", dataset_size},
                        {"channels", channels},
                        {"epoch_order", epoch_order}}
      .dump();
}

StatusOr<RunShape> RunShape::FromJson(const std::string& text, const std::string& origin) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  RunShape r;
  auto positive = [&](const char* k, int64_t* out) -> Status {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 1) {
      return Status::DataLoss(origin + ": metadata 'run' lacks a positive integer '" + k + "': " + text);
    }
    *out = j[k].get<int64_t>();
    return Status::Ok();
  };
  if (!j.is_object()) return Status::DataLoss(origin + ": metadata 'run' is not a JSON object: " + text);
  for (auto [k, out] : {std::pair<const char*, int64_t*>{"world_size", &r.world_size},
                        {"batch_size_per_gpu", &r.batch_size_per_gpu},
                        {"epochs", &r.epochs},
                        {"niter_per_epoch", &r.niter_per_epoch}}) {
    if (auto s = positive(k, out); !s.ok()) return s;
  }
  if (j.contains("dataset_size")) {
    if (!j["dataset_size"].is_number_integer() || j["dataset_size"].get<int64_t>() < 0) {
      return Status::DataLoss(origin + ": metadata 'run': 'dataset_size' is not a count of images: " + text);
    }
    r.dataset_size = j["dataset_size"].get<int64_t>();
  }
  if (j.contains("epoch_order") && j["epoch_order"].is_string()) r.epoch_order = j["epoch_order"].get<std::string>();
  if (!j.contains("channels") || !j["channels"].is_array()) {
    return Status::DataLoss(origin + ": metadata 'run' lacks the list 'channels': " + text);
  }
  for (const auto& c : j["channels"]) {
    if (!c.is_number_integer()) return Status::DataLoss(origin + ": metadata 'run': a channel is not an integer: " + text);
    r.channels.push_back(c.get<int64_t>());
  }
  return r;
}

Status SaveCheckpoint(const std::string& path, const model::Dino& dino, const CheckpointInfo& info) {
  Metadata meta{{"format", "scdino-checkpoint-1"},
                {"scdino_version", SCDINO_VERSION},
                {"iteration", std::to_string(info.iteration)},
                {"epoch", std::to_string(info.epoch)},
                {"world_size", std::to_string(info.world_size)},
                {"epoch_position", std::to_string(info.epoch_position)},
                {"model", model::ModelShapeJson(dino.options())},
                {"run", info.run.ToJson()},
                {"config", info.config_text},
                {"classes", nlohmann::json(info.classes).dump()}};
  if (!info.recoveries_json.empty()) meta["recoveries"] = info.recoveries_json;
  return WriteSafetensors(path, dino.StateDict(), meta);
}

StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& path, model::Dino& dino) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const auto& m = file->metadata;
  for (const char* key : {"format", "iteration", "epoch", "model"}) {
    if (!m.count(key)) return Status::DataLoss(path + ": not an scdino checkpoint (metadata '" + key + "' is missing)");
  }
  CheckpointInfo info;
  for (auto [key, out, absent] : {std::tuple<const char*, int64_t*, int64_t>{"iteration", &info.iteration, 0},
                                   {"epoch", &info.epoch, 0},
                                   {"world_size", &info.world_size, 1},
                                   {"epoch_position", &info.epoch_position, -1}}) {
    if (!m.count(key)) {
      *out = absent;
      continue;
    }
    try {
      *out = std::stoll(m.at(key));
    } catch (const std::exception&) {
      return Status::DataLoss(path + ": metadata '" + key + "' is not a number: '" + m.at(key) + "'");
    }
  }
  info.model_json = m.at("model");
  info.config_text = m.count("config") ? m.at("config") : "";
  info.recoveries_json = m.count("recoveries") ? m.at("recoveries") : "";
  if (m.count("run")) {
    auto run = RunShape::FromJson(m.at("run"), path);
    if (!run.ok()) return run.status();
    info.run = *run;
    info.has_run_shape = true;
  }
  if (m.count("classes")) {
    auto c = nlohmann::json::parse(m.at("classes"), nullptr, false);
    if (!c.is_array()) return Status::DataLoss(path + ": metadata 'classes' is not a list of class names");
    for (const auto& x : c) {
      if (!x.is_string()) return Status::DataLoss(path + ": metadata 'classes' holds " + x.dump() + ", not a class name");
      info.classes.push_back(x.get<std::string>());
    }
  }
  const std::string ours = model::ModelShapeJson(dino.options());
  if (nlohmann::json::parse(info.model_json, nullptr, false) != nlohmann::json::parse(ours)) {
    return Status::FailedPrecondition(path + ": the checkpoint's model " + info.model_json +
                                      " differs from the configured model " + ours +
                                      "; use another output_dir/name_of_run or the matching config");
  }
  if (auto s = dino.LoadStateDict(file->tensors, path); !s.ok()) return s;
  return info;
}

StatusOr<std::vector<std::string>> CheckResume(const RunShape& saved, const RunShape& now, int64_t iteration,
                                               const std::string& origin, const std::string& elastic_resume) {
  std::vector<std::string> wrong, notes;
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return "[" + s + "]";
  };
  auto batch = [](const RunShape& r) {
    return std::to_string(r.global_batch()) + " (" + std::to_string(r.world_size) + " ranks x " +
           std::to_string(r.batch_size_per_gpu) + ")";
  };
  if (saved.channels != now.channels) {
    wrong.push_back("channels " + list(saved.channels) + " then, " + list(now.channels) + " now");
  }
  const bool same_batch = saved.global_batch() == now.global_batch();
  if (saved.dataset_size > 0 && now.dataset_size > 0 && saved.dataset_size != now.dataset_size) {
    wrong.push_back(std::to_string(saved.dataset_size) + " images then, " + std::to_string(now.dataset_size) +
                    " now: the data set has changed");
  } else if (same_batch && saved.niter_per_epoch != now.niter_per_epoch) {
    wrong.push_back(std::to_string(saved.niter_per_epoch) + " iterations per epoch then, " +
                    std::to_string(now.niter_per_epoch) + " now: the data set has changed");
  }
  const bool mid_epoch = saved.niter_per_epoch > 0 && iteration % saved.niter_per_epoch != 0;
  if (!saved.epoch_order.empty() && !now.epoch_order.empty() && saved.epoch_order != now.epoch_order) {
    if (mid_epoch) {
      wrong.push_back("each epoch's order was " + saved.epoch_order + ", now " + now.epoch_order +
                      ": inside an epoch the rest of it would repeat or skip images (keep scdino.shuffle, "
                      "shuffle_buffer and the packed set of the checkpoint's run until the epoch ends)");
    } else {
      notes.push_back("each epoch's order is now " + now.epoch_order + " (was " + saved.epoch_order +
                      "); the checkpoint is at an epoch's end, so no image is repeated or skipped");
    }
  }
  if (!same_batch && elastic_resume != "batch_per_gpu") {
    wrong.push_back("global batch " + batch(saved) + " then, " + batch(now) +
                    " now: the learning rate is scaled by it and each epoch's order is cut by it (scdino.elastic_resume: "
                    "batch_per_gpu goes on with the new global batch)");
  }
  if (now.epochs < saved.epochs) {
    wrong.push_back(std::to_string(saved.epochs) + " epochs then, " + std::to_string(now.epochs) +
                    " now: the schedules would jump (train for at least as many epochs, or start a new run)");
  }
  if (!wrong.empty()) {
    std::string m = origin + ": cannot resume: this run's shape differs from the checkpoint's:";
    for (const auto& w : wrong) m += "\n  - " + w;
    return Status::FailedPrecondition(m + "\nUse another meta.output_dir/name_of_run, the checkpoint's settings, or "
                                          "--no-resume");
  }
  if (now.epochs > saved.epochs) {
    notes.push_back("training on to " + std::to_string(now.epochs) + " epochs (the checkpoint was for " +
                    std::to_string(saved.epochs) + "): from iteration " + std::to_string(iteration) +
                    " the learning rate, weight decay and teacher momentum follow the cosine schedules of " +
                    std::to_string(now.epochs) + " epochs, so they change at once to where those schedules are");
  }
  if (now.world_size != saved.world_size) {
    notes.push_back("resumed on another world size: " + std::to_string(now.world_size) + " rank(s), the checkpoint's run had " +
                    std::to_string(saved.world_size) + "; " +
                    (same_batch ? "the global batch of " + std::to_string(now.global_batch()) +
                                      " is kept (scdino.elastic_resume: global_batch), so every step trains on the "
                                      "images and schedule values of an uninterrupted run (equal up to the order of "
                                      "floating-point sums)"
                                : std::string("the per-rank batch is kept (scdino.elastic_resume: batch_per_gpu)")));
  }
  if (!same_batch) {
    notes.push_back("global batch " + batch(saved) + " then, " + batch(now) + " now: " +
                    std::to_string(now.niter_per_epoch) + " iterations per epoch instead of " +
                    std::to_string(saved.niter_per_epoch) +
                    ", the learning rate is scaled to the new global batch and the schedules are laid over the new "
                    "iterations; the current epoch goes on at the first image it had not trained on");
  }
  return notes;
}

StatusOr<int64_t> ResumeBatchPerGpu(const std::string& checkpoint, int64_t world_size, int64_t configured,
                                    const std::string& mode, std::string* note) {
  if (mode != "global_batch" || !std::filesystem::exists(checkpoint)) return configured;
  auto meta = ReadSafetensorsMetadata(checkpoint);
  if (!meta.ok()) return meta.status();
  if (!meta->count("run")) return configured;
  auto saved = RunShape::FromJson(meta->at("run"), checkpoint);
  if (!saved.ok()) return saved.status();
  if (saved->world_size == world_size) return configured;
  const int64_t global = saved->global_batch();
  if (global % world_size != 0) {
    std::string divisors;
    for (int64_t d = 1; d <= global; ++d) {
      if (global % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
    }
    return Status::InvalidArgument(checkpoint + ": cannot resume on " + std::to_string(world_size) +
                                   " ranks with the global batch kept (scdino.elastic_resume: global_batch): " +
                                   std::to_string(world_size) + " does not divide the checkpoint's global batch " +
                                   std::to_string(global) + " (" + std::to_string(saved->world_size) + " ranks x " +
                                   std::to_string(saved->batch_size_per_gpu) + "). Resume on " + divisors +
                                   " ranks, or set scdino.elastic_resume: batch_per_gpu");
  }
  if (note != nullptr && global / world_size != configured) {
    *note = "train_scDINO.batch_size_per_gpu " + std::to_string(configured) + " -> " +
            std::to_string(global / world_size) + ": the checkpoint's global batch of " + std::to_string(global) +
            " (" + std::to_string(saved->world_size) + " ranks x " + std::to_string(saved->batch_size_per_gpu) +
            ") over " + std::to_string(world_size) + " rank(s) (scdino.elastic_resume: global_batch)";
  }
  return global / world_size;
}

}  // namespace scdino::training
