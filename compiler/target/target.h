// Target identity: LLVM triple + CPU + features + thread count, plus the
// DeviceKey chosen by whoever runs the agent. Records are keyed by (workload, target).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tuneforge {

struct Target {
  std::string triple;      // e.g. x86_64-pc-linux-gnu
  std::string cpu;         // LLVM CPU name, e.g. znver4
  std::string features;    // sorted LLVM feature string, e.g. +avx,+avx2,+fma
  int num_threads = 1;     // threads the generated code uses (1..kMaxThreads)
  // More cores than any machine an agent runs on has; an agent reporting more is
  // refused, and the peak bound never scales past it.
  static constexpr int kMaxThreads = 1024;
  std::string device_key;  // e.g. epyc-znver4; "local" for the embedded default

  // Widest float32 vector the target's features allow: 16 (avx512f), 8 (avx), 4 (sse).
  int MaxF32Lanes() const;
  // Architectural vector registers: 32 with AVX-512 (zmm0-31), on aarch64 (v0-v31)
  // and riscv64 (v0-v31); 16 on other x86 (ymm0-15). What register tiles are sized by.
  int VectorRegisters() const;
  // An upper bound no real machine of this target reaches: float32 FMA on the widest
  // vectors, two FMA pipes per core, 6 GHz, every thread (at most kMaxThreads). A
  // measurement faster than
  // this is a lie, not a record (the server rejects it).
  double PlausiblePeakGflops() const;
  // int8 tasks (qmatmul, qconv2d, ...) count their multiply-adds the same way and run
  // up to this many times faster: AMX's tdpbusd does 1024 per cycle and core, 32x the
  // float32 FMA peak's (vpdpbusd 4x).
  static constexpr double kInt8PlausibleFactor = 32;
  bool HasFeature(const std::string& name) const;  // name without '+', e.g. "avx512f"
  // Canonical key, stable across runs: triple, cpu, thread count, device key and a
  // hash of the feature string.
  std::string Key() const;
  // One-line human summary.
  std::string ToString() const;
};

// Parses the text form accepted on the command line:
//   "llvm -mtriple=T -mcpu=C -mattr=+a,+b -threads=N -device-key=K"
// Every field is optional except that the result must name a triple and cpu; see
// docs/architecture.md.
// The architecture of an LLVM triple: "aarch64-unknown-linux-gnu" -> "aarch64".
std::string TripleArchitecture(const std::string& triple);

absl::StatusOr<Target> ParseTarget(const std::string& text, const Target& defaults);

}  // namespace tuneforge
