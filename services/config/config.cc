#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include "common/files.h"
#include "config/config_schema.h"

namespace scdino::run {
namespace {

// The checks across keys, one concern at a time: the model and its
// schedules, the service's settings, the data source.
Status CrossCheckTraining(const RunConfig& c) {
  const auto& h = c.train.hyperparameters;
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (h.warmup_epochs > c.train.epochs) {
    return bad("train_scDINO.hyperparameters.warmup_epochs: expected at most train_scDINO.epochs (" +
               std::to_string(c.train.epochs) + "), got " + std::to_string(h.warmup_epochs));
  }
  if (h.warmup_teacher_temp_epochs > c.train.epochs) {
    return bad("train_scDINO.hyperparameters.warmup_teacher_temp_epochs: expected at most train_scDINO.epochs (" +
               std::to_string(c.train.epochs) + "), got " + std::to_string(h.warmup_teacher_temp_epochs));
  }
  if (c.scdino.koleo_loss_weight > 0 && c.train.batch_size_per_gpu < 2) {
    return bad("scdino.koleo_loss_weight: KoLeo needs at least 2 images per rank (each image's nearest other one), "
               "got train_scDINO.batch_size_per_gpu " + std::to_string(c.train.batch_size_per_gpu) +
               "; raise the batch or set koleo_loss_weight: 0");
  }
  for (auto [key, size] : {std::pair<const char*, int64_t>{"global_crops_size", h.global_crops_size},
                           {"local_crops_size", h.local_crops_size}}) {
    if (size % h.patch_size != 0) {
      return bad(std::string("train_scDINO.hyperparameters.") + key + ": expected a multiple of patch_size (" +
                 std::to_string(h.patch_size) + "), got " + std::to_string(size));
    }
  }
  if (h.use_bn_in_head) {
    return bad("train_scDINO.hyperparameters.use_bn_in_head: expected false (batch norm in the head is not "
               "supported; scDINO's default is false), got true");
  }
  const auto vit = c.dino_options().vit;
  if (vit.embed_dim() % vit.num_heads() != 0) {
    return bad("train_scDINO.hyperparameters.embed_dim: expected a multiple of num_heads (" +
               std::to_string(vit.num_heads()) + "), got " + std::to_string(vit.embed_dim()));
  }
  if (c.scdino.augmentation.blur_kernel % 2 == 0) {
    return bad("scdino.augmentation.blur_kernel: expected an odd number of taps, got " +
               std::to_string(c.scdino.augmentation.blur_kernel));
  }
  return Status::Ok();
}

Status CrossCheckService(const RunConfig& c) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (c.scdino.control.tls_cert_file.empty() != c.scdino.control.tls_key_file.empty()) {
    return bad("scdino.control: tls_cert_file and tls_key_file go together (both set: your certificate; both empty: one made per start), "
               "got only " + std::string(c.scdino.control.tls_cert_file.empty() ? "tls_key_file" : "tls_cert_file"));
  }
  if (c.scdino.control.plaintext && !c.scdino.control.tls_cert_file.empty()) {
    return bad("scdino.control.plaintext: true contradicts tls_cert_file " + c.scdino.control.tls_cert_file +
               "; keep one of them");
  }
  if (c.scdino.control.listen.find(':') == std::string::npos) {
    return bad("scdino.control.listen: expected host:port (port 0: any free port), got '" + c.scdino.control.listen +
               "'");
  }
  if (c.scdino.preflight.max_bytes < c.scdino.preflight.min_bytes) {
    return bad("scdino.preflight.max_bytes: expected at least min_bytes (" + std::to_string(c.scdino.preflight.min_bytes) +
               "), got " + std::to_string(c.scdino.preflight.max_bytes));
  }
  if (c.scdino.split.mode == "folders" && c.scdino.split.train_folder == c.scdino.split.test_folder) {
    return bad("scdino.split: train_folder and test_folder must differ, both are '" + c.scdino.split.train_folder +
               "'");
  }
  if (c.downstream.umap_min_dist > c.downstream.umap_spread) {
    return bad("downstream_analyses.umap_eval.min_dist: expected at most spread (" +
               std::to_string(c.downstream.umap_spread) + "), got " + std::to_string(c.downstream.umap_min_dist));
  }
  return Status::Ok();
}

Status CrossCheckData(const RunConfig& c) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (c.scdino.data_source == "folder" && c.meta.dataset_dir.empty()) {
    return bad("meta.dataset_dir: expected the data set folder (scdino.data_source is folder), got nothing");
  }
  if (c.scdino.data_source == "csv" && c.scdino.index_csv.empty()) {
    return bad("scdino.index_csv: expected a CSV of path,label rows (scdino.data_source is csv), got nothing");
  }
  if (c.scdino.data_source == "synthetic") {
    for (int64_t ch : c.channels()) {
      if (ch >= c.scdino.synthetic.channels) {
        return bad("meta.selected_channel_combination_per_run: channel " + std::to_string(ch) +
                   " does not exist in the synthetic images (scdino.synthetic.channels = " +
                   std::to_string(c.scdino.synthetic.channels) + ")");
      }
    }
    const int64_t n = c.scdino.synthetic.classes * c.scdino.synthetic.per_class;
    if (n < c.train.batch_size_per_gpu) {
      return bad("train_scDINO.batch_size_per_gpu: expected at most the " + std::to_string(n) +
                 " synthetic images, got " + std::to_string(c.train.batch_size_per_gpu));
    }
  }
  return Status::Ok();
}

