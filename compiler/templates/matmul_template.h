// The matmul template (C[M,N] = A[M,K] * B[K,N], row-major, float32).
//
// Loop structure (names as printed by `tuneforge show`):
//   <outer: i.o j.o k.o in the order of knob loop_order>   cache tiles
//     i.m  j.m                                            register tiles in the cache tile
//       k.m  k.u (unrolled)                                reduction inside the tile
//         i.r (unrolled)  j.v (unrolled)  j.l (vectorised) register tile: tile_i_reg rows
//                                                           x tile_j_vecs vectors of vec_lanes
// batch_matmul (C[b] = A[b] * B[b] for each of B matrices, stored one after the
// other) is the same template with a batch loop b outermost, parallel when there
// are at least two batches per thread.
// Knobs: see MatmulTemplate::Space or docs/architecture.md. Tails of any size are
// handled by lowering (min() extents and versioned full tiles).
#pragma once

#include <functional>
#include <vector>

#include "compiler/schedule/compute.h"
#include "compiler/schedule/schedule.h"
#include "compiler/templates/template.h"

namespace tuneforge {

// Buffer names of a GEMM-shaped compute: C = A * B, with B read from `b_packed`
// when the schedule packs it into column panels.
struct GemmBuffers {
  std::string a = "A", b = "B", b_packed = "B.packed", c = "C", a_packed = "A.packed";
};

ComputeDef MatmulCompute(int64_t m, int64_t n, int64_t k);
// The same with B read from column panels of width `panel` (knob pack_b).
ComputeDef MatmulPackedCompute(int64_t m, int64_t n, int64_t k, int64_t panel);
// Both, with a batch axis when batch >= 1 (batch == 0: matmul); panel 0 = unpacked.
// a_panel > 0: A is read from row panels of `a_panel` rows (knob pack_a), see
// GemmCompute.
ComputeDef BatchMatmulCompute(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t panel,
                              int64_t a_panel = 0);
ComputeDef GemmCompute(const std::string& name, const GemmBuffers& names, int64_t batch, int64_t m,
                       int64_t n, int64_t k, int64_t panel, int64_t a_panel = 0);

// The pieces the GEMM-shaped templates (matmul, batch_matmul, dense) share. The space's
// knobs are the ones below plus `pack` (0/1: read B from panels of the register
// tile's width), whose name and meaning differ per template.
// `with_pack_a`: also knob pack_a (read A from row panels), matmul and batch_matmul.
ConfigSpace GemmSpace(int64_t m, int64_t n, int64_t k, const Target& target, const Knob& pack,
                      bool with_pack_a = false);
Config GemmNaive(int64_t k, const std::string& pack_knob);
// Hand-picked configs for an M x N product (`batch` of them, 0 = unbatched), best
// guess first.
std::vector<Config> GemmHeuristics(const ConfigSpace& space, const Target& target,
                                   const std::string& pack_knob, int64_t m, int64_t n,
                                   int64_t batch);
// Splits, orders, unrolls, vectorises and parallelises a GemmCompute schedule for `c`
// (an m x n product); `packed` when the compute reads panels (axes jp, jr instead of j).
// `packed_a` when the compute reads row panels of A (axes ip, i.r instead of i).
absl::Status ScheduleGemm(Schedule* s, const Config& c, bool packed, int64_t batch, int64_t m,
                          int64_t n, const Target& target, bool packed_a = false);
// The share of the threads' time a parallel m x n GEMM under `c` keeps busy: its
// parallel loop's tiles dealt out in rounds (with `fused`, the row and column tiles
// as one loop). 1 = no idle time; 0 for a loop order that cannot fuse.
double GemmBusyShare(const Config& c, int64_t m, int64_t n, int threads, bool fused);
// The copy of `names.b` into panels `names.b_packed` of lanes * vecs columns
// (batch >= 1 matrices); the panel loop on the thread pool when `parallel`.
ir::Stmt PackBNest(const GemmBuffers& names, int64_t batch, int64_t n, int64_t k, int64_t lanes,
                   int64_t vecs, bool parallel);
// The copy of `names.a` into row panels `names.a_packed` of `rows` rows, each panel
// K x rows with a k-step's rows contiguous (the register tile's broadcasts of one
// k-step are one cache line); the panel loop on the thread pool when `parallel`.
ir::Stmt PackANest(const GemmBuffers& names, int64_t batch, int64_t m, int64_t k, int64_t rows,
                   bool parallel);

// Knob prefetch_k: software prefetch `distance` k-steps ahead. At each step of every
// register tile's reduction loop k.m, prefetches the row(s) of `b_buffer` (B, or its
// panels) that the tile will read `distance` k-steps later (rounded to whole k.m
// steps of unroll_k): one prefetch per vector of the tile's row, for each k of the
// step. The address is the tile's own load of `b_buffer` with k.m shifted and lane
// 0; past the end of a k tile it runs on into the next tile's rows (for panels, the
// same panel), past the buffer it is a harmless hint. distance 0: `body` unchanged.
ir::Stmt AddGemmPrefetch(const ir::Stmt& body, const std::string& b_buffer, int64_t distance);

// Elementwise work a matmul's write-back applies to each result (a 1x1 convolution
// computed as one: bias, residual, relu): `fn` maps the sum at (batch b, row i,
// column j) to what is stored, reading `inputs` (parameters before C's).
struct GemmEpilogue {
  std::vector<ir::BufferParam> inputs;
  std::function<ir::Expr(ir::Expr value, ir::Expr b, ir::Expr i, ir::Expr j)> fn;
};

class MatmulTemplate : public Template {
 public:
  explicit MatmulTemplate(bool batched = false) : batched_(batched) {}
  std::string name() const override { return batched_ ? "batch_matmul_cpu" : "matmul_cpu"; }
  int version() const override { return batched_ ? 1 : 2; }
  ConfigSpace Space(const TuningTask& task, const Target& target) const override;
  Config Naive(const TuningTask& task, const Target& target) const override;
  std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const override;
  absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                              const Config& config) const override;
  // Instantiate's kernel under a fixed name: hashing the config into the entry symbol
  // was a tenth of a candidate's lowering, and the cost model's kernels are never
  // compiled. (The packing nests stay: they run inside the timed entry.)
  absl::StatusOr<ir::LoweredFunc> InstantiateKernel(const TuningTask& task, const Target& target,
                                                    const Config& config) const override;
  // Instantiate with `extra` applied to every result as it is stored.
  absl::StatusOr<ir::LoweredFunc> InstantiateWithEpilogue(const TuningTask& task, const Target& target,
                                                          const Config& config, const GemmEpilogue& extra) const;

 private:
  absl::StatusOr<ir::LoweredFunc> Build(const TuningTask& task, const Target& target, const Config& config,
                                        const GemmEpilogue& extra, bool kernel_only) const;

  bool batched_;
};

}  // namespace tuneforge
