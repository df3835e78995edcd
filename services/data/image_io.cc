#include "data/image_io.h"

#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/files.h"

namespace scdino::data {
namespace {

// libtiff reports through global handlers; keep the last message of this
// thread so errors can say why, and never print from a loader thread.
thread_local std::string tiff_message;

void TiffHandler(const char* module, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  tiff_message = std::string(module ? module : "libtiff") + ": " + buf;
}

void InstallTiffHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    TIFFSetErrorHandler(TiffHandler);
    TIFFSetWarningHandler(nullptr);
  });
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Ext(const std::string& path) {
  auto dot = path.find_last_of('.');
  auto slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return Lower(path.substr(dot));
}

// Never allocate more than this for one decoded image (guards corrupt headers).
constexpr uint64_t kMaxImageBytes = 1ull << 30;

struct Page {
  uint32_t width = 0, height = 0;
  uint16_t spp = 1, bps = 8, format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG;
};

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};

Status BadTiff(const std::string& path, const std::string& what) {
  std::string m = path + ": cannot decode TIFF: " + what;
  if (!tiff_message.empty()) m += " (" + tiff_message + ")";
  return Status::DataLoss(m);
}

torch::Dtype DtypeOf(const Page& p) {
  if (p.format == SAMPLEFORMAT_IEEEFP && p.bps == 32) return torch::kFloat32;
  if ((p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_VOID) && p.bps == 8) return torch::kUInt8;
  if ((p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_VOID) && p.bps == 16) return torch::kInt32;
  return torch::kFloat64;  // marks "unsupported"
}

// Decodes the current directory into [h, w, spp] of the page's dtype.
StatusOr<torch::Tensor> DecodePage(TIFF* tif, const Page& p, const std::string& path) {
  const uint64_t bytes_per_sample = p.bps / 8;
  const uint64_t total = static_cast<uint64_t>(p.width) * p.height * p.spp * bytes_per_sample;
  if (p.width == 0 || p.height == 0 || total > kMaxImageBytes) {
    return BadTiff(path, "implausible size " + std::to_string(p.width) + "x" + std::to_string(p.height) + "x" +
                             std::to_string(p.spp));
  }
  // Decode into native layout: planes [spp][h][w] (separate) or [h][w][spp].
  std::vector<uint8_t> buf(total);
  const bool separate = p.planar == PLANARCONFIG_SEPARATE && p.spp > 1;
  const uint64_t plane = static_cast<uint64_t>(p.width) * p.height * bytes_per_sample;
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    if (tw == 0 || th == 0) return BadTiff(path, "tile size is zero");
    const uint64_t tile_bytes = TIFFTileSize64(tif);
    std::vector<uint8_t> tile(tile_bytes);
    const uint16_t planes = separate ? p.spp : 1;
    const uint64_t px = separate ? bytes_per_sample : bytes_per_sample * p.spp;
    for (uint16_t s = 0; s < planes; ++s) {
      for (uint32_t y = 0; y < p.height; y += th) {
        for (uint32_t x = 0; x < p.width; x += tw) {
          if (TIFFReadTile(tif, tile.data(), x, y, 0, s) < 0) return BadTiff(path, "unreadable tile");
          for (uint32_t r = 0; r < th && y + r < p.height; ++r) {
            const uint32_t n = std::min(tw, p.width - x);
            uint8_t* dst = buf.data() + s * plane * (separate ? 1 : 0) + ((uint64_t)(y + r) * p.width + x) * px;
            std::memcpy(dst, tile.data() + (uint64_t)r * tw * px, n * px);
          }
        }
      }
    }
  } else {
    const tstrip_t strips = TIFFNumberOfStrips(tif);
    uint64_t offset = 0;
    for (tstrip_t s = 0; s < strips && offset < total; ++s) {
      tmsize_t n = TIFFReadEncodedStrip(tif, s, buf.data() + offset, static_cast<tmsize_t>(total - offset));
      if (n < 0) return BadTiff(path, "unreadable strip " + std::to_string(s) + " of " + std::to_string(strips));
      offset += static_cast<uint64_t>(n);
    }
    if (offset < total) {
      return BadTiff(path, "image data ends after " + std::to_string(offset) + " of " + std::to_string(total) + " bytes");
    }
  }
  // To a tensor of the output dtype.
  torch::Tensor t;
  const int64_t h = p.height, w = p.width, c = p.spp;
  std::vector<int64_t> shape = separate ? std::vector<int64_t>{c, h, w} : std::vector<int64_t>{h, w, c};
  if (p.bps == 8) {
    t = torch::from_blob(buf.data(), shape, torch::kUInt8).clone();
  } else if (p.bps == 16) {
    t = torch::from_blob(buf.data(), shape, torch::kInt16).clone().to(torch::kInt32).bitwise_and(0xffff);
  } else {
    t = torch::from_blob(buf.data(), shape, torch::kFloat32).clone();
  }
  if (separate) t = t.permute({1, 2, 0}).contiguous();
  return t;
}

}  // namespace

