#include "data/image_io.h"

#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
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

// The decoded array of one file is at most this (the tensor handed back,
// 16-bit samples widened to int32 counted as 4 bytes); decoding it adds at
// most one strip, tile or RGBA raster, itself within both limits.
constexpr uint64_t kMaxImageBytes = 1ull << 30;
// Nor more than this many times the file's size: no TIFF, PNG or JPEG codec
// expands its data more (LZW's longest code is 4,096 bytes of 12 bits;
// deflate's best is 1,032:1; a baseline or progressive JPEG needs at least
// one bit per 8 x 8 block and component), and uncompressed data is at most
// the file.
constexpr uint64_t kMaxExpansion = 4096;
// A strip larger than this is decoded a few rows at a time (TIFF).
constexpr uint64_t kScratchBytes = 8ull << 20;

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

std::string Dims(uint64_t w, uint64_t h, uint64_t c) {
  return std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c);
}

// What a header may make a decoder allocate: `bytes` (nullopt: beyond 2^63)
// for `what` (e.g. "a 1048576x1048576 tile"), stored `compressed` or not;
// `widening`: how many bytes one stored byte becomes when uncompressed (4
// for an RGBA raster of subsampled YCbCr).
Status CheckAllocation(const std::string& path, const std::string& format, uint64_t file_bytes,
                       const std::optional<uint64_t>& bytes, bool compressed, const std::string& what,
                       uint64_t widening = 1) {
  const uint64_t most = std::min(kMaxImageBytes, file_bytes * (compressed ? kMaxExpansion : widening));
  if (bytes && *bytes <= most) return Status::Ok();
  std::string m = path + ": cannot decode " + format + ": the header asks for " + what + " (" +
                  (bytes ? std::to_string(*bytes) + " bytes" : std::string("more than 2^63 bytes")) +
                  "), more than a " + std::to_string(file_bytes) + "-byte file can hold (at most " +
                  std::to_string(most) + ")";
  if (format == "TIFF" && !tiff_message.empty()) m += " (" + tiff_message + ")";
  return Status::DataLoss(m);
}

// How a page stores its samples (SampleFormat and BitsPerSample), and the
// dtype they are decoded to: 8- and 16-bit unsigned as uint8 and int32
// (LibTorch has no uint16); every other integer or float type as float32,
// which holds signed 8- and 16-bit and 16-bit float samples exactly and
// rounds 32-bit integers and 64-bit floats to its 24 bits of mantissa (the
// images are scaled to [0, 1] per channel afterwards).
enum class Samples { kU8, kU16, kU32, kI8, kI16, kI32, kF16, kF32, kF64, kUnsupported };

Samples SamplesOf(const Page& p) {
  const bool uint = p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_VOID;
  if (uint && p.bps == 8) return Samples::kU8;
  if (uint && p.bps == 16) return Samples::kU16;
  if (uint && p.bps == 32) return Samples::kU32;
  if (p.format == SAMPLEFORMAT_INT && p.bps == 8) return Samples::kI8;
  if (p.format == SAMPLEFORMAT_INT && p.bps == 16) return Samples::kI16;
  if (p.format == SAMPLEFORMAT_INT && p.bps == 32) return Samples::kI32;
  if (p.format == SAMPLEFORMAT_IEEEFP && p.bps == 16) return Samples::kF16;
  if (p.format == SAMPLEFORMAT_IEEEFP && p.bps == 32) return Samples::kF32;
  if (p.format == SAMPLEFORMAT_IEEEFP && p.bps == 64) return Samples::kF64;
  return Samples::kUnsupported;
}

torch::Dtype DtypeOf(const Page& p) {
  switch (SamplesOf(p)) {
    case Samples::kU8: return torch::kUInt8;
    case Samples::kU16: return torch::kInt32;
    default: return torch::kFloat32;
  }
}

