// The int8 GEMM kernel and the qmatmul template around it (docs/int8.md):
//   acc[i, j] = sum_k (A[i, k] - a_zero) * B[k, j]  (+ bias[j])
// with A uint8 (activations, M x K row-major), B int8 (weights, K x N row-major,
// symmetric: zero point 0), an optional int32 bias, and the output C one of
//   s32: acc itself;
//   f32: f32(acc) * scale                      (dequantized);
//   u8:  u8(round(f32(acc) * scale) + out_zero)  (requantized: rounded half to even,
//        saturated, in float32), as onnxruntime's QLinearMatMul/QLinearConv do it,
// where scale is one float32 (per tensor) or one per column (per output channel),
// the product of the input scales over the output's. Built from the float32 GEMM's
// schedule (the same knobs: register tile, cache tiles, tile_k, unroll_k, loop order,
// parallel, accumulate) with the reduction over groups of four k: each step is one
// Dot4 per accumulator vector, vpdpbusd where the target has it.
//
// Entry point buffers: A, B, [bias s32 [N]], [scale f32 [1] or [N]], B.packed
// (internal), B.offset (internal, s32 [N]), C. The prepack entry (once per set of
// weights, untimed) packs B into panels of the register tile's width, [N / panel]
// [K / 4][panel][4] (one 32-bit word per column and group of four k), and folds the
// zero-point correction and the bias into one offset per column, bias[j] - a_zero *
// (sum of column j of B), which the write-back adds. The inner loop stays pure Dot4.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/target/target.h"
#include "compiler/templates/config_space.h"
#include "compiler/templates/template.h"

