#include "data/dataset.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <map>
#include <set>
#include <sstream>

#include "common/csv.h"
#include "common/progress.h"
#include "data/image_io.h"
#include "data/packed.h"

namespace scdino::data {

namespace fs = std::filesystem;

namespace {

Dataset Finish(Dataset d, const std::map<std::string, std::string>& labels_by_path) {
  std::set<std::string> names;
  for (const auto& [p, l] : labels_by_path) names.insert(l);
  d.classes.assign(names.begin(), names.end());
  for (const auto& [p, l] : labels_by_path) {
    d.entries.push_back({p, std::lower_bound(d.classes.begin(), d.classes.end(), l) - d.classes.begin()});
  }
  return d;
}

// A folder or entry that cannot be read (permission denied, an I/O error):
// named with the system's reason and who is asking, never "no images".
Status Unreadable(const std::string& path, const std::string& what, const std::error_code& ec) {
  return Status::FailedPrecondition(path + ": cannot read " + what + ": " + ec.message() + " (running as uid " +
                                    std::to_string(::geteuid()) + "); check its permissions");
}

std::atomic<int64_t> index_passes{0};

// Whether folder `p` holds a folder (not one starting with '.').
StatusOr<bool> HasSubfolder(const fs::path& p) {
  std::error_code ec;
  fs::directory_iterator sub(p, ec);
  if (ec) return Unreadable(p.string(), "a folder of the data set", ec);
  for (; sub != fs::directory_iterator(); sub.increment(ec)) {
    if (ec) return Unreadable(p.string(), "a folder of the data set", ec);
    std::error_code sub_ec;
    if (sub->is_directory(sub_ec) && sub->path().filename().string()[0] != '.') return true;
  }
  return false;
}

// A flat folder (images in `root` itself, the first `flat_example`) is one
// class named after the folder: training needs no labels, and an
// evaluation of one class says it judges nothing. Refused when images also
// lie in class folders (the first `class_example`).
Status LabelFlatFolder(const std::string& root, const std::string& flat_example, const std::string& class_example,
                       std::map<std::string, std::string>* labels) {
  if (!class_example.empty()) {
    return Status::InvalidArgument(root + ": images lie both in the data set folder itself (" + flat_example +
                                   ") and in class folders (" + class_example +
                                   "); expected one or the other: move the first into a class folder, or keep "
                                   "only images in the folder for an unlabelled data set");
  }
  const fs::path folder = fs::path(root).lexically_normal();
  std::string name = folder.filename().string();
  if (name.empty()) name = folder.parent_path().filename().string();  // "cells/"
  if (name.empty()) name = "unlabelled";                              // "/"
  for (auto& [path, label] : *labels) label = name;
  return Status::Ok();
}

}  // namespace

int64_t IndexPasses() { return index_passes.load(); }
void CountIndexPass() { ++index_passes; }

StatusOr<Dataset> IndexFolder(const std::string& root, const IndexOptions& o) {
  std::error_code ec;
  // Every file-system call here takes an error_code: the throwing overloads
  // would end the process on a permission error instead of naming it.
  const bool is_dir = fs::is_directory(root, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return Unreadable(root, "the data set folder", ec);
  if (!is_dir) return Status::NotFound("data set folder " + root + " does not exist or is not a folder");
  CountIndexPass();
  Dataset d;
  d.root = root;
  std::map<std::string, std::string> labels;
  std::set<std::string> dirs_with_images;
  std::vector<std::string> leaf_dirs;
  // The first image directly in `root` and in a class folder, if any.
  std::string flat_example, class_example;
  fs::recursive_directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec);
  if (ec) return Unreadable(root, "the data set folder", ec);
  // The folder the next increment enters, to name it when it cannot be read.
  std::string entering;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Unreadable(entering.empty() ? root : entering, "a folder of the data set", ec);
    const fs::path p = it->path();
    const std::string name = p.filename().string();
    std::error_code type_ec;
    const bool dir = it->is_directory(type_ec);
    if (type_ec) return Unreadable(p.string(), "an entry of the data set", type_ec);
    entering = dir ? p.string() : "";
    if (!name.empty() && name[0] == '.') {
      if (dir) it.disable_recursion_pending();
      entering.clear();
      continue;
    }
    if (dir) {
      auto has_subfolder = HasSubfolder(p);
      if (!has_subfolder.ok()) return has_subfolder.status();
      if (!*has_subfolder) leaf_dirs.push_back(p.string());
      continue;
    }
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;
    if (!IsImageFile(p.string())) {
      const std::string why = p.string() + ": not an image file (expected .tif, .tiff, .png, .jpg or .jpeg)";
      if (o.on_bad_image == BadImagePolicy::kFail) {
        return Status::InvalidArgument(why + "; remove it or set on_bad_image: skip");
      }
      d.skipped.push_back(why);
      continue;
    }
    // The label folder: depth 0 is the image's folder, 1 the one above, ...
    fs::path rel = fs::relative(p, root);
    std::vector<std::string> parts;
    for (const auto& c : rel.parent_path()) parts.push_back(c.string());
    // An image in the data set folder itself: a flat folder, unlabelled.
    const bool flat = parts.empty() && o.folder_depth_for_labels == 0;
    std::string& example = flat ? flat_example : class_example;
    if (example.empty() || p.string() < example) example = p.string();
    if (!flat && static_cast<int64_t>(parts.size()) <= o.folder_depth_for_labels) {
      return Status::InvalidArgument(p.string() + ": lies " + std::to_string(parts.size()) +
                                     " folder(s) below the data set root, too shallow for folder_depth_for_labels = " +
                                     std::to_string(o.folder_depth_for_labels));
    }
    labels[p.string()] = flat ? "" : parts[parts.size() - 1 - o.folder_depth_for_labels];
    if (!flat) dirs_with_images.insert(p.parent_path().string());
    if (o.on_progress) o.on_progress(static_cast<int64_t>(labels.size()));
  }
  for (const auto& dir : leaf_dirs) {
    if (dirs_with_images.count(dir)) continue;
    const std::string why = dir + ": class folder without images";
    if (o.on_bad_image == BadImagePolicy::kFail) return Status::InvalidArgument(why);
    d.skipped.push_back(why);
  }
  if (labels.empty()) return Status::InvalidArgument(root + ": no images found (.tif, .tiff, .png, .jpg, .jpeg)");
  if (!flat_example.empty()) {
    if (auto s = LabelFlatFolder(root, flat_example, class_example, &labels); !s.ok()) return s;
  }
  return Finish(std::move(d), labels);
}

