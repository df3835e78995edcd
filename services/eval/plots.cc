// OpenCV drawings of the evaluation figures. Every layout is computed first
// (text is measured with cv::getTextSize), then the canvas is allocated at
// the size the content needs: nothing is placed at fixed pixel positions
// that long names or many classes could overflow.
#include "eval/plots.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string_view>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/files.h"

namespace scdino::eval {
namespace {

constexpr int kFace = cv::FONT_HERSHEY_SIMPLEX;
const cv::Scalar kBlack(0, 0, 0);
const cv::Scalar kWhite(255, 255, 255);
const cv::Scalar kFrameGrey(150, 150, 150);

struct Font {
  double scale;
  int thickness;
};
constexpr Font kTitleFont{0.7, 2};
constexpr Font kAxisTitleFont{0.55, 1};
constexpr Font kTickFont{0.45, 1};

// ---------------------------------------------------------------- text ----

// Hershey fonts have printable ASCII only; a multi-byte UTF-8 character
// becomes one '?' rather than one per byte.
std::string Ascii(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\t' || c == '\n' || c == '\r') {
      out += ' ';
    } else if (c >= 0xc0) {
      out += '?';  // lead byte; continuation bytes (0x80..0xbf) are dropped
    } else if (c < 0x80) {
      out += '?';
    }
  }
  return out;
}

int TextWidth(const std::string& s, const Font& f) {
  int base = 0;
  return cv::getTextSize(s, kFace, f.scale, f.thickness, &base).width;
}

// Line height: OpenCV's cap height plus the descent, the same for every
// string of a font, so rows of labels line up.
int TextHeight(const Font& f) {
  int base = 0;
  cv::Size sz = cv::getTextSize("Ag", kFace, f.scale, f.thickness, &base);
  return sz.height + base;
}

int Ascent(const Font& f) {
  int base = 0;
  return cv::getTextSize("Ag", kFace, f.scale, f.thickness, &base).height;
}

// `s` shortened with ".." to at most `max_width` pixels.
std::string Fit(const std::string& s, const Font& f, int max_width) {
  if (TextWidth(s, f) <= max_width) return s;
  std::string t = s;
  while (!t.empty() && TextWidth(t + "..", f) > max_width) t.pop_back();
  return t + "..";
}

enum class Align { kLeft, kCenter, kRight };

// Draws `s` with its line box (ascent + descent) starting at `top`; `x` is
// the left edge, centre or right edge according to `align`.
void Text(cv::Mat& img, const std::string& s, int x, int top, const Font& f, const cv::Scalar& colour,
          Align align = Align::kLeft) {
  const int w = TextWidth(s, f);
  if (align == Align::kCenter) x -= w / 2;
  if (align == Align::kRight) x -= w;
  cv::putText(img, s, cv::Point(x, top + Ascent(f)), kFace, f.scale, colour, f.thickness, cv::LINE_AA);
}

// Black text on white in its own image, for turning by 90 degrees.
cv::Mat TextImage(const std::string& s, const Font& f, int width) {
  cv::Mat m(TextHeight(f) + 2, std::max(width, 1), CV_8UC3, kWhite);
  Text(m, s, 0, 1, f, kBlack);
  return m;
}

// Copies `src` into `dst` at `tl`, keeping the darker pixel: a text image's
// white margin never paints over lines already drawn. Clipped to `dst`.
void Darken(cv::Mat& dst, const cv::Mat& src, cv::Point tl) {
  cv::Rect r = cv::Rect(tl, src.size()) & cv::Rect(0, 0, dst.cols, dst.rows);
  if (r.empty()) return;
  cv::Mat d = dst(r);
  cv::min(d, src(cv::Rect(r.tl() - tl, r.size())), d);
}

// Text reading bottom to top, its last character at the top of the box
// (x, y, TextHeight wide, `box_height` high) when aligned kRight, centred
// on it with kCenter.
void VerticalText(cv::Mat& img, const std::string& s, int x, int y, int box_height, const Font& f,
                  Align align = Align::kCenter) {
  const int w = TextWidth(s, f);
  cv::Mat t = TextImage(s, f, w + 2);
  cv::Mat turned;
  cv::rotate(t, turned, cv::ROTATE_90_COUNTERCLOCKWISE);
  int top = y + (box_height - turned.rows) / 2;
  if (align == Align::kRight) top = y;
  if (align == Align::kLeft) top = y + box_height - turned.rows;
  Darken(img, turned, cv::Point(x, top));
}

