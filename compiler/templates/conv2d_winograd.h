// Winograd's minimal filtering for conv2d_cpu: F(m x m, 3 x 3), chosen by the
// template's `algorithm` knob (winograd_f23: m = 2 on 4x4 input tiles; winograd_f43:
// m = 4 on 6x6 tiles; Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks"). A 3x3 stride-1 convolution costs 9 multiply-adds per output and input
// channel directly; F(2,3) does 16 per 4 outputs (2.25x fewer), F(4,3) 36 per 16
// (4x fewer), paid for with transforms that are cheap next to the products when
// there are many channels, and with rounding error that grows with m (F(4,3)'s
// transforms have coefficients up to 8; still inside the conv2d tolerance).
//
// The kernel keeps conv2d_cpu's buffers and layouts, so a model hands activations
// over to it exactly as to the direct kernel:
//   I.blocked  [N, C/x, H+2*pad, W+2*pad, x]   as direct (the same prepack)
//   F.blocked  [K/y, a*a, C/x, x, y]           U = G g G^T per channel pair, a = m+2
//   O.blocked  [N, K/y, OH, OW, y]             as direct (the same unpack)
// The output tiles (ceil(OH/m) x ceil(OW/m) of them) are taken in groups of
// `tile_rows` rows of tiles, the parallel loop. Where m does not divide OH (OW), the
// last row (column) of tiles is partial: its patches' points past the padded input
// are zeros and its outputs past OH (OW) are not written, which costs the GEMM's work
// on the points left out (e.g. 7x7 in F(4,3): 64 outputs computed for 49). Per group:
//   1. input transform: each tile's a x a patch of every channel -> V = B^T d B,
//      vectorized over the channels of a block, into a scratch [a*a, C/x, tiles, x];
//   2. per output-channel block, a*a small GEMMs M[xi] = V[xi] (tiles x C) times
//      U[xi] (C x y), each through a register tile of `ow_reg` tiles x `oc_vecs`
//      vectors (the direct kernel's knobs, reinterpreted), the channel loop unrolled
//      by `unroll_ci`;
//   3. output transform Y = A^T M A of each tile into O.blocked (or, in a model, into
//      the reader's blocked input with the epilogue applied).
// `outer_order` orders step 2: koh runs every tile through one U[xi] before the next
// (U stays in cache; M for the whole group in a scratch), ohk runs all a*a GEMMs for
// one register tile of tiles and transforms its outputs at once (M small and local).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"
#include "compiler/templates/conv2d_template.h"

namespace tuneforge::winograd {

// The output tile m of an `algorithm` knob value; 0 for "direct" (or anything else).
int64_t OutputTile(const std::string& algorithm);

// Whether F(m x m, 3 x 3) computes this convolution: a 3x3 filter, stride 1, OH and
// OW at least m (any pad; partial tiles where m does not divide OH or OW).
bool Applies(int64_t r, int64_t s, int64_t stride, int64_t oh, int64_t ow, int64_t m);
// The output tiles of m along an output extent: ceil(extent / m).
int64_t Tiles(int64_t extent, int64_t m);

// A Winograd convolution's shape and schedule.
struct Plan {
  int64_t n, c, k, hp, wp, oh, ow;  // hp, wp: the padded input
  int64_t m;                        // output tile: 2 or 4
  int64_t x, y, lanes;              // input-channel block, output-channel block, vector lanes
  int64_t tiles;                    // output tiles in the GEMM's register tile
  int64_t tile_rows;                // rows of tiles per group (the parallel loop)
  int64_t unroll;                   // unroll of the channel loop in a block
  bool tile_outer;                  // outer_order ohk (see above)
  bool parallel;
  // Null: the output transform writes O.blocked. Else it writes spec's buffer (a
  // reader's blocked input, `block` a multiple of `lanes`) through its epilogue, as
  // the direct kernel's register tile does (Conv2dTemplate::InstantiateInto).
  const ConvOutputSpec* spec = nullptr;
};

// The shape of F.blocked: [K/y, a*a, C/x, x, y].
std::vector<int64_t> WeightShape(const Plan& p);
// The weight part of the prepack: F [K, C, 3, 3] -> F.blocked (U = G g G^T).
ir::Stmt WeightTransform(const Plan& p);
// The timed kernel: I.blocked, F.blocked -> O.blocked. Its transform stages are
// shared with the kernels built before it that read the same plan fields (process-
// wide, a bounded number; the cost model lowers thousands of kernels of one task).
ir::Stmt Kernel(const Plan& p);
// Forgets the shared stages, so that the next kernels are built from scratch (tests).
void ForgetSharedStages();

}  // namespace tuneforge::winograd