StatusOr<Dataset> IndexCsv(const std::string& csv_path) {
  std::ifstream in(csv_path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open index CSV " + csv_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CountIndexPass();
  Dataset d;
  d.root = fs::path(csv_path).parent_path().string();
  std::map<std::string, std::string> labels;
  std::vector<std::string> f;
  size_t pos = 0;
  int64_t lineno = 0;
  while (pos < text.size()) {
    ++lineno;
    const size_t start = pos;
    const bool closed = NextCsvRecord(text, &pos, &f);
    if (f.size() == 1 && f[0].empty()) continue;
    // RFC 4180 (pandas quotes a path with a comma); an unquoted comma in a
    // path is kept too: the label is the last field.
    std::string label = f.back(), path = f[0];
    for (size_t i = 1; i + 1 < f.size(); ++i) path += "," + f[i];
    if (!closed || f.size() < 2 || path.empty() || label.empty()) {
      std::string record = text.substr(start, pos - start);
      while (!record.empty() && (record.back() == '\n' || record.back() == '\r')) record.pop_back();
      return Status::InvalidArgument(csv_path + ": line " + std::to_string(lineno) +
                                     ": expected 'path,label', got '" + record + "'");
    }
    if (lineno == 1 && path == "path" && label == "label") continue;
    if (fs::path(path).is_relative()) path = (fs::path(d.root) / path).string();
    labels[path] = label;
  }
  if (labels.empty()) return Status::InvalidArgument(csv_path + ": no rows (expected 'path,label' lines)");
  return Finish(std::move(d), labels);
}

namespace {

// PrepareImage's arithmetic without tensor temporaries, for 8-bit, 16-bit
// and float images: the selected channels de-interleaved into C x H x W
// floats, then per channel the min and max and (x - lo) / range in place
// (contiguous loops the compiler vectorises): the same values as the tensor
// ops below. Returns false when a value is not finite.
template <typename T>
bool PrepareDirect(const T* src, int64_t W, int64_t C, const std::vector<int64_t>& channels, int64_t top,
                   int64_t left, int64_t h, int64_t w, float* dst) {
  const int64_t n = static_cast<int64_t>(channels.size()), plane = h * w;
  if (plane == 0) return true;
  for (int64_t k = 0; k < n; ++k) {
    float* out = dst + k * plane;
    for (int64_t y = 0; y < h; ++y) {
      const T* row = src + ((top + y) * W + left) * C + channels[k];
      for (int64_t x = 0; x < w; ++x) out[y * w + x] = static_cast<float>(row[x * C]);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    float* out = dst + k * plane;
    float lo = out[0], hi = out[0];
    bool finite = true;
    for (int64_t i = 0; i < plane; ++i) {
      lo = std::min(lo, out[i]);
      hi = std::max(hi, out[i]);
      if constexpr (std::is_floating_point_v<T>) finite &= std::isfinite(out[i]);
    }
    if (!finite) return false;
    const float range = hi - lo, divisor = std::max(range, 1e-30f);
    if (range > 0) {
      for (int64_t i = 0; i < plane; ++i) out[i] = (out[i] - lo) / divisor;
    } else {
      std::fill(out, out + plane, 0.0f);
    }
  }
  return true;
}

}  // namespace

StatusOr<torch::Tensor> PrepareImage(const torch::Tensor& hwc, const ImagePrep& prep, const std::string& path) {
  const int64_t h = hwc.size(0), w = hwc.size(1), c = hwc.size(2);
  for (int64_t ch : prep.channels) {
    if (ch < 0 || ch >= c) {
      std::ostringstream sel;
      for (size_t i = 0; i < prep.channels.size(); ++i) sel << (i ? "," : "") << prep.channels[i];
      return Status::InvalidArgument(path + ": has " + std::to_string(c) + " channel(s), but channels [" + sel.str() +
                                     "] were selected");
    }
  }
  if (prep.center_crop > 0 && (prep.center_crop > h || prep.center_crop > w)) {
    return Status::InvalidArgument(path + ": is " + std::to_string(h) + "x" + std::to_string(w) +
                                   ", smaller than center_crop " + std::to_string(prep.center_crop));
  }
  // torchvision's CenterCrop offsets: round((size - crop) / 2).
  const int64_t top = prep.center_crop > 0 ? static_cast<int64_t>(std::round((h - prep.center_crop) / 2.0)) : 0;
  const int64_t left = prep.center_crop > 0 ? static_cast<int64_t>(std::round((w - prep.center_crop) / 2.0)) : 0;
  const int64_t oh = prep.center_crop > 0 ? prep.center_crop : h, ow = prep.center_crop > 0 ? prep.center_crop : w;
  std::vector<int64_t> channels = prep.channels;
  if (channels.empty()) {
    for (int64_t k = 0; k < c; ++k) channels.push_back(k);
  }
  const auto type = hwc.scalar_type();
  if (hwc.is_cpu() && hwc.is_contiguous() && (type == torch::kUInt8 || type == torch::kInt32 || type == torch::kFloat32)) {
    auto out = torch::empty({static_cast<int64_t>(channels.size()), oh, ow}, torch::kFloat32);
    float* dst = out.data_ptr<float>();
    const bool finite =
        type == torch::kUInt8   ? PrepareDirect(hwc.data_ptr<uint8_t>(), w, c, channels, top, left, oh, ow, dst)
        : type == torch::kInt32 ? PrepareDirect(hwc.data_ptr<int32_t>(), w, c, channels, top, left, oh, ow, dst)
                                : PrepareDirect(hwc.data_ptr<float>(), w, c, channels, top, left, oh, ow, dst);
    if (!finite) return Status::DataLoss(path + ": contains NaN or infinite values");
    return out;
  }
  // Any other dtype or layout: the same arithmetic in tensor ops.
  torch::Tensor x = hwc.permute({2, 0, 1}).to(torch::kFloat32);
  x = x.index_select(0, torch::tensor(channels, torch::kInt64)).slice(1, top, top + oh).slice(2, left, left + ow);
  if (!torch::isfinite(x).all().item<bool>()) return Status::DataLoss(path + ": contains NaN or infinite values");
  auto flat = x.reshape({x.size(0), -1});
  auto lo = std::get<0>(flat.min(1)).view({-1, 1, 1});
  auto hi = std::get<0>(flat.max(1)).view({-1, 1, 1});
  auto range = hi - lo;
  // A constant channel becomes 0, never 0/0.
  auto out = torch::where(range > 0, (x - lo) / range.clamp_min(1e-30), torch::zeros_like(x));
  return out.contiguous();
}

StatusOr<torch::Tensor> LoadImage(const std::string& path, const ImagePrep& prep) {
  auto raw = ReadImage(path);
  if (!raw.ok()) {
    // <packed set>/<source path> names an image of a packed set.
    std::error_code ec;
    if (fs::exists(path, ec)) return raw.status();
    auto set = PackedSetOf(path);
    if (!set.ok()) return set.status();
    if (!*set) return raw.status();
    raw = ReadPackedImage(path);
    if (!raw.ok()) return raw.status();
  }
  return PrepareImage(*raw, prep, path);
}

StatusOr<Dataset> OpenDataset(const DataSource& source, std::ostream* progress) {
  switch (source.kind) {
    case DataSource::Kind::kSynthetic:
      return Dataset{};
    case DataSource::Kind::kCsv:
      return IndexCsv(source.index_csv);
    case DataSource::Kind::kFolder:
      break;
  }
  auto packed = OpenPackedSet(source);
  if (!packed.ok()) return packed.status();
  if (*packed) return DatasetOf(*packed);
  IndexOptions io;
  io.folder_depth_for_labels = source.folder_depth_for_labels;
  io.on_bad_image = source.on_bad_image;
  ProgressLog log(progress, "scdino: indexing", "images");
  io.on_progress = [&log](int64_t found) { log.Report(found, 0); };
  auto d = IndexFolder(source.dir, io);
  if (d.ok()) log.Done(static_cast<int64_t>(d->entries.size()));
  return d;
}

StatusOr<RawImage> ReadEntry(const Dataset& d, size_t i) {
  if (d.packed) return d.packed->Read(static_cast<int64_t>(i));
  return ReadImage(d.entries[i].path);
}

StatusOr<torch::Tensor> LoadEntry(const Dataset& d, size_t i, const ImagePrep& prep) {
  try {
    auto raw = ReadEntry(d, i);
    if (!raw.ok()) return raw.status();
    return PrepareImage(*raw, prep, d.entries[i].path);
  } catch (const std::exception& e) {  // memory, or a decoder's surprise: this file's error
    return Status::DataLoss(d.entries[i].path + ": cannot load: " + e.what());
  }
}

FirstImage ProbeFirstImage(const Dataset& d, const ImagePrep& prep) {
  FirstImage first;
  // The first few: under on_bad_image: skip the first may be bad.
  for (size_t i = 0; i < d.entries.size() && i < 16; ++i) {
    try {
      auto raw = ReadEntry(d, i);
      if (!raw.ok()) {
        if (first.unread.ok()) first.unread = raw.status();
        continue;
      }
      auto image = PrepareImage(*raw, prep, d.entries[i].path);
      first.path = d.entries[i].path;
      first.raw_channels = raw->size(2);
      if (!image.ok()) {
        first.prepared = image.status();
      } else {
        first.channels = image->size(0), first.height = image->size(1), first.width = image->size(2);
      }
      return first;
    } catch (const std::exception& e) {  // as LoadEntry: memory, or a decoder's surprise
      if (first.unread.ok()) first.unread = Status::DataLoss(d.entries[i].path + ": cannot load: " + e.what());
    }
  }
  return first;
}

}  // namespace scdino::data
