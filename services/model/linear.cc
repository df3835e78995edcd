#include "model/linear.h"

#include "model/cpu_gemm.h"
#include "model/precision.h"

namespace scdino::model {

namespace {

// Forward: y = x W^T with the bias as the product's starting C (beta 1).
// Backward, with dy [rows, out]: dx = dy W, dW = dy^T x, db = column sums.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    const int64_t in = w.size(1), out = w.size(0);
    auto x2 = x.reshape({-1, in}).contiguous();
    auto wc = w.contiguous();
    const int64_t rows = x2.size(0);
    auto y = b.expand({rows, out}).contiguous();
    if (rows > 0) {
      CpuGemm(false, true, rows, out, in, 1.f, x2.data_ptr<float>(), in, wc.data_ptr<float>(), in, 1.f,
              y.data_ptr<float>(), out);
    }
    ctx->save_for_backward({x2, wc});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = out;
    return y.view(out_sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w = saved[1];
    const int64_t rows = x2.size(0), in = w.size(1), out = w.size(0);
    auto dy = grads[0].reshape({rows, out}).contiguous();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty({rows, in}, dy.options());
      if (rows > 0) {
        CpuGemm(false, false, rows, in, out, 1.f, dy.data_ptr<float>(), out, w.data_ptr<float>(), in, 0.f,
                dx.data_ptr<float>(), in);
      }
      dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) dw = Mm(dy, true, x2, false);
    if (ctx->needs_input_grad(2)) db = dy.sum(0);
    return {dx, dw, db};
  }
};

}  // namespace

bool CpuLinearApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto cpu_float = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
  };
  return HasCpuGemm() && cpu_float(x) && cpu_float(weight) && cpu_float(bias) && x.dim() >= 1 &&
         weight.dim() == 2 && bias.dim() == 1 && !AutocastActive(torch::kCPU);
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!CpuLinearApplies(x, weight, bias)) return torch::linear(x, weight, bias);
  TORCH_CHECK(x.size(-1) == weight.size(1) && bias.size(0) == weight.size(0), "Linear: input ", x.sizes(),
              " does not fit weight ", weight.sizes(), " and bias ", bias.sizes());
  return LinearFunction::apply(x, weight, bias);
}

torch::Tensor Linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return Linear(x, layer->weight, layer->bias);
}

}  // namespace scdino::model
