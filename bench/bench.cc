// `tuneforge bench <subcommand>`: benchmarks, one function per subcommand
// (bench/bench_<subcommand>.cc), dispatched from the map below.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench.h"
#include "cli/commands.h"
#include "compiler/support/clock.h"

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
    "  noise    how much labels disagree between measurements, per measurement protocol\n"
    "\n"
    "`tuneforge bench <subcommand> --help` describes its options.\n";

// `iters` rounds of 20 independent FMA chains (enough to fill two FMA pipes of
// 4-5 cycles latency); returns a value that depends on every chain.
__attribute__((target("avx512f"))) float FmaChains512(int64_t iters) {
  __m512 acc[20];
  for (int j = 0; j < 20; ++j) acc[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.99999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 20
    for (int j = 0; j < 20; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 20; ++j) s = _mm512_add_ps(s, acc[j]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

__attribute__((target("avx2,fma"))) float FmaChains256(int64_t iters) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.99999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  float lanes[8];
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  _mm256_storeu_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

}  // namespace

double MeasureFmaPeakGflops(int threads) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int64_t iters = 20'000'000;
  // flops per round: chains x lanes x 2 (multiply and add).
  const double flops = static_cast<double>(iters) * (avx512 ? 20.0 * 16 * 2 : 12.0 * 8 * 2) * threads;
  double best = 0;
  std::vector<float> sink(static_cast<size_t>(threads));
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sink[static_cast<size_t>(t)] = avx512 ? FmaChains512(iters) : FmaChains256(iters); });
    }
    for (std::thread& th : pool) th.join();
    const double s = SecondsSince(start);
    best = std::max(best, flops / s / 1e9);
  }
  return sink.empty() || sink[0] == 12345.0f ? 0 : best;  // keeps the chains' results alive
}

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
      {"noise", BenchNoiseCommand},
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
