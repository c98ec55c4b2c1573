// Schedule: how a ComputeDef becomes loops. It starts as one loop per axis in
// definition order and is changed by primitives, as in Halide and TVM:
//
//   Split(loop, factor, outer, inner)  loop -> outer * factor + inner; a factor that
//                                      does not divide leaves a tail (handled by
//                                      lowering with min() extents)
//   Reorder({loops...})                 the named loops take the positions they
//                                      occupy, in the given order
//   Fuse(outer, inner, fused)           two adjacent spatial loops without tails
//                                      become one: outer = fused / |inner|,
//                                      inner = fused % |inner| (e.g. to run M and N
//                                      cache tiles as one parallel loop)
//   Vectorize(loop) / Unroll(loop) / Parallel(loop)
//   CacheWrite(loop)                    accumulate the output tile computed inside
//                                      `loop` in a local buffer (registers, once
//                                      unrolled and vectorised) and write it back once
//
// Primitives return InvalidArgument for requests that cannot work (unknown loop,
// vectorising a reduction, ...); templates turn such errors into invalid configs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/schedule/compute.h"

namespace tuneforge {

class Schedule {
 public:
  explicit Schedule(ComputeDef def);

  absl::Status Split(const std::string& loop, int64_t factor, const std::string& outer,
                     const std::string& inner);
  absl::Status Reorder(const std::vector<std::string>& loops);
  absl::Status Fuse(const std::string& outer, const std::string& inner, const std::string& fused);
  absl::Status Vectorize(const std::string& loop);
  absl::Status Unroll(const std::string& loop);
  absl::Status Parallel(const std::string& loop);
  absl::Status CacheWrite(const std::string& loop);

  // Introspection for lowering and tests.
  struct Loop {
    std::string name;
    std::string axis;        // the compute axis it derives from
    bool is_reduce = false;
    ir::ForKind kind = ir::ForKind::kSerial;
  };
  struct SplitRecord {
    std::string parent, outer, inner;
    int64_t factor;
  };
  const ComputeDef& def() const { return def_; }
  const std::vector<Loop>& leaves() const { return leaves_; }  // outermost first
  struct FuseRecord {
    std::string outer, inner, fused;
  };
  const std::vector<SplitRecord>& splits() const { return splits_; }
  const std::vector<FuseRecord>& fuses() const { return fuses_; }
  const std::optional<std::string>& cache_write_at() const { return cache_write_at_; }

 private:
  Loop* Find(const std::string& name);
  bool NameInUse(const std::string& name) const;

  ComputeDef def_;
  std::vector<Loop> leaves_;
  std::vector<SplitRecord> splits_;
  std::vector<FuseRecord> fuses_;
  std::vector<std::string> retired_;  // names of loops that were split or fused
  std::optional<std::string> cache_write_at_;
};

// Lowers a schedule to a loop nest. Fails with InvalidArgument when the loop order
// cannot be lowered (e.g. a split's inner loop with a tail placed outside its outer
// loop, a vectorised loop that is not innermost).
absl::StatusOr<ir::LoweredFunc> Lower(const Schedule& schedule, const std::string& func_name);

}  // namespace tuneforge
