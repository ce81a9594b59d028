// DNS rewriting: a consumer's name decisions written into a message's
// labels (one decision per label span, every name sharing a span sharing
// it), with the checksum sums a datagram's shortcut needs; the reverse-DNS
// addresses and the EDNS Client Subnet option. The parse that finds what
// is rewritten here is dns.cpp.
#include "amon_dns.hpp"
#include "bytes.h"
#include "checksum.h"

#include <cctype>
#include <cstring>

namespace amon::dns {

FirstNameMasks::FirstNameMasks() : slots_(new Entry[kSlots]) {
  for (unsigned i = 0; i < kSlots; ++i) slots_[i].len = 0;
}
FirstNameMasks::~FirstNameMasks() { delete[] slots_; }

const uint8_t* FirstNameMasks::find(uint64_t seed, uint8_t keep, const uint8_t* wire, unsigned len) const {
  const Entry& e = slots_[(seed >> 40) % kSlots];
  if (e.len == 0 || e.len != len || e.seed != seed || e.keep != keep || std::memcmp(e.orig, wire, len) != 0) return nullptr;
  return e.masked;
}

int rewrite_names(uint8_t* msg, size_t len, const ParseResult& pr, DecideFn fn, void* ctx, uint64_t* sums,
                  uint32_t roles, FirstNameMasks* first) {
  if (pr.status != Status::Ok || len != pr.msg_len) return -1;
  // Actions per unique label span: 0 keep, 1 mask, 2 redact, 3 copy the
  // first name's masks from `first` (a mask all the same), 4 hidden.
  uint8_t act[ParseResult::kMaxLabels];
  uint64_t seed[ParseResult::kMaxLabels];
  // A fixed 64 bytes for the usual message (stores, not a call).
  if (pr.n_labels <= 64) std::memset(act, 0, 64);
  else std::memset(act, 0, pr.n_labels);
  // The labels given an action, each once: the passes below visit these, not
  // every label of the message (a response's answers have many, mostly kept).
  uint16_t marked[ParseResult::kMaxLabels];
  unsigned n_marked = 0;
  auto mark = [&](uint16_t li, uint8_t a) {
    if (act[li] == 0) marked[n_marked++] = li;
    act[li] = a;
  };
  // Names redacted to their total length (Decision::flat), to re-label below.
  constexpr unsigned kMaxFlat = 64;
  uint16_t flat[kMaxFlat];
  unsigned n_flat = 0;
  const uint8_t* reuse = nullptr;          // act 3: masked bytes of names[0]'s wire
  FirstNameMasks::Entry* store = nullptr;  // names[0]'s masks to keep, once computed
  unsigned store_keep = 0;
  for (unsigned i = 0; i < pr.n_names; ++i) {
    const NameRef& n = pr.names[i];
    if (n.n_labels == 0 || !((roles >> unsigned(n.role)) & 1)) continue;
    const NameView v{i, n.role, n.section, n.rr_type, pr.name_text(i)};
    const names::Decision d = fn(ctx, v);
    if (d.action == names::Action::Keep) continue;
    if (d.action == names::Action::Redact) {
      for (unsigned k = 0; k < n.n_labels; ++k) mark(pr.label_refs[n.first_ref + k], 2);
      if (d.flat && n_flat < kMaxFlat) flat[n_flat++] = uint16_t(i);
      continue;
    }
    const unsigned keep = d.action == names::Action::MaskLeftOf ? d.keep_labels : 0;
    if (keep >= n.n_labels) continue;
    if (d.hide) {
      // Redacted labels stay redacted; a hidden label shared with a masked
      // name is hidden (both hide it, this one without a key).
      for (unsigned k = 0; k + keep < n.n_labels; ++k)
        if (act[pr.label_refs[n.first_ref + k]] != 2) mark(pr.label_refs[n.first_ref + k], 4);
      continue;
    }
    // A name whose labels to mask all have an action already (an owner
    // sharing the question's labels) changes nothing: skip its seed chain.
    bool fresh = false;
    for (unsigned k = 0; k + keep < n.n_labels && !fresh; ++k) fresh = act[pr.label_refs[n.first_ref + k]] == 0;
    if (!fresh) continue;
    // The first name is decided first, so all its labels are fresh here and
    // take this chain's seeds: its masks depend on (seed, keep, bytes) only.
    if (i == 0 && first && !n.compressed && n.wire_len <= FirstNameMasks::kBytes) {
      if (!first->reuse) {
        store = first->slot(d.seed);
        store->len = 0;  // until filled below
        store->seed = d.seed;
        store->keep = uint8_t(keep);
        std::memcpy(store->orig, msg + n.off, n.wire_len);
        store_keep = keep;
      } else if (const uint8_t* mk = first->find(d.seed, uint8_t(keep), msg + n.off, n.wire_len)) {
        reuse = mk;
        for (unsigned k = 0; k + keep < n.n_labels; ++k) mark(pr.label_refs[n.first_ref + k], 3);
        continue;
      }
    }
    uint64_t right = 0;
    for (unsigned k = n.n_labels; k-- > 0;) {
      const uint16_t li = pr.label_refs[n.first_ref + k];
      const LabelSpan& l = pr.labels[li];
      right = names::label_seed(d.seed, reinterpret_cast<const char*>(msg + l.off), l.len, right);
      if (k + keep < n.n_labels && act[li] == 0) {
        mark(li, 1);
        seed[li] = right;
      }
    }
  }
  // A name redacted to its total length: its own (linear) labels become
  // labels of a fixed layout for that length, when no other name points
  // inside them (a pointer may only land on the name's start, which stays a
  // label start). Else it keeps its label lengths, all 'x'.
  struct FlatSpan {
    uint16_t off, len;
  };
  FlatSpan fspan[kMaxFlat];
  unsigned n_fspan = 0;
  if (n_flat) {
    uint16_t refs[ParseResult::kMaxLabels];
    std::memset(refs, 0, sizeof(uint16_t) * pr.n_labels);
    for (unsigned r = 0; r < pr.n_label_refs; ++r) ++refs[pr.label_refs[r]];
    for (unsigned f = 0; f < n_flat; ++f) {
      const NameRef& n = pr.names[flat[f]];
      unsigned lin = 0, k = 0;
      bool inner = false;
      for (; k < n.n_labels; ++k) {
        const LabelSpan& l = pr.labels[pr.label_refs[n.first_ref + k]];
        if (l.off != n.off + lin + 1u) break;  // the rest is behind a pointer
        if (k && refs[pr.label_refs[n.first_ref + k]] != refs[pr.label_refs[n.first_ref]]) inner = true;
        lin += 1u + l.len;
      }
      if (k < 2 || inner || n.off + lin >= len) continue;  // one label: nothing to hide
      fspan[n_fspan++] = {n.off, uint16_t(lin)};
    }
  }
  // The checksum sums: one span from the first rewritten label to the end
  // of the last (the bytes between are unchanged and count on both sides).
  unsigned lo = ~0u, hi = 0;
  if (sums) {
    for (unsigned j = 0; j < n_marked; ++j) {
      const LabelSpan& l = pr.labels[marked[j]];
      lo = std::min<unsigned>(lo, l.off), hi = std::max<unsigned>(hi, l.off + l.len);
    }
    for (unsigned j = 0; j < n_fspan; ++j)
      lo = std::min<unsigned>(lo, fspan[j].off), hi = std::max<unsigned>(hi, fspan[j].off + fspan[j].len);
    if (lo < hi) sums[0] += csum_span_at(msg, lo, hi - lo);
  }
  // Spans are disjoint, so the order they are rewritten in does not matter.
  const unsigned off0 = pr.n_names ? pr.names[0].off : 0;
  for (unsigned j = 0; j < n_marked; ++j) {
    const uint16_t li = marked[j];
    const LabelSpan& l = pr.labels[li];
    if (act[li] == 1) names::mask_label(reinterpret_cast<char*>(msg + l.off), l.len, seed[li]);
    else if (act[li] == 2) std::memset(msg + l.off, 'x', l.len);
    else if (act[li] == 4) names::hide_label(reinterpret_cast<char*>(msg + l.off), l.len);
    else std::memcpy(msg + l.off, reuse + (l.off - off0), l.len);
  }
  for (unsigned j = 0; j < n_fspan; ++j) {
    // Labels of 63 bytes, the last one what remains (at least 1: a
    // remainder of one byte takes one from the label before it).
    uint8_t* p = msg + fspan[j].off;
    unsigned left = fspan[j].len;
    while (left) {
      unsigned take = std::min(left, 64u);
      if (left - take == 1) --take;
      *p = uint8_t(take - 1);
      std::memset(p + 1, 'x', take - 1);
      p += take, left -= take;
    }
  }
  const int changed = int(n_marked);
  if (store) {
    // Kept only if every label the first name masks shows its own mask (a
    // later name may have redacted one of them).
    const NameRef& n = pr.names[0];
    std::memcpy(store->masked, store->orig, n.wire_len);
    bool ok = true;
    for (unsigned k = 0; k + store_keep < n.n_labels; ++k) {
      const uint16_t li = pr.label_refs[n.first_ref + k];
      const LabelSpan& l = pr.labels[li];
      ok = ok && act[li] == 1;
      std::memcpy(store->masked + (l.off - n.off), msg + l.off, l.len);
    }
    if (ok) store->len = uint8_t(n.wire_len);
  }
  if (sums && lo < hi) sums[1] += csum_span_at(msg, lo, hi - lo);
  return changed;
}

unsigned reverse_address(std::string_view text, uint8_t& family, uint8_t addr[16]) {
  std::memset(addr, 0, 16);
  family = 0;
  unsigned want;
  std::string_view rest;
  if (text.size() > 13 && text.substr(text.size() - 13) == ".in-addr.arpa") {
    family = 4, want = 4, rest = text.substr(0, text.size() - 13);
  } else if (text.size() > 9 && text.substr(text.size() - 9) == ".ip6.arpa") {
    family = 6, want = 32, rest = text.substr(0, text.size() - 9);
  } else {
    return 0;
  }
  // Right to left: the label next to the suffix is the most significant.
  unsigned n = 0;
  while (!rest.empty() && n < want) {
    const size_t dot = rest.rfind('.');
    const std::string_view lab = dot == std::string_view::npos ? rest : rest.substr(dot + 1);
    unsigned v = 0;
    bool ok = !lab.empty();
    if (family == 4) {
      ok = ok && lab.size() <= 3;
      for (char c : lab) ok = ok && c >= '0' && c <= '9', v = v * 10 + unsigned(c - '0');
      ok = ok && v <= 255;
      if (ok) addr[n] = uint8_t(v);
    } else {
      ok = ok && lab.size() == 1 && std::isxdigit(static_cast<unsigned char>(lab[0]));
      if (ok) {
        v = unsigned(lab[0] <= '9' ? lab[0] - '0' : lab[0] - 'a' + 10);
        addr[n / 2] |= uint8_t(n % 2 ? v : v << 4);
      }
    }
    if (!ok) break;
    ++n;
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(0, dot);
  }
  if (!n) family = 0;
  return n;
}

bool ecs_zero(uint8_t* msg, size_t len, const ParseResult& pr) {
  if (pr.status != Status::Ok || !pr.ecs.present || len != pr.msg_len) return false;
  std::memset(msg + pr.ecs.addr_off, 0, pr.ecs.addr_len);
  return true;
}

size_t ecs_strip(uint8_t* msg, size_t len, const ParseResult& pr) {
  if (pr.status != Status::Ok || !pr.ecs.present || len != pr.msg_len) return 0;
  const Ecs& e = pr.ecs;
  for (unsigned i = 0; i < pr.n_labels; ++i)
    if (pr.labels[i].off > e.opt_off) return 0;
  const uint16_t rdlen = rd16(msg + e.opt_rr_rdlen_off) - e.opt_len;
  msg[e.opt_rr_rdlen_off] = uint8_t(rdlen >> 8);
  msg[e.opt_rr_rdlen_off + 1] = uint8_t(rdlen);
  std::memmove(msg + e.opt_off, msg + e.opt_off + e.opt_len, len - e.opt_off - e.opt_len);
  return len - e.opt_len;
}

}  // namespace amon::dns
