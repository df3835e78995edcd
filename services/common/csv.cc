#include "common/csv.h"

namespace scdino {

std::string CsvField(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

bool NextCsvRecord(const std::string& text, size_t* pos, std::vector<std::string>* fields) {
  fields->assign(1, std::string());
  bool quoted = false;
  size_t& p = *pos;
  while (p < text.size()) {
    const char c = text[p++];
    if (quoted) {
      if (c != '"') {
        fields->back() += c;
      } else if (p < text.size() && text[p] == '"') {
        fields->back() += '"';
        ++p;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields->emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields->back() += c;
    }
  }
  return !quoted;
}

}  // namespace scdino
