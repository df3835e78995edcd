// The attention-map figure: every channel of the input in grey, then the
// mean of the heads' CLS attention and each head's, laid out in one row.
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
                                     FormatNumber(f.image[i]) + " is not finite");
    }
  }
  for (size_t i = 0; i < f.maps.size(); ++i) {
    if (!std::isfinite(f.maps[i])) {
      return Status::InvalidArgument("PlotAttentionMaps: maps value " + std::to_string(i) + " (head " +
                                     std::to_string(i / map_size) + ") = " + FormatNumber(f.maps[i]) + " is not finite");
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
    captions.push_back(f.channel_names.empty() ? "channel " + std::to_string(c) : Drawable(f.channel_names[c]));
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
  const std::string title_text = Drawable(f.title);
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
