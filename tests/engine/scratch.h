// Files a test program writes for itself (key files, generated captures) go
// in one directory per program, made on first use and removed at exit, so
// the suite leaves nothing behind in /tmp.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace amon_test {

inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      char t[] = "/tmp/amon-test-XXXXXX";
      if (mkdtemp(t)) path = t;
    }
    ~Dir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  };
  static Dir d;
  REQUIRE_FALSE(d.path.empty());
  return d.path;
}

// A key file holding `hex`, mode 0600 (amon refuses a key others can read).
inline std::string scratch_key(const std::string& name, const std::string& hex) {
  const std::string p = scratch_dir() + "/" + name;
  std::ofstream(p) << hex << "\n";
  chmod(p.c_str(), 0600);
  return p;
}

}  // namespace amon_test
