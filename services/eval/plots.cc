// OpenCV drawings of the confusion matrix and the embedding scatter plots.
// Every layout is computed first (text is measured), then the canvas is
// allocated at the size the content needs: nothing is placed at fixed pixel
// positions that long names or many classes could overflow.
#include "eval/plots.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string_view>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "eval/drawing.h"

namespace scdino::eval {

using namespace drawing;  // NOLINT: the drawing vocabulary of every figure

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
    names[i] = Fit(Drawable(class_names[i]), label_font, 260);
    ylab_w = std::max(ylab_w, TextWidth(names[i], label_font));
  }
  // Predicted-class names go under their column when all fit, else turned.
  const bool turn_x = ylab_w > cell - 4;
  const int xlab_h = turn_x ? ylab_w : TextHeight(label_font);

  const std::string title_text = Drawable(title);
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
      return Status::InvalidArgument("PlotEmbedding: xy of point " + std::to_string(i) + " = (" + FormatNumber(xy[2 * i]) +
                                     ", " + FormatNumber(xy[2 * i + 1]) + ") is not finite");
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
    entries.push_back({Fit(Drawable(class_names[k]), legend_font, 260) + " (" + std::to_string(count[k]) + ")",
                       ClassColour(k)});
  }
  if (count[K] > 0) entries.push_back({"unlabelled (" + std::to_string(count[K]) + ")", kUnlabelled});
  int legend_text_w = 0;
  for (const auto& e : entries) legend_text_w = std::max(legend_text_w, TextWidth(e.text, legend_font));
  const int row_h = TextHeight(legend_font) + 8;

  const std::string title_text = Drawable(title);
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
  Text(img, Fit(Drawable(x_label), kAxisTitleFont, P), px + P / 2, y_xlabel, kAxisTitleFont, kBlack, Align::kCenter);
  VerticalText(img, Fit(Drawable(y_label), kAxisTitleFont, P), x_ylabel, py, P, kAxisTitleFont);

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

}  // namespace scdino::eval
