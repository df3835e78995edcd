// A DINO training pair: student and teacher (multi-crop ViT + head), the DINO
// loss with its center, AdamW, and one training step exactly as the
// reference main_dino.py takes it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "common/status.h"
#include "model/dino_head.h"
#include "model/dino_loss.h"
#include "model/flat_params.h"
#include "model/health.h"
#include "model/optim.h"
#include "model/precision.h"
#include "model/vit.h"

namespace scdino::model {

struct DinoOptions {
  /// Backbone; drop_path_rate applies to the student only.
  VitOptions vit;
  int64_t out_dim = 65536;
  int64_t head_hidden_dim = 2048;
  int64_t head_bottleneck_dim = 256;
  int64_t head_nlayers = 3;
  bool norm_last_layer = true;
  int64_t local_crops_number = 8;
  double warmup_teacher_temp = 0.04;
  double teacher_temp = 0.04;
  int64_t warmup_teacher_temp_epochs = 0;
  int64_t epochs = 100;
  double student_temp = 0.1;
  double center_momentum = 0.9;
  /// The teacher's targets: DINO's center, or DINOv2's Sinkhorn-Knopp.
  TeacherCentering centering = TeacherCentering::kCenter;
  /// Weight of the KoLeo regulariser on the student's global-view CLS
  /// features (DINOv2: 0.1); 0 leaves it out.
  double koleo_loss_weight = 0.0;
  /// Per-parameter gradient-norm clip; 0 disables.
  double clip_grad = 3.0;
  /// Epochs during which the last layer's gradients are cancelled.
  int64_t freeze_last_layer = 1;
  AdamWOptions adamw;
  /// Autocast dtype of the forward (the loss is computed in the master dtype,
  /// as autocast runs the reference's softmaxes and sums); parameters,
  /// gradients and optimizer state stay fp32. CPU autocast supports bf16 only.
  Precision precision = Precision::kFp32;
  /// The dtype of parameters, gradients, optimizer state and the center:
  /// float32 for training; float64 only to tell rounding from bugs (the
  /// parity test runs the step in both; the CPU fast paths are float32's).
  torch::Dtype master_dtype = torch::kFloat32;
  /// Dynamic loss scaling (what fp16 needs; independent of precision so
  /// that it can be checked on its own).
  bool loss_scaling = false;
  LossScalerOptions loss_scaler;
};

/// Inputs of one iteration: the crops (2 global, then local), the epoch, and
/// the schedule values of this iteration.
struct StepInput {
  std::vector<torch::Tensor> crops;
  int64_t epoch = 0;
  double lr = 0.0;
  double weight_decay = 0.0;
  double momentum = 0.996;
};

/// Points where distributed training joins a step. Nothing a hook does may
/// wait on the host for the device (a collective waited on the stream).
struct StepHooks {
  /// Sums a tensor of any shape over ranks in place. May be called any
  /// number of times per step (Sinkhorn-Knopp calls it once per iteration
  /// with [K, 1] sums), so it must not carry anything of its own.
  std::function<void(torch::Tensor&)> sum_over_ranks;
  /// After the loss, before backward, exactly once per step: sums the 1-D
  /// exchange tensor over ranks. It carries the teacher outputs' batch sum
  /// (the center's input), the rows behind it, whether the loss is finite
  /// and the health sums (model/health.h), so every rank moves the same
  /// center, skips together and sees the same health. Being the step's one
  /// exchange, the caller may append its own values to it (replacing the
  /// tensor by a longer one: the trainer's agreement on stopping and
  /// pausing); they come back at the end of the step's readout.
  std::function<void(torch::Tensor&)> step_exchange;
  /// After backward, before clipping: where gradients are averaged over ranks.
  std::function<void()> after_backward;
};

/// What a step returns, on the device: nothing of it has been read.
struct StepOutput {
  torch::Tensor loss;        ///< scalar, detached
  MultiCropOutput student;   ///< student backbone and head outputs (all crops)
  MultiCropOutput teacher;   ///< teacher outputs (global crops)
  /// Everything the host reads of the step, in one 1-D float tensor
  /// (ReadStepValues decodes it): read it after the next step is queued and
  /// the device never waits for the host.
  torch::Tensor readout;
};

/// A step's values on the host.
struct StepValues {
  double loss = 0.0;
  bool finite = true;    ///< false: nothing was updated (no optimizer step, center or teacher move)
  bool overflow = false; ///< loss scaling: gradients overflowed, optimizer step skipped
  DinoHealth health;     ///< of the global batch, when finite
  /// What the step_exchange hook appended, summed over ranks.
  std::vector<double> extra;
};

/// Decodes a step's readout (StepOutput::readout, on any device: a copy to
/// the CPU waits for it there).
StepValues ReadStepValues(const torch::Tensor& readout, int64_t out_dim);

/// KoLeo regulariser (Sablayrolles et al. 2019, as DINOv2): minus the mean
/// log distance of each L2-normalised row of features [N, D] to its nearest
/// other row. Low when the features spread out.
torch::Tensor KoLeoLoss(const torch::Tensor& features);

/// Not thread-safe: one training loop owns it.
class Dino {
 public:
  explicit Dino(const DinoOptions& options, torch::Device device = torch::kCPU);

