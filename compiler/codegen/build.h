// LLVM codegen entry point: LoweredFunc + Target -> Artifact (an ELF shared object).
// No LLVM type appears in this header; LLVM stays inside compiler/codegen/*.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/target/target.h"

namespace tuneforge {

// A built kernel: the bytes of a shared object whose symbol `entry_symbol` has the
// runtime::KernelEntry signature. Undefined symbols (tf_parallel_for, memset) are
// resolved at load time against the loading process, which must export the runtime.
struct Artifact {
  std::string entry_symbol;
  // `<entry_symbol>_prepack` when the kernel has prepack statements (LoweredFunc::
  // prepack): call it once with the same buffers, untimed, before the entry. Else empty.
  std::string prepack_symbol;
  // `<entry_symbol>_unpack` when the kernel has unpack statements (its output layout
  // transform): call it after the entry and before reading the output. Else empty.
  std::string unpack_symbol;
  // Elements of each kernel argument, entry-point order. The task fixes its inputs
  // and output's sizes; an internal buffer's size depends on the config (Winograd's
  // transformed weights are larger than the direct kernel's blocked ones).
  std::vector<int64_t> buffer_elements;
  std::string shared_object;  // ELF bytes
  std::string hash;           // HashHex(shared_object)
  double build_seconds = 0;   // codegen + optimisation + object emission + link
};

struct BuildOptions {
  int opt_level = 3;          // LLVM optimisation level for the target CPU
  bool dump_llvm_ir = false;  // log the optimised IR at debug level
};

// For the target's architecture: another one than the host's is linked by ld.lld and
// runs on a device agent (measure_agent/device_launch.h). Thread-safe: builder pools
// call it from many threads at once.
absl::StatusOr<Artifact> BuildArtifact(const ir::LoweredFunc& func, const Target& target,
                                       const BuildOptions& options = {});

// The same kernel as a relocatable ELF object (PIC), for linking several kernels into
// one deployable library. Thread-safe.
absl::StatusOr<std::string> BuildObject(const ir::LoweredFunc& func, const Target& target,
                                        const BuildOptions& options = {});

// The machine this process runs on, with all its cores as threads.
Target DetectHostTarget(const std::string& device_key);

}  // namespace tuneforge
