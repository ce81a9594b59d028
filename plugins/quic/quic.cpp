#include "amon_quic.hpp"
#include "bytes.h"

#include <algorithm>
#include <cstring>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

namespace amon::quic {
namespace {

// Initial salts: RFC 9001 5.2 (v1), RFC 9369 3.3.1 (v2), and the drafts that
// are still seen in captures (draft-ietf-quic-tls-29 for 29..32; -23 for
// 23..28 and Facebook's mvfst, whose 0xfaceb002 follows draft 27).
const uint8_t kSaltV1[20] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                             0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};
const uint8_t kSaltV2[20] = {0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93,
                             0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9};
const uint8_t kSaltD29[20] = {0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97,
                              0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0, 0x43, 0x90, 0xa8, 0x99};
const uint8_t kSaltD23[20] = {0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7,
                              0xd2, 0x43, 0x2b, 0xb4, 0x63, 0x65, 0xbe, 0xf9, 0xf5, 0x02};

const VersionInfo kV1{kVersion1, kSaltV1, "quic key", "quic iv", "quic hp", false};
const VersionInfo kV2{kVersion2, kSaltV2, "quicv2 key", "quicv2 iv", "quicv2 hp", true};
const VersionInfo kD29{0xff00001d, kSaltD29, "quic key", "quic iv", "quic hp", false};
const VersionInfo kD23{0xff000017, kSaltD23, "quic key", "quic iv", "quic hp", false};


// RFC 9000 16: a variable-length integer at p[*o], p[..end).
bool varint(const uint8_t* p, size_t end, size_t& o, uint64_t& v) {
  if (o >= end) return false;
  const unsigned n = 1u << (p[o] >> 6);
  if (end - o < n) return false;
  v = p[o] & 0x3f;
  for (unsigned i = 1; i < n; ++i) v = v << 8 | p[o + i];
  o += n;
  return true;
}

}  // namespace

const VersionInfo* version_info(uint32_t v) {
  if (v == kVersion1) return &kV1;
  if (v == kVersion2) return &kV2;
  if (v >= 0xff00001d && v <= 0xff000020) return &kD29;
  if ((v >= 0xff000017 && v <= 0xff00001c) || v == 0xfaceb002) return &kD23;
  return nullptr;
}

struct Crypto::Impl {
  EVP_KDF* kdf = nullptr;
  EVP_KDF_CTX* kctx = nullptr;
  EVP_CIPHER* gcm = nullptr;
  EVP_CIPHER* ecb = nullptr;
  // One context per operation, bound to its cipher once: re-keying with a
  // null cipher then allocates nothing per packet.
  EVP_CIPHER_CTX* gdec = nullptr;
  EVP_CIPHER_CTX* genc = nullptr;
  EVP_CIPHER_CTX* ectx = nullptr;
  // Retransmissions and a hello's later Initials reuse one DCID: derive
  // its keys once (five HKDF calls) and keep them, direct-mapped.
  struct KeySlot {
    uint32_t version = 0;
    uint8_t len = 0xff;
    uint8_t dcid[20];
    Keys keys;
  };
  KeySlot keys[64];
  struct FlowSlot {
    uint64_t flow = 0;
    uint32_t version = 0;
    uint8_t len = 0;
    uint8_t dcid[20];
  };
  FlowSlot flows[256];
};

