#include "common/prom_text.h"

#include <cstdio>
#include <iostream>

#include "common/files.h"

namespace scdino {

void PromText::Gauge(const std::string& name, const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
}

void PromText::Sample(const std::string& name, const PromLabels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      out_ += (i ? ",": "") + labels[i].first + "=\"";
      for (char c : labels[i].second) {
        if (c == '\\' || c == '"') out_ += '\\';
        out_ += c == '\n' ? std::string("\\n") : std::string(1, c);
      }
      out_ += '"';
    }
    out_ += '}';
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", value);
  out_ += buf;
}

void WriteTextfile(const std::string& dir, const std::string& file, const std::string& text,
                   const std::string& program) {
  if (dir.empty()) return;
  if (auto s = WriteFileAtomic(dir + "/" + file, text); !s.ok()) {
    std::cerr << program << ": warning: no node_exporter textfile: " << s.message() << "\n";
  }
}

}  // namespace scdino
