#include "eval/embedding_figures.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "common/csv.h"
#include "common/files.h"
#include "common/progress.h"
#include "data/split.h"
#include "eval/embedding.h"
#include "eval/knn.h"
#include "eval/plots.h"
#include "eval/trustworthiness.h"
#include "eval/tsne.h"
#include "eval/umap.h"
#include "features/anndata.h"

namespace scdino::eval {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One computed embedding: its name in files and obsm, its coordinates.
struct View {
  std::string name;   // "pca", "tsne", "umap"
  std::string title;  // for the figure
  int64_t cols = 2;
  std::vector<float> xy;
  std::string x_label, y_label;
};

// The first two columns of an n x cols layout.
std::vector<float> FirstTwo(const View& v) {
  if (v.cols == 2) return v.xy;
  std::vector<float> out;
  const size_t n = v.xy.size() / static_cast<size_t>(v.cols);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(v.xy[i * v.cols]);
    out.push_back(v.cols > 1 ? v.xy[i * v.cols + 1] : 0.0f);
  }
  return out;
}

// A compressed-row matrix from per-row (column, value) lists, each row's
// columns sorted (scipy's canonical form).
features::ObspMatrix Csr(const std::string& name, std::vector<std::vector<std::pair<int64_t, float>>> rows) {
  features::ObspMatrix m;
  m.name = name;
  m.indptr.push_back(0);
  for (auto& row : rows) {
    std::sort(row.begin(), row.end());
    for (const auto& [col, value] : row) {
      m.indices.push_back(col);
      m.data.push_back(value);
    }
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  return m;
}

// What scanpy's pp.neighbors (method "umap", Euclidean) leaves in an
// AnnData, from the Euclidean neighbour graph: obsp['distances'] (each
// row's n_neighbors - 1 nearest), obsp['connectivities'] (UMAP's fuzzy
// simplicial set) and uns['neighbors'] naming them and the parameters, so
// that sc.tl.leiden or sc.tl.umap use them as they are.
Status ScanpyNeighbors(const NeighborGraph& g, int64_t n_neighbors, int threads, features::AnnData* a) {
  const int64_t kuse = std::min(n_neighbors - 1, g.n - 1);
  std::vector<std::vector<std::pair<int64_t, float>>> distances(static_cast<size_t>(g.n));
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t r = 0; r < kuse; ++r) {
      distances[i].push_back({static_cast<int64_t>(g.indices[i * g.k + r]), g.distances[i * g.k + r]});
    }
  }
  auto fuzzy = FuzzySimplicialSet(g, n_neighbors, threads);
  if (!fuzzy.ok()) return fuzzy.status();
  std::vector<std::vector<std::pair<int64_t, float>>> connectivities(static_cast<size_t>(g.n));
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t e = fuzzy->offsets[i]; e < fuzzy->offsets[i + 1]; ++e) {
      connectivities[i].push_back({fuzzy->cols[e], fuzzy->vals[e]});
    }
  }
  a->obsp.push_back(Csr("distances", std::move(distances)));
  a->obsp.push_back(Csr("connectivities", std::move(connectivities)));
  features::UnsDict params{
      "params", {{"method", "umap"}, {"metric", "euclidean"}}, {{"n_neighbors", n_neighbors}}, {}, {}, {}};
  a->uns_dicts.push_back(
      {"neighbors", {{"connectivities_key", "connectivities"}, {"distances_key", "distances"}}, {}, {}, {}, {params}});
  return Status::Ok();
}

// The neighbour graph scanpy's entries come from: the Euclidean one, with
// UMAP's neighbourhood when UMAP ran, else scanpy's default of 15.
struct ScanpyGraph {
  const NeighborGraph* graph = nullptr;  ///< null: none was computed
  int64_t n_neighbors = 15;
};