Crypto::Crypto() : p_(std::make_unique<Impl>()) {
  p_->kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  p_->kctx = p_->kdf ? EVP_KDF_CTX_new(p_->kdf) : nullptr;
  if (p_->kctx) {
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    if (EVP_KDF_CTX_set_params(p_->kctx, params) != 1) {
      EVP_KDF_CTX_free(p_->kctx);
      p_->kctx = nullptr;  // every derivation fails: Initials fail closed
    }
  }
  p_->gcm = EVP_CIPHER_fetch(nullptr, "AES-128-GCM", nullptr);
  p_->ecb = EVP_CIPHER_fetch(nullptr, "AES-128-ECB", nullptr);
  p_->gdec = EVP_CIPHER_CTX_new();
  p_->genc = EVP_CIPHER_CTX_new();
  p_->ectx = EVP_CIPHER_CTX_new();
  // Unusable contexts stay null: every open/seal/mask then fails (closed).
  auto bind = [](EVP_CIPHER_CTX*& c, const EVP_CIPHER* ci, int enc) {
    if (c && (!ci || EVP_CipherInit_ex2(c, ci, nullptr, nullptr, enc, nullptr) != 1)) EVP_CIPHER_CTX_free(c), c = nullptr;
  };
  bind(p_->gdec, p_->gcm, 0);
  bind(p_->genc, p_->gcm, 1);
  bind(p_->ectx, p_->ecb, 1);
  if (p_->ectx) EVP_CIPHER_CTX_set_padding(p_->ectx, 0);
}

Crypto::~Crypto() {
  EVP_CIPHER_CTX_free(p_->gdec);
  EVP_CIPHER_CTX_free(p_->genc);
  EVP_CIPHER_CTX_free(p_->ectx);
  EVP_CIPHER_free(p_->gcm);
  EVP_CIPHER_free(p_->ecb);
  EVP_KDF_CTX_free(p_->kctx);
  EVP_KDF_free(p_->kdf);
}

namespace {

// The context keeps its digest (SHA-256, set once: fetching it per call
// costs more than the hash); each call sets the mode and its inputs. An
// extract ignores a previous call's info, an expand its salt.
bool hkdf(EVP_KDF_CTX* ctx, int mode, const uint8_t* key, size_t key_len, const uint8_t* salt, size_t salt_len,
          const uint8_t* info, size_t info_len, uint8_t* out, size_t out_len) {
  if (!ctx) return false;
  OSSL_PARAM params[5];
  int n = 0;
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key), key_len);
  if (salt) params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<uint8_t*>(salt), salt_len);
  if (info) params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info), info_len);
  params[n] = OSSL_PARAM_construct_end();
  return EVP_KDF_derive(ctx, out, out_len, params) == 1;
}

// TLS 1.3 HKDF-Expand-Label with an empty context (RFC 8446 7.1).
bool expand_label(EVP_KDF_CTX* ctx, const uint8_t secret[32], const char* label, uint8_t* out, size_t out_len) {
  uint8_t info[2 + 1 + 255 + 1];
  const size_t ll = std::strlen(label);
  if (6 + ll > 255) return false;
  info[0] = uint8_t(out_len >> 8);
  info[1] = uint8_t(out_len);
  info[2] = uint8_t(6 + ll);
  std::memcpy(info + 3, "tls13 ", 6);
  std::memcpy(info + 9, label, ll);
  info[9 + ll] = 0;
  return hkdf(ctx, EVP_KDF_HKDF_MODE_EXPAND_ONLY, secret, 32, nullptr, 0, info, 10 + ll, out, out_len);
}

}  // namespace

bool Crypto::initial_secret(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len, bool server, uint8_t out[32]) {
  uint8_t initial[32];
  static const uint8_t empty = 0;
  if (!hkdf(p_->kctx, EVP_KDF_HKDF_MODE_EXTRACT_ONLY, dcid_len ? dcid : &empty, dcid_len, v.salt, 20, nullptr, 0,
            initial, 32))
    return false;
  return expand_label(p_->kctx, initial, server ? "server in" : "client in", out, 32);
}

bool Crypto::initial_keys(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len, bool server, Keys& out) {
  uint8_t secret[32];
  return initial_secret(v, dcid, dcid_len, server, secret) && expand_label(p_->kctx, secret, v.key_label, out.key, 16) &&
         expand_label(p_->kctx, secret, v.iv_label, out.iv, 12) && expand_label(p_->kctx, secret, v.hp_label, out.hp, 16);
}

