// A long stage's progress for the person who started it: done/total, rate
// and ETA, on a terminal as one line redrawn in place, in a log as plain
// lines at a bounded rate, and a last line with the stage's time.
//
//   scdino-features: images 12800/60000 (21%), 117.4 images/s, ETA 6:42
//
// The rate is counted from the first report, so a resumed stage that starts
// at what it skips shows the speed of this process, not of the skip.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>

namespace scdino {

struct ProgressStyle {
  /// Redraw one line in place ('\r'): a terminal. Otherwise a line each time.
  bool redraw = false;
  /// At most one line per interval, the first an interval after the start
  /// (a shorter stage prints its last line only).
  std::chrono::milliseconds interval{10000};
  /// No lines at all (SCDINO_PROGRESS_SECONDS=0).
  bool quiet = false;
};

/// The style for `out`: a terminal when `out` is std::cerr or std::cout and
/// that descriptor is a TTY (a line every 0.5 s, redrawn), a log otherwise (a
/// line every 10 s). SCDINO_PROGRESS_SECONDS overrides the interval (0: none).
ProgressStyle ProgressStyleFor(const std::ostream* out);

/// "42 s", "6:42", "1:05:03".
std::string FormatDuration(double seconds);

/// A stage's progress as a service publishes it beside its log (the control
/// status, the metrics): what ProgressLog reports.
struct StageProgress {
  std::string stage;  ///< "channel statistics", "linear probe", "features"
  std::string unit;   ///< plural: "images", "fits"
  int64_t done = 0, total = 0;  ///< total <= 0: unknown
  double per_second = 0.0, eta_seconds = 0.0;  ///< 0: not known yet
  bool finished = false;
};

/// Where every ProgressLog of the process also reports: at its first
/// report, at most once a second after, and at its end. The service plane
/// (process/service_plane.h) sets it for its lifetime; an empty function
/// stops it. Called on the reporting thread, outside the log's lock.
void SetStageSink(std::function<void(const StageProgress&)> sink);

/// Thread-safe: Report may come from any thread.
class ProgressLog {
 public:
  /// `prefix` names the program and the stage ("scdino-eval: linear probe");
  /// `unit` is plural ("images"). A null `out` prints nothing.
  ProgressLog(std::ostream* out, std::string prefix, std::string unit, ProgressStyle style);
  ProgressLog(std::ostream* out, std::string prefix, std::string unit)
      : ProgressLog(out, std::move(prefix), std::move(unit), ProgressStyleFor(out)) {}
  /// The stage's name for the stage sink: by default what follows the
  /// program in `prefix` ("linear probe" of "scdino-eval: linear probe"),
  /// or the whole prefix.
  void set_stage(std::string stage);

  /// `done` of `total` (total <= 0: unknown; no percentage, no ETA); done
  /// reaching total is Done(done). After Done(), a report below the last
  /// one starts a new round (the next checkpoint's images).
  void Report(int64_t done, int64_t total);
  /// The last line: "PREFIX: DONE UNIT in 6:42 (R UNIT/s)". Once a round; a
  /// ProgressLog destroyed without it ends a redrawn line and says nothing.
  void Done(int64_t done);
  ~ProgressLog();

  /// Units a second of this round, as of the last report.
  double rate() const;
  /// Lines printed so far (tests).
  int64_t lines() const;

 private:
  std::string Line(int64_t done, int64_t total) const;
  void ReportLocked(int64_t done, int64_t total, std::optional<StageProgress>* publish);
  void DoneLocked(int64_t done);
  /// What the stage sink gets now, or nothing (once a second, and the end).
  std::optional<StageProgress> ForSinkLocked(int64_t done, int64_t total, bool finished,
                                             std::chrono::steady_clock::time_point now);

  std::ostream* out_;
  std::string prefix_, unit_, stage_;
  ProgressStyle style_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point first_at_, last_line_at_, last_sink_at_;
  bool sunk_ = false;
  int64_t first_done_ = -1, last_done_ = 0, lines_ = 0;
  double rate_ = 0.0;
  bool open_line_ = false, done_ = false;
};

}  // namespace scdino
