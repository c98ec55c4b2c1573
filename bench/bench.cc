// `tuneforge bench <subcommand>`: benchmarks, one function per subcommand
// (bench/bench_<subcommand>.cc), dispatched from the map below.
#include <cstdio>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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
    "  model    a whole ONNX model on the executor next to onnxruntime, same threads\n"
    "\n"
    "`tuneforge bench <subcommand> --help` describes its options.\n";

}  // namespace

absl::StatusOr<std::vector<int>> ParseThreadList(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1 || t > 256)
      return absl::InvalidArgumentError("--threads must be a comma-separated list of thread "
                                        "counts in 1..256, got '" + text + "'");
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<int> BenchCommand(const std::vector<std::string>& args) {
  // One line per subcommand.
  const std::map<std::string, CommandFn> subcommands = {
      {"kernels", BenchKernelsCommand},
      {"search", BenchSearchCommand},
      {"db", BenchDbCommand},
      {"farm", BenchFarmCommand},
      {"model", BenchModelCommand},
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