// Copies `rows` x `cols` pixels of `samples` samples from `src` (rows of
// `src_w` pixels, as libtiff hands them over: native byte order) into `dst`,
// a strided [rows, cols, samples] view of the output, converting each sample.
template <typename Stored, typename Out>
void PlaceSamples(const Stored* src, int64_t src_w, int64_t samples, Out* dst, c10::IntArrayRef strides, int64_t rows,
                  int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const Stored* from = src + r * src_w * samples;
    Out* row = dst + r * strides[0];
    if constexpr (std::is_same_v<Stored, Out>) {
      if (strides[2] == 1 && strides[1] == samples) {  // the whole image, or all its channels: rows are dense
        std::memcpy(row, from, sizeof(Out) * static_cast<size_t>(cols * samples));
        continue;
      }
    }
    for (int64_t x = 0; x < cols; ++x) {
      for (int64_t k = 0; k < samples; ++k) row[x * strides[1] + k * strides[2]] = static_cast<Out>(from[x * samples + k]);
    }
  }
}

// A YCbCr page (subsampled chroma, JPEG-in-TIFF) through libtiff's RGBA
// path, which upsamples and converts it into `dst` ([h, w, 3] uint8).
Status DecodeYCbCrInto(TIFF* tif, const Page& p, const std::string& path, uint64_t file_bytes, torch::Tensor dst) {
  const auto bytes = ArrayBytes({p.height, p.width, 4}, 1);
  // Stored, a pixel takes at least 1 1/8 bytes (4 x 4 subsampling).
  if (Status s = CheckAllocation(path, "TIFF", file_bytes, bytes, p.compression != COMPRESSION_NONE,
                                 "a " + Dims(p.width, p.height, 4) + " RGBA raster", 4);
      !s.ok()) {
    return s;
  }
  std::vector<uint32_t> raster(static_cast<size_t>(p.width) * p.height);
  if (!TIFFReadRGBAImageOriented(tif, p.width, p.height, raster.data(), ORIENTATION_TOPLEFT, 0)) {
    return BadTiff(path, "unreadable YCbCr image");
  }
  auto rgba = torch::from_blob(raster.data(), {p.height, p.width, 4}, torch::kUInt8);  // R, G, B, A bytes
  dst.copy_(rgba.slice(2, 0, 3));
  return Status::Ok();
}

