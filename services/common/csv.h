// CSV as RFC 4180 writes it, the one reader and writer of scdino's CSV
// files: the user's index (path,label), the features' index.csv, a packed
// set's index.csv and the evaluation's tables. A field holding a comma, a
// quote or a line break is quoted, its quotes doubled; a quoted field may
// span lines. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace scdino {

/// `field` as a CSV field: as it is, or quoted when it must be.
std::string CsvField(const std::string& field);

/// The fields of the record starting at `*pos` in `text`; `*pos` moves past
/// its line break ("\n" or "\r\n"). False when a quote is left open at the
/// end of the text.
bool NextCsvRecord(const std::string& text, size_t* pos, std::vector<std::string>* fields);

}  // namespace scdino
