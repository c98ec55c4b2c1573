// HttpServer: a minimal HTTP/1.1 server on Boost.Asio + Boost.Beast for the
// operational endpoints (/metrics, /healthz). One request per connection (the
// response closes it), GET and HEAD only, bounded request size, a per-connection
// timeout and a cap on open connections, so a slow or hostile client cannot hold it,
// make it allocate or exhaust the process's descriptors.
//
// Thread-safe: the handler runs on the server's single I/O thread, one request at a
// time; it must be quick (render text, answer) and must not block on the network.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tuneforge::http {

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// `path` is the request target without its query string ("/metrics").
using Handler = std::function<Response(const std::string& path)>;

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