Status WriteCoordinates(const features::FeatureSet& set, const std::vector<int64_t>& rows, const torch::Tensor& x,
                        const std::vector<View>& views, const json& summary, const std::vector<int64_t>& kmeans,
                        const std::array<double, 2>& pca_variance_ratio, const ScanpyGraph& neighbors, int threads,
                        const std::string& out_dir) {
  std::ostringstream csv;
  csv << "index,path,class_name";
  for (const auto& v : views) {
    for (int64_t c = 0; c < v.cols; ++c) csv << ',' << v.name << '_' << c + 1;
  }
  csv << '\n';
  features::AnnData a;
  a.n_obs = static_cast<int64_t>(rows.size());
  a.n_vars = x.size(1);
  a.X.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  features::ObsColumn path{"path", {}, {}, false}, cls{"class_name", {}, {}, true}, idx{"class_index", {}, {}, false},
      split{"split", {}, {}, true}, cluster{"kmeans", {}, {}, true};
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = set.rows[static_cast<size_t>(rows[i])];
    csv << rows[i] << ',' << CsvField(r.path) << ',' << CsvField(r.class_name);
    for (const auto& v : views) {
      for (int64_t c = 0; c < v.cols; ++c) csv << ',' << v.xy[i * v.cols + c];
    }
    csv << '\n';
    a.obs_names.push_back(std::to_string(rows[i]));
    path.strings.push_back(r.path);
    cls.strings.push_back(r.class_name);
    idx.ints.push_back(r.class_index);
    split.strings.push_back(data::SplitName(r.split));
    if (!kmeans.empty()) {
      const int64_t k = kmeans[static_cast<size_t>(rows[i])];
      cluster.strings.push_back(k < 0 ? "none" : std::to_string(k));
    }
  }
  a.obs = {path, cls, idx, split};
  if (!kmeans.empty()) a.obs.push_back(cluster);
  for (int64_t i = 0; i < a.n_vars; ++i) a.var_names.push_back("cls_" + std::to_string(i));
  for (const auto& v : views) a.obsm.push_back({"X_" + v.name, v.cols, v.xy});
  a.uns_strings = {{"scdino_embeddings", summary.dump()}, {"features", set.dir}};
  // scanpy's own entries: uns['pca'] beside obsm['X_pca'], and the graph.
  a.uns_dicts.push_back({"pca", {}, {}, {}, {{"variance_ratio", {pca_variance_ratio[0], pca_variance_ratio[1]}}}, {}});
  if (neighbors.graph) {
    if (auto s = ScanpyNeighbors(*neighbors.graph, neighbors.n_neighbors, threads, &a); !s.ok()) return s;
  }
  if (auto s = WriteFileAtomic(out_dir + "/embeddings.csv", csv.str()); !s.ok()) return s;
  return features::WriteH5ad(out_dir + "/embeddings.h5ad", a);
}

}  // namespace

