// The figures are checked as files a reader would open: a decodable PNG of a
// plausible size, the same bytes for the same inputs, clear errors for
// malformed inputs, no damage to an existing file when writing fails, and
// what a reader sees in them: every confusion cell filled with the shade of
// its row fraction, every class of an embedding in its own colour where its
// points are, with a legend swatch per class in order.
#include "eval/plots.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/files.h"
#include "eval/drawing.h"
#include "support/fault_env.h"
#include "support/test_support.h"

namespace scdino::eval {
namespace {

// Distinct BGR colours in the image (capped; "many" is all we ask).
size_t DistinctColours(const cv::Mat& img) {
  std::set<uint32_t> seen;
  for (int y = 0; y < img.rows && seen.size() < 10000; ++y) {
    for (int x = 0; x < img.cols; ++x) {
      const auto p = img.at<cv::Vec3b>(y, x);
      seen.insert(uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]);
    }
  }
  return seen.size();
}

using drawing::Blues;
using drawing::ClassColour;
using drawing::Luma;
using scdino::testing::ExpectInvalid;

cv::Vec3b Bgr(const cv::Scalar& c) {
  return {cv::saturate_cast<uchar>(c[0]), cv::saturate_cast<uchar>(c[1]), cv::saturate_cast<uchar>(c[2])};
}

// The pixels of exactly this colour.
std::vector<cv::Point> PixelsOf(const cv::Mat& img, const cv::Vec3b& colour) {
  std::vector<cv::Point> at;
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x)
      if (img.at<cv::Vec3b>(y, x) == colour) at.push_back({x, y});
  return at;
}

double Median(std::vector<int> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

const std::vector<std::string> kNames = {"CD4+ T cell", "CD8+ T cell", "B cell", "NK cell", "classical monocyte",
                                         "plasmacytoid dendritic cell"};

std::vector<std::vector<int64_t>> Confusion(int k) {
  std::vector<std::vector<int64_t>> m(k, std::vector<int64_t>(k));
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) m[i][j] = i == j ? 100 + 37 * i : (i * 7 + j * 3) % 11;
  return m;
}

TEST(PlotConfusionMatrix, WritesAReadablePng) {
  testing::ScratchDir dir;
  const std::string path = dir.file("confusion.png");
  ASSERT_TRUE(PlotConfusionMatrix(path, Confusion(6), kNames, "kNN on CLS features").ok());
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty()) << path << " does not decode";
  EXPECT_GE(img.cols, 6 * 26);
  EXPECT_GE(img.rows, 6 * 26);
  EXPECT_LE(img.cols, 3000);
  EXPECT_LE(img.rows, 3000);
  EXPECT_GT(DistinctColours(img), 20u);
  // The same inputs give the same bytes (figures can be regenerated).
  const std::string again = dir.file("again.png");
  ASSERT_TRUE(PlotConfusionMatrix(again, Confusion(6), kNames, "kNN on CLS features").ok());
  EXPECT_EQ(*ReadFile(path), *ReadFile(again));
}

// Each cell is filled with the Blues shade of its fraction of the row: that
// exact colour covers at least most of a cell (26 px at the least; the
// colour bar gives any one shade only a thin line), darker for a larger
// fraction.
TEST(PlotConfusionMatrix, CellShadesFollowTheRowFractions) {
  testing::ScratchDir dir;
  const std::vector<std::vector<int64_t>> m = {{90, 10, 0}, {30, 60, 10}, {5, 25, 70}};
  const std::string path = dir.file("confusion.png");
  ASSERT_TRUE(PlotConfusionMatrix(path, m, {"a", "b", "c"}, "shades").ok());
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      const double frac = m[i][j] / 100.0;
      const size_t area = PixelsOf(img, Bgr(Blues(frac))).size();
      EXPECT_GE(area, 400u) << "cell [" << i << "][" << j << "] (fraction " << frac << ") is not filled with its shade";
    }
  }
  EXPECT_LT(Luma(Blues(0.9)), Luma(Blues(0.3)));
  EXPECT_LT(Luma(Blues(0.3)), Luma(Blues(0.0)));
  // A shade no cell has (fraction 0.5) appears only in the colour bar.
  EXPECT_LT(PixelsOf(img, Bgr(Blues(0.5))).size(), 100u);
}

