#include "data/packed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "common/digest.h"
#include "common/files.h"
#include "common/fingerprint.h"
#include "common/npy.h"
#include "data/sampler.h"

namespace scdino::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormatVersion = 1;

uint32_t Crc32(const char* data, size_t n, uint32_t crc = 0) {
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(data), piece));
    data += piece;
    n -= piece;
  }
  return crc;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

std::string DtypeName(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kUInt8) return "uint8";
  if (t.scalar_type() == torch::kInt32) return "uint16";  // ReadImage widens 16-bit samples
  return "float32";
}

// The raw image as a .npy file: '|u1', '<u2' or '<f4', C order, H x W x C.
std::string EncodeNpy(const RawImage& hwc) {
  const std::string dtype = DtypeName(hwc);
  const std::string descr = dtype == "uint8" ? "|u1" : dtype == "uint16" ? "<u2" : "<f4";
  std::string out = NpyHeader(descr, hwc.sizes().vec());
  auto c = hwc.contiguous();
  if (dtype == "uint16") {
    auto u = c.to(torch::kInt32);
    const int32_t* p = u.data_ptr<int32_t>();
    const size_t off = out.size();
    out.resize(off + 2 * static_cast<size_t>(u.numel()));
    for (int64_t i = 0; i < u.numel(); ++i) {
      const uint16_t v = static_cast<uint16_t>(p[i]);
      out[off + 2 * i] = static_cast<char>(v & 0xff);
      out[off + 2 * i + 1] = static_cast<char>(v >> 8);
    }
  } else {
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * c.element_size()));
  }
  return out;
}

// One tar header block (POSIX ustar) for a regular file.
std::string TarHeader(const std::string& name, int64_t size) {
  std::string h(512, '\0');
  auto put = [&](size_t at, size_t width, const std::string& s) { std::memcpy(&h[at], s.data(), std::min(width, s.size())); };
  auto octal = [](int64_t v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*llo", digits, static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  put(0, 100, name);
  put(100, 8, octal(0644, 7));
  put(108, 8, octal(0, 7));
  put(116, 8, octal(0, 7));
  put(124, 12, octal(size, 11));
  put(136, 12, octal(0, 11));
  put(148, 8, "        ");
  h[156] = '0';
  put(257, 6, std::string("ustar\0", 6));
  put(263, 2, "00");
  unsigned sum = 0;
  for (unsigned char ch : h) sum += ch;
  put(148, 8, octal(sum, 6) + std::string("\0 ", 2));
  return h;
}

std::string Padding(int64_t size) { return std::string(static_cast<size_t>((512 - size % 512) % 512), '\0'); }

std::string ShardName(int64_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05lld", static_cast<long long>(s));
  return buf;
}

std::string Key(int64_t position) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%09lld", static_cast<long long>(position));
  return buf;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

uint32_t ParseHex32(const std::string& s) { return static_cast<uint32_t>(std::stoul(s, nullptr, 16)); }

// shard-NNNNN.tar (five digits or more), as PackDataset names shards.
bool IsShardName(const std::string& name) {
  const std::string head = "shard-", tail = ".tar";
  if (name.size() < head.size() + 5 + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return false;
  }
  for (size_t i = head.size(); i < name.size() - tail.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

// CSV fields: a field with a comma, quote or line break is quoted.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::string Relative(const Dataset& d, const std::string& path) {
  return fs::path(path).lexically_relative(d.root).generic_string();
}

// The pack order: a seeded permutation of the sorted entries.
std::vector<int64_t> PackOrder(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(MixSeed({seed, 0x9acdull}));
  for (int64_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[i], order[pick(rng)]);
  }
  return order;
}

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

}  // namespace

