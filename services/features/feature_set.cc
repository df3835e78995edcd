#include "features/feature_set.h"

#include <nlohmann/json.hpp>

#include <sstream>

#include "common/csv.h"
#include "common/files.h"
#include "common/npy.h"

namespace scdino::features {

std::string IndexCsv(const std::vector<IndexRow>& rows) {
  std::ostringstream out;
  out << "index,path,class_name,class_index,split\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out << i << ',' << CsvField(r.path) << ',' << CsvField(r.class_name) << ',' << r.class_index << ','
        << data::SplitName(r.split) << '\n';
  }
  return out.str();
}

StatusOr<std::vector<IndexRow>> ParseIndexCsv(const std::string& text, const std::string& origin) {
  std::vector<IndexRow> rows;
  size_t pos = 0;
  int64_t line = 0;
  std::vector<std::string> header, f;
  NextCsvRecord(text, &pos, &header);
  ++line;
  const std::vector<std::string> want = {"index", "path", "class_name", "class_index", "split"};
  if (header != want) return Status::DataLoss(origin + ": line 1: expected the header index,path,class_name,class_index,split");
  while (pos < text.size()) {
    ++line;
    const bool ok = NextCsvRecord(text, &pos, &f);
    if (f.size() == 1 && f[0].empty()) continue;
    const std::string where = origin + ": line " + std::to_string(line) + ": ";
    if (!ok) return Status::DataLoss(where + "unterminated quoted field");
    if (f.size() != 5) return Status::DataLoss(where + "expected 5 fields, got " + std::to_string(f.size()));
    IndexRow r;
    try {
      if (std::stoll(f[0]) != static_cast<int64_t>(rows.size())) {
        return Status::DataLoss(where + "index " + f[0] + " is out of order (expected " + std::to_string(rows.size()) + ")");
      }
      r.class_index = std::stoll(f[3]);
    } catch (const std::exception&) {
      return Status::DataLoss(where + "index/class_index '" + f[0] + "'/'" + f[3] + "' is not an integer");
    }
    r.path = f[1];
    r.class_name = f[2];
    if (f[4] == "train") r.split = data::Split::kTrain;
    else if (f[4] == "test") r.split = data::Split::kTest;
    else return Status::DataLoss(where + "split '" + f[4] + "': expected train or test");
    rows.push_back(std::move(r));
  }
  return rows;
}

StatusOr<FeatureSet> ReadFeatureSet(const std::string& dir, bool raw) {
  FeatureSet s;
  s.dir = dir;
  auto meta = ReadFile(dir + "/metadata.json");
  if (!meta.ok()) {
    return Status::NotFound(dir + ": no metadata.json: not a complete features directory (run scdino-features, "
                                  "or let an interrupted one finish)");
  }
  s.metadata_json = *meta;
  auto j = nlohmann::json::parse(*meta, nullptr, false);
  if (!j.is_object()) return Status::DataLoss(dir + "/metadata.json: not a JSON object");
  if (!j.contains("classes") || !j["classes"].is_array()) {
    return Status::DataLoss(dir + "/metadata.json: expected 'classes', a list of class names");
  }
  for (size_t i = 0; i < j["classes"].size(); ++i) {
    const auto& c = j["classes"][i];
    if (!c.is_string()) {
      return Status::DataLoss(dir + "/metadata.json: classes[" + std::to_string(i) + "]: expected a class name (a "
                              "string), got " + c.dump());
    }
    s.classes.push_back(c.get<std::string>());
  }
  const std::string npy = dir + (raw ? "/features_raw.npy" : "/features.npy");
  auto f = ReadNpy(npy);
  if (!f.ok()) return f.status();
  if (f->dim() != 2 || f->scalar_type() != torch::kFloat32) {
    return Status::DataLoss(npy + ": expected a 2-D float32 array, got " + std::to_string(f->dim()) + "-D " +
                            std::string(c10::toString(f->scalar_type())));
  }
  s.features = *f;
  auto csv = ReadFile(dir + "/index.csv");
  if (!csv.ok()) return csv.status();
  auto rows = ParseIndexCsv(*csv, dir + "/index.csv");
  if (!rows.ok()) return rows.status();
  s.rows = std::move(rows).value();
  if (static_cast<int64_t>(s.rows.size()) != s.features.size(0)) {
    return Status::DataLoss(dir + ": index.csv has " + std::to_string(s.rows.size()) + " rows but " + npy + " has " +
                            std::to_string(s.features.size(0)));
  }
  for (const auto& r : s.rows) {
    if (r.class_index < 0 || r.class_index >= static_cast<int64_t>(s.classes.size())) {
      return Status::DataLoss(dir + "/index.csv: " + r.path + ": class_index " + std::to_string(r.class_index) +
                              " is outside the " + std::to_string(s.classes.size()) + " classes of metadata.json");
    }
  }
  return s;
}

}  // namespace scdino::features
