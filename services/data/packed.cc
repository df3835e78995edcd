#include "data/packed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/array_bytes.h"
#include "common/csv.h"
#include "common/env.h"
#include "common/files.h"
#include "common/fingerprint.h"
#include "common/npy.h"
#include "data/packed_format.h"
#include "data/sampler.h"

namespace scdino::data {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pack_format;

namespace {
// The largest .npy header a member may have: NumPy's version 1 (a 2-byte
// length), with its magic and version.
constexpr uint64_t kMaxNpyHeader = 10 + 65535;
}  // namespace

std::string PackFingerprint(const Dataset& d) {
  std::string key = "scdino-pack|" + std::to_string(d.entries.size()) + "\n";
  for (const auto& e : d.entries) key += Relative(d, e.path) + "\t" + d.classes[e.label] + "\n";
  return Fingerprint(key);
}

void UseBlockShuffle(const PackedSet& set, int64_t shuffle_buffer, SamplerOptions* sampler) {
  sampler->block = set.block_samples();
  sampler->window_blocks = std::max<int64_t>(1, shuffle_buffer / sampler->block);
  sampler->storage_order = std::make_shared<const std::vector<int64_t>>(set.pack_order());
}

bool IsPackedSet(const std::string& dir) { return !dir.empty() && FileExists(dir + "/pack.json"); }

StatusOr<std::shared_ptr<const PackedSet>> OpenPackedSet(const DataSource& source) {
  if (source.kind != DataSource::Kind::kFolder || !IsPackedSet(source.dir)) return std::shared_ptr<const PackedSet>();
  auto set = PackedSet::Shared(source.dir);
  if (!set.ok()) return set.status();
  if ((*set)->folder_depth_for_labels() != source.folder_depth_for_labels) {
    return Status::InvalidArgument(source.dir + " was packed with labels at folder_depth_for_labels " +
                                   std::to_string((*set)->folder_depth_for_labels()) + ", the config says " +
                                   std::to_string(source.folder_depth_for_labels) + " (meta.folder_depth_for_labels); "
                                   "pack it again with this config");
  }
  // A node-local copy staged by deploy/slurm (scdino-pack --stage), when it
  // is there and verified: read in place of the shared copy, under the
  // shared copy's paths (features, fingerprints and logs name those).
  if (source.stage_dir.empty()) return set;
  static bool said = false;
  const auto staged = StagedCopy(**set, source.stage_dir);
  if (staged.ok() && !staged->empty()) {
    auto local = PackedSet::Shared(source.dir, *staged);
    if (local.ok() && (*local)->content_fingerprint() == (*set)->content_fingerprint()) {
      if (!said) std::cerr << "scdino: reading " << source.dir << " from its copy on this node, " << *staged << "\n";
      said = true;
      return local;
    }
  }
  if (!said) {
    std::cerr << "scdino: warning: no verified copy of " << source.dir << " under SCDINO_STAGE_DIR="
              << source.stage_dir << " on " << ThisHostName()
              << (staged.ok() ? std::string() : " (" + staged.status().message() + ")") << "; reading the shared copy\n";
  }
  said = true;
  return set;
}

PackedSet::~PackedSet() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int64_t PackedSet::total_bytes() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s.bytes;
  return n;
}

std::string PackedSet::ShardPath(int64_t shard) const { return files_dir_ + "/" + shards_[shard].file; }

StatusOr<int> PackedSet::Fd(int64_t shard) const {
  std::lock_guard<std::mutex> l(fd_mu_);
  if (fds_[shard] >= 0) return fds_[shard];
  const int fd = ::open(ShardPath(shard).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status::FailedPrecondition(ShardPath(shard) + ": cannot open: " + std::strerror(errno) +
                                      (errno == EMFILE ? " (raise the open-file limit, ulimit -n, or pack with larger --shard-mb)" : ""));
  }
  fds_[shard] = fd;
  return fd;
}

namespace {

// Shards are opened as they are first read, each kept open: a set of many
// shards needs as many descriptors, so the soft limit is raised to the hard
// one once.
void RaiseOpenFileLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct rlimit r {};
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
      r.rlim_cur = r.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &r);
    }
  });
}