const Keys* Crypto::client_keys(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len) {
  if (dcid_len > 20) return nullptr;
  uint32_t h = v.version * 0x9e3779b1u + uint32_t(dcid_len);
  for (size_t i = 0; i < dcid_len; ++i) h = (h ^ dcid[i]) * 0x01000193u;
  Impl::KeySlot& s = p_->keys[(h ^ h >> 16) & 63];
  if (s.version == v.version && s.len == dcid_len && std::memcmp(s.dcid, dcid, dcid_len) == 0) return &s.keys;
  if (!initial_keys(v, dcid, dcid_len, false, s.keys)) {
    s.len = 0xff;
    return nullptr;
  }
  s.version = v.version;
  s.len = uint8_t(dcid_len);
  std::memcpy(s.dcid, dcid, dcid_len);
  return &s.keys;
}

bool Crypto::hp_mask(const uint8_t hp[16], const uint8_t* sample, uint8_t mask[5]) {
  uint8_t out[32];
  int n = 0;
  if (!p_->ectx || EVP_EncryptInit_ex2(p_->ectx, nullptr, hp, nullptr, nullptr) != 1) return false;
  if (EVP_EncryptUpdate(p_->ectx, out, &n, sample, 16) != 1 || n != 16) return false;
  std::memcpy(mask, out, 5);
  return true;
}

namespace {
void nonce_of(const Keys& k, uint64_t pn, uint8_t nonce[12]) {
  std::memcpy(nonce, k.iv, 12);
  for (int i = 0; i < 8; ++i) nonce[11 - i] ^= uint8_t(pn >> (8 * i));
}
}  // namespace

bool Crypto::open(const Keys& k, uint64_t pn, const uint8_t* aad, size_t aad_len, const uint8_t* ct, size_t ct_len,
                  uint8_t* pt) {
  if (ct_len < 16 || !p_->gdec) return false;
  uint8_t nonce[12];
  nonce_of(k, pn, nonce);
  EVP_CIPHER_CTX* c = p_->gdec;
  int n = 0, f = 0;
  const size_t body = ct_len - 16;
  uint8_t tag[16];
  std::memcpy(tag, ct + body, 16);  // pt may overwrite ct
  if (EVP_DecryptInit_ex2(c, nullptr, k.key, nonce, nullptr) != 1) return false;
  if (EVP_DecryptUpdate(c, nullptr, &n, aad, int(aad_len)) != 1) return false;
  if (EVP_DecryptUpdate(c, pt, &n, ct, int(body)) != 1) return false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag) != 1) return false;
  return EVP_DecryptFinal_ex(c, pt + n, &f) == 1;
}

bool Crypto::seal(const Keys& k, uint64_t pn, const uint8_t* aad, size_t aad_len, const uint8_t* pt, size_t pt_len,
                  uint8_t* ct) {
  if (!p_->genc) return false;
  uint8_t nonce[12];
  nonce_of(k, pn, nonce);
  EVP_CIPHER_CTX* c = p_->genc;
  int n = 0, f = 0;
  if (EVP_EncryptInit_ex2(c, nullptr, k.key, nonce, nullptr) != 1) return false;
  if (EVP_EncryptUpdate(c, nullptr, &n, aad, int(aad_len)) != 1) return false;
  if (EVP_EncryptUpdate(c, ct, &n, pt, int(pt_len)) != 1) return false;
  if (EVP_EncryptFinal_ex(c, ct + n, &f) != 1) return false;
  return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, ct + pt_len) == 1;
}

void Crypto::remember_dcid(uint64_t flow_key, uint32_t version, const uint8_t* dcid, uint8_t len) {
  if (!flow_key || len > 20) return;
  Impl::FlowSlot& s = p_->flows[(flow_key ^ flow_key >> 29) & 255];
  s.flow = flow_key;
  s.version = version;
  s.len = len;
  std::memcpy(s.dcid, dcid, len);
}

bool Crypto::recall_dcid(uint64_t flow_key, uint32_t version, uint8_t* dcid, uint8_t& len) const {
  if (!flow_key) return false;
  const Impl::FlowSlot& s = p_->flows[(flow_key ^ flow_key >> 29) & 255];
  if (s.flow != flow_key || s.version != version) return false;
  len = s.len;
  std::memcpy(dcid, s.dcid, s.len);
  return true;
}

// ---------------------------------------------------------------------------

