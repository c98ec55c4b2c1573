// tuneforge: the user CLI. `tuneforge --help` lists the commands.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "compiler/support/allocator.h"
#include "compiler/support/log.h"

namespace {

constexpr const char* kUsage =
    "usage: tuneforge <command> [options]\n"
    "\n"
    "commands:\n"
    "  tune     tune a task (embedded server + local agent, or --server HOST:PORT)\n"
    "  db       the tuning log: best, top, history, list, status, export, import, ...\n"
    "  show     print the lowered loop nest of a config, or a task's config space\n"
    "  deploy   build a linkable library from the best records; deploy inspect\n"
    "  nightly  run a nightly tuning job from a YAML spec, with canary and report\n"
    "  farm     farm status: a server's agents and jobs\n"
    "  jobs     a server's jobs: jobs list, show, watch, cancel\n"
    "  model    ONNX models: model inspect (what tuneforge makes of a model)\n"
    "  bench    benchmarks: bench kernels, ... (tuneforge bench --help lists them)\n"
    "  version  print the version\n"
    "\n"
    "`tuneforge <command> --help` describes a command's options. Global option:\n"
    "  --insecure  allow plaintext gRPC to a server that is not on loopback (else\n"
    "              --tls-ca is required off this machine; docs/security.md)\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  // --insecure is global (any command that dials a server): plaintext off loopback.
  for (auto a = args.begin(); a != args.end();) {
    if (*a == "--insecure") {
      tuneforge::cli::SetInsecure(true);
      a = args.erase(a);
    } else {
      ++a;
    }
  }
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string command = args[0];
  args.erase(args.begin());
  tuneforge::SetLogPrefix("tuneforge");
  if (command == "version" || command == "--version") {
    std::printf("tuneforge %s (%s)\n", TUNEFORGE_VERSION, tuneforge::AllocatorName().c_str());
    return 0;
  }
  // One line per command; the functions live in cli/<command>.cc.
  const std::map<std::string, tuneforge::cli::CommandFn> commands = {
      {"tune", tuneforge::cli::TuneCommand},
      {"db", tuneforge::cli::DbCommand},
      {"show", tuneforge::cli::ShowCommand},
      {"deploy", tuneforge::cli::DeployCommand},
      {"nightly", tuneforge::cli::NightlyCommand},
      {"farm", tuneforge::cli::FarmCommand},
      {"jobs", tuneforge::cli::JobsCommand},
      {"model", tuneforge::cli::ModelCommand},
      {"bench", tuneforge::cli::BenchCommand},
  };
  auto it = commands.find(command);
  if (it == commands.end()) {
    std::fprintf(stderr, "tuneforge: unknown command '%s' (see tuneforge --help)\n", command.c_str());
    return 2;
  }
  absl::StatusOr<int> rc = it->second(args);
  if (!rc.ok()) {
    std::fprintf(stderr, "tuneforge %s: %s\n", command.c_str(),
                 std::string(rc.status().message()).c_str());
    return 1;
  }
  return *rc;
}