// pread until `n` bytes are in or the file ends; EINTR (a signal such as
// Slurm's USR1 during a read on a network file system) is retried.
ssize_t PreadFully(int fd, char* buf, size_t n, int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, buf + done, n - done, offset + static_cast<int64_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return static_cast<ssize_t>(done);
}

// What pack.json says.
struct Manifest {
  std::vector<std::string> classes;
  int64_t block_samples = 0, channels = 0, depth = 0, samples = 0, index_bytes = 0;
  uint32_t index_crc32 = 0;
  std::string fingerprint;
  std::vector<ShardInfo> shards;
};

// pack.json: its types checked before any value is taken (json's value()
// throws on a key of another type: found by fuzzing, "format": {}), shard
// names as scdino writes them (a name from another writer never reaches
// outside the set's directory: "../", "/"), and counts in their bounds.
StatusOr<Manifest> ParseManifest(const std::string& path, const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() || j["format"] != "scdino-pack") {
    return Status::DataLoss(path + ": not a packed data set's manifest (expected JSON with \"format\": \"scdino-pack\")");
  }
  const json version = j.contains("version") ? j["version"] : json();
  if (!version.is_number_integer() || version.get<int64_t>() != kFormatVersion) {
    return Status::FailedPrecondition(path + ": format version " + version.dump() + ", this scdino reads version " +
                                      std::to_string(kFormatVersion) + "; pack it again");
  }
  Manifest m;
  try {
    m.classes = j.at("classes").get<std::vector<std::string>>();
    m.block_samples = j.at("block_samples").get<int64_t>();
    m.channels = j.at("channels").get<int64_t>();
    m.depth = j.at("folder_depth_for_labels").get<int64_t>();
    m.fingerprint = j.at("fingerprint").get<std::string>();
    m.samples = j.at("samples").get<int64_t>();
    m.index_bytes = j.at("index").at("bytes").get<int64_t>();
    m.index_crc32 = ParseHex32(j.at("index").at("crc32").get<std::string>());
    for (const auto& s : j.at("shards")) {
      m.shards.push_back({s.at("file").get<std::string>(), s.at("samples").get<int64_t>(), s.at("bytes").get<int64_t>(),
                          ParseHex32(s.at("crc32").get<std::string>()),
                          s.contains("sha256") ? s.at("sha256").get<std::string>() : std::string()});
    }
  } catch (const std::exception& e) {
    return Status::DataLoss(path + ": " + e.what());
  }
  for (const auto& s : m.shards) {
    if (!IsShardName(s.file)) {
      return Status::DataLoss(path + ": shard file '" + s.file + "': expected a name shard-NNNNN.tar");
    }
    if (s.bytes < 0) return Status::DataLoss(path + ": shard " + s.file + ": bytes " + std::to_string(s.bytes));
  }
  if (m.block_samples < 1 || m.block_samples > (int64_t{1} << 32)) {
    return Status::DataLoss(path + ": block_samples is " + std::to_string(m.block_samples) + ", expected 1 to 2^32");
  }
  if (m.samples < 1) return Status::DataLoss(path + ": samples is " + std::to_string(m.samples) + ", expected >= 1");
  return m;
}

// Every shard there, with the size pack.json gives it (opened when first read).
Status CheckShardFiles(const std::string& dir, const std::string& manifest_path, const std::vector<ShardInfo>& shards) {
  for (const auto& s : shards) {
    const std::string path = dir + "/" + s.file;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return Status::NotFound(path + ": shard of " + manifest_path + " is missing or unreadable: " + ec.message());
    if (static_cast<int64_t>(size) != s.bytes) {
      return Status::DataLoss(path + ": " + std::to_string(size) + " bytes, " + manifest_path + " says " +
                              std::to_string(s.bytes) + ": cut short, or a shard of another packed set; pack again");
    }
  }
  return Status::Ok();
}

// index.csv's rows, each checked against pack.json and its shard.
struct IndexRows {
  std::vector<PackedEntry> entries;
  std::vector<DatasetEntry> paths;  ///< the same rows, as a data set's entries under `root`
  std::vector<int64_t> pack_order;
  std::unordered_map<std::string, int64_t> by_path;
};

