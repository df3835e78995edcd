#include "eval/attention_maps.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/files.h"
#include "data/dataset.h"
#include "eval/plots.h"

namespace scdino::eval {

namespace {

std::vector<float> ToVector(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

std::string Gib(int64_t bytes) {
  std::ostringstream o;
  o.precision(bytes < (int64_t{10} << 30) ? 2 : 3);
  o << static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30) << " GiB";
  return o.str();
}

}  // namespace

int64_t AttentionBytes(int64_t tokens, int64_t heads) { return 2 * heads * tokens * tokens * 4; }

AttentionSide ChooseAttentionSide(int64_t requested, int64_t input_side, int64_t patch, int64_t heads,
                                  int64_t max_tokens) {
  AttentionSide a;
  const int64_t wanted = requested > 0 ? requested : input_side;
  if (wanted <= 0) return a;  // the features' own, unresized input
  a.side = std::max<int64_t>(patch, wanted / patch * patch);
  const int64_t grid = a.side / patch;
  if (grid * grid <= max_tokens) return a;
  const int64_t fits = static_cast<int64_t>(std::floor(std::sqrt(static_cast<double>(max_tokens))));
  const int64_t side = std::max<int64_t>(1, fits) * patch;
  std::ostringstream w;
  w << "attention maps at " << a.side << " px with patch " << patch << " are " << grid * grid + 1
    << " tokens: one block's attention would take " << Gib(AttentionBytes(grid * grid + 1, heads)) << " per image ("
    << heads << " heads); drawing them at " << side << " px (" << (side / patch) * (side / patch) + 1 << " tokens, "
    << Gib(AttentionBytes((side / patch) * (side / patch) + 1, heads))
    << ") instead. Lower downstream_analyses.attention_visualisation.image_size (0: the size the features were "
       "extracted at), or raise scdino.evaluation.attention_max_tokens (now "
    << max_tokens << ") to draw them at " << a.side << " px";
  a.side = side;
  a.warning = w.str();
  return a;
}

namespace {

// The first `per_class` images of class `c`, test images first (the model
// never saw their labels either way), in the set's order.
std::vector<const features::IndexRow*> Picks(const features::FeatureSet& set, int64_t c, int64_t per_class) {
  std::vector<const features::IndexRow*> picks;
  for (auto split : {data::Split::kTest, data::Split::kTrain}) {
    for (const auto& r : set.rows) {
      if (static_cast<int64_t>(picks.size()) < per_class && r.class_index == c && r.split == split) picks.push_back(&r);
    }
  }
  return picks;
}

// A class name as a file name: letters, digits, - and _ kept, the rest _.
std::string SafeName(std::string name) {
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  }
  return name;
}

}  // namespace

StatusOr<std::vector<std::string>> WriteAttentionMaps(const features::FeatureSet& set, features::Backbone& backbone,
                                                      const features::FeaturePrep& prep, const std::string& out_dir,
                                                      const AttentionMapOptions& options) {
  std::vector<std::string> written;
  if (options.per_class <= 0) return written;
  if (auto s = MakeDirs(out_dir + "/attention"); !s.ok()) return s;
  torch::NoGradGuard no_grad;
  const int64_t patch = backbone.vit->options().patch_size();
  auto device = backbone.vit->parameters().front().device();
  auto stopped = [&] {
    return Status::Aborted("stopped while drawing attention maps (" + std::to_string(written.size()) +
                           " written to " + out_dir + "/attention)");
  };
  bool warned = false;
  // The images drawn: the first per_class of each class, test ones first.
  std::vector<int64_t> per_class_rows(set.classes.size(), 0);
  for (const auto& r : set.rows) {
    if (r.class_index >= 0 && r.class_index < static_cast<int64_t>(set.classes.size())) ++per_class_rows[r.class_index];
  }
  int64_t to_draw = 0;
  for (auto rows : per_class_rows) to_draw += std::min<int64_t>(rows, options.per_class);
  for (size_t c = 0; c < set.classes.size(); ++c) {
    const auto picks = Picks(set, static_cast<int64_t>(c), options.per_class);
    for (size_t i = 0; i < picks.size(); ++i) {
      if (options.should_stop && options.should_stop()) return stopped();
      auto img = data::LoadImage(picks[i]->path, prep.image);
      if (!img.ok()) return img.status();
      features::FeaturePrep used = prep;
      auto input = features::PrepareForModel(*img, used).unsqueeze(0);
      if (prep.resize <= 0 && (input.size(2) / patch) * (input.size(3) / patch) > options.max_tokens) {
        // Unresized features: this image's own size sets the tokens.
        const auto side = ChooseAttentionSide(std::max(input.size(2), input.size(3)), 0, patch,
                                              backbone.vit->options().num_heads(), options.max_tokens);
        if (!warned && options.warn) options.warn(picks[i]->path + ": " + side.warning);
        warned = true;
        used.resize = side.side;
        input = features::PrepareForModel(*img, used).unsqueeze(0);
      }
      input = input.to(device);
      features::FeaturePrep shown = used;
      shown.mean.clear();
      shown.std.clear();
      auto display = features::PrepareForModel(*img, shown);  // resized, in [0, 1]
      const int64_t gh = input.size(2) / patch, gw = input.size(3) / patch;
      if (gh * patch != input.size(2) || gw * patch != input.size(3)) {
        return Status::InvalidArgument(picks[i]->path + ": attention needs an input size that is a multiple of the "
                                       "patch size " + std::to_string(patch) + ", got " +
                                       std::to_string(input.size(2)) + "x" + std::to_string(input.size(3)) +
                                       " (set downstream_analyses.attention_visualisation.image_size)");
      }
      auto attn = backbone.vit->last_self_attention(input, options.should_stop);  // [1, heads, T, T]
      if (!attn.defined()) return stopped();
      auto cls = attn[0].select(1, 0).slice(1, 1).to(torch::kCPU, torch::kFloat32).contiguous();  // [heads, gh*gw]
      attn = torch::Tensor();
      AttentionFigure f;
      f.title = set.classes[c] + " - " + std::filesystem::path(picks[i]->path).filename().string() +
                " - last block CLS attention";
      f.channels = display.size(0);
      f.height = display.size(1);
      f.width = display.size(2);
      f.image = ToVector(display.clamp(0, 1));
      f.channel_names = options.channel_names;
      f.heads = cls.size(0);
      f.grid_h = gh;
      f.grid_w = gw;
      f.maps = ToVector(cls);
      const std::string name = "attention/" + SafeName(set.classes[c]) + "_" + std::to_string(i) + ".png";
      if (auto s = PlotAttentionMaps(out_dir + "/" + name, f); !s.ok()) return s;
      written.push_back(name);
      if (options.on_progress) options.on_progress(static_cast<int64_t>(written.size()), to_draw);
    }
  }
  return written;
}

}  // namespace scdino::eval