// Decodes the current directory into `dst`, a [h, w, spp] view (strided
// where the page is some channels of the image) of the output, whose dtype
// is DtypeOf(p): strip by strip or tile by tile through one scratch buffer,
// never the page twice.
Status DecodePageInto(TIFF* tif, const Page& p, const std::string& path, uint64_t file_bytes, torch::Tensor dst) {
  const bool compressed = p.compression != COMPRESSION_NONE;
  if (p.photometric == PHOTOMETRIC_YCBCR) return DecodeYCbCrInto(tif, p, path, file_bytes, dst);
  const uint64_t bytes_per_sample = p.bps / 8;
  const auto stored = ArrayBytes({p.height, p.width, p.spp}, bytes_per_sample);
  if (Status s = CheckAllocation(path, "TIFF", file_bytes, stored, compressed, "a " + Dims(p.width, p.height, p.spp) + " page");
      !s.ok()) {
    return s;
  }
  const bool separate = p.planar == PLANARCONFIG_SEPARATE && p.spp > 1;
  const int64_t unit_samples = separate ? 1 : p.spp;  // samples a pixel has in one strip or tile
  const uint64_t px = bytes_per_sample * unit_samples;
  // Rows [y, y + rows) and columns [x, x + cols) of plane `plane` (all of
  // them when contiguous) from `unit`, whose rows hold `unit_w` pixels.
  const Samples samples = SamplesOf(p);
  auto place = [&](const uint8_t* unit, int64_t unit_w, int64_t plane, int64_t y, int64_t x, int64_t rows,
                   int64_t cols) {
    auto to = dst.narrow(0, y, rows).narrow(1, x, cols);
    if (separate) to = to.narrow(2, plane, 1);
    const auto as_float = [&](auto stored) {
      PlaceSamples(reinterpret_cast<const decltype(stored)*>(unit), unit_w, unit_samples, to.data_ptr<float>(),
                   to.strides(), rows, cols);
    };
    switch (samples) {
      case Samples::kU8:
        PlaceSamples(unit, unit_w, unit_samples, to.data_ptr<uint8_t>(), to.strides(), rows, cols);
        break;
      case Samples::kU16:  // widened: LibTorch has no uint16
        PlaceSamples(reinterpret_cast<const uint16_t*>(unit), unit_w, unit_samples, to.data_ptr<int32_t>(), to.strides(),
                     rows, cols);
        break;
      case Samples::kU32: as_float(uint32_t{}); break;
      case Samples::kI8: as_float(int8_t{}); break;
      case Samples::kI16: as_float(int16_t{}); break;
      case Samples::kI32: as_float(int32_t{}); break;
      case Samples::kF16: as_float(c10::Half{}); break;
      case Samples::kF32: as_float(float{}); break;
      case Samples::kF64: as_float(double{}); break;
      case Samples::kUnsupported: break;  // ReadPage refused it
    }
  };
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    if (tw == 0 || th == 0) return BadTiff(path, "tile size is zero");
    // The tile as the copy reads it, and as libtiff says it is stored: they
    // must agree (a subsampled tile is smaller).
    const auto tile_bytes = ArrayBytes({th, tw}, px);
    if (Status s = CheckAllocation(path, "TIFF", file_bytes, tile_bytes, compressed,
                                   "a " + Dims(tw, th, unit_samples) + " tile");
        !s.ok()) {
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
          place(tile.data(), tw, s, y, x, std::min<int64_t>(th, p.height - y), std::min<int64_t>(tw, p.width - x));
        }
      }
    }
  } else {
    // Strips hold whole rows of one plane, in order: plane 0's rows, then
    // plane 1's when separate. A strip of at most kScratchBytes is decoded
    // whole; a larger one (a whole image in one strip, as many writers
    // store it) row by row into a scratch of at most that size, so decoding
    // never holds more than the output and one scratch buffer.
    const uint64_t row_bytes = p.width * px;
    const uint64_t total_rows = static_cast<uint64_t>(p.height) * (separate ? p.spp : 1);
    const auto strip_bytes = std::optional<uint64_t>(static_cast<uint64_t>(TIFFStripSize64(tif)));
    if (Status s = CheckAllocation(path, "TIFF", file_bytes, strip_bytes, compressed, "a strip"); !s.ok()) return s;
    const bool by_strip = *strip_bytes <= kScratchBytes;
    const uint64_t chunk_rows = std::max<uint64_t>(1, kScratchBytes / row_bytes);
    std::vector<uint8_t> scratch(by_strip ? std::max<uint64_t>(*strip_bytes, row_bytes)
                                          : std::min<uint64_t>(chunk_rows, total_rows) * row_bytes);
    // Places `rows` rows from the scratch, starting at row `row` of all planes.
    auto place_rows = [&](uint64_t row, uint64_t rows) {
      for (uint64_t done = 0; done < rows;) {  // a strip never spans planes in a valid file; split if it does
        const uint64_t plane = (row + done) / p.height, y = (row + done) % p.height;
        const uint64_t k = std::min<uint64_t>(rows - done, p.height - y);
        place(scratch.data() + done * row_bytes, p.width, plane, y, 0, k, p.width);
        done += k;
      }
    };
    uint64_t row = 0;  // rows placed so far, over all planes
    if (by_strip) {
      const tstrip_t strips = TIFFNumberOfStrips(tif);
      for (tstrip_t s = 0; s < strips && row < total_rows; ++s) {
        tmsize_t n = TIFFReadEncodedStrip(tif, s, scratch.data(), static_cast<tmsize_t>(scratch.size()));
        if (n < 0) return BadTiff(path, "unreadable strip " + std::to_string(s) + " of " + std::to_string(strips));
        if (static_cast<uint64_t>(n) % row_bytes != 0) {
          return BadTiff(path, "strip " + std::to_string(s) + " holds " + std::to_string(n) +
                                   " bytes, not whole rows of " + std::to_string(row_bytes));
        }
        const uint64_t rows = std::min<uint64_t>(n / row_bytes, total_rows - row);
        place_rows(row, rows);
        row += rows;
      }
    } else {
      while (row < total_rows) {
        const uint64_t rows = std::min<uint64_t>(chunk_rows, total_rows - row);
        for (uint64_t r = 0; r < rows; ++r) {
          const uint64_t plane = (row + r) / p.height, y = (row + r) % p.height;
          if (TIFFReadScanline(tif, scratch.data() + r * row_bytes, static_cast<uint32_t>(y),
                               static_cast<uint16_t>(plane)) < 0) {
            return BadTiff(path, "unreadable row " + std::to_string(y) + (separate ? " of plane " + std::to_string(plane) : ""));
          }
        }
        place_rows(row, rows);
        row += rows;
      }
    }
    if (row < total_rows) {
      return BadTiff(path, "image data ends after " + std::to_string(row * row_bytes) + " of " +
                               std::to_string(total_rows * row_bytes) + " bytes");
    }
  }
  return Status::Ok();
}