StatusOr<std::shared_ptr<const PackedSet>> PackedSet::Open(const std::string& dir, const std::string& logical_root) {
  RaiseOpenFileLimit();
  CountIndexPass();
  const std::string manifest_path = dir + "/pack.json";
  auto text = ReadFile(manifest_path);
  if (!text.ok()) return text.status();
  auto m = json::parse(*text, nullptr, false);
  if (!m.is_object() || m.value("format", "") != "scdino-pack") {
    return Status::DataLoss(manifest_path + ": not a packed data set's manifest (expected JSON with \"format\": \"scdino-pack\")");
  }
  if (m.value("version", 0) != kFormatVersion) {
    return Status::FailedPrecondition(manifest_path + ": format version " + std::to_string(m.value("version", 0)) +
                                      ", this scdino reads version " + std::to_string(kFormatVersion) + "; pack it again");
  }
  std::shared_ptr<PackedSet> set(new PackedSet());
  int64_t n_total = 0;
  try {
    set->files_dir_ = dir;
    set->dataset_.root = logical_root.empty() ? dir : logical_root;
    set->dataset_.classes = m.at("classes").get<std::vector<std::string>>();
    set->block_samples_ = m.at("block_samples").get<int64_t>();
    set->channels_ = m.at("channels").get<int64_t>();
    set->depth_ = m.at("folder_depth_for_labels").get<int64_t>();
    set->fingerprint_ = m.at("fingerprint").get<std::string>();
    n_total = m.at("samples").get<int64_t>();
    set->index_bytes_ = m.at("index").at("bytes").get<int64_t>();
    set->index_crc32_ = ParseHex32(m.at("index").at("crc32").get<std::string>());
    for (const auto& s : m.at("shards")) {
      set->shards_.push_back({s.at("file").get<std::string>(), s.at("samples").get<int64_t>(),
                              s.at("bytes").get<int64_t>(), ParseHex32(s.at("crc32").get<std::string>()),
                              s.contains("sha256") ? s.at("sha256").get<std::string>() : std::string()});
    }
  } catch (const std::exception& e) {
    return Status::DataLoss(manifest_path + ": " + e.what());
  }
  set->content_fingerprint_ = Fingerprint(*text);
  // Shard names as scdino writes them, nothing else: a name from another
  // writer never reaches outside the set's directory ("../", "/").
  for (const auto& s : set->shards_) {
    if (!IsShardName(s.file)) {
      return Status::DataLoss(manifest_path + ": shard file '" + s.file + "': expected a name shard-NNNNN.tar");
    }
    if (s.bytes < 0) return Status::DataLoss(manifest_path + ": shard " + s.file + ": bytes " + std::to_string(s.bytes));
  }
  if (set->block_samples_ < 1 || set->block_samples_ > (int64_t{1} << 32)) {
    return Status::DataLoss(manifest_path + ": block_samples is " + std::to_string(set->block_samples_) +
                            ", expected 1 to 2^32");
  }
  if (n_total < 1) return Status::DataLoss(manifest_path + ": samples is " + std::to_string(n_total) + ", expected >= 1");
  // Every shard, with the size pack.json gives it (opened when first read).
  for (const auto& s : set->shards_) {
    const std::string path = dir + "/" + s.file;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return Status::NotFound(path + ": shard of " + manifest_path + " is missing or unreadable: " + ec.message());
    if (static_cast<int64_t>(size) != s.bytes) {
      return Status::DataLoss(path + ": " + std::to_string(size) + " bytes, " + manifest_path + " says " +
                              std::to_string(s.bytes) + ": cut short, or a shard of another packed set; pack again");
    }
  }
  set->fds_.assign(set->shards_.size(), -1);
  const std::string index_path = dir + "/index.csv";
  auto index = ReadFile(index_path);
  if (!index.ok()) return index.status();
  // At least a line of ~20 bytes per image: a hostile count allocates nothing.
  if (n_total > static_cast<int64_t>(index->size()) / 20 + 1) {
    return Status::DataLoss(manifest_path + ": samples is " + std::to_string(n_total) + ", more than " + index_path +
                            " (" + std::to_string(index->size()) + " bytes) can list");
  }
  const uint32_t index_crc = Crc32(index->data(), index->size());
  if (static_cast<int64_t>(index->size()) != set->index_bytes_ || index_crc != set->index_crc32_) {
    return Status::DataLoss(index_path + ": " + std::to_string(index->size()) + " bytes with CRC-32 " + Hex32(index_crc) +
                            ", " + manifest_path + " says " + std::to_string(set->index_bytes_) + " with " +
                            Hex32(set->index_crc32_) + ": not this pack's index; pack again");
  }
  std::istringstream in(*index);
  std::string line;
  int64_t lineno = 0;
  set->pack_order_.assign(n_total, -1);
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1) continue;  // header
    if (line.empty()) continue;
    auto f = SplitCsvLine(line);
    auto bad = [&](const std::string& field, const std::string& value, const std::string& why) {
      return Status::DataLoss(index_path + ": line " + std::to_string(lineno) + ": " + field + " " + value + ": " + why);
    };
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
    const int64_t classes = static_cast<int64_t>(set->dataset_.classes.size());
    if (label < 0 || label >= classes) return bad("label", f[1], "expected 0.." + std::to_string(classes - 1));
    if (e.shard < 0 || e.shard >= static_cast<int64_t>(set->shards_.size())) {
      return bad("shard", f[3], "pack.json has " + std::to_string(set->shards_.size()) + " shards");
    }
    const int64_t shard_bytes = set->shards_[e.shard].bytes;
    if (e.bytes < 10 || e.bytes > shard_bytes || e.offset < 0 || e.offset > shard_bytes - e.bytes) {
      return bad("offset and bytes", f[4] + " and " + f[5], "outside the shard's " + std::to_string(shard_bytes) + " bytes");
    }
    // Each side at most the member's bytes, so the product cannot overflow.
    if (e.shape[0] < 1 || e.shape[1] < 1 || e.shape[2] < 1 || e.shape[0] > e.bytes || e.shape[1] > e.bytes ||
        e.shape[2] > e.bytes || e.shape[0] * e.shape[1] > e.bytes || e.shape[0] * e.shape[1] * e.shape[2] > e.bytes) {
      return bad("shape", f[7] + "x" + f[8] + "x" + f[9], "not an image of " + f[5] + " bytes");
    }
    if (e.position < 0 || e.position >= n_total) {
      return bad("position", f[11], "expected 0.." + std::to_string(n_total - 1));
    }
    if (set->pack_order_[e.position] >= 0) return bad("position", f[11], "taken by an earlier row");
    set->pack_order_[e.position] = static_cast<int64_t>(set->entries_.size());
    set->by_path_.emplace(f[0], static_cast<int64_t>(set->entries_.size()));
    set->dataset_.entries.push_back({(fs::path(set->dataset_.root) / f[0]).string(), label});
    set->entries_.push_back(e);
  }
  if (static_cast<int64_t>(set->entries_.size()) != n_total) {
    return Status::DataLoss(index_path + ": " + std::to_string(set->entries_.size()) + " rows, pack.json says " +
                            std::to_string(n_total) + " images");
  }
  // A block is read with one pread: every image of it must lie in its
  // shard, between its first image's start and its last image's end (an
  // index from another writer, reordered, would be read outside the block).
  for (int64_t b = 0; b < set->blocks(); ++b) {
    const int64_t first = b * set->block_samples_, last = std::min(first + set->block_samples_, n_total) - 1;
    const auto [begin, end] = set->BlockRange(b);
    const int64_t shard = set->entries_[set->pack_order_[first]].shard;
    for (int64_t p = first; p <= last; ++p) {
      const auto& e = set->entries_[set->pack_order_[p]];
      if (e.shard != shard) {
        return Status::DataLoss(index_path + ": block " + std::to_string(b) + " spans two shards (block_samples " +
                                std::to_string(set->block_samples_) + "); pack again");
      }
      if (e.offset < begin || e.offset + e.bytes > end) {
        return Status::DataLoss(index_path + ": the image at position " + std::to_string(p) + " (" +
                                set->dataset_.entries[set->pack_order_[p]].path + ") lies at bytes " +
                                std::to_string(e.offset) + " to " + std::to_string(e.offset + e.bytes) +
                                ", outside its block's " + std::to_string(begin) + " to " + std::to_string(end) +
                                ": not an index scdino wrote; pack again");
      }
    }
  }
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

