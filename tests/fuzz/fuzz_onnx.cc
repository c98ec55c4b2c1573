// libFuzzer target: an ONNX model from a user, as `model inspect/run`, `tune --model`
// and `deploy --model` read it: the protobuf, the checks, the graph import and the
// task extraction. External data is refused (the fuzzer's files are not models').
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // A path whose directory does not exist: external data cannot resolve to a file.
  absl::StatusOr<tuneforge::frontend::OnnxModel> model =
      tuneforge::frontend::ParseOnnxModel(bytes, "/nonexistent-tuneforge-fuzz/model.onnx");
  if (!model.ok()) return 0;
  if (!tuneforge::frontend::CheckSupported(*model).ok()) return 0;
  absl::StatusOr<tuneforge::graph::Graph> graph = tuneforge::graph::ImportOnnx(*model);
  if (!graph.ok()) return 0;
  (void)tuneforge::graph::ExtractTasks(*graph);
  return 0;
}
