// Packed data sets: a data set's images in a few large shard files, so that
// an epoch opens a handful of files and reads them in large sequential
// blocks instead of opening every small TIFF on a parallel file system.
//
// Layout of a packed set's directory (docs/data.md#packed-data-sets):
//   pack.json        what the set is: classes, channel count and dtype,
//                    label depth, block and shard sizes, the pack's seed,
//                    its fingerprint, and each shard's size, CRC-32 and
//                    SHA-256
//   index.csv        one row per image, sorted by its path in the source:
//                    path,label,class,shard,offset,bytes,crc32,height,width,
//                    channels,dtype,position
//   shard-NNNNN.tar  POSIX tar in WebDataset's convention: per image a
//                    member <key>.npy (the raw H x W x C array, as the source
//                    file decodes, before any channel selection) and
//                    <key>.cls (the class index as text); key = the image's
//                    position in the pack order, 9 digits
// Images are stored in a seeded permutation of the sorted paths (the pack
// order), so a block of consecutive images mixes the classes.
//
// A path `<set>/<relative path in the source>` names an image of the set
// wherever a file path is taken (LoadImage), so features, statistics and
// attention maps work on a packed set as on its folders.
// Thread-safe: a PackedSet is immutable after Open; reads use pread.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/image_io.h"
#include "data/sampler.h"

namespace scdino::data {

/// Where one image lives.
struct PackedEntry {
  int64_t shard = 0;
  int64_t offset = 0;  ///< of the .npy member's data in the shard file
  int64_t bytes = 0;   ///< of that .npy data
  uint32_t crc32 = 0;  ///< of those bytes (zlib's CRC-32, as Python's zlib.crc32)
  int64_t position = 0;  ///< in the pack order
  std::array<int64_t, 3> shape{0, 0, 0};  ///< H, W, C
};

struct ShardInfo {
  std::string file;  ///< relative to the set
  int64_t samples = 0;
  int64_t bytes = 0;
  uint32_t crc32 = 0;  ///< of the whole file
  std::string sha256;  ///< of the whole file, hex ("" in packs of older versions)
};

class PackedSet {
 public:
  /// Reads `dir`/pack.json and index.csv and checks that every shard is
  /// there with its recorded size. Errors name the file and what is wrong
  /// (a shard of another set or cut short: its size against pack.json's).
  /// `logical_root` (default `dir`): the root its image paths are named
  /// under, for a copy (node-local staging) read in place of the set at
  /// `logical_root`, so that paths, features and fingerprints stay those of
  /// the shared set.
  static StatusOr<std::shared_ptr<const PackedSet>> Open(const std::string& dir, const std::string& logical_root = "");
  /// Open, once per process and directory: every user of a set shares its
  /// index and open shards. With `files_dir`: the set at `dir` is read from
  /// its copy there from now on (by every later Shared, PackedSetOf and
  /// LoadImage of `dir`).
  static StatusOr<std::shared_ptr<const PackedSet>> Shared(const std::string& dir, const std::string& files_dir = "");