// ---------------------------------------------------------------- misc ----

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status SavePng(const std::string& path, const cv::Mat& img) {
  std::vector<uchar> png;
  try {
    if (!cv::imencode(".png", img, png)) return Status::Internal("PNG encoding failed for " + path);
  } catch (const cv::Exception& e) {
    return Status::Internal("PNG encoding failed for " + path + ": " + e.what());
  }
  return WriteFileAtomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

Status CheckPath(const char* fn, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(std::string(fn) + ": the output path is empty");
  return Status::Ok();
}

// BGR from an sRGB triple.
cv::Scalar Rgb(int r, int g, int b) { return cv::Scalar(b, g, r); }

// matplotlib's "Blues" (ColorBrewer), white to dark blue: zero cells stay
// white, so the eye goes straight to the diagonal and the confusions.
cv::Scalar Blues(double t) {
  static const std::array<std::array<int, 3>, 9> kStops = {{{247, 251, 255},
                                                            {222, 235, 247},
                                                            {198, 219, 239},
                                                            {158, 202, 225},
                                                            {107, 174, 214},
                                                            {66, 146, 198},
                                                            {33, 113, 181},
                                                            {8, 81, 156},
                                                            {8, 48, 107}}};
  t = std::clamp(t, 0.0, 1.0) * (kStops.size() - 1);
  const size_t k = std::min(static_cast<size_t>(t), kStops.size() - 2);
  const double u = t - k;
  auto mix = [&](int c) { return std::round(kStops[k][c] * (1 - u) + kStops[k + 1][c] * u); };
  return Rgb(int(mix(0)), int(mix(1)), int(mix(2)));
}

// Perceived brightness (0..255) of a BGR colour, to choose the text colour.
double Luma(const cv::Scalar& bgr) { return 0.114 * bgr[0] + 0.587 * bgr[1] + 0.299 * bgr[2]; }

// Class colours: tab10 without its grey (grey means unlabelled here), then
// the light tab20 partners, then golden-angle hues for very many classes.
cv::Scalar ClassColour(int64_t k) {
  static const std::array<std::array<int, 3>, 18> kPalette = {{
      {31, 119, 180},  {255, 127, 14},  {44, 160, 44},   {214, 39, 40},   {148, 103, 189}, {140, 86, 75},
      {227, 119, 194}, {188, 189, 34},  {23, 190, 207},  {174, 199, 232}, {255, 187, 120}, {152, 223, 138},
      {255, 152, 150}, {197, 176, 213}, {196, 156, 148}, {247, 182, 210}, {219, 219, 141}, {158, 218, 229},
  }};
  if (k < static_cast<int64_t>(kPalette.size())) {
    const auto& c = kPalette[k];
    return Rgb(c[0], c[1], c[2]);
  }
  const double hue = std::fmod(k * 0.618033988749895, 1.0) * 180.0;  // OpenCV hue is 0..180
  const int sat = (k % 2) ? 150 : 220, val = (k % 3) ? 210 : 160;
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar(hue, sat, val)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const auto p = bgr.at<cv::Vec3b>(0, 0);
  return cv::Scalar(p[0], p[1], p[2]);
}
const cv::Scalar kUnlabelled = Rgb(175, 175, 175);

// Round tick values inside [lo, hi]: the widest step of 1, 2, 2.5 or 5
// times a power of ten that still leaves at least `min_ticks` (as
// matplotlib's MaxNLocator steps).
std::vector<double> NiceTicks(double lo, double hi, int min_ticks) {
  const double span = hi - lo;
  const int top = static_cast<int>(std::floor(std::log10(span)));
  double step = std::pow(10.0, top - 3);
  for (int e = top - 2; e <= top + 1; ++e) {
    for (double m : {1.0, 2.0, 2.5, 5.0}) {
      const double s = m * std::pow(10.0, e);
      if (std::floor(hi / s + 1e-9) - std::ceil(lo / s - 1e-9) + 1 >= min_ticks) step = std::max(step, s);
    }
  }
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * span; k += 1) {
    ticks.push_back(k == 0 ? 0.0 : k * step);
  }
  return ticks;
}

// `v` with as many decimals as the tick step needs (2.5 -> one).
std::string TickLabel(double v, double step) {
  int decimals = 0;
  while (decimals < 6) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * scaled) break;
    ++decimals;
  }
  char buf[64];
  if (std::abs(v) >= 1e6 || (v != 0 && std::abs(v) < 1e-4)) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

