// tuneforge-server --listen HOST:PORT --db PATH [--builder-threads N] [--metrics-listen HOST:PORT]
//                  [--verbose|--quiet]
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "compiler/support/log.h"
#include "server/server.h"

namespace {

constexpr const char* kUsage =
    "usage: tuneforge-server [--listen HOST:PORT] [--db PATH] [--builder-threads N]\n"
    "                        [--tokens FILE] [--tls-cert FILE --tls-key FILE]\n"
    "                        [--metrics-listen HOST:PORT] [--verbose | --quiet]\n"
    "  Runs the tuneforge service: TuningService for users, AgentService for\n"
    "  tuneforge-agent processes, tuning log in a SQLite file.\n"
    "  --listen           address to serve on (default 127.0.0.1:7070; port 0 = any free)\n"
    "  --db               tuning-log database (default tuneforge.db)\n"
    "  --builder-threads  LLVM build threads (default: one per core)\n"
    "  --tokens           tokens file: lines 'ROLE NAME TOKEN', roles agent/user/admin;\n"
    "                     every RPC then needs a token (default: none, loopback only)\n"
    "  --tls-cert/--tls-key  serve TLS with this PEM certificate chain and key\n"
    "  --metrics-listen   serve /metrics (Prometheus) and /healthz over plain HTTP on\n"
    "                     this address, e.g. 127.0.0.1:9090 (default: off)\n";

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tuneforge-server: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  tuneforge::ServerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--listen") {
      if (!value(&options.listen)) return Fail("--listen needs a value");
    } else if (a == "--db") {
      if (!value(&options.db_path)) return Fail("--db needs a value");
    } else if (a == "--tls-cert") {
      if (!value(&options.tls_cert_path)) return Fail("--tls-cert needs a file");
    } else if (a == "--tls-key") {
      if (!value(&options.tls_key_path)) return Fail("--tls-key needs a file");
    } else if (a == "--tokens") {
      if (!value(&options.tokens_path)) return Fail("--tokens needs a file");
    } else if (a == "--metrics-listen") {
      if (!value(&options.metrics_listen) || options.metrics_listen.empty())
        return Fail("--metrics-listen needs HOST:PORT, e.g. 127.0.0.1:9090");
    } else if (a == "--builder-threads") {
      std::string v;
      if (!value(&v) || !absl::SimpleAtoi(v, &options.builder_threads) ||
          options.builder_threads < 1 || options.builder_threads > 256)
        return Fail("--builder-threads needs a number 1..256");
    } else if (a == "--verbose") {
      tuneforge::SetLogLevel(tuneforge::LogLevel::kDebug);
    } else if (a == "--quiet") {
      tuneforge::SetLogLevel(tuneforge::LogLevel::kWarning);
    } else {
      return Fail("unknown argument '" + a + "' (see --help)");
    }
  }
  tuneforge::SetLogPrefix("server");
  auto server = tuneforge::Server::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  // Print the port on stdout so scripts (and tests) can use --listen with port 0.
  std::printf("listening on port %d\n", (*server)->port());
  if ((*server)->metrics_port()) std::printf("metrics on port %d\n", (*server)->metrics_port());
  std::fflush(stdout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TF_LOG(Info) << "shutting down";
  (*server)->Shutdown();
  return 0;
}
