// How one configuration key is read, validated and shown: the field types
// of the schema (config/config_schema.cc). Each Field reads a YAML node into a
// RunConfig member, names the key path, the value and what was expected on
// a bad value, and prints the member's current value for the documentation.
// Stateless; a Field writes only the member it was made for.
// Thread-compatible.
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::run {

using Reader = std::function<Status(const YAML::Node&, const std::string& path)>;

struct Field {
  std::string type;                   ///< what the documentation and the errors call it
  Reader read;
  std::function<std::string()> show;  ///< the current value, as YAML
};

/// InvalidArgument "line L: <path>: expected <expected>, got <value>".
Status Bad(const YAML::Node& n, const std::string& path, const std::string& expected);

enum class Bound { kIn, kEx };

Field Int(int64_t* out, int64_t min, int64_t max = std::numeric_limits<int64_t>::max());
Field Uint(uint64_t* out);
Field Real(double* out, double min, Bound lo, double max = std::numeric_limits<double>::infinity(),
           Bound hi = Bound::kIn);
Field Bool(bool* out);
/// A string, or one of `choices` when given.
Field Str(std::string* out, std::vector<std::string> choices = {});
/// A (min, max) pair within (lo, hi]; accepts scDINO's !!python/tuple.
Field Range2(std::array<double, 2>* out, double lo, double hi);
Field Probabilities3(std::array<double, 3>* out);
Field IntList(std::vector<int64_t>* out, int64_t min);
Field ChannelDict(std::map<int64_t, std::string>* out);
/// Keeps the node for ResolveCombinations, which needs channel_dict.
Field ChannelCombinations(std::optional<YAML::Node>* raw, const std::vector<std::vector<int64_t>>* value);
/// Channel combinations: strings of hex channel characters, or lists of indices or names.
Status ResolveCombinations(const YAML::Node& n, const std::string& path, const std::map<int64_t, std::string>& names,
                           std::vector<std::vector<int64_t>>* out);

}  // namespace scdino::run
