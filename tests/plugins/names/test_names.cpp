#include <libpsl.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

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

// What libpsl itself says, without the per-parent memo.
static unsigned psl_direct(std::string s) {
  if (!s.empty() && s.back() == '.') s.pop_back();
  for (char& c : s) c = char(std::tolower(uint8_t(c)));
  const char* reg = psl_registrable_domain(psl_builtin(), s.c_str());
  return count_labels(reg ? std::string_view(reg) : std::string_view(s));
}

TEST_CASE("registrable_label_count remembered per parent agrees with libpsl") {
  // Siblings asked in turn, so each name after the first finds its parent
  // remembered: wildcard rules (*.ck, *.compute.amazonaws.com), exceptions
  // (!www.ck, !city.kobe.jp), suffixes under a non-suffix (s3.amazonaws.com
  // beside foo.amazonaws.com), deep names, case, empty labels.
  const char* names[] = {
      "a.foo.amazonaws.com", "s3.amazonaws.com", "x.s3.amazonaws.com", "foo.amazonaws.com", "b.foo.amazonaws.com",
      "x.y.compute.amazonaws.com", "y.compute.amazonaws.com", "zz.y.compute.amazonaws.com",
      "a.b.compute.amazonaws.com", "q.compute.amazonaws.com", "www.ck", "x.www.ck", "foo.ck", "x.foo.ck",
      "a.x.foo.ck", "city.kobe.jp", "x.city.kobe.jp", "other.kobe.jp", "x.other.kobe.jp", "www.example.com",
      "qwertyuiopas.victim-shop.com", "ZXCVBNMASDFG.Victim-Shop.COM", "a.b.c.d.e.f.g.h.example.co.uk",
      "a.b.c.d.e.f.g.example.co.uk", "b.c.d.e.f.g.example.co.uk", "x.co.uk", "y.x.co.uk", "a..b.example.com",
      "..example.com", ".x.example.com", "x.example.com.", "a.b.github.io", "c.b.github.io", "github.io",
      "x.github.io", "a.bd", "b.a.bd", "c.a.bd", "a.unknowntld", "b.a.unknowntld", "c.b.a.unknowntld",
      "d.b.a.unknowntld", "1.2.3.4", "5.2.3.4",
  };
  for (int pass = 0; pass < 2; ++pass)
    for (const char* n : names) {
      INFO(n);
      CHECK(registrable_label_count(n) == psl_direct(n));
    }
}

TEST_CASE("registrable_label_count agrees with libpsl around every rule of its list") {
  // Names under, at and beside each rule of the file libpsl's builtin list
  // was made from: the parents whose names need no lookup are told apart
  // from that file.
  std::ifstream in(psl_builtin_filename());
  if (!in) {
    WARN("no rule file for libpsl's builtin list");
    return;
  }
  unsigned rules = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.compare(0, 2, "//") == 0) continue;
    std::string r = line.substr(0, line.find_first_of(" \t\r"));
    if (r[0] == '!') r.erase(0, 1);
    else if (r.compare(0, 2, "*.") == 0) r.erase(0, 2);
    ++rules;
    const std::string parent = r.find('.') == std::string::npos ? std::string() : r.substr(r.find('.') + 1);
    for (const std::string& n : {"qz7k." + r, "a.qz7k." + r, "b.a.qz7k." + r, "www." + r, r, "qz7k." + parent,
                                 "b.qz7k." + parent, "c.b.qz7k." + parent})
      for (int pass = 0; pass < 2; ++pass) {
        INFO(n);
        CHECK(registrable_label_count(n) == psl_direct(n));
      }
  }
  CHECK(rules > 1000);
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

// Independent references for the two per-label primitives: written the plain
// way (a byte at a time, from the SipHash paper and the documented mask rules)
// so that the optimised forms in names.cpp are checked against something that
// does not share their code.
namespace ref {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t siphash24(uint64_t k0, uint64_t k1, const std::vector<uint8_t>& m) {
  uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
  uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
  auto round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  auto compress = [&](uint64_t w) {
    v3 ^= w;
    round();
    round();
    v0 ^= w;
  };
  uint64_t w = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    w |= uint64_t(m[i]) << (8 * (i % 8));
    if (i % 8 == 7) {
      compress(w);
      w = 0;
    }
  }
  compress(w | uint64_t(m.size()) << 56);
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t label_seed(uint64_t key, const char* label, size_t len, uint64_t right) {
  std::vector<uint8_t> m;
  for (size_t i = 0; i < len; ++i) {
    const uint8_t c = uint8_t(label[i]);
    m.push_back(c >= 'A' && c <= 'Z' ? uint8_t(c + 32) : c);
  }
  m.push_back(0xff);
  for (int b = 0; b < 8; ++b) m.push_back(uint8_t(right >> (8 * b)));
  return siphash24(key, key ^ 0x9e3779b97f4a7c15ull, m);
}

// splitmix64 consumed once per output byte except interior hyphens, drawn
// below n by Lemire's multiply-shift; an unchanged result bumps byte 0.
void mask_label(char* p, size_t len, uint64_t seed) {
  uint64_t s = seed;
  auto below = [&](unsigned n) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return unsigned((unsigned __int128)z * n >> 64);
  };
  const std::string before(p, len);
  for (size_t i = 0; i < len; ++i) {
    const char c = p[i];
    if (c >= '0' && c <= '9') p[i] = char('0' + below(10));
    else if (c == '-' && i != 0 && i + 1 != len) p[i] = '-';
    else if (c >= 'A' && c <= 'Z') p[i] = char('A' + below(26));
    else p[i] = char('a' + below(26));
  }
  if (len != 0 && before == std::string(p, len)) {
    char& c = p[0];
    if (c >= '0' && c <= '9') c = char('0' + (c - '0' + 1) % 10);
    else if (c >= 'A' && c <= 'Z') c = char('A' + (c - 'A' + 1) % 26);
    else c = char('a' + (c - 'a' + 1) % 26);
  }
}

}  // namespace ref