// ----------------------------------------------------------------- packing

namespace {

struct Plan {
  std::vector<int64_t> order;  // pack order: position -> entry
  int64_t shard_samples = 0;
  int64_t shards = 0;
  std::string fingerprint;  // of the data set and the plan
};

json ShardManifest(const std::string& plan_fp, const ShardInfo& info, const json& rows) {
  return {{"plan", plan_fp}, {"file", info.file},          {"samples", info.samples}, {"bytes", info.bytes},
          {"crc32", Hex32(info.crc32)}, {"sha256", info.sha256}, {"rows", rows}};
}

// Writes shard `s` of the plan; its manifest rows are [entry, offset, bytes, crc, h, w, c, dtype].
StatusOr<json> WriteShard(const Dataset& d, const Plan& plan, int64_t s, const PackOptions& o,
                          std::string* first_kind, const std::function<void()>& packed_one) {
  const std::string name = ShardName(s) + ".tar";
  AtomicFile out(o.out + "/" + name);
  if (auto st = out.Create(); !st.ok()) return st;
  const int64_t first = s * plan.shard_samples;
  const int64_t last = std::min<int64_t>(first + plan.shard_samples, plan.order.size());
  json rows = json::array();
  int64_t offset = 0;
  uint32_t crc = 0;
  Sha256 sha;
  auto append = [&](const std::string& bytes) -> Status {
    crc = Crc32(bytes.data(), bytes.size(), crc);
    sha.Update(bytes.data(), bytes.size());
    offset += static_cast<int64_t>(bytes.size());
    return out.file()->Append(bytes);
  };
  for (int64_t pos = first; pos < last; ++pos) {
    if (o.should_stop && o.should_stop()) return Status::Aborted("stopped while packing " + name + " (not kept)");
    const int64_t idx = plan.order[pos];
    const std::string& path = d.entries[idx].path;
    auto img = ReadImage(path);
    if (!img.ok()) return img.status();
    const std::string kind = std::to_string(img->size(2)) + " channel(s) of " + DtypeName(*img);
    // "<kind>\t<path>" of the first image this process packed.
    if (first_kind->empty()) *first_kind = kind + "\t" + path;
    const auto tab = first_kind->find('\t');
    if (first_kind->compare(0, tab, kind) != 0) {
      return Status::InvalidArgument(path + ": has " + kind + ", but " + first_kind->substr(tab + 1) + " has " +
                                     first_kind->substr(0, tab) + ": a packed set holds one channel count and sample type");
    }
    const std::string npy = EncodeNpy(*img);
    const std::string key = Key(pos);
    if (auto st = append(TarHeader(key + ".npy", static_cast<int64_t>(npy.size()))); !st.ok()) return st;
    const int64_t data_at = offset;
    const uint32_t sample_crc = Crc32(npy.data(), npy.size());
    if (auto st = append(npy); !st.ok()) return st;
    if (auto st = append(Padding(static_cast<int64_t>(npy.size()))); !st.ok()) return st;
    const std::string cls = std::to_string(d.entries[idx].label);
    if (auto st = append(TarHeader(key + ".cls", static_cast<int64_t>(cls.size()))); !st.ok()) return st;
    if (auto st = append(cls + Padding(static_cast<int64_t>(cls.size()))); !st.ok()) return st;
    packed_one();
    rows.push_back({idx, data_at, static_cast<int64_t>(npy.size()), Hex32(sample_crc), img->size(0), img->size(1),
                    img->size(2), DtypeName(*img)});
  }
  if (auto st = append(std::string(1024, '\0')); !st.ok()) return st;  // the end-of-archive blocks
  if (auto st = out.Commit(); !st.ok()) return st;
  ShardInfo info{name, last - first, offset, crc, sha.HexDigest()};
  auto manifest = ShardManifest(plan.fingerprint, info, rows);
  if (auto st = WriteFileAtomic(o.out + "/" + ShardName(s) + ".json", manifest.dump()); !st.ok()) return st;
  return manifest;
}

// The manifest of shard `s` when it is complete for this plan.
std::optional<json> DoneShard(const Plan& plan, int64_t s, const PackOptions& o) {
  auto text = ReadFile(o.out + "/" + ShardName(s) + ".json");
  if (!text.ok()) return std::nullopt;
  auto j = json::parse(*text, nullptr, false);
  // A shard of an older scdino (no SHA-256) is packed again.
  if (!j.is_object() || j.value("plan", "") != plan.fingerprint || !j.contains("sha256")) return std::nullopt;
  std::error_code ec;
  const auto size = fs::file_size(o.out + "/" + j.value("file", ""), ec);
  if (ec || static_cast<int64_t>(size) != j.value("bytes", int64_t{-1})) return std::nullopt;
  return j;
}

Status WriteIndex(const Dataset& d, const Plan& plan, const std::vector<json>& manifests, const PackOptions& o,
                  const std::string& set_fp) {
  struct Row {
    int64_t shard, offset, bytes, h, w, c, position;
    std::string crc, dtype;
  };
  std::vector<Row> rows(d.entries.size());
  json shards = json::array();
  std::string dtype;
  int64_t channels = 0;
  for (size_t s = 0; s < manifests.size(); ++s) {
    const auto& m = manifests[s];
    shards.push_back({{"file", m["file"]},
                      {"samples", m["samples"]},
                      {"bytes", m["bytes"]},
                      {"crc32", m["crc32"]},
                      {"sha256", m["sha256"]}});
    int64_t pos = static_cast<int64_t>(s) * plan.shard_samples;
    for (const auto& r : m["rows"]) {
      const int64_t idx = r[0].get<int64_t>();
      rows[idx] = {static_cast<int64_t>(s), r[1].get<int64_t>(), r[2].get<int64_t>(), r[4].get<int64_t>(),
                   r[5].get<int64_t>(), r[6].get<int64_t>(), pos++, r[3].get<std::string>(), r[7].get<std::string>()};
      dtype = rows[idx].dtype;
      channels = rows[idx].c;
    }
  }
  std::string csv = "path,label,class,shard,offset,bytes,crc32,height,width,channels,dtype,position\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const auto& e = d.entries[i];
    csv += CsvField(Relative(d, e.path)) + "," + std::to_string(e.label) + "," + CsvField(d.classes[e.label]) + "," +
           std::to_string(r.shard) + "," + std::to_string(r.offset) + "," + std::to_string(r.bytes) + "," + r.crc +
           "," + std::to_string(r.h) + "," + std::to_string(r.w) + "," + std::to_string(r.c) + "," + r.dtype + "," +
           std::to_string(r.position) + "\n";
  }
  if (auto st = WriteFileAtomic(o.out + "/index.csv", csv); !st.ok()) return st;
  const json index = {{"bytes", static_cast<int64_t>(csv.size())}, {"crc32", Hex32(Crc32(csv.data(), csv.size()))}};
  const json manifest = {{"format", "scdino-pack"},
                         {"version", kFormatVersion},
                         {"samples", static_cast<int64_t>(d.entries.size())},
                         {"classes", d.classes},
                         {"channels", channels},
                         {"dtype", dtype},
                         {"folder_depth_for_labels", o.folder_depth_for_labels},
                         {"source", fs::absolute(d.root).lexically_normal().string()},
                         {"block_samples", o.block_samples},
                         {"shard_samples", plan.shard_samples},
                         {"seed", o.seed},
                         {"fingerprint", set_fp},
                         {"plan", plan.fingerprint},
                         {"index", index},
                         {"shards", shards}};
  return WriteFileAtomic(o.out + "/pack.json", manifest.dump(1) + "\n");
}

}  // namespace

