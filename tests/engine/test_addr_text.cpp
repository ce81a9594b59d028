// Addresses written as text (addr_text.h), against inet_ntop/inet_pton as
// the reference: what is found, what it becomes, that lengths never move.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>

#include "addr_text.h"

using namespace amon;

namespace {

std::string ntop(const uint8_t* a, unsigned alen) {
  char t[INET6_ADDRSTRLEN];
  REQUIRE(inet_ntop(alen == 4 ? AF_INET : AF_INET6, a, t, sizeof t));
  return t;
}

// Random addresses with runs of zero groups (where "::" and its choices are).
void random_addr(std::mt19937& rng, uint8_t* a, unsigned alen) {
  for (unsigned i = 0; i < alen; ++i) a[i] = uint8_t(rng());
  if (alen == 16) {
    for (int g = 0; g < 8; ++g) {
      if (rng() % 3 == 0) a[2 * g] = a[2 * g + 1] = 0;
      else if (rng() % 4 == 0) a[2 * g] = 0;  // short groups
    }
  } else {
    for (unsigned i = 0; i < 4; ++i)
      if (rng() % 3 == 0) a[i] = uint8_t(a[i] % 10);
  }
}

}  // namespace

TEST_CASE("a fitted text reads back as the address, at exactly the length asked") {
  std::mt19937 rng(7);
  for (int n = 0; n < 2000; ++n) {
    uint8_t a[16];
    random_addr(rng, a, 16);
    bool some = false;
    for (unsigned len = 2; len <= 39; ++len) {
      char t[48];
      if (!fit_ipv6_text(a, t, len)) continue;
      some = true;
      t[len] = 0;
      uint8_t back[16];
      INFO(ntop(a, 16) << " at " << len << ": " << t);
      REQUIRE(std::strlen(t) == len);
      REQUIRE(inet_pton(AF_INET6, t, back) == 1);
      REQUIRE(std::memcmp(back, a, 16) == 0);
    }
    REQUIRE(some);  // its canonical length at least
    random_addr(rng, a, 4);
    for (unsigned len = 7; len <= 15; ++len) {
      char t[16];
      if (!fit_ipv4_text(a, t, len)) {
        REQUIRE(len < ntop(a, 4).size());
        continue;
      }
      unsigned o[4];
      char tail;
      t[len] = 0;
      REQUIRE(std::sscanf(t, "%u.%u.%u.%u%c", &o[0], &o[1], &o[2], &o[3], &tail) == 4);  // read as decimal
      for (int i = 0; i < 4; ++i) REQUIRE(o[i] == a[i]);
    }
  }
  // The zero address, the fallback, fits every length an address text has.
  const uint8_t zero[16] = {};
  for (unsigned len = 2; len <= 39; ++len) {
    char t[48];
    REQUIRE(fit_ipv6_text(zero, t, len));
  }
  for (unsigned len = 7; len <= 15; ++len) {
    char t[16];
    REQUIRE(fit_ipv4_text(zero, t, len));
  }
}

