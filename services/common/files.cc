#include "common/files.h"

namespace scdino {

Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  AtomicFile f(path);
  if (Status s = f.Create(mode); !s.ok()) {
    return Status::IOError("cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  if (Status s = f.file()->Append(data); !s.ok()) {
    return Status::IOError("cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  return f.Commit();
}

StatusOr<std::string> ReadFile(const std::string& path) { return Env::Default()->ReadFile(path); }

Status MakeDirs(const std::string& path) { return Env::Default()->CreateDirs(path); }

bool FileExists(const std::string& path) { return Env::Default()->FileExists(path); }

}  // namespace scdino
