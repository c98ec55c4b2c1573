// Reading a deployed library back: its provenance, and (optionally) a benchmark of
// each kernel against the GFLOP/s recorded when it was tuned, in one process.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge {

struct KernelCheck {
  std::string function;
  std::string task;
  double recorded_gflops = 0;   // from the provenance (the db at deploy time)
  double measured_gflops = 0;   // now, through the library's own entry point
  bool correct = false;         // output matched the reference
};

struct Inspection {
  std::string name;             // library name (from lib<name>.so)
  std::string provenance_json;
  std::vector<KernelCheck> kernels;  // filled when benchmarking
};

// Loads `library` (a lib<name>.so made by Deploy) with its own runtime and reads
// <name>_provenance(). With `bench`, runs every kernel on seeded inputs, checks it
// against the reference and times it with the measurement protocol.
absl::StatusOr<Inspection> InspectLibrary(const std::string& library, bool bench);

}  // namespace tuneforge
