// scdino-pack's writer of packed sets (data/packed.h): shards written to a
// temporary, checked and renamed, each with its manifest (a rerun resumes),
// then index.csv and pack.json by the process that finds every shard.
#include "data/packed.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common/csv.h"
#include "common/digest.h"
#include "common/files.h"
#include "common/fingerprint.h"
#include "data/packed_format.h"

namespace scdino::data {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pack_format;

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

// Every image's path below the data set's root (a packed set names them
// so), and their sizes and times, which key the plan: a rerun after images
// changed writes new shards.
StatusOr<std::string> FilesKey(const Dataset& d) {
  std::string files_key;
  for (const auto& e : d.entries) {
    const std::string rel = Relative(d, e.path);
    if (rel.empty() || rel.rfind("..", 0) == 0 || fs::path(rel).is_absolute()) {
      return Status::InvalidArgument(e.path + ": lies outside the data set's folder " + d.root +
                                     "; a packed set names images by their path below it");
    }
    std::error_code ec;
    const auto size = fs::file_size(e.path, ec);
    const auto time = fs::last_write_time(e.path, ec).time_since_epoch().count();
    files_key += std::to_string(size) + ":" + std::to_string(time) + "\n";
  }
  return files_key;
}

// A packed set already in `out` must be of this data set.
Status CheckSameSet(const std::string& out, const std::string& set_fp) {
  if (!IsPackedSet(out)) return Status::Ok();
  auto existing = ReadFile(out + "/pack.json");
  auto j = existing.ok() ? json::parse(*existing, nullptr, false) : json();
  if (!j.is_object() || j.value("fingerprint", "") != set_fp) {
    return Status::AlreadyExists(out + " holds a packed set of another data set (fingerprint " +
                                 (j.is_object() ? j.value("fingerprint", "?") : std::string("?")) + ", this one's is " +
                                 set_fp + "); choose another --out or remove it");
  }
  return Status::Ok();
}

// The plan: the pack order and the shard size, from the first image's bytes.
StatusOr<Plan> MakePlan(const Dataset& d, const PackOptions& o, const std::string& set_fp,
                        const std::string& files_key) {
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
  return plan;
}

// Whoever finds every shard complete writes the index and pack.json (the
// last rank to finish always does); otherwise says how many are left.
Status CompleteTheSet(const Dataset& d, const Plan& plan, const PackOptions& o, const std::string& set_fp,
                      PackReport* report) {
  std::vector<json> manifests;
  for (int64_t s = 0; s < plan.shards; ++s) {
    auto m = DoneShard(plan, s, o);
    if (!m) {
      report->shards_of_others = plan.shards - s;
      return Status::Ok();
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
  report->finished = true;
  return Status::Ok();
}

}  // namespace

StatusOr<PackReport> PackDataset(const Dataset& d, const PackOptions& o) {
  if (d.entries.empty()) return Status::InvalidArgument(d.root + ": no images to pack");
  if (o.block_samples < 1 || o.shard_mb < 1) {
    return Status::InvalidArgument("pack: block_samples (" + std::to_string(o.block_samples) + ") and shard_mb (" +
                                   std::to_string(o.shard_mb) + ") must be >= 1");
  }
  auto files_key = FilesKey(d);
  if (!files_key.ok()) return files_key.status();
  if (auto st = MakeDirs(o.out); !st.ok()) return st;
  const std::string set_fp = PackFingerprint(d);
  if (auto st = CheckSameSet(o.out, set_fp); !st.ok()) return st;
  auto made = MakePlan(d, o, set_fp, *files_key);
  if (!made.ok()) return made.status();
  const Plan& plan = *made;
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
  if (auto st = CompleteTheSet(d, plan, o, set_fp, &report); !st.ok()) return st;
  return report;
}

}  // namespace scdino::data
