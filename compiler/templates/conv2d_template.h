// The convolution templates: `conv2d_cpu` (conv2d, groups 1, dilation 1) and
// `depthwise_conv2d_cpu`, computed in blocked layouts as oneDNN does.
//
// conv2d_cpu also computes 3x3 stride-1 convolutions by Winograd's algorithm when its
// `algorithm` knob says so (conv2d_winograd.h), in the same layouts.
//
// Layouts (x = input-channel block, y = output-channel block; both are knobs):
//   I.blocked  [N, C/x, H+2*pad, W+2*pad, x]   NCHW[x]c with the zero border in place
//   F.blocked  [K/y, C/x, R, S, x, y]          OIHW[x]i[y]o   (depthwise: [C/x, R, S, x])
//   O.blocked  [N, K/y, OH, OW, y]             NCHW[y]c       (depthwise: y = x)
// The task's tensors stay NCHW / OIHW (what the reference and the agent use). The
// layout transforms are separate entry points of the kernel, not part of the timed
// region, like the reorders a oneDNN benchmark leaves out:
//   prepack: I -> I.blocked (with padding), F -> F.blocked   (LoweredFunc::prepack)
//   unpack:  O.blocked -> O                                   (LoweredFunc::unpack)
// so a network that keeps activations blocked pays them once at its edges.
//
// The timed kernel is a register-tiled micro-kernel: for each output row, a tile of
// `ow_reg` output pixels x `oc_vecs` vectors of `vec_lanes` output channels stays in
// vector registers while the reduction (input-channel blocks, filter rows and
// columns, then the x channels of a block, unrolled by `unroll_ci`) streams through;
// each step broadcasts one input value per pixel and loads the filter vectors once.
// Depthwise: the tile is `ow_reg` pixels x `oc_vecs` channel vectors, the reduction
// only the R x S window, each step one input vector per pixel times one filter vector.
// Entry point: I, F, I.blocked, F.blocked, O.blocked (internal), O.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/templates/template.h"

namespace tuneforge {

// Where a model wants a convolution's output instead of the blocked output O.blocked:
// straight from the register tile's write-back into `buffer`, a reader's blocked,
// zero-bordered input [N, K/block, OH+2*pad_h, OW+2*pad_w, block], each finished sum
// through `epilogue` (bias, residual, relu: the model's). `inputs` are the buffers
// the epilogue loads (parameters appended to the kernel's).
struct ConvOutputSpec {
  std::string buffer;
  int64_t block = 0, pad_h = 0, pad_w = 0;
  std::vector<ir::BufferParam> inputs;
  // The value stored for output element (n, base + lane, h, w) — `base` a multiple of
  // the lane run, `lane` the vector variable — from the finished sum `sum`.
  std::function<ir::Expr(ir::Expr sum, ir::Expr n, ir::Expr base, ir::Expr lane, ir::Expr h, ir::Expr w)>
      epilogue;
};

// Weights beyond this many bytes come from memory in a model (they exceed a core's
// share of the caches between two uses): the default schedule prefers the direct
// kernel for them, and the executor streams them by default.
inline constexpr int64_t kStreamedWeightBytes = int64_t{1} << 20;

class Conv2dTemplate : public Template {
 public:
  explicit Conv2dTemplate(bool depthwise) : depthwise_(depthwise) {}
  std::string name() const override { return depthwise_ ? "depthwise_conv2d_cpu" : "conv2d_cpu"; }
  int version() const override { return 1; }
  bool HasPrepack() const override { return true; }
  // Winograd configs: the a*a products per output tile (the transforms not counted).
  double Flops(const TuningTask& task, const Config& config) const override;
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
  // Without prepack and unpack.
  absl::StatusOr<ir::LoweredFunc> InstantiateKernel(const TuningTask& task, const Target& target,
                                                    const Config& config) const override;
  // Instantiate, and the kernel also prefetches the next output-channel block's packed
  // weights while it computes with the current one, the next block's cache lines
  // spread evenly over the passes that reuse the current block's (output rows and row
  // tiles; each step of the first reduction loop fetches its share). For kernels
  // whose weights come from memory, as every layer's do in a model whose weights
  // exceed the last-level cache (ResNet-18: 46 MB): the weight stream then overlaps
  // the FMAs instead of stalling the first pass over each block. A kernel timed alone
  // has its weights in cache and gains nothing. conv2d only (depthwise: Instantiate).
  absl::StatusOr<ir::LoweredFunc> InstantiateStreamingWeights(const TuningTask& task, const Target& target,
                                                              const Config& config) const;
  // Whether the config's kernel can write its output into a layout of `block` channels
  // per block: the block a multiple of the output-channel block y, or dividing it
  // into runs of whole vectors (Winograd: a multiple of the vector's lanes). `residual_block` is the block of a blocked residual
  // the epilogue loads, which those runs must not cross (0: no residual, or one in
  // NCHW, whose lanes are loaded one by one).
  static bool CanWriteInto(const Config& config, int64_t block, int64_t residual_block);
  // Instantiate (optionally streaming weights) with the output written as `spec` says
  // (CanWriteInto must hold). The kernel still lists O.blocked, unused.
  absl::StatusOr<ir::LoweredFunc> InstantiateInto(const TuningTask& task, const Target& target,
                                                  const Config& config, bool prefetch_weights,
                                                  const ConvOutputSpec& spec) const;

 private:
  // The entry symbol (KernelSymbol), or with `kernel_only` a fixed name.
  std::string Symbol(const TuningTask& task, const Config& config, bool kernel_only) const;
  // `kernel_only`: no prepack and unpack, and a fixed name (InstantiateKernel).
  absl::StatusOr<ir::LoweredFunc> Build(const TuningTask& task, const Target& target, const Config& config,
                                        bool prefetch_weights, const ConvOutputSpec* spec = nullptr,
                                        bool kernel_only = false) const;
  // The Winograd kernels (conv2d_winograd.h) of a config whose algorithm is not
  // direct (they do not stream weights), writing O.blocked or, with `spec`, the
  // reader's layout.
  absl::StatusOr<ir::LoweredFunc> BuildWinograd(const TuningTask& task, const Config& config, int64_t x,
                                                int64_t y, const ConvOutputSpec* spec, bool kernel_only) const;
  bool depthwise_;
};

}  // namespace tuneforge