// One row of index.csv, its fields checked against pack.json and its
// shard. The member is an .npy of the image: its header (at most 64 KiB in
// NumPy's format) and at most 4 bytes a sample; a row whose bytes the shape
// cannot explain would have a reader allocate them from the shard.
StatusOr<std::pair<PackedEntry, int64_t>> ParseIndexRow(const std::vector<std::string>& f, const Manifest& m,
                                                        const std::function<Status(const std::string&, const std::string&,
                                                                                   const std::string&)>& bad) {
  if (f.size() != 12) return bad("row", "of " + std::to_string(f.size()) + " fields", "expected 12");
  PackedEntry e;
  int64_t label = 0;
  const char* names[] = {"path", "label", "class", "shard", "offset", "bytes", "crc32", "height", "width", "channels"};
  int field = 1;
  try {
    label = std::stoll(f[1]);
    field = 3, e.shard = std::stoll(f[3]);
    field = 4, e.offset = std::stoll(f[4]);
    field = 5, e.bytes = std::stoll(f[5]);
    field = 6, e.crc32 = ParseHex32(f[6]);
    field = 7, e.shape[0] = std::stoll(f[7]);
    field = 8, e.shape[1] = std::stoll(f[8]);
    field = 9, e.shape[2] = std::stoll(f[9]);
    field = 11, e.position = std::stoll(f[11]);
  } catch (const std::exception&) {
    return bad(field == 11 ? "position" : names[field], "'" + f[field] + "'", "not a number");
  }
  const auto classes = static_cast<int64_t>(m.classes.size());
  if (label < 0 || label >= classes) return bad("label", f[1], "expected 0.." + std::to_string(classes - 1));
  if (e.shard < 0 || e.shard >= static_cast<int64_t>(m.shards.size())) {
    return bad("shard", f[3], "pack.json has " + std::to_string(m.shards.size()) + " shards");
  }
  const int64_t shard_bytes = m.shards[static_cast<size_t>(e.shard)].bytes;
  if (e.bytes < 10 || e.bytes > shard_bytes || e.offset < 0 || e.offset > shard_bytes - e.bytes) {
    return bad("offset and bytes", f[4] + " and " + f[5], "outside the shard's " + std::to_string(shard_bytes) + " bytes");
  }
  const auto pixels = ArrayBytes({e.shape[0], e.shape[1], e.shape[2]}, 1);
  if (e.shape[0] < 1 || e.shape[1] < 1 || e.shape[2] < 1 || !pixels || *pixels > static_cast<uint64_t>(e.bytes)) {
    return bad("shape", f[7] + "x" + f[8] + "x" + f[9], "not an image of " + f[5] + " bytes");
  }
  if (static_cast<uint64_t>(e.bytes) > *pixels * 4 + kMaxNpyHeader) {
    return bad("bytes", f[5], "at most " + std::to_string(*pixels * 4 + kMaxNpyHeader) + " for a " + f[7] + "x" + f[8] +
                                  "x" + f[9] + " image");
  }
  if (e.position < 0 || e.position >= m.samples) {
    return bad("position", f[11], "expected 0.." + std::to_string(m.samples - 1));
  }
  return std::make_pair(e, label);
}

