// The IRC plugin: the line reader on crafted bytes (DCC requests' addresses
// in their three forms, requests that name none, what fails closed, lines
// cut by a segment's end, where a line starts), then registered as the
// product registers it and run through a consumer's policy on built frames
// (the sender's own address as its header's rewrite, another client's by
// its role, written back in its form at its length; a malformed request
// cut), and its values as amon audit reads them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "addr_forms.h"
#include "addr_text.h"
#include "amon_irc.hpp"
#include "frames.h"
#include "plugin_consumer.h"
#include "registry.h"
#include "values.h"

using namespace amon;
using namespace amon_test;
namespace irc = amon::irc;

namespace {

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

irc::Result run(const std::string& s, irc::Parsed& r) {
  const Bytes b = text(s);
  return irc::parse(b.data(), uint32_t(b.size()), r);
}

// The addresses found, as the text they were written in.
std::vector<std::string> found(const std::string& s) {
  irc::Parsed r;
  REQUIRE(run(s, r) == irc::Result::Ok);
  std::vector<std::string> v;
  for (unsigned i = 0; i < r.n; ++i) v.push_back(s.substr(r.addr[i].off, r.addr[i].len));
  return v;
}

const std::string kCtcp = "\x01";

}  // namespace

TEST_CASE("irc: a DCC request's address in its three forms", "[plugins][irc]") {
  irc::Parsed r;
  const std::string send = "PRIVMSG bob :" + kCtcp + "DCC SEND report.pdf 3232235781 5000 123456" + kCtcp + "\r\n";
  REQUIRE(run(send, r) == irc::Result::Ok);
  REQUIRE(r.n == 1);
  CHECK(send.substr(r.addr[0].off, r.addr[0].len) == "3232235781");
  CHECK(r.addr[0].family == 4);
  CHECK(r.addr[0].form == AddrForm::Decimal);
  CHECK(r.lines == 1);
  const std::string chat = ":alice!al@host PRIVMSG bob :" + kCtcp + "DCC CHAT chat 192.168.1.77 6000" + kCtcp + "\r\n";
  REQUIRE(run(chat, r) == irc::Result::Ok);
  REQUIRE(r.n == 1);
  CHECK(r.addr[0].form == AddrForm::Text);
  CHECK(chat.substr(r.addr[0].off, r.addr[0].len) == "192.168.1.77");
  const std::string six = "PRIVMSG bob :" + kCtcp + "DCC SEND f 2001:db8::77 5000 10" + kCtcp + "\n";
  REQUIRE(run(six, r) == irc::Result::Ok);
  REQUIRE(r.n == 1);
  CHECK(r.addr[0].family == 6);
  CHECK(six.substr(r.addr[0].off, r.addr[0].len) == "2001:db8::77");
  // Quoted file names with spaces, the type in lower case, the closing
  // \x01 left out, XMIT and a type not known here read the same way,
  // several requests on several lines.
  CHECK(found("PRIVMSG bob :" + kCtcp + "DCC SEND \"my file.txt\" 3232235781 5000 10" + kCtcp + "\r\n") ==
        std::vector<std::string>{"3232235781"});
  CHECK(found("PRIVMSG bob :" + kCtcp + "dcc send f 16909060 5000\r\n") == std::vector<std::string>{"16909060"});
  CHECK(found("NOTICE bob :" + kCtcp + "DCC XMIT clear 3232235781 5000" + kCtcp + "\r\nPRIVMSG bob :" + kCtcp +
              "DCC TSEND f 10.1.2.3 7000 5" + kCtcp + "\r\n") == std::vector<std::string>{"3232235781", "10.1.2.3"});
  // No address: RESUME/ACCEPT, a passive request's placeholder (0/8),
  // CTCP that is no DCC, plain text that speaks of DCC.
  CHECK(found("PRIVMSG bob :" + kCtcp + "DCC RESUME f.txt 5000 1024" + kCtcp + "\r\n").empty());
  CHECK(found("PRIVMSG bob :" + kCtcp + "DCC ACCEPT f.txt 0 1024 77" + kCtcp + "\r\n").empty());
  CHECK(found("PRIVMSG bob :" + kCtcp + "DCC SEND f 199 0 1024 77" + kCtcp + "\r\n").empty());
  CHECK(found("PRIVMSG bob :" + kCtcp + "ACTION waves" + kCtcp + " DCC SEND f 3232235781 5000\r\n").empty());
  CHECK(found(":srv 001 bob :Welcome bob!b@192.168.1.5\r\n").empty());
}

