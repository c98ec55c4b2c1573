// tuneforge-server [--config FILE] [--listen HOST:PORT] [--db PATH] ... (see --help and
// server/server_config.h).
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "compiler/support/allocator.h"
#include "compiler/support/log.h"
#include "server/server.h"
#include "server/server_config.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tuneforge-server: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<tuneforge::ServerCommandLine> cl =
      tuneforge::ParseServerCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!cl.ok()) return Fail(std::string(cl.status().message()));
  if (cl->help) {
    std::fputs(tuneforge::kServerUsage, stdout);
    return 0;
  }
  if (cl->log_level) tuneforge::SetLogLevel(*cl->log_level);
  tuneforge::SetLogFormat(cl->log_format);
  tuneforge::SetLogPrefix("server");
  TF_LOG(Debug) << "allocator: " << tuneforge::AllocatorName();
  // Before anything is printed: a SIGTERM right after "listening on port" (a script, a
  // supervisor) must shut down cleanly, not kill the process mid-write.
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto server = tuneforge::Server::Start(cl->options);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  // Print the port on stdout so scripts (and tests) can use --listen with port 0.
  std::printf("listening on port %d\n", (*server)->port());
  if ((*server)->metrics_port()) std::printf("metrics on port %d\n", (*server)->metrics_port());
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TF_LOG(Info) << "shutting down";
  (*server)->Shutdown();
  return 0;
}
