// The dense template (`dense_cpu`): an inference layer
//   Y[M,N] = act(X[M,K] * W[K,N] + b[N])     (b when bias=1, act = ReLU when relu=1)
// with W stored K x N row-major (in x out, as Keras stores a Dense kernel).
//
// The loop nest is the matmul template's (same knobs, see matmul_template.h); the
// differences are what an inference layer allows:
//   - W and b are constant, so knob `pack_w` copies W into panels of the register
//     tile's width ONCE, in the kernel's prepack entry (ir::LoweredFunc::prepack),
//     outside the timed region, as oneDNN and TVM pre-pack inference weights. The
//     entry point takes X, W, [bias], W.packed (internal) and Y; with pack_w=0 W.packed
//     is unused and there is no prepack entry.
//   - bias add and ReLU are the compute's epilogue, fused into the write-back of the
//     register tile (lowering applies it after the last reduction step).
#pragma once

#include <functional>
#include <vector>

#include "compiler/templates/template.h"

namespace tuneforge {

// More elementwise work applied after bias and ReLU, e.g. a model's Gelu: `fn` maps
// the layer's value at row i, column j (int64 expressions) to the value stored, and
// may load the `inputs` (extra parameters, placed before Y). What the graph executor
// fuses into a dense layer; the tuning task itself has none.
struct DenseEpilogue {
  std::vector<ir::BufferParam> inputs;
  std::function<ir::Expr(ir::Expr value, ir::Expr i, ir::Expr j)> fn;
};

class DenseTemplate : public Template {
 public:
  std::string name() const override { return "dense_cpu"; }
  int version() const override { return 1; }
  bool HasPrepack() const override { return true; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
  // Instantiate's params and body under a fixed name, without the prepack entry: the
  // cost model's features read neither, and hashing the config into the symbol was a
  // tenth of a GEMV candidate's lowering.
  absl::StatusOr<ir::LoweredFunc> InstantiateKernel(const TuningTask& task, const Target& target,
                                                    const Config& config) const override;
  absl::StatusOr<ir::LoweredFunc> InstantiateWithEpilogue(const TuningTask& task, const Target& target,
                                                          const Config& config,
                                                          const DenseEpilogue& extra) const;

 private:
  absl::StatusOr<ir::LoweredFunc> Build(const TuningTask& task, const Target& target, const Config& config,
                                        const DenseEpilogue& extra, bool kernel_only) const;
};

}  // namespace tuneforge