bool IsImageFile(const std::string& path) {
  const std::string e = Ext(path);
  return e == ".tif" || e == ".tiff" || e == ".png" || e == ".jpg" || e == ".jpeg";
}

StatusOr<RawImage> ReadTiff(const std::string& path) {
  InstallTiffHandlers();
  tiff_message.clear();
  std::unique_ptr<TIFF, TiffCloser> tif(TIFFOpen(path.c_str(), "rm"));
  if (!tif) {
    if (!FileExists(path)) return Status::NotFound("no such file: " + path);
    return BadTiff(path, "not a TIFF file");
  }
  std::string description;
  std::vector<torch::Tensor> pages;
  Page first;
  do {
    Page p;
    char* desc = nullptr;
    if (pages.empty() && TIFFGetField(tif.get(), TIFFTAG_IMAGEDESCRIPTION, &desc) && desc) description = desc;
    if (!TIFFGetField(tif.get(), TIFFTAG_IMAGEWIDTH, &p.width) || !TIFFGetField(tif.get(), TIFFTAG_IMAGELENGTH, &p.height)) {
      return BadTiff(path, "page " + std::to_string(pages.size()) + " has no width or length");
    }
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_SAMPLESPERPIXEL, &p.spp);
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_BITSPERSAMPLE, &p.bps);
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_SAMPLEFORMAT, &p.format);
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_PLANARCONFIG, &p.planar);
    if (DtypeOf(p) == torch::kFloat64) {
      return Status::InvalidArgument(path + ": unsupported TIFF sample type (" + std::to_string(p.bps) +
                                     "-bit, format " + std::to_string(p.format) +
                                     "); expected 8- or 16-bit unsigned or 32-bit float");
    }
    if (p.spp == 0) return BadTiff(path, "zero samples per pixel");
    if (pages.empty()) {
      first = p;
    } else if (p.width != first.width || p.height != first.height || p.spp != first.spp || p.bps != first.bps) {
      break;  // a thumbnail or reduced-resolution page: not part of the image
    }
    auto t = DecodePage(tif.get(), p, path);
    if (!t.ok()) return t.status();
    pages.push_back(std::move(t).value());
    if (pages.size() > 4096) return BadTiff(path, "more than 4096 pages");
  } while (TIFFReadDirectory(tif.get()));

  if (pages.size() == 1) return pages[0];
  if (first.spp != 1) return torch::cat(pages, 2);  // pages of several samples: channels add up
  auto stacked = torch::stack(pages).squeeze(-1);  // [P, h, w]
  // tifffile describes the array it wrote; its default for H x W x C is one
  // page per row. Without such a description, pages are channels.
  auto j = nlohmann::json::parse(description, nullptr, false);
  if (j.is_object() && j.contains("shape") && j["shape"].is_array()) {
    std::vector<int64_t> shape;
    for (const auto& v : j["shape"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 31)) {
        return BadTiff(path, "ImageDescription shape is not a list of positive sizes");
      }
      shape.push_back(v.get<int64_t>());
    }
    int64_t n = 1;
    for (auto s : shape) n = n > stacked.numel() ? n : n * s;  // sizes <= 2^31: no overflow before the check
    if (shape.size() == 3 && n == stacked.numel()) {
      auto a = stacked.reshape(shape);
      // The channel axis is the shortest one (first on a tie).
      if (shape[2] < shape[0] && shape[2] <= shape[1]) return a.contiguous();
      return a.permute({1, 2, 0}).contiguous();
    }
  }
  return stacked.permute({1, 2, 0}).contiguous();
}

