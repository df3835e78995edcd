#include "data/split.h"

#include <gtest/gtest.h>

namespace scdino::data {
namespace {

Dataset Make(const std::vector<std::pair<std::string, int64_t>>& files, std::vector<std::string> classes) {
  Dataset d;
  d.root = "/data";
  d.classes = std::move(classes);
  for (const auto& [p, l] : files) d.entries.push_back({"/data/" + p, l});
  return d;
}

TEST(AssignSplits, FractionIsPerClassSeededAndKeepsATestImage) {
  std::vector<std::pair<std::string, int64_t>> files;
  for (int i = 0; i < 10; ++i) files.push_back({"a/" + std::to_string(i), 0});
  for (int i = 0; i < 3; ++i) files.push_back({"b/" + std::to_string(i), 1});
  auto d = Make(files, {"a", "b"});
  auto s = AssignSplits(d, {0.8, 5, "", ""});
  ASSERT_TRUE(s.ok());
  int train_a = 0, train_b = 0;
  for (size_t i = 0; i < 10; ++i) train_a += (*s)[i] == Split::kTrain;
  for (size_t i = 10; i < 13; ++i) train_b += (*s)[i] == Split::kTrain;
  EXPECT_EQ(train_a, 8);
  EXPECT_EQ(train_b, 2);  // round(2.4)
  EXPECT_EQ(*AssignSplits(d, {0.8, 5, "", ""}), *s);
  EXPECT_NE(*AssignSplits(d, {0.8, 6, "", ""}), *s);
}

TEST(AssignSplits, FoldersDecideAndAStrayImageIsNamed) {
  auto d = Make({{"Training/a/1.tif", 0}, {"Test/a/2.tif", 0}}, {"a"});
  auto s = AssignSplits(d, {0.8, 0, "Training", "Test"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0], Split::kTrain);
  EXPECT_EQ((*s)[1], Split::kTest);
  d.entries.push_back({"/data/Validation/a/3.tif", 0});
  auto bad = AssignSplits(d, {0.8, 0, "Training", "Test"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/data/Validation/a/3.tif"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace scdino::data
