// The node_exporter textfile writer (common/prom_text.h): families, label
// values escaped as the exposition format asks, exact numbers; and the file
// written only where a textfile directory is.
#include "common/prom_text.h"

#include <gtest/gtest.h>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino {
namespace {

TEST(PromText, FamiliesSamplesAndEscapedLabels) {
  PromText p;
  p.Gauge("scdino_x_bytes", "Bytes of x.");
  p.Sample("scdino_x_bytes", {{"node", "n\"1\\\n"}, {"job", "7"}}, 1048576000);
  p.Sample("scdino_x_bytes", {}, 0.1);
  EXPECT_EQ(p.str(),
            "# HELP scdino_x_bytes Bytes of x.\n# TYPE scdino_x_bytes gauge\n"
            "scdino_x_bytes{node=\"n\\\"1\\\\\\n\",job=\"7\"} 1048576000\n"
            "scdino_x_bytes 0.10000000000000001\n");
}

TEST(PromText, WrittenOnlyWhereATextfileDirectoryIs) {
  scdino::testing::ScratchDir dir;
  WriteTextfile("", "a.prom", "x 1\n", "test");
  WriteTextfile(dir.path(), "a.prom", "x 1\n", "test");
  EXPECT_EQ(*ReadFile(dir.file("a.prom")), "x 1\n");
  // A directory that cannot be one (a file is there): a warning, no error.
  ::testing::internal::CaptureStderr();
  WriteTextfile(dir.file("a.prom"), "b.prom", "x 1\n", "scdino-test");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("scdino-test: warning: no node_exporter textfile: "), std::string::npos) << err;
}

}  // namespace
}  // namespace scdino
