// tuneforge-server --listen HOST:PORT --db PATH [--builder-threads N] [--verbose|--quiet]
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
    "                        [--max-redispatch R] [--heartbeat-ms MS]\n"
    "                        [--lease-grace-ms MS] [--golden-interval-s S]\n"
    "                        [--no-golden-check] [--verbose | --quiet]\n"
    "  Runs the tuneforge service: TuningService for users, AgentService for\n"
    "  tuneforge-agent processes, tuning log in a SQLite file.\n"
    "  --listen           address to serve on (default 127.0.0.1:7070; port 0 = any free)\n"
    "  --db               tuning-log database (default tuneforge.db)\n"
    "  --builder-threads  LLVM build threads (default: one per core)\n"
    "  --tokens           tokens file: lines 'ROLE NAME TOKEN', roles agent/user/admin;\n"
    "                     every RPC then needs a token (default: none, loopback only)\n"
    "  --tls-cert/--tls-key  serve TLS with this PEM certificate chain and key\n"
    "  --max-redispatch   a MeasureRequest whose agent is lost (disconnected, or its\n"
    "                     lease expired) goes to another agent at most R times, then\n"
    "                     is recorded as agent_lost (default 2, 0..10)\n"
    "  --heartbeat-ms     agents' heartbeat interval; an agent silent for 3 intervals\n"
    "                     is lost and its leases expire (default 2000, 50..60000)\n"
    "  --lease-grace-ms   a lease also expires at the request's timeout plus this\n"
    "                     (default 10000)\n"
    "  --golden-interval-s  re-run the golden kernel on every agent this often (default\n"
    "                     600; 0: only when an agent connects). An agent with a wrong\n"
    "                     golden result, or more than 3x slower than the median of its\n"
    "                     peers (twice), is quarantined\n"
    "  --no-golden-check  trust agents: no golden kernel at all (simulated agents)\n";

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
    } else if (a == "--builder-threads") {
      std::string v;
      if (!value(&v) || !absl::SimpleAtoi(v, &options.builder_threads) ||
          options.builder_threads < 1 || options.builder_threads > 256)
        return Fail("--builder-threads needs a number 1..256");
    } else if (a == "--max-redispatch" || a == "--heartbeat-ms" || a == "--lease-grace-ms") {
      std::string v;
      int n = 0;
      if (!value(&v) || !absl::SimpleAtoi(v, &n)) return Fail(a + " needs an integer");
      if (a == "--max-redispatch") options.dispatch.max_redispatch = n;
      if (a == "--heartbeat-ms") options.dispatch.heartbeat_interval_ms = n;
      if (a == "--lease-grace-ms") options.dispatch.lease_grace_ms = n;
      absl::Status valid = options.dispatch.Validate();
      if (!valid.ok()) return Fail(a + ": " + std::string(valid.message()));
    } else if (a == "--golden-interval-s") {
      std::string v;
      if (!value(&v) || !absl::SimpleAtoi(v, &options.health.interval_s))
        return Fail("--golden-interval-s needs an integer");
      absl::Status valid = options.health.Validate();
      if (!valid.ok()) return Fail("--golden-interval-s: " + std::string(valid.message()));
    } else if (a == "--no-golden-check") {
      options.golden_check = false;
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
  std::fflush(stdout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TF_LOG(Info) << "shutting down";
  (*server)->Shutdown();
  return 0;
}
