// A compute definition: what an operator computes, independent of how.
//
//   output[output_index] = sum over the reduce axes of `value`
//
// `output_index` and `value` are IR expressions over the axis variables (Var(axis
// name)) and flat loads of the input buffers, e.g. for matmul
//   output_index = i*N + j,  value = A[i*K + k] * B[k*N + j]
// A definition without reduce axes is a plain elementwise assignment.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace tuneforge {

struct AxisDef {
  std::string name;
  int64_t extent = 0;
  bool is_reduce = false;
};

struct ComputeDef {
  std::string name;                   // becomes the kernel's entry symbol prefix
  std::vector<ir::BufferParam> params;  // entry-point order; exactly one is_output
  std::vector<AxisDef> axes;          // spatial and reduce
  ir::Expr output_index;
  ir::Expr value;

  const ir::BufferParam& output() const;
};

}  // namespace tuneforge
