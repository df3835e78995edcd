// The one CSV reader and writer (common/csv.h) on what the files it serves
// hold: quoted fields with commas, quotes and line breaks (a class name, a
// path), CRLF line ends, and a quote left open.
#include "common/csv.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace scdino {
namespace {

TEST(Csv, WhatItWritesItReadsBackFieldForField) {
  const std::vector<std::string> fields = {"plain", "a,b", "say \"hi\"", "two\nlines", "", "x"};
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + CsvField(fields[i]);
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  const std::string text = line + "\r\nnext,row\n";
  size_t pos = 0;
  std::vector<std::string> got;
  ASSERT_TRUE(NextCsvRecord(text, &pos, &got));
  EXPECT_EQ(got, fields);
  ASSERT_TRUE(NextCsvRecord(text, &pos, &got));
  EXPECT_EQ(got, (std::vector<std::string>{"next", "row"}));
  EXPECT_EQ(pos, text.size());
}

TEST(Csv, AQuoteLeftOpenIsSaid) {
  size_t pos = 0;
  std::vector<std::string> got;
  EXPECT_FALSE(NextCsvRecord("a,\"b,c\n", &pos, &got));
}

}  // namespace
}  // namespace scdino
