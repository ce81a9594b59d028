// Golden tests: ok/*.amon must compile without a single diagnostic and dump
// exactly as ok/*.dump; err/*.amon must produce exactly err/*.expected.
// Run from tests/dsl (ctest does). AMON_UPDATE_GOLDEN=1 rewrites the expected
// files instead of comparing: review the diff before committing it.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "policy.h"

namespace fs = std::filesystem;
using namespace amon::dsl;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<fs::path> cases(const char* dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".amon") v.push_back(fs::path(dir) / e.path().filename());
  std::sort(v.begin(), v.end());
  return v;
}

void prepare_keys() {
  // git stores 0644; the key checks need the modes the cases are about.
  REQUIRE(chmod("keys/test.key", 0600) == 0);
  REQUIRE(chmod("keys/short.key", 0600) == 0);
  REQUIRE(chmod("keys/nothex.key", 0600) == 0);
  REQUIRE(chmod("keys/world.key", 0644) == 0);
}

CompileOptions options() {
  CompileOptions o;
  // The environment of the test run must not change the outcome.
  o.getenv = [](const char* name) -> const char* {
    if (std::string(name) == "AMON_TEST_KEY") return "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    if (std::string(name) == "AMON_TEST_BADKEY") return "not-a-key";
    return nullptr;
  };
  return o;
}

bool update() {
  const char* u = std::getenv("AMON_UPDATE_GOLDEN");
  return u && std::string(u) == "1";
}

void check(const fs::path& expected_path, const std::string& actual) {
  if (update()) {
    if (!fs::exists(expected_path) || slurp(expected_path) != actual) {
      std::ofstream(expected_path, std::ios::binary) << actual;
      WARN("updated " << expected_path.string());
    }
    return;
  }
  REQUIRE(fs::exists(expected_path));
  std::string want = slurp(expected_path);
  INFO("expected (" << expected_path.string() << "):\n" << want << "\nactual:\n" << actual);
  CHECK(want == actual);
}

}  // namespace

TEST_CASE("ok/*.amon compile cleanly and dump as ok/*.dump", "[golden]") {
  prepare_keys();
  auto files = cases("ok");
  REQUIRE(files.size() >= 5);
  for (const auto& f : files) {
    DYNAMIC_SECTION(f.string()) {
      Diagnostics d;
      auto p = compile_file(f.string(), d, options());
      INFO(d.render_text());
      REQUIRE(d.empty());
      REQUIRE(p);
      fs::path want = f;
      check(want.replace_extension(".dump"), dump(*p));
    }
  }
}

TEST_CASE("err/*.amon produce err/*.expected", "[golden]") {
  prepare_keys();
  auto files = cases("err");
  REQUIRE(files.size() >= 30);
  for (const auto& f : files) {
    DYNAMIC_SECTION(f.string()) {
      Diagnostics d;
      auto p = compile_file(f.string(), d, options());
      REQUIRE_FALSE(d.empty());
      // nullptr exactly when there is an error: warning-only cases compile.
      CHECK((p == nullptr) == (d.errors() > 0));
      fs::path want = f;
      check(want.replace_extension(".expected"), d.render_text());
    }
  }
}