// index.csv, the pack's own (its size and CRC-32 as pack.json says), every
// row checked, every pack position taken once.
StatusOr<IndexRows> ParseIndex(const std::string& index_path, const std::string& manifest_path, const std::string& text,
                               const Manifest& m, const std::string& root) {
  // At least a line of ~20 bytes per image: a hostile count allocates nothing.
  if (m.samples > static_cast<int64_t>(text.size()) / 20 + 1) {
    return Status::DataLoss(manifest_path + ": samples is " + std::to_string(m.samples) + ", more than " + index_path +
                            " (" + std::to_string(text.size()) + " bytes) can list");
  }
  const uint32_t crc = Crc32(text.data(), text.size());
  if (static_cast<int64_t>(text.size()) != m.index_bytes || crc != m.index_crc32) {
    return Status::DataLoss(index_path + ": " + std::to_string(text.size()) + " bytes with CRC-32 " + Hex32(crc) + ", " +
                            manifest_path + " says " + std::to_string(m.index_bytes) + " with " + Hex32(m.index_crc32) +
                            ": not this pack's index; pack again");
  }
  IndexRows rows;
  rows.pack_order.assign(static_cast<size_t>(m.samples), -1);
  size_t pos = 0;
  int64_t lineno = 0;
  std::vector<std::string> f;
  while (pos < text.size()) {
    ++lineno;
    const bool closed = NextCsvRecord(text, &pos, &f);
    if (lineno == 1) continue;  // header
    if (f.size() == 1 && f[0].empty()) continue;
    auto bad = [&](const std::string& field, const std::string& value, const std::string& why) {
      return Status::DataLoss(index_path + ": line " + std::to_string(lineno) + ": " + field + " " + value + ": " + why);
    };
    if (!closed) return bad("row", "", "a quoted field is not closed");
    auto row = ParseIndexRow(f, m, bad);
    if (!row.ok()) return row.status();
    const auto& [e, label] = *row;
    if (rows.pack_order[static_cast<size_t>(e.position)] >= 0) return bad("position", f[11], "taken by an earlier row");
    const auto n = static_cast<int64_t>(rows.entries.size());
    rows.pack_order[static_cast<size_t>(e.position)] = n;
    rows.by_path.emplace(f[0], n);
    rows.paths.push_back({(fs::path(root) / f[0]).string(), label});
    rows.entries.push_back(e);
  }
  if (static_cast<int64_t>(rows.entries.size()) != m.samples) {
    return Status::DataLoss(index_path + ": " + std::to_string(rows.entries.size()) + " rows, pack.json says " +
                            std::to_string(m.samples) + " images");
  }
  return rows;
}

