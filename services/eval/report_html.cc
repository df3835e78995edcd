#include "eval/report_html.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "common/files.h"
#include "eval/drawing.h"

namespace scdino::eval::html {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Percent(double v) { return FormatFixed(100 * v, 1) + "%"; }


double Number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

std::string Text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

namespace {

constexpr uintmax_t kMaxResultsBytes = uintmax_t{64} << 20;

Entry ReadEntry(const fs::path& dir) {
  Entry e;
  e.name = dir.filename().string();
  const std::string path = (dir / "knn_results.json").string();
  // scdino-eval's results are kilobytes (a few MB with thousands of
  // classes): a file far larger is not one, and is not read into memory.
  std::error_code size_ec;
  const auto bytes = fs::file_size(path, size_ec);
  if (!size_ec && bytes > kMaxResultsBytes) {
    e.error = path + ": " + std::to_string(bytes) + " bytes, more than the " + std::to_string(kMaxResultsBytes >> 20) +
              " MiB of scdino-eval's results; not read";
    return e;
  }
  auto text = ReadFile(path);
  if (!text.ok()) {
    e.error = text.status().message();
    return e;
  }
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("knn") || !j["knn"].is_array() || j["knn"].empty()) {
    e.error = path + ": not the results of scdino-eval (no 'knn' list)";
    return e;
  }
  const json ckpt = j.contains("metadata") && j["metadata"].is_object() ? j["metadata"].value("checkpoint", json())
                                                                         : json();
  e.baseline = e.name == "random_init" || Text(ckpt, "key") == "random";
  e.pixels = e.name == "raw_pixels" || Text(ckpt, "key") == "raw_pixels";
  if (ckpt.is_object() && ckpt.contains("epoch") && ckpt["epoch"].is_number_integer()) e.epoch = ckpt["epoch"];
  if (ckpt.is_object() && ckpt.contains("iteration") && ckpt["iteration"].is_number_integer()) {
    e.iteration = ckpt["iteration"];
  }
  e.complete = j.contains("embeddings");
  e.n_train = static_cast<int64_t>(Number(j, "n_train"));
  e.n_test = static_cast<int64_t>(Number(j, "n_test"));
  e.best_k = static_cast<int64_t>(Number(j, "best_k"));
  e.classes = j.contains("classes") && j["classes"].is_array() ? static_cast<int64_t>(j["classes"].size()) : 0;
  for (const auto& k : j["knn"]) {
    const double kk = Number(k, "k");
    e.top1_by_k.emplace_back(kk, Number(k, "top1_accuracy"));
    e.balanced_by_k.emplace_back(kk, Number(k, "balanced_accuracy"));
    if (static_cast<int64_t>(kk) == e.best_k) {
      e.knn_top1 = Number(k, "top1_accuracy");
      e.knn_balanced = Number(k, "balanced_accuracy");
      if (k.contains("per_class") && k["per_class"].is_array()) {
        for (const auto& c : k["per_class"]) {
          e.per_class.push_back({Text(c, "class"), Number(c, "precision"), Number(c, "recall"),
                                 static_cast<int64_t>(Number(c, "support"))});
        }
      }
    }
  }
  const json lp = j.value("linear_probe", json());
  e.linear = lp.is_object() && lp.contains("top1_accuracy");
  e.linear_top1 = Number(lp, "top1_accuracy");
  e.linear_balanced = Number(lp, "balanced_accuracy");
  e.linear_c = Number(lp, "C");
  e.linear_skipped = Text(lp, "skipped");
  const json cl = j.value("clustering", json());
  e.clustering = cl.is_object() && cl.contains("adjusted_rand_index");
  e.ari = Number(cl, "adjusted_rand_index");
  e.nmi = Number(cl, "normalized_mutual_information");
  return e;
}

}  // namespace

std::vector<Entry> ReadEntries(const std::string& eval_dir) {
  std::vector<Entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(eval_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code dir_ec;
    if (it->is_directory(dir_ec) && fs::exists(it->path() / "knn_results.json", dir_ec)) {
      entries.push_back(ReadEntry(it->path()));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    auto key = [](const Entry& e) {
      return std::make_tuple(!e.baseline, !e.pixels, e.iteration < 0, e.iteration, e.name);
    };
    return key(a) < key(b);
  });
  return entries;
}


Curves CurvesOf(const std::vector<Entry>& entries) {
  Curves c;
  for (const auto& e : entries) {
    if (!e.error.empty()) continue;
    if (e.baseline) {
      if (!c.random || e.complete) c.random = &e;
    } else if (e.pixels) {
      if (!c.pixels || e.complete) c.pixels = &e;
    } else if (e.epoch >= 0 && e.complete && (c.trained.empty() || c.trained.back().iteration != e.iteration)) {
      c.trained.push_back(e);
    }
  }
  return c;
}