TEST_CASE("reference SipHash-2-4 matches the paper's test vector") {
  // Appendix A of Aumasson & Bernstein: key 00..0f, message 00..0e.
  std::vector<uint8_t> m(15);
  for (size_t i = 0; i < m.size(); ++i) m[i] = uint8_t(i);
  CHECK(ref::siphash24(0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull, m) == 0xa129ca6149be45e5ull);
}

// Labels drawn from letters of both cases, digits, hyphens and the bytes next
// to the letter ranges (with and without the top bit), each in a heap block of
// exactly its length so a sanitizer build sees any read past the label.
static std::vector<char> mixed_label(std::mt19937_64& rng, size_t len) {
  static constexpr char kChars[] = {'a', 'b', 'z', 'A', 'B', 'Z', 'q', 'Q', '0', '5', '9', '-', '-', '_',
                                    '@', '[', '`', '{', '/', ':', char(0xc1), char(0xda), char(0xe1), char(0xfa),
                                    char(0x80), char(0xff), '\0', '.'};
  std::vector<char> l(len);
  const int mode = int(rng() % 4);  // 0: any of kChars; 1: LDH only; 2: upper only; 3: digits and hyphens
  for (auto& c : l) {
    switch (mode) {
      case 0: c = kChars[rng() % sizeof kChars]; break;
      case 1: c = kChars[rng() % 12]; break;
      case 2: c = char('A' + rng() % 26); break;
      default: c = rng() % 3 ? char('0' + rng() % 10) : '-'; break;
    }
  }
  return l;
}

TEST_CASE("label_seed and siphash64 equal a byte-at-a-time SipHash-2-4, every length 0..63 and beyond") {
  std::mt19937_64 rng(11);
  for (size_t len = 0; len <= 300; len += len < 80 ? 1 : 37) {
    for (int rep = 0; rep < (len < 64 ? 400 : 40); ++rep) {
      const std::vector<char> l = mixed_label(rng, len);
      const uint64_t key = rep == 0 ? 0 : rng(), right = rep == 1 ? 0 : rep == 2 ? ~0ull : rng();
      CAPTURE(len, rep);
      const uint64_t want = ref::label_seed(key, l.data(), len, right);
      REQUIRE(label_seed(key, l.data(), len, right) == want);
      std::vector<uint8_t> m(l.begin(), l.end());
      REQUIRE(siphash64(key, m.data(), m.size()) == ref::siphash24(key, key ^ 0x9e3779b97f4a7c15ull, m));
    }
  }
}

TEST_CASE("mask_label equals the plain mask loop, every length 0..63") {
  std::mt19937_64 rng(12);
  for (size_t len = 0; len <= 63; ++len) {
    for (int rep = 0; rep < 2000; ++rep) {
      std::vector<char> l = mixed_label(rng, len);
      std::vector<char> want = l;
      const uint64_t seed = rep < 2 ? uint64_t(rep) : rng();
      ref::mask_label(want.data(), len, seed);
      mask_label(l.data(), len, seed);
      CAPTURE(len, rep, seed);
      REQUIRE(std::string(l.begin(), l.end()) == std::string(want.begin(), want.end()));
    }
  }
  // Short labels hit the "unchanged" bump (an end hyphen never can: it always
  // becomes a letter): search seeds until each has gone through it 3 times.
  for (const char* in : {"a", "Q", "7", "ab", "Zz", "42", "x-y", "9-9"}) {
    int hits = 0;
    for (uint64_t seed = 0; hits < 3 && seed < 200000; ++seed) {
      std::string plain(in), got(in);
      ref::mask_label(plain.data(), plain.size(), seed);
      // Did the plain loop draw the input back (before the bump)?
      std::string drawn(in);
      {
        uint64_t s = seed;
        bool same = true;
        for (size_t i = 0; i < drawn.size(); ++i) {
          const char c = drawn[i];
          if (c == '-' && i != 0 && i + 1 != drawn.size()) continue;
          uint64_t z = (s += 0x9e3779b97f4a7c15ull);
          z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
          z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
          z ^= z >> 31;
          const unsigned n = (c >= '0' && c <= '9') ? 10 : 26;
          const char base = (c >= '0' && c <= '9') ? '0' : (c >= 'A' && c <= 'Z') ? 'A' : 'a';
          same = same && char(base + unsigned((unsigned __int128)z * n >> 64)) == c;
        }
        if (!same) continue;
      }
      ++hits;
      mask_label(got.data(), got.size(), seed);
      CAPTURE(in, seed);
      CHECK(got == plain);
      CHECK(got != std::string(in));
    }
    CAPTURE(in);
    CHECK(hits == 3);
  }
}

TEST_CASE("names: redact to the total length leaves no dot, keeps a trailing one") {
  std::string s = "www.example.com";
  apply_to_text(s.data(), s.size(), Decision::redact(true));
  CHECK(s == "xxxxxxxxxxxxxxx");
  s = "a.b.";
  apply_to_text(s.data(), s.size(), Decision::redact(true));
  CHECK(s == "xxx.");
  s = "www.example.com";
  apply_to_text(s.data(), s.size(), Decision::redact());
  CHECK(s == "xxx.xxxxxxx.xxx");
}
