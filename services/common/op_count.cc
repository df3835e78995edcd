#include "common/op_count.h"

#include <atomic>
#include <cstring>

namespace scdino {

namespace {

constexpr const char* kHostWait = "scdino::host_wait";

std::atomic<OpCounter*> g_counter{nullptr};
// Depth of aten::bmm / aten::baddbmm calls on this thread.
thread_local int t_bmm_depth = 0;

bool CpuBmm(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (std::strcmp(name, "aten::bmm") != 0 && std::strcmp(name, "aten::baddbmm") != 0) return false;
  const auto in = fn.inputs();
  return !in.empty() && in[0].isTensor() && in[0].toTensor().device().is_cpu();
}

struct BmmContext : at::ObserverContext {};

// aten::copy_(self, src, non_blocking) from a device into CPU memory.
bool BlockingCopyToCpu(const at::RecordFunction& fn) {
  const auto in = fn.inputs();
  if (in.size() < 2 || !in[0].isTensor() || !in[1].isTensor()) return false;
  const bool non_blocking = in.size() > 2 && in[2].isBool() && in[2].toBool();
  return in[0].toTensor().device().is_cpu() && !in[1].toTensor().device().is_cpu() && !non_blocking;
}

}  // namespace

OpCounter::OpCounter() : owner_(std::this_thread::get_id()) {
  OpCounter* expected = nullptr;
  TORCH_CHECK(g_counter.compare_exchange_strong(expected, this), "an OpCounter is already counting in this process");
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            if (OpCounter* c = g_counter.load()) c->Record(fn);
            if (!CpuBmm(fn)) return nullptr;
            ++t_bmm_depth;
            return std::make_unique<BmmContext>();
          },
          [](const at::RecordFunction&, at::ObserverContext* ctx) {
            if (ctx != nullptr) --t_bmm_depth;
          })
          .needsInputs(true));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  g_counter.store(nullptr);
}

void OpCounter::Record(const at::RecordFunction& fn) {
  const char* name = fn.name();
  bool sync = false;
  if (std::strcmp(name, "aten::_local_scalar_dense") == 0 || std::strcmp(name, kHostWait) == 0) {
    sync = true;
  } else if (std::strcmp(name, "aten::copy_") == 0) {
    sync = BlockingCopyToCpu(fn);
  }
  const bool other_thread = std::this_thread::get_id() != owner_;
  std::lock_guard<std::mutex> l(mu_);
  ++counts_.ops;
  ++counts_.by_name[name];
  if (t_bmm_depth > 0) ++counts_.inside_cpu_bmm;
  if (other_thread) ++counts_.other_thread_ops;
  if (sync) {
    ++counts_.host_syncs;
    if (other_thread) ++counts_.other_thread_syncs;
    ++counts_.syncs_by_name[name];
  }
}

OpCounter::Counts OpCounter::Take() {
  std::lock_guard<std::mutex> l(mu_);
  Counts c = std::move(counts_);
  counts_ = Counts();
  return c;
}

HostWaitScope::HostWaitScope() : guard_(at::RecordScope::USER_SCOPE) {
  if (guard_.isActive()) guard_.before(kHostWait);
}

}  // namespace scdino
