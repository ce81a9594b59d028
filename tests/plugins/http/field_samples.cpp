// HTTP fields for test_fields: one request carrying every request header
// field, one response carrying every response header field.
#include "field_samples.h"

namespace {

const std::string kRequest =
    "GET /path/x?q=1 HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: Agent/1.0\r\n"
    "Referer: http://ref.example.net/a\r\nCookie: session=abc\r\nAuthorization: Basic dXNlcg==\r\n"
    "X-Forwarded-For: 203.0.113.9\r\nOrigin: http://o.example.com\r\n"
    "Proxy-Authorization: Basic cHJveHk=\r\nX-Real-IP: 198.51.100.77\r\nFrom: user@mail.example\r\n\r\n";
const std::string kResponse =
    "HTTP/1.1 302 Found\r\nServer: srv/2\r\nSet-Cookie: id=42\r\nLocation: http://loc.example.org/b\r\n"
    "Content-Location: /c.html\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: gzip\r\n"
    "Cache-Control: max-age=60\r\nDate: Sun, 19 Oct 2014 19:12:11 GMT\r\nExpires: Sun, 19 Oct 2014 19:13:11 GMT\r\n"
    "Pragma: no-cache\r\nContent-Length: 0\r\n\r\n";

const amon_test::SampleSource kHttp([] {
  using amon_test::tcp4, amon_test::text;
  const amon_test::Bytes req = tcp4(text(kRequest), 40000, 80);
  const amon_test::Bytes rsp = tcp4(text(kResponse), 80, 40000);
  return amon_test::Samples{
      {"http.host", {req, "www.example.com"}},
      {"http.method", {req, "GET"}},
      {"http.uri", {req, "/path/x?q=1"}},
      {"http.user_agent", {req, "Agent/1.0"}},
      {"http.referer", {req, "http://ref.example.net/a"}},
      {"http.cookie", {req, "session=abc"}},
      {"http.authorization", {req, "Basic dXNlcg=="}},
      {"http.xff", {req, "203.0.113.9"}},
      {"http.origin", {req, "http://o.example.com"}},
      {"http.proxy_authorization", {req, "Basic cHJveHk="}},
      {"http.x_real_ip", {req, "198.51.100.77"}},
      {"http.from", {req, "user@mail.example"}},
      {"http.server", {rsp, "srv/2", false}},
      {"http.set_cookie", {rsp, "id=42", false}},
      {"http.location", {rsp, "http://loc.example.org/b", false}},
      {"http.other_headers", {rsp, "/c.html", false}},
      {"http.content_type", {rsp, "text/html; charset=utf-8", false}},
      {"http.content_encoding", {rsp, "gzip", false}},
      {"http.cache_control", {rsp, "max-age=60", false}},
      {"http.date", {rsp, "Sun, 19 Oct 2014 19:12:11 GMT", false}},
      {"http.expires", {rsp, "Sun, 19 Oct 2014 19:13:11 GMT", false}},
      {"http.pragma", {rsp, "no-cache", false}},
  };
});

}  // namespace
