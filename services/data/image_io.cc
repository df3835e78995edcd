#include "data/image_io.h"

#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <optional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/array_bytes.h"
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
// Nor more than this many times the file's size: no TIFF codec expands its
// data more (LZW's longest code is 4,096 bytes of 12 bits; deflate's best is
// 1,032:1), and uncompressed data is at most the file.
constexpr uint64_t kMaxExpansion = 4096;

struct Page {
  uint32_t width = 0, height = 0;
  uint16_t spp = 1, bps = 8, format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG;
  uint16_t photometric = PHOTOMETRIC_MINISBLACK, compression = COMPRESSION_NONE;
};

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};

Status BadTiff(const std::string& path, const std::string& what) {
  std::string m = path + ": cannot decode TIFF: " + what;
  if (!tiff_message.empty()) m += " (" + tiff_message + ")";
  return Status::DataLoss(m);
}

// What a file's decoding may allocate: every buffer a header asks for is
// checked here before it is made, and the pages' images add up.
class Budget {
 public:
  Budget(const std::string& path, uint64_t file_bytes) : path_(path), file_bytes_(file_bytes) {}
  // `what` (e.g. "a 1048576x1048576 tile") of `bytes` from data compressed
  // with `compression`; `widening`: how many bytes one stored byte becomes
  // when uncompressed (4 for an RGBA raster of subsampled YCbCr).
  Status Check(const std::optional<uint64_t>& bytes, uint16_t compression, const std::string& what,
               uint64_t widening = 1) const {
    const uint64_t expansion = compression == COMPRESSION_NONE ? widening : kMaxExpansion;
    const uint64_t most = std::min(kMaxImageBytes - std::min(kMaxImageBytes, used_), file_bytes_ * expansion);
    if (!bytes || *bytes > most) {
      return BadTiff(path_, "the header asks for " + what + " (" +
                                (bytes ? std::to_string(*bytes) + " bytes" : std::string("more than 2^63 bytes")) +
                                "), more than a " + std::to_string(file_bytes_) + "-byte file can hold (at most " +
                                std::to_string(most) + ")");
    }
    return Status::Ok();
  }
  void Use(uint64_t bytes) { used_ += bytes; }

 private:
  const std::string& path_;
  uint64_t file_bytes_;
  uint64_t used_ = 0;
};

torch::Dtype DtypeOf(const Page& p) {
  if (p.format == SAMPLEFORMAT_IEEEFP && p.bps == 32) return torch::kFloat32;
  if ((p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_VOID) && p.bps == 8) return torch::kUInt8;
  if ((p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_VOID) && p.bps == 16) return torch::kInt32;
  return torch::kFloat64;  // marks "unsupported"
}

std::string Dims(uint64_t w, uint64_t h, uint64_t c) {
  return std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c);
}

// A YCbCr page (subsampled chroma, JPEG-in-TIFF) through libtiff's RGBA
// path, which upsamples and converts it: [h, w, 3] uint8.
StatusOr<torch::Tensor> DecodeYCbCr(TIFF* tif, const Page& p, const std::string& path, Budget& budget) {
  if (p.bps != 8 || p.spp != 3) {
    return Status::InvalidArgument(path + ": unsupported YCbCr TIFF (" + std::to_string(p.spp) + " samples of " +
                                   std::to_string(p.bps) + " bits); expected 3 samples of 8 bits");
  }
  const auto bytes = ArrayBytes({p.height, p.width, 4}, 1);
  // Stored, a pixel takes at least 1 1/8 bytes (4 x 4 subsampling).
  if (Status s = budget.Check(bytes, p.compression, "a " + Dims(p.width, p.height, 4) + " RGBA raster", 4); !s.ok()) {
    return s;
  }
  budget.Use(*bytes);
  std::vector<uint32_t> raster(static_cast<size_t>(p.width) * p.height);
  if (!TIFFReadRGBAImageOriented(tif, p.width, p.height, raster.data(), ORIENTATION_TOPLEFT, 0)) {
    return BadTiff(path, "unreadable YCbCr image");
  }
  auto rgba = torch::from_blob(raster.data(), {p.height, p.width, 4}, torch::kUInt8);  // R, G, B, A bytes
  return rgba.slice(2, 0, 3).contiguous();
}

