#include "training/config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "common/files.h"

namespace scdino::training {
namespace {

// ---- A small schema walker: each section lists its keys and how to read
// them; unknown keys, wrong types and out-of-range values become one
// InvalidArgument naming the line, the key path, the value and the
// expectation.

std::string Shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

Status Bad(const YAML::Node& n, const std::string& path, const std::string& expected) {
  std::ostringstream ss;
  if (n.Mark().line >= 0) ss << "line " << n.Mark().line + 1 << ": ";
  ss << path << ": expected " << expected << ", got " << Shown(n);
  return Status::InvalidArgument(ss.str());
}

using Reader = std::function<Status(const YAML::Node&, const std::string&)>;

struct Key {
  std::string name;
  Reader read;
  std::vector<std::string> aliases = {};
};

Status ReadSection(const YAML::Node& node, const std::string& path, const std::vector<Key>& keys) {
  if (!node.IsMap()) return Bad(node, path, "a mapping of keys");
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string kpath = path.empty() ? k : path + "." + k;
    const Key* match = nullptr;
    for (const auto& key : keys) {
      if (key.name == k || std::find(key.aliases.begin(), key.aliases.end(), k) != key.aliases.end()) match = &key;
    }
    if (match == nullptr) {
      std::string known;
      for (const auto& key : keys) known += (known.empty() ? "" : ", ") + key.name;
      std::ostringstream ss;
      if (it->first.Mark().line >= 0) ss << "line " << it->first.Mark().line + 1 << ": ";
      ss << "unknown key '" << kpath << "' (known keys" << (path.empty() ? "" : " of " + path) << ": " << known << ")";
      return Status::InvalidArgument(ss.str());
    }
    if (!seen.insert(match->name).second) {
      return Bad(it->first, kpath, "'" + match->name + "' given only once (it also has another spelling)");
    }
    if (auto s = match->read(it->second, kpath); !s.ok()) return s;
  }
  return Status::Ok();
}

Reader Int(int64_t* out, int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) {
  return [=](const YAML::Node& n, const std::string& path) {
    int64_t v;
    std::string range = max == std::numeric_limits<int64_t>::max()
                            ? "an integer >= " + std::to_string(min)
                            : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v) || v < min || v > max) return Bad(n, path, range);
    *out = v;
    return Status::Ok();
  };
}

enum class Bound { kInclusive, kExclusive };

Reader Real(double* out, double min, Bound lo, double max = std::numeric_limits<double>::infinity(),
            Bound hi = Bound::kInclusive) {
  return [=](const YAML::Node& n, const std::string& path) {
    double v;
    std::ostringstream want;
    want << "a number " << (lo == Bound::kInclusive ? ">= " : "> ") << min;
    if (max != std::numeric_limits<double>::infinity()) want << " and " << (hi == Bound::kInclusive ? "<= " : "< ") << max;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) return Bad(n, path, want.str());
    const bool ok_lo = lo == Bound::kInclusive ? v >= min : v > min;
    const bool ok_hi = hi == Bound::kInclusive ? v <= max : v < max;
    if (!ok_lo || !ok_hi) return Bad(n, path, want.str());
    *out = v;
    return Status::Ok();
  };
}

Reader Bool(bool* out) {
  return [=](const YAML::Node& n, const std::string& path) {
    bool v;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return Bad(n, path, "true or false");
    *out = v;
    return Status::Ok();
  };
}

Reader Str(std::string* out, std::vector<std::string> choices = {}) {
  return [=](const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar()) return Bad(n, path, "a string");
    if (!choices.empty() && std::find(choices.begin(), choices.end(), n.Scalar()) == choices.end()) {
      std::string c;
      for (const auto& x : choices) c += (c.empty() ? "" : " | ") + x;
      return Bad(n, path, "one of " + c);
    }
    *out = n.Scalar();
    return Status::Ok();
  };
}