std::vector<int64_t> StratifiedSubsample(const std::vector<int64_t>& rows, const std::vector<int64_t>& labels,
                                         int64_t limit, uint64_t seed) {
  const auto n = static_cast<int64_t>(rows.size());
  if (limit <= 0 || n <= limit) return rows;
  std::map<int64_t, std::vector<int64_t>> by_class;
  for (size_t i = 0; i < rows.size(); ++i) by_class[labels[i]].push_back(rows[i]);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  for (auto& [c, members] : by_class) {
    std::shuffle(members.begin(), members.end(), rng);
    const auto take = std::max<int64_t>(1, static_cast<int64_t>(members.size()) * limit / n);
    out.insert(out.end(), members.begin(), members.begin() + std::min<int64_t>(take, members.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Progress lines at a bounded rate, with the rate and an ETA (common/progress.h).
std::function<void(int64_t, int64_t)> Progress(const EmbeddingOptions& o, const std::string& what, const char* unit) {
  auto log = std::make_shared<ProgressLog>(o.log, std::string("scdino-eval: ") + what, unit);
  return [log](int64_t done, int64_t total) { log->Report(done, total); };
}

// Barnes-Hut t-SNE over the neighbour graph, started from the PCA layout
// (scikit-learn's init="pca", rescaled inside).
StatusOr<View> TsneView(const NeighborGraph& graph, int64_t n, double perplexity, const std::vector<float>& pca_xy,
                        const EmbeddingOptions& o, const std::string& title, nlohmann::json* summary) {
  if (o.log) *o.log << "scdino-eval: t-SNE of " << n << " rows (Barnes-Hut, perplexity " << perplexity << ")\n";
  BarnesHutTsneOptions to;
  to.perplexity = perplexity;
  to.iterations = o.tsne_iterations;
  to.initial_layout = pca_xy;
  to.threads = o.threads;
  to.seed = o.seed;
  to.should_stop = o.should_stop;
  to.on_progress = Progress(o, "t-SNE", "iterations");
  const auto t0 = Clock::now();
  auto tsne = BarnesHutTsne(graph, to);
  if (!tsne.ok()) return tsne.status();
  (*summary)["tsne"] = {{"seconds", Since(t0)}, {"perplexity", tsne->perplexity}, {"kl_divergence", tsne->kl_divergence}};
  return View{"tsne", title, 2, tsne->y, "t-SNE 1", "t-SNE 2"};
}

// UMAP over the neighbour graph (for the cosine metric, the graph of the
// unit rows: on them 1 - cos = |a - b|^2 / 2, the same neighbours).
StatusOr<View> UmapView(const NeighborGraph& graph, const torch::Tensor& x, int64_t umap_k,
                        const std::vector<float>& pca_xy, const EmbeddingOptions& o, const std::string& title,
                        nlohmann::json* summary) {
  UmapOptions uo = o.umap_options;
  uo.n_neighbors = umap_k;
  uo.seed = o.seed;
  uo.threads = o.threads;
  uo.should_stop = o.should_stop;
  uo.on_progress = Progress(o, "UMAP", "epochs");
  uo.on_spectral_progress = Progress(o, "UMAP spectral initialisation", "eigenvectors");
  if (uo.n_components == 2) uo.initial_layout = pca_xy;  // the fallback of the spectral start
  NeighborGraph umap_graph = graph;
  if (o.umap_options.metric == "cosine") {
    auto unit = torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(1));
    auto g = NearestNeighborGraph(unit, umap_graph.k, o.knn_memory_bytes, o.should_stop);
    if (!g.ok()) return g.status();
    umap_graph = std::move(g).value();
    for (auto& v : umap_graph.distances) v = v * v / 2;
  }
  const int64_t n = x.size(0);
  if (o.log) {
    *o.log << "scdino-eval: UMAP of " << n << " rows (" << o.umap_options.metric << ", " << umap_k << " neighbours)\n";
  }
  const auto t0 = Clock::now();
  auto umap = Umap(umap_graph, uo);
  if (!umap.ok()) return umap.status();
  if (!umap->init_note.empty() && o.log) *o.log << "scdino-eval: UMAP initialisation: " << umap->init_note << "\n";
  (*summary)["umap"] = {{"seconds", Since(t0)}, {"init", umap->init}, {"epochs", umap->epochs},
                        {"n_neighbors", umap_k}, {"metric", o.umap_options.metric}};
  return View{"umap", title, o.umap_options.n_components, umap->embedding, "UMAP 1", "UMAP 2"};
}

// How well each view keeps the neighbourhoods of the features, on a
// stratified subsample of the rows; into the summary.
Status ScoreTrustworthiness(const std::vector<View>& views, const std::vector<int64_t>& rows,
                            const std::vector<int64_t>& row_labels, const std::vector<float>& xv, int64_t d,
                            const EmbeddingOptions& o, nlohmann::json* summary) {
  const auto tw_rows = StratifiedSubsample(rows, row_labels, o.trustworthiness_points, o.seed + 1);
  const auto m = static_cast<int64_t>(tw_rows.size());
  const int64_t tk = std::min<int64_t>(o.trustworthiness_k, (m - 1) / 2);
  if (tk < 1) return Status::Ok();
  std::vector<int64_t> local;  // positions of tw_rows within rows
  for (size_t i = 0, j = 0; i < rows.size() && j < tw_rows.size(); ++i) {
    if (rows[i] == tw_rows[j]) local.push_back(static_cast<int64_t>(i)), ++j;
  }
  std::vector<float> xs;
  for (auto i : local) xs.insert(xs.end(), xv.begin() + i * d, xv.begin() + (i + 1) * d);
  for (const auto& v : views) {
    std::vector<float> ys;
    for (auto i : local) ys.insert(ys.end(), v.xy.begin() + i * v.cols, v.xy.begin() + (i + 1) * v.cols);
    TrustworthinessOptions tw;
    tw.k = tk;
    tw.threads = o.threads;
    tw.should_stop = o.should_stop;
    tw.on_progress = Progress(o, v.name + " trustworthiness", "tiles");
    auto t = Trustworthiness(xs, m, d, ys, v.cols, tw);
    if (!t.ok()) return t.status();
    (*summary)[v.name]["trustworthiness"] = *t;
    (*summary)[v.name]["trustworthiness_k"] = tk;
    (*summary)[v.name]["trustworthiness_rows"] = m;
    if (o.log) *o.log << "scdino-eval: " << v.name << " trustworthiness(" << tk << ") " << FormatFixed(*t, 4) << "\n";
  }
  return Status::Ok();
}

// One figure a view, coloured by class, with its trustworthiness in the
// title; then the last view (UMAP when drawn) again, coloured by k-means
// cluster: beside the class colours it shows which classes the clusters
// merge. The files written, into `files`.
Status DrawViews(const std::vector<View>& views, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& row_labels, const std::vector<std::string>& classes,
                 const EmbeddingOptions& o, const nlohmann::json& summary, const std::string& out_dir,
                 std::vector<std::string>* files) {
  for (const auto& v : views) {
    if (o.should_stop && o.should_stop()) return Status::Aborted("stopped before the figures were drawn");
    const std::string file = v.name + ".png";
    std::string title = v.title;
    if (summary[v.name].contains("trustworthiness")) {
      title += ", trustworthiness " + FormatFixed(summary[v.name]["trustworthiness"].get<double>(), 3);
    }
    if (auto s = PlotEmbedding(out_dir + "/" + file, FirstTwo(v), row_labels, classes, title, v.x_label, v.y_label);
        !s.ok()) {
      return s;
    }
    files->push_back(file);
  }
  if (o.kmeans.empty() || views.empty()) return Status::Ok();
  const View& v = views.back();
  std::vector<int64_t> clusters;
  int64_t k = 0;
  for (auto r : rows) {
    clusters.push_back(o.kmeans[static_cast<size_t>(r)]);
    k = std::max(k, clusters.back() + 1);
  }
  std::vector<std::string> names;
  for (int64_t c = 0; c < k; ++c) names.push_back("cluster " + std::to_string(c));
  const std::string file = v.name + "_kmeans.png";
  if (auto s = PlotEmbedding(out_dir + "/" + file, FirstTwo(v), clusters, names,
                             v.title + ", coloured by k-means cluster (k " + std::to_string(k) + ")", v.x_label,
                             v.y_label);
      !s.ok()) {
    return s;
  }
  files->push_back(file);
  return Status::Ok();
}

}  // namespace

StatusOr<EmbeddingResult> WriteEmbeddings(const features::FeatureSet& set, const std::vector<int64_t>& all_rows,
                                          const EmbeddingOptions& o, const std::string& out_dir) {
  EmbeddingResult result;
  std::vector<int64_t> labels;
  for (auto r : all_rows) labels.push_back(set.rows[static_cast<size_t>(r)].class_index);
  const auto rows = StratifiedSubsample(all_rows, labels, o.max_points, o.seed);
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> row_labels;
  for (auto r : rows) row_labels.push_back(set.rows[static_cast<size_t>(r)].class_index);
  const std::string name = set.dir.substr(set.dir.find_last_of('/') + 1);
  result.summary = {{"rows", n}, {"of", all_rows.size()}};
  if (n < 3) {
    if (o.log) *o.log << "scdino-eval: " << n << " test rows: too few for 2-D embeddings\n";
    return result;
  }
  // t-SNE and UMAP need a neighbourhood; PCA is drawn from 3 rows on.
  const bool do_tsne = o.tsne && n >= 5, do_umap = o.umap && n >= 5;
  if ((o.tsne || o.umap) && n < 5 && o.log) {
    *o.log << "scdino-eval: " << n << " test rows: PCA only (t-SNE and UMAP need at least 5)\n";
  }
  auto x = set.features.index_select(0, torch::tensor(rows, torch::kInt64)).to(torch::kCPU, torch::kFloat32).contiguous();
  const int64_t d = x.size(1);
  const std::vector<float> xv(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  const std::string of = std::to_string(n) + (n < static_cast<int64_t>(all_rows.size())
                                                  ? " of " + std::to_string(all_rows.size()) + " test cells"
                                                  : " test cells");
  std::vector<View> views;
  const auto t0 = Clock::now();
  auto pca = Pca2(xv, n, d);
  if (!pca.ok()) return pca.status();
  views.push_back({"pca", "PCA of " + of + ", " + name, 2, pca->xy,
                   "PC1 (" + FormatFixed(100 * pca->explained_variance_ratio[0], 1) + "% of variance)",
                   "PC2 (" + FormatFixed(100 * pca->explained_variance_ratio[1], 1) + "% of variance)"});
  result.summary["pca"] = {{"seconds", Since(t0)}, {"explained_variance_ratio", pca->explained_variance_ratio}};

  // One Euclidean neighbour graph, deep enough for both t-SNE and UMAP.
  const double perplexity = std::min(o.tsne_perplexity, std::max(1.0, (n - 1) / 3.0));
  const int64_t umap_k = std::min(o.umap_options.n_neighbors, n);
  int64_t k = 0;
  if (do_tsne) k = std::max<int64_t>(k, static_cast<int64_t>(3 * perplexity + 1));
  if (do_umap) k = std::max<int64_t>(k, umap_k - 1);
  k = std::min(k, n - 1);
  NeighborGraph graph;
  if (k >= 1) {
    const auto g0 = Clock::now();
    auto g = NearestNeighborGraph(x, k, o.knn_memory_bytes, o.should_stop, Progress(o, "neighbour graph", "rows"));
    if (!g.ok()) return g.status();
    graph = std::move(g).value();
    result.summary["neighbor_graph"] = {{"k", k}, {"seconds", Since(g0)}};
  }
  if (do_tsne) {
    auto v = TsneView(graph, n, perplexity, pca->xy, o, "t-SNE of " + of + ", " + name, &result.summary);
    if (!v.ok()) return v.status();
    views.push_back(std::move(v).value());
  }
  if (do_umap) {
    auto v = UmapView(graph, x, umap_k, pca->xy, o, "UMAP of " + of + ", " + name, &result.summary);
    if (!v.ok()) return v.status();
    views.push_back(std::move(v).value());
  }
  if (auto s = ScoreTrustworthiness(views, rows, row_labels, xv, d, o, &result.summary); !s.ok()) return s;
  if (auto s = DrawViews(views, rows, row_labels, set.classes, o, result.summary, out_dir, &result.files); !s.ok()) {
    return s;
  }
  ScanpyGraph neighbors;
  if (k >= 1) neighbors = {&graph, do_umap ? umap_k : std::min<int64_t>(15, k + 1)};
  if (auto s = WriteCoordinates(set, rows, x, views, result.summary, o.kmeans, pca->explained_variance_ratio,
                                neighbors, o.threads, out_dir);
      !s.ok()) {
    return s;
  }
  result.files.push_back("embeddings.csv");
  result.files.push_back("embeddings.h5ad");
  return result;
}

}  // namespace scdino::eval
