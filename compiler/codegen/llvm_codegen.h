// The LLVM half of BuildArtifact: LoweredFunc -> optimised relocatable object. The
// interface carries only our own types; every LLVM type stays in llvm_codegen.cc.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/ir.h"
#include "compiler/target/target.h"

namespace tuneforge::codegen {

// Translates `func` to LLVM IR (see llvm_codegen.cc for the mapping of each IR node),
// verifies it, optimises it for `target` at options.opt_level with LLVM's own loop and
// SLP vectorizers off, and returns the ELF relocatable object (PIC) as bytes.
// Malformed IR (an unknown name, a type mismatch) returns InvalidArgument; a module
// that fails LLVM verification returns Internal. Thread-safe: each call uses its own
// LLVMContext and TargetMachine.
absl::StatusOr<std::string> CompileToObject(const ir::LoweredFunc& func, const Target& target,
                                            const BuildOptions& options);

// The same pipeline, stopped after optimisation: the optimised LLVM IR as text (for
// tests of what the pipeline does, and for reading).
absl::StatusOr<std::string> CompileToLlvmIr(const ir::LoweredFunc& func, const Target& target,
                                            const BuildOptions& options);

// The host as LLVM sees it: normalised default triple, host CPU name, and the enabled
// host CPU features, sorted, in "+a,+b" form.
struct HostInfo {
  std::string triple;
  std::string cpu;
  std::string features;
};
HostInfo DetectHost();

}  // namespace tuneforge::codegen