TEST_CASE("irc: a DCC request that cannot be read fails", "[plugins][irc]") {
  irc::Parsed r;
  const std::vector<std::string> bad = {
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 4294967296 5000" + kCtcp + "\r\n",   // past 32 bits
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 32322357810 5000" + kCtcp + "\r\n",  // 11 digits
      "PRIVMSG bob :" + kCtcp + "DCC SEND f host.example 5000" + kCtcp + "\r\n",  // a name
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 192.168.1.300 5000" + kCtcp + "\r\n",
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 2001:db8::77%eth0 5000" + kCtcp + "\r\n",
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781 70000" + kCtcp + "\r\n",  // no port
      "PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781" + kCtcp + "\r\n",
      "PRIVMSG bob :" + kCtcp + "DCC SEND \"f 3232235781 5000" + kCtcp + "\r\n",  // a quote left open
      "PRIVMSG bob :" + kCtcp + "DCC RESUME f" + kCtcp + "\r\n",
      "PRIVMSG bob :" + kCtcp + "DCC" + kCtcp + "\r\n",
      "PRIVMSG bob :" + kCtcp + "DCC SEND f " + std::string(600, ' ') + "3232235781 5000" + kCtcp + "\r\n",
      "PRIVMSG bob :" + std::string(9000, 'a') + "\r\n",  // a line too long
  };
  for (const std::string& s : bad) {
    INFO(s.substr(0, 80));
    CHECK(run(s, r) == irc::Result::Malformed);
  }
  Bytes nul = text("PRIVMSG bob :hi\r\n");
  nul[3] = 0;
  CHECK(irc::parse(nul.data(), uint32_t(nul.size()), r) == irc::Result::Malformed);
}

TEST_CASE("irc: a segment that ends inside a DCC request is incomplete", "[plugins][irc]") {
  irc::Parsed r;
  const std::string line = "PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781 5000 10" + kCtcp + "\r\n";
  const std::string before = "PING :x\r\n";
  const size_t ctcp = before.size() + line.find(kCtcp);
  // Cut anywhere from the \x01 to the closing one: held.
  for (size_t cut = ctcp + 1; cut < before.size() + line.size() - 2; ++cut) {
    INFO(cut);
    CHECK(run((before + line).substr(0, cut), r) == irc::Result::Incomplete);
    CHECK(r.cut_line == before.size());
    CHECK(r.open_dcc == ctcp);
  }
  // Cut before the \x01, inside CTCP that cannot become a DCC request, or
  // after the closing \x01: whole up to the cut.
  CHECK(run((before + line).substr(0, ctcp), r) == irc::Result::Ok);
  CHECK(run("PRIVMSG bob :" + kCtcp + "ACTION wav", r) == irc::Result::Ok);
  CHECK(run("PRIVMSG bob :" + kCtcp + "DCX", r) == irc::Result::Ok);
  CHECK(run("PRIVMSG bob :" + kCtcp + "dc", r) == irc::Result::Incomplete);
  CHECK(run(line.substr(0, line.size() - 2), r) == irc::Result::Ok);
  CHECK(r.n == 1);
  // A cut request longer than a message can be: no request.
  CHECK(run("PRIVMSG bob :" + kCtcp + "DCC SEND " + std::string(600, 'f'), r) == irc::Result::Malformed);
}

