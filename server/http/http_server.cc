// A small HTTP/1.1 server on Boost.Asio (metrics and health endpoints).
#include "server/http/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "compiler/support/log.h"

namespace tuneforge::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

absl::Status ParseHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError("address '" + address + "' is not HOST:PORT");
  }
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') {
      return absl::InvalidArgumentError("address '" + address + "': unbalanced [ ] around the host");
    }
    h = h.substr(1, h.size() - 2);
  }
  int p = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError("address '" + address + "': port must be 0..65535");
  }
  *host = h;
  *port = p;
  return absl::OkStatus();
}

std::string UrlDecode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> ParseForm(const std::string& encoded) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= encoded.size()) {
    size_t end = encoded.find('&', start);
    if (end == std::string::npos) end = encoded.size();
    std::string pair = encoded.substr(start, end - start);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      out[UrlDecode(pair.substr(0, eq))] = eq == std::string::npos ? "" : UrlDecode(pair.substr(eq + 1));
    }
    start = end + 1;
  }
  return out;
}

std::string Request::Header(const std::string& lower_case_name) const {
  auto it = headers.find(lower_case_name);
  return it == headers.end() ? "" : it->second;
}

std::string Request::Param(const std::string& name) const {
  std::map<std::string, std::string> params = ParseForm(query);
  auto it = params.find(name);
  return it == params.end() ? "" : it->second;
}

std::string Request::Cookie(const std::string& name) const {
  std::string all = Header("cookie");
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find(';', start);
    if (end == std::string::npos) end = all.size();
    size_t b = all.find_first_not_of(' ', start);
    if (b != std::string::npos && b < end) {
      std::string pair = all.substr(b, end - b);
      size_t eq = pair.find('=');
      if (eq != std::string::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
    }
    start = end + 1;
  }
  return "";
}

namespace {

// One connection: read one request (bounded), answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `open` counts the sessions alive (touched only on the I/O thread).
  Session(tcp::socket socket, const Handler* handler, const ServerOptions* options, int* open)
      : stream_(std::move(socket)), handler_(handler), options_(options), open_(open) {
    ++*open_;
    parser_.header_limit(static_cast<std::uint32_t>(options_->max_request_bytes));
    parser_.body_limit(options_->max_request_bytes);
  }
  ~Session() { --*open_; }

  void Start() {
    stream_.expires_after(std::chrono::milliseconds(options_->timeout_ms));
    bhttp::async_read(stream_, buffer_, parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::body_limit ||
        ec == bhttp::error::buffer_overflow) {
      return Answer(Response{413, "text/plain; charset=utf-8", "request too large\n"}, 11, false);
    }
    if (ec) {
      // Timeout, reset, or not HTTP: answer what can be answered, else just close.
      if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout) return Close();
      return Answer(Response{400, "text/plain; charset=utf-8", "bad request\n"}, 11, false);
    }
    const auto& req = parser_.get();
    bool head = req.method() == bhttp::verb::head;
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::post && !head) {
      return Answer(Response{405, "text/plain; charset=utf-8", "only GET, HEAD and POST\n"},
                    req.version(), false);
    }
    Request request;
    request.method = std::string(req.method_string());
    std::string target(req.target());
    size_t question = target.find('?');
    request.path = target.substr(0, question);
    if (question != std::string::npos) request.query = target.substr(question + 1);
    for (const auto& field : req) {
      request.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
          std::string(field.value());
    }
    request.body = req.body();
    Response response;
    try {
      response = (*handler_)(request);
    } catch (const std::exception& e) {
      TF_LOG(Error) << "http handler for " << request.path << " failed: " << e.what();
      response = Response{500, "text/plain; charset=utf-8", "internal error\n"};
    }
    Answer(std::move(response), req.version(), head);
  }

  void Answer(Response r, unsigned version, bool head) {
    response_.version(version);
    response_.result(static_cast<unsigned>(r.status));
    response_.set(bhttp::field::server, "tuneforge");
    response_.set(bhttp::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) response_.insert(name, value);
    response_.keep_alive(false);
    response_.body() = std::move(r.body);
    response_.prepare_payload();  // Content-Length of the full body, also for HEAD
    if (head) response_.body().clear();
    stream_.expires_after(std::chrono::milliseconds(options_->timeout_ms));
    if (head) {
      serializer_ = std::make_unique<bhttp::response_serializer<bhttp::string_body>>(response_);
      bhttp::async_write_header(stream_, *serializer_,
                                [self = shared_from_this()](beast::error_code, size_t) { self->Close(); });
      return;
    }
    bhttp::async_write(stream_, response_,
                       [self = shared_from_this()](beast::error_code, size_t) { self->Close(); });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  const Handler* handler_;
  const ServerOptions* options_;
  int* open_;
  beast::flat_buffer buffer_{8192};
  bhttp::request_parser<bhttp::string_body> parser_;
  bhttp::response<bhttp::string_body> response_;
  std::unique_ptr<bhttp::response_serializer<bhttp::string_body>> serializer_;
};

class ServerImpl : public Server {
 public:
  ServerImpl(ServerOptions options, Handler handler)
      : options_(std::move(options)), handler_(std::move(handler)), acceptor_(io_) {}
  ~ServerImpl() override { Shutdown(); }

  absl::Status Bind() {
    std::string host;
    int port = 0;
    absl::Status st = ParseHostPort(options_.listen, &host, &port);
    if (!st.ok()) return st;
    beast::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || endpoints.empty()) {
      return absl::InvalidArgumentError("address '" + options_.listen + "': cannot resolve host '" +
                                        host + "': " + ec.message());
    }
    tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError("cannot listen on " + options_.listen + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Shutdown() override {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (stopped_) return;
    stopped_ = true;
    io_.stop();  // abandons pending operations; their sessions are freed with io_
    if (thread_.joinable()) thread_.join();
    beast::error_code ignored;
    acceptor_.close(ignored);  // new connections are refused, not left hanging
  }

 private:
  void Accept() {
    acceptor_.async_accept(io_, [this](beast::error_code ec, tcp::socket socket) {
      if (!ec && open_sessions_ >= options_.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);  // full: refused at once, not queued
      } else if (!ec) {
        std::make_shared<Session>(std::move(socket), &handler_, &options_, &open_sessions_)->Start();
      }
      if (acceptor_.is_open()) Accept();
    });
  }

  const ServerOptions options_;
  const Handler handler_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
  int open_sessions_ = 0;  // I/O thread only
  std::mutex shutdown_mu_;
  bool stopped_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      Handler handler) {
  if (options.max_request_bytes < 256) {
    return absl::InvalidArgumentError("max_request_bytes must be at least 256");
  }
  if (options.max_connections < 1) return absl::InvalidArgumentError("max_connections must be at least 1");
  auto server = std::make_unique<ServerImpl>(options, std::move(handler));
  absl::Status st = server->Bind();
  if (!st.ok()) return st;
  return server;
}

}  // namespace tuneforge::http
