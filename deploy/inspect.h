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

// The bytes of section `section` of the ELF64 little-endian file at `path`, read from
// the file (never loaded or mapped). NotFound when the file or the section is missing;
// InvalidArgument for a file that is not such an ELF file or is truncated.
absl::StatusOr<std::string> ReadElfSection(const std::string& path, const std::string& section);

// Reads the provenance of `library` (a lib<name>.so made by Deploy) from its
// provenance section, without loading it. With `bench`, loads it with its own runtime
// (its initializers run: only for a library you would link), runs every kernel on seeded inputs, checks it
// against the reference and times it with the measurement protocol.
absl::StatusOr<Inspection> InspectLibrary(const std::string& library, bool bench);

}  // namespace tuneforge