namespace {

struct Analyzer {
  const uint8_t* in;
  size_t len;
  int dir;
  uint64_t flow_key;
  Crypto& c;
  FlowState& st;
  Datagram& d;

  Status fail(Status s, Error e) {
    d.status = s;
    d.error = e;
    return s;
  }

  // Removes header protection and opens an Initial with the given keys,
  // into d.plain. False (d.plain restored) when the tag does not verify.
  bool open_with(Packet& p, const Keys& k) {
    uint8_t mask[5];
    if (!c.hp_mask(k.hp, in + p.pn_off + 4, mask)) return false;
    const uint8_t first = uint8_t(in[p.off] ^ (mask[0] & 0x0f));
    const unsigned pn_len = (first & 3) + 1u;
    uint8_t* q = d.plain;
    q[p.off] = first;
    uint64_t pn = 0;
    for (unsigned i = 0; i < pn_len; ++i) {
      q[p.pn_off + i] = uint8_t(in[p.pn_off + i] ^ mask[1 + i]);
      pn = pn << 8 | q[p.pn_off + i];
    }
    const uint32_t pay = p.pn_off + pn_len, end = p.off + p.len;
    // Without the connection's largest acknowledged number the truncated
    // number is the full one; a client's Initials start at 0, and a wrong
    // guess only fails the tag (fail closed).
    if (end < pay + 16 || !c.open(k, pn, q + p.off, pay - p.off, in + pay, end - pay, q + pay)) {
      std::memcpy(q + p.off, in + p.off, p.len);
      return false;
    }
    p.pn_len = uint8_t(pn_len);
    p.pn = pn;
    p.pay_off = pay;
    p.pay_len = end - pay - 16;
    p.keys = k;
    p.decrypted = true;
    return true;
  }

  Status frames(Packet& p, uint8_t idx) {
    const uint8_t* q = d.plain;
    size_t o = p.pay_off;
    const size_t end = size_t(p.pay_off) + p.pay_len;
    while (o < end) {
      const uint8_t t = q[o];
      if (t == 0x00) {  // PADDING: usually most of the packet, skipped a word at a time
        ++o;
        while (end - o >= 8) {
          uint64_t w;
          std::memcpy(&w, q + o, 8);
          if (w) break;
          o += 8;
        }
        while (o < end && q[o] == 0) ++o;
        continue;
      }
      if (t == 0x01) {  // PING
        ++o;
        continue;
      }
      uint64_t v[4];
      if (t == 0x02 || t == 0x03) {  // ACK: largest, delay, range count, first range, ranges, [ECN]
        ++o;
        uint64_t count = 0;
        if (!varint(q, end, o, v[0]) || !varint(q, end, o, v[1]) || !varint(q, end, o, count) ||
            !varint(q, end, o, v[2]))
          return fail(Status::Malformed, Error::Frame);
        if (count > end - o) return fail(Status::Malformed, Error::Frame);
        for (uint64_t i = 0; i < 2 * count; ++i)
          if (!varint(q, end, o, v[0])) return fail(Status::Malformed, Error::Frame);
        if (t == 0x03)
          for (int i = 0; i < 3; ++i)
            if (!varint(q, end, o, v[0])) return fail(Status::Malformed, Error::Frame);
        continue;
      }
      if (t == 0x06) {  // CRYPTO: offset, length, data
        ++o;
        uint64_t off = 0, n = 0;
        if (!varint(q, end, o, off) || !varint(q, end, o, n) || n > end - o) return fail(Status::Malformed, Error::Frame);
        if (n) {
          if (off + n > Datagram::kMaxStream) return fail(Status::Incomplete, Error::Capacity);
          if (d.n_frag >= Datagram::kMaxFrags) return fail(Status::Malformed, Error::Capacity);
          d.frag[d.n_frag++] = {uint32_t(off), uint32_t(o), uint32_t(n), idx};
        }
        o += n;
        continue;
      }
      if (t == 0x1c) {  // CONNECTION_CLOSE (transport): error, frame type, reason
        ++o;
        uint64_t n = 0;
        if (!varint(q, end, o, v[0]) || !varint(q, end, o, v[1]) || !varint(q, end, o, n) || n > end - o)
          return fail(Status::Malformed, Error::Frame);
        o += n;
        continue;
      }
      // Nothing else may appear in an Initial (RFC 9000 12.4, Table 3).
      return fail(Status::Malformed, Error::Frame);
    }
    return Status::None;
  }

