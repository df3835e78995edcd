// WriteEmbeddings as scdino-eval runs it: PCA, t-SNE and UMAP of separated
// clusters with their trustworthiness, the figures, embeddings.csv and the
// .h5ad whose obsm scanpy reads (checked by Debian's python3-anndata in
// tests/deploy/pipeline_test.sh), the PCA-only path of tiny sets, a stop.
#include "eval/embedding_figures.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_support.h"

namespace scdino::eval {
namespace {

using scdino::testing::ScratchDir;

features::FeatureSet Clusters(int64_t per_class, int64_t classes, int64_t d) {
  torch::manual_seed(3);
  features::FeatureSet s;
  s.dir = "/runs/x/features/checkpoint0003";
  std::vector<torch::Tensor> parts;
  for (int64_t c = 0; c < classes; ++c) {
    auto centre = torch::randn({1, d}) * 4;
    parts.push_back(centre + 0.3 * torch::randn({per_class, d}));
    s.classes.push_back("class " + std::to_string(c));
    for (int64_t i = 0; i < per_class; ++i) {
      s.rows.push_back({"c" + std::to_string(c) + "/" + std::to_string(i) + ".tif", s.classes.back(), c,
                        data::Split::kTest});
    }
  }
  s.features = torch::cat(parts).contiguous();
  return s;
}

std::vector<int64_t> All(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

TEST(WriteEmbeddings, ThreeEmbeddingsOfSeparatedClustersAreTrustworthy) {
  ScratchDir dir;
  auto set = Clusters(40, 3, 16);
  EmbeddingOptions o;
  o.tsne_iterations = 300;
  o.umap_options.epochs = 100;
  o.threads = 2;
  auto r = WriteEmbeddings(set, All(120), o, dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* f : {"pca.png", "tsne.png", "umap.png", "embeddings.csv", "embeddings.h5ad"}) {
    EXPECT_GT(std::filesystem::file_size(dir.file(f)), 100u) << f;
  }
  for (const char* v : {"pca", "tsne", "umap"}) {
    ASSERT_TRUE(r->summary.contains(v)) << r->summary.dump();
    EXPECT_GT(r->summary[v]["trustworthiness"].get<double>(), 0.9) << v << ": " << r->summary.dump();
  }
  std::ifstream csv(dir.file("embeddings.csv"));
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "index,path,class_name,pca_1,pca_2,tsne_1,tsne_2,umap_1,umap_2");
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  EXPECT_EQ(lines, 120);
}

TEST(WriteEmbeddings, TinySetsGetPcaOnly) {
  ScratchDir dir;
  auto set = Clusters(2, 2, 8);
  auto r = WriteEmbeddings(set, All(4), {}, dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir.file("pca.png")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("tsne.png")));
  EXPECT_FALSE(r->summary.contains("umap"));
}

TEST(WriteEmbeddings, AStopEndsItWithAborted) {
  ScratchDir dir;
  auto set = Clusters(40, 3, 16);
  EmbeddingOptions o;
  int asked = 0;
  o.should_stop = [&] { return ++asked > 20; };
  auto r = WriteEmbeddings(set, All(120), o, dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_FALSE(std::filesystem::exists(dir.file("embeddings.h5ad"))) << "a stopped run wrote its coordinates";
}

}  // namespace
}  // namespace scdino::eval