TEST_CASE("every text form of the address is found and mapped; nothing else moves") {
  std::mt19937 rng(11);
  for (int n = 0; n < 3000; ++n) {
    const unsigned alen = n % 2 ? 16 : 4;
    uint8_t olda[16], newa[16];
    random_addr(rng, olda, alen);
    random_addr(rng, newa, alen);
    if (std::memcmp(olda, newa, alen) == 0) continue;
    std::string text = ntop(olda, alen);
    if (alen == 16 && text.find('.') != std::string::npos) continue;  // mixed notation: not looked for
    std::string up = text;
    for (auto& ch : up) ch = char(std::toupper(uint8_t(ch)));
    std::string full;
    if (alen == 16) {
      char b[48];
      for (int g = 0; g < 8; ++g)
        std::snprintf(b + 5 * g, 6, g < 7 ? "%04x:" : "%04x", unsigned(olda[2 * g]) << 8 | olda[2 * g + 1]);
      full = b;
    }
    std::string pl = "GET http://" + text + "/ x=" + text + "1 " + "Host: " + text + "\r\n";
    unsigned want = 2;
    if (alen == 16) {
      pl += "A " + up + " B [" + full + "]\n";
      want += 2;  // each found, by its own form or by the canonical one where they are the same
    }
    std::string before = pl;
    AddrTextCount c = map_addr_text(reinterpret_cast<uint8_t*>(pl.data()), uint32_t(pl.size()), olda, newa, alen);
    INFO(before << " -> " << pl);
    REQUIRE(pl.size() == before.size());
    REQUIRE(c.mapped + c.zeroed == want);
    // " x=<addr>1": a longer number, left alone.
    REQUIRE(pl.find(" x=" + text + "1 ") != std::string::npos);
    // Each mapped place reads back as the new address or the zero one.
    size_t at = std::string("GET http://").size();
    char t[48];
    std::memcpy(t, pl.data() + at, text.size());
    t[text.size()] = 0;
    if (alen == 16) {
      uint8_t back[16];
      REQUIRE(inet_pton(AF_INET6, t, back) == 1);
      const uint8_t zero[16] = {};
      REQUIRE((std::memcmp(back, newa, 16) == 0 || std::memcmp(back, zero, 16) == 0));
    } else {
      unsigned o[4];
      REQUIRE(std::sscanf(t, "%u.%u.%u.%u", &o[0], &o[1], &o[2], &o[3]) == 4);
      const bool is_new = o[0] == newa[0] && o[1] == newa[1] && o[2] == newa[2] && o[3] == newa[3];
      REQUIRE((is_new || (o[0] | o[1] | o[2] | o[3]) == 0));
    }
  }
}

TEST_CASE("an RPC universal address's IPv4 part is mapped; a longer dotted run is not") {
  const uint8_t olda[4] = {139, 25, 22, 102}, newa[4] = {10, 230, 150, 152};
  // rpcbind's GETADDR reply: the address, then the port as two octets.
  std::string pl = std::string("\0\0\0\x12", 4) + "139.25.22.102.4.24" + std::string("\0\0", 2);
  AddrTextCount c = map_addr_text(reinterpret_cast<uint8_t*>(pl.data()), uint32_t(pl.size()), olda, newa, 4);
  REQUIRE(c.mapped + c.zeroed == 1);
  REQUIRE(pl.find("139.25.22.102") == std::string::npos);
  REQUIRE(pl.find(".4.24") != std::string::npos);
  // Three octets more, or a port octet of four digits: not a universal address.
  for (std::string other : {"v139.25.22.102.4.24.7 ", "v139.25.22.102.4.2400 ", "v139.25.22.102.4. "}) {
    std::string q = other;
    AddrTextCount d = map_addr_text(reinterpret_cast<uint8_t*>(q.data()), uint32_t(q.size()), olda, newa, 4);
    INFO(other);
    REQUIRE(d.mapped + d.zeroed == 0);
    REQUIRE(q == other);
  }
}

