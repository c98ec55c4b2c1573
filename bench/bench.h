// `tuneforge bench <subcommand>`: the benchmarks, each running its baseline in the
// same process and printing the ratio (docs/history/benchmarks-2026-11.md). They are subcommands of the
// CLI (cli/main.cc) and return its exit codes; they live here, apart from the client
// commands, because they alone link the vendor libraries (OpenBLAS, oneDNN).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/task/task.h"

namespace tuneforge::cli {

absl::StatusOr<int> BenchCommand(const std::vector<std::string>& args);
absl::StatusOr<int> BenchKernelsCommand(const std::vector<std::string>& args);  // bench kernels
absl::StatusOr<int> BenchSearchCommand(const std::vector<std::string>& args);  // bench search
// bench search --product: real tune jobs (bench/bench_search_product.cc)
absl::StatusOr<int> BenchSearchProductCommand(const std::vector<std::string>& args);
absl::StatusOr<int> BenchDbCommand(const std::vector<std::string>& args);  // bench db
absl::StatusOr<int> BenchFarmCommand(const std::vector<std::string>& args);  // bench farm
absl::StatusOr<int> BenchModelCommand(const std::vector<std::string>& args);  // bench model
absl::StatusOr<int> BenchNoiseCommand(const std::vector<std::string>& args);  // bench noise

// The float32 FMA peak of this machine on `threads` threads, measured with independent
// The strongest vendor library on this machine for a task that has one (matmul,
// batch_matmul, dense: OpenBLAS, oneDNN sgemm and matmul; conv2d, depthwise_conv2d:
// oneDNN's convolution), each checked against the reference and timed as `bench
// kernels` does (samples of at least `min_sample_s`, median of 5), in this process.
struct VendorSpeed {
  std::string name;  // the strongest
  double gflops = 0;
  std::vector<std::pair<std::string, double>> all;  // every vendor: name, GFLOP/s
};
absl::StatusOr<VendorSpeed> StrongestVendor(const TuningTask& task, int threads, double min_sample_s = 0.04);

// FMA chains on the widest vectors the CPU has (AVX-512 or AVX2); best of 3.
double MeasureFmaPeakGflops(int threads);

// "1,2" -> {1, 2}: the --threads lists of the benchmarks (each in 1..256).
absl::StatusOr<std::vector<int>> ParseThreadList(const std::string& text);

}  // namespace tuneforge::cli
