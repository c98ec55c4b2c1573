// Feature extraction: (lowered loop IR, Config) -> FeatureVector, the input of the
// CostModel. Every feature is documented in docs/features.md; keep the two in sync.
//
// The vector has two parts:
//   1. kNumIrFeatures loop-nest features computed from ir::LoweredFunc, then the
//      optional sets (FeatureOptions: the richer set, off; the register tile's, on).
//      They are shape-generic (ratios, log2 of sizes, fractions), so a model trained
//      on one shape of an operator ranks configs of another shape of the same operator.
//   2. Knob features: one per integer knob (its value) and one per string knob
//      (index of the value in the knob's list), in ConfigSpace order. Their number
//      depends on the template, so a FeatureVector is fixed-length per template.
//
// Extraction is one walk over the IR (no interpretation); bench search reports its
// cost in microseconds per candidate.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/ir.h"
#include "compiler/target/target.h"
#include "compiler/templates/config_space.h"

namespace tuneforge::costmodel {

using FeatureVector = std::vector<float>;

// Which template knobs get a feature of their own after the loop-IR ones.
enum class KnobFeatures {
  kSpace,  // one per knob when the ConfigSpace says so (ConfigSpace::knob_features),
           // else one per knob the loop IR does not show (Knob::hidden_in_ir)
  kAll,    // one per knob
  kNone,   // none
};

// Cache sizes are not part of the Target's identity (LLVM does not know them), so they
// are options with the sizes of a current x86 server core as defaults.
struct FeatureOptions {
  double l1_bytes = 32 * 1024;
  double l2_bytes = 1024 * 1024;
  double l3_bytes = 32 * 1024 * 1024;
  // The richer set (kNumRichFeatures more, after the loop-IR ones): an arithmetic
  // intensity curve, per-buffer footprints and reuse, annotation positions
  // (docs/features.md "Richer features"). Compared offline by `bench search --eval-db`.
  bool rich = false;
  // The register tile's demand (kNumRegisterFeatures more, after the richer set when
  // both are on): vector accumulators and operands of the straight-line SIMD body
  // against the target's vector registers (docs/features.md "Register tile"; on since
  // kFeatureVersion 3).
  bool register_tile = true;
  // docs/features.md "Knob features".
  KnobFeatures knobs = KnobFeatures::kSpace;
};

// Version of the feature layout. Stored cost models are keyed by it (tuner/model_store.h
// ModelKey), so a model trained on another layout is never given these vectors.
//   1: the 44 loop-IR features and one per knob (sessions 1-15)
//   2: knob features only where the ConfigSpace asks (KnobFeatures::kSpace)
//   3: the register tile's two features before the knobs (FeatureOptions::register_tile)
inline constexpr int kFeatureVersion = 3;

// Number of loop-IR features (part 1 above).
inline constexpr int kNumIrFeatures = 44;
// Number of the richer set's features, when FeatureOptions::rich.
inline constexpr int kNumRichFeatures = 21;
// Number of the register tile's features, when FeatureOptions::register_tile.
inline constexpr int kNumRegisterFeatures = 2;

// Thread-safe (immutable after construction).
class FeatureExtractor {
 public:
  FeatureExtractor(const ConfigSpace& space, const Target& target, FeatureOptions options = {});

  int size() const { return knob_offset() + static_cast<int>(knobs_.size()); }
  // Names, index-aligned with the vector (for docs, debugging and feature importance).
  std::vector<std::string> Names() const;
  // Deterministic: the same (func, config) always gives the same vector.
  FeatureVector Extract(const ir::LoweredFunc& func, const Config& config) const;

 private:
  void ExtractIr(const ir::LoweredFunc& func, float* out) const;
  int knob_offset() const {
    return kNumIrFeatures + (options_.rich ? kNumRichFeatures : 0) +
           (options_.register_tile ? kNumRegisterFeatures : 0);
  }

  std::vector<Knob> knobs_;
  int cores_;
  int max_lanes_;
  int vector_registers_;
  FeatureOptions options_;
};

// The loop-IR feature names alone (the first kNumIrFeatures of Names()).
const std::vector<std::string>& IrFeatureNames();

}  // namespace tuneforge::costmodel
