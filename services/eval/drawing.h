// The drawing surface of the evaluation figures (eval/plots.h, on OpenCV):
// measured text (any UTF-8 in a TrueType font through OpenCV's FreeType
// module, else ASCII in Hershey's; shortened to fit, turned by 90 degrees),
// the colour scales and the class palette, round axis ticks, a
// deterministic shuffle, and the atomic PNG write. Thread-safe.
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval::drawing {

constexpr int kFace = cv::FONT_HERSHEY_SIMPLEX;
inline const cv::Scalar kBlack(0, 0, 0);
inline const cv::Scalar kWhite(255, 255, 255);
inline const cv::Scalar kFrameGrey(150, 150, 150);
/// Unlabelled points (label -1).
inline const cv::Scalar kUnlabelled(175, 175, 175);

struct Font {
  double scale;
  int thickness;
};
constexpr Font kTitleFont{0.7, 2};
constexpr Font kAxisTitleFont{0.55, 1};
constexpr Font kTickFont{0.45, 1};

enum class Align { kLeft, kCenter, kRight };

/// Printable ASCII of `s`: a multi-byte UTF-8 character becomes one '?'.
std::string Ascii(const std::string& s);
/// The TrueType font the labels are drawn in: $SCDINO_FONT, else Debian's
/// DejaVu Sans (fonts-dejavu-core); empty when none loads (or OpenCV has
/// no FreeType module), and the labels are drawn in ASCII.
const std::string& TypefacePath();
/// `s` as the figures can draw it: every UTF-8 character with a TrueType
/// font (control characters as spaces, invalid bytes as '?'), else Ascii(s).
std::string Drawable(const std::string& s);
int TextWidth(const std::string& s, const Font& f);
/// Line height (cap height plus descent), the same for every string of a font.
int TextHeight(const Font& f);
int Ascent(const Font& f);
/// `s` shortened with ".." to at most `max_width` pixels.
std::string Fit(const std::string& s, const Font& f, int max_width);
/// Draws `s` with its line box starting at `top`; `x` is the left edge,
/// centre or right edge according to `align`.
void Text(cv::Mat& img, const std::string& s, int x, int top, const Font& f, const cv::Scalar& colour,
          Align align = Align::kLeft);
/// Black text on white in its own image, for turning by 90 degrees.
cv::Mat TextImage(const std::string& s, const Font& f, int width);
/// Copies `src` into `dst` at `tl` keeping the darker pixel (clipped).
void Darken(cv::Mat& dst, const cv::Mat& src, cv::Point tl);
/// Text reading bottom to top in the box (x, y, TextHeight wide,
/// `box_height` high): its end at the top (kRight) or centred (kCenter).
void VerticalText(cv::Mat& img, const std::string& s, int x, int y, int box_height, const Font& f,
                  Align align = Align::kCenter);

/// Encodes and writes atomically; errors name the path.
Status SavePng(const std::string& path, const cv::Mat& img);
/// InvalidArgument naming `fn` for an empty path.
Status CheckPath(const char* fn, const std::string& path);
/// BGR from an sRGB triple.
cv::Scalar Rgb(int r, int g, int b);
/// matplotlib's "Blues", white (0) to dark blue (1).
cv::Scalar Blues(double t);
/// Perceived brightness (0..255) of a BGR colour.
double Luma(const cv::Scalar& bgr);
/// The colour of class k: tab10 without grey, the light tab20 partners,
/// then golden-angle hues.
cv::Scalar ClassColour(int64_t k);
/// Round tick values inside [lo, hi], at least `min_ticks` of them.
std::vector<double> NiceTicks(double lo, double hi, int min_ticks);
/// `v` with as many decimals as the tick step needs.
std::string TickLabel(double v, double step);
/// A deterministic permutation of 0..n-1 (the same in every standard library).
std::vector<size_t> Shuffled(size_t n, uint64_t seed);

}  // namespace scdino::eval::drawing
