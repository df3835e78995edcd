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

/// Merges command-line settings (`--set KEY=VALUE`) into a parsed YAML
/// document, each as if the file gave it: KEY is a key's full path (its
/// last part may be scDINO's spelling), VALUE is YAML; a spelling of the
/// same key in the document gives way to it. An unknown key (naming the
/// known keys of its section), a setting without `=` and a value of the
/// wrong type or range are refused, InvalidArgument starting
/// "--set KEY=VALUE: ", and `root` is then unchanged.
Status MergeSettings(const std::vector<std::string>& settings, YAML::Node* root);

/// ParseRunConfig and LoadRunConfig (config/config.h) with a service's
/// settings (`--set KEY=VALUE`) merged in first (MergeSettings). The
/// config's source_text is then the merged document under a first line
/// naming the file and the settings, so that a checkpoint records what
/// the run was given; errors start with that line's text.
StatusOr<RunConfig> ParseRunConfig(const std::string& yaml_text, const std::string& origin,
                                   const std::vector<std::string>& settings);
StatusOr<RunConfig> LoadRunConfig(const std::string& path, const std::vector<std::string>& settings);

}  // namespace scdino::run
