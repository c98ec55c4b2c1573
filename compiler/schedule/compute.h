// A compute definition: what an operator computes, independent of how.
//
//   output[output_index] = sum over the reduce axes of `value`
//
// `output_index` and `value` are IR expressions over the axis variables (Var(axis
// name)) and flat loads of the input buffers, e.g. for matmul
//   output_index = i*N + j,  value = A[i*K + k] * B[k*N + j]
// A definition without reduce axes is a plain elementwise assignment.
//
// For quantized products `value` is the whole step instead (value_is_update):
//   value = Dot4(Accumulator(s32), A[i*K + 4*q], B.packed[...]), over reduce axis q.
//
// An optional `epilogue` is applied to each finished sum before it is stored, e.g.
// dense's bias and ReLU: max(ReducedValue() + bias[j], 0). It is an expression over
// ReducedValue(), the spatial axes and loads of the inputs. Lowering fuses it into
// the write-back of the accumulator tile when the tile holds finished sums.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace tuneforge {

// The placeholder for the finished sum inside ComputeDef::epilogue: a variable of the
// accumulator's type (float32 unless given) that lowering substitutes; it never
// reaches codegen.
ir::Expr ReducedValue(ir::DType dtype = ir::DType::kFloat32);
// The placeholder for the running sum inside a ComputeDef::value that is the whole
// update step rather than a summand (value_is_update): lowering substitutes the
// accumulator's load. E.g. a quantized product's step
// Dot4(Accumulator(s32), A[i*K + 4*q], B[...]).
ir::Expr Accumulator(ir::DType dtype);

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
  ir::Expr epilogue;  // null: store the sum as it is
  // The type of the sums: of the local tile and of the zero they start from. float32,
  // or s32 for quantized products (whose output, when a tile does not hold the whole
  // reduction and adds to it, must be s32 too).
  ir::DType accumulator = ir::DType::kFloat32;
  // Whether `value` is the update step, an expression over Accumulator(accumulator)
  // (false: the summand; the step is accumulator + value).
  bool value_is_update = false;

  // The epilogue applied to `reduced` (the identity without an epilogue).
  ir::Expr ApplyEpilogue(const ir::Expr& reduced) const;

  const ir::BufferParam& output() const;
};

}  // namespace tuneforge
