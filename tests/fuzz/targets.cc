#include "fuzz/targets.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "common/files.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "data/image_io.h"
#include "data/packed.h"
#include "config/config.h"

namespace scdino::fuzz {
namespace fs = std::filesystem;
namespace {

// A directory of this process for the files a reader takes by path (under
// $TMPDIR, /tmp by default: a tmpfs where there is one).
const std::string& Scratch() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t != nullptr && *t ? t : "/tmp") + "/scdino-fuzz-" + std::to_string(::getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string Put(const std::string& name, std::string_view bytes) {
  const std::string path = Scratch() + "/" + name;
  fs::remove(path);
  (void)WriteFileAtomic(path, bytes);
  return path;
}

std::string_view View(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

thread_local bool accepted = false;

}  // namespace

namespace {
int Image(const char* name, const uint8_t* data, size_t size) {
  auto image = data::ReadImage(Put(name, View(data, size)));
  if (image.ok() && image->dim() != 3) __builtin_trap();  // a decoded image is H x W x C
  accepted = image.ok();
  return 0;
}
}  // namespace

int Tiff(const uint8_t* data, size_t size) { return Image("input.tif", data, size); }
int Png(const uint8_t* data, size_t size) { return Image("input.png", data, size); }
int Jpeg(const uint8_t* data, size_t size) { return Image("input.jpg", data, size); }

int Safetensors(const uint8_t* data, size_t size) {
  accepted = ParseSafetensors(View(data, size), "input.safetensors").ok();
  return 0;
}

int Npy(const uint8_t* data, size_t size) {
  accepted = ReadNpy(Put("input.npy", View(data, size))).ok();
  return 0;
}

int Packed(const uint8_t* data, size_t size) {
  accepted = false;
  const std::string_view all = View(data, size);
  const std::string dir = Scratch() + "/packed";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string_view sep = kPackedSeparator;
  const size_t a = all.find(sep);
  const size_t b = a == std::string_view::npos ? a : all.find(sep, a + sep.size());
  if (b == std::string_view::npos) return 0;
  (void)WriteFileAtomic(dir + "/pack.json", all.substr(0, a));
  (void)WriteFileAtomic(dir + "/index.csv", all.substr(a + sep.size(), b - a - sep.size()));
  (void)WriteFileAtomic(dir + "/shard-00000.tar", all.substr(b + sep.size()));
  auto set = data::PackedSet::Open(dir);
  if (!set.ok()) return 0;
  const auto& s = **set;
  accepted = !s.entries().empty();
  for (size_t i = 0; i < s.entries().size(); ++i) accepted = s.Read(static_cast<int64_t>(i)).ok() && accepted;
  for (int64_t block = 0; block < s.blocks(); ++block) accepted = s.ReadBlock(block).ok() && accepted;
  return 0;
}

int Config(const uint8_t* data, size_t size) {
  accepted = run::ParseRunConfig(std::string(View(data, size)), "input.yaml").ok();
  return 0;
}

bool LastInputAccepted() { return accepted; }

void RemoveScratch() {
  std::error_code ec;
  fs::remove_all(Scratch(), ec);
}

Target TargetNamed(const std::string& name) {
  if (name == "tiff") return Tiff;
  if (name == "png") return Png;
  if (name == "jpeg") return Jpeg;
  if (name == "safetensors") return Safetensors;
  if (name == "npy") return Npy;
  if (name == "packed") return Packed;
  if (name == "config") return Config;
  return nullptr;
}

}  // namespace scdino::fuzz
