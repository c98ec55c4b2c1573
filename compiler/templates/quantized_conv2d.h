// The int8 convolution kernel and the qconv2d template around it (docs/int8.md):
//   acc[n, k, oh, ow] = sum_c,r,s (I[n, c, oh*stride + r - pad, ow*stride + s - pad] - a_zero)
//                                  * F[k, c, r, s]   (+ bias[k])
// with I uint8 (NCHW; a padded position holds a_zero, a real zero), F int8 (OIHW,
// symmetric), finished by the int8 GEMM's epilogue (QuantizedEpilogue: s32, f32 or u8
// with per-tensor or per-channel scales).
//
// Computed on the CPU's matrix unit (AMX) as an implicit GEMM, without im2col: the
// activations are laid out NHWC with the border in place (I.padded [N, H+2pad,
// W+2pad, Cp], Cp = C rounded up so that one filter row's bytes, S x Cp, fill whole
// 64-byte tile rows, or one shorter row when there are few channels; the extra
// channels have zero weights). Then the S x Cp bytes a
// filter row reads for output pixel ow start at input column ow*stride and are
// contiguous, and the next pixel's start stride x Cp bytes later: one tile row per
// output pixel, read straight from the image with that row stride (neighbouring rows
// overlap). A block of output pixels along one output row x 16 or 32 output channels
// is one MatrixDot of R segments (the filter rows, Wp x Cp bytes apart) over the
// weights packed as F.packed [K/16][R][S*Cp/4][16][4] (the tiles' layout, 16-channel
// panels).
//
// Layout transforms are separate entry points, untimed, as for the float32
// convolution (conv2d_template.h): prepack I -> I.padded and F -> F.packed with the
// per-channel offsets (bias - a_zero x filter sum), unpack O.nhwc -> O (NCHW).
// Entry point: I, F, [bias], [scale], I.padded, F.packed, F.offset, O.nhwc (internal),
// O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/target/target.h"
#include "compiler/templates/config_space.h"
#include "compiler/templates/quantized_matmul.h"
#include "compiler/templates/template.h"

namespace tuneforge {

// A max-pool after an int8 layer's output inside a model (see QuantizedConvShape::pool).
struct QuantizedMaxPool {
  int64_t k_h = 0, k_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  double scale = 0;  // the pooled values' quantization (their round trip)
  int64_t zero = 0;
};

struct QuantizedConvShape : QuantizedEpilogue {
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, stride = 1, pad = 0;
  bool depthwise = false;  // qdepthwise_conv2d: k == c, output channel k reads channel k
  // Inside a model (docs/int8.md): I, F, bias and O are float32. I holds in_scale x
  // (q - a_zero) for integers q, F the dequantized weights wscale[k] x q, bias the
  // dequantized int32 bias (in_scale x wscale[k] x q); the kernel recovers the
  // integers exactly on the way in (round(I / in_scale) + a_zero, round(F / wscale),
  // round(bias / (in_scale x wscale))) and writes O = out_scale x (q - out_zero).
  // Parameter `wscale` (float32 [K]) follows `scale`.
  bool float_boundary = false;
  double in_scale = 0, out_scale = 0;
  int64_t io_lanes = 1;  // vector width of the float boundary's conversions (1: scalar)
  // Inside a model, the output handed to the next int8 layer (docs/int8.md): the
  // kernel writes its uint8 results straight into that layer's padded input, buffer
  // `into` [N, OH + 2 into_pad, OW + 2 into_pad, into_cp] (border and channels past K
  // left alone), instead of O.nhwc; no O, no unpack. Empty: none.
  std::string into;
  int64_t into_pad = 0, into_cp = 0;
  // Inside a model, a residual Add after the output's round trip (parameter `R`,
  // float32 NCHW like O, after wscale), a Relu (`residual_relu`), and the round trip of
  // the sum, quantized with sum_scale and sum_zero: O = rt(relu(O + R)) on the way out.
  bool residual = false, residual_relu = false;
  double sum_scale = 0;
  int64_t sum_zero = 0;
  // ... the residual read from another layer's padded uint8 input instead of R:
  // buffer `residual_from` [N, OH + 2 residual_pad, OW + 2 residual_pad, residual_cp],
  // dequantized with residual_scale, residual_zero (the values R would hold). With a
  // residual, `into` receives the sum's integers from the way out (the kernel itself
  // writes O.nhwc as usual).
  std::string residual_from;
  int64_t residual_pad = 0, residual_cp = 0, residual_zero = 0;
  double residual_scale = 0;
  // Whether the kernel's write-back itself stores into `into`.
  bool KernelWritesInto() const { return !into.empty() && !residual; }
  // Inside a model, a max-pool after the output's round trip (ResNet's stem) and the
  // round trip of the pooled values: O is the pooled output [N, K, PH, PW] (each window
  // must hold a position inside the output; positions outside are clamped to the
  // nearest inside, which leaves a max unchanged).
  std::optional<QuantizedMaxPool> pool;
  int64_t out_h() const { return pool ? (oh() + 2 * pool->pad_h - pool->k_h) / pool->stride_h + 1 : oh(); }
  int64_t out_w() const { return pool ? (ow() + 2 * pool->pad_w - pool->k_w) / pool->stride_w + 1 : ow(); }
  int64_t oh() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - s) / stride + 1; }
  int64_t hp() const { return h + 2 * pad; }
  int64_t wp() const { return w + 2 * pad; }
  // The input channels as laid out in I.padded: C rounded up to a multiple of 4 when a
  // filter row of those, S x Cp bytes, is shorter than a 64-byte tile row (the 3
  // channels of an image: one shorter row per filter row), else the least multiple of
  // 4 at or above C whose filter row is a multiple of 64 (depthwise: C).
  int64_t cp() const;
  // The output channels as packed: K rounded up to whole 16-channel panels (the extra
  // channels' weights are zero and their results never written; depthwise: C).
  int64_t kp() const { return depthwise ? k : (k + 15) / 16 * 16; }
};