TEST_CASE("irc: where a line starts", "[plugins][irc]") {
  auto starts = [](const std::string& s) { return irc::line_start(reinterpret_cast<const uint8_t*>(s.data()), uint32_t(s.size())); };
  CHECK(starts("NICK bob\r\n"));
  CHECK(starts("PRIVMSG bob :hi\r\n"));
  CHECK(starts(":irc.example 001 bob :Welcome\r\n"));
  CHECK(starts(":bob!b@10.0.0.1 PRIVMSG #c :hi\r\n"));
  CHECK(starts("@time=2024-01-01T00:00:00Z :bob!b@h PRIVMSG #c :hi\r\n"));
  CHECK(starts("QUIT\r\n"));
  // A line's rest: a request's arguments, text, a number, a partial command.
  CHECK_FALSE(starts("SEND f 3232235781 5000\x01\r\n"));
  CHECK_FALSE(starts("3232235781 5000 10\x01\r\n"));
  CHECK_FALSE(starts("hello there\r\n"));
  CHECK_FALSE(starts("PRIV"));
  CHECK_FALSE(starts(":"));
  CHECK_FALSE(starts("N"));
  CHECK_FALSE(starts(": PRIVMSG x :y\r\n"));
}

namespace {

const auto kClient = v4("192.168.1.5"), kPeer = v4("192.168.1.77"), kServer = v4("203.0.113.9");
const auto kOther = v4("198.51.100.20");
constexpr size_t kPayload = 14 + 20 + 20;

Bytes segment(const std::string& pl, bool from_client = true) {
  V4 h;
  h.proto = 6;
  h.src = from_client ? kClient : kServer, h.dst = from_client ? kServer : kClient;
  return cat({eth(0x0800), ipv4(h, cat({from_client ? tcp_hdr(50000, 6667) : tcp_hdr(6667, 50000), text(pl)}))});
}

// The address written at p[off, off + len) in form f.
Bytes read_at(const Bytes& f, size_t off, size_t len, AddrForm form, uint8_t family = 4) {
  uint8_t a[16];
  REQUIRE(read_addr_form(f.data() + kPayload + off, uint32_t(len), form, family, a));
  return Bytes(a, a + (family == 4 ? 4 : 16));
}

Bytes arr(const std::array<uint8_t, 4>& a) { return Bytes(a.begin(), a.end()); }

bool holds(const Bytes& f, const std::string& s) {
  const Bytes b = text(s);
  return std::search(f.begin(), f.end(), b.begin(), b.end()) != f.end();
}

const char* kPolicy =
    "clients = { 192.168.0.0/16 }\n"
    "ip.client : prefix(12)\n"
    "ip.server : keep()\n"
    "payload : keep()\n";

}  // namespace

TEST_CASE("irc: DCC addresses take their role's rewrite, in their form and length", "[plugins][irc]") {
  PluginConsumer c(register_builtin_plugins, kPolicy);
  // The client's own address (decimal), another client's (dotted), a host
  // outside `clients` (ip.server's keep), in one segment.
  const std::string pl = "PRIVMSG bob :" + kCtcp + "DCC SEND f.txt 3232235781 5000 99" + kCtcp +
                         "\r\nPRIVMSG bob :" + kCtcp + "DCC CHAT chat 192.168.1.77 6000" + kCtcp +
                         "\r\nPRIVMSG carol :" + kCtcp + "DCC SEND g 3325256724 5001 1" + kCtcp + "\r\n";
  Bytes f = segment(pl);
  const size_t size = f.size();
  REQUIRE(c.run(f) == Verdict::Forward);
  REQUIRE(f.size() == size);
  const Bytes src(f.begin() + 26, f.begin() + 30);  // the header's rewrite of the client
  CHECK(src == Bytes({192, 160, 0, 0}));
  const size_t dec = pl.find("3232235781"), dot = pl.find("192.168.1.77"), other = pl.find("3325256724");
  CHECK(read_at(f, dec, 10, AddrForm::Decimal) == src);
  CHECK(read_at(f, dot, 12, AddrForm::Text) == Bytes({192, 160, 0, 0}));
  CHECK(read_at(f, other, 10, AddrForm::Decimal) == arr(kOther));
  CHECK_FALSE(holds(f, "3232235781"));
  CHECK_FALSE(holds(f, "192.168.1.77"));
  CHECK(holds(f, "3325256724"));
  CHECK(c.c.addr_text >= 2);
  // A shorter number is padded with leading zeros; one the new address
  // cannot fit becomes the zero address at that length.
  Bytes g = segment("PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781 5000" + kCtcp + "\r\n");
  REQUIRE(c.run(g) == Verdict::Forward);
  CHECK(holds(g, "3231711232"));  // 192.160.0.0
  const auto wide = v4("200.0.0.1");
  char t[16];
  CHECK(fit_addr_form(wide.data(), 4, AddrForm::Decimal, 12, t));
  CHECK(std::string(t, 12) == "003355443201");
  CHECK_FALSE(fit_addr_form(wide.data(), 4, AddrForm::Decimal, 8, t));
  CHECK(std::string(t, 8) == "00000000");
}

