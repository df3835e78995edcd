#include "model/health.h"

#include <cmath>
#include <cstdio>

namespace scdino::model {

torch::Tensor HealthSums(const torch::Tensor& teacher_targets, const torch::Tensor& teacher_cls,
                         const torch::Tensor& loss) {
  torch::NoGradGuard guard;
  const auto p = teacher_targets.detach().to(torch::kFloat);
  const auto logp = torch::log(p.clamp_min(1e-30));
  const double rows = static_cast<double>(p.size(0));
  const auto row_entropy_sum = -(p * logp).sum();
  const auto mean_p = p.mean(0);
  const auto batch_entropy = -(mean_p * torch::log(mean_p.clamp_min(1e-30))).sum();
  const auto cls = torch::nn::functional::normalize(teacher_cls.detach().to(torch::kFloat),
                                                    torch::nn::functional::NormalizeFuncOptions().dim(-1));
  const auto cls_std = rows > 1 ? cls.std(0, /*unbiased=*/false).mean() : torch::zeros({}, cls.options());
  return torch::stack({row_entropy_sum, batch_entropy * rows, cls_std * rows,
                       loss.detach().to(torch::kFloat).to(p.device()) * rows});
}

DinoHealth HealthFromSums(const torch::Tensor& sums, double rows, int64_t out_dim, double center_norm) {
  const auto s = sums.to(torch::kCPU, torch::kDouble).contiguous();
  const double* v = s.data_ptr<double>();
  DinoHealth h;
  if (rows <= 0) return h;
  h.teacher_entropy = v[0] / rows;
  h.teacher_entropy_ratio = out_dim > 1 ? h.teacher_entropy / std::log(static_cast<double>(out_dim)) : 0.0;
  h.teacher_batch_entropy = v[1] / rows;
  h.backbone_cls_std = v[2] / rows;
  // Rounding can take a near-zero KL a hair below 0.
  h.student_teacher_kl = std::max(0.0, v[3] / rows - h.teacher_entropy);
  h.center_norm = center_norm;
  return h;
}

void HealthAverage::Add(const DinoHealth& h) {
  sum_.teacher_entropy += h.teacher_entropy;
  sum_.teacher_entropy_ratio += h.teacher_entropy_ratio;
  sum_.student_teacher_kl += h.student_teacher_kl;
  sum_.teacher_batch_entropy += h.teacher_batch_entropy;
  sum_.center_norm += h.center_norm;
  sum_.backbone_cls_std += h.backbone_cls_std;
  ++steps_;
}

DinoHealth HealthAverage::Mean() const {
  DinoHealth m;
  if (steps_ == 0) return m;
  const double n = static_cast<double>(steps_);
  m.teacher_entropy = sum_.teacher_entropy / n;
  m.teacher_entropy_ratio = sum_.teacher_entropy_ratio / n;
  m.student_teacher_kl = sum_.student_teacher_kl / n;
  m.teacher_batch_entropy = sum_.teacher_batch_entropy / n;
  m.center_norm = sum_.center_norm / n;
  m.backbone_cls_std = sum_.backbone_cls_std / n;
  return m;
}

const char* CollapseName(Collapse c) {
  switch (c) {
    case Collapse::kUniform: return "uniform_collapse";
    case Collapse::kOneHot: return "onehot_collapse";
    case Collapse::kHealthy: break;
  }
  return "healthy";
}

Collapse JudgeCollapse(const DinoHealth& h, const CollapseThresholds& t) {
  // ln K from the entropy and its ratio (both 0 before any step).
  const double ln_k = h.teacher_entropy_ratio > 0 ? h.teacher_entropy / h.teacher_entropy_ratio : 0.0;
  const double information = h.teacher_batch_entropy - h.teacher_entropy;
  if (h.teacher_entropy_ratio >= t.uniform_entropy_ratio &&
      (h.student_teacher_kl <= t.uniform_kl || information <= t.uniform_information_ratio * ln_k)) {
    return Collapse::kUniform;
  }
  if (h.teacher_batch_entropy <= t.onehot_batch_entropy) return Collapse::kOneHot;
  return Collapse::kHealthy;
}

std::string DescribeCollapse(Collapse c, const DinoHealth& h) {
  char buf[256];
  if (c == Collapse::kOneHot) {
    std::snprintf(buf, sizeof buf, "entropy of the batch-mean teacher distribution %.3g nats (one-hot below %.3g)",
                  h.teacher_batch_entropy, CollapseThresholds{}.onehot_batch_entropy);
  } else {
    const CollapseThresholds t;
    std::snprintf(buf, sizeof buf,
                  "teacher entropy %.3f of ln(out_dim) (uniform from %.2f), student-teacher KL %.3g nats "
                  "(uniform below %.3g), batch entropy above teacher entropy %.3g nats (image-independent below "
                  "%.2f of ln(out_dim))",
                  h.teacher_entropy_ratio, t.uniform_entropy_ratio, h.student_teacher_kl, t.uniform_kl,
                  h.teacher_batch_entropy - h.teacher_entropy, t.uniform_information_ratio);
  }
  return buf;
}

}  // namespace scdino::model
