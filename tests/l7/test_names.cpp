#include <catch2/catch.hpp>

#include <cctype>
#include <cstring>
#include <random>
#include <string>

#include "amon_names.hpp"

using namespace amon::names;

static bool valid_ldh(const std::string& l) {
  if (l.empty() || l.front() == '-' || l.back() == '-') return false;
  for (char c : l)
    if (!std::isalnum(uint8_t(c)) && c != '-') return false;
  return true;
}

TEST_CASE("mask_label keeps class, case, interior hyphens and always changes the label") {
  for (std::string in : {"www", "a", "7", "-", "a-b", "-ab-", "WwW", "x1-y2", "_tcp", "ab\x01z", "xn--bcher-kva"}) {
    std::string out = in;
    mask_label(out.data(), out.size(), 42);
    CAPTURE(in, out);
    REQUIRE(out.size() == in.size());
    REQUIRE(out != in);
    REQUIRE(valid_ldh(out));
    for (size_t i = 0; i < in.size(); ++i) {
      if (std::isdigit(uint8_t(in[i]))) CHECK(std::isdigit(uint8_t(out[i])));
      if (std::isupper(uint8_t(in[i]))) CHECK(std::isupper(uint8_t(out[i])));
      if (std::islower(uint8_t(in[i]))) CHECK(std::islower(uint8_t(out[i])));
      if (in[i] == '-' && i > 0 && i + 1 < in.size()) CHECK(out[i] == '-');
    }
  }
}

TEST_CASE("mask_label is deterministic in the seed and varies with it") {
  std::string a = "secret", b = "secret", c = "secret";
  mask_label(a.data(), a.size(), 1);
  mask_label(b.data(), b.size(), 1);
  mask_label(c.data(), c.size(), 2);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("apply_to_text: suffix-chained seeds agree across names and casing") {
  std::string a = "www.example.com", b = "mail.EXAMPLE.com", c = "www.example.com.";
  apply_to_text(a.data(), a.size(), Decision::mask(7));
  apply_to_text(b.data(), b.size(), Decision::mask(7));
  apply_to_text(c.data(), c.size(), Decision::mask(7));
  // "example.com" masks identically (case aside) inside both names.
  std::string as = a.substr(4), bs = b.substr(5);
  for (auto& ch : bs) ch = char(std::tolower(uint8_t(ch)));
  CHECK(as == bs);
  CHECK(c == a + ".");
  CHECK(a.size() == 15);
  CHECK(a[3] == '.');
  CHECK(a.substr(0, 3) != "www");
}

TEST_CASE("apply_to_text MaskLeftOf keeps the registrable domain") {
  std::string s = "a.b.example.co.uk";
  const unsigned keep = registrable_label_count(s);
  CHECK(keep == 3);
  apply_to_text(s.data(), s.size(), Decision::mask_left_of(uint8_t(keep), 9));
  CHECK(s.substr(4) == "example.co.uk");
  CHECK(s.substr(0, 4) != "a.b.");
  CHECK(s[1] == '.');
}

TEST_CASE("registrable_label_count with libpsl") {
  CHECK(registrable_label_count("www.example.com") == 2);
  CHECK(registrable_label_count("www.example.com.") == 2);
  CHECK(registrable_label_count("WWW.Example.COM") == 2);
  CHECK(registrable_label_count("foo.bar.github.io") == 3);
  CHECK(registrable_label_count("co.uk") == 2);   // public suffix: keep all
  CHECK(registrable_label_count("com") == 1);
  CHECK(registrable_label_count("") == 0);
  CHECK(registrable_label_count("xn--bcher-kva.example") >= 1);
  CHECK(registrable_label_count(std::string(300, 'a')) == 0);
}

TEST_CASE("redact and keyed_fill preserve length") {
  std::string s = "www.example.com";
  redact(s.data(), s.size());
  CHECK(s == "xxx.xxxxxxx.xxx");
  std::string t(40, 'z'), u(40, 'z');
  keyed_fill(t.data(), t.size(), 5);
  keyed_fill(u.data(), u.size(), 5);
  CHECK(t == u);
  CHECK(t != std::string(40, 'z'));
  for (char c : t) CHECK(std::isalnum(uint8_t(c)));
}

TEST_CASE("siphash64 depends on key and data") {
  CHECK(siphash64(1, "abc", 3) == siphash64(1, "abc", 3));
  CHECK(siphash64(1, "abc", 3) != siphash64(2, "abc", 3));
  CHECK(siphash64(1, "abc", 3) != siphash64(1, "abd", 3));
  CHECK(label_seed(1, "ab", 2, 0) != label_seed(1, "a", 1, 0));
  CHECK(label_seed(1, "AB", 2, 5) == label_seed(1, "ab", 2, 5));
}

TEST_CASE("label_seed is siphash64 of lowercase(label) || 0xff || right seed (little-endian)") {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 5000; ++i) {
    const size_t len = rng() % 70;
    std::string label(len, '\0');
    for (auto& c : label) c = char(rng());
    const uint64_t key = rng(), right = rng();
    std::string msg;
    for (char c : label) msg += (c >= 'A' && c <= 'Z') ? char(c + 32) : c;
    msg += char(0xff);
    for (int b = 0; b < 8; ++b) msg += char(right >> (8 * b));
    CHECK(label_seed(key, label.data(), len, right) == siphash64(key, msg.data(), msg.size()));
  }
  // Letters and their neighbours ('@' 'A' 'Z' '[' '`' 'a' 'z' '{', and the
  // same with the top bit set) at every position of every word, lengths to 300.
  static constexpr char kEdge[] = {'@', 'A', 'M', 'Z', '[', '`', 'a', 'z', '{', '-', '0',
                                   char(0xc0), char(0xc1), char(0xda), char(0xdb), char(0xff), char(0x80), '\0'};
  for (int i = 0; i < 5000; ++i) {
    const size_t len = i < 4000 ? rng() % 40 : rng() % 300;
    std::string label(len, '\0');
    for (auto& c : label) c = kEdge[rng() % sizeof kEdge];
    const uint64_t key = rng(), right = rng();
    std::string msg;
    for (char c : label) msg += (c >= 'A' && c <= 'Z') ? char(c + 32) : c;
    msg += char(0xff);
    for (int b = 0; b < 8; ++b) msg += char(right >> (8 * b));
    CHECK(label_seed(key, label.data(), len, right) == siphash64(key, msg.data(), msg.size()));
  }
}