// Decodes the current directory into [h, w, spp] of the page's dtype.
StatusOr<torch::Tensor> DecodePage(TIFF* tif, const Page& p, const std::string& path, Budget& budget) {
  if (p.photometric == PHOTOMETRIC_YCBCR) return DecodeYCbCr(tif, p, path, budget);
  const uint64_t bytes_per_sample = p.bps / 8;
  if (p.width == 0 || p.height == 0) return BadTiff(path, "implausible size " + Dims(p.width, p.height, p.spp));
  const auto wanted = ArrayBytes({p.height, p.width, p.spp}, bytes_per_sample);
  if (Status s = budget.Check(wanted, p.compression, "a " + Dims(p.width, p.height, p.spp) + " page"); !s.ok()) return s;
  const uint64_t total = *wanted;
  budget.Use(total);
  // Decode into native layout: planes [spp][h][w] (separate) or [h][w][spp].
  std::vector<uint8_t> buf(total);
  const bool separate = p.planar == PLANARCONFIG_SEPARATE && p.spp > 1;
  const uint64_t plane = static_cast<uint64_t>(p.width) * p.height * bytes_per_sample;
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    if (tw == 0 || th == 0) return BadTiff(path, "tile size is zero");
    const uint64_t px = separate ? bytes_per_sample : bytes_per_sample * p.spp;
    // The tile as the copy below reads it, and as libtiff says it is
    // stored: they must agree (a subsampled tile is smaller).
    const auto tile_bytes = ArrayBytes({th, tw}, px);
    if (Status s = budget.Check(tile_bytes, p.compression, "a " + Dims(tw, th, separate ? 1 : p.spp) + " tile"); !s.ok()) {
      return s;
    }
    if (static_cast<uint64_t>(TIFFTileSize64(tif)) != *tile_bytes) {
      return BadTiff(path, "a " + std::to_string(tw) + "x" + std::to_string(th) + " tile holds " +
                               std::to_string(TIFFTileSize64(tif)) + " bytes, expected " + std::to_string(*tile_bytes));
    }
    std::vector<uint8_t> tile(*tile_bytes);
    const uint16_t planes = separate ? p.spp : 1;
    for (uint16_t s = 0; s < planes; ++s) {
      for (uint64_t y = 0; y < p.height; y += th) {
        for (uint64_t x = 0; x < p.width; x += tw) {
          if (TIFFReadTile(tif, tile.data(), static_cast<uint32_t>(x), static_cast<uint32_t>(y), 0, s) < 0) {
            return BadTiff(path, "unreadable tile");
          }
          // An edge tile is stored whole; only the part inside the image is kept.
          for (uint64_t r = 0; r < th && y + r < p.height; ++r) {
            const uint64_t n = std::min<uint64_t>(tw, p.width - x);
            uint8_t* dst = buf.data() + s * plane * (separate ? 1 : 0) + ((y + r) * p.width + x) * px;
            std::memcpy(dst, tile.data() + r * tw * px, n * px);
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

StatusOr<RawImage> ReadTiffPages(const std::string& path) {
  InstallTiffHandlers();
  tiff_message.clear();
  std::unique_ptr<TIFF, TiffCloser> tif(TIFFOpen(path.c_str(), "rm"));
  if (!tif) {
    if (!FileExists(path)) return Status::NotFound("no such file: " + path);
    return BadTiff(path, "not a TIFF file");
  }
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) return Status::IOError("cannot read " + path + ": " + ec.message());
  Budget budget(path, file_bytes);
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
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_COMPRESSION, &p.compression);
    TIFFGetField(tif.get(), TIFFTAG_PHOTOMETRIC, &p.photometric);
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
    auto t = DecodePage(tif.get(), p, path, budget);
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
    const auto n = ArrayBytes(shape, 1);
    if (shape.size() == 3 && n && static_cast<int64_t>(*n) == stacked.numel()) {
      auto a = stacked.reshape(shape);
      // The channel axis is the shortest one (first on a tie).
      if (shape[2] < shape[0] && shape[2] <= shape[1]) return a.contiguous();
      return a.permute({1, 2, 0}).contiguous();
    }
  }
  return stacked.permute({1, 2, 0}).contiguous();
}

}  // namespace

bool IsImageFile(const std::string& path) {
  const std::string e = Ext(path);
  return e == ".tif" || e == ".tiff" || e == ".png" || e == ".jpg" || e == ".jpeg";
}

StatusOr<RawImage> ReadTiff(const std::string& path) {
  // The decoder's allocations are bounded, but memory may still run out:
  // that is this file's error too, never the caller's thread's end.
  try {
    return ReadTiffPages(path);
  } catch (const std::exception& e) {
    return Status::DataLoss(path + ": cannot decode TIFF: " + e.what());
  }
}

StatusOr<RawImage> ReadImage(const std::string& path) {
  const std::string e = Ext(path);
  if (e == ".tif" || e == ".tiff") return ReadTiff(path);
  if (e == ".png" || e == ".jpg" || e == ".jpeg") {
    if (!FileExists(path)) return Status::NotFound("no such file: " + path);
    cv::Mat m;
    try {
      m = cv::imread(path, cv::IMREAD_UNCHANGED);
    } catch (const std::exception& ex) {  // cv::Exception, or memory
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