// Several combinations: each trains in a folder named as scDINO names it,
// so the names must make one folder each.
Status CrossCheckCombinations(const RunConfig& c) {
  const int64_t n = static_cast<int64_t>(c.meta.selected_channel_combination_per_run.size());
  if (c.scdino.channel_combination >= n) {
    return Status::InvalidArgument("scdino.channel_combination: expected an index below the " + std::to_string(n) +
                                   " entries of meta.selected_channel_combination_per_run, got " +
                                   std::to_string(c.scdino.channel_combination));
  }
  if (n < 2) return Status::Ok();
  if (c.train.dino_vit_name.find('/') != std::string::npos || c.train.dino_vit_name.empty()) {
    return Status::InvalidArgument("train_scDINO.dino_vit_name: expected a folder name without '/' (each of the " +
                                   std::to_string(n) + " channel combinations trains in <dino_vit_name>_channel_<names>), "
                                   "got '" + c.train.dino_vit_name + "'");
  }
  if (c.meta.name_of_run.find('/') != std::string::npos) {
    return Status::InvalidArgument("meta.name_of_run: expected a name without '/' with " + std::to_string(n) +
                                   " channel combinations (their runs are named <name_of_run>/<folder>, and the "
                                   "dashboards take the name up to its first '/'), got '" + c.meta.name_of_run + "'");
  }
  for (const auto& [index, name] : c.meta.channel_dict) {
    if (name.find('/') != std::string::npos) {
      return Status::InvalidArgument("meta.channel_dict: channel " + std::to_string(index) +
                                     ": expected a name without '/' (it names the folder of each combination "
                                     "that holds it), got '" + name + "'");
    }
  }
  std::map<std::string, int64_t> seen;
  for (int64_t i = 0; i < n; ++i) {
    const std::string dir = c.combination_dir(i);
    if (auto [it, fresh] = seen.emplace(dir, i); !fresh) {
      return Status::InvalidArgument("meta.selected_channel_combination_per_run: entries " + std::to_string(it->second) +
                                     " and " + std::to_string(i) + " both train in the folder " + dir +
                                     " (their channel names joined by _ are equal); rename a channel in "
                                     "meta.channel_dict");
    }
  }
  return Status::Ok();
}

Status CrossCheck(const RunConfig& c) {
  if (auto s = CrossCheckCombinations(c); !s.ok()) return s;  // the others may read the run's channels
  if (auto s = CrossCheckTraining(c); !s.ok()) return s;
  if (auto s = CrossCheckService(c); !s.ok()) return s;
  return CrossCheckData(c);
}

}  // namespace

Status CheckConfig(const RunConfig& c) { return CrossCheck(c); }

std::string RunConfig::run_dir() const { return meta.output_dir + "/" + run_name(); }

std::string RunConfig::name_of_run_dir() const { return meta.output_dir + "/" + meta.name_of_run; }

std::string RunConfig::run_name() const {
  if (meta.selected_channel_combination_per_run.size() < 2) return meta.name_of_run;
  return meta.name_of_run + "/" + combination_dir(scdino.channel_combination);
}

std::string RunConfig::combination_dir(int64_t index) const {
  std::string names;
  for (const auto& [ch, name] : named_channels(index)) names += (names.empty() ? "" : "_") + name;
  return train.dino_vit_name + "_channel_" + names;
}

std::string RunConfig::stats_path() const {
  if (!scdino.stats_file.empty()) return scdino.stats_file;
  // Several combinations share one file beside their folders: scDINO
  // computes the statistics once, over every channel (run/source.h).
  if (meta.selected_channel_combination_per_run.size() > 1) {
    return name_of_run_dir() + "/channel_stats.json";
  }
  return run_dir() + "/channel_stats.json";
}

