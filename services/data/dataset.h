// Data-set indexing: which files are images of which class. Layouts: class
// folders (ROOT/<class>/<image>), deeper trees labelled at a chosen depth
// (scDINO's folder_depth_for_labels), and an index CSV (path,label). Class
// indices follow the sorted class names, so the mapping is stable.
// Functions of the file system and their options; thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/image_io.h"

namespace scdino::data {

class PackedSet;

enum class BadImagePolicy {
  kFail,  ///< stop with the file and the reason
  kSkip,  ///< count it, log its path once, leave it out
};

struct DatasetEntry {
  std::string path;
  int64_t label = -1;
};

struct Dataset {
  std::string root;
  std::vector<std::string> classes;  ///< sorted; index = label
  std::vector<DatasetEntry> entries; ///< sorted by path
  std::vector<std::string> skipped;  ///< files left out under kSkip, with the reason
  /// The packed set the entries are read from, by their position (its
  /// index order), or null: files. ReadEntry and LoadEntry use it.
  std::shared_ptr<const PackedSet> packed;
};

/// How many times this process has indexed a data set (IndexFolder,
/// IndexCsv, PackedSet::Open): a process indexes its data once and hands
/// the index on (tests and the benchmarks count).
int64_t IndexPasses();
void CountIndexPass();

struct IndexOptions {
  /// 0: the folder holding an image names its class; 1: the folder above; ...
  int64_t folder_depth_for_labels = 0;
  BadImagePolicy on_bad_image = BadImagePolicy::kFail;
  /// Images found so far, after each (a large tree takes minutes to walk).
  std::function<void(int64_t)> on_progress;
};

/// Walks `root` ('.' files ignored; other files, empty class folders: bad input
/// under the policy). A flat folder of images is one class named after it.
StatusOr<Dataset> IndexFolder(const std::string& root, const IndexOptions& o = {});

/// Reads a CSV of `path,label` rows (a header row `path,label` is allowed);
/// relative paths are taken from the CSV's directory.
StatusOr<Dataset> IndexCsv(const std::string& csv_path);

/// Where a data set is and how it is indexed: what a service's config says
/// of its data (run::DataSourceOf), handed to the data layer once.
struct DataSource {
  enum class Kind { kSynthetic, kCsv, kFolder };
  Kind kind = Kind::kFolder;
  std::string index_csv;  ///< kCsv: the index CSV (IndexCsv)
  std::string dir;        ///< kFolder: a folder tree (IndexFolder) or a packed set (data/packed.h)
  int64_t folder_depth_for_labels = 0;
  BadImagePolicy on_bad_image = BadImagePolicy::kFail;
  /// Where node-local copies of packed sets are staged ($SCDINO_STAGE_DIR
  /// of deploy/slurm); "": none.
  std::string stage_dir;
};

/// The indexed data set of `source`: its CSV, its packed set (read by
/// index, from its verified node-local copy when one is staged:
/// OpenPackedSet), or its folder tree, whose walk reports its progress
/// with lines on `progress` (null: none); an empty one for the synthetic
/// source (its images are made in memory).
StatusOr<Dataset> OpenDataset(const DataSource& source, std::ostream* progress);

/// Per-image preprocessing before augmentation (scDINO's): channel
/// selection, optional center crop, per-channel min-max to [0, 1].
struct ImagePrep {
  std::vector<int64_t> channels;  ///< indices into the image's channels, in order; empty: all
  int64_t center_crop = 0;        ///< square side in pixels; 0: none
};

/// H x W x C raw image -> C' x H' x W' float32 in [0, 1]. A constant channel
/// becomes 0. Errors name `path`, the channel count and the selection.
StatusOr<torch::Tensor> PrepareImage(const torch::Tensor& hwc, const ImagePrep& prep, const std::string& path);

/// Reads and prepares one image; `<packed set>/<source path>` reads it from
/// a packed set (data/packed.h), found by probing the folders above it: for
/// a path a user names. A service reading a data set's images reads them
/// by index (LoadEntry).
StatusOr<torch::Tensor> LoadImage(const std::string& path, const ImagePrep& prep);

/// Entry `i` of `d`, raw: from d.packed by its index (one pread), else its file.
StatusOr<RawImage> ReadEntry(const Dataset& d, size_t i);
/// Entry `i` of `d`, read (ReadEntry) and prepared.
StatusOr<torch::Tensor> LoadEntry(const Dataset& d, size_t i, const ImagePrep& prep);

/// The first readable of a data set's first 16 images, read once for every
/// check made of it before a run starts (its channels against the
/// selection, the size the recipe is derived from).
struct FirstImage {
  std::string path;          ///< "" when none of them reads (or `d` is empty)
  int64_t raw_channels = 0;  ///< its channels as stored
  Status prepared;           ///< PrepareImage's refusal of it (the selection, the crop); OK when prepared
  int64_t channels = 0, height = 0, width = 0;  ///< after `prep`, when prepared
  Status unread;             ///< the first read failure before it; OK when none failed
};
FirstImage ProbeFirstImage(const Dataset& d, const ImagePrep& prep);

}  // namespace scdino::data
