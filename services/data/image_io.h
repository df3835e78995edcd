// Decoding of multi-channel microscopy images into H x W x C arrays: TIFF
// through libtiff (the layouts tifffile, ImageJ and other tools write: one
// page with interleaved or separate samples, one page per channel, and
// tifffile's page-per-row layout described by the ImageDescription shape),
// PNG and JPEG through OpenCV. Corrupt input gives a Status, never a crash.
// Reentrant: each call decodes into its own buffers.
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"

namespace scdino::data {

/// H x W x C, dtype uint8 (8-bit), int32 (16-bit unsigned, widened: LibTorch
/// has no uint16) or float32 (32-bit float). CPU, contiguous.
using RawImage = torch::Tensor;

/// Reads one image by extension (.tif/.tiff via libtiff; .png/.jpg/.jpeg via
/// OpenCV, colour as RGB). Errors name the file and the reason.
StatusOr<RawImage> ReadImage(const std::string& path);

StatusOr<RawImage> ReadTiff(const std::string& path);

enum class TiffCompression { kNone, kLzw, kDeflate };

/// Writes an H x W x C uint8 or int32 (as 16-bit) image as one TIFF page with
/// interleaved samples and tifffile's {"shape": [H, W, C]} description.
Status WriteTiff(const std::string& path, const torch::Tensor& hwc,
                 TiffCompression compression = TiffCompression::kNone);

/// True for the extensions ReadImage decodes.
bool IsImageFile(const std::string& path);

}  // namespace scdino::data
