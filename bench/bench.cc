// `tuneforge bench <subcommand>`: benchmarks, one function per subcommand
// (bench/bench_<subcommand>.cc), dispatched from the map below.
#include <cstdio>
#include <map>

#include "bench/bench.h"
#include "cli/commands.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kBenchUsage =
    "usage: tuneforge bench <subcommand> [options]\n"
    "\n"
    "subcommands:\n"
    "  kernels  tuned kernels side by side with the vendor library (OpenBLAS)\n"
    "  search   random vs model-guided search, same budget and seeds\n"
    "  db       tuning-log database: insert rate, best/top-k latency, export/import\n"
    "  farm     server dispatch under load: simulated agents, measurements/s, latency\n"
    "\n"
    "`tuneforge bench <subcommand> --help` describes its options.\n";

}  // namespace

absl::StatusOr<int> BenchCommand(const std::vector<std::string>& args) {
  // One line per subcommand.
  const std::map<std::string, CommandFn> subcommands = {
      {"kernels", BenchKernelsCommand},
      {"search", BenchSearchCommand},
      {"db", BenchDbCommand},
      {"farm", BenchFarmCommand},
  };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kBenchUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  auto it = subcommands.find(args[0]);
  if (it == subcommands.end()) {
    return absl::InvalidArgumentError("unknown subcommand '" + args[0] +
                                      "' (see tuneforge bench --help)");
  }
  return it->second(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace tuneforge::cli