TEST_CASE("irc: an IPv6 DCC address takes its role's rewrite", "[plugins][irc]") {
  PluginConsumer c(register_builtin_plugins,
                   "clients = { fd00::/8 }\nip.client : prefix(12, v6=16)\nip.server : keep()\npayload : keep()\n");
  const std::string pl = "PRIVMSG bob :" + kCtcp + "DCC SEND f fd12:3456::77 5000 9" + kCtcp + "\r\n";
  Bytes f = segment(pl);
  REQUIRE(c.run(f) == Verdict::Forward);
  const Bytes a = read_at(f, pl.find("fd12"), 13, AddrForm::Text, 6);
  CHECK(a[0] == 0xfd);
  CHECK(a[1] == 0x12);
  CHECK(std::all_of(a.begin() + 2, a.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("irc: a malformed DCC request fails closed, others pass", "[plugins][irc]") {
  PluginConsumer c(register_builtin_plugins, std::string(kPolicy) + "on_error = cut\n");
  Bytes f = segment("PRIVMSG bob :" + kCtcp + "DCC SEND f 32322357810 5000" + kCtcp + "\r\n");
  const Verdict v = c.run(f);
  CHECK((v == Verdict::Drop || !holds(f, "32322357810")));
  // A server's lines, no request: kept as they came; the client's own
  // address in text takes its header's rewrite (addr_text).
  PluginConsumer s(register_builtin_plugins, kPolicy, false);
  Bytes g = segment(":irc.example 001 bob :Welcome bob!b@192.168.1.5\r\n:irc.example 005 bob :are supported\r\n", false);
  REQUIRE(s.run(g) == Verdict::Forward);
  CHECK(holds(g, ":irc.example 005 bob :are supported\r\n"));
  CHECK_FALSE(holds(g, "192.168.1.5"));
}

TEST_CASE("irc: a direction whose first segment starts inside a line fails closed", "[plugins][irc]") {
  PluginConsumer c(register_builtin_plugins, std::string(kPolicy) + "on_error = cut\n");
  Bytes f = segment("SEND f 3232235781 5000 99" + kCtcp + "\r\nPRIVMSG bob :hi\r\n");
  const Verdict v = c.run(f);
  CHECK((v == Verdict::Drop || !holds(f, "3232235781")));
  // The next one that starts a line is read.
  Bytes g = segment("PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781 5000" + kCtcp + "\r\n");
  REQUIRE(c.run(g) == Verdict::Forward);
  CHECK_FALSE(holds(g, "3232235781"));
}

TEST_CASE("irc: amon audit reads a DCC address as the address it names", "[plugins][irc]") {
  register_builtin_plugins();
  const std::string pl = "PRIVMSG bob :" + kCtcp + "DCC SEND f 3232235781 5000" + kCtcp + "\r\n";
  const Bytes f = segment(pl);
  PayloadValues pv(PayloadValues::Datagrams::Recognised);
  std::vector<Bytes> seen;
  pv.read(6, f.data() + kPayload, uint32_t(f.size() - kPayload), 50000, 6667, true,
          [&](const ProtocolPlugin& p, const ProtoOcc& o) {
            if (std::string(p.name) != "irc" || !o.role) return;
            CHECK(o.form == AddrForm::Decimal);
            uint8_t a[4];
            REQUIRE(read_addr_form(f.data() + kPayload + o.off, o.len, o.form, 4, a));
            seen.push_back(Bytes(a, a + 4));
          });
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == arr(kClient));
}
