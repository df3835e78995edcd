#include "eval/evaluation.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include "common/csv.h"
#include "common/files.h"
#include "common/progress.h"
#include "data/dataset.h"
#include "eval/clustering.h"
#include "eval/knn.h"
#include "eval/linear_probe.h"
#include "eval/plots.h"
#include "model/shape.h"

namespace scdino::eval {

using nlohmann::json;

namespace {

json ReportJson(const KnnScore& s) {
  const auto& r = s.report;
  json per_class = json::array();
  for (const auto& c : r.per_class) {
    per_class.push_back({{"class", c.name},
                         {"precision", c.precision},
                         {"recall", c.recall},
                         {"f1", c.f1},
                         {"support", c.support},
                         {"predicted", c.predicted}});
  }
  return {{"k", s.k},
          {"k_used", s.k_used},
          {"top1_accuracy", s.top1},
          {"top5_accuracy", s.top5_applies ? json(s.top5) : json(nullptr)},
          {"balanced_accuracy", r.balanced_accuracy},
          {"macro_precision", r.macro_precision},
          {"macro_recall", r.macro_recall},
          {"macro_f1", r.macro_f1},
          {"weighted_f1", r.weighted_f1},
          {"per_class", per_class},
          {"confusion_matrix", r.confusion}};
}

json LinearJson(const LinearProbeScore& l) {
  if (!l.done) return {{"skipped", l.skipped}};
  KnnScore as_knn;
  as_knn.top1 = l.top1;
  as_knn.top5_applies = false;
  as_knn.report = l.report;
  json j = ReportJson(as_knn);
  j.erase("k");
  j.erase("k_used");
  j.erase("top5_accuracy");
  j["C"] = l.c;
  j["C_grid"] = l.grid;
  j["validation_accuracy"] = l.validation;
  j["n_validation"] = l.n_validation;
  j["lbfgs_iterations"] = l.iterations;
  return j;
}

json ClusteringJson(const ClusteringScore& c) {
  if (!c.done) return {{"skipped", c.skipped}};
  return {{"method", "kmeans"}, {"k", c.k}, {"adjusted_rand_index", c.ari},
          {"normalized_mutual_information", c.nmi}, {"inertia", c.inertia}};
}

std::string ConfusionCsv(const std::vector<std::vector<int64_t>>& m, const std::vector<std::string>& classes) {
  std::ostringstream confusion;
  confusion << "true\\predicted";
  for (const auto& c : classes) confusion << ',' << CsvField(c);
  confusion << '\n';
  for (size_t t = 0; t < classes.size(); ++t) {
    confusion << CsvField(classes[t]);
    for (auto v : m[t]) confusion << ',' << v;
    confusion << '\n';
  }
  return confusion.str();
}

// The rows of a features directory, by split, and every row's class.
struct Rows {
  std::vector<int64_t> train, test, labels;
  std::vector<int64_t> y_true;  ///< the test rows' classes
  torch::Tensor label_tensor, train_idx, test_idx;
};

StatusOr<Rows> SplitRows(const features::FeatureSet& set) {
  Rows r;
  for (size_t i = 0; i < set.rows.size(); ++i) {
    (set.rows[i].split == data::Split::kTrain ? r.train : r.test).push_back(static_cast<int64_t>(i));
    r.labels.push_back(set.rows[i].class_index);
  }
  if (r.train.empty() || r.test.empty()) {
    return Status::InvalidArgument(set.dir + "/index.csv: kNN needs train and test rows, got " +
                                   std::to_string(r.train.size()) + " train and " + std::to_string(r.test.size()) +
                                   " test (see scdino.split)");
  }
  for (auto t : r.test) r.y_true.push_back(r.labels[static_cast<size_t>(t)]);
  r.label_tensor = torch::tensor(r.labels, torch::kInt64);
  r.train_idx = torch::tensor(r.train, torch::kInt64);
  r.test_idx = torch::tensor(r.test, torch::kInt64);
  return r;
}

// Weighted kNN of the test rows against the train rows, scored for every
// k of the options; false when stopped before it ended.
StatusOr<bool> ScoreKnn(const features::FeatureSet& set, const Rows& rows, const EvalOptions& o, EvalResult* result) {
  const auto classes = static_cast<int64_t>(set.classes.size());
  KnnOptions ko;
  ko.ks = o.ks;
  ko.temperature = o.temperature;
  ko.memory_bytes = o.knn_memory_bytes;
  ko.on_chunk = [&](int64_t done, int64_t total) {
    if (o.on_progress) o.on_progress(done, total);
    return o.control ? !o.control->HoldWhilePaused(o.stop_signal) : !(o.stop_signal && o.stop_signal());
  };
  if (o.log) *o.log << "scdino-eval: kNN of " << result->n_test << " test against " << result->n_train << " train rows\n";
  KnnResult knn;
  try {
    auto features = set.features.to(o.device);
    knn = WeightedKnn(features.index_select(0, rows.train_idx.to(o.device)),
                      rows.label_tensor.index_select(0, rows.train_idx).to(o.device),
                      features.index_select(0, rows.test_idx.to(o.device)), classes, ko);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(set.dir + ": " + e.what_without_backtrace());
  }
  if (!knn.completed) return false;
  for (size_t i = 0; i < o.ks.size(); ++i) {
    auto ranked = knn.ranked[i].to(torch::kCPU).contiguous();
    const int64_t keep = ranked.size(1);
    std::vector<int64_t> y_pred;
    std::vector<std::vector<int64_t>> lists;
    const int64_t* p = ranked.data_ptr<int64_t>();
    for (int64_t q = 0; q < ranked.size(0); ++q) {
      y_pred.push_back(p[q * keep]);
      lists.emplace_back(p + q * keep, p + (q + 1) * keep);
    }
    auto report = Evaluate(rows.y_true, y_pred, set.classes);
    if (!report.ok()) return report.status();
    auto top5 = TopKAccuracy(rows.y_true, lists, 5);
    if (!top5.ok()) return top5.status();
    result->scores.push_back({o.ks[i], knn.k_used[i], report->accuracy, *top5, classes > 5, *report});
    if (result->scores.back().top1 > result->scores[result->best].top1) result->best = i;
  }
  return true;
}

// The linear probe on the same split; false when stopped before it ended.
StatusOr<bool> Probe(const features::FeatureSet& set, const Rows& rows, const EvalOptions& o,
                     const std::function<bool()>& should_stop, EvalResult* result) {
  bool completed = true;
  if (!o.linear_probe) {
    result->linear.skipped = "scdino.evaluation.linear_probe is false";
  } else {
    LinearProbeOptions lo;
    lo.c_grid = o.linear_probe_c;
    lo.seed = o.seed;
    lo.should_stop = should_stop;
    ProgressLog probe_log(o.log, "scdino-eval: linear probe", "fits");
    lo.on_progress = [&](int64_t done, int64_t total) { probe_log.Report(done, total); };
    auto lp = LinearProbe(set.features.index_select(0, rows.train_idx), rows.label_tensor.index_select(0, rows.train_idx),
                          set.features.index_select(0, rows.test_idx), static_cast<int64_t>(set.classes.size()), lo);
    if (lp.ok()) {
      auto report = Evaluate(rows.y_true, lp->predicted, set.classes);
      if (!report.ok()) return report.status();
      result->linear = {true, "", lp->c, lp->grid, lp->validation, lp->n_validation, lp->iterations,
                        report->accuracy, *report};
    } else if (lp.status().code() == StatusCode::kAborted) {
      completed = false;
      result->linear.skipped = "stopped before the linear probe ended";
    } else if (lp.status().code() == StatusCode::kFailedPrecondition) {
      result->linear.skipped = lp.status().message();
    } else {
      return lp.status();
    }
  }
  if (!o.log) return completed;
  if (result->linear.done) {
    *o.log << "scdino-eval: linear probe top-1 " << FormatFixed(result->linear.top1, 3) << " (C " << result->linear.c
           << " of " << result->linear.grid.size() << " on " << result->linear.n_validation << " validation rows)\n";
  } else {
    *o.log << "scdino-eval: linear probe skipped: " << result->linear.skipped << "\n";
  }
  return completed;
}

// k-means of the test rows, as many clusters as they have classes; false
// when stopped before it ended.
StatusOr<bool> Cluster(const features::FeatureSet& set, const Rows& rows, const EvalOptions& o,
                       const std::function<bool()>& should_stop, EvalResult* result) {
  const std::set<int64_t> test_classes(rows.y_true.begin(), rows.y_true.end());
  if (!o.kmeans) {
    result->clustering.skipped = "scdino.evaluation.kmeans is false";
    return true;
  }
  if (test_classes.size() < 2) {
    result->clustering.skipped = "the test rows have " + std::to_string(test_classes.size()) +
                                 " class: cluster scores need at least two";
    return true;
  }
  KMeansOptions ko;
  ko.restarts = o.kmeans_restarts;
  ko.seed = o.seed;
  ko.should_stop = should_stop;
  ProgressLog kmeans_log(o.log, "scdino-eval: k-means", "restarts");
  ko.on_progress = [&](int64_t done, int64_t total) { kmeans_log.Report(done, total); };
  const auto k = static_cast<int64_t>(test_classes.size());
  auto km = KMeans(set.features.index_select(0, rows.test_idx), k, ko);
  if (!km.ok() && km.status().code() == StatusCode::kAborted) {
    result->clustering.skipped = "stopped before k-means ended";
    return false;
  }
  if (!km.ok()) return km.status();
  result->clustering = {true, "", k, AdjustedRandIndex(rows.y_true, km->assignment),
                        NormalizedMutualInformation(rows.y_true, km->assignment), km->inertia, km->assignment};
  if (o.log) *o.log << "scdino-eval: k-means (k " << k << ") of the test rows: ARI "
                    << FormatFixed(result->clustering.ari, 3) << ", NMI " << FormatFixed(result->clustering.nmi, 3)
                    << "\n";
  return true;
}

// The scores' tables (CSV) and confusion matrices (CSV and PNG).
Status WriteTablesAndFigures(const features::FeatureSet& set, const EvalOptions& o, EvalResult* result) {
  std::ostringstream summary, per_class;
  summary << "k,k_used,top1_accuracy,top5_accuracy,balanced_accuracy,macro_precision,macro_recall,macro_f1,weighted_f1\n";
  per_class << "k,class,precision,recall,f1,support,predicted\n";
  for (const auto& s : result->scores) {
    const auto& r = s.report;
    summary << s.k << ',' << s.k_used << ',' << FormatFixed(s.top1, 6) << ',' << (s.top5_applies ? FormatFixed(s.top5, 6) : std::string()) << ','
            << FormatFixed(r.balanced_accuracy, 6) << ',' << FormatFixed(r.macro_precision, 6) << ',' << FormatFixed(r.macro_recall, 6) << ','
            << FormatFixed(r.macro_f1, 6) << ',' << FormatFixed(r.weighted_f1, 6) << '\n';
    for (const auto& c : r.per_class) {
      per_class << s.k << ',' << CsvField(c.name) << ',' << FormatFixed(c.precision, 6) << ',' << FormatFixed(c.recall, 6) << ','
                << FormatFixed(c.f1, 6) << ',' << c.support << ',' << c.predicted << '\n';
    }
  }
  const auto& best = result->scores[result->best];
  std::vector<std::pair<std::string, std::string>> tables = {
      {"knn_results.csv", summary.str()},
      {"per_class.csv", per_class.str()},
      {"confusion_matrix.csv", ConfusionCsv(best.report.confusion, set.classes)}};
  if (result->linear.done) {
    tables.emplace_back("linear_probe_confusion_matrix.csv", ConfusionCsv(result->linear.report.confusion, set.classes));
  }
  for (const auto& [name, text] : tables) {
    if (auto s = WriteFileAtomic(o.out_dir + "/" + name, text); !s.ok()) return s;
    result->files.push_back(name);
  }
  const std::string run = set.dir.substr(set.dir.find_last_of('/') + 1);
  if (auto s = PlotConfusionMatrix(o.out_dir + "/confusion_matrix.png", best.report.confusion, set.classes,
                                   "kNN confusion matrix, " + run + ", k=" + std::to_string(best.k) + ", top-1 " +
                                       FormatFixed(100 * best.top1, 1) + "%");
      !s.ok()) {
    return s;
  }
  result->files.push_back("confusion_matrix.png");
  if (!result->linear.done) return Status::Ok();
  if (auto s = PlotConfusionMatrix(o.out_dir + "/linear_probe_confusion_matrix.png", result->linear.report.confusion,
                                   set.classes, "linear probe confusion matrix, " + run + ", C=" +
                                       FormatFixed(result->linear.c, result->linear.c < 1 ? 2 : 0) + ", top-1 " +
                                       FormatFixed(100 * result->linear.top1, 1) + "%");
      !s.ok()) {
    return s;
  }
  result->files.push_back("linear_probe_confusion_matrix.png");
  return Status::Ok();
}

// knn_results.json: everything, the embeddings' summary among it when
// they were made.
Status WriteResultsJson(const features::FeatureSet& set, const EvalOptions& o, EvalResult* result) {
  json j = {{"features", set.dir},
            {"metadata", json::parse(set.metadata_json, nullptr, false)},
            {"n_train", result->n_train},
            {"n_test", result->n_test},
            {"temperature", o.temperature},
            {"classes", set.classes},
            {"best_k", result->scores[result->best].k},
            {"knn", json::array()}};
  for (const auto& s : result->scores) j["knn"].push_back(ReportJson(s));
  j["linear_probe"] = LinearJson(result->linear);
  j["clustering"] = ClusteringJson(result->clustering);
  if (!result->embeddings.is_null()) j["embeddings"] = result->embeddings;
  if (auto s = WriteFileAtomic(o.out_dir + "/knn_results.json", j.dump(2) + "\n"); !s.ok()) return s;
  result->files.insert(result->files.begin(), "knn_results.json");
  return Status::Ok();
}

}  // namespace

StatusOr<EvalResult> RunEvaluation(const features::FeatureSet& set, const EvalOptions& o) {
  auto rows = SplitRows(set);
  if (!rows.ok()) return rows.status();
  if (auto s = MakeDirs(o.out_dir); !s.ok()) return s;
  EvalResult result;
  result.n_train = static_cast<int64_t>(rows->train.size());
  result.n_test = static_cast<int64_t>(rows->test.size());
  if (set.classes.size() == 1 && o.log) {
    *o.log << "scdino-eval: warning: " << set.dir << ": the features have one class ('" << set.classes[0]
           << "'): the kNN accuracy is 1 whatever the model learned and judges nothing; label the images "
              "(class folders, or scdino.index_csv) to evaluate them\n";
  }
  auto knn = ScoreKnn(set, *rows, o, &result);
  if (!knn.ok()) return knn.status();
  if (!*knn) return result;  // stopped in the kNN: nothing written

  // The linear probe and k-means; a stop during either still writes the
  // kNN's results, then ends.
  const std::function<bool()> should_stop = [&] {
    return o.control ? o.control->HoldWhilePaused(o.stop_signal) : (o.stop_signal && o.stop_signal());
  };
  auto probed = Probe(set, *rows, o, should_stop, &result);
  if (!probed.ok()) return probed.status();
  StatusOr<bool> clustered = true;
  if (*probed) {
    clustered = Cluster(set, *rows, o, should_stop, &result);
  } else {
    result.clustering.skipped = "stopped before k-means";
  }
  if (!clustered.ok()) return clustered.status();
  if (auto s = WriteTablesAndFigures(set, o, &result); !s.ok()) return s;
  // The embeddings last (the longest part); knn_results.json once, after
  // them or whatever ended them, so that it is there in every outcome.
  Status made = Status::Ok();
  if (*probed && *clustered) {
    EmbeddingOptions eo = o.embeddings;
    eo.seed = o.seed;
    eo.knn_memory_bytes = o.knn_memory_bytes;
    eo.log = o.log;
    eo.should_stop = should_stop;
    if (result.clustering.done) {
      eo.kmeans.assign(set.rows.size(), -1);
      for (size_t i = 0; i < rows->test.size(); ++i) {
        eo.kmeans[static_cast<size_t>(rows->test[i])] = result.clustering.assignment[i];
      }
    }
    auto views = WriteEmbeddings(set, rows->test, eo, o.out_dir);
    if (views.ok()) {
      result.embeddings = views->summary;
      result.files.insert(result.files.end(), views->files.begin(), views->files.end());
      result.completed = true;
    } else if (views.status().code() != StatusCode::kAborted) {
      made = views.status();  // stopped: what is written stays, and the run is not completed
    }
  }
  if (auto s = WriteResultsJson(set, o, &result); !s.ok()) return s;
  if (!made.ok()) return made;
  return result;
}

StatusOr<features::Backbone> BackboneOf(const features::FeatureSet& set, uint64_t seed, torch::Device device) {
  auto j = json::parse(set.metadata_json, nullptr, false);
  const std::string where = set.dir + "/metadata.json";
  if (!j.is_object() || !j.contains("checkpoint") || !j["checkpoint"].is_object() || !j.contains("model")) {
    return Status::DataLoss(where + ": no 'checkpoint'/'model' entries");
  }
  std::string path, key;
  try {
    path = j["checkpoint"].value("path", "");
    key = j["checkpoint"].value("key", "teacher");
  } catch (const json::exception& e) {
    return Status::DataLoss(where + ": 'checkpoint' entries are not strings: " + e.what());
  }
  if (key == "raw_pixels") return Status::FailedPrecondition("the raw pixels are not a model (no attention to map)");
  if (key == "random") {
    auto o = model::VitOptionsFromShapeJson(j["model"].dump(), where);
    if (!o.ok()) return o.status();
    return features::RandomBackbone(*o, seed, device);
  }
  return features::LoadBackbone(path, key, device);
}

StatusOr<features::FeaturePrep> PrepOf(const features::FeatureSet& set) {
  auto j = json::parse(set.metadata_json, nullptr, false);
  const std::string where = set.dir + "/metadata.json";
  try {
    features::FeaturePrep p;
    p.image.channels = j.at("channels").at("indices").get<std::vector<int64_t>>();
    p.image.center_crop = j.at("preprocessing").at("center_crop").get<int64_t>();
    p.resize = j.at("preprocessing").at("resize").get<int64_t>();
    p.mean = j.at("statistics").at("mean").get<std::vector<double>>();
    p.std = j.at("statistics").at("std").get<std::vector<double>>();
    return p;
  } catch (const json::exception& e) {
    return Status::DataLoss(where + ": preprocessing entries missing or malformed: " + e.what());
  }
}

std::string CheckpointTableCsv(const std::vector<CheckpointRow>& rows) {
  std::ostringstream o;
  o << "features,epoch,iteration,k,top1_accuracy,top5_accuracy,balanced_accuracy,macro_f1,weighted_f1\n";
  for (const auto& r : rows) {
    for (const auto& s : r.result.scores) {
      o << r.name << ',' << r.epoch << ',' << r.iteration << ',' << s.k << ',' << FormatFixed(s.top1, 6) << ','
        << (s.top5_applies ? FormatFixed(s.top5, 6) : std::string()) << ',' << FormatFixed(s.report.balanced_accuracy, 6) << ',' << FormatFixed(s.report.macro_f1, 6) << ','
        << FormatFixed(s.report.weighted_f1, 6) << '\n';
    }
  }
  return o.str();
}

std::string ProbeTableCsv(const std::vector<CheckpointRow>& rows) {
  std::ostringstream o;
  o << "features,epoch,iteration,linear_top1_accuracy,linear_balanced_accuracy,linear_macro_f1,linear_C,"
       "kmeans_k,kmeans_adjusted_rand_index,kmeans_nmi\n";
  for (const auto& r : rows) {
    const auto& l = r.result.linear;
    const auto& c = r.result.clustering;
    o << r.name << ',' << r.epoch << ',' << r.iteration << ',';
    if (l.done) {
      o << FormatFixed(l.top1, 6) << ',' << FormatFixed(l.report.balanced_accuracy, 6) << ','
        << FormatFixed(l.report.macro_f1, 6) << ',' << l.c;
    } else {
      o << ",,,";
    }
    o << ',';
    if (c.done) {
      o << c.k << ',' << FormatFixed(c.ari, 6) << ',' << FormatFixed(c.nmi, 6);
    } else {
      o << ",,";
    }
    o << '\n';
  }
  return o.str();
}

}  // namespace scdino::eval
