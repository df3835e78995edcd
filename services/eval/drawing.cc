#include "eval/drawing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>
#include <string_view>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#ifdef SCDINO_HAVE_FREETYPE
#include <opencv2/freetype.hpp>
#endif

#include "common/files.h"

namespace scdino::eval::drawing {


// ---------------------------------------------------------------- text ----

// Hershey fonts have printable ASCII only; a multi-byte UTF-8 character
// becomes one '?' rather than one per byte. The fallback without a
// TrueType face.
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

namespace {

// The TrueType face, loaded once; FreeType2 is not reentrant, so every use
// holds the lock.
struct Typeface {
  std::mutex mu;
#ifdef SCDINO_HAVE_FREETYPE
  cv::Ptr<cv::freetype::FreeType2> ft;
#endif
  std::string path;
};

Typeface& Face() {
  static Typeface* face = [] {
    auto* t = new Typeface;
#ifdef SCDINO_HAVE_FREETYPE
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("SCDINO_FONT"); env != nullptr && *env != '\0') candidates.push_back(env);
    candidates.push_back("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    for (const auto& path : candidates) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) continue;
      try {
        auto ft = cv::freetype::createFreeType2();
        ft->loadFontData(path, 0);
        t->ft = ft;
        t->path = path;
        break;
      } catch (const cv::Exception&) {
        // Not a font FreeType reads: the next candidate.
      }
    }
#endif
    return t;
  }();
  return *face;
}

// The TrueType size of a Hershey scale: about the same cap height.
int PixelHeight(const Font& f) { return std::max(6, static_cast<int>(std::lround(f.scale * 30))); }

// The size of `s` and its descent below the baseline.
cv::Size Measure(const std::string& s, const Font& f, int* base) {
  *base = 0;
#ifdef SCDINO_HAVE_FREETYPE
  Typeface& t = Face();
  if (t.ft) {
    std::lock_guard<std::mutex> lock(t.mu);
    return t.ft->getTextSize(s, PixelHeight(f), -1, base);
  }
#endif
  return cv::getTextSize(s, kFace, f.scale, f.thickness, base);
}

}  // namespace

const std::string& TypefacePath() { return Face().path; }

std::string Drawable(const std::string& s) {
  if (TypefacePath().empty()) return Ascii(s);
  // Valid UTF-8 kept (control characters as spaces); a byte that starts no
  // valid sequence becomes '?'.
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool valid = n > 0 && i + n <= s.size();
    for (size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (!valid) {
      out += '?';
      ++i;
      continue;
    }
    if (n == 1 && (c < 0x20 || c == 0x7f)) {
      out += ' ';
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

int TextWidth(const std::string& s, const Font& f) {
  int base = 0;
  return Measure(s, f, &base).width;
}

// Line height: the cap height plus the descent, the same for every string
// of a font, so rows of labels line up.
int TextHeight(const Font& f) {
  int base = 0;
  cv::Size sz = Measure("Ag", f, &base);
  return sz.height + base;
}

int Ascent(const Font& f) {
  int base = 0;
  return Measure("Ag", f, &base).height;
}

// `s` shortened with ".." to at most `max_width` pixels.
std::string Fit(const std::string& s, const Font& f, int max_width) {
  if (TextWidth(s, f) <= max_width) return s;
  std::string t = s;
  while (!t.empty() && TextWidth(t + "..", f) > max_width) {
    // A whole UTF-8 character: its continuation bytes, then its lead.
    while (t.size() > 1 && (static_cast<unsigned char>(t.back()) & 0xc0) == 0x80) t.pop_back();
    t.pop_back();
  }
  return t + "..";
}


// Draws `s` with its line box (ascent + descent) starting at `top`; `x` is
// the left edge, centre or right edge according to `align`.
void Text(cv::Mat& img, const std::string& s, int x, int top, const Font& f, const cv::Scalar& colour,
          Align align) {
  const int w = TextWidth(s, f);
  if (align == Align::kCenter) x -= w / 2;
  if (align == Align::kRight) x -= w;
  const cv::Point baseline(x, top + Ascent(f));
#ifdef SCDINO_HAVE_FREETYPE
  Typeface& t = Face();
  if (t.ft) {
    std::lock_guard<std::mutex> lock(t.mu);
    t.ft->putText(img, s, baseline, PixelHeight(f), colour, -1, cv::LINE_AA, true);
    return;
  }
#endif
  cv::putText(img, s, baseline, kFace, f.scale, colour, f.thickness, cv::LINE_AA);
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
                  Align align) {
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

}  // namespace scdino::eval::drawing
