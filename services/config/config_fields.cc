#include "config/config_fields.h"

#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

namespace scdino::run {

namespace {

std::string Shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

}  // namespace

Status Bad(const YAML::Node& n, const std::string& path, const std::string& expected) {
  std::ostringstream ss;
  if (n.Mark().line >= 0) ss << "line " << n.Mark().line + 1 << ": ";
  ss << path << ": expected " << expected << ", got " << Shown(n);
  return Status::InvalidArgument(ss.str());
}

namespace {

std::string Num(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

std::string Quoted(const std::string& s) { return s.empty() ? "\"\"" : s; }

}  // namespace

Field Int(int64_t* out, int64_t min, int64_t max) {
  const std::string type = max == std::numeric_limits<int64_t>::max() ? "integer >= " + std::to_string(min)
                                         : "integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            int64_t v;
            if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v) || v < min || v > max) return Bad(n, path, "an " + type);
            *out = v;
            return Status::Ok();
          },
          [=] { return std::to_string(*out); }};
}

Field Uint(uint64_t* out) {
  return {"integer >= 0",
          [=](const YAML::Node& n, const std::string& path) {
            int64_t v;
            if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v) || v < 0) return Bad(n, path, "an integer >= 0");
            *out = static_cast<uint64_t>(v);
            return Status::Ok();
          },
          [=] { return std::to_string(*out); }};
}

Field Real(double* out, double min, Bound lo, double max, Bound hi) {
  std::string type;
  if (max == std::numeric_limits<double>::infinity()) {
    type = std::string("number ") + (lo == Bound::kIn ? ">= " : "> ") + Num(min);
  } else {
    type = std::string("number in ") + (lo == Bound::kIn ? "[" : "(") + Num(min) + ", " + Num(max) +
           (hi == Bound::kIn ? "]" : ")");
  }
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            double v;
            if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v) ||
                !(lo == Bound::kIn ? v >= min : v > min) || !(hi == Bound::kIn ? v <= max : v < max)) {
              return Bad(n, path, "a " + type);
            }
            *out = v;
            return Status::Ok();
          },
          [=] { return Num(*out); }};
}

Field Bool(bool* out) {
  return {"true | false",
          [=](const YAML::Node& n, const std::string& path) {
            bool v;
            if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return Bad(n, path, "true or false");
            *out = v;
            return Status::Ok();
          },
          [=] { return std::string(*out ? "true" : "false"); }};
}

Field Str(std::string* out, std::vector<std::string> choices) {
  std::string type = "string";
  if (!choices.empty()) {
    type.clear();
    for (const auto& c : choices) type += (type.empty() ? "" : " | ") + c;
  }
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            if (!n.IsScalar()) return Bad(n, path, "a string");
            if (!choices.empty() && std::find(choices.begin(), choices.end(), n.Scalar()) == choices.end()) {
              return Bad(n, path, "one of " + type);
            }
            *out = n.Scalar();
            return Status::Ok();
          },
          [=] { return Quoted(*out); }};
}

// A (min, max) pair within (lo, hi]; accepts scDINO's !!python/tuple.
Field Range2(std::array<double, 2>* out, double lo, double hi) {
  const std::string type = "pair [min, max], " + Num(lo) + " < min <= max <= " + Num(hi);
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            double a, b;
            if (!n.IsSequence() || n.size() != 2 || !YAML::convert<double>::decode(n[0], a) ||
                !YAML::convert<double>::decode(n[1], b) || !(a > lo) || !(a <= b) || !(b <= hi)) {
              return Bad(n, path, "a " + type);
            }
            *out = {a, b};
            return Status::Ok();
          },
          [=] { return "[" + Num((*out)[0]) + ", " + Num((*out)[1]) + "]"; }};
}

Field Probabilities3(std::array<double, 3>* out) {
  const std::string type = "3 probabilities in [0, 1]";
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            const std::string want = "a list of 3 probabilities in [0, 1] (first global crop, second global, local)";
            std::array<double, 3> v;
            if (!n.IsSequence() || n.size() != 3) return Bad(n, path, want);
            for (size_t i = 0; i < 3; ++i) {
              if (!YAML::convert<double>::decode(n[i], v[i]) || !(v[i] >= 0 && v[i] <= 1)) return Bad(n, path, want);
            }
            *out = v;
            return Status::Ok();
          },
          [=] { return "[" + Num((*out)[0]) + ", " + Num((*out)[1]) + ", " + Num((*out)[2]) + "]"; }};
}