TEST_CASE("one scan for both addresses, applied per consumer, rewrites what each consumer's own scan does") {
  // Payloads dense in digits, hex letters, dots and colons, with both
  // addresses' text forms planted at random offsets (overlapping, adjacent,
  // at the ends); the addresses sometimes equal. Every consumer shape: the
  // source changed, the destination, both.
  std::mt19937 rng(23);
  static const char alphabet[] = "0123456789abcdefABCDEF.:x \n";
  unsigned found = 0;
  for (int n = 0; n < 20000; ++n) {
    const unsigned alen = n % 2 ? 16 : 4;
    uint8_t src[16], dst[16], nsrc[16], ndst[16];
    random_addr(rng, src, alen), random_addr(rng, nsrc, alen), random_addr(rng, ndst, alen);
    if (n % 7 == 0) std::memcpy(dst, src, alen);
    else random_addr(rng, dst, alen);
    std::string forms[2] = {ntop(src, alen), ntop(dst, alen)};
    for (int a = 0; a < 2 && alen == 16; ++a)
      if (rng() % 3 == 0)
        for (auto& ch : forms[a]) ch = char(std::toupper(uint8_t(ch)));
    const size_t len = rng() % 160;
    std::string pl(len, ' ');
    for (auto& ch : pl) ch = alphabet[rng() % (sizeof alphabet - 1)];
    for (int k = int(rng() % 6); k-- > 0 && len;) {
      const std::string& f = forms[rng() % 2];
      const size_t at = rng() % len;
      pl.replace(at, std::min(f.size(), len - at), f, 0, std::min(f.size(), len - at));
    }
    AddrTextMemo memo;
    find_addrs_text(reinterpret_cast<const uint8_t*>(pl.data()), uint32_t(len), src, dst, alen, memo);
    REQUIRE(memo.scanned == len);
    if (memo.overflow) continue;
    found += memo.count;
    for (int shape = 1; shape <= 3; ++shape) {
      const uint8_t* olds[2];
      const uint8_t* news[2];
      unsigned k = 0;
      if (shape & 1) olds[k] = src, news[k++] = nsrc;
      if (shape & 2) olds[k] = dst, news[k++] = ndst;
      std::string own = pl, shared = pl;
      const AddrTextCount co =
          map_addrs_text(reinterpret_cast<uint8_t*>(own.data()), uint32_t(len), olds, news, k, alen);
      const AddrTextCount cs = apply_addrs_text(reinterpret_cast<uint8_t*>(shared.data()), memo,
                                                shape & 1 ? nsrc : nullptr, shape & 2 ? ndst : nullptr, alen);
      INFO(pl << " shape " << shape);
      REQUIRE(shared == own);
      REQUIRE(cs.mapped == co.mapped);
      REQUIRE(cs.zeroed == co.zeroed);
    }
  }
  CHECK(found > 2000);  // the planted forms are found, not only noise
}

TEST_CASE("a packet's own addresses in binary are mapped; other bytes and the zero address stay") {
  // An Ares login: the client's own address after "Ares\0", as a peer reads it.
  const uint8_t src[4] = {192, 168, 1, 2}, dst[4] = {68, 74, 190, 205}, zero[4] = {};
  const uint8_t nsrc[4] = {96, 89, 129, 3}, ndst[4] = {10, 9, 8, 7};
  std::string pl = std::string("\x38\x00\x00\x3c", 4) + "Ares" + std::string(1, '\0') + std::string("\xc0\xa8\x01\x02", 4) +
                   std::string("\xc0\xa8\x01", 3) + std::string(4, '\0') + std::string("\x44\x4a\xbe\xcd", 4);
  std::string want = pl;
  std::memcpy(&want[9], nsrc, 4);
  std::memcpy(&want[20], ndst, 4);
  const uint8_t* olds[2] = {src, dst};
  const uint8_t* news[2] = {nsrc, ndst};
  int calls = 0;
  auto before = [](void* c) { ++*static_cast<int*>(c); };
  CHECK(map_addrs_binary(reinterpret_cast<uint8_t*>(pl.data()), uint32_t(pl.size()), olds, news, 2, 4, before, &calls) == 2);
  CHECK(pl == want);
  CHECK(calls == 1);
  // Only the addresses the consumer changed are given; the zero address
  // names no one, and 10.0.0.6 is too common a run in binary data (a GIF's
  // image descriptor holds 0a 00 00 06).
  const uint8_t ten[4] = {10, 0, 0, 6};
  std::memcpy(&pl[13], ten, 4), std::memcpy(&want[13], ten, 4);
  const uint8_t* zolds[2] = {zero, ten};
  const uint8_t* znews[2] = {nsrc, ndst};
  CHECK(map_addrs_binary(reinterpret_cast<uint8_t*>(pl.data()), uint32_t(pl.size()), zolds, znews, 2, 4) == 0);
  CHECK(pl == want);
}
