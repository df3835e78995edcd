#include "model/dino.h"

#include <cmath>
#include <set>
#include <sstream>

namespace scdino::model {

namespace {

MultiCropWrapper MakeNetwork(const DinoOptions& o, double drop_path) {
  auto vit = o.vit;
  vit.drop_path_rate(drop_path);
  DinoHeadOptions head(vit.embed_dim(), o.out_dim);
  head.hidden_dim(o.head_hidden_dim).bottleneck_dim(o.head_bottleneck_dim).nlayers(o.head_nlayers)
      .norm_last_layer(o.norm_last_layer);
  return MultiCropWrapper(VisionTransformer(vit), DinoHead(head));
}

}  // namespace

Dino::Dino(const DinoOptions& options, torch::Device device) : options_(options), device_(device) {
  student = MakeNetwork(options_, options_.vit.drop_path_rate());
  teacher = MakeNetwork(options_, 0.0);
  student->to(device_, options_.master_dtype);
  teacher->to(device_, options_.master_dtype);
  for (auto& p : teacher->parameters()) p.set_requires_grad(false);
  {
    TensorMap w;
    SaveModule(*student, "", w);
    ThrowIfError(LoadIntoModule(*teacher, w, "", "student"));
  }
  teacher->eval();
  student->train();
  loss = DinoLoss(DinoLossOptions(options_.out_dim, ncrops())
                      .warmup_teacher_temp(options_.warmup_teacher_temp)
                      .teacher_temp(options_.teacher_temp)
                      .warmup_teacher_temp_epochs(options_.warmup_teacher_temp_epochs)
                      .epochs(options_.epochs)
                      .student_temp(options_.student_temp)
                      .center_momentum(options_.center_momentum)
                      .centering(options_.centering));
  loss->to(device_, options_.master_dtype);
  student_flat_ = std::make_unique<FlatParameters>(*student);
  teacher_flat_ = std::make_unique<FlatParameters>(*teacher, *student_flat_);
  optimizer = std::make_unique<AdamW>(student_flat_.get(), options_.adamw);
  if (options_.clip_grad > 0) clipper_ = std::make_unique<GradientClipper>(student_flat_.get(), options_.clip_grad);
  if (options_.loss_scaling) scaler = std::make_unique<LossScaler>(options_.loss_scaler, device_);
}

namespace {
// The readout's fields (ReadStepValues), then the exchange's tail.
constexpr int64_t kLoss = 0, kCenterNorm = 1, kOverflow = 2, kRows = 3, kNonFinite = 4, kHealth = 5,
                  kExtra = kHealth + kHealthSums;
}  // namespace

StepValues ReadStepValues(const torch::Tensor& readout, int64_t out_dim) {
  const auto r = readout.to(torch::kCPU, torch::kFloat64).contiguous();
  TORCH_CHECK(r.dim() == 1 && r.size(0) >= kExtra, "a step's readout has ", kExtra, " values or more, got ",
              r.sizes());
  const double* v = r.data_ptr<double>();
  StepValues out;
  out.loss = v[kLoss];
  out.finite = v[kNonFinite] == 0.0;
  out.overflow = v[kOverflow] != 0.0;
  if (out.finite) {
    out.health = HealthFromSums(r.slice(0, kHealth, kExtra), v[kRows], out_dim, v[kCenterNorm]);
  }
  out.extra.assign(v + kExtra, v + r.size(0));
  return out;
}

StepOutput Dino::Step(const StepInput& in, const StepHooks& hooks) {
  TORCH_CHECK(static_cast<int64_t>(in.crops.size()) == ncrops(), "a DINO step needs ", ncrops(),
              " crops (2 global + ", options_.local_crops_number, " local), got ", in.crops.size());
  StepOutput out;
  optimizer->zero_grad();
  {
    AutocastGuard autocast(device_, options_.precision);
    {
      torch::NoGradGuard no_grad;
      out.teacher = teacher->forward({in.crops[0], in.crops[1]});
    }
    out.student = student->forward(in.crops);
  }
  // The loss in the center's dtype, outside autocast (as the reference's
  // softmax, log-softmax and sums, which autocast runs in float32 anyway).
  const auto targets = loss->teacher_targets(out.teacher.head, in.epoch, hooks.sum_over_ranks);
  const auto l = loss->cross_entropy(out.student.head, targets);
  out.loss = l.detach();
  torch::Tensor total = l;
  if (options_.koleo_loss_weight > 0) {
    // On each global view's student CLS features, as DINOv2.
    const auto global = out.student.backbone.slice(0, 0, out.teacher.head.size(0)).chunk(2);
    total = l + options_.koleo_loss_weight * (KoLeoLoss(global[0]) + KoLeoLoss(global[1]));
  }
  // [batch sum of the teacher outputs (K), rows, 1 if the loss is not
  // finite, health sums (kHealthSums)], summed over ranks.
  const int64_t K = options_.out_dim;
  const auto center_norm = loss->center.norm();
  const auto head_options = loss->center.options();
  torch::Tensor exchange;
  {
    torch::NoGradGuard no_grad;
    exchange = torch::cat({loss->batch_sum(out.teacher.head).flatten(),
                           torch::full({1}, static_cast<double>(out.teacher.head.size(0)), head_options),
                           out.loss.isfinite().logical_not().to(head_options.dtype()).reshape({1}),
                           HealthSums(targets, out.teacher.backbone, out.loss).to(head_options.dtype())});
  }
  if (hooks.step_exchange) hooks.step_exchange(exchange);
  // Every rank's loss finite: the step counts. Backward runs either way
  // (the host does not know which), and a skipped step changes nothing.
  const auto finite = exchange[K + 1] == 0;
  (scaler ? scaler->Scale(total) : total).backward();
  if (hooks.after_backward) hooks.after_backward();
  auto apply = finite;
  auto overflow = torch::zeros({}, finite.options());
  if (scaler) {
    // Gradients are already averaged over ranks, so an overflow on any rank
    // is an overflow on all of them and every rank skips together.
    const auto found_inf = scaler->Unscale(student_flat_->grads());
    scaler->Update(found_inf, finite);
    overflow = found_inf.logical_and(finite);
    apply = finite.logical_and(found_inf.logical_not());
  }
  if (clipper_) clipper_->Clip();
  CancelLastLayerGradients(student_flat_->trainable(), in.epoch, options_.freeze_last_layer);
  optimizer->step(in.lr, in.weight_decay, apply);
  // As the reference: the center and the teacher move even when the
  // optimizer step was skipped for an overflow.
  loss->update_center(exchange.slice(0, 0, K).view({1, K}) / exchange[K], finite);
  UpdateTeacher(*student_flat_, *teacher_flat_, in.momentum, finite);
  {
    torch::NoGradGuard no_grad;
    out.readout = torch::cat({out.loss.to(head_options.dtype()).reshape({1}), center_norm.reshape({1}),
                              overflow.to(head_options.dtype()).reshape({1}), exchange.slice(0, K)});
  }
  return out;
}

torch::Tensor KoLeoLoss(const torch::Tensor& features) {
  namespace F = torch::nn::functional;
  const auto x = F::normalize(features.to(torch::kFloat), F::NormalizeFuncOptions().dim(-1).eps(1e-8));
  torch::Tensor nearest;
  {
    torch::NoGradGuard guard;
    auto dots = x.matmul(x.t());
    dots.fill_diagonal_(-1.0);
    nearest = dots.argmax(1);
  }
  const auto distance = F::pairwise_distance(x, x.index_select(0, nearest), F::PairwiseDistanceFuncOptions().eps(1e-8));
  return -torch::log(distance + 1e-8).mean();
}

Status LoadIntoModule(torch::nn::Module& module, const TensorMap& tensors, const std::string& prefix,
                      const std::string& origin) {
  torch::NoGradGuard guard;
  std::set<std::string> used;
  auto load = [&](const std::string& name, torch::Tensor& dst) -> Status {
    auto it = tensors.find(prefix + name);
    if (it == tensors.end()) return Status::NotFound(origin + ": tensor '" + prefix + name + "' is missing");
    if (it->second.sizes() != dst.sizes()) {
      std::ostringstream ss;
      ss << origin << ": tensor '" << prefix << name << "' has shape " << it->second.sizes() << ", the model expects "
         << dst.sizes();
      return Status::InvalidArgument(ss.str());
    }
    dst.copy_(it->second);
    used.insert(prefix + name);
    return Status::Ok();
  };
  for (auto& p : module.named_parameters()) {
    if (auto s = load(p.key(), p.value()); !s.ok()) return s;
  }
  for (auto& b : module.named_buffers()) {
    if (auto s = load(b.key(), b.value()); !s.ok()) return s;
  }
  for (const auto& [name, t] : tensors) {
    if (name.rfind(prefix, 0) == 0 && !used.count(name)) {
      return Status::InvalidArgument(origin + ": tensor '" + name + "' matches no parameter of the model");
    }
  }
  return Status::Ok();
}

void SaveModule(const torch::nn::Module& module, const std::string& prefix, TensorMap& out) {
  for (const auto& p : module.named_parameters()) out[prefix + p.key()] = p.value().detach();
  for (const auto& b : module.named_buffers()) out[prefix + b.key()] = b.value().detach();
}

Status Dino::LoadWeights(const TensorMap& weights, const std::string& origin) {
  TensorMap ours;
  for (const auto& [k, v] : weights) {
    if (k.rfind("backbone.", 0) == 0 || k.rfind("head.", 0) == 0) ours[k] = v;
  }
  if (auto s = LoadIntoModule(*student, ours, "", origin); !s.ok()) return s;
  return LoadIntoModule(*teacher, ours, "", origin);
}

TensorMap Dino::TeacherWeights() const {
  TensorMap w;
  SaveModule(*teacher, "", w);
  return w;
}

TensorMap Dino::StateDict() const {
  TensorMap s;
  SaveModule(*student, "student.", s);
  SaveModule(*teacher, "teacher.", s);
  s["dino_loss.center"] = loss->center.detach();
  optimizer->save_state("optimizer.", s);
  if (scaler) scaler->SaveState("loss_scaler.", s);
  return s;
}

Status Dino::LoadStateDict(const TensorMap& state, const std::string& origin) {
  TensorMap student_part, teacher_part;
  for (const auto& [k, v] : state) {
    if (k.rfind("student.", 0) == 0) student_part[k] = v;
    if (k.rfind("teacher.", 0) == 0) teacher_part[k] = v;
  }
  if (auto s = LoadIntoModule(*student, student_part, "student.", origin); !s.ok()) return s;
  if (auto s = LoadIntoModule(*teacher, teacher_part, "teacher.", origin); !s.ok()) return s;
  auto c = state.find("dino_loss.center");
  if (c == state.end() || c->second.sizes() != loss->center.sizes()) {
    return Status::DataLoss(origin + ": 'dino_loss.center' is missing or has the wrong shape");
  }
  {
    torch::NoGradGuard guard;
    loss->center.copy_(c->second);
  }
  if (auto s = optimizer->load_state("optimizer.", state, origin); !s.ok()) return s;
  return scaler ? scaler->LoadState("loss_scaler.", state, origin) : Status::Ok();
}

}  // namespace scdino::model