// The fields of the current directory, checked for a dtype the reader has.
StatusOr<Page> ReadPage(TIFF* tif, const std::string& path, size_t index) {
  Page p;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &p.width) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &p.height)) {
    return BadTiff(path, "page " + std::to_string(index) + " has no width or length");
  }
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &p.spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &p.bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &p.format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &p.planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &p.compression);
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &p.photometric);
  if (SamplesOf(p) == Samples::kUnsupported) {
    static const std::map<uint16_t, std::string> kFormats = {{SAMPLEFORMAT_UINT, "unsigned"},
                                                             {SAMPLEFORMAT_INT, "signed"},
                                                             {SAMPLEFORMAT_IEEEFP, "float"},
                                                             {SAMPLEFORMAT_VOID, "untyped"},
                                                             {SAMPLEFORMAT_COMPLEXINT, "complex integer"},
                                                             {SAMPLEFORMAT_COMPLEXIEEEFP, "complex float"}};
    const auto name = kFormats.find(p.format);
    return Status::InvalidArgument(path + ": unsupported TIFF sample type (" + std::to_string(p.bps) + "-bit " +
                                   (name != kFormats.end() ? name->second : "format " + std::to_string(p.format)) +
                                   "); expected 8-, 16- or 32-bit integers or 16-, 32- or 64-bit floats");
  }
  if (p.spp == 0) return BadTiff(path, "zero samples per pixel");
  if (p.photometric == PHOTOMETRIC_YCBCR && (p.bps != 8 || p.spp != 3)) {
    return Status::InvalidArgument(path + ": unsupported YCbCr TIFF (" + std::to_string(p.spp) + " samples of " +
                                   std::to_string(p.bps) + " bits); expected 3 samples of 8 bits");
  }
  if (p.width == 0 || p.height == 0) return BadTiff(path, "implausible size " + Dims(p.width, p.height, p.spp));
  return p;
}

