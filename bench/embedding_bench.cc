// The embeddings of scdino-eval on a large feature set, timed phase by phase
// through the service's own path (WriteEmbeddings: PCA, the neighbour graph,
// Barnes-Hut t-SNE, UMAP, trustworthiness, figures and coordinates), for
// comparison with scikit-learn's TSNE on the same data
// (bench/embedding_vs_sklearn.py writes the data and times sklearn).
//
//   OMP_NUM_THREADS=2 python3 bench/embedding_vs_sklearn.py --out /tmp/emb
//   build/bench/scdino-bench-embedding --data /tmp/emb --threads 2
//
// Prints one JSON object: rows, per phase seconds, t-SNE KL divergence,
// the trustworthiness (k = 10) of each embedding, peak resident memory.
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "bench/bench_flags.h"
#include "common/npy.h"
#include "eval/embedding_figures.h"

namespace {

double PeakResidentGiB() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is KiB
}

}  // namespace

int main(int argc, char** argv) {
  scdino::bench::Flags f(argc, argv, "scdino-bench-embedding",
                         "Times scdino-eval's embeddings (t-SNE, UMAP, trustworthiness) on features.npy/labels.npy "
                         "written by bench/embedding_vs_sklearn.py",
                         {{"data", "/tmp/emb", "directory with features.npy and labels.npy (bench/embedding_vs_sklearn.py writes them)"},
                          {"threads", "2", "intra-op threads"},
                          {"tsne", "1", "1: time t-SNE"},
                          {"umap", "1", "1: time UMAP"},
                          {"trustworthiness-points", "20000", "points trustworthiness is measured on"},
                          {"out", "/tmp/scdino-embedding-bench", "directory for the figures and summary"}});
  const int threads = static_cast<int>(f.num("threads"));
  torch::set_num_threads(threads);
  auto x = scdino::ReadNpy(f.str("data") + "/features.npy");
  auto labels = scdino::ReadNpy(f.str("data") + "/labels.npy");
  if (!x.ok() || !labels.ok()) {
    std::cerr << "scdino-bench-embedding: " << (!x.ok() ? x.status() : labels.status()).message()
              << " (write the data with bench/embedding_vs_sklearn.py --out DIR first)\n";
    return 2;
  }
  scdino::features::FeatureSet set;
  set.dir = f.str("data");
  set.features = x->to(torch::kFloat32).contiguous();
  const auto lab = labels->to(torch::kInt64).contiguous();
  const int64_t n = set.features.size(0);
  int64_t classes = 0;
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    scdino::features::IndexRow r;
    r.class_index = lab[i].item<int64_t>();
    r.path = "cell" + std::to_string(i) + ".tif";
    classes = std::max(classes, r.class_index + 1);
    set.rows.push_back(r);
    rows[static_cast<size_t>(i)] = i;
  }
  for (int64_t c = 0; c < classes; ++c) set.classes.push_back("cluster " + std::to_string(c));
  for (auto& r : set.rows) r.class_name = set.classes[static_cast<size_t>(r.class_index)];

  scdino::eval::EmbeddingOptions o;
  o.tsne = f.num("tsne") != 0;
  o.umap = f.num("umap") != 0;
  o.trustworthiness_points = f.num("trustworthiness-points");
  o.threads = threads;
  o.log = &std::cerr;
  std::filesystem::create_directories(f.str("out"));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = scdino::eval::WriteEmbeddings(set, rows, o, f.str("out"));
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::cerr << "scdino-bench-embedding: " << r.status().message() << "\n";
    return 1;
  }
  nlohmann::json out = r->summary;
  out["threads"] = threads;
  out["total_seconds"] = total;
  out["peak_resident_gib"] = PeakResidentGiB();
  std::cout << out.dump(1) << "\n";
  return 0;
}