// A deterministic permutation (our own Fisher-Yates: std::shuffle's output
// differs between standard libraries).
std::vector<size_t> Shuffled(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

}  // namespace

// ---------------------------------------------------- confusion matrix ----

Status PlotConfusionMatrix(const std::string& path, const std::vector<std::vector<int64_t>>& confusion,
                           const std::vector<std::string>& class_names, const std::string& title) {
  constexpr const char* kFn = "PlotConfusionMatrix";
  if (Status s = CheckPath(kFn, path); !s.ok()) return s;
  const int64_t k_classes = static_cast<int64_t>(class_names.size());
  if (k_classes < 1) return Status::InvalidArgument("PlotConfusionMatrix: class_names is empty, expected >= 1 class");
  if (k_classes > 500) {
    return Status::InvalidArgument("PlotConfusionMatrix: " + std::to_string(k_classes) +
                                   " classes in class_names, at most 500 can be drawn");
  }
  if (static_cast<int64_t>(confusion.size()) != k_classes) {
    return Status::InvalidArgument("PlotConfusionMatrix: confusion has " + std::to_string(confusion.size()) +
                                   " rows, expected one per class in class_names (" + std::to_string(k_classes) +
                                   ")");
  }
  for (int64_t i = 0; i < k_classes; ++i) {
    if (static_cast<int64_t>(confusion[i].size()) != k_classes) {
      return Status::InvalidArgument("PlotConfusionMatrix: confusion[" + std::to_string(i) + "] has " +
                                     std::to_string(confusion[i].size()) + " columns, expected " +
                                     std::to_string(k_classes));
    }
    for (int64_t j = 0; j < k_classes; ++j) {
      if (confusion[i][j] < 0) {
        return Status::InvalidArgument("PlotConfusionMatrix: confusion[" + std::to_string(i) + "][" +
                                       std::to_string(j) + "] = " + std::to_string(confusion[i][j]) +
                                       ", expected a count >= 0");
      }
    }
  }
  const int K = static_cast<int>(k_classes);

  // Fonts and cell size from the class count, then grown if the counts
  // would not fit.
  const Font label_font{K <= 12 ? 0.5 : K <= 24 ? 0.45 : 0.4, 1};
  int cell = std::clamp(660 / K, 26, 110);
  std::vector<std::string> counts(K * K);
  int64_t max_count = 0;
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j < K; ++j) {
      counts[i * K + j] = std::to_string(confusion[i][j]);
      max_count = std::max(max_count, confusion[i][j]);
    }
  }
  const std::string widest = std::to_string(max_count);
  Font count_font{0.6, 1};
  while (count_font.scale > 0.3 &&
         (TextWidth(widest, count_font) > cell - 6 || TextHeight(count_font) > cell / 2)) {
    count_font.scale -= 0.05;
  }
  cell = std::max(cell, TextWidth(widest, count_font) + 6);
  const Font pct_font{count_font.scale * 0.75, 1};
  // The row percentage as a second line only where two lines fit easily.
  const bool show_pct = cell >= 2 * (TextHeight(count_font) + TextHeight(pct_font)) &&
                        TextWidth("100%", pct_font) <= cell - 6;

  std::vector<std::string> names(K);
  int ylab_w = 0;
  for (int i = 0; i < K; ++i) {
    names[i] = Fit(Ascii(class_names[i]), label_font, 260);
    ylab_w = std::max(ylab_w, TextWidth(names[i], label_font));
  }
  // Predicted-class names go under their column when all fit, else turned.
  const bool turn_x = ylab_w > cell - 4;
  const int xlab_h = turn_x ? ylab_w : TextHeight(label_font);

  const std::string title_text = Ascii(title);
  const int th_title = TextHeight(kTitleFont), th_axis = TextHeight(kAxisTitleFont),
            th_tick = TextHeight(kTickFont);
  const int mh = K * cell, mw = K * cell;
  // Horizontal layout, left to right.
  const int x_axis_title = 16;
  const int mx = x_axis_title + th_axis + 12 + ylab_w + 8;
  const int cbx = mx + mw + 24, cbw = 18;
  const int cb_label_x = cbx + cbw + 6;
  const int cb_caption_x = cb_label_x + TextWidth("0.5", kTickFont) + 10;
  // The caption runs along the bar: shortened for one or two classes.
  std::string cb_caption = "fraction of true class";
  if (TextWidth(cb_caption, kTickFont) > mh) cb_caption = Fit("row fraction", kTickFont, mh);
  int width = cb_caption_x + th_tick + 16;
  width = std::max(width, TextWidth(title_text, kTitleFont) + 32);
  // Vertical layout, top to bottom.
  const int y_title = 14;
  const int my = y_title + th_title + 18;
  const int y_xlab = my + mh + 6;
  const int y_axis_title = y_xlab + xlab_h + 10;
  const int height = y_axis_title + th_axis + 14;

  cv::Mat img(height, width, CV_8UC3, kWhite);
  Text(img, title_text, width / 2, y_title, kTitleFont, kBlack, Align::kCenter);

  for (int i = 0; i < K; ++i) {
    int64_t row_sum = 0;
    for (int j = 0; j < K; ++j) row_sum += confusion[i][j];
    for (int j = 0; j < K; ++j) {
      const double frac = row_sum > 0 ? double(confusion[i][j]) / row_sum : 0.0;
      const cv::Scalar fill = Blues(frac);
      const cv::Rect r(mx + j * cell, my + i * cell, cell, cell);
      cv::rectangle(img, r, fill, cv::FILLED);
      const cv::Scalar ink = Luma(fill) < 140 ? kWhite : kBlack;
      const int cx = r.x + cell / 2;
      // Empty cells stay uncluttered (no "0%"); a few stray cells read
      // "<1%" rather than "0%".
      if (show_pct && confusion[i][j] > 0) {
        const int block = TextHeight(count_font) + 2 + TextHeight(pct_font);
        const int top = r.y + (cell - block) / 2;
        Text(img, counts[i * K + j], cx, top, count_font, ink, Align::kCenter);
        char pct[16];
        if (frac < 0.005) {
          std::snprintf(pct, sizeof(pct), "<1%%");
        } else {
          std::snprintf(pct, sizeof(pct), "%.0f%%", 100.0 * frac);
        }
        Text(img, pct, cx, top + TextHeight(count_font) + 2, pct_font, ink, Align::kCenter);
      } else {
        Text(img, counts[i * K + j], cx, r.y + (cell - TextHeight(count_font)) / 2, count_font, ink,
             Align::kCenter);
      }
    }
  }
  // Light grid between cells (white cells next to each other would merge),
  // then a dark frame.
  for (int k = 1; k < K; ++k) {
    cv::line(img, {mx + k * cell, my}, {mx + k * cell, my + mh - 1}, cv::Scalar(225, 225, 225), 1);
    cv::line(img, {mx, my + k * cell}, {mx + mw - 1, my + k * cell}, cv::Scalar(225, 225, 225), 1);
  }
  cv::rectangle(img, cv::Rect(mx, my, mw, mh), kBlack, 1);

  const int label_h = TextHeight(label_font);
  for (int i = 0; i < K; ++i) {
    Text(img, names[i], mx - 8, my + i * cell + (cell - label_h) / 2, label_font, kBlack, Align::kRight);
    if (turn_x) {
      VerticalText(img, names[i], mx + i * cell + (cell - label_h) / 2, y_xlab, xlab_h, label_font, Align::kRight);
    } else {
      Text(img, names[i], mx + i * cell + cell / 2, y_xlab, label_font, kBlack, Align::kCenter);
    }
  }
  VerticalText(img, "true class", x_axis_title, my, mh, kAxisTitleFont);
  Text(img, "predicted class", mx + mw / 2, y_axis_title, kAxisTitleFont, kBlack, Align::kCenter);

  // Colour bar: 1 at the top, as the diagonal of a good classifier.
  for (int y = 0; y < mh; ++y) {
    cv::line(img, {cbx, my + y}, {cbx + cbw - 1, my + y}, Blues(1.0 - double(y) / std::max(1, mh - 1)), 1);
  }
  cv::rectangle(img, cv::Rect(cbx, my, cbw, mh), kBlack, 1);
  const std::array<std::pair<double, const char*>, 3> cb_ticks = {{{0.0, "0"}, {0.5, "0.5"}, {1.0, "1"}}};
  for (const auto& [v, text] : cb_ticks) {
    const int y = my + static_cast<int>(std::lround((1.0 - v) * (mh - 1)));
    cv::line(img, {cbx + cbw, y}, {cbx + cbw + 3, y}, kBlack, 1);
    Text(img, text, cb_label_x, std::clamp(y - th_tick / 2, my - th_tick / 2, my + mh - th_tick / 2), kTickFont,
         kBlack);
  }
  VerticalText(img, cb_caption, cb_caption_x, my, mh, kTickFont);
  return SavePng(path, img);
}