TEST(PlotConfusionMatrix, ScalesFromOneToManyClasses) {
  testing::ScratchDir dir;
  for (int k : {1, 2, 40}) {
    std::vector<std::string> names;
    for (int i = 0; i < k; ++i) names.push_back("class " + std::to_string(i) + (i % 2 ? " with a long name" : ""));
    auto m = Confusion(k);
    if (k > 1) m[1][0] = 123456;  // a wide count
    const std::string path = dir.file("confusion_" + std::to_string(k) + ".png");
    Status s = PlotConfusionMatrix(path, m, names, "k = " + std::to_string(k));
    ASSERT_TRUE(s.ok()) << s.ToString();
    cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty());
    EXPECT_LE(img.cols, 4000) << k;
    EXPECT_LE(img.rows, 4000) << k;
  }
  // A row with no samples, non-ASCII names: drawn, not refused.
  Status s = PlotConfusionMatrix(dir.file("empty_row.png"), {{0, 0}, {3, 4}}, {"T-Zelle \xc3\xa4", "B"}, "");
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PlotConfusionMatrix, RejectsBadSizesNamingTheField) {
  testing::ScratchDir dir;
  const std::string path = dir.file("bad.png");
  ExpectInvalid(PlotConfusionMatrix(path, Confusion(3), {"a", "b"}, "t"), "confusion has 3 rows");
  auto ragged = Confusion(3);
  ragged[1].pop_back();
  ExpectInvalid(PlotConfusionMatrix(path, ragged, {"a", "b", "c"}, "t"), "confusion[1] has 2 columns, expected 3");
  auto negative = Confusion(2);
  negative[0][1] = -1;
  ExpectInvalid(PlotConfusionMatrix(path, negative, {"a", "b"}, "t"), "confusion[0][1] = -1");
  ExpectInvalid(PlotConfusionMatrix(path, {}, {}, "t"), "class_names is empty");
  EXPECT_FALSE(std::filesystem::exists(path));
}

// n points of classes 0..3 in turn, class c scattered (radius 3) around
// (dx c, dy c).
void FourClusters(int n, float dx, float dy, std::vector<float>& xy, std::vector<int64_t>& labels) {
  for (int i = 0; i < n; ++i) {
    const int c = i % 4;
    xy.push_back(static_cast<float>(dx * c + std::sin(i * 1.7) * 3));
    xy.push_back(static_cast<float>(dy * c + std::cos(i * 2.3) * 3));
    labels.push_back(c);
  }
}