  // Long-header packets from the start of the datagram.
  Status packets() {
    size_t o = 0;
    uint8_t first_dcid[20];
    uint8_t first_dcid_len = 0;
    while (o < len) {
      const uint8_t b0 = in[o];
      // A short header (1-RTT) runs to the datagram's end: nothing of the
      // hello is in it.
      if (!(b0 & 0x80)) break;
      if (len - o < 7) return o ? Status::None : fail(Status::Malformed, Error::Header);
      const uint32_t ver = rd32(in + o + 1);
      const uint8_t dl = in[o + 5];
      if (dl > 20 || len - o < 7u + dl) return o ? Status::None : fail(Status::Malformed, Error::Header);
      // Endpoints ignore a coalesced packet of another connection ID (RFC
      // 9000 12.2): bytes after the first packet that do not carry its DCID
      // are padding unless they open as an Initial (a monitor could read it).
      bool other = false;
      if (o == 0) {
        first_dcid_len = dl;
        std::memcpy(first_dcid, in + 6, dl);
      } else {
        other = dl != first_dcid_len || std::memcmp(first_dcid, in + o + 6, dl) != 0;
      }
      if (ver == 0) break;  // Version Negotiation: the rest is its version list
      const VersionInfo* vi = version_info(ver);
      if (!vi) return other ? Status::None : fail(Status::Malformed, Error::Version);
      size_t q = o + 6 + dl;
      const uint8_t sl = in[q];
      if (sl > 20 || len - q < 1u + sl) return other ? Status::None : fail(Status::Malformed, Error::Header);
      q += 1 + sl;
      const unsigned raw = (b0 >> 4) & 3;
      const uint8_t type = vi->v2_types ? uint8_t((raw + 3) & 3) : uint8_t(raw);  // v2: 1 Initial, 2 0-RTT, 3 Handshake, 0 Retry
      if (type == 3) break;  // Retry: runs to the datagram's end, carries a token, no frames
      uint64_t tok = 0, plen = 0;
      if (type == 0 && (!varint(in, len, q, tok) || tok > len - q))
        return other ? Status::None : fail(Status::Malformed, Error::Header);
      q += size_t(tok);
      if (!varint(in, len, q, plen) || plen > len - q) return other ? Status::None : fail(Status::Malformed, Error::Header);
      const size_t end = q + size_t(plen);
      if (type == 0) {
        if (d.n_pkt >= Datagram::kMaxPackets) return fail(Status::Malformed, Error::Capacity);
        // A protected packet number and the 16-byte sample after it.
        if (end < q + 4 + 16) return other ? Status::None : fail(Status::Malformed, Error::Header);
        // The flow's other side is the server: its Initials are under keys
        // of a DCID only the client's first Initial shows, and carry no
        // client name.
        if (st.client && st.client != 1 + dir) {
          o = end;
          continue;
        }
        Packet& p = d.pkt[d.n_pkt];
        p = {};
        p.off = uint32_t(o);
        p.len = uint32_t(end - o);
        p.version = ver;
        p.type = 0;
        p.pn_off = uint32_t(q);
        const Keys* k = c.client_keys(*vi, in + o + 6, dl);
        bool ok = k && open_with(p, *k);
        bool own = ok;
        if (!ok) {
          uint8_t od[20], ol = 0;
          if (c.recall_dcid(flow_key, ver, od, ol) && (ol != dl || std::memcmp(od, in + o + 6, dl) != 0)) {
            const Keys* k2 = c.client_keys(*vi, od, ol);
            ok = k2 && open_with(p, *k2);
          }
        }
        // Anything else that does not open could be a client's: not forwarded.
        if (!ok) return other ? Status::None : fail(Status::Malformed, Error::Decrypt);
        if (own) c.remember_dcid(flow_key, ver, in + o + 6, dl);
        st.client = uint8_t(1 + dir);
        const uint8_t idx = uint8_t(d.n_pkt++);
        if (Status s = frames(p, idx); s != Status::None) return s;
      }
      o = end;
    }
    return Status::None;
  }

