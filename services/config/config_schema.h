// The configuration as one schema: every key with its type and range, its
// default, its meaning and its other spellings, in one table
// (config_schema.cc). The YAML reader validates against it and
// docs/config.md's key reference is generated from it (`scdino-config doc`);
// tests/config/config_test.cc fails when the two differ.
// The schema is built per call; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"

namespace YAML {
class Node;
}

namespace scdino::run {

/// One key as the documentation shows it.
struct KeyDoc {
  std::string path;                  ///< e.g. "train_scDINO.hyperparameters.lr"
  std::vector<std::string> aliases;  ///< scDINO's spellings (techer_temp, ...)
  std::string type;                  ///< type and range, e.g. "number > 0"
  std::string default_value;         ///< as YAML
  std::string meaning;
  std::string ignored;               ///< non-empty: accepted, ignored, and why
};

/// Every key, in the table's order, with the defaults of RunConfig.
std::vector<KeyDoc> ConfigKeys();

/// The Markdown key reference of docs/config.md (one table per section).
std::string ConfigReference();

/// The parser's own (ParseRunConfig): reads the keys of a parsed YAML
/// document into `c`: unknown keys, wrong types and out-of-range values
/// become one InvalidArgument naming the line, the key path, the value and
/// what was expected (without the file name, which the caller adds).
/// Ignored keys add to c->warnings.
Status ReadConfigKeys(const YAML::Node& root, RunConfig* c);

}  // namespace scdino::run