  /// root = the set's directory; entry paths are root/<source path>.
  const Dataset& dataset() const { return dataset_; }
  const std::vector<PackedEntry>& entries() const { return entries_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  /// Where the shards are read from (the set's directory, or its copy).
  const std::string& files_dir() const { return files_dir_; }
  std::string ShardPath(int64_t shard) const;
  /// The index of the image at `relative_path` in the source, or -1.
  int64_t IndexOf(const std::string& relative_path) const {
    auto it = by_path_.find(relative_path);
    return it == by_path_.end() ? -1 : it->second;
  }
  int64_t index_bytes() const { return index_bytes_; }
  uint32_t index_crc32() const { return index_crc32_; }
  /// Dataset indices in pack order (position -> index).
  const std::vector<int64_t>& pack_order() const { return pack_order_; }
  int64_t block_samples() const { return block_samples_; }
  int64_t channels() const { return channels_; }
  int64_t folder_depth_for_labels() const { return depth_; }
  /// Of the source's paths and labels: equal for the same data set packed
  /// with other shard sizes or seeds.
  const std::string& fingerprint() const { return fingerprint_; }
  /// Of pack.json: equal for byte-identical sets (a staged copy).
  const std::string& content_fingerprint() const { return content_fingerprint_; }
  int64_t total_bytes() const;

  /// One image, read with one pread and checked against its CRC. DataLoss
  /// names the shard, the offset and the image's path.
  StatusOr<RawImage> Read(int64_t index) const;
  /// The bytes of block `block` (images at pack positions block x
  /// block_samples() on) with one read; DecodeFromBlock takes images out.
  StatusOr<std::shared_ptr<const std::string>> ReadBlock(int64_t block) const;
  StatusOr<RawImage> DecodeFromBlock(int64_t index, const std::string& block_bytes, int64_t block) const;
  /// Asks the kernel to read block `block` ahead (posix_fadvise WILLNEED):
  /// the disk works while the loader decodes.
  void WillNeed(int64_t block) const;
  /// The byte range [begin, end) of a block in its shard.
  std::pair<int64_t, int64_t> BlockRange(int64_t block) const;
  int64_t blocks() const { return (static_cast<int64_t>(pack_order_.size()) + block_samples_ - 1) / block_samples_; }

  ~PackedSet();

 private:
  PackedSet() = default;
  StatusOr<RawImage> Decode(int64_t index, const char* data) const;
  /// The shard's descriptor, opened when first asked for.
  StatusOr<int> Fd(int64_t shard) const;

  Dataset dataset_;
  std::string files_dir_;
  std::vector<PackedEntry> entries_;
  std::vector<ShardInfo> shards_;
  std::vector<int64_t> pack_order_;
  std::unordered_map<std::string, int64_t> by_path_;
  mutable std::mutex fd_mu_;
  mutable std::vector<int> fds_;
  int64_t block_samples_ = 1, channels_ = 0, depth_ = 0, index_bytes_ = 0;
  uint32_t index_crc32_ = 0;
  std::string fingerprint_, content_fingerprint_;
};

/// `set`'s data set, read from `set` by index (Dataset::packed).
Dataset DatasetOf(std::shared_ptr<const PackedSet> set);

/// Sets `sampler` to a block shuffle of `set` in its pack order: its
/// blocks, windows of `shuffle_buffer` images (rounded down to whole
/// blocks, at least one).
void UseBlockShuffle(const PackedSet& set, int64_t shuffle_buffer, SamplerOptions* sampler);

/// True when `dir` holds a packed set (a pack.json).
bool IsPackedSet(const std::string& dir);

/// The packed set a folder source's `dir` holds, or null when it holds
/// none (OpenDataset then walks the folder): its node-local copy under
/// `stage_dir` when one is staged and verified there (StagedCopy), with a
/// log line; the shared copy otherwise, with a warning. InvalidArgument
/// when it was packed with labels at another folder depth.
StatusOr<std::shared_ptr<const PackedSet>> OpenPackedSet(const DataSource& source);

/// The packed set that `path` (`<set>/<source path>`) names an image of,
/// opened once per process; nullptr when no folder above `path` is one; the
/// error opening it (a shard cut short, an index not the pack's) when one is.
StatusOr<std::shared_ptr<const PackedSet>> PackedSetOf(const std::string& path);

/// How many times this process looked a packed image up by its path
/// (PackedSetOf, ReadPackedImage, LoadImage): the folders above the path
/// probed, the set found, the path hashed. A data set's reader reads by
/// index (ReadEntry) and never does (tests count).
int64_t PackedPathLookups();

/// The image `path` names in its packed set (PackedSetOf); NotFound when
/// it names none.
StatusOr<RawImage> ReadPackedImage(const std::string& path);

/// The fingerprint a packed set records for `d`: its paths relative to its
/// root and their class names.
std::string PackFingerprint(const Dataset& d);

struct PackOptions {
  std::string out;             ///< the set's directory
  int64_t shard_mb = 256;      ///< about this many MiB per shard
  int64_t shard_images = 0;    ///< images per shard (whole blocks); 0: from shard_mb
  int64_t block_samples = 256; ///< images per read block (a shard holds whole blocks)
  uint64_t seed = 0;           ///< of the pack order
  int64_t rank = 0, world_size = 1;  ///< shards s with s % world_size == rank are this process's
  int64_t folder_depth_for_labels = 0;
  std::function<bool()> should_stop;
  std::function<void(const std::string&)> log;
  /// (images packed, images this process packs), after each image.
  std::function<void(int64_t, int64_t)> on_progress;
};

struct PackReport {
  int64_t shards_written = 0, shards_reused = 0, shards_of_others = 0;
  int64_t images = 0, bytes = 0;
  bool finished = false;  ///< this process wrote pack.json (every shard was there)
};

/// Packs `d` (read with ReadImage, every channel) into options.out: this
/// process's shards, each written to a temporary, checked and renamed, with a
/// manifest beside it (shard-NNNNN.json); a shard whose manifest names this
/// plan is kept (a rerun resumes). The process that finds every shard's
/// manifest writes index.csv, then pack.json (last: a set without it is not
/// a set). Errors: mixed channel counts or dtypes (naming the file and the
/// first image's), an unreadable image, a full disk (nothing half-written
/// left: no manifest, no pack.json), an out directory holding another set.
StatusOr<PackReport> PackDataset(const Dataset& d, const PackOptions& options);

struct StageReport {
  std::string dir;   ///< the staged copy
  bool reused = false;
  int64_t bytes = 0;
  double seconds = 0;
  std::vector<std::string> evicted;  ///< older copies removed (keep)
};

/// Copies a packed set into `<root>/<content fingerprint>` (node-local
/// storage) after checking free space there, verifying each shard's size,
/// CRC-32 and SHA-256 (pack.json's) while copying. The root and the copy's
/// directory are created 0700, or must already be directories of this user
/// with no permission for others (FailedPrecondition naming the path, the
/// owner and mode found, and what was expected; nothing in them touched).
/// A verified copy is reused while StagedCopy finds it unchanged. With
/// `keep` > 0, the copies under `root` beyond the newest `keep` (by last
/// use) are removed. FailedPrecondition when the space is short (naming both
/// figures) or pack.json has no SHA-256 (an older pack), DataLoss when a
/// shard does not match, Aborted when `should_stop` says so (asked every 8
/// MiB); nothing unverified is marked staged. `on_progress` gets (bytes
/// copied, bytes to copy) every 8 MiB.
StatusOr<StageReport> StagePackedSet(const PackedSet& set, const std::string& root,
                                     const std::function<bool()>& should_stop = {}, int64_t keep = 0,
                                     const std::function<void(int64_t, int64_t)>& on_progress = {});

/// The verified staged copy of `set` under `root`; "" when there is none.
/// Reuse trusts what staging verified: the copy's shards are proven
/// unchanged since (regular files of this user, one link, in this user's
/// 0700 directories, with the inode, size and times the .staged record
/// holds; only the owner or root can change them, and any change moves the
/// ctime, which no one sets). An error, naming the path and what was
/// found, when the root, the copy or a shard is not this user's, or a
/// shard changed.
StatusOr<std::string> StagedCopy(const PackedSet& set, const std::string& root);

}  // namespace scdino::data