  // --- the CRYPTO stream -------------------------------------------------

  bool covered(uint32_t a, uint32_t b) const {
    if (a >= b) return true;
    for (unsigned i = 0; i < d.n_cover; ++i)
      if (d.cover[i].a <= a && b <= d.cover[i].b) return true;
    return false;
  }
  bool any_from(uint32_t a) const { return d.n_cover && d.cover[d.n_cover - 1].b > a; }
  bool any_in(uint32_t a, uint32_t b) const {
    for (unsigned i = 0; i < d.n_cover; ++i)
      if (d.cover[i].a < b && a < d.cover[i].b) return true;
    return false;
  }

  Status place() {
    for (unsigned i = 0; i < d.n_frag; ++i) {
      const CryptoFrag& f = d.frag[i];
      // Retransmitted bytes must agree: a monitor could show either copy.
      for (unsigned j = 0; j < i; ++j) {
        const CryptoFrag& g = d.frag[j];
        const uint32_t a = std::max(f.stream, g.stream), b = std::min(f.stream + f.len, g.stream + g.len);
        if (a < b && std::memcmp(d.stream + a, d.plain + f.pos + (a - f.stream), b - a) != 0)
          return fail(Status::Malformed, Error::Overlap);
      }
      std::memcpy(d.stream + f.stream, d.plain + f.pos, f.len);
    }
    Datagram::Range r[Datagram::kMaxFrags];
    for (unsigned i = 0; i < d.n_frag; ++i) r[i] = {d.frag[i].stream, d.frag[i].stream + d.frag[i].len};
    std::sort(r, r + d.n_frag, [](const Datagram::Range& x, const Datagram::Range& y) { return x.a < y.a; });
    d.n_cover = 0;
    for (unsigned i = 0; i < d.n_frag; ++i) {
      if (d.n_cover && r[i].a <= d.cover[d.n_cover - 1].b) d.cover[d.n_cover - 1].b = std::max(d.cover[d.n_cover - 1].b, r[i].b);
      else d.cover[d.n_cover++] = r[i];
    }
    return Status::None;
  }

  bool add_name(uint32_t stream, uint16_t n, uint8_t type) {
    if (d.n_names >= Datagram::kMaxNames || n > 255) return false;
    Name& nm = d.names[d.n_names++];
    nm = {stream, n, uint16_t(d.text_len), n, type};
    for (uint32_t i = 0; i < n; ++i) {
      uint8_t ch = d.stream[stream + i];
      if (ch >= 'A' && ch <= 'Z') ch = uint8_t(ch + 32);
      if (ch < 0x21 || ch > 0x7e) ch = '?';
      d.text[d.text_len++] = char(ch);
    }
    return true;
  }

  // The server_name extension body [a, b), all present.
  Status sni_list(uint32_t a, uint32_t b) {
    const uint8_t* s = d.stream;
    if (b - a < 2 || rd16(s + a) + 2u != b - a || b - a < 5) return fail(Status::Malformed, Error::Hello);
    for (uint32_t p = a + 2; p < b;) {
      if (p + 3 > b) return fail(Status::Malformed, Error::Hello);
      const uint16_t nl = rd16(s + p + 1);
      if (nl == 0 || p + 3 + nl > b) return fail(Status::Malformed, Error::Hello);
      if (!add_name(p + 3, nl, s[p])) return fail(Status::Malformed, Error::Capacity);
      p += 3u + nl;
    }
    return Status::None;
  }

