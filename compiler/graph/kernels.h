// Generated kernels for the operators that are not tuning tasks (issue 17): pools,
// softmax, layer normalization, reductions, data movement, elementwise operators
// (chains of them fused), and the expressions the executor fuses into a task's
// kernel. Each is a loop-IR function with a default schedule (outer loop parallel,
// innermost loop vectorized where the data is contiguous) that the LLVM code
// generator compiles like a template's kernel: no interpreter runs a model.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/ir/ir.h"

namespace tuneforge::graph {

struct NodeKernel {
  ir::LoweredFunc func;
  // The graph tensor each parameter binds to, in parameter order; -1 for a parameter
  // whose data the generator computed (`constants`, by parameter index), e.g. the
  // scale and shift of a BatchNormalization that follows no convolution.
  std::vector<int> tensors;
  std::map<size_t, std::vector<float>> constants;
};

// Operators that only change how a tensor's elements are indexed, not their order
// (Reshape, Flatten, Squeeze, Unsqueeze, Identity): the output shares the input's
// storage and no kernel runs.
bool IsAliasOp(const std::string& op);

// Elementwise operators (Add, Sub, Mul, Div, Pow, Relu, Clip, Sigmoid, Tanh, Erf,
// Sqrt): chains of them fuse into one kernel.
bool IsElementwiseOp(const std::string& op);

// One kernel for a chain of elementwise nodes (in graph order) whose intermediate
// results have the final result's shape and are read only inside the chain: one
// pass over memory instead of one per node (e.g. Gelu's Div, Erf, Add, Mul, Mul).
absl::StatusOr<NodeKernel> GenerateElementwiseKernel(const Graph& graph, const std::vector<int>& nodes,
                                                     int lanes);

// The tensors a chain of elementwise nodes reads from outside itself, in first-use
// order.
std::vector<int> ChainInputs(const Graph& graph, const std::vector<int>& nodes);

// The value of the chain's result at one element, given `value(t)` for each tensor
// of ChainInputs at that element (for fusing the chain into the kernel before it).
absl::StatusOr<ir::Expr> ChainValue(const Graph& graph, const std::vector<int>& nodes,
                                    const std::function<ir::Expr(int tensor)>& value);

// The kernel of graph node `node`, vectorized for `lanes` float32 lanes. Errors name
// the node and what is not supported.
absl::StatusOr<NodeKernel> GenerateNodeKernel(const Graph& graph, int node, int lanes);

// `value` plus each of `addends` (bias, residual), then the occurrence's relu or clip.
ir::Expr EpilogueExpr(const Graph& graph, const TaskUse& use, ir::Expr value,
                      const std::vector<ir::Expr>& addends);

}  // namespace tuneforge::graph
