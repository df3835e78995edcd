#include "jobs/checkpoint_evaluator.h"

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "common/progress.h"
#include "common/files.h"
#include "eval/attention_maps.h"
#include "eval/combinations_report.h"
#include "eval/report.h"

namespace scdino::jobs {

// The evaluation library this job drives.
using eval::AttentionMapOptions;
using eval::BackboneOf;
using eval::CheckpointTableCsv;
using eval::CombinationsReportOptions;
using eval::ChooseAttentionSide;
using eval::EvalResult;
using eval::PrepOf;
using eval::ProbeTableCsv;
using eval::RunEvaluation;
using eval::WriteAttentionMaps;
using eval::WriteCombinationsReport;
using eval::WriteRunReport;

namespace {

std::string Fixed3(double v) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << v;
  return o.str();
}

void PrintTable(std::ostream& out, const std::string& name, const EvalResult& r, double temperature,
                const std::string& out_dir) {
  out << "\nkNN of " << name << " (" << r.n_test << " test vs " << r.n_train << " train, T " << temperature
      << "):\n   k   top-1   top-5  balanced  macro-F1\n";
  for (const auto& s : r.scores) {
    out << std::setw(4) << s.k << std::setw(8) << Fixed3(s.top1) << std::setw(8)
        << (s.top5_applies ? Fixed3(s.top5) : std::string("n/a")) << std::setw(10)
        << Fixed3(s.report.balanced_accuracy) << std::setw(10) << Fixed3(s.report.macro_f1)
        << (s.k_used != s.k ? "  (k capped at " + std::to_string(s.k_used) + ")" : "") << "\n";
  }
  if (r.linear.done) {
    out << "linear probe: top-1 " << Fixed3(r.linear.top1) << ", balanced " << Fixed3(r.linear.report.balanced_accuracy)
        << ", macro-F1 " << Fixed3(r.linear.report.macro_f1) << " (C " << r.linear.c << ")\n";
  } else {
    out << "linear probe: skipped (" << r.linear.skipped << ")\n";
  }
  if (r.clustering.done) {
    out << "k-means (k " << r.clustering.k << "): ARI " << Fixed3(r.clustering.ari) << ", NMI "
        << Fixed3(r.clustering.nmi) << "\n";
  }
  out << "results in " << out_dir << "/:";
  bool attention = false;
  for (const auto& f : r.files) {
    if (f.rfind("attention/", 0) == 0) {
      attention = true;
    } else {
      out << " " << f;
    }
  }
  out << (attention ? " attention/\n" : "\n");
}

}  // namespace

CheckpointEvaluator::CheckpointEvaluator(const run::RunConfig& config, EvaluatorOptions options)
    : config_(config), o_(std::move(options)) {}

EvalOptions CheckpointEvaluator::OptionsFor(const std::string& name) const {
  const auto& down = config_.downstream;
  const auto& ev = config_.scdino.evaluation;
  EvalOptions eo;
  eo.out_dir = config_.eval_dir(name);
  eo.ks = down.knn_n_neighbors;
  eo.temperature = down.knn_temperature;
  eo.knn_memory_bytes = ev.knn_memory_mb << 20;
  eo.device = o_.device;
  eo.embeddings.max_points = ev.embedding_points;
  eo.embeddings.tsne = ev.tsne;
  eo.embeddings.tsne_perplexity = ev.tsne_perplexity;
  eo.embeddings.tsne_iterations = ev.tsne_iterations;
  eo.embeddings.umap = ev.umap;
  auto& umap = eo.embeddings.umap_options;
  umap.n_neighbors = down.umap_n_neighbors;
  umap.min_dist = down.umap_min_dist;
  umap.n_components = down.umap_n_components;
  umap.metric = down.umap_metric;
  umap.spread = down.umap_spread;
  umap.epochs = down.umap_epochs;
  eo.embeddings.trustworthiness_points = ev.trustworthiness_points;
  eo.embeddings.threads = o_.threads;
  eo.seed = static_cast<uint64_t>(config_.meta.seed);
  eo.linear_probe = ev.linear_probe;
  eo.kmeans = ev.kmeans;
  eo.kmeans_restarts = ev.kmeans_restarts;
  eo.control = o_.control;
  eo.stop_signal = o_.stop_signal;
  eo.on_progress = o_.on_progress;
  eo.log = o_.log;
  return eo;
}

