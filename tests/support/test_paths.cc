#include "support/test_paths.h"

namespace scdino::testing {

// Both from this file's compile line (tests/CMakeLists.txt), and nowhere else.
const char* SourceDir() { return SCDINO_SOURCE_DIR; }
const char* BinaryDir() { return SCDINO_BINARY_DIR; }

}  // namespace scdino::testing
