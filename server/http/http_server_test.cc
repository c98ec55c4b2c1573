// The HTTP server on loopback with a real client: routing, methods, size limits,
// address errors.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "server/http/http_client.h"

namespace tuneforge::http {
namespace {

std::unique_ptr<Server> StartEcho(size_t max_request_bytes = 8192) {
  ServerOptions options{"127.0.0.1:0", max_request_bytes, 5000};
  auto server = Server::Start(options, [](const Request& request) {
    if (request.path == "/hello") {
      if (request.method == "POST") return Response{405, "text/plain", "no posts\n"};
      return Response{200, "text/plain", "hello\n"};
    }
    if (request.path == "/echo") {
      Response r{200, "text/plain",
                 request.method + "|" + request.Param("q") + "|" + request.Cookie("sid") + "|" +
                     request.Header("x-thing") + "|" + request.body};
      r.headers.push_back({"Set-Cookie", "sid=abc; HttpOnly"});
      return r;
    }
    return Response{404, "text/plain", "nope\n"};
  });
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(HttpServerTest, RoutesGetAndHead) {
  auto server = StartEcho();
  ASSERT_TRUE(server);
  ASSERT_GT(server->port(), 0);
  ClientResponse ok = Get("127.0.0.1", server->port(), "/hello?x=1");
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body, "hello\n");
  EXPECT_NE(ok.head.find("Content-Length: 6"), std::string::npos) << ok.head;
  ClientResponse head = Get("127.0.0.1", server->port(), "/hello", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/other").status, 404);
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/hello", "POST").status, 405);
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/hello", "PUT").status, 405);
  EXPECT_EQ(SendRaw("127.0.0.1", server->port(), "NOT HTTP AT ALL\r\n\r\n").status, 400);
}

TEST(HttpServerTest, HandlerSeesMethodQueryHeadersCookiesAndBody) {
  auto server = StartEcho();
  ASSERT_TRUE(server);
  ClientResponse r = SendRaw("127.0.0.1", server->port(),
                             "POST /echo?a=1&q=x%20y+z%3C HTTP/1.1\r\nHost: h\r\n"
                             "Cookie: other=1; sid=s3cr3t\r\nX-Thing: v\r\n"
                             "Content-Length: 9\r\n\r\ntoken=abc");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "POST|x y z<|s3cr3t|v|token=abc");
  EXPECT_NE(r.head.find("Set-Cookie: sid=abc; HttpOnly"), std::string::npos) << r.head;
}

TEST(HttpFormTest, DecodesPairsAndKeepsMalformedEscapes) {
  std::map<std::string, std::string> f = ParseForm("a=1&b=%41%2b+c&&d&e=%zz&a=2");
  EXPECT_EQ(f["a"], "2");
  EXPECT_EQ(f["b"], "A+ c");
  EXPECT_EQ(f["d"], "");
  EXPECT_EQ(f["e"], "%zz");
  EXPECT_EQ(UrlDecode("%4"), "%4");
}

TEST(HttpServerTest, OversizedRequestsAreRefused) {
  auto server = StartEcho(1024);
  ASSERT_TRUE(server);
  std::string big = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(4000, 'a') + "\r\n\r\n";
  EXPECT_EQ(SendRaw("127.0.0.1", server->port(), big).status, 413);
  std::string body = "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
                     std::string(2000, 'b');
  EXPECT_EQ(SendRaw("127.0.0.1", server->port(), body).status, 413);
  // Still serving afterwards.
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/hello").status, 200);
}

TEST(HttpServerTest, BadAddressesAreClearErrors) {
  auto handler = [](const Request&) { return Response{}; };
  for (const char* bad : {"nocolon", ":80", "127.0.0.1:99999", "127.0.0.1:http", "[::1:80"}) {
    auto s = Server::Start(ServerOptions{bad}, handler);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s.status();
    EXPECT_NE(std::string(s.status().message()).find(bad), std::string::npos) << s.status();
  }
  auto first = StartEcho();
  ASSERT_TRUE(first);
  auto taken = Server::Start(ServerOptions{"127.0.0.1:" + std::to_string(first->port())}, handler);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
}

// Idle connections up to the cap are held (until their timeout); one more is closed
// at once, so no client can take every descriptor of the process. Served again when
// the idle ones are gone.
TEST(HttpServerTest, OpenConnectionsAreCappedAndIdleOnesTimeOut) {
  ServerOptions options{"127.0.0.1:0", 8192, 400, 3};
  auto server = Server::Start(options, [](const Request&) { return Response{200, "text/plain", "ok\n"}; });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto connect = [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  };
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(connect());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all three accepted
  const auto start = std::chrono::steady_clock::now();
  ClientResponse refused = Get("127.0.0.1", port, "/x");
  EXPECT_EQ(refused.status, 0) << "a fourth connection was served";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));  // closed, not held
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the idle ones time out
  EXPECT_EQ(Get("127.0.0.1", port, "/x").status, 200);
  for (int fd : idle) close(fd);
  EXPECT_FALSE(Server::Start(ServerOptions{"127.0.0.1:0", 8192, 400, 0}, [](const Request&) {
                 return Response{};
               }).ok());
}

TEST(HttpServerTest, ShutdownIsIdempotentAndStopsServing) {
  auto server = StartEcho();
  ASSERT_TRUE(server);
  int port = server->port();
  server->Shutdown();
  server->Shutdown();
  EXPECT_EQ(Get("127.0.0.1", port, "/hello").status, 0);
}

}  // namespace
}  // namespace tuneforge::http
