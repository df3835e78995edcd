#include "model/attention_core.h"

#include "common/torch_compat.h"
#include "model/cpu_gemm.h"

namespace scdino::model {

namespace {

struct Shape {
  explicit Shape(const torch::Tensor& qkv, int64_t num_heads)
      : B(qkv.size(0)), N(static_cast<int>(qkv.size(1))), C(static_cast<int>(qkv.size(2) / 3)),
        H(num_heads), d(static_cast<int>(C / num_heads)) {}
  int64_t B;
  int N, C;
  int64_t H;
  int d;
  // Offset of image b's head h inside qkv ([B, N, 3C]); k and v follow at +C
  // and +2C, rows are 3C apart.
  int64_t qkv_offset(int64_t pair) const { return (pair / H) * N * 3 * C + (pair % H) * d; }
  // Offset of image b's head h inside a merged [B, N, C] tensor.
  int64_t merged_offset(int64_t pair) const { return (pair / H) * N * C + (pair % H) * d; }
  int64_t square_offset(int64_t pair) const { return pair * N * N; }
};

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t num_heads,
                               double scale) {
    auto qkv = qkv_in.contiguous();
    const Shape s(qkv, num_heads);
    const float alpha = static_cast<float>(scale);
    auto scores = torch::empty({s.B, s.H, s.N, s.N}, qkv.options());
    const float* x = qkv.data_ptr<float>();
    float* sc = scores.data_ptr<float>();
    const int ld = 3 * s.C;
    ForEachInParallel(s.B * s.H, [&](int64_t p) {
      const float* q = x + s.qkv_offset(p);
      PairGemm(false, true, s.N, s.N, s.d, alpha, q, ld, q + s.C, ld, 0.f, sc + s.square_offset(p), s.N);
    });
    auto probs = at::_softmax(scores, -1, false);
    scores.reset();
    auto out = torch::empty({s.B, s.N, s.C}, qkv.options());
    const float* pr = probs.data_ptr<float>();
    float* o = out.data_ptr<float>();
    ForEachInParallel(s.B * s.H, [&](int64_t p) {
      const float* v = x + s.qkv_offset(p) + 2 * s.C;
      PairGemm(false, false, s.N, s.d, s.N, 1.f, pr + s.square_offset(p), s.N, v, ld, 0.f, o + s.merged_offset(p), s.C);
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["num_heads"] = num_heads;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& probs = saved[1];
    const Shape s(qkv, ctx->saved_data["num_heads"].toInt());
    const float alpha = static_cast<float>(ctx->saved_data["scale"].toDouble());
    auto grad_out = grads[0].contiguous();
    auto grad_qkv = torch::empty_like(qkv);
    auto grad_probs = torch::empty_like(probs);
    const float* x = qkv.data_ptr<float>();
    const float* pr = probs.data_ptr<float>();
    const float* go = grad_out.data_ptr<float>();
    float* gx = grad_qkv.data_ptr<float>();
    float* gp = grad_probs.data_ptr<float>();
    const int ld = 3 * s.C;
    // dV = P^T dO and dP = dO V^T.
    ForEachInParallel(s.B * s.H, [&](int64_t p) {
      const int64_t at = s.qkv_offset(p);
      const float* dout = go + s.merged_offset(p);
      PairGemm(true, false, s.N, s.d, s.N, 1.f, pr + s.square_offset(p), s.N, dout, s.C, 0.f, gx + at + 2 * s.C, ld);
      PairGemm(false, true, s.N, s.N, s.d, 1.f, dout, s.C, x + at + 2 * s.C, ld, 0.f, gp + s.square_offset(p), s.N);
    });
    auto grad_scores = at::_softmax_backward_data(grad_probs, probs, -1, probs.scalar_type());
    grad_probs.reset();
    const float* gs = grad_scores.data_ptr<float>();
    // Scores = scale q k^T: dQ = scale dS K, dK = scale dS^T Q.
    ForEachInParallel(s.B * s.H, [&](int64_t p) {
      const int64_t at = s.qkv_offset(p);
      const float* ds = gs + s.square_offset(p);
      PairGemm(false, false, s.N, s.d, s.N, alpha, ds, s.N, x + at + s.C, ld, 0.f, gx + at, ld);
      PairGemm(true, false, s.N, s.d, s.N, alpha, ds, s.N, x + at, ld, 0.f, gx + at + s.C, ld);
    });
    return {grad_qkv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor AttentionCore(const torch::Tensor& qkv, int64_t num_heads, double scale, torch::Tensor* probs) {
  if (probs == nullptr && qkv.is_cuda() && FusedAttentionAvailable()) return FusedAttention(qkv, num_heads, scale);
  if (probs == nullptr && CpuAttentionApplies(qkv)) return CpuAttention(qkv, num_heads, scale);
  return TensorAttention(qkv, num_heads, scale, probs);
}

bool FusedAttentionAvailable() { return compat::kHaveScaledDotProductAttention; }

// q, k and v as [B, heads, N, C / heads] views of qkv [B, N, 3C]. By unbind,
// not three selects (t[0], t[1], t[2]), though the views are the same: the
// backward of unbind writes the three gradients into one [B, N, 3, heads,
// C / heads] tensor, which is qkv's gradient as it stands, where each
// select's backward fills a zero tensor of qkv's size, the three are added,
// and the sum is copied into qkv's layout. An H200's profile of the step at
// batch 256 put 14 ms of its 180 in those selects' backward and that copy
// (docs/performance.md).
static std::vector<torch::Tensor> SplitHeads(const torch::Tensor& qkv, int64_t num_heads) {
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3;
  auto qkv_views = qkv.reshape({B, N, 3, num_heads, C / num_heads}).unbind(2);
  for (auto& t : qkv_views) t = t.transpose(1, 2);
  return qkv_views;
}

torch::Tensor FusedAttention(const torch::Tensor& qkv, int64_t num_heads, double scale) {
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3;
  const auto t = SplitHeads(qkv, num_heads);
  return compat::ScaledDotProductAttention(t[0], t[1], t[2], scale).transpose(1, 2).reshape({B, N, C});
}

torch::Tensor TensorAttention(const torch::Tensor& qkv, int64_t num_heads, double scale, torch::Tensor* probs) {
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3;
  const auto t = SplitHeads(qkv, num_heads);
  const auto &q = t[0], &k = t[1], &v = t[2];
  auto attn = (torch::matmul(q, k.transpose(-2, -1)) * scale).softmax(-1);
  if (probs != nullptr) *probs = attn;
  return torch::matmul(attn, v).transpose(1, 2).reshape({B, N, C});
}

bool CpuAttentionApplies(const torch::Tensor& qkv) {
  return qkv.device().is_cpu() && qkv.scalar_type() == torch::kFloat32 && qkv.dim() == 3 &&
         HasPairGemm();
}

torch::Tensor CpuAttention(const torch::Tensor& qkv, int64_t num_heads, double scale) {
  TORCH_CHECK(CpuAttentionApplies(qkv), "CpuAttention needs a float32 CPU tensor [B, N, 3C] and a GEMM library (oneDNN or a BLAS), got ",
              qkv.scalar_type(), " ", qkv.sizes(), " on ", qkv.device());
  TORCH_CHECK(qkv.size(2) % (3 * num_heads) == 0, "qkv width ", qkv.size(2), " is not 3 x heads (", num_heads,
              ") x head width");
  return AttentionFunction::apply(qkv, num_heads, scale);
}

}  // namespace scdino::model