// tifffile's ImageDescription shape of a P-page image of h x w single-sample
// pages, if it describes exactly those `numel` samples.
StatusOr<std::optional<std::vector<int64_t>>> DescribedShape(const std::string& description, int64_t numel,
                                                             const std::string& path) {
  auto j = nlohmann::json::parse(description, nullptr, false);
  if (!j.is_object() || !j.contains("shape") || !j["shape"].is_array()) return std::optional<std::vector<int64_t>>();
  std::vector<int64_t> shape;
  for (const auto& v : j["shape"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 31)) {
      return BadTiff(path, "ImageDescription shape is not a list of positive sizes");
    }
    shape.push_back(v.get<int64_t>());
  }
  const auto n = ArrayBytes(shape, 1);
  if (shape.size() != 3 || !n || static_cast<int64_t>(*n) != numel) return std::optional<std::vector<int64_t>>();
  return std::optional<std::vector<int64_t>>(shape);
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

  // First the pages' fields: the image is the leading pages of the first
  // page's size and samples (a thumbnail or reduced-resolution page after
  // them is not part of it), so the output is sized once, before decoding.
  std::string description;
  char* desc = nullptr;
  if (TIFFGetField(tif.get(), TIFFTAG_IMAGEDESCRIPTION, &desc) && desc) description = desc;
  std::vector<Page> pages;
  do {
    auto p = ReadPage(tif.get(), path, pages.size());
    if (!p.ok()) return p.status();
    const Page& first = pages.empty() ? *p : pages[0];
    if (p->width != first.width || p->height != first.height || p->spp != first.spp || p->bps != first.bps ||
        SamplesOf(*p) != SamplesOf(first)) {
      break;
    }
    pages.push_back(*p);
    if (pages.size() > 4096) return BadTiff(path, "more than 4096 pages");
  } while (TIFFReadDirectory(tif.get()));
  const Page& first = pages[0];
  const int64_t n = static_cast<int64_t>(pages.size()), h = first.height, w = first.width, c = first.spp;
  const torch::Dtype dtype = first.photometric == PHOTOMETRIC_YCBCR ? torch::kUInt8 : DtypeOf(first);
  const auto out_bytes = ArrayBytes({n, h, w, c}, torch::elementSize(dtype));
  if (!out_bytes || *out_bytes > kMaxImageBytes) {
    return BadTiff(path, "the image of " + std::to_string(n) + " page(s) of " + Dims(w, h, c) + " is " +
                             (out_bytes ? std::to_string(*out_bytes) + " bytes" : std::string("more than 2^63 bytes")) +
                             " decoded, more than the reader's bound of " + std::to_string(kMaxImageBytes));
  }

  // Where each page goes. Pages of several samples: their channels add up.
  // Single-sample pages are channels, unless tifffile's description says
  // they are rows (its default for H x W x C: the channel axis is the
  // shortest, first on a tie).
  torch::Tensor out;
  std::function<torch::Tensor(int64_t)> page_view;
  torch::Tensor pages_first;  // [P, h, w], reshaped afterwards
  std::optional<std::vector<int64_t>> shape;
  if (n > 1 && c == 1) {
    auto described = DescribedShape(description, n * h * w, path);
    if (!described.ok()) return described.status();
    shape = *described;
  }
  const bool rows = shape && (*shape)[2] < (*shape)[0] && (*shape)[2] <= (*shape)[1];
  if (n == 1 || c > 1) {
    out = torch::empty({h, w, n * c}, dtype);
    page_view = [&](int64_t i) { return out.narrow(2, i * c, c); };
  } else if (!rows && (!shape || *shape == std::vector<int64_t>{n, h, w})) {
    out = torch::empty({h, w, n}, dtype);
    page_view = [&](int64_t i) { return out.narrow(2, i, 1); };
  } else {
    pages_first = torch::empty({n, h, w, 1}, dtype);
    page_view = [&](int64_t i) { return pages_first[i]; };
  }
  if (!TIFFSetDirectory(tif.get(), 0)) return BadTiff(path, "cannot return to the first page");
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0 && !TIFFReadDirectory(tif.get())) return BadTiff(path, "page " + std::to_string(i) + " unreadable");
    if (Status s = DecodePageInto(tif.get(), pages[i], path, file_bytes, page_view(i)); !s.ok()) return s;
  }
  if (!pages_first.defined()) return out;
  const auto& s = *shape;
  auto a = pages_first.view(s);
  if (rows) return a;  // a page per row: already H x W x C
  return a.permute({1, 2, 0}).contiguous();
}

