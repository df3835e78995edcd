// The evaluation figures as PNG files: a confusion matrix, a 2-D embedding
// scatter plot and a row of CLS-attention maps. Drawn with OpenCV (core,
// imgproc, imgcodecs) rather than a plotting library so that the evaluation
// service has no Python or GUI dependency; the layouts adapt to the number of
// classes and the length of the names so that the figures stay readable
// without hand tuning.
//
// Common to every function here:
//  - white background, black text in cv::FONT_HERSHEY_SIMPLEX. Hershey fonts
//    only have printable ASCII: any other character (a UTF-8 sequence counts
//    once) is drawn as '?'. Names too long for their slot are shortened with
//    "..".
//  - the file is written atomically (scdino::WriteFileAtomic): a reader never
//    sees half a PNG and a failed write leaves the previous file as it was.
//  - InvalidArgument names the argument or field whose size or value is
//    wrong and says what was expected (an empty path included); IOError
//    names the path that could not be written and why.
//  - deterministic: the same inputs give the same bytes.
// Reentrant: each call draws into its own image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

/// Draws `confusion` ([true][predicted] counts, K x K, K = class_names.size()
/// >= 1, counts >= 0) as a heatmap coloured white -> dark blue by each
/// cell's fraction of its row (its true class), with the count in every
/// cell (and the row percentage where the cell is large enough), true
/// classes down the left, predicted classes along the bottom (turned 90
/// degrees when they do not fit under a column), a 0..1 colour bar and
/// `title` on top. Cells shrink from 110 to 26 px as K grows (26 px hold a
/// 4-digit count; larger counts widen the cells), so 2..40 classes give
/// figures from about 400 x 350 to 1600 x 1600 px.
Status PlotConfusionMatrix(const std::string& path, const std::vector<std::vector<int64_t>>& confusion,
                           const std::vector<std::string>& class_names, const std::string& title);

/// Scatter plot of the n points `xy` (n x 2, row-major, finite) coloured by
/// `labels` (n values, each in [-1, class_names.size()); -1 means unlabelled
/// and is drawn grey, beneath the others). Colours are a fixed qualitative
/// palette indexed by class (tab10 then its light tab20 partners; beyond 18
/// classes, spread hues), so a class keeps its colour across figures with
/// the same class list. Points are drawn in a fixed pseudo-random order so
/// that no class systematically hides another. The framed axes get a few
/// round tick values and `x_label` / `y_label`; the legend (swatch, name and
/// point count per class) sits outside the plot area on the right.
Status PlotEmbedding(const std::string& path, const std::vector<float>& xy, const std::vector<int64_t>& labels,
                     const std::vector<std::string>& class_names, const std::string& title,
                     const std::string& x_label, const std::string& y_label);

/// What PlotAttentionMaps draws: one image and its CLS attention per head.
struct AttentionFigure {
  /// Drawn above the panels.
  std::string title;
  /// The input image, channels x height x width, row-major.
  int64_t channels = 0, height = 0, width = 0;
  /// channels * height * width values in [0, 1] (outside values are
  /// clamped: the figure shows what the model saw after normalisation to
  /// [0, 1], not a re-stretched version).
  std::vector<float> image;
  /// One name per channel, or empty for "channel 0", "channel 1", ...
  std::vector<std::string> channel_names;
  /// heads x grid_h x grid_w attention of the CLS token to the patches.
  int64_t heads = 0, grid_h = 0, grid_w = 0;
  std::vector<float> maps;
};

/// One row of panels, each under its caption: every channel in grey, the mean of
/// the heads' maps and each head's map ("head 0", ...), upsampled to the
/// image's panel size without interpolation (so each patch stays a visible
/// block) and drawn with the inferno colormap, each scaled to its own
/// min..max (a footnote with a colour bar says so). Panels are at least
/// 128 px: small images are enlarged by a whole factor (nearest neighbour),
/// images larger than 320 px are reduced to 320.
Status PlotAttentionMaps(const std::string& path, const AttentionFigure& f);

}  // namespace scdino::eval
