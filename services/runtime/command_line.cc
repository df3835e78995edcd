#include "runtime/command_line.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <cstdlib>
#include <ostream>

#include "runtime/service_plane.h"
#include "training/trainer.h"

namespace scdino::runtime {

CommandLine::CommandLine(std::string program, std::string usage)
    : program_(std::move(program)), usage_(std::move(usage)) {
  Value("--config", [this](const std::string& v) {
    config_path_ = v;
    return std::string();
  });
  Count("--threads", &threads_);
}

CommandLine& CommandLine::Switch(const std::string& flag, std::function<void()> on) {
  flags_.push_back({flag, false, [on = std::move(on)](const std::string&) {
                      on();
                      return std::string();
                    }});
  return *this;
}

CommandLine& CommandLine::Value(const std::string& flag, std::function<std::string(const std::string&)> on) {
  flags_.push_back({flag, true, std::move(on)});
  return *this;
}

CommandLine& CommandLine::Count(const std::string& flag, int64_t* out) {
  return Value(flag, [out](const std::string& v) {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < 0) return std::string("an integer >= 0");
    *out = x;
    return std::string();
  });
}

std::optional<int> CommandLine::Parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  auto bad = [&](const std::string& message) {
    err << program_ << ": " << message << "\n" << usage_;
    return std::optional<int>(kExitBadInput);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      out << usage_;
      return kExitCompleted;
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags_) {
      if (f.name == a) flag = &f;
    }
    if (flag == nullptr) return bad("unknown argument '" + a + "'");
    std::string value;
    if (flag->takes_value) {
      if (i + 1 >= argc) return bad(a + " needs a value");
      value = argv[++i];
    }
    const std::string expected = flag->on(value);
    if (!expected.empty()) return bad(a + " expects " + expected + ", got '" + value + "'");
  }
  if (config_path_.empty()) return bad("--config FILE is required");
  auto config = training::LoadTrainConfig(config_path_);
  if (!config.ok()) {
    err << program_ << ": " << config.status().message() << "\n";
    return kExitBadInput;
  }
  config_ = std::move(config).value();
  return std::nullopt;
}

int CommandLine::ConfigureThreads() const {
  return training::ConfigureThreads(threads_ >= 0 ? threads_ : config_.scdino.threads);
}

StatusOr<torch::Device> CommandLine::Device(int64_t local_rank) const {
  if (config_.scdino.device != "cuda") return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return Status::InvalidArgument(config_path_ + ": scdino.device is cuda, but no CUDA device is available (or this "
                                   "build's LibTorch has no CUDA)");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % torch::cuda::device_count()));
}

namespace {

// Only lock-free atomics and write(2) in the handler: both are signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<const char*> g_program{""};
std::atomic<const char*> g_doing{""};
std::atomic<void (*)()> g_on_first{nullptr};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<void*>::is_always_lock_free);

void Say(const char* a, const char* b, const char* c) {
  for (const char* s : {a, b, c}) (void)!::write(2, s, std::strlen(s));
}

void OnStopSignal(int sig) {
  if (g_stop_signal.exchange(sig) != 0) {
    Say(g_program.load(), ": second signal, exiting now", "\n");
    std::_Exit(kExitFailed);
  }
  Say(g_program.load(), ": signal received: ", g_doing.load());
  Say("\n", "", "");
  if (auto* f = g_on_first.load()) f();
}

}  // namespace

void InstallStopSignals(const char* program, const char* doing, void (*on_first)()) {
  g_program.store(program);
  g_doing.store(doing);
  g_on_first.store(on_first);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

bool StopSignalReceived() { return g_stop_signal.load() != 0; }

}  // namespace scdino::runtime