TEST(PlotEmbedding, WritesAReadablePng) {
  testing::ScratchDir dir;
  std::vector<float> xy;
  std::vector<int64_t> labels;
  FourClusters(300, 10, -5, xy, labels);
  for (size_t i = 0; i < labels.size(); i += 31) labels[i] = -1;  // some unlabelled
  const std::vector<std::string> names(kNames.begin(), kNames.begin() + 4);
  const std::string path = dir.file("tsne.png");
  Status s = PlotEmbedding(path, xy, labels, names, "t-SNE", "t-SNE 1", "t-SNE 2");
  ASSERT_TRUE(s.ok()) << s.ToString();
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  EXPECT_GE(img.cols, 600);
  EXPECT_GE(img.rows, 600);
  EXPECT_LE(img.cols, 2000);
  EXPECT_GT(DistinctColours(img), 20u);
  const std::string again = dir.file("again.png");
  ASSERT_TRUE(PlotEmbedding(again, xy, labels, names, "t-SNE", "t-SNE 1", "t-SNE 2").ok());
  EXPECT_EQ(*ReadFile(path), *ReadFile(again));
  // Degenerate data: no points, one point, all points equal, many classes.
  for (const Status& d : {PlotEmbedding(dir.file("none.png"), {}, {}, names, "", "", ""),
                          PlotEmbedding(dir.file("one.png"), {1, 2}, {0}, names, "", "", ""),
                          PlotEmbedding(dir.file("same.png"), {3, 3, 3, 3}, {0, 1}, names, "", "", "")}) {
    EXPECT_TRUE(d.ok()) << d.ToString();
  }
  std::vector<std::string> many;
  std::vector<int64_t> many_labels;
  for (int k = 0; k < 40; ++k) many.push_back("type " + std::to_string(k));
  for (int i = 0; i < 300; ++i) many_labels.push_back(i % 40);
  s = PlotEmbedding(dir.file("many.png"), xy, many_labels, many, "", "", "");
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Four classes in clusters along a diagonal (class c at x = 20c, y = -20c):
// each class's colour sits where its cluster is (the median of its pixels
// moves right and down with c), and the legend on the right has one swatch
// per class, in class order, in one column beside the plot.
TEST(PlotEmbedding, EachClassInItsColourWhereItsPointsAreWithALegend) {
  testing::ScratchDir dir;
  std::vector<float> xy;
  std::vector<int64_t> labels;
  FourClusters(400, 20, -20, xy, labels);
  const std::vector<std::string> names(kNames.begin(), kNames.begin() + 4);
  const std::string path = dir.file("umap.png");
  ASSERT_TRUE(PlotEmbedding(path, xy, labels, names, "UMAP", "UMAP 1", "UMAP 2").ok());
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  std::vector<double> median_x, median_y;
  std::vector<int> swatch_x, swatch_y;
  for (int c = 0; c < 4; ++c) {
    const auto px = PixelsOf(img, Bgr(ClassColour(c)));
    ASSERT_GT(px.size(), 300u) << "class " << c << "'s colour is (nearly) absent";
    std::vector<int> xs, ys;
    for (const auto& p : px) xs.push_back(p.x), ys.push_back(p.y);
    median_x.push_back(Median(xs));
    median_y.push_back(Median(ys));
    // The legend swatch: the rightmost pixels of the colour.
    const int right = *std::max_element(xs.begin(), xs.end());
    std::vector<int> swatch_rows;
    for (const auto& p : px)
      if (p.x >= right - 4) swatch_rows.push_back(p.y);
    swatch_x.push_back(right);
    swatch_y.push_back(static_cast<int>(Median(swatch_rows)));
    EXPECT_GT(right, median_x.back() + 60) << "class " << c << " has no legend swatch right of its points";
  }
  for (int c = 1; c < 4; ++c) {
    EXPECT_GT(median_x[c], median_x[c - 1] + 20) << "class " << c;
    EXPECT_GT(median_y[c], median_y[c - 1] + 20) << "class " << c;
    EXPECT_NEAR(swatch_x[c], swatch_x[0], 2) << "legend swatches in one column";
    EXPECT_GT(swatch_y[c], swatch_y[c - 1]) << "legend in class order";
  }
}

TEST(PlotEmbedding, RejectsBadInputsNamingTheField) {
  testing::ScratchDir dir;
  const std::string path = dir.file("bad.png");
  ExpectInvalid(PlotEmbedding(path, {1, 2, 3}, {0, 0}, {"a"}, "", "", ""), "xy has 3 values, expected 2 per label");
  ExpectInvalid(PlotEmbedding(path, {1, 2, 3, 4, 5, 6}, {0, -1, 2}, {"a", "b"}, "", "", ""), "labels[2] = 2");
  ExpectInvalid(PlotEmbedding(path, {1, 2, 3, 4}, {0, -2}, {"a"}, "", "", ""), "labels[1] = -2");
  ExpectInvalid(PlotEmbedding(path, {1, 2, NAN, 4}, {0, 0}, {"a"}, "", "", ""), "point 1");
  ExpectInvalid(PlotEmbedding("", {1, 2}, {0}, {"a"}, "", "", ""), "path is empty");
  EXPECT_FALSE(std::filesystem::exists(path));
}

AttentionFigure Figure() {
  AttentionFigure f;
  f.title = "CLS attention";
  f.channels = 5;
  f.height = f.width = 48;
  for (int c = 0; c < 5; ++c)
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 48; ++x) f.image.push_back(0.5f + 0.5f * std::sin(0.2f * (x + c * y)));
  f.channel_names = {"DAPI", "CD3", "CD4", "CD8", "brightfield"};
  f.heads = 3;
  f.grid_h = f.grid_w = 6;
  for (int i = 0; i < 3 * 36; ++i) f.maps.push_back(static_cast<float>((i * 37) % 17) / 17.0f);
  return f;
}

TEST(PlotAttentionMaps, WritesAReadablePng) {
  testing::ScratchDir dir;
  const std::string path = dir.file("attention.png");
  Status s = PlotAttentionMaps(path, Figure());
  ASSERT_TRUE(s.ok()) << s.ToString();
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  // 5 channels + mean + 3 heads, each at least 128 px.
  EXPECT_GE(img.cols, 9 * 128);
  EXPECT_GE(img.rows, 128);
  EXPECT_LE(img.rows, 400);
  EXPECT_GT(DistinctColours(img), 20u);
  // Unnamed channels, a constant map, a large image reduced to 320 px.
  AttentionFigure big = Figure();
  big.channel_names.clear();
  big.channels = 1;
  big.height = 400;
  big.width = 300;
  big.image.assign(400 * 300, 0.25f);
  big.heads = 1;
  big.maps.assign(36, 1.0f);
  s = PlotAttentionMaps(dir.file("big.png"), big);
  ASSERT_TRUE(s.ok()) << s.ToString();
  cv::Mat b = cv::imread(dir.file("big.png"), cv::IMREAD_COLOR);
  ASSERT_FALSE(b.empty());
  EXPECT_LT(b.rows, 500);
}

