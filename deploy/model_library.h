// Deploy a whole model (issue 19): `tuneforge deploy --model M.onnx --db F -o DIR`
// turns the graph executor's compiled model into a library a C program links,
// without tuneforge, LLVM or onnxruntime at run time:
//
//   DIR/lib<name>.so, DIR/lib<name>.a  the kernels (tuneforge's LLVM codegen), the
//                                      step table, the runtime's thread pool, and the
//                                      C API below (C++ glue built with the system c++)
//   DIR/<name>.h                       the C API
//   DIR/<name>.weights                 every constant and step-owned buffer after
//                                      load (packed weights, zero borders), one file,
//                                      checked against the library by size and hash
//   DIR/provenance.json                model, target, tuneforge version, and per task
//                                      the db record used or "default" (a warning)
//
// C API (fixed names, so one program loads one model library):
//   tf_model* tf_model_load(const char* dir);        NULL on failure, see tf_model_error()
//   int tf_model_run(tf_model*, const float* const* inputs, float* const* outputs);
//   void tf_model_free(tf_model*);
//   tf_model_num_inputs/_outputs(), tf_model_input_name/_rank/_shape/_elements(i), and
//   the same for outputs; tf_model_provenance().
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/executor.h"

namespace tuneforge {

struct ModelDeployOptions {
  std::string out_dir;             // created if missing (its parent must exist)
  std::string name = "tuneforge_model";  // library name: a C identifier
  std::string tuneforge_version;
  std::string provenance_json;     // written as DIR/provenance.json and embedded
};

struct ModelDeployReport {
  std::string shared_library, static_library, header, weights, provenance;
  int kernels = 0, steps = 0;
  int64_t weights_bytes = 0, arena_bytes = 0;
};

// `model` from Executor::Export on this machine's target; `target` the same.
absl::StatusOr<ModelDeployReport> DeployModel(const graph::ExportedModel& model, const Target& target,
                                              const ModelDeployOptions& options);

}  // namespace tuneforge