// ----------------------------------------------------------- embedding ----

Status PlotEmbedding(const std::string& path, const std::vector<float>& xy, const std::vector<int64_t>& labels,
                     const std::vector<std::string>& class_names, const std::string& title,
                     const std::string& x_label, const std::string& y_label) {
  constexpr const char* kFn = "PlotEmbedding";
  if (Status s = CheckPath(kFn, path); !s.ok()) return s;
  if (xy.size() != 2 * labels.size()) {
    return Status::InvalidArgument("PlotEmbedding: xy has " + std::to_string(xy.size()) +
                                   " values, expected 2 per label (2 * " + std::to_string(labels.size()) + ")");
  }
  const int64_t K = static_cast<int64_t>(class_names.size());
  const size_t n = labels.size();
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < -1 || labels[i] >= K) {
      return Status::InvalidArgument("PlotEmbedding: labels[" + std::to_string(i) + "] = " +
                                     std::to_string(labels[i]) + ", expected -1 (unlabelled) or a class index in [0, " +
                                     std::to_string(K) + ")");
    }
    if (!std::isfinite(xy[2 * i]) || !std::isfinite(xy[2 * i + 1])) {
      return Status::InvalidArgument("PlotEmbedding: xy of point " + std::to_string(i) + " = (" + Num(xy[2 * i]) +
                                     ", " + Num(xy[2 * i + 1]) + ") is not finite");
    }
  }

  // Data range with a margin so that no point sits on the frame.
  double lo[2] = {0, 0}, hi[2] = {1, 1};
  if (n > 0) {
    for (int c = 0; c < 2; ++c) {
      lo[c] = hi[c] = xy[c];
      for (size_t i = 0; i < n; ++i) {
        lo[c] = std::min(lo[c], double(xy[2 * i + c]));
        hi[c] = std::max(hi[c], double(xy[2 * i + c]));
      }
      const double span = hi[c] - lo[c];
      const double pad = span > 0 ? 0.05 * span : std::max(1.0, std::abs(lo[c]) * 0.1);
      lo[c] -= pad;
      hi[c] += pad;
    }
  }
  std::vector<double> ticks[2];
  std::vector<std::string> tick_text[2];
  for (int c = 0; c < 2; ++c) {
    ticks[c] = NiceTicks(lo[c], hi[c], 4);
    const double step = ticks[c].size() > 1 ? ticks[c][1] - ticks[c][0] : (hi[c] - lo[c]);
    for (double v : ticks[c]) tick_text[c].push_back(TickLabel(v, step));
  }
  int ytick_w = 0;
  for (const auto& t : tick_text[1]) ytick_w = std::max(ytick_w, TextWidth(t, kTickFont));

  // Legend entries: every class (its colour is fixed by its index, so a
  // class list shared between figures reads the same), unlabelled last.
  std::vector<int64_t> count(K + 1, 0);  // [K] counts the unlabelled
  for (int64_t l : labels) ++count[l < 0 ? K : l];
  const Font legend_font{K <= 24 ? 0.5 : 0.42, 1};
  struct Entry {
    std::string text;
    cv::Scalar colour;
  };
  std::vector<Entry> entries;
  for (int64_t k = 0; k < K; ++k) {
    entries.push_back({Fit(Ascii(class_names[k]), legend_font, 260) + " (" + std::to_string(count[k]) + ")",
                       ClassColour(k)});
  }
  if (count[K] > 0) entries.push_back({"unlabelled (" + std::to_string(count[K]) + ")", kUnlabelled});
  int legend_text_w = 0;
  for (const auto& e : entries) legend_text_w = std::max(legend_text_w, TextWidth(e.text, legend_font));
  const int row_h = TextHeight(legend_font) + 8;

  const std::string title_text = Ascii(title);
  const int th_title = TextHeight(kTitleFont), th_axis = TextHeight(kAxisTitleFont),
            th_tick = TextHeight(kTickFont);
  const int P = 600;  // plot area side
  const int tick_len = 5;
  const int x_ylabel = 16;
  const int px = x_ylabel + th_axis + 10 + ytick_w + tick_len + 4;
  const int y_title = 14;
  const int py = y_title + th_title + 16;
  const int y_xticks = py + P + tick_len + 4;
  const int y_xlabel = y_xticks + th_tick + 10;
  const int legend_x = px + P + 24;
  const int swatch = 14;
  const int legend_w = 10 + swatch + 8 + legend_text_w + 10;
  const int legend_h = entries.empty() ? 0 : 8 + static_cast<int>(entries.size()) * row_h;
  const int width = std::max({legend_x + legend_w + 16, px + TextWidth(title_text, kTitleFont) + 16});
  const int height = std::max(y_xlabel + th_axis + 14, py + legend_h + 14);

  cv::Mat img(height, width, CV_8UC3, kWhite);
  Text(img, title_text, std::max(px + P / 2, TextWidth(title_text, kTitleFont) / 2 + 16), y_title, kTitleFont,
       kBlack, Align::kCenter);

  auto to_px = [&](double v) { return px + (v - lo[0]) / (hi[0] - lo[0]) * (P - 1); };
  auto to_py = [&](double v) { return py + (P - 1) - (v - lo[1]) / (hi[1] - lo[1]) * (P - 1); };

  // Faint grid at the ticks, ticks and their values, axis titles.
  const cv::Scalar grid(238, 238, 238);
  for (size_t t = 0; t < ticks[0].size(); ++t) {
    const int x = static_cast<int>(std::lround(to_px(ticks[0][t])));
    cv::line(img, {x, py}, {x, py + P - 1}, grid, 1);
    cv::line(img, {x, py + P}, {x, py + P + tick_len}, kBlack, 1);
    Text(img, tick_text[0][t], x, y_xticks, kTickFont, kBlack, Align::kCenter);
  }
  for (size_t t = 0; t < ticks[1].size(); ++t) {
    const int y = static_cast<int>(std::lround(to_py(ticks[1][t])));
    cv::line(img, {px, y}, {px + P - 1, y}, grid, 1);
    cv::line(img, {px - tick_len - 1, y}, {px - 1, y}, kBlack, 1);
    Text(img, tick_text[1][t], px - tick_len - 4, y - th_tick / 2, kTickFont, kBlack, Align::kRight);
  }
  Text(img, Fit(Ascii(x_label), kAxisTitleFont, P), px + P / 2, y_xlabel, kAxisTitleFont, kBlack, Align::kCenter);
  VerticalText(img, Fit(Ascii(y_label), kAxisTitleFont, P), x_ylabel, py, P, kAxisTitleFont);

  // Points: unlabelled first (beneath), then the labelled ones in a fixed
  // shuffled order. Sub-pixel positions (shift 4) keep dense clouds smooth.
  const int radius = n <= 300 ? 5 : n <= 1500 ? 4 : n <= 6000 ? 3 : 2;
  constexpr int kShift = 4;
  auto draw = [&](size_t i, const cv::Scalar& colour) {
    const cv::Point c(static_cast<int>(std::lround(to_px(xy[2 * i]) * (1 << kShift))),
                      static_cast<int>(std::lround(to_py(xy[2 * i + 1]) * (1 << kShift))));
    cv::circle(img, c, radius << kShift, colour, cv::FILLED, cv::LINE_AA, kShift);
  };
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < 0) draw(i, kUnlabelled);
  }
  for (size_t i : Shuffled(n, 0x5cd1a0)) {
    if (labels[i] >= 0) draw(i, ClassColour(labels[i]));
  }
  cv::rectangle(img, cv::Rect(px - 1, py - 1, P + 2, P + 2), kBlack, 1);

  if (!entries.empty()) {
    cv::rectangle(img, cv::Rect(legend_x, py, legend_w, legend_h), kFrameGrey, 1);
    for (size_t e = 0; e < entries.size(); ++e) {
      const int top = py + 8 + static_cast<int>(e) * row_h;
      const int mid = top + (row_h - 8) / 2;
      cv::circle(img, {legend_x + 10 + swatch / 2, mid}, swatch / 2, entries[e].colour, cv::FILLED, cv::LINE_AA);
      Text(img, entries[e].text, legend_x + 10 + swatch + 8, mid - TextHeight(legend_font) / 2, legend_font,
           kBlack);
    }
  }
  return SavePng(path, img);
}

