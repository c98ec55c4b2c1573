// The matmul template (C[M,N] = A[M,K] * B[K,N], row-major, float32).
//
// Loop structure (names as printed by `tuneforge show`):
//   <outer: i.o j.o k.o in the order of knob loop_order>   cache tiles
//     i.m  j.m                                            register tiles in the cache tile
//       k.m  k.u (unrolled)                                reduction inside the tile
//         i.r (unrolled)  j.v (unrolled)  j.l (vectorised) register tile: tile_i_reg rows
//                                                           x tile_j_vecs vectors of vec_lanes
// Knobs: see MatmulTemplate::Space or docs/architecture.md. Tails of any size are
// handled by lowering (min() extents and versioned full tiles).
#pragma once

#include "compiler/schedule/compute.h"
#include "compiler/templates/template.h"

namespace tuneforge {

ComputeDef MatmulCompute(int64_t m, int64_t n, int64_t k);

class MatmulTemplate : public Template {
 public:
  std::string name() const override { return "matmul_cpu"; }
  int version() const override { return 1; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
};

}  // namespace tuneforge