Field IntList(std::vector<int64_t>* out, int64_t min) {
  const std::string type = "list of integers >= " + std::to_string(min);
  return {type,
          [=](const YAML::Node& n, const std::string& path) {
            const std::string want = "a non-empty " + type;
            std::vector<int64_t> v;
            if (!n.IsSequence() || n.size() == 0) return Bad(n, path, want);
            for (const auto& e : n) {
              int64_t x;
              if (!e.IsScalar() || !YAML::convert<int64_t>::decode(e, x) || x < min) return Bad(e, path, want);
              v.push_back(x);
            }
            *out = v;
            return Status::Ok();
          },
          [=] {
            std::string s;
            for (auto x : *out) s += (s.empty() ? "" : ", ") + std::to_string(x);
            return "[" + s + "]";
          }};
}

Field ChannelDict(std::map<int64_t, std::string>* out) {
  return {"mapping of channel index to name",
          [=](const YAML::Node& n, const std::string& path) {
            const std::string want = "a mapping of channel index (integer >= 0) to channel name";
            if (!n.IsMap()) return Bad(n, path, want);
            std::map<int64_t, std::string> m;
            for (auto it = n.begin(); it != n.end(); ++it) {
              int64_t idx;
              if (!YAML::convert<int64_t>::decode(it->first, idx) || idx < 0) return Bad(it->first, path, want);
              if (!it->second.IsScalar() || it->second.Scalar().empty()) {
                return Bad(it->second, path + "." + std::to_string(idx), "a channel name");
              }
              m[idx] = it->second.Scalar();
            }
            *out = m;
            return Status::Ok();
          },
          [=] { return std::string(out->empty() ? "{}" : "..."); }};
}

// Channel combinations refer to channel_dict names, so they are resolved
// once the whole file is read.
Field ChannelCombinations(std::optional<YAML::Node>* raw, const std::vector<std::vector<int64_t>>* value) {
  return {"list of channel combinations",
          [=](const YAML::Node& n, const std::string&) {
            *raw = n;
            return Status::Ok();
          },
          [=] {
            std::string s;
            for (const auto& combo : *value) {
              std::string digits;
              for (auto c : combo) digits += std::to_string(c);
              s += (s.empty() ? "\"" : ", \"") + digits + "\"";
            }
            return "[" + s + "]";
          }};
}

Status ResolveCombinations(const YAML::Node& n, const std::string& path, const std::map<int64_t, std::string>& names,
                           std::vector<std::vector<int64_t>>* out) {
  const std::string want =
      "a non-empty list of channel combinations: strings of hexadecimal channel characters like \"01234\", or "
      "lists of channel indices or channel_dict names";
  if (!n.IsSequence() || n.size() == 0) return Bad(n, path, want);
  std::vector<std::vector<int64_t>> all;
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& e = n[i];
    const std::string epath = path + "[" + std::to_string(i) + "]";
    std::vector<int64_t> combo;
    if (e.IsScalar()) {
      // One hexadecimal character per channel, as scDINO reads them ("0a":
      // channels 0 and 10).
      for (char ch : e.Scalar()) {
        const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (lower >= '0' && lower <= '9') {
          combo.push_back(lower - '0');
        } else if (lower >= 'a' && lower <= 'f') {
          combo.push_back(10 + lower - 'a');
        } else {
          return Bad(e, epath,
                     "a string of channel characters, 0-9 and a-f for channels 10-15 as scDINO reads them (use a "
                     "list such as [16, 17] for channels above 15)");
        }
      }
    } else if (e.IsSequence()) {
      for (const auto& c : e) {
        int64_t idx;
        if (c.IsScalar() && YAML::convert<int64_t>::decode(c, idx) && idx >= 0) {
          combo.push_back(idx);
          continue;
        }
        bool found = false;
        for (const auto& [k, v] : names) {
          if (c.IsScalar() && v == c.Scalar()) {
            combo.push_back(k);
            found = true;
          }
        }
        if (!found) {
          std::string known;
          for (const auto& [k, v] : names) known += (known.empty() ? "" : ", ") + v;
          return Bad(c, epath, "a channel index or a name from meta.channel_dict (" +
                                   (known.empty() ? std::string("none defined") : known) + ")");
        }
      }
    } else {
      return Bad(e, epath, want);
    }
    if (combo.empty()) return Bad(e, epath, "at least one channel");
    const std::set<int64_t> channels(combo.begin(), combo.end());
    if (channels.size() != combo.size()) return Bad(e, epath, "each channel at most once");
    // Each combination is a run of its own: the same channels twice (in
    // any order) would train one model twice.
    for (size_t j = 0; j < all.size(); ++j) {
      if (std::set<int64_t>(all[j].begin(), all[j].end()) == channels) {
        return Bad(e, epath, "other channels than entry " + std::to_string(j) + " (" + Shown(n[j]) +
                                 "; each combination is a run of its own)");
      }
    }
    all.push_back(combo);
  }
  *out = all;
  return Status::Ok();
}

}  // namespace scdino::run