  // Walks the ClientHello from `pos` as far as the present bytes go.
  // msg_end == 0: the message header is at pos. Stops at the first byte it
  // needs and does not have, at the end of the message, or once the
  // server_name extension was located (body [sa, sb): found).
  Status walk(uint32_t& pos, uint32_t& msg_end, bool& found, uint32_t& sa, uint32_t& sb) {
    const uint8_t* s = d.stream;
    if (!msg_end) {
      if (!covered(pos, pos + 4)) return Status::None;
      if (s[pos] != 1) return fail(Status::Malformed, Error::Hello);  // client Initials carry a ClientHello only
      const uint32_t hs = uint32_t(s[pos + 1]) << 16 | uint32_t(s[pos + 2]) << 8 | s[pos + 3];
      const uint32_t mend = pos + 4 + hs;
      if (mend > 0xffff) return fail(Status::Malformed, Error::Hello);
      if (covered(pos, mend)) {
        // The whole message is here: the full parser validates it.
        tls::ClientHello& h = d.hello;
        if (tls::parse_client_hello_message(s + pos, mend - pos, h) != tls::Status::Ok)
          return fail(Status::Malformed, Error::Hello);
        for (unsigned i = 0; i < h.n_sni; ++i)
          if (!add_name(pos + h.sni[i].span.off, uint16_t(h.sni[i].span.len), h.sni[i].name_type))
            return fail(Status::Malformed, Error::Capacity);
        for (unsigned i = 0; i < h.n_ext; ++i)
          if (h.ext[i].type == 0) found = true, sa = pos + h.ext[i].body.off, sb = sa + h.ext[i].body.len;
        pos = msg_end = mend;
        return Status::None;
      }
      // Fixed part: version, random, session id, cipher suites, compression,
      // extensions length (which must end the message).
      uint32_t p = pos + 4 + 34;
      if (!covered(pos, p + 1)) return Status::None;
      p += 1 + s[p];
      if (!covered(pos, p + 2)) return Status::None;
      p += 2 + rd16(s + p);
      if (!covered(pos, p + 1)) return Status::None;
      p += 1 + s[p];
      if (!covered(pos, p + 2)) return Status::None;
      if (p + 2 + rd16(s + p) != mend) return fail(Status::Malformed, Error::Hello);
      msg_end = mend;
      pos = p + 2;
    }
    while (pos < msg_end) {
      if (!covered(pos, pos + 4)) return Status::None;
      const uint16_t type = rd16(s + pos), n = rd16(s + pos + 2);
      const uint32_t body = pos + 4, bend = body + n;
      if (bend > msg_end) return fail(Status::Malformed, Error::Hello);
      if (type == 0) {
        if (!covered(body, bend)) return Status::None;
        if (Status r = sni_list(body, bend); r != Status::None) return r;
        // One server_name per hello (RFC 8446 4.2): the rest holds no name.
        found = true;
        sa = body;
        sb = bend;
        return Status::None;
      }
      pos = bend;
    }
    return Status::None;
  }

  Status run() {
    d.status = Status::None;
    d.error = Error::None;
    d.n_pkt = d.n_frag = d.n_names = d.n_cover = 0;
    d.text_len = 0;
    if (len > Datagram::kMaxDatagram) return fail(Status::Malformed, Error::Capacity);
    if (!len) return Status::None;
    std::memcpy(d.plain, in, len);
    if (Status s = packets(); s != Status::None) return s;
    if (!d.n_frag) return Status::None;  // ACK/PING/PADDING only, or no client Initial
    if (Status s = place(); s != Status::None) return s;

    // Progress through one ClientHello at CRYPTO offset 0. A second hello
    // (after a HelloRetryRequest) is not followed: its bytes fail closed.
    uint32_t pos = 0, msg_end = 0, sa = 0, sb = 0;
    bool found = false;
    if (covered(0, 1)) {
      // The hello's first bytes: start afresh whatever was seen before.
    } else if (st.mode == 1) {
      pos = st.a;
      msg_end = st.end;
    } else if (st.mode == 2) {
      // The server_name body was located earlier: present again, it must be
      // whole to be rewritten; the rest of that hello holds no name.
      found = true;
      sa = st.a, sb = st.b;
      msg_end = st.end;
      if (any_in(sa, sb)) {
        if (!covered(sa, sb)) return fail(Status::Incomplete, Error::NotLocated);
        if (Status r = sni_list(sa, sb); r != Status::None) return r;
      }
    } else {
      return fail(Status::Incomplete, Error::NotLocated);
    }
    if (!found)
      if (Status r = walk(pos, msg_end, found, sa, sb); r != Status::None) return r;
    // Present bytes past what was walked may hold a name nobody located.
    const bool unknown_bytes = found ? any_from(msg_end) : any_from(pos);
    if (found) st.mode = 2, st.a = uint16_t(sa), st.b = uint16_t(sb), st.end = uint16_t(msg_end);
    else st.mode = 1, st.a = uint16_t(pos), st.b = 0, st.end = uint16_t(msg_end);
    if (unknown_bytes) return fail(Status::Incomplete, Error::NotLocated);
    d.status = d.n_names ? Status::Located : Status::None;
    return d.status;
  }
};

}  // namespace