TEST(PlotAttentionMaps, RejectsBadSizesNamingTheField) {
  testing::ScratchDir dir;
  const std::string path = dir.file("bad.png");
  AttentionFigure f = Figure();
  f.image.pop_back();
  ExpectInvalid(PlotAttentionMaps(path, f), "image has 11519 values, expected channels * height * width");
  f = Figure();
  f.maps.push_back(0);
  ExpectInvalid(PlotAttentionMaps(path, f), "maps has 109 values, expected heads * grid_h * grid_w");
  f = Figure();
  f.channel_names.pop_back();
  ExpectInvalid(PlotAttentionMaps(path, f), "channel_names has 4 names");
  f = Figure();
  f.heads = 0;
  ExpectInvalid(PlotAttentionMaps(path, f), "heads = 0");
  f = Figure();
  f.maps[40] = NAN;
  ExpectInvalid(PlotAttentionMaps(path, f), "(head 1)");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Plots, UnwritablePathIsAnIOErrorNamingIt) {
  testing::ScratchDir dir;
  const std::string missing = dir.file("no/such/dir/figure.png");
  for (const Status& s : {PlotConfusionMatrix(missing, Confusion(2), {"a", "b"}, "t"),
                          PlotEmbedding(missing, {1, 2}, {0}, {"a"}, "", "", ""),
                          PlotAttentionMaps(missing, Figure())}) {
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  }
  // A full disk (after 100 bytes) is NoSpace (exit 8) and leaves the
  // previous figure as it was.
  const std::string path = dir.file("keep.png");
  ASSERT_TRUE(WriteFileAtomic(path, "previous figure").ok());
  scdino::testing::ScopedFaultEnv env;
  env->Inject({scdino::testing::FaultInjectingEnv::Op::kAppend, "keep.png", ENOSPC, 100});
  Status s = PlotConfusionMatrix(path, Confusion(2), {"a", "b"}, "t");
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_EQ(*ReadFile(path), "previous figure");
}

}  // namespace
}  // namespace scdino::eval

namespace scdino::eval {
namespace {

// Any UTF-8 label is drawn as itself where a TrueType font is there (Debian's
// fonts-dejavu-core, in the test packages): "γH2AX" is not "?H2AX",
// nor "αH2AX"; a label cut to fit is cut between characters. Without a font
// the labels fall back to ASCII, one '?' a character.
TEST(Drawing, AnyUtf8LabelIsDrawnAsItself) {
  using namespace drawing;
  auto draw = [](const std::string& s) {
    cv::Mat m(40, 200, CV_8UC3, kWhite);
    Text(m, Drawable(s), 4, 4, kAxisTitleFont, kBlack);
    return m;
  };
  auto differ = [](const cv::Mat& a, const cv::Mat& b) { return cv::norm(a, b, cv::NORM_L1) > 0; };
  const std::string gamma = "\u03b3H2AX", alpha = "\u03b1H2AX";
#ifdef SCDINO_HAVE_FREETYPE
  const bool font = std::filesystem::exists("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
#else
  const bool font = false;  // no FreeType module in this OpenCV
#endif
  if (font) {
    ASSERT_FALSE(TypefacePath().empty()) << "DejaVu Sans is installed but did not load";
    EXPECT_EQ(Drawable(gamma), gamma);
    EXPECT_TRUE(differ(draw(gamma), draw("?H2AX"))) << "the gamma drawn as a '?'";
    EXPECT_TRUE(differ(draw(gamma), draw(alpha))) << "two Greek letters drawn alike";
    EXPECT_EQ(Drawable("a\tb\xff" "c"), "a b?c") << "a control character and an invalid byte";
    // Cut to fit between characters: the result stays valid UTF-8.
    const std::string cut = Fit("\u03b3\u03b3\u03b3\u03b3\u03b3\u03b3\u03b3\u03b3", kAxisTitleFont, 40);
    EXPECT_EQ(cut.substr(cut.size() - 2), "..");
    EXPECT_EQ(Drawable(cut), cut) << cut;
    EXPECT_LT(TextWidth(cut, kAxisTitleFont), 41);
  } else {
    EXPECT_TRUE(TypefacePath().empty());
    EXPECT_EQ(Drawable(gamma), "?H2AX");
  }
}

}  // namespace
}  // namespace scdino::eval
