// BuildArtifact: the builder's unit of work, as one straight pipeline:
//   LoweredFunc --CompileToObject--> object --LinkSharedObject--> shared object
// plus the bookkeeping an Artifact carries (hash, entry symbol, build time).

#include "compiler/codegen/build.h"

#include <algorithm>
#include <thread>

#include "compiler/codegen/linker.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/support/hash.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"

namespace tuneforge {


absl::StatusOr<Artifact> BuildArtifact(const ir::LoweredFunc& func, const Target& target,
                                       const BuildOptions& options) {
  ScopedTimer timer("build " + func.name);
  ASSIGN_OR_RETURN(std::string object, codegen::CompileToObject(func, target, options));
  // Another architecture's kernel (for a device agent, which runs it through its
  // launcher) is linked by ld.lld; the system linker knows only the host's.
  static const std::string host = TripleArchitecture(codegen::DetectHost().triple);
  const bool foreign = !target.triple.empty() && TripleArchitecture(target.triple) != host;
  ASSIGN_OR_RETURN(std::string shared_object, codegen::LinkSharedObject(object, foreign));
  Artifact artifact;
  artifact.entry_symbol = func.name;
  if (func.prepack) artifact.prepack_symbol = func.name + "_prepack";
  if (func.unpack) artifact.unpack_symbol = func.name + "_unpack";
  for (const ir::BufferParam& p : func.params) artifact.buffer_elements.push_back(p.NumElements());
  artifact.shared_object = std::move(shared_object);
  artifact.hash = HashHex(artifact.shared_object);
  artifact.build_seconds = timer.Seconds();
  return artifact;
}

absl::StatusOr<std::string> BuildObject(const ir::LoweredFunc& func, const Target& target,
                                        const BuildOptions& options) {
  return codegen::CompileToObject(func, target, options);
}

Target DetectHostTarget(const std::string& device_key) {
  codegen::HostInfo host = codegen::DetectHost();
  Target target;
  target.triple = std::move(host.triple);
  target.cpu = std::move(host.cpu);
  target.features = std::move(host.features);
  target.num_threads = std::max(1u, std::thread::hardware_concurrency());
  target.device_key = device_key;
  return target;
}

}  // namespace tuneforge
