// Where the checkout and the build tree are, for the test suites. The two
// paths are compiled into one small translation unit (test_paths.cc), never
// into a suite's compile line: a clean clone elsewhere then hits the
// compiler cache for every other translation unit (docs/performance.md).
#pragma once

namespace scdino::testing {

/// The checkout's top folder (absolute).
const char* SourceDir();
/// The build tree's top folder (absolute).
const char* BinaryDir();

}  // namespace scdino::testing