  /// One iteration: teacher and student forward, loss, backward, hooks,
  /// clipping, last-layer freeze, AdamW, center update, teacher EMA, all
  /// queued on the device without waiting for it. A non-finite loss (on any
  /// rank) changes nothing: the step is skipped on the device.
  StepOutput Step(const StepInput& in, const StepHooks& hooks = {});
  /// The step's values, read now (ReadStepValues; tests and simple callers).
  StepValues Values(const StepOutput& out) const { return ReadStepValues(out.readout, options_.out_dim); }

  /// Loads reference-named weights ("backbone.*", "head.*") into the student
  /// and copies them to the teacher. Every parameter must be present with
  /// its shape; unknown names are errors too.
  Status LoadWeights(const TensorMap& weights, const std::string& origin);
  /// The teacher's weights under reference names (what features use).
  TensorMap TeacherWeights() const;

  /// Everything a resume needs: "student.*", "teacher.*", "dino_loss.center",
  /// "optimizer.*", and "loss_scaler.*" with loss scaling.
  TensorMap StateDict() const;
  Status LoadStateDict(const TensorMap& state, const std::string& origin);

  const DinoOptions& options() const { return options_; }
  torch::Device device() const { return device_; }
  int64_t ncrops() const { return 2 + options_.local_crops_number; }
  /// The student's trainable parameters, in the layout of its flat buffer.
  const std::vector<NamedParam>& trainable() const { return student_flat_->trainable(); }
  /// The student's parameters and gradients as flat buffers (the gradient
  /// exchange's buckets are slices of its gradients).
  FlatParameters& student_flat() { return *student_flat_; }

  MultiCropWrapper student{nullptr};
  MultiCropWrapper teacher{nullptr};
  DinoLoss loss{nullptr};
  std::unique_ptr<AdamW> optimizer;
  /// Null unless options().loss_scaling.
  std::unique_ptr<LossScaler> scaler;

 private:
  DinoOptions options_;
  torch::Device device_;
  std::unique_ptr<FlatParameters> student_flat_, teacher_flat_;
  std::unique_ptr<GradientClipper> clipper_;
};

/// Copies named tensors into a module's parameters and buffers (strict).
Status LoadIntoModule(torch::nn::Module& module, const TensorMap& tensors, const std::string& prefix,
                      const std::string& origin);

/// A module's parameters and buffers as "<prefix><name>".
void SaveModule(const torch::nn::Module& module, const std::string& prefix, TensorMap& out);

}  // namespace scdino::model
