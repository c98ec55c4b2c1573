// HttpServer: a minimal HTTP/1.1 server on Boost.Asio + Boost.Beast for the
// operational endpoints (/metrics, /healthz) and the dashboard. One request per
// connection (the response closes it), GET, HEAD and POST only, bounded request size,
// a per-connection timeout and a cap on open connections, so a slow or hostile client
// cannot hold it, make it allocate or exhaust the process's descriptors.
//
// Thread-safe: the handler runs on the server's single I/O thread, one request at a
// time; it must be quick (render text, answer) and must not block on the network.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge::http {

struct Request {
  std::string method;  // "GET", "HEAD" or "POST"
  std::string path;    // the target without its query string ("/metrics")
  std::string query;   // after '?', still percent-encoded ("" when none)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  // The header's value, "" when absent.
  std::string Header(const std::string& lower_case_name) const;
  // The query parameter's decoded value, "" when absent.
  std::string Param(const std::string& name) const;
  // The cookie's value from the Cookie header, "" when absent.
  std::string Cookie(const std::string& name) const;
};

struct Response {
  Response() = default;
  Response(int status, std::string content_type, std::string body)
      : status(status), content_type(std::move(content_type)), body(std::move(body)) {}

  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

using Handler = std::function<Response(const Request& request)>;

// application/x-www-form-urlencoded (a query string or a form body) into its
// decoded name/value pairs; a later duplicate name replaces an earlier one.
std::map<std::string, std::string> ParseForm(const std::string& encoded);
// Percent-decoding with '+' as a space; malformed escapes are kept as written.
std::string UrlDecode(const std::string& s);

struct ServerOptions {
  std::string listen;                // HOST:PORT; port 0 picks a free port
  size_t max_request_bytes = 8192;   // request line + headers + body; larger -> 413
  int timeout_ms = 5000;             // to read the request and write the answer
  // Connections open at once; one more is closed as soon as it is accepted, so idle
  // clients cannot take the descriptors that gRPC and SQLite need.
  int max_connections = 32;
};

class Server {
 public:
  virtual ~Server() = default;
  // Binds and starts serving. InvalidArgument for a malformed address, Unavailable
  // when it cannot be bound (in use, not a local address).
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       Handler handler);
  virtual int port() const = 0;
  // Stops accepting and closes open connections; idempotent. The destructor calls it.
  virtual void Shutdown() = 0;
};

// Splits "host:port" / "[v6]:port"; InvalidArgument names what is wrong.
absl::Status ParseHostPort(const std::string& address, std::string* host, int* port);

}  // namespace tuneforge::http
