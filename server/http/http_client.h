// A tiny blocking HTTP/1.1 client on Boost.Asio, for tests and benchmarks that
// scrape /metrics or /healthz on loopback. Header-only; not for production use.
#pragma once

#include <boost/asio.hpp>

#include <string>

namespace tuneforge::http {

struct ClientResponse {
  int status = 0;      // 0: no HTTP answer (connection failed or closed early)
  std::string head;    // status line and headers
  std::string body;
  std::string error;   // what went wrong when status == 0
};

// Sends `raw` (a whole request) to host:port and reads until the server closes.
inline ClientResponse SendRaw(const std::string& host, int port, const std::string& raw) {
  namespace asio = boost::asio;
  ClientResponse r;
  try {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    asio::ip::tcp::resolver resolver(io);
    asio::connect(socket, resolver.resolve(host, std::to_string(port)));
    asio::write(socket, asio::buffer(raw));
    std::string all;
    boost::system::error_code ec;
    char buf[4096];
    for (;;) {
      size_t n = socket.read_some(asio::buffer(buf), ec);
      all.append(buf, n);
      if (ec) break;  // eof (the server closes after each answer) or reset
    }
    size_t split = all.find("\r\n\r\n");
    if (all.rfind("HTTP/1.", 0) != 0 || split == std::string::npos) {
      r.error = "no HTTP answer: " + all.substr(0, 80);
      return r;
    }
    r.head = all.substr(0, split);
    r.body = all.substr(split + 4);
    r.status = std::stoi(all.substr(9, 3));
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

inline ClientResponse Get(const std::string& host, int port, const std::string& path,
                          const std::string& method = "GET") {
  return SendRaw(host, port,
                 method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
}

}  // namespace tuneforge::http