StatusOr<RawImage> ReadImage(const std::string& path) {
  const std::string e = Ext(path);
  if (e == ".tif" || e == ".tiff") return ReadTiff(path);
  if (e == ".png" || e == ".jpg" || e == ".jpeg") {
    if (!FileExists(path)) return Status::NotFound("no such file: " + path);
    cv::Mat m;
    try {
      m = cv::imread(path, cv::IMREAD_UNCHANGED);
    } catch (const cv::Exception& ex) {
      return Status::DataLoss(path + ": cannot decode image: " + ex.what());
    }
    if (m.empty()) return Status::DataLoss(path + ": cannot decode image (corrupt or unsupported)");
    if (m.channels() == 3) cv::cvtColor(m, m, cv::COLOR_BGR2RGB);
    if (m.channels() == 4) cv::cvtColor(m, m, cv::COLOR_BGRA2RGBA);
    const int64_t c = m.channels();
    if (m.depth() == CV_8U) return torch::from_blob(m.data, {m.rows, m.cols, c}, torch::kUInt8).clone();
    if (m.depth() == CV_16U) {
      return torch::from_blob(m.data, {m.rows, m.cols, c}, torch::kInt16).clone().to(torch::kInt32).bitwise_and(0xffff);
    }
    if (m.depth() == CV_32F) return torch::from_blob(m.data, {m.rows, m.cols, c}, torch::kFloat32).clone();
    return Status::InvalidArgument(path + ": unsupported pixel depth; expected 8- or 16-bit unsigned or 32-bit float");
  }
  return Status::InvalidArgument(path + ": not an image file (expected .tif, .tiff, .png, .jpg or .jpeg)");
}

Status WriteTiff(const std::string& path, const torch::Tensor& hwc_in, TiffCompression compression) {
  InstallTiffHandlers();
  tiff_message.clear();
  TORCH_CHECK(hwc_in.dim() == 3, "WriteTiff expects H x W x C, got ", hwc_in.sizes());
  const bool u16 = hwc_in.scalar_type() != torch::kUInt8;
  auto hwc = u16 ? hwc_in.clamp(0, 65535).to(torch::kInt32).to(torch::kInt16).contiguous() : hwc_in.contiguous();
  const uint32_t h = hwc.size(0), w = hwc.size(1);
  const uint16_t c = hwc.size(2);
  AtomicFile out(path);
  if (Status s = out.Create(0644, /*open=*/false); !s.ok()) return Status::IOError("cannot write " + path + ": " + s.message());
  std::unique_ptr<TIFF, TiffCloser> tif(TIFFOpen(out.path().c_str(), "w"));
  if (!tif) return Status::IOError("cannot create " + out.path() + ": " + tiff_message);
  TIFFSetField(tif.get(), TIFFTAG_IMAGEWIDTH, w);
  TIFFSetField(tif.get(), TIFFTAG_IMAGELENGTH, h);
  TIFFSetField(tif.get(), TIFFTAG_SAMPLESPERPIXEL, c);
  TIFFSetField(tif.get(), TIFFTAG_BITSPERSAMPLE, u16 ? 16 : 8);
  TIFFSetField(tif.get(), TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
  TIFFSetField(tif.get(), TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif.get(), TIFFTAG_PHOTOMETRIC, c == 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
  if (c > 1 && c != 3) {
    std::vector<uint16_t> extra(c - 1, EXTRASAMPLE_UNSPECIFIED);
    TIFFSetField(tif.get(), TIFFTAG_EXTRASAMPLES, static_cast<uint16_t>(extra.size()), extra.data());
  }
  TIFFSetField(tif.get(), TIFFTAG_COMPRESSION,
               compression == TiffCompression::kLzw       ? COMPRESSION_LZW
               : compression == TiffCompression::kDeflate ? COMPRESSION_ADOBE_DEFLATE
                                                          : COMPRESSION_NONE);
  TIFFSetField(tif.get(), TIFFTAG_ROWSPERSTRIP, h);
  const std::string desc = "{\"shape\": [" + std::to_string(h) + ", " + std::to_string(w) + ", " + std::to_string(c) + "]}";
  TIFFSetField(tif.get(), TIFFTAG_IMAGEDESCRIPTION, desc.c_str());
  const tmsize_t bytes = static_cast<tmsize_t>(hwc.numel()) * hwc.element_size();
  if (TIFFWriteEncodedStrip(tif.get(), 0, hwc.data_ptr(), bytes) < 0) {
    return Status::IOError("cannot write " + path + ": " + tiff_message);
  }
  tif.reset();
  return out.Commit();
}

}  // namespace scdino::data
