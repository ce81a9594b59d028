// Length-preserving name masking shared by the DNS, TLS and HTTP rewriters.
//
// Every helper rewrites bytes in place and never changes a length, so TCP
// sequence numbers and DNS compression pointers stay valid. No helper
// allocates; all are safe on the packet path except registrable_label_count,
// which calls into libpsl (a hash lookup, no allocation visible to us but not
// free either: call it once per decided name, not per label).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace amon::names {

// SipHash-2-4 with a 64-bit key (expanded to 128 bits). A PRF rather than a
// fast mixer because masked names are published: an analyst holding a few
// (clear, masked) pairs must not be able to recover the key and unmask others.
uint64_t siphash64(uint64_t key, const void* data, size_t len);

// Seed for one label given the seed of the suffix to its right. Chaining
// right-to-left makes a label's mask depend on the label and everything to its
// right, so "example.com" masks the same inside every name that ends in it —
// in DNS (where compressed names share suffix bytes), SNI and Host alike.
// Labels are hashed lowercased: DNS 0x20 case randomisation must not change
// the mask (the case of each masked letter follows the original instead).
uint64_t label_seed(uint64_t key, const char* label, size_t len, uint64_t right_seed);

// Overwrite one label in place: letters -> pseudo-random letters (case kept),
// digits -> digits, '-' kept only in interior positions, any other byte
// (including '_', '.', binary) -> a letter. The result is always a valid LDH
// hostname label and always differs from the input, so "masked" is
// observable in tests and never a silent no-op.
void mask_label(char* p, size_t len, uint64_t seed);

// Filler of a hidden label: no host name has a label of underscores (it is
// not LDH, and DNS service labels such as _tcp always carry a name), so a
// hidden name is recognizable from a real one, in every carrier.
inline constexpr char kHiddenFill = '_';
void hide_label(char* p, size_t len);

// Fill with 'x' keeping '.' (so a redacted name still shows its label count).
void redact(char* p, size_t len);

// Fill with keyed pseudo-random letters and digits (for opaque values:
// cookies, tokens). Deterministic in seed.
void keyed_fill(char* p, size_t len, uint64_t seed);

// What to do with one name. The seed is a key-derived 64-bit value; the
// per-label seeds are derived from it with label_seed(), so passing the
// current key epoch's name key makes the same name map to the same mask in
// every packet and protocol.
enum class Action : uint8_t { Keep = 0, MaskLeftOf = 1, Mask = 2, Redact = 3 };
struct Decision {
  Action action = Action::Keep;
  uint8_t keep_labels = 0;  // MaskLeftOf: trailing labels left in clear
  // Redact: dots too become 'x' where a name travels as text (SNI, HTTP),
  // so only its total length shows. DNS wire names keep their label lengths
  // whatever this says: their length bytes are the message's structure
  // (compression pointers point at label starts).
  bool flat = false;
  uint64_t seed = 0;
  // Mask/MaskLeftOf: the labels to mask become kHiddenFill instead of keyed
  // letters. z-anonymity's hidden names: no pseudonym (unlinkable), the same
  // form for every name of one layout (a meter counts them as one), nothing
  // random (runs are reproducible).
  bool hide = false;
  static constexpr Decision keep() { return {}; }
  static constexpr Decision mask(uint64_t s) { return {Action::Mask, 0, false, s}; }
  static constexpr Decision mask_left_of(uint8_t n_keep, uint64_t s) { return {Action::MaskLeftOf, n_keep, false, s}; }
  static constexpr Decision redact(bool flat = false) { return {Action::Redact, 0, flat, 0}; }
  // Labels left of the last n_keep (all when 0) hidden.
  static constexpr Decision hidden(uint8_t n_keep = 0) {
    return {n_keep ? Action::MaskLeftOf : Action::Mask, n_keep, false, 0, true};
  }
};

// Number of labels of a dotted name (trailing dot ignored; "" and "." -> 0).
unsigned count_labels(std::string_view name);

// How many trailing labels form the registrable domain of `name` (libpsl
// builtin list, e.g. "a.b.example.co.uk" -> 3). If the name is itself a public
// suffix, or has no registrable domain, returns the name's full label count
// (nothing is "left of" it, so MaskLeftOf keeps all: the name is public).
// Names longer than 253 characters return 0 (mask everything).
unsigned registrable_label_count(std::string_view name);

// Apply a decision to a presentation-form dotted name held in place (TLS SNI,
// HTTP Host/Referer host). Labels are split on '.'; a trailing dot is kept.
// Masks match the DNS wire masks of the same name (same label_seed chain).
void apply_to_text(char* p, size_t len, const Decision& d);

// Label-span form used by DNS: `labels[i]` points at label i's bytes (left to
// right), `lens[i]` its length. Masks the labels selected by `d`.
void apply_to_labels(char* const* labels, const uint8_t* lens, unsigned n, const Decision& d);

// A NetBIOS name as people write it (an agent's report, a certificate's
// account name, a DNS query for the host) from its first-level encoding
// (RFC 1001 14.1: 32 letters 'A'..'P', either case; what follows them, a
// scope, is not read): its 15 characters without their padding, into
// out. 0 when the text is no such encoding, when its name has a byte that
// is not printable ASCII (__MSBROWSE__'s), or when it is dotted: a DNS
// name a resolver asked over NBNS as its fallback (IPV6.GOOGLE.COM), no
// device's, which travels elsewhere as the DNS name it is.
unsigned netbios_plain(std::string_view encoded, char out[15]);

}  // namespace amon::names