// A block is read with one pread: every image of it must lie in its shard,
// between its first image's start and its last image's end (an index from
// another writer, reordered, would be read outside the block).
Status CheckBlocks(const PackedSet& set, const std::string& index_path) {
  const auto n = static_cast<int64_t>(set.pack_order().size());
  for (int64_t b = 0; b < set.blocks(); ++b) {
    const int64_t first = b * set.block_samples(), last = std::min(first + set.block_samples(), n) - 1;
    const auto [begin, end] = set.BlockRange(b);
    const int64_t shard = set.entries()[static_cast<size_t>(set.pack_order()[static_cast<size_t>(first)])].shard;
    for (int64_t p = first; p <= last; ++p) {
      const auto i = static_cast<size_t>(set.pack_order()[static_cast<size_t>(p)]);
      const auto& e = set.entries()[i];
      if (e.shard != shard) {
        return Status::DataLoss(index_path + ": block " + std::to_string(b) + " spans two shards (block_samples " +
                                std::to_string(set.block_samples()) + "); pack again");
      }
      if (e.offset < begin || e.offset + e.bytes > end) {
        return Status::DataLoss(index_path + ": the image at position " + std::to_string(p) + " (" +
                                set.dataset().entries[i].path + ") lies at bytes " + std::to_string(e.offset) + " to " +
                                std::to_string(e.offset + e.bytes) + ", outside its block's " + std::to_string(begin) +
                                " to " + std::to_string(end) + ": not an index scdino wrote; pack again");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<const PackedSet>> PackedSet::Open(const std::string& dir, const std::string& logical_root) {
  RaiseOpenFileLimit();
  CountIndexPass();
  const std::string manifest_path = dir + "/pack.json", index_path = dir + "/index.csv";
  auto text = ReadFile(manifest_path);
  if (!text.ok()) return text.status();
  const std::string content_fingerprint = Fingerprint(*text);
  auto m = ParseManifest(manifest_path, *text);
  if (!m.ok()) return m.status();
  if (auto s = CheckShardFiles(dir, manifest_path, m->shards); !s.ok()) return s;
  auto index = ReadFile(index_path);
  if (!index.ok()) return index.status();
  const std::string root = logical_root.empty() ? dir : logical_root;
  auto rows = ParseIndex(index_path, manifest_path, *index, *m, root);
  if (!rows.ok()) return rows.status();

  std::shared_ptr<PackedSet> set(new PackedSet());
  set->files_dir_ = dir;
  set->dataset_.root = root;
  set->dataset_.classes = std::move(m->classes);
  set->dataset_.entries = std::move(rows->paths);
  set->block_samples_ = m->block_samples;
  set->channels_ = m->channels;
  set->depth_ = m->depth;
  set->fingerprint_ = m->fingerprint;
  set->content_fingerprint_ = content_fingerprint;
  set->index_bytes_ = m->index_bytes;
  set->index_crc32_ = m->index_crc32;
  set->shards_ = std::move(m->shards);
  set->fds_.assign(set->shards_.size(), -1);
  set->entries_ = std::move(rows->entries);
  set->pack_order_ = std::move(rows->pack_order);
  set->by_path_ = std::move(rows->by_path);
  if (auto s = CheckBlocks(*set, index_path); !s.ok()) return s;
  return std::shared_ptr<const PackedSet>(std::move(set));
}

StatusOr<RawImage> PackedSet::Decode(int64_t index, const char* data) const {
  const auto& e = entries_[index];
  const std::string where = ShardPath(e.shard) + " offset " + std::to_string(e.offset) + " (" + dataset_.entries[index].path + ")";
  if (Crc32(data, static_cast<size_t>(e.bytes)) != e.crc32) {
    return Status::DataLoss(where + ": CRC-32 mismatch: the shard is corrupt or was changed after packing; pack the "
                            "data set again");
  }
  auto layout = ParseNpyHeader(data, static_cast<size_t>(e.bytes), where);
  if (!layout.ok()) return layout.status();
  const int64_t h = e.shape[0], w = e.shape[1], c = e.shape[2];
  const char* pixels = data + layout->data_offset;
  const int64_t n = h * w * c;
  const int64_t have = e.bytes - static_cast<int64_t>(layout->data_offset);
  const std::string& descr = layout->descr;
  if (layout->shape != std::vector<int64_t>{h, w, c} || layout->fortran_order) {
    return Status::DataLoss(where + ": .npy member of shape " + ShapeText(layout->shape) +
                            " where the index says " + ShapeText({h, w, c}));
  }
  if (descr == "|u1" && have == n) {
    return torch::from_blob(const_cast<char*>(pixels), {h, w, c}, torch::kUInt8).clone();
  }
  if (descr == "<u2" && have == 2 * n) {
    auto out = torch::empty({h, w, c}, torch::kInt32);
    int32_t* o = out.data_ptr<int32_t>();
    const auto* p = reinterpret_cast<const unsigned char*>(pixels);
    for (int64_t i = 0; i < n; ++i) o[i] = p[2 * i] | (p[2 * i + 1] << 8);
    return out;
  }
  if (descr == "<f4" && have == 4 * n) {
    return torch::from_blob(const_cast<char*>(pixels), {h, w, c}, torch::kFloat32).clone();
  }
  return Status::DataLoss(where + ": .npy member of dtype '" + descr + "' with " + std::to_string(have) +
                          " data bytes does not match the index's " + ShapeText({h, w, c}));
}

StatusOr<RawImage> PackedSet::Read(int64_t index) const {
  const auto& e = entries_[index];
  auto fd = Fd(e.shard);
  if (!fd.ok()) return fd.status();
  std::string buf(static_cast<size_t>(e.bytes), '\0');
  const ssize_t got = PreadFully(*fd, buf.data(), buf.size(), e.offset);
  if (got != static_cast<ssize_t>(buf.size())) {
    return Status::DataLoss(ShardPath(e.shard) + " offset " + std::to_string(e.offset) + " (" +
                            dataset_.entries[index].path + "): read " + std::to_string(got) + " of " +
                            std::to_string(e.bytes) + " bytes" + (got < 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  return Decode(index, buf.data());
}

std::pair<int64_t, int64_t> PackedSet::BlockRange(int64_t block) const {
  const int64_t first = block * block_samples_;
  const int64_t last = std::min<int64_t>(first + block_samples_, pack_order_.size()) - 1;
  const auto& a = entries_[pack_order_[first]];
  const auto& b = entries_[pack_order_[last]];
  return {a.offset, b.offset + b.bytes};
}

StatusOr<std::shared_ptr<const std::string>> PackedSet::ReadBlock(int64_t block) const {
  const auto [begin, end] = BlockRange(block);
  const int64_t shard = entries_[pack_order_[block * block_samples_]].shard;
  auto fd = Fd(shard);
  if (!fd.ok()) return fd.status();
  auto buf = std::make_shared<std::string>(static_cast<size_t>(end - begin), '\0');
  const ssize_t got = PreadFully(*fd, buf->data(), buf->size(), begin);
  if (got != static_cast<ssize_t>(buf->size())) {
    return Status::DataLoss(ShardPath(shard) + ": reading block " + std::to_string(block) + " (bytes " +
                            std::to_string(begin) + " to " + std::to_string(end) + ") failed" +
                            (got < 0 ? std::string(": ") + std::strerror(errno) : ": the shard ends early"));
  }
  return std::shared_ptr<const std::string>(std::move(buf));
}

void PackedSet::WillNeed(int64_t block) const {
  if (block < 0 || block >= blocks()) return;
  const auto [begin, end] = BlockRange(block);
  auto fd = Fd(entries_[pack_order_[block * block_samples_]].shard);
  if (fd.ok()) ::posix_fadvise(*fd, begin, end - begin, POSIX_FADV_WILLNEED);
}

StatusOr<RawImage> PackedSet::DecodeFromBlock(int64_t index, const std::string& block_bytes, int64_t block) const {
  return Decode(index, block_bytes.data() + (entries_[index].offset - BlockRange(block).first));
}

StatusOr<std::shared_ptr<const PackedSet>> PackedSet::Shared(const std::string& dir, const std::string& files_dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const PackedSet>> open;
  const std::string key = fs::absolute(dir).lexically_normal().string();
  std::lock_guard<std::mutex> l(mu);
  auto it = open.find(key);
  if (it != open.end() && (files_dir.empty() || it->second->files_dir_ == files_dir)) return it->second;
  auto set = files_dir.empty() ? Open(dir) : Open(files_dir, dir);
  if (set.ok()) open[key] = *set;
  return set;
}

namespace {

// The packed set above `path` (or the error opening it) and `path` relative
// to it; a null set when no folder above `path` holds one.
std::atomic<int64_t> path_lookups{0};

StatusOr<std::pair<std::shared_ptr<const PackedSet>, std::string>> FindPackedSet(const std::string& path) {
  ++path_lookups;
  for (fs::path dir = fs::path(path).parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (IsPackedSet(dir.string())) {
      auto set = PackedSet::Shared(dir.string());
      if (!set.ok()) return set.status();
      return std::make_pair(*set, fs::path(path).lexically_relative(dir).generic_string());
    }
    if (dir == dir.root_path() || dir == dir.parent_path()) break;
  }
  return std::make_pair(std::shared_ptr<const PackedSet>(), std::string());
}

}  // namespace

Dataset DatasetOf(std::shared_ptr<const PackedSet> set) {
  Dataset d = set->dataset();
  d.packed = std::move(set);
  return d;
}

int64_t PackedPathLookups() { return path_lookups.load(); }

StatusOr<std::shared_ptr<const PackedSet>> PackedSetOf(const std::string& path) {
  auto found = FindPackedSet(path);
  if (!found.ok()) return found.status();
  return found->first;
}

StatusOr<RawImage> ReadPackedImage(const std::string& path) {
  auto found = FindPackedSet(path);
  if (!found.ok()) return found.status();
  const auto& [set, rel] = *found;
  if (!set) return Status::NotFound(path + ": no such image file, and no packed data set holds it");
  const int64_t index = set->IndexOf(rel);
  if (index < 0) return Status::NotFound(path + ": not an image of the packed data set " + set->dataset().root);
  return set->Read(index);
}

}  // namespace scdino::data