// ----------------------------------------------------------- attention ----

Status PlotAttentionMaps(const std::string& path, const AttentionFigure& f) {
  constexpr const char* kFn = "PlotAttentionMaps";
  if (Status s = CheckPath(kFn, path); !s.ok()) return s;
  // Dimensions are bounded before any product is formed.
  const std::pair<const char*, int64_t> dims[] = {{"channels", f.channels}, {"height", f.height},
                                                  {"width", f.width},       {"heads", f.heads},
                                                  {"grid_h", f.grid_h},     {"grid_w", f.grid_w}};
  for (const auto& [name, v] : dims) {
    if (v < 1 || v > 65536) {
      return Status::InvalidArgument(std::string("PlotAttentionMaps: ") + name + " = " + std::to_string(v) +
                                     ", expected 1..65536");
    }
  }
  if (f.channels + f.heads > 256) {
    return Status::InvalidArgument("PlotAttentionMaps: channels + heads = " + std::to_string(f.channels + f.heads) +
                                   ", at most 256 panels fit in one row");
  }
  const int64_t image_size = f.channels * f.height * f.width;
  if (static_cast<int64_t>(f.image.size()) != image_size) {
    return Status::InvalidArgument("PlotAttentionMaps: image has " + std::to_string(f.image.size()) +
                                   " values, expected channels * height * width = " + std::to_string(f.channels) +
                                   " * " + std::to_string(f.height) + " * " + std::to_string(f.width));
  }
  const int64_t map_size = f.grid_h * f.grid_w;
  if (static_cast<int64_t>(f.maps.size()) != f.heads * map_size) {
    return Status::InvalidArgument("PlotAttentionMaps: maps has " + std::to_string(f.maps.size()) +
                                   " values, expected heads * grid_h * grid_w = " + std::to_string(f.heads) + " * " +
                                   std::to_string(f.grid_h) + " * " + std::to_string(f.grid_w));
  }
  if (!f.channel_names.empty() && static_cast<int64_t>(f.channel_names.size()) != f.channels) {
    return Status::InvalidArgument("PlotAttentionMaps: channel_names has " + std::to_string(f.channel_names.size()) +
                                   " names, expected one per channel (" + std::to_string(f.channels) +
                                   ") or none");
  }
  for (size_t i = 0; i < f.image.size(); ++i) {
    if (!std::isfinite(f.image[i])) {
      return Status::InvalidArgument("PlotAttentionMaps: image value " + std::to_string(i) + " = " +
                                     Num(f.image[i]) + " is not finite");
    }
  }
  for (size_t i = 0; i < f.maps.size(); ++i) {
    if (!std::isfinite(f.maps[i])) {
      return Status::InvalidArgument("PlotAttentionMaps: maps value " + std::to_string(i) + " (head " +
                                     std::to_string(i / map_size) + ") = " + Num(f.maps[i]) + " is not finite");
    }
  }

  // Panel size: small images enlarged by a whole factor (crisp pixels),
  // large ones reduced.
  const int H = static_cast<int>(f.height), W = static_cast<int>(f.width);
  const int side = std::max(H, W);
  double scale = 1.0;
  if (side < 128) scale = std::ceil(128.0 / side);
  if (side > 320) scale = 320.0 / side;
  const int ph = std::max(1, static_cast<int>(std::lround(H * scale)));
  const int pw = std::max(1, static_cast<int>(std::lround(W * scale)));
  const int interp = scale >= 1.0 ? cv::INTER_NEAREST : cv::INTER_AREA;

  std::vector<cv::Mat> panels;
  std::vector<std::string> captions;
  for (int64_t c = 0; c < f.channels; ++c) {
    cv::Mat ch(H, W, CV_32F, const_cast<float*>(f.image.data() + c * H * W));
    cv::Mat grey8, big, bgr;
    ch.convertTo(grey8, CV_8U, 255.0);  // saturates: values outside [0, 1] clamp
    cv::resize(grey8, big, cv::Size(pw, ph), 0, 0, interp);
    cv::cvtColor(big, bgr, cv::COLOR_GRAY2BGR);
    panels.push_back(bgr);
    captions.push_back(f.channel_names.empty() ? "channel " + std::to_string(c) : Ascii(f.channel_names[c]));
  }
  const int n_channels = static_cast<int>(panels.size());
  const int GH = static_cast<int>(f.grid_h), GW = static_cast<int>(f.grid_w);
  cv::Mat mean = cv::Mat::zeros(GH, GW, CV_32F);
  std::vector<cv::Mat> heads;
  for (int64_t h = 0; h < f.heads; ++h) {
    cv::Mat m(GH, GW, CV_32F, const_cast<float*>(f.maps.data() + h * map_size));
    heads.push_back(m);
    mean += m / static_cast<double>(f.heads);
  }
  auto colour_map = [&](const cv::Mat& m) {
    double mn = 0, mx = 0;
    cv::minMaxLoc(m, &mn, &mx);
    cv::Mat u8;
    // A constant map has no structure to show: drawn at the bottom colour.
    if (mx > mn) {
      m.convertTo(u8, CV_8U, 255.0 / (mx - mn), -mn * 255.0 / (mx - mn));
    } else {
      u8 = cv::Mat::zeros(m.size(), CV_8U);
    }
    cv::Mat big, bgr;
    cv::resize(u8, big, cv::Size(pw, ph), 0, 0, cv::INTER_NEAREST);
    cv::applyColorMap(big, bgr, cv::COLORMAP_INFERNO);
    return bgr;
  };
  panels.push_back(colour_map(mean));
  captions.push_back("mean of heads");
  for (int64_t h = 0; h < f.heads; ++h) {
    panels.push_back(colour_map(heads[h]));
    captions.push_back("head " + std::to_string(h));
  }

  const Font caption_font{0.5, 1};
  const int gap = 8, group_gap = 28;
  const std::string title_text = Ascii(f.title);
  const int th_title = TextHeight(kTitleFont), th_caption = TextHeight(caption_font), th_tick = TextHeight(kTickFont);
  const int y_title = 14;
  const int y_caption = y_title + th_title + 14;
  const int y_panel = y_caption + th_caption + 6;
  const int y_foot = y_panel + ph + 12;
  std::vector<int> xs;
  int x = 16;
  for (size_t p = 0; p < panels.size(); ++p) {
    if (static_cast<int>(p) == n_channels) x += group_gap - gap;
    xs.push_back(x);
    x += pw + gap;
  }
  const int panels_right = x - gap;
  const int attn_x = xs[n_channels];
  const int bar_w = 120, bar_h = 12;
  const std::string note = "CLS attention to patches; each map scaled to its own range";
  const int note_x = attn_x + TextWidth("min", kTickFont) + 6 + bar_w + 6 + TextWidth("max", kTickFont) + 16;
  const int width = std::max({panels_right + 16, TextWidth(title_text, kTitleFont) + 32,
                              note_x + TextWidth(note, kTickFont) + 16});
  const int height = y_foot + std::max(bar_h, th_tick) + 14;

  cv::Mat img(height, width, CV_8UC3, kWhite);
  Text(img, title_text, width / 2, y_title, kTitleFont, kBlack, Align::kCenter);
  for (size_t p = 0; p < panels.size(); ++p) {
    panels[p].copyTo(img(cv::Rect(xs[p], y_panel, pw, ph)));
    cv::rectangle(img, cv::Rect(xs[p] - 1, y_panel - 1, pw + 2, ph + 2), kFrameGrey, 1);
    Text(img, Fit(captions[p], caption_font, pw), xs[p] + pw / 2, y_caption, caption_font, kBlack, Align::kCenter);
  }
  // Footnote: the colour scale (per map, so only min and max) and what it is.
  const int bar_y = y_foot + (std::max(bar_h, th_tick) - bar_h) / 2;
  const int text_y = y_foot + (std::max(bar_h, th_tick) - th_tick) / 2;
  Text(img, "min", attn_x, text_y, kTickFont, kBlack);
  const int bar_x = attn_x + TextWidth("min", kTickFont) + 6;
  cv::Mat ramp(1, bar_w, CV_8U);
  for (int i = 0; i < bar_w; ++i) ramp.at<uchar>(0, i) = cv::saturate_cast<uchar>(i * 255.0 / (bar_w - 1));
  cv::Mat ramp_bgr, ramp_big;
  cv::applyColorMap(ramp, ramp_bgr, cv::COLORMAP_INFERNO);
  cv::resize(ramp_bgr, ramp_big, cv::Size(bar_w, bar_h), 0, 0, cv::INTER_NEAREST);
  ramp_big.copyTo(img(cv::Rect(bar_x, bar_y, bar_w, bar_h)));
  cv::rectangle(img, cv::Rect(bar_x - 1, bar_y - 1, bar_w + 2, bar_h + 2), kFrameGrey, 1);
  Text(img, "max", bar_x + bar_w + 6, text_y, kTickFont, kBlack);
  Text(img, note, note_x, text_y, kTickFont, kBlack);
  return SavePng(path, img);
}

}  // namespace scdino::eval
