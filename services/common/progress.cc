#include "common/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

namespace scdino {

ProgressStyle ProgressStyleFor(const std::ostream* out) {
  ProgressStyle style;
  const int fd = out == &std::cerr ? STDERR_FILENO : out == &std::cout ? STDOUT_FILENO : -1;
  if (fd >= 0 && isatty(fd) == 1) {
    style.redraw = true;
    style.interval = std::chrono::milliseconds(500);
  }
  if (const char* v = std::getenv("SCDINO_PROGRESS_SECONDS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
      static bool warned = false;
      if (!warned) {
        warned = true;
        std::cerr << "scdino: SCDINO_PROGRESS_SECONDS='" << v
                  << "': expected seconds between progress lines, 0 to 86400 (0: none); using "
                  << style.interval.count() / 1000.0 << "\n";
      }
    } else if (seconds == 0) {
      style.quiet = true;
    } else {
      style.interval = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    }
  }
  return style;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  }
  return buf;
}

namespace {

std::mutex sink_mu;
std::shared_ptr<const std::function<void(const StageProgress&)>> sink;

void Publish(const std::optional<StageProgress>& p) {
  if (!p) return;
  std::shared_ptr<const std::function<void(const StageProgress&)>> to;
  {
    std::lock_guard<std::mutex> lock(sink_mu);
    to = sink;
  }
  if (to) (*to)(*p);
}

}  // namespace

void SetStageSink(std::function<void(const StageProgress&)> f) {
  std::lock_guard<std::mutex> lock(sink_mu);
  sink = f ? std::make_shared<const std::function<void(const StageProgress&)>>(std::move(f)) : nullptr;
}

ProgressLog::ProgressLog(std::ostream* out, std::string prefix, std::string unit, ProgressStyle style)
    : out_(style.quiet ? nullptr : out), prefix_(std::move(prefix)), unit_(std::move(unit)), style_(style) {
  const auto colon = prefix_.find(": ");
  stage_ = colon == std::string::npos ? prefix_ : prefix_.substr(colon + 2);
}

void ProgressLog::set_stage(std::string stage) {
  std::lock_guard<std::mutex> lock(mu_);
  stage_ = std::move(stage);
}

std::optional<StageProgress> ProgressLog::ForSinkLocked(int64_t done, int64_t total, bool finished,
                                                        std::chrono::steady_clock::time_point now) {
  if (!finished && sunk_ && now - last_sink_at_ < std::chrono::seconds(1)) return std::nullopt;
  sunk_ = true;
  last_sink_at_ = now;
  StageProgress p;
  p.stage = stage_;
  p.unit = unit_;
  p.done = done;
  p.total = total;
  p.per_second = rate_;
  p.eta_seconds = !finished && total > 0 && rate_ > 0 ? static_cast<double>(total - done) / rate_ : 0.0;
  p.finished = finished;
  return p;
}

ProgressLog::~ProgressLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_line_) *out_ << "\n" << std::flush;
}

double ProgressLog::rate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rate_;
}

int64_t ProgressLog::lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

std::string ProgressLog::Line(int64_t done, int64_t total) const {
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line << prefix_ << ": " << unit_ << " " << done;
  if (total > 0) {
    line << "/" << total;
    line.precision(0);
    line << " (" << std::floor(100.0 * static_cast<double>(done) / static_cast<double>(total)) << "%)";
  }
  const double rate = rate_;
  if (rate > 0) {
    line.precision(rate < 10 ? 2 : 1);
    line << ", " << rate << " " << unit_ << "/s";
    if (total > 0 && done < total) line << ", ETA " << FormatDuration(static_cast<double>(total - done) / rate);
  }
  return line.str();
}

void ProgressLog::Report(int64_t done, int64_t total) {
  std::optional<StageProgress> publish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReportLocked(done, total, &publish);
  }
  Publish(publish);
}

void ProgressLog::ReportLocked(int64_t done, int64_t total, std::optional<StageProgress>* publish) {
  if (done_) {
    if (done >= last_done_) return;
    done_ = false;
    first_done_ = -1;
    sunk_ = false;
  }
  last_done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (first_done_ < 0) {
    first_done_ = done;
    first_at_ = last_line_at_ = now;
  }
  const double seconds = std::chrono::duration<double>(now - first_at_).count();
  rate_ = seconds > 0 ? static_cast<double>(done - first_done_) / seconds : 0.0;
  if (total > 0 && done >= total) {
    DoneLocked(done);
    *publish = ForSinkLocked(done, total, true, now);
    return;
  }
  *publish = ForSinkLocked(done, total, false, now);
  // A stage shorter than the interval prints its last line only.
  if (out_ == nullptr || now - last_line_at_ < style_.interval) return;
  last_line_at_ = now;
  ++lines_;
  const std::string line = Line(done, total);
  // One write a line: other threads' lines do not cut into it.
  if (style_.redraw) {
    // Clear what a longer line before left.
    *out_ << ("\r" + line + "\033[K") << std::flush;
    open_line_ = true;
  } else {
    *out_ << (line + "\n") << std::flush;
  }
}

void ProgressLog::Done(int64_t done) {
  std::optional<StageProgress> publish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      DoneLocked(done);
      publish = ForSinkLocked(done, done, true, std::chrono::steady_clock::now());
    }
  }
  Publish(publish);
}

void ProgressLog::DoneLocked(int64_t done) {
  if (done_) return;
  done_ = true;
  last_done_ = done;
  if (out_ == nullptr) return;
  const double seconds =
      first_done_ < 0 ? 0.0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - first_at_).count();
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line << prefix_ << ": " << done << " " << unit_ << " in " << FormatDuration(seconds);
  if (seconds > 0 && first_done_ >= 0 && done > first_done_) {
    const double rate = static_cast<double>(done - first_done_) / seconds;
    line.precision(rate < 10 ? 2 : 1);
    line << " (" << rate << " " << unit_ << "/s)";
  }
  *out_ << ((open_line_ ? "\r" : "") + line.str() + (open_line_ ? "\033[K\n" : "\n")) << std::flush;
  open_line_ = false;
  ++lines_;
}

}  // namespace scdino