// A (min, max) pair within [lo, hi], min <= max; accepts !!python/tuple.
Reader Range2(std::array<double, 2>* out, double lo, double hi) {
  return [=](const YAML::Node& n, const std::string& path) {
    std::ostringstream want;
    want << "a pair [min, max] with " << lo << " < min <= max <= " << hi;
    double a, b;
    if (!n.IsSequence() || n.size() != 2 || !YAML::convert<double>::decode(n[0], a) ||
        !YAML::convert<double>::decode(n[1], b) || !(a > lo) || !(a <= b) || !(b <= hi)) {
      return Bad(n, path, want.str());
    }
    *out = {a, b};
    return Status::Ok();
  };
}

Reader Probabilities3(std::array<double, 3>* out) {
  return [=](const YAML::Node& n, const std::string& path) {
    const std::string want = "a list of 3 probabilities in [0, 1] (first global crop, second global crop, local crops)";
    std::array<double, 3> v;
    if (!n.IsSequence() || n.size() != 3) return Bad(n, path, want);
    for (size_t i = 0; i < 3; ++i) {
      if (!YAML::convert<double>::decode(n[i], v[i]) || !(v[i] >= 0 && v[i] <= 1)) return Bad(n, path, want);
    }
    *out = v;
    return Status::Ok();
  };
}

Reader IntList(std::vector<int64_t>* out, int64_t min) {
  return [=](const YAML::Node& n, const std::string& path) {
    std::vector<int64_t> v;
    const std::string want = "a non-empty list of integers >= " + std::to_string(min);
    if (!n.IsSequence() || n.size() == 0) return Bad(n, path, want);
    for (const auto& e : n) {
      int64_t x;
      if (!e.IsScalar() || !YAML::convert<int64_t>::decode(e, x) || x < min) return Bad(e, path, want);
      v.push_back(x);
    }
    *out = v;
    return Status::Ok();
  };
}

Reader Section(std::vector<Key> keys) {
  return [keys = std::move(keys)](const YAML::Node& n, const std::string& path) { return ReadSection(n, path, keys); };
}

Reader ChannelDict(std::map<int64_t, std::string>* out) {
  return [=](const YAML::Node& n, const std::string& path) {
    const std::string want = "a mapping of channel index (integer >= 0) to channel name";
    if (!n.IsMap()) return Bad(n, path, want);
    std::map<int64_t, std::string> m;
    for (auto it = n.begin(); it != n.end(); ++it) {
      int64_t idx;
      if (!YAML::convert<int64_t>::decode(it->first, idx) || idx < 0) return Bad(it->first, path, want);
      if (!it->second.IsScalar() || it->second.Scalar().empty()) {
        return Bad(it->second, path + "." + std::to_string(idx), "a channel name");
      }
      m[idx] = it->second.Scalar();
    }
    *out = m;
    return Status::Ok();
  };
}

// Channel combinations are resolved after the whole file is read, since
// names refer to channel_dict.
Reader Raw(std::optional<YAML::Node>* out) {
  return [=](const YAML::Node& n, const std::string&) {
    *out = n;
    return Status::Ok();
  };
}

Status ResolveCombinations(const YAML::Node& n, const std::string& path, const std::map<int64_t, std::string>& names,
                           std::vector<std::vector<int64_t>>* out) {
  const std::string want =
      "a non-empty list of channel combinations: digit strings like \"01234\", or lists of channel indices or "
      "channel_dict names";
  if (!n.IsSequence() || n.size() == 0) return Bad(n, path, want);
  std::vector<std::vector<int64_t>> all;
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& e = n[i];
    const std::string epath = path + "[" + std::to_string(i) + "]";
    std::vector<int64_t> combo;
    if (e.IsScalar()) {
      for (char ch : e.Scalar()) {
        if (ch < '0' || ch > '9') {
          return Bad(e, epath, "a string of channel digits (use a list such as [10, 11] for channels above 9)");
        }
        combo.push_back(ch - '0');
      }
    } else if (e.IsSequence()) {
      for (const auto& c : e) {
        int64_t idx;
        if (c.IsScalar() && YAML::convert<int64_t>::decode(c, idx) && idx >= 0) {
          combo.push_back(idx);
          continue;
        }
        bool found = false;
        for (const auto& [k, v] : names) {
          if (c.IsScalar() && v == c.Scalar()) {
            combo.push_back(k);
            found = true;
          }
        }
        if (!found) {
          std::string known;
          for (const auto& [k, v] : names) known += (known.empty() ? "" : ", ") + v;
          return Bad(c, epath, "a channel index or a name from meta.channel_dict (" +
                                   (known.empty() ? std::string("none defined") : known) + ")");
        }
      }
    } else {
      return Bad(e, epath, want);
    }
    if (combo.empty()) return Bad(e, epath, "at least one channel");
    std::set<int64_t> uniq(combo.begin(), combo.end());
    if (uniq.size() != combo.size()) return Bad(e, epath, "each channel at most once");
    all.push_back(combo);
  }
  *out = all;
  return Status::Ok();
}