StatusOr<PackReport> PackDataset(const Dataset& d, const PackOptions& o) {
  if (d.entries.empty()) return Status::InvalidArgument(d.root + ": no images to pack");
  if (o.block_samples < 1 || o.shard_mb < 1) {
    return Status::InvalidArgument("pack: block_samples (" + std::to_string(o.block_samples) + ") and shard_mb (" +
                                   std::to_string(o.shard_mb) + ") must be >= 1");
  }
  // Every image below the data set's root: its path in the set is relative.
  std::string files_key;
  for (const auto& e : d.entries) {
    const std::string rel = Relative(d, e.path);
    if (rel.empty() || rel.rfind("..", 0) == 0 || fs::path(rel).is_absolute()) {
      return Status::InvalidArgument(e.path + ": lies outside the data set's folder " + d.root +
                                     "; a packed set names images by their path below it");
    }
    // Sizes and times: a rerun after images changed writes new shards.
    std::error_code ec;
    const auto size = fs::file_size(e.path, ec);
    const auto time = fs::last_write_time(e.path, ec).time_since_epoch().count();
    files_key += std::to_string(size) + ":" + std::to_string(time) + "\n";
  }
  if (auto st = MakeDirs(o.out); !st.ok()) return st;
  const std::string set_fp = PackFingerprint(d);
  if (IsPackedSet(o.out)) {
    auto existing = ReadFile(o.out + "/pack.json");
    auto j = existing.ok() ? json::parse(*existing, nullptr, false) : json();
    if (!j.is_object() || j.value("fingerprint", "") != set_fp) {
      return Status::AlreadyExists(o.out + " holds a packed set of another data set (fingerprint " +
                                   (j.is_object() ? j.value("fingerprint", "?") : std::string("?")) + ", this one's is " +
                                   set_fp + "); choose another --out or remove it");
    }
  }
  // The plan: the pack order and the shard size, from the first image's bytes.
  Plan plan;
  plan.order = PackOrder(static_cast<int64_t>(d.entries.size()), o.seed);
  auto first = ReadImage(d.entries[plan.order[0]].path);
  if (!first.ok()) return first.status();
  const int64_t per_image = static_cast<int64_t>(EncodeNpy(*first).size()) + 2048;
  const int64_t blocks_per_shard =
      std::max<int64_t>(1, o.shard_images > 0 ? o.shard_images / o.block_samples : (o.shard_mb << 20) / per_image / o.block_samples);
  plan.shard_samples = blocks_per_shard * o.block_samples;
  plan.shards = (static_cast<int64_t>(d.entries.size()) + plan.shard_samples - 1) / plan.shard_samples;
  plan.fingerprint = Fingerprint(set_fp + "|" + std::to_string(o.seed) + "|" + std::to_string(plan.shard_samples) +
                                 "|" + std::to_string(o.block_samples) + "|" + std::to_string(o.folder_depth_for_labels) +
                                 "|" + Fingerprint(files_key));
  CleanStaleTemporaries(o.out, false);
  PackReport report;
  std::string first_kind;
  // A set whose shards are about to change is no longer a set: pack.json and
  // index.csv go first, so that no reader mixes old and new shards.
  bool changes = false;
  for (int64_t s = o.rank; s < plan.shards && !changes; s += o.world_size) changes = !DoneShard(plan, s, o);
  if (changes) {
    for (const char* f : {"/pack.json", "/index.csv"}) {
      if (::unlink((o.out + f).c_str()) != 0 && errno != ENOENT) {
        return Status::IOError(o.out + f + ": cannot remove the outdated file: " + std::strerror(errno));
      }
    }
  }
  std::vector<int64_t> to_write;
  int64_t images_to_write = 0, packed = 0;
  for (int64_t s = o.rank; s < plan.shards; s += o.world_size) {
    if (DoneShard(plan, s, o)) {
      ++report.shards_reused;
      continue;
    }
    to_write.push_back(s);
    images_to_write += std::min<int64_t>(plan.shard_samples, static_cast<int64_t>(plan.order.size()) - s * plan.shard_samples);
  }
  auto packed_one = [&] {
    if (o.on_progress) o.on_progress(++packed, images_to_write);
  };
  if (o.on_progress && images_to_write > 0) o.on_progress(0, images_to_write);
  for (const int64_t s : to_write) {
    auto m = WriteShard(d, plan, s, o, &first_kind, packed_one);
    if (!m.ok()) return m.status();
    ++report.shards_written;
    report.images += (*m)["samples"].get<int64_t>();
    report.bytes += (*m)["bytes"].get<int64_t>();
    if (o.log) o.log("wrote " + o.out + "/" + (*m)["file"].get<std::string>() + ": " +
                     std::to_string((*m)["samples"].get<int64_t>()) + " images, " +
                     std::to_string((*m)["bytes"].get<int64_t>() >> 20) + " MiB");
  }
  // Whoever finds every shard complete writes the index and pack.json (the
  // last rank to finish always does).
  std::vector<json> manifests;
  for (int64_t s = 0; s < plan.shards; ++s) {
    auto m = DoneShard(plan, s, o);
    if (!m) {
      report.shards_of_others = plan.shards - s;
      return report;
    }
    manifests.push_back(std::move(*m));
  }
  // One sample type across shards written by different ranks.
  for (const auto& m : manifests) {
    const auto& r0 = manifests.front()["rows"][0];
    for (const auto& r : m["rows"]) {
      if (r[6] != r0[6] || r[7] != r0[7]) {
        return Status::InvalidArgument(d.entries[r[0].get<int64_t>()].path + ": has " + r[6].dump() + " channel(s) of " +
                                       r[7].get<std::string>() + ", but " + d.entries[r0[0].get<int64_t>()].path +
                                       " has " + r0[6].dump() + " of " + r0[7].get<std::string>() +
                                       ": a packed set holds one channel count and sample type");
      }
    }
  }
  if (auto st = WriteIndex(d, plan, manifests, o, set_fp); !st.ok()) return st;
  report.finished = true;
  return report;
}

