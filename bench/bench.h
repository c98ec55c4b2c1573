// `tuneforge bench <subcommand>`: the benchmarks, each running its baseline in the
// same process and printing the ratio (BENCHMARKS.md). They are subcommands of the
// CLI (cli/main.cc) and return its exit codes; they live here, apart from the client
// commands, because they alone link the vendor libraries (OpenBLAS, oneDNN).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge::cli {

absl::StatusOr<int> BenchCommand(const std::vector<std::string>& args);
absl::StatusOr<int> BenchKernelsCommand(const std::vector<std::string>& args);  // bench kernels
absl::StatusOr<int> BenchSearchCommand(const std::vector<std::string>& args);  // bench search
absl::StatusOr<int> BenchDbCommand(const std::vector<std::string>& args);  // bench db
absl::StatusOr<int> BenchFarmCommand(const std::vector<std::string>& args);  // bench farm
absl::StatusOr<int> BenchModelCommand(const std::vector<std::string>& args);  // bench model

// The float32 FMA peak of this machine on `threads` threads, measured with independent
// FMA chains on the widest vectors the CPU has (AVX-512 or AVX2); best of 3.
double MeasureFmaPeakGflops(int threads);

// "1,2" -> {1, 2}: the --threads lists of the benchmarks (each in 1..256).
absl::StatusOr<std::vector<int>> ParseThreadList(const std::string& text);

}  // namespace tuneforge::cli