std::string RunConfig::token_path() const {
  return scdino.control.token_file.empty() ? run_dir() + "/control.token" : scdino.control.token_file;
}

std::string RunConfig::file_sd_dir() const {
  return scdino.metrics.file_sd_dir.empty() ? meta.output_dir + "/prometheus_targets" : scdino.metrics.file_sd_dir;
}

std::string RunConfig::features_dir(const std::string& name) const { return run_dir() + "/features/" + name; }

std::string RunConfig::eval_dir(const std::string& name) const { return run_dir() + "/eval/" + name; }

const std::vector<int64_t>& RunConfig::channels() const {
  return meta.selected_channel_combination_per_run.at(static_cast<size_t>(scdino.channel_combination));
}

std::vector<std::pair<int64_t, std::string>> RunConfig::named_channels() const {
  return named_channels(scdino.channel_combination);
}

std::vector<std::pair<int64_t, std::string>> RunConfig::named_channels(int64_t index) const {
  std::vector<std::pair<int64_t, std::string>> out;
  for (int64_t c : meta.selected_channel_combination_per_run.at(static_cast<size_t>(index))) {
    auto it = meta.channel_dict.find(c);
    out.emplace_back(c, it != meta.channel_dict.end() ? it->second : std::to_string(c));
  }
  return out;
}

Status RunConfig::CheckChannelCount(int64_t got, const std::string& what) const {
  const auto& sel = channels();
  if (got == static_cast<int64_t>(sel.size())) return Status::Ok();
  std::string list;
  for (size_t i = 0; i < sel.size(); ++i) list += (i ? "," : "") + std::to_string(sel[i]);
  return Status::InvalidArgument(what + " has " + std::to_string(got) + " input channel(s), but " + source_path +
                                 " selects " + std::to_string(sel.size()) + ": [" + list +
                                 "] (meta.selected_channel_combination_per_run[" +
                                 std::to_string(scdino.channel_combination) + "], scdino.channel_combination)");
}

model::DinoOptions RunConfig::dino_options(torch::Device device, bool bf16_supported) const {
  const auto& h = train.hyperparameters;
  model::DinoOptions o;
  o.vit = model::VitOptions::Preset(h.arch);
  if (h.embed_dim > 0) o.vit.embed_dim(h.embed_dim);
  if (h.depth > 0) o.vit.depth(h.depth);
  if (h.num_heads > 0) o.vit.num_heads(h.num_heads);
  o.vit.in_chans(static_cast<int64_t>(channels().size()))
      .patch_size(h.patch_size)
      .img_size(h.global_crops_size)
      .mlp_ratio(h.mlp_ratio)
      .drop_path_rate(h.drop_path_rate);
  o.out_dim = h.out_dim;
  o.head_hidden_dim = h.head_hidden_dim;
  o.head_bottleneck_dim = h.head_bottleneck_dim;
  o.head_nlayers = h.head_nlayers;
  o.norm_last_layer = h.norm_last_layer;
  o.local_crops_number = h.local_crops_number;
  o.warmup_teacher_temp = h.warmup_teacher_temp;
  o.teacher_temp = h.teacher_temp;
  o.warmup_teacher_temp_epochs = h.warmup_teacher_temp_epochs;
  o.epochs = train.epochs;
  o.student_temp = h.student_temp;
  o.center_momentum = h.center_momentum;
  o.centering = scdino.teacher_centering == "sinkhorn_knopp" ? model::TeacherCentering::kSinkhornKnopp
                                                             : model::TeacherCentering::kCenter;
  o.koleo_loss_weight = scdino.koleo_loss_weight;
  o.clip_grad = h.clip_grad;
  o.freeze_last_layer = h.freeze_last_layer;
  o.precision = precision(device, bf16_supported);
  o.loss_scaling = o.precision == model::Precision::kFp16;
  return o;
}

model::Precision RunConfig::precision(torch::Device device, bool bf16_supported) const {
  if (!device.is_cuda()) return model::Precision::kFp32;
  if (scdino.precision == "auto") {
    if (!train.hyperparameters.use_fp16) return model::Precision::kFp32;
    // GPUs before compute capability 8.0 (V100, T4) have no bf16 arithmetic;
    // fp16 with loss scaling is what scDINO's use_fp16 means there.
    return bf16_supported ? model::Precision::kBf16 : model::Precision::kFp16;
  }
  return model::ParsePrecision(scdino.precision).value();  // validated when read
}