// PNG's and JPEG's sizes from their headers, before OpenCV allocates
// anything: the decoded Mat's bytes (what the file's data must expand to)
// and the output tensor's.
struct RasterHeader {
  uint64_t width = 0, height = 0;
  uint64_t stored_bits_per_pixel = 0;  // as compressed: samples x bits, before palette expansion
  uint64_t out_channels = 0, out_bytes_per_sample = 1;
};

uint32_t Be32(const unsigned char* b) { return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3]; }
uint32_t Be16(const unsigned char* b) { return uint32_t(b[0]) << 8 | b[1]; }

StatusOr<RasterHeader> PngHeader(std::ifstream& in, const std::string& path) {
  unsigned char b[33];
  if (!in.read(reinterpret_cast<char*>(b), sizeof b) || std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0 ||
      std::memcmp(b + 12, "IHDR", 4) != 0) {
    return Status::DataLoss(path + ": cannot decode PNG: no PNG signature and IHDR chunk");
  }
  RasterHeader r;
  r.width = Be32(b + 16), r.height = Be32(b + 20);
  const unsigned depth = b[24], colour = b[25];
  // Samples stored, and the channels OpenCV hands back unchanged (a palette
  // or grey with alpha may come back as 4).
  const std::map<unsigned, std::pair<unsigned, unsigned>> kinds = {{0, {1, 1}}, {2, {3, 3}}, {3, {1, 4}}, {4, {2, 4}}, {6, {4, 4}}};
  auto kind = kinds.find(colour);
  if (kind == kinds.end() || (depth != 1 && depth != 2 && depth != 4 && depth != 8 && depth != 16)) {
    return Status::DataLoss(path + ": cannot decode PNG: colour type " + std::to_string(colour) + " with bit depth " +
                            std::to_string(depth) + " is not a PNG image type");
  }
  r.stored_bits_per_pixel = kind->second.first * depth;
  r.out_channels = kind->second.second;
  r.out_bytes_per_sample = depth == 16 ? 4 : 1;  // 16-bit widened to int32
  return r;
}

StatusOr<RasterHeader> JpegHeader(std::ifstream& in, const std::string& path) {
  auto bad = [&](const std::string& what) { return Status::DataLoss(path + ": cannot decode JPEG: " + what); };
  unsigned char b[2];
  if (!in.read(reinterpret_cast<char*>(b), 2) || b[0] != 0xff || b[1] != 0xd8) return bad("no JPEG start marker");
  // Segments up to the frame header (SOF0-15 but DHT, JPG and DAC).
  while (true) {
    unsigned char m[2];
    if (!in.read(reinterpret_cast<char*>(m), 2)) return bad("no frame header before the end of the file");
    if (m[0] != 0xff) return bad("a segment does not start with a marker");
    if (m[1] == 0xff || m[1] == 0x01 || (m[1] >= 0xd0 && m[1] <= 0xd7)) {  // fill byte, TEM, RSTn: no length
      if (m[1] == 0xff) in.seekg(-1, std::ios::cur);
      continue;
    }
    if (m[1] == 0xd9 || m[1] == 0xda) return bad("no frame header before the scan");
    unsigned char len[2];
    if (!in.read(reinterpret_cast<char*>(len), 2) || Be16(len) < 2) return bad("a segment's length is cut");
    const bool frame = m[1] >= 0xc0 && m[1] <= 0xcf && m[1] != 0xc4 && m[1] != 0xc8 && m[1] != 0xcc;
    if (!frame) {
      in.seekg(Be16(len) - 2, std::ios::cur);
      continue;
    }
    unsigned char f[6];
    if (Be16(len) < 8 || !in.read(reinterpret_cast<char*>(f), 6)) return bad("the frame header is cut");
    RasterHeader r;
    const unsigned precision = f[0], components = f[5];
    r.height = Be16(f + 1), r.width = Be16(f + 3);
    if (components < 1 || components > 4 || (precision != 8 && precision != 12)) {
      return bad(std::to_string(components) + " components of " + std::to_string(precision) +
                 " bits; expected 1 to 4 of 8 or 12 bits");
    }
    r.stored_bits_per_pixel = components * precision;
    r.out_channels = std::max(3u, components);
    r.out_bytes_per_sample = precision == 8 ? 1 : 4;
    return r;
  }
}