// ----------------------------------------------------------------- staging

namespace {

std::string ModeText(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// A directory of the stage: created 0700 when missing; otherwise it must be
// a real directory (no symlink) of this user with no permission for group
// or others. Refusals name the path, the owner and mode found and what was
// expected, and remove nothing (it may not be ours).
Status OwnPrivateDir(const std::string& dir, const std::string& what) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(dir + ": cannot create " + what + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::IOError(dir + ": " + std::strerror(errno));
  const uid_t me = ::geteuid();
  // One of ours that others may only read (an older scdino made it 0755):
  // made private. Writable by others, it may hold what they put there.
  if (S_ISDIR(st.st_mode) && st.st_uid == me && (st.st_mode & 022) == 0 && (st.st_mode & 077) != 0 &&
      ::chmod(dir.c_str(), 0700) == 0) {
    st.st_mode &= ~static_cast<mode_t>(077);
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077) != 0) {
    const std::string found = S_ISLNK(st.st_mode) ? "a symbolic link" : !S_ISDIR(st.st_mode) ? "not a directory"
                                                                                           : "a directory";
    return Status::FailedPrecondition(
        dir + ": " + what + " is " + found + " of uid " + std::to_string(st.st_uid) + " with mode " +
        ModeText(st.st_mode) + "; expected a directory of yours (uid " + std::to_string(me) +
        ") with mode 0700: another user may have made it to plant data. It is left as it is; set "
        "SCDINO_STAGE_DIR to a directory of your own (a per-job $SLURM_TMPDIR where the site gives one)");
  }
  return Status::Ok();
}

// What proves a shard of a staged copy unchanged since it was verified: its
// inode, size and times. Only its owner (this user) or root can change a
// file in a 0700 directory, and any change, even a chmod or a rename in
// and back, moves its ctime, which no user can set.
struct ShardProof {
  std::string file;
  int64_t ino = 0, bytes = 0, mtime_ns = 0, ctime_ns = 0;
};

StatusOr<ShardProof> ProveShard(const std::string& dir, const std::string& file) {
  const std::string path = dir + "/" + file;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::NotFound(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1 || (st.st_mode & 022) != 0) {
    return Status::FailedPrecondition(path + ": a staged shard must be a regular file of yours (uid " +
                                      std::to_string(::geteuid()) + ") with one link and no write permission for "
                                      "others; found uid " + std::to_string(st.st_uid) + ", mode " +
                                      ModeText(st.st_mode) + ", " + std::to_string(st.st_nlink) + " link(s)");
  }
  return ShardProof{file, static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

json ProofJson(const ShardProof& p) {
  return {{"file", p.file}, {"ino", p.ino}, {"bytes", p.bytes}, {"mtime_ns", p.mtime_ns}, {"ctime_ns", p.ctime_ns}};
}

// Copies `from` to `to`, checking its size, CRC-32 and SHA-256 against
// pack.json's as it goes.
Status CopyVerified(const std::string& from, const std::string& to, const ShardInfo& want,
                    const std::function<bool()>& should_stop, const std::function<void(int64_t)>& copied) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::FailedPrecondition(from + ": cannot open: " + std::strerror(errno));
  AtomicFile out(to);
  Status st = out.Create();
  uint32_t crc = 0;
  Sha256 sha;
  int64_t total = 0;
  std::string buf(8 << 20, '\0');
  while (st.ok()) {
    // A stop (a preemption during staging) ends it within one 8 MiB block;
    // the half-written copy is removed (AtomicFile) and nothing is marked.
    if (should_stop && should_stop()) {
      st = Status::Aborted("stopped while staging " + from + " (" + std::to_string(total >> 20) + " of " +
                           std::to_string(want.bytes >> 20) + " MiB copied); the next staging starts it again");
      break;
    }
    const ssize_t got = ::read(in, buf.data(), buf.size());
    if (got < 0) st = Status::IOError(from + ": read failed: " + std::strerror(errno));
    if (got <= 0) break;
    crc = Crc32(buf.data(), static_cast<size_t>(got), crc);
    sha.Update(buf.data(), static_cast<size_t>(got));
    total += got;
    st = out.file()->Append(std::string_view(buf.data(), static_cast<size_t>(got)));
    if (copied) copied(got);
  }
  ::close(in);
  if (!st.ok()) return st;
  const std::string digest = sha.HexDigest();
  if (total != want.bytes || crc != want.crc32 || digest != want.sha256) {
    return Status::DataLoss(from + ": " + std::to_string(total) + " bytes with CRC-32 " + Hex32(crc) + " and SHA-256 " +
                            digest + ", pack.json says " + std::to_string(want.bytes) + " bytes with " +
                            Hex32(want.crc32) + " and " + want.sha256 +
                            ": the shared copy is corrupt or changed; pack it again");
  }
  return out.Commit();
}

// Copies under `root` beyond the newest `keep` (by last use: the marker's
// modification time, set again at each reuse), except `current`. Only
// directories of this user named as a copy is (16 hex digits) are removed.
std::vector<std::string> EvictStagedCopies(const std::string& root, int64_t keep, const std::string& current) {
  std::vector<std::pair<int64_t, std::string>> copies;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 16 || name.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    struct stat marker {};
    const bool staged = ::lstat((e.path().string() + "/.staged").c_str(), &marker) == 0;
    const auto& t = staged ? marker.st_mtim : st.st_mtim;
    copies.emplace_back(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec, e.path().string());
  }
  std::sort(copies.rbegin(), copies.rend());
  std::vector<std::string> removed;
  int64_t kept = 0;
  for (const auto& [when, path] : copies) {
    if (path == current || kept < keep - 1) {
      if (path != current) ++kept;
      continue;
    }
    fs::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

}  // namespace

StatusOr<std::string> StagedCopy(const PackedSet& set, const std::string& root) {
  if (!fs::exists(root)) return std::string();
  if (auto st = OwnPrivateDir(root, "the stage directory"); !st.ok()) return st;
  const std::string dir = root + "/" + set.content_fingerprint();
  if (!fs::exists(dir)) return std::string();
  if (auto st = OwnPrivateDir(dir, "the staged copy"); !st.ok()) return st;
  auto marker = ReadFile(dir + "/.staged");
  if (!marker.ok()) return std::string();
  auto m = json::parse(*marker, nullptr, false);
  if (!m.is_object() || m.value("pack", "") != set.content_fingerprint() || !m.contains("shards") ||
      m["shards"].size() != set.shards().size()) {
    return std::string();
  }
  for (size_t i = 0; i < set.shards().size(); ++i) {
    auto proof = ProveShard(dir, set.shards()[i].file);
    if (!proof.ok()) return proof.status();
    if (ProofJson(*proof) != m["shards"][i]) {
      return Status::DataLoss(dir + "/" + set.shards()[i].file +
                              ": changed since it was verified (its inode, size or times differ from the .staged "
                              "record); it is staged again");
    }
  }
  return dir;
}

StatusOr<StageReport> StagePackedSet(const PackedSet& set, const std::string& root,
                                     const std::function<bool()>& should_stop, int64_t keep,
                                     const std::function<void(int64_t, int64_t)>& on_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  StageReport r;
  r.dir = root + "/" + set.content_fingerprint();
  r.bytes = set.total_bytes();
  for (const auto& s : set.shards()) {
    if (s.sha256.size() != 64) {
      return Status::FailedPrecondition(set.files_dir() + "/pack.json: shard " + s.file +
                                        " has no SHA-256 (packed by an older scdino): pack the data set again to "
                                        "stage it; reading the shared copy meanwhile");
    }
  }
  if (const auto parent = fs::path(root).parent_path(); !parent.empty() && !fs::exists(parent)) {
    if (auto st = MakeDirs(parent.string()); !st.ok()) return st;
  }
  if (auto st = OwnPrivateDir(root, "the stage directory"); !st.ok()) return st;
  auto staged = StagedCopy(set, root);
  if (staged.ok() && !staged->empty()) {
    r.reused = true;
    ::utimensat(AT_FDCWD, (r.dir + "/.staged").c_str(), nullptr, 0);  // its last use, for the eviction
  } else {
    // A copy's directory that is not ours is refused as it is, untouched.
    if (auto st = OwnPrivateDir(r.dir, "the staged copy"); !st.ok()) return st;
    ::unlink((r.dir + "/.staged").c_str());
    // Room for the whole set (any file already there is copied again: only
    // a copy verified by this process is trusted).
    struct statvfs v {};
    if (::statvfs(r.dir.c_str(), &v) == 0) {
      const int64_t avail = static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
      if (avail < r.bytes + (r.bytes >> 6)) {
        return Status::FailedPrecondition(r.dir + ": " + std::to_string(avail >> 20) + " MiB free, staging " +
                                          set.dataset().root + " needs " + std::to_string(r.bytes >> 20) + " MiB");
      }
    }
    CleanStaleTemporaries(r.dir, false);
    const std::string src = set.files_dir();
    json proofs = json::array();
    int64_t copied = 0;
    auto count = [&](int64_t bytes) {
      copied += bytes;
      if (on_progress) on_progress(copied, r.bytes);
    };
    count(0);
    for (const auto& s : set.shards()) {
      ::unlink((r.dir + "/" + s.file).c_str());
      if (auto st = CopyVerified(src + "/" + s.file, r.dir + "/" + s.file, s, should_stop, count); !st.ok()) return st;
      auto proof = ProveShard(r.dir, s.file);
      if (!proof.ok()) return proof.status();
      proofs.push_back(ProofJson(*proof));
    }
    // The index and manifest this set was opened with (a repack meanwhile
    // is refused, not mixed in).
    auto index = ReadFile(src + "/index.csv");
    if (!index.ok()) return index.status();
    if (static_cast<int64_t>(index->size()) != set.index_bytes() ||
        Crc32(index->data(), index->size()) != set.index_crc32()) {
      return Status::DataLoss(src + "/index.csv changed while staging (packed again?); stage again");
    }
    auto manifest = ReadFile(src + "/pack.json");
    if (!manifest.ok()) return manifest.status();
    if (Fingerprint(*manifest) != set.content_fingerprint()) {
      return Status::DataLoss(src + "/pack.json changed while staging (packed again?); stage again");
    }
    if (auto st = WriteFileAtomic(r.dir + "/index.csv", *index, 0600); !st.ok()) return st;
    if (auto st = WriteFileAtomic(r.dir + "/pack.json", *manifest, 0600); !st.ok()) return st;
    const json marker = {{"pack", set.content_fingerprint()}, {"shards", proofs}};
    if (auto st = WriteFileAtomic(r.dir + "/.staged", marker.dump() + "\n", 0600); !st.ok()) return st;
  }
  if (keep > 0) r.evicted = EvictStagedCopies(root, keep, r.dir);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace scdino::data
