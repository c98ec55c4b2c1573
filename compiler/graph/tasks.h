// Task extraction (issue 17): the graph's anchor operators, with the elementwise
// epilogue each absorbs, as tuning tasks of the existing templates, identical ones
// merged with a weight (how often they run per inference). What maps to no template
// is listed as a leftover with the reason, never dropped silently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"

namespace tuneforge::graph {

struct ExtractedTask {
  std::string task;                // canonical task text, e.g. "dense M=2 N=32 K=16 ..."
  std::string op;                  // the task's op
  int weight = 0;                  // occurrences in the graph
  double flops = 0;                // of one occurrence
  std::vector<std::string> nodes;  // the graph nodes it covers (anchor and epilogue)
  // Epilogue work of the anchor that the task's template does not take yet (runs as
  // a separate elementwise kernel), e.g. "bias+relu" after a conv2d, one entry per
  // distinct epilogue ("bias+relu | bias+residual+relu"); empty if none.
  std::string unfused_epilogue;
};

// One occurrence of a task in the graph: what the executor runs for it. Operand
// tensors are ids in the graph; -1 when absent.
struct TaskUse {
  int task = -1;           // index into TaskTable::tasks
  int anchor = -1;         // node index of the Conv / MatMul / Gemm
  std::vector<int> nodes;  // node indices: the anchor, then the epilogue it absorbs
  int data = -1;           // the anchor's activation input
  int weight = -1;         // its weights (or second activation for matmul)
  bool transpose_weight = false;  // Gemm transB: weights stored [N, K]
  int bias = -1;           // a constant bias vector (fused or not)
  int residual = -1;       // an activation added after a conv
  std::string activation;  // "", "relu" or "clip" (node `clip_node`'s bounds)
  int clip_node = -1;
  // A 1x1 convolution computed as a (batch) matmul on NCHW (ExtractTasks: Conv):
  // A = its weights [G, K/G, C/G], B = its input [G, C/G, H*W], C = its output.
  bool conv_as_gemm = false;
  // A quantized layer of a QDQ model (docs/int8.md): a qconv2d task whose kernel reads `data`, a quantization round trip's float32 output of
  // scale in_scale, and writes `output`, the round trip after the conv (scale
  // out_scale), which it absorbs; the weights' scales are the graph's
  // quantized_constants of `weight`.
  bool quantized = false;
  double in_scale = 0, out_scale = 0;
  // ... and when it absorbs a residual Add after that round trip (`residual`; Relu:
  // activation "relu") and the round trip of the sum: that quantization.
  double sum_scale = 0;
  int64_t sum_zero = 0;
  // ... or a MaxPool after that round trip and the round trip of the pooled values
  // (ResNet's stem): the pool's window and that quantization.
  struct QuantizedPool {
    int64_t k_h = 0, k_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
    double scale = 0;
    int64_t zero = 0;
  };
  std::optional<QuantizedPool> pool;
  // A dynamically quantized MatMul (frontend::DynamicMatmul, docs/int8.md): a qmatmul
  // task whose kernel quantizes `data` (the float32 tensor the DynamicQuantizeLinear
  // read) itself at run time, multiplies by the int8 `weight` (integers held as
  // float32, [K, N]) and writes float32 acc x (input scale x wscale[j]) (+ bias[j]):
  // the rewrite's MatMul, Cast and Mul by the scales, and the bias Add after them.
  // `wscale`: the weights' scales, a constant of 1 or N elements.
  bool dynamic = false;
  int wscale = -1;
  int anchor_output = -1;  // what the anchor alone computes
  int output = -1;         // what the last absorbed node writes
};

struct Leftover {
  std::string node;
  std::string op;
  std::string reason;  // why no tuning task: "elementwise", "asymmetric padding", ...
  double flops = 0;    // estimated
};

struct TaskTable {
  std::vector<ExtractedTask> tasks;  // in order of first occurrence
  std::vector<Leftover> leftovers;
  std::vector<TaskUse> uses;         // every occurrence, in graph order
  double total_flops = 0;            // tasks (times weight) and leftovers
};

absl::StatusOr<TaskTable> ExtractTasks(const Graph& graph);

}  // namespace tuneforge::graph