model::ScheduleOptions RunConfig::schedule_options(int64_t niter_per_epoch, int64_t world_size) const {
  const auto& h = train.hyperparameters;
  model::ScheduleOptions s;
  s.lr = h.lr;
  s.min_lr = h.min_lr;
  s.warmup_epochs = h.warmup_epochs;
  s.weight_decay = h.weight_decay;
  s.weight_decay_end = h.weight_decay_end;
  s.momentum_teacher = h.momentum_teacher;
  s.epochs = train.epochs;
  s.niter_per_epoch = niter_per_epoch;
  s.global_batch = train.batch_size_per_gpu * world_size;
  return s;
}

data::MultiCropOptions RunConfig::multicrop_options() const {
  const auto& h = train.hyperparameters;
  const auto& a = scdino.augmentation;
  data::MultiCropOptions o;
  o.global_size = h.global_crops_size;
  o.local_size = h.local_crops_size;
  o.local_crops_number = h.local_crops_number;
  o.global_scale = h.global_crops_scale;
  o.local_scale = h.local_crops_scale;
  o.hflip_p = a.hflip_p;
  o.vflip_p = a.vflip_p;
  o.brightness_p = a.brightness_p;
  o.brightness = a.brightness;
  o.blur_p = a.blur_p;
  o.blur_sigma = a.blur_sigma;
  o.blur_kernel = a.blur_kernel;
  o.solarize_p = a.solarize_p;
  o.solarize_threshold = a.solarize_threshold;
  o.seed = static_cast<uint64_t>(meta.seed);
  // scdino's CPU kernels off: the crops too take the tensor ops a GPU runs.
  o.fused_cpu = scdino.cpu_gemm;
  return o;
}

data::ImagePrep RunConfig::image_prep() const {
  data::ImagePrep p;
  p.channels = channels();
  p.center_crop = meta.center_crop;
  return p;
}

data::BadImagePolicy RunConfig::bad_image_policy() const {
  return scdino.on_bad_image == "skip" ? data::BadImagePolicy::kSkip : data::BadImagePolicy::kFail;
}

StatusOr<RunConfig> ParseRunConfig(const std::string& text, const std::string& origin,
                                   const std::vector<std::string>& settings) {
  RunConfig c;
  c.source_path = origin;
  c.source_text = text;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": not valid YAML: line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return Status::InvalidArgument(origin + ": the file is empty; expected the sections meta and train_scDINO");
  std::string where = origin;
  if (!settings.empty()) {
    if (Status s = MergeSettings(settings, &root); !s.ok()) return Status::InvalidArgument(origin + ": " + s.message());
    for (const auto& setting : settings) where += " --set " + setting;
    YAML::Emitter merged;
    merged << root;
    c.source_text = "# " + where + "\n" + merged.c_str() + "\n";
  }
  Status s = ReadConfigKeys(root, &c);
  // With recipe: auto the keys checked against each other (warm-ups and
  // epochs, crops and patch) may still be derived: WithValues checks them.
  if (s.ok() && c.scdino.recipe != "auto") s = CrossCheck(c);
  if (s.ok() && c.scdino.recipe == "auto") s = CrossCheckCombinations(c);  // the run's folder: known at once
  if (!s.ok()) return Status::InvalidArgument(where + ": " + s.message());
  if (const auto combos = c.meta.selected_channel_combination_per_run.size();
      combos > 1 && c.given_keys.count("scdino.channel_combination") == 0) {
    // scDINO trains every combination; a run of scdino trains one (a job
    // array task one each): said, with how to train them all.
    c.warnings.push_back("meta.selected_channel_combination_per_run: " + std::to_string(combos - 1) + " of its " +
                         std::to_string(combos) + " combinations are not trained by this run: it trains entry 0 in " +
                         c.run_dir() + " (scdino.channel_combination); train every one, each a run of its own, with "
                         "sbatch --array=0-" + std::to_string(combos - 1) +
                         " deploy/slurm/train.sbatch FILE, or one with --set scdino.channel_combination=K "
                         "(docs/config.md)");
  }
  return c;
}

StatusOr<std::vector<std::pair<int64_t, std::string>>> NamedChannelsOf(const std::string& yaml_text,
                                                                        const std::string& origin) {
  auto config = ParseRunConfig(yaml_text, origin);
  if (!config.ok()) return config.status();
  return config->named_channels();
}

StatusOr<RunConfig> ParseRunConfig(const std::string& text, const std::string& origin) {
  return ParseRunConfig(text, origin, {});
}

StatusOr<RunConfig> LoadRunConfig(const std::string& path, const std::vector<std::string>& settings) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseRunConfig(*text, path, settings);
}

StatusOr<RunConfig> LoadRunConfig(const std::string& path) { return LoadRunConfig(path, {}); }

}  // namespace scdino::run