Status analyze(const uint8_t* dgram, size_t len, int dir, uint64_t flow_key, Crypto& c, FlowState& st, Datagram& d) {
  Analyzer a{dgram, len, dir, flow_key, c, st, d};
  return a.run();
}

bool rewrite(uint8_t* dgram, size_t len, Datagram& d, const names::Decision* dec, Crypto& c) {
  if (d.status != Status::Located || len > Datagram::kMaxDatagram) return false;
  bool touched[Datagram::kMaxPackets] = {};
  bool any = false;
  // Which packets carry bytes of a name that changes.
  for (unsigned i = 0; i < d.n_names; ++i) {
    if (dec[i].action == names::Action::Keep) continue;
    const Name& nm = d.names[i];
    for (unsigned f = 0; f < d.n_frag; ++f) {
      const CryptoFrag& fr = d.frag[f];
      if (fr.stream < nm.stream + nm.len && nm.stream < fr.stream + fr.len) touched[fr.pkt] = any = true;
    }
  }
  if (!any) return true;
  for (unsigned k = 0; k < d.n_pkt; ++k)
    if (touched[k]) std::memcpy(d.scratch + d.pkt[k].pay_off, d.plain + d.pkt[k].pay_off, d.pkt[k].pay_len);
  // New name bytes, written wherever the stream holds them (a name may be
  // split over CRYPTO frames, or repeated by a retransmitted frame).
  for (unsigned i = 0; i < d.n_names; ++i) {
    if (dec[i].action == names::Action::Keep) continue;
    const Name& nm = d.names[i];
    char tmp[256];
    std::memcpy(tmp, d.stream + nm.stream, nm.len);
    names::apply_to_text(tmp, nm.len, dec[i]);
    for (unsigned f = 0; f < d.n_frag; ++f) {
      const CryptoFrag& fr = d.frag[f];
      const uint32_t a = std::max(fr.stream, nm.stream), b = std::min(fr.stream + fr.len, nm.stream + uint32_t(nm.len));
      if (a < b) std::memcpy(d.scratch + fr.pos + (a - fr.stream), tmp + (a - nm.stream), b - a);
    }
  }
  for (unsigned k = 0; k < d.n_pkt; ++k) {
    if (!touched[k]) continue;
    const Packet& p = d.pkt[k];
    // Same key and nonce: the Initial keys are public (RFC 9001 5.2), so
    // reusing the nonce for the rewritten plaintext reveals nothing the
    // original did not already.
    if (!c.seal(p.keys, p.pn, d.plain + p.off, p.pay_off - p.off, d.scratch + p.pay_off, p.pay_len, dgram + p.pay_off))
      return false;
    uint8_t mask[5];
    if (!c.hp_mask(p.keys.hp, dgram + p.pn_off + 4, mask)) return false;
    dgram[p.off] = uint8_t(d.plain[p.off] ^ (mask[0] & 0x0f));
    for (unsigned i = 0; i < p.pn_len; ++i) dgram[p.pn_off + i] = uint8_t(d.plain[p.pn_off + i] ^ mask[1 + i]);
  }
  return true;
}

}  // namespace amon::quic
