#include "data/crop_preview.h"

#include <algorithm>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <vector>

#include "common/files.h"

namespace scdino::data {
namespace {

constexpr int64_t kGap = 4;
constexpr int64_t kPreviewWidth = 640;

}  // namespace

torch::Tensor CropPreview(const torch::Tensor& image, MultiCropOptions options, int64_t index) {
  TORCH_CHECK(image.dim() == 3, "CropPreview: expected a [C, H, W] image, got ", image.sizes());
  options.mean.clear();  // what the crops look like, not what the model sees
  options.std.clear();
  const MultiCropAugmenter augmenter(options);
  auto source = image.to(torch::kCPU, torch::kFloat32).contiguous();
  const int64_t channels = source.size(0), h = source.size(1), w = source.size(2);
  const auto crops = augmenter.Apply(source.unsqueeze(0), {index}, /*epoch=*/0);
  // The image at the global crop's side along its longer edge.
  const double scale = static_cast<double>(options.global_size) / static_cast<double>(std::max(h, w));
  const int64_t sh = std::max<int64_t>(1, std::llround(h * scale)), sw = std::max<int64_t>(1, std::llround(w * scale));
  auto shown = torch::nn::functional::interpolate(
                   source.unsqueeze(0),
                   torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{sh, sw}).mode(torch::kArea))
                   .squeeze(0);
  std::vector<torch::Tensor> tiles = {shown};
  for (const auto& c : crops) tiles.push_back(c.squeeze(0).to(torch::kCPU, torch::kFloat32));
  int64_t width = kGap, row = 0;
  for (const auto& t : tiles) width += t.size(2) + kGap, row = std::max(row, t.size(1));
  auto picture = torch::full({kGap + channels * (row + kGap), width}, 255, torch::kUInt8);
  for (int64_t ch = 0; ch < channels; ++ch) {
    int64_t x = kGap;
    const int64_t y = kGap + ch * (row + kGap);
    for (const auto& t : tiles) {
      auto grey = (t[ch].clamp(0, 1) * 255).round().to(torch::kUInt8);
      picture.slice(0, y, y + t.size(1)).slice(1, x, x + t.size(2)).copy_(grey);
      x += t.size(2) + kGap;
    }
  }
  return picture;
}

Status WriteCropPreview(const std::string& path, const torch::Tensor& image, const MultiCropOptions& options,
                        int64_t index) {
  auto picture = CropPreview(image, options, index);
  // Small cells (50 px crops) enlarged by whole pixels to about 640 px wide:
  // seen as they are, not smoothed.
  const int64_t zoom = std::max<int64_t>(1, kPreviewWidth / picture.size(1));
  picture = picture.repeat_interleave(zoom, 0).repeat_interleave(zoom, 1).contiguous();
  const cv::Mat mat(static_cast<int>(picture.size(0)), static_cast<int>(picture.size(1)), CV_8UC1,
                    picture.data_ptr<uint8_t>());
  std::vector<uchar> png;
  if (!cv::imencode(".png", mat, png)) return Status::Internal("PNG encoding failed for " + path);
  return WriteFileAtomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

Status WriteDataCropPreview(const std::string& path, const Dataset& dataset, const ImagePrep& prep,
                            const MultiCropOptions& options, const SyntheticOptions* synthetic) {
  torch::Tensor image;
  if (synthetic) {
    SyntheticOptions one = *synthetic;
    one.per_class = 1;
    image = MakeSyntheticSet(one).images[0];
    if (!prep.channels.empty()) image = image.index_select(0, torch::tensor(prep.channels, torch::kInt64));
  } else {
    for (size_t i = 0; i < dataset.entries.size() && i < 8 && !image.defined(); ++i) {
      auto loaded = LoadEntry(dataset, i, prep);
      if (loaded.ok()) image = *loaded;
    }
  }
  if (!image.defined()) return Status::NotFound("none of the first 8 images could be read");
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    if (auto s = MakeDirs(dir.string()); !s.ok()) return s;
  }
  return WriteCropPreview(path, image, options);
}

}  // namespace scdino::data