QuantizedConvShape QuantizedConvShapeOf(const TuningTask& task);

// The AMX kernel. Knobs: block_rows (output pixels per block along a row, 1..32: up
// to two 16-row tiles; a row's last block may be shorter), block_cols (16 or 32 output
// channels, dividing K rounded up to 16: a last block past K computes on zero weights
// and writes its first K % block_cols channels only), loop_order (pk: pixel rows
// outer; kp: channel blocks outer), parallel (the outer loop on the thread pool).
// Needs a target with amx-tile and amx-int8; errors name what is missing.
absl::StatusOr<ir::LoweredFunc> QuantizedConv2dAmxKernel(const QuantizedConvShape& shape, const Config& config,
                                                         const Target& target, const std::string& name);

// The same convolution on vector units: a register tile of ow_reg output pixels of one
// row x oc_vecs vectors of vec_lanes output channels, summed over the filter rows and
// the S*Cp/4 four-byte words of each (one broadcast input word per pixel times one
// weight vector per column: Dot4, i.e. vpdpbusd on AVX-512 VNNI and AVX-VNNI, the
// exact widening multiply-adds elsewhere), then the same write-back; loop_order and
// parallel as for the AMX kernel. Same layouts and entry point. Needs vec_lanes x
// oc_vecs dividing K.
absl::StatusOr<ir::LoweredFunc> QuantizedConv2dVnniKernel(const QuantizedConvShape& shape, const Config& config,
                                                          const Target& target, const std::string& name);

// The template of qconv2d tasks: on a target with AMX the AMX kernel's space (engine
// amx), elsewhere the vector kernel's (engine vnni).
class QuantizedConv2dTemplate : public Template {
 public:
  std::string name() const override { return "qconv2d_cpu"; }
  int version() const override { return 1; }
  bool HasPrepack() const override { return true; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
};

// The int8 depthwise convolution (qdepthwise_conv2d), on vector units: the same
// NHWC padded input (Cp = C), the weights widened to int32 at prepack, F.packed
// [R][S][C]; a register tile of ow_reg output pixels of one row x ch_vecs vectors of
// vec_lanes channels, each tap one zero-extended input vector (vpmovzxbd) times the
// tap's weight vector added in int32; the int8 epilogue in the write-back. Knobs:
// ow_reg, vec_lanes (dividing C), ch_vecs, parallel (over pixel rows). Entry point: I,
// F, [bias], [scale], I.padded, F.packed, F.offset, O.nhwc (internal), O.
absl::StatusOr<ir::LoweredFunc> QuantizedDepthwiseKernel(const QuantizedConvShape& shape, const Config& config,
                                                         const Target& target, const std::string& name);

class QuantizedDepthwiseTemplate : public Template {
 public:
  std::string name() const override { return "qdepthwise_conv2d_cpu"; }
  int version() const override { return 1; }
  bool HasPrepack() const override { return true; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
};

// The kernel of a qconv2d or qdepthwise_conv2d task and `config` with the float
// boundary above (in_scale, out_scale): what a quantized layer of a model runs.
// `into` (optional): the output handed over, see QuantizedConvShape::into.
// `residual` (optional): the residual Add computed on the way out, see
// QuantizedConvShape::residual; `pool` (optional) the max-pool, see
// QuantizedConvShape::pool (not with `into` or `residual`).
struct QuantizedHandOver {
  std::string buffer;
  int64_t pad = 0, cp = 0;
};
struct QuantizedResidual {
  bool relu = false;
  double sum_scale = 0;
  int64_t sum_zero = 0;
  // Non-empty: read from that padded uint8 buffer (QuantizedConvShape::residual_from).
  std::string from;
  int64_t from_pad = 0, from_cp = 0, from_zero = 0;
  double from_scale = 0;
};
absl::StatusOr<ir::LoweredFunc> InstantiateQuantizedConvInModel(const TuningTask& task, const Target& target,
                                                                const Config& config, double in_scale,
                                                                double out_scale,
                                                                const QuantizedHandOver* into = nullptr,
                                                                const QuantizedResidual* residual = nullptr,
                                                                const QuantizedMaxPool* pool = nullptr);

// block_rows values worth trying for `ow` output pixels per row: 16 and 32 (capped at
// ow), and the even splits of a row into blocks of at most 16 and 32 (56 -> 14, 28),
// which leave no short last block. Ascending.
std::vector<int64_t> QuantizedConvBlockRows(int64_t ow);

}  // namespace tuneforge