// Refuses a PNG or JPEG whose header asks for more than the reader's bound
// or than its file can hold, as a TIFF's is refused.
Status CheckRasterHeader(const std::string& path, bool png) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  auto header = png ? PngHeader(in, path) : JpegHeader(in, path);
  if (!header.ok()) return header.status();
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) return Status::IOError("cannot read " + path + ": " + ec.message());
  const RasterHeader& r = *header;
  const std::string format = png ? "PNG" : "JPEG";
  const std::string dims = Dims(r.width, r.height, r.out_channels);
  if (r.width == 0 || r.height == 0) return Status::DataLoss(path + ": cannot decode " + format + ": size " + dims);
  // Whole bytes per row, as the codec stores them.
  std::optional<uint64_t> stored;
  if (auto row = ArrayBytes({static_cast<int64_t>(r.width), static_cast<int64_t>(r.stored_bits_per_pixel)}, 1)) {
    stored = ArrayBytes({static_cast<int64_t>(r.height), static_cast<int64_t>((*row + 7) / 8)}, 1);
  }
  if (Status s = CheckAllocation(path, format, file_bytes, stored, true, "a " + dims + " image"); !s.ok()) return s;
  const auto out = ArrayBytes({static_cast<int64_t>(r.height), static_cast<int64_t>(r.width),
                               static_cast<int64_t>(r.out_channels)},
                              r.out_bytes_per_sample);
  if (!out || *out > kMaxImageBytes) {
    return Status::DataLoss(path + ": cannot decode " + format + ": a " + dims + " image is " +
                            (out ? std::to_string(*out) + " bytes" : std::string("more than 2^63 bytes")) +
                            " decoded, more than the reader's bound of " + std::to_string(kMaxImageBytes));
  }
  return Status::Ok();
}

StatusOr<RawImage> ReadRaster(const std::string& path, bool png) {
  if (!FileExists(path)) return Status::NotFound("no such file: " + path);
  if (Status s = CheckRasterHeader(path, png); !s.ok()) return s;
  cv::Mat m;
  try {
    m = cv::imread(path, cv::IMREAD_UNCHANGED);
  } catch (const std::exception& ex) {  // cv::Exception, or memory
    return Status::DataLoss(path + ": cannot decode image: " + ex.what());
  }
  if (m.empty()) return Status::DataLoss(path + ": cannot decode image (corrupt or unsupported)");
  torch::Dtype stored, dtype;
  if (m.depth() == CV_8U) {
    stored = dtype = torch::kUInt8;
  } else if (m.depth() == CV_16U) {
    stored = torch::kInt16, dtype = torch::kInt32;
  } else if (m.depth() == CV_32F) {
    stored = dtype = torch::kFloat32;
  } else {
    return Status::InvalidArgument(path + ": unsupported pixel depth; expected 8- or 16-bit unsigned or 32-bit float");
  }
  // OpenCV's BGR(A) to RGB(A), channel by channel into the one output.
  const int64_t c = m.channels();
  auto src = torch::from_blob(m.data, {m.rows, m.cols, c}, stored);
  auto out = torch::empty({m.rows, m.cols, c}, dtype);
  for (int64_t k = 0; k < c; ++k) out.select(2, k).copy_(src.select(2, c >= 3 && k < 3 ? 2 - k : k));
  if (m.depth() == CV_16U) out.bitwise_and_(0xffff);
  return out;
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
    // Memory may still run out: that is this file's error too.
    try {
      return ReadRaster(path, e == ".png");
    } catch (const std::exception& ex) {
      return Status::DataLoss(path + ": cannot decode image: " + ex.what());
    }
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