std::string Chart(const std::string& title, const std::string& x_label, const std::vector<Series>& series,
                  std::optional<std::pair<double, double>> y_range) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (x0 > x1) return "";
  if (y_range) y0 = std::min(y0, y_range->first), y1 = std::max(y1, y_range->second);
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  const double W = 560, H = 300, left = 56, right = 16, top = 34, bottom = 44;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom); };
  std::ostringstream o;
  o << "<figure class=\"chart\"><svg viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W << "\" height=\"" << H
    << "\" role=\"img\" aria-label=\"" << Escape(title) << "\">"
    << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" class=\"title\">" << Escape(title) << "</text>"
    << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right << "\" height=\""
    << H - top - bottom << "\" class=\"frame\"/>";
  const auto xt = drawing::NiceTicks(x0, x1, 3), yt = drawing::NiceTicks(y0, y1, 4);
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : 1, ys = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : yt) {
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << py(t) << "\" y2=\"" << py(t)
      << "\" class=\"grid\"/><text x=\"" << left - 6 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">"
      << drawing::TickLabel(t, ys) << "</text>";
  }
  for (double t : xt) {
    o << "<text x=\"" << px(t) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
      << drawing::TickLabel(t, xs) << "</text>";
  }
  o << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">"
    << Escape(x_label) << "</text>";
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    o << "<polyline fill=\"none\" stroke=\"" << s.colour << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (const auto& [x, y] : s.points) o << px(x) << "," << py(y) << " ";
    o << "\"/>";
    if (!s.dashed) {
      for (const auto& [x, y] : s.points) {
        o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << s.colour << "\"/>";
      }
    }
  }
  o << "</svg><figcaption>";
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    o << "<span class=\"key\"><span class=\"swatch" << (s.dashed ? " dashed" : "") << "\" style=\"border-color:"
      << s.colour << "\"></span>" << Escape(s.name) << "</span> ";
  }
  o << "</figcaption></figure>\n";
  return o.str();
}

std::string BarChart(const std::string& title, const std::vector<std::string>& labels, const std::vector<Bars>& bars) {
  if (labels.empty() || bars.empty()) return "";
  const double bar = 12, gap = 10, left = 150, right = 60, top = 34, bottom = 20, W = 560;
  const double row = bar * static_cast<double>(bars.size()) + gap;
  const double H = top + row * static_cast<double>(labels.size()) + bottom;
  const double span = W - left - right;
  std::ostringstream o;
  o << "<figure class=\"chart\"><svg viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W << "\" height=\"" << H
    << "\" role=\"img\" aria-label=\"" << Escape(title) << "\">"
    << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" class=\"title\">" << Escape(title) << "</text>";
  for (double t : {0.0, 0.5, 1.0}) {
    o << "<line x1=\"" << left + t * span << "\" x2=\"" << left + t * span << "\" y1=\"" << top - 4 << "\" y2=\""
      << H - bottom << "\" class=\"grid\"/>";
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = top + row * static_cast<double>(i);
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + row / 2 << "\" text-anchor=\"end\">" << Escape(labels[i])
      << "</text>";
    for (size_t b = 0; b < bars.size(); ++b) {
      const double v = i < bars[b].values.size() ? std::clamp(bars[b].values[i], 0.0, 1.0) : 0.0;
      const double by = y + bar * static_cast<double>(b);
      o << "<rect x=\"" << left << "\" y=\"" << by << "\" width=\"" << v * span << "\" height=\"" << bar - 2
        << "\" fill=\"" << bars[b].colour << "\"/><text x=\"" << left + v * span + 4 << "\" y=\"" << by + bar - 3
        << "\" class=\"value\">" << FormatFixed(v, 2) << "</text>";
    }
  }
  o << "</svg><figcaption>";
  for (const auto& b : bars) {
    o << "<span class=\"key\"><span class=\"swatch\" style=\"border-color:" << b.colour << "\"></span>"
      << Escape(b.name) << "</span> ";
  }
  o << "</figcaption></figure>\n";
  return o.str();
}

double XOf(const Entry& e) { return static_cast<double>(e.epoch); }

Series Baseline(const std::string& name, const std::string& colour, double value, const std::vector<Entry>& trained) {
  Series s{name, colour, {}, true};
  if (trained.empty()) return s;
  double lo = 1e300, hi = -1e300;
  for (const auto& e : trained) lo = std::min(lo, XOf(e)), hi = std::max(hi, XOf(e));
  s.points = {{lo, value}, {hi, value}};
  return s;
}

std::string Figure(const std::string& src, const std::string& caption) {
  return "<figure><img src=\"" + Escape(src) + "\" alt=\"" + Escape(caption) + "\" loading=\"eager\"><figcaption>" +
         Escape(caption) + "</figcaption></figure>\n";
}

const char* const kStyle = R"(body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc;padding-bottom:4px}
table{border-collapse:collapse;font-size:.92em}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}tr.baseline{background:#f4f4f4;font-style:italic}
.charts,.figures{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}figure img{max-width:560px;border:1px solid #ddd}
svg text{font-size:12px;fill:#333}svg .title{font-size:14px;font-weight:600}svg .frame{fill:none;stroke:#999}
svg .grid{stroke:#eee}svg .value{font-size:10px;fill:#555}.key{margin-right:14px;white-space:nowrap}
.swatch{display:inline-block;width:22px;border-top:3px solid;vertical-align:middle;margin-right:5px}
.swatch.dashed{border-top-style:dashed}.note{color:#555}#broken{color:#b00;font-weight:600}
)";

const char* const kBrokenImageScript = R"(<script>
window.addEventListener('load', function () {
  var broken = [];
  for (var i = 0; i < document.images.length; i++) {
    var img = document.images[i];
    if (!img.complete || img.naturalWidth === 0) broken.push(img.getAttribute('src'));
  }
  document.body.setAttribute('data-images', String(document.images.length));
  document.body.setAttribute('data-broken-images', String(broken.length));
  if (broken.length) {
    var p = document.getElementById('broken');
    p.textContent = broken.length + ' figure(s) could not be loaded: ' + broken.join(', ');
    p.hidden = false;
  }
});
</script>
)";

}  // namespace scdino::eval::html