namespace tuneforge {

enum class QuantizedOutput { kS32, kF32, kU8 };
enum class QuantizedScale { kPerTensor, kPerChannel };

// How an int8 kernel finishes its int32 sums: what qmatmul and qconv2d tasks share.
struct QuantizedEpilogue {
  int64_t a_zero = 0;  // the activations' zero point, 0..255
  QuantizedOutput out = QuantizedOutput::kS32;
  QuantizedScale scale = QuantizedScale::kPerTensor;  // f32 and u8 outputs
  int64_t out_zero = 0;  // u8 output: its zero point, 0..255
  bool bias = false;     // an s32 bias per output channel, added before scaling
  // Inside a model, a dynamically quantized layer (InstantiateDynamicQuantizedMatmul
  // InModel): the activations' scale and zero point are run-time values. The write-
  // back computes f32(acc + A.offset[j]) x scale[j] (+ bias[j], float32) from per-call
  // vectors (A.offset[j] = -zero point x column sum j, scale[j] = activation scale x
  // weight scale j); a_zero is 0, the output f32, and the bias float32.
  bool dynamic = false;
  // Dynamic only: an elementwise chain after the layer (a model's Gelu) applied to the
  // written value at row i, column j (QuantizedMatmulChain); null: none.
  std::function<ir::Expr(ir::Expr value, ir::Expr i, ir::Expr j)> then;
};

// An elementwise chain after a dynamically quantized MatMul, computed in its write-back
// as dense computes the chain after it: the chain's other inputs (parameters of the
// kernel) and its value from the layer's value at row i, column j.
struct QuantizedMatmulChain {
  std::vector<ir::BufferParam> inputs;
  std::function<ir::Expr(ir::Expr value, ir::Expr i, ir::Expr j)> fn;
};

struct QuantizedMatmulShape : QuantizedEpilogue {
  int64_t m = 0, n = 0, k = 0;
};

// The epilogue of a qmatmul or qconv2d task (task.h).
QuantizedEpilogue QuantizedEpilogueOf(const TuningTask& task);
// Errors for zero points outside 0..255 and an out_zero on an output without one;
// `what` names the kernel.
absl::Status CheckQuantizedEpilogue(const QuantizedEpilogue& e, const std::string& what);
// The output's element type: s32, f32 or u8.
ir::DType QuantizedOutputType(const QuantizedEpilogue& e);
// The epilogue's inputs for `channels` output channels: [bias s32], [scale f32, 1 or
// one per channel].
std::vector<ir::BufferParam> QuantizedEpilogueParams(const QuantizedEpilogue& e, int64_t channels);
// Whether the write-back adds a per-channel offset (a zero-point correction or a bias).
inline bool HasChannelOffsets(const QuantizedEpilogue& e) { return !e.dynamic && (e.a_zero != 0 || e.bias); }
// offsets[j] = bias[j] - a_zero * (sum over t < reduction of weights[weight_index(j,
// t)]) for j < channels: the zero-point correction and the bias in one int32 per
// output channel, computed at prepack (serial: once per set of weights).
// `bias_value`: the bias of channel j where it is not the int32 input `bias`.
ir::Stmt QuantizedChannelOffsets(const QuantizedEpilogue& e, int64_t channels, int64_t reduction,
                                 const std::string& weights,
                                 const std::function<ir::Expr(ir::Expr j, ir::Expr t)>& weight_index,
                                 const std::string& offsets,
                                 const std::function<ir::Expr(ir::Expr j)>& bias_value = nullptr);
// What the write-back stores for the int32 sum `acc` of output channel `channel`:
// acc + offsets[channel] (when HasChannelOffsets), then for f32 f32(acc) * scale, for
// u8 rounded (halves to even), the zero point added and saturated, all in float32 as
// onnxruntime does (no int32 sum that could wrap).
// `row`: the output's row, for a dynamic layer's chain (QuantizedEpilogue::then).
ir::Expr QuantizedWriteBack(const QuantizedEpilogue& e, ir::Expr acc, const ir::Expr& channel,
                            const std::string& offsets, const ir::Expr& row = ir::Expr());

// `config` holds the GEMM knobs (matmul's names: tile_i_reg, vec_lanes, tile_j_vecs,
// tile_i_blocks, tile_j_blocks, tile_k, unroll_k, loop_order, parallel, accumulate);
// tile_k and unroll_k count groups of four k. B is always packed, so the register
// tile's width must divide N; K must be a multiple of 4. An f32 or u8 output needs
// the whole reduction in the register tile (tile_k = K/4, accumulate = registers):
// partial sums cannot be added up in the output's type. Errors name the knob.
// With knob engine = amx, QuantizedMatmulAmxKernel.
absl::StatusOr<ir::LoweredFunc> QuantizedMatmulKernel(const QuantizedMatmulShape& shape,
                                                      const Config& config, const Target& target,
                                                      const std::string& name);

// The same product on the CPU's matrix unit (x86 AMX, MatrixDot statements): blocks of
// block_rows x block_cols outputs (16 or 32 each: up to 2 x 2 tiles of 16 x 16 int32),
// each summed over all of K in a local accumulator tile and written back through the
// same epilogue; loop_order ij (row blocks outer) or ji, the outer loop parallel or
// not. B is packed into 16-column panels (the tiles' [K/4][16][4] layout). Needs a
// target with amx-tile and amx-int8, N % 16 == 0 and K % 64 == 0.
absl::StatusOr<ir::LoweredFunc> QuantizedMatmulAmxKernel(const QuantizedMatmulShape& shape,
                                                         const Config& config, const Target& target,
                                                         const std::string& name);

// The template of qmatmul tasks (task.h). On a target with AMX (and N % 16 == 0, K %
// 64 == 0) its space is the AMX kernel's (engine = amx, block_rows, block_cols,
// loop_order ij|ji, parallel): the matrix unit does 16 x 16 x 64 multiply-adds per
// instruction, several times what vpdpbusd does (docs/int8.md). Elsewhere:
// QuantizedMatmulKernel over the GEMM space with the reduction counted in groups of
// four k, B always packed (knob pack_b has the one value 1), and for f32 and u8
// outputs tile_k = K/4 and accumulate = registers only. Knobs the int8 kernel does
// not read (prefetch_k, pack_a) are left out.
class QuantizedMatmulTemplate : public Template {
 public:
  std::string name() const override { return "qmatmul_cpu"; }
  int version() const override { return 2; }  // 2: the AMX space
  bool HasPrepack() const override { return true; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
};

// A dynamically quantized MatMul inside a model (docs/int8.md): the qmatmul task's
// kernel (config as for the task) with float32 in and out, what onnxruntime's
// DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (scales) [-> Add bias]
// computes. Each call: the minimum and maximum of X (rows in parallel), the scale
// (max(0, max) - min(0, min)) / 255 (1 when that is 0) and the zero point
// round(-min(0, min) / scale) clamped to 0..255, X quantized to uint8 (round half to
// even, saturated), the per-column vectors of the write-back (QuantizedEpilogue::
// dynamic), then the GEMM. At load (prepack): the weights F (float32 [K, N] holding
// int8 integers) to int8, packed, and their column sums. Entry point: X [M, K], F,
// [bias f32 [N]], wscale f32 [N] (the weights' scales), [the chain's inputs],
// internals, C f32 [M, N]. `chain` (optional): an elementwise chain computed in the
// write-back, C then holding its result.
absl::StatusOr<ir::LoweredFunc> InstantiateDynamicQuantizedMatmulInModel(const TuningTask& task, const Target& target,
                                                                         const Config& config, bool bias,
                                                                         const QuantizedMatmulChain* chain = nullptr);

// The kernel shape of a qmatmul task.
QuantizedMatmulShape QuantizedMatmulShapeOf(const TuningTask& task);

}  // namespace tuneforge