Status CrossCheck(const TrainConfig& c) {
  const auto& h = c.train.hyperparameters;
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  const int64_t ncombo = static_cast<int64_t>(c.meta.selected_channel_combination_per_run.size());
  if (c.scdino.channel_combination >= ncombo) {
    return bad("scdino.channel_combination: expected an index below the " + std::to_string(ncombo) +
               " entries of meta.selected_channel_combination_per_run, got " +
               std::to_string(c.scdino.channel_combination));
  }
  if (h.warmup_epochs > c.train.epochs) {
    return bad("train_scDINO.hyperparameters.warmup_epochs: expected at most train_scDINO.epochs (" +
               std::to_string(c.train.epochs) + "), got " + std::to_string(h.warmup_epochs));
  }
  if (h.warmup_teacher_temp_epochs > c.train.epochs) {
    return bad("train_scDINO.hyperparameters.warmup_teacher_temp_epochs: expected at most train_scDINO.epochs (" +
               std::to_string(c.train.epochs) + "), got " + std::to_string(h.warmup_teacher_temp_epochs));
  }
  for (auto [key, size] : {std::pair<const char*, int64_t>{"global_crops_size", h.global_crops_size},
                           {"local_crops_size", h.local_crops_size}}) {
    if (size % h.patch_size != 0) {
      return bad(std::string("train_scDINO.hyperparameters.") + key + ": expected a multiple of patch_size (" +
                 std::to_string(h.patch_size) + "), got " + std::to_string(size));
    }
  }
  if (c.scdino.control.tls_cert_file.empty() != c.scdino.control.tls_key_file.empty()) {
    return bad("scdino.control: tls_cert_file and tls_key_file go together (both set: TLS; both empty: plaintext), "
               "got only " + std::string(c.scdino.control.tls_cert_file.empty() ? "tls_key_file" : "tls_cert_file"));
  }
  if (c.scdino.control.listen.find(':') == std::string::npos) {
    return bad("scdino.control.listen: expected host:port (port 0: any free port), got '" + c.scdino.control.listen +
               "'");
  }
  if (c.scdino.split.mode == "folders" && c.scdino.split.train_folder == c.scdino.split.test_folder) {
    return bad("scdino.split: train_folder and test_folder must differ, both are '" + c.scdino.split.train_folder +
               "'");
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

}  // namespace

std::string TrainConfig::run_dir() const { return meta.output_dir + "/" + meta.name_of_run; }

std::string TrainConfig::stats_path() const {
  return scdino.stats_file.empty() ? run_dir() + "/channel_stats.json" : scdino.stats_file;
}

std::string TrainConfig::token_path() const {
  return scdino.control.token_file.empty() ? run_dir() + "/control.token" : scdino.control.token_file;
}

std::string TrainConfig::file_sd_dir() const {
  return scdino.metrics.file_sd_dir.empty() ? meta.output_dir + "/prometheus_targets" : scdino.metrics.file_sd_dir;
}

std::string TrainConfig::features_dir(const std::string& name) const { return run_dir() + "/features/" + name; }

std::string TrainConfig::eval_dir(const std::string& name) const { return run_dir() + "/eval/" + name; }

const std::vector<int64_t>& TrainConfig::channels() const {
  return meta.selected_channel_combination_per_run.at(static_cast<size_t>(scdino.channel_combination));
}

model::DinoOptions TrainConfig::dino_options() const {
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
  o.clip_grad = h.clip_grad;
  o.freeze_last_layer = h.freeze_last_layer;
  o.precision = precision();
  o.loss_scaling = o.precision == model::Precision::kFp16;
  return o;
}

model::Precision TrainConfig::precision() const {
  if (scdino.device != "cuda") return model::Precision::kFp32;
  if (scdino.precision == "auto") {
    return train.hyperparameters.use_fp16 ? model::Precision::kBf16 : model::Precision::kFp32;
  }
  return model::ParsePrecision(scdino.precision).value();  // validated when read
}

model::ScheduleOptions TrainConfig::schedule_options(int64_t niter_per_epoch, int64_t world_size) const {
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

data::MultiCropOptions TrainConfig::multicrop_options() const {
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
  return o;
}

data::ImagePrep TrainConfig::image_prep() const {
  data::ImagePrep p;
  p.channels = channels();
  p.center_crop = meta.center_crop;
  return p;
}

data::BadImagePolicy TrainConfig::bad_image_policy() const {
  return scdino.on_bad_image == "skip" ? data::BadImagePolicy::kSkip : data::BadImagePolicy::kFail;
}

StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& origin) {
  TrainConfig c;
  c.source_path = origin;
  c.source_text = text;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": not valid YAML: line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return Status::InvalidArgument(origin + ": the file is empty; expected the sections meta and train_scDINO");
  auto& m = c.meta;
  auto& t = c.train;
  auto& h = c.train.hyperparameters;
  auto& d = c.downstream;
  auto& r = c.scdino;
  std::optional<YAML::Node> combos;
  constexpr auto kIn = Bound::kInclusive;
  constexpr auto kEx = Bound::kExclusive;
  const std::vector<Key> top = {
      {"meta", Section({
                   {"name_of_run", Str(&m.name_of_run)},
                   {"output_dir", Str(&m.output_dir)},
                   {"dataset_dir", Str(&m.dataset_dir)},
                   {"folder_depth_for_labels", Int(&m.folder_depth_for_labels, 0)},
                   {"train_datasetsplit_fraction", Real(&m.train_datasetsplit_fraction, 0, kEx, 1, kIn)},
                   {"seed", Int(&m.seed, 0)},
                   {"images_are_RGB", Bool(&m.images_are_RGB)},
                   {"channel_dict", ChannelDict(&m.channel_dict)},
                   {"selected_channel_combination_per_run", Raw(&combos)},
                   {"center_crop", Int(&m.center_crop, 0)},
               })},
      {"train_scDINO",
       Section({
           {"dino_vit_name", Str(&t.dino_vit_name)},
           {"fraction_for_mean_std_calc", Real(&t.fraction_for_mean_std_calc, 0, kEx, 1, kIn)},
           {"epochs", Int(&t.epochs, 1)},
           {"saveckp_freq", Int(&t.saveckp_freq, 1)},
           {"num_gpus", Int(&t.num_gpus, 1)},
           {"batch_size_per_gpu", Int(&t.batch_size_per_gpu, 1)},
           {"num_workers", Int(&t.num_workers, 0)},
           {"dist_url", Str(&t.dist_url)},
           {"hyperparameters",
            Section({
                {"arch", Str(&h.arch, {"vit_tiny", "vit_small", "vit_base"})},
                {"patch_size", Int(&h.patch_size, 1)},
                {"norm_last_layer", Bool(&h.norm_last_layer)},
                {"momentum_teacher", Real(&h.momentum_teacher, 0, kIn, 1, kIn)},
                {"use_bn_in_head", Bool(&h.use_bn_in_head)},
                {"warmup_teacher_temp", Real(&h.warmup_teacher_temp, 0, kEx)},
                {"teacher_temp", Real(&h.teacher_temp, 0, kEx), {"techer_temp"}},
                {"warmup_teacher_temp_epochs", Int(&h.warmup_teacher_temp_epochs, 0)},
                {"use_fp16", Bool(&h.use_fp16)},
                {"weight_decay", Real(&h.weight_decay, 0, kIn)},
                {"weight_decay_end", Real(&h.weight_decay_end, 0, kIn)},
                {"clip_grad", Real(&h.clip_grad, 0, kIn)},
                {"freeze_last_layer", Int(&h.freeze_last_layer, 0)},
                {"lr", Real(&h.lr, 0, kEx)},
                {"warmup_epochs", Int(&h.warmup_epochs, 0), {"warump_epochs"}},
                {"min_lr", Real(&h.min_lr, 0, kIn)},
                {"optimizer", Str(&h.optimizer, {"adamw"})},
                {"drop_path_rate", Real(&h.drop_path_rate, 0, kIn, 1, kEx)},
                {"global_crops_scale", Range2(&h.global_crops_scale, 0, 1)},
                {"local_crops_number", Int(&h.local_crops_number, 0)},
                {"local_crops_scale", Range2(&h.local_crops_scale, 0, 1)},
                {"global_crops_size", Int(&h.global_crops_size, 1)},
                {"local_crops_size", Int(&h.local_crops_size, 1)},
                {"out_dim", Int(&h.out_dim, 1)},
                {"head_hidden_dim", Int(&h.head_hidden_dim, 1)},
                {"head_bottleneck_dim", Int(&h.head_bottleneck_dim, 1)},
                {"head_nlayers", Int(&h.head_nlayers, 1)},
                {"embed_dim", Int(&h.embed_dim, 1)},
                {"depth", Int(&h.depth, 1)},
                {"num_heads", Int(&h.num_heads, 1)},
                {"mlp_ratio", Real(&h.mlp_ratio, 0, kEx)},
                {"student_temp", Real(&h.student_temp, 0, kEx)},
                {"center_momentum", Real(&h.center_momentum, 0, kIn, 1, kIn)},
            })},
       })},
      {"downstream_analyses",
       Section({
           {"compute_cls_features", Section({
                                        {"normalize", Bool(&d.normalize)},
                                        {"num_gpus", Int(&d.features_num_gpus, 1)},
                                        {"batch_size_per_gpu", Int(&d.features_batch_size_per_gpu, 1)},
                                        {"num_workers", Int(&d.features_num_workers, 0)},
                                        {"checkpoint_key", Str(&d.checkpoint_key, {"teacher", "student"})},
                                        {"resize", Bool(&d.resize)},
                                        {"resize_length", Int(&d.resize_length, 1)},
                                    })},
           {"attention_visualisation", Section({
                                           {"num_images_per_class", Int(&d.attention_images_per_class, 0)},
                                           {"resize_attention_image", Bool(&d.resize_attention_image)},
                                           {"image_size", Int(&d.attention_image_size, 1)},
                                       })},
           {"kNN", Section({{"global", Section({
                                           {"n_neighbors", IntList(&d.knn_n_neighbors, 1)},
                                           {"temperature", Real(&d.knn_temperature, 0, kEx)},
                                       })}})},
           {"umap_eval", Section({
                             {"n_neighbors", Int(&d.umap_n_neighbors, 2)},
                             {"min_dist", Real(&d.umap_min_dist, 0, kIn)},
                             {"n_components", Int(&d.umap_n_components, 1)},
                             {"metric", Str(&d.umap_metric)},
                             {"spread", Real(&d.umap_spread, 0, kEx)},
                             {"epochs", Int(&d.umap_epochs, 1)},
                             {"topometry_plots", Bool(&d.umap_topometry_plots)},
                         })},
       })},
      {"scdino", Section({
                     {"device", Str(&r.device, {"cpu", "cuda"})},
                     {"precision", Str(&r.precision, {"auto", "fp32", "bf16", "fp16"})},
                     {"threads", Int(&r.threads, 0)},
                     {"data_source", Str(&r.data_source, {"folder", "csv", "synthetic"})},
                     {"index_csv", Str(&r.index_csv)},
                     {"on_bad_image", Str(&r.on_bad_image, {"fail", "skip"})},
                     {"on_nonfinite_loss", Str(&r.on_nonfinite_loss, {"stop", "skip"})},
                     {"distributed_timeout_s", Int(&r.distributed_timeout_s, 1)},
                     {"bucket_mb", Int(&r.bucket_mb, 1)},
                     {"cache_images", Bool(&r.cache_images)},
                     {"prefetch_batches", Int(&r.prefetch_batches, 1)},
                     {"stats_file", Str(&r.stats_file)},
                     {"augmentation", Section({
                                          {"hflip_p", Real(&r.augmentation.hflip_p, 0, kIn, 1, kIn)},
                                          {"vflip_p", Real(&r.augmentation.vflip_p, 0, kIn, 1, kIn)},
                                          {"brightness_p", Real(&r.augmentation.brightness_p, 0, kIn, 1, kIn)},
                                          {"brightness", Range2(&r.augmentation.brightness, 0, 100)},
                                          {"blur_p", Probabilities3(&r.augmentation.blur_p)},
                                          {"blur_sigma", Range2(&r.augmentation.blur_sigma, 0, 100)},
                                          {"blur_kernel", Int(&r.augmentation.blur_kernel, 1, 31)},
                                          {"solarize_p", Real(&r.augmentation.solarize_p, 0, kIn, 1, kIn)},
                                          {"solarize_threshold", Real(&r.augmentation.solarize_threshold, 0, kIn, 1, kIn)},
                                      })},
                     {"channel_combination", Int(&r.channel_combination, 0)},
                     {"control", Section({
                                     {"enabled", Bool(&r.control.enabled)},
                                     {"listen", Str(&r.control.listen)},
                                     {"token_file", Str(&r.control.token_file)},
                                     {"tls_cert_file", Str(&r.control.tls_cert_file)},
                                     {"tls_key_file", Str(&r.control.tls_key_file)},
                                 })},
                     {"metrics", Section({
                                     {"enabled", Bool(&r.metrics.enabled)},
                                     {"listen", Str(&r.metrics.listen)},
                                     {"port", Int(&r.metrics.port, 0, 65535)},
                                     {"file_sd_dir", Str(&r.metrics.file_sd_dir)},
                                 })},
                     {"split", Section({
                                   {"mode", Str(&r.split.mode, {"fraction", "folders"})},
                                   {"train_folder", Str(&r.split.train_folder)},
                                   {"test_folder", Str(&r.split.test_folder)},
                               })},
                     {"features", Section({
                                      {"shard_size", Int(&r.features.shard_size, 1)},
                                      {"write_raw", Bool(&r.features.write_raw)},
                                  })},
                     {"evaluation", Section({
                                        {"knn_memory_mb", Int(&r.evaluation.knn_memory_mb, 1)},
                                        {"tsne_points", Int(&r.evaluation.tsne_points, 0)},
                                        {"tsne_perplexity", Real(&r.evaluation.tsne_perplexity, 1, kIn, 1000, kIn)},
                                        {"tsne_iterations", Int(&r.evaluation.tsne_iterations, 1)},
                                    })},
                     {"synthetic", Section({
                                       {"classes", Int(&r.synthetic.classes, 1)},
                                       {"per_class", Int(&r.synthetic.per_class, 1)},
                                       {"channels", Int(&r.synthetic.channels, 1)},
                                       {"size", Int(&r.synthetic.size, 8)},
                                       {"seed", Int(reinterpret_cast<int64_t*>(&r.synthetic.seed), 0)},
                                   })},
                 })},
  };
  Status s = ReadSection(root, "", top);
  if (s.ok() && combos) {
    s = ResolveCombinations(*combos, "meta.selected_channel_combination_per_run", m.channel_dict,
                            &m.selected_channel_combination_per_run);
  }
  if (s.ok()) s = CrossCheck(c);
  if (!s.ok()) return Status::InvalidArgument(origin + ": " + s.message());
  return c;
}

StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseTrainConfig(*text, path);
}

}  // namespace scdino::training