Status CheckpointEvaluator::Evaluate(const features::FeatureSet& set) {
  const std::string name = std::filesystem::path(set.dir).lexically_normal().filename().string();
  const EvalOptions eo = OptionsFor(name);
  if (o_.log) *o_.log << "scdino-eval: " << set.dir << " -> " << eo.out_dir << "\n";
  auto r = RunEvaluation(set, eo);
  if (!r.ok()) return r.status();
  if (!r->completed) return Status::Aborted("stopped before " + set.dir + " was evaluated");
  const auto& down = config_.downstream;
  if (o_.attention && down.attention_images_per_class > 0) {
    auto backbone = BackboneOf(set, static_cast<uint64_t>(config_.meta.seed), o_.device);
    auto prep = PrepOf(set);
    if (!backbone.ok() || !prep.ok()) {
      if (o_.log) {
        *o_.log << "scdino-eval: no attention maps for " << set.dir << ": "
                << (!backbone.ok() ? backbone.status() : prep.status()).message() << "\n";
      }
    } else {
      const auto side = ChooseAttentionSide(down.resize_attention_image ? down.attention_image_size : 0, prep->resize,
                                            backbone->vit->options().patch_size(),
                                            backbone->vit->options().num_heads(),
                                            config_.scdino.evaluation.attention_max_tokens);
      if (!side.warning.empty() && o_.log) *o_.log << "scdino-eval: warning: " << side.warning << "\n";
      prep->resize = side.side;
      AttentionMapOptions ao;
      ao.per_class = down.attention_images_per_class;
      ao.max_tokens = config_.scdino.evaluation.attention_max_tokens;
      ao.warn = [this](const std::string& w) {
        if (o_.log) *o_.log << "scdino-eval: warning: " << w << "\n";
      };
      for (auto c : prep->image.channels) {
        auto it = config_.meta.channel_dict.find(c);
        ao.channel_names.push_back(it == config_.meta.channel_dict.end() ? "channel " + std::to_string(c)
                                                                         : it->second);
      }
      ao.should_stop = [this] {
        return (o_.stop_signal && o_.stop_signal()) || (o_.control && o_.control->Requests().stop);
      };
      auto log = std::make_shared<ProgressLog>(o_.log, "scdino-eval: attention maps", "images");
      ao.on_progress = [log](int64_t done, int64_t total) { log->Report(done, total); };
      auto maps = WriteAttentionMaps(set, *backbone, *prep, eo.out_dir, ao);
      if (!maps.ok()) return maps.status();
      r->files.insert(r->files.end(), maps->begin(), maps->end());
    }
  }
  const auto meta = nlohmann::json::parse(set.metadata_json, nullptr, false);
  const auto ckpt = meta.is_object() && meta.contains("checkpoint") ? meta["checkpoint"] : nlohmann::json();
  auto number = [&](const char* k) {
    return ckpt.is_object() && ckpt.contains(k) && ckpt[k].is_number_integer() ? ckpt[k].get<int64_t>() : -1;
  };
  rows_.push_back({name, number("epoch"), number("iteration"), *r});
  if (o_.out) PrintTable(*o_.out, name, *r, eo.temperature, eo.out_dir);
  if (o_.on_evaluated) o_.on_evaluated(rows_.back());
  return Status::Ok();
}

StatusOr<std::string> CheckpointEvaluator::WriteTable() const {
  const std::string path = config_.run_dir() + "/eval/knn_per_checkpoint.csv";
  if (auto s = MakeDirs(config_.run_dir() + "/eval"); !s.ok()) return s;
  if (auto s = WriteFileAtomic(path, CheckpointTableCsv(rows_)); !s.ok()) return s;
  if (auto s = WriteFileAtomic(config_.run_dir() + "/eval/probes_per_checkpoint.csv", ProbeTableCsv(rows_)); !s.ok()) {
    return s;
  }
  return path;
}

StatusOr<std::string> CheckpointEvaluator::WriteReport() const {
  auto written = WriteRunReport({config_.run_name(), config_.run_dir(), config_.scdino.learning_margin,
                                 config_.stats_path(), config_.meta.channel_dict, config_.channels()});
  const auto& combinations = config_.meta.selected_channel_combination_per_run;
  if (!written.ok() || combinations.size() < 2) return written;
  // One of several combinations: the page that compares them all, too.
  CombinationsReportOptions co{config_.meta.name_of_run, config_.name_of_run_dir(), {}};
  for (size_t i = 0; i < combinations.size(); ++i) {
    std::string channels;
    for (const auto& [ch, name] : config_.named_channels(static_cast<int64_t>(i))) {
      channels += (channels.empty() ? "" : ", ") + name;
    }
    co.combinations.push_back({config_.combination_dir(static_cast<int64_t>(i)), channels});
  }
  if (auto s = WriteCombinationsReport(co); !s.ok()) return s.status();
  return written;
}

}  // namespace scdino::jobs
