// Prometheus text exposition for node_exporter's textfile collector: what a
// process leaves behind when it ends (the preflight's report, a staging's
// figures), which no exporter serves. One writer, so that every .prom file
// escapes its label values and writes its numbers the same way.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace scdino {

using PromLabels = std::vector<std::pair<std::string, std::string>>;

class PromText {
 public:
  /// A gauge family's # HELP and # TYPE lines; its samples follow.
  void Gauge(const std::string& name, const std::string& help);
  /// One sample: `name{labels} value` (label values escaped; the value with
  /// 17 significant digits: read back exactly).
  void Sample(const std::string& name, const PromLabels& labels, double value);
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

/// `text` written atomically to `dir`/`file`, node_exporter's textfile
/// directory (common/env.h's TextfileDir(), or the one a flag names); none
/// when `dir` is empty. The dashboard's copy: a failure is a warning on
/// stderr naming `program`, never an error of the work.
void WriteTextfile(const std::string& dir, const std::string& file, const std::string& text,
                   const std::string& program);

}  // namespace scdino
