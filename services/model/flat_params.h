// A network's parameters as views into one flat buffer, and the trainable
// ones' gradients as views into a second, so that what a step does to every
// parameter (zeroing the gradients, DINO's per-parameter clipping, AdamW,
// the teacher EMA, the gradient exchange) is a handful of operations over
// the whole model instead of a few per parameter: on a GPU, a handful of
// kernel launches (docs/performance.md, "Operator calls and host
// synchronisations").
//
// The layout is the reverse of the parameters' registration order (about
// the order backward produces their gradients, so an exchange bucket is a
// contiguous slice whose gradients are ready together), the frozen ones
// last. Parameters of one shape and weight-decay class at a constant
// distance from each other (the same parameter of every ViT block) form a
// Segment: one strided [count, numel] view, over which clipping and weight
// decay act in one operation each.
//
// Not thread-safe: the training loop owns it.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace scdino::model {

struct NamedParam {
  std::string name;
  torch::Tensor param;
};

/// Whether DINO's get_params_groups decays a parameter (not a bias, not 1-D).
bool DecaysWeight(const std::string& name, const torch::Tensor& param);

class FlatParameters {
 public:
  /// Moves `module`'s parameters into one buffer (values, names, devices and
  /// requires_grad unchanged; each parameter becomes a view of it).
  explicit FlatParameters(torch::nn::Module& module);
  /// `module`'s parameters, which must have `like`'s names and shapes, in
  /// `like`'s layout (the teacher beside the student: the EMA is then two
  /// operations over both buffers).
  FlatParameters(torch::nn::Module& module, const FlatParameters& like);

  struct Entry {
    NamedParam p;
    int64_t offset = 0, numel = 0;
    bool trainable = false, decay = false;
  };
  /// Parameters of one shape and decay class as one view.
  struct Segment {
    std::vector<size_t> members;  ///< indices into entries(), in layout order
    int64_t offset = 0;           ///< of the first member
    int64_t stride = 0;           ///< between members (0 for one member)
    int64_t numel = 0;            ///< of each member
    bool decay = false;
  };

  /// Every parameter in layout order: the trainable ones first.
  const std::vector<Entry>& entries() const { return entries_; }
  /// The trainable parameters in layout order (what the optimiser and the
  /// gradient exchange see).
  const std::vector<NamedParam>& trainable() const { return trainable_; }
  /// Segments of the trainable parameters.
  const std::vector<Segment>& segments() const { return segments_; }
  /// All parameters, [numel()].
  const torch::Tensor& values() const { return values_; }
  /// The trainable parameters' part of values(), [trainable_numel()].
  const torch::Tensor& trainable_values() const { return trainable_values_; }
  /// The gradients of the trainable parameters, [trainable_numel()]
  /// (undefined when none is trainable).
  const torch::Tensor& grads() const { return grads_; }
  int64_t numel() const { return values_.numel(); }
  int64_t trainable_numel() const { return trainable_numel_; }

  /// A buffer of the trainable layout (gradients, optimiser moments) viewed
  /// as segment `s`: [count, numel], strided.
  torch::Tensor SegmentView(const torch::Tensor& flat, const Segment& s) const;

  /// Binds every trainable parameter's .grad to its view of grads() and
  /// zeroes them all, in one operation (backward then accumulates in place).
  void ZeroGrads();
  /// Whether parameter i (trainable) has its gradient in grads() now; one
  /// that another owner replaced is copied in first. False for a gradient
  /// set to undefined (cancelled).
  bool GradInPlace(size_t i);

 private:
  void Build(const std::vector<NamedParam>& ordered, const std::vector<bool>& trainable);

  std::vector<Entry> entries_;
  std::vector<NamedParam> trainable_;
  std::vector<Segment> segments_;
  torch::Tensor values_, trainable_values_, grads_;
  std::vector<torch::Tensor> grad_views_;
  int64_t trainable_numel_ = 0;
};

}  // namespace scdino::model
