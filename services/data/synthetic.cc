#include "data/synthetic.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "data/sampler.h"

namespace scdino::data {

namespace {

// A fixed pseudo-random value in [0, 1) per (class, channel, salt).
double ClassTrait(int64_t cls, int64_t channel, int64_t salt) {
  double x = std::sin(static_cast<double>(cls) * 12.9898 + static_cast<double>(channel) * 78.233 + salt * 37.719) *
             43758.5453;
  return x - std::floor(x);
}

}  // namespace

torch::Tensor SyntheticCell(const SyntheticOptions& o, int64_t cls, int64_t index) {
  TORCH_CHECK(o.classes > 0 && o.channels > 0 && o.size >= 8, "synthetic cells need classes > 0, channels > 0 and",
              " size >= 8");
  const uint64_t seed = MixSeed({o.seed, static_cast<uint64_t>(cls), static_cast<uint64_t>(index), 0xce11ull});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const double S = static_cast<double>(o.size);
  // Class traits shrink towards their middle as difficulty rises; the
  // per-cell nuisances grow.
  const double h = std::clamp(o.difficulty, 0.0, 1.0);
  auto trait = [&](int64_t c, int64_t salt) {
    const double t = ClassTrait(cls, c, salt);
    return h == 0.0 ? t : 0.5 + (1.0 - 0.75 * h) * (t - 0.5);
  };
  // Class morphology: body radius, elongation, nucleus size and offset.
  const double radius = S * (0.16 + 0.14 * trait(0, 1)) * (1.0 + (0.08 + 0.25 * h) * u(rng));
  const double elong = 1.0 + 0.8 * trait(0, 2);
  const double nucleus = 0.25 + 0.4 * trait(0, 3);
  const double angle = 3.14159265358979 * u(rng);
  const double shift = (0.08 + 0.17 * h) * S;
  const double cx = S / 2 + shift * u(rng), cy = S / 2 + shift * u(rng);
  auto coords = torch::arange(o.size, torch::kFloat32);
  auto yy = coords.view({-1, 1}).expand({o.size, o.size}) - cy;
  auto xx = coords.view({1, -1}).expand({o.size, o.size}) - cx;
  const double ca = std::cos(angle), sa = std::sin(angle);
  auto xr = xx * ca + yy * sa, yr = -xx * sa + yy * ca;
  auto d = (xr / (radius * elong)).pow(2) + (yr / (radius / elong)).pow(2);
  auto body = torch::sigmoid((1.0 - d) * 6.0);
  auto dn = (xr / (radius * nucleus)).pow(2) + (yr / (radius * nucleus)).pow(2);
  auto nuc = torch::sigmoid((1.0 - dn) * 6.0);
  auto gen = at::detail::createCPUGenerator(seed);
  auto noise = torch::randn({o.channels, o.size, o.size}, gen, torch::kFloat32);
  // Signal-to-noise varies from cell to cell (focus, exposure): a nuisance
  // that DINO's blur views teach the model to ignore. Difficulty 0 draws
  // nothing more, so its cells are those of earlier versions.
  const double noise_sd = h == 0.0 ? 0.03 : 0.03 + 0.12 * h * (1.0 + u(rng));
  std::vector<torch::Tensor> chans;
  for (int64_t c = 0; c < o.channels; ++c) {
    const double body_level = 0.15 + 0.7 * trait(c, 4);
    const double nuc_level = 0.6 * trait(c, 5);
    const double jitter = 1.0 + (0.1 + 0.4 * h) * u(rng);
    chans.push_back(0.05 + jitter * (body_level * body + nuc_level * nuc) + noise_sd * noise[c]);
  }
  return torch::stack(chans).clamp_(0.0, 1.0);
}

SyntheticSet MakeSyntheticSet(const SyntheticOptions& o) {
  SyntheticSet s;
  std::vector<torch::Tensor> images;
  std::vector<int64_t> labels;
  for (int64_t k = 0; k < o.classes; ++k) {
    s.class_names.push_back("class_" + std::to_string(k));
    for (int64_t i = 0; i < o.per_class; ++i) {
      images.push_back(SyntheticCell(o, k, i));
      labels.push_back(k);
    }
  }
  s.images = torch::stack(images);
  s.labels = torch::tensor(labels, torch::kInt64);
  return s;
}

}  // namespace scdino::data
