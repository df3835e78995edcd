#include "run/checkpoint_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "common/safetensors_metadata.h"

namespace scdino {

std::vector<CheckpointEntry> ListCheckpointFiles(const std::string& run_dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(run_dir, ec)) {
    const std::string name = f.path().filename().string();
    if (!f.is_regular_file() || name.rfind("checkpoint", 0) != 0 || f.path().extension() != ".safetensors") continue;
    auto meta = ReadSafetensorsMetadata(f.path().string());
    if (!meta.ok() || !meta->count("iteration")) continue;
    CheckpointEntry e;
    e.path = std::filesystem::absolute(f.path()).string();
    try {
      e.iteration = std::stoll(meta->at("iteration"));
      e.epoch = meta->count("epoch") ? std::stoll(meta->at("epoch")) : 0;
    } catch (const std::exception&) {
      continue;
    }
    e.size_bytes = static_cast<int64_t>(f.file_size(ec));
    struct stat st {};
    if (::stat(e.path.c_str(), &st) == 0) {
      e.modified_unix_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    }
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return std::tie(a.iteration, a.modified_unix_ms, a.path) < std::tie(b.iteration, b.modified_unix_ms, b.path);
  });
  return out;
}

}  // namespace scdino
