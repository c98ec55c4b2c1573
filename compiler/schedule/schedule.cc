// Schedule primitives (split, reorder, vectorize, parallel, ...) and lowering to loops.
#include "compiler/schedule/schedule.h"

#include <algorithm>

#include "compiler/support/status.h"

namespace tuneforge {

namespace {

ir::Expr Placeholder(const char* name, ir::DType dtype) {
  auto node = std::make_shared<ir::ExprNode>();
  node->kind = ir::ExprKind::kVar;
  node->dtype = dtype;
  node->name = name;
  return node;
}

}  // namespace

ir::Expr ReducedValue(ir::DType dtype) { return Placeholder("%reduced", dtype); }
ir::Expr Accumulator(ir::DType dtype) { return Placeholder("%acc", dtype); }

ir::Expr ComputeDef::ApplyEpilogue(const ir::Expr& reduced) const {
  if (!epilogue) return reduced;
  return ir::Substitute(epilogue, {{"%reduced", reduced}});
}

const ir::BufferParam& ComputeDef::output() const {
  for (const ir::BufferParam& p : params)
    if (p.is_output) return p;
  TF_CHECK(false, "compute ", name, " has no output buffer");
}

Schedule::Schedule(ComputeDef def) : def_(std::move(def)) {
  // Templates split each axis two or three times: no reallocation while they do (the
  // cost model schedules thousands of candidates a second).
  constexpr size_t kSplitsPerAxis = 3;
  leaves_.reserve(def_.axes.size() * (kSplitsPerAxis + 1));
  splits_.reserve(def_.axes.size() * kSplitsPerAxis);
  retired_.reserve(def_.axes.size() * kSplitsPerAxis);
  for (const AxisDef& axis : def_.axes) {
    leaves_.push_back(Loop{axis.name, axis.name, axis.is_reduce, ir::ForKind::kSerial});
  }
}

Schedule::Loop* Schedule::Find(const std::string& name) {
  for (Loop& l : leaves_)
    if (l.name == name) return &l;
  return nullptr;
}

bool Schedule::NameInUse(const std::string& name) const {
  for (const Loop& l : leaves_)
    if (l.name == name) return true;
  return std::find(retired_.begin(), retired_.end(), name) != retired_.end();
}

absl::Status Schedule::Split(const std::string& loop, int64_t factor, const std::string& outer,
                             const std::string& inner) {
  Loop* l = Find(loop);
  if (!l) return absl::InvalidArgumentError("split: no loop named " + loop);
  if (factor < 1) return absl::InvalidArgumentError("split: factor must be >= 1");
  if (outer == inner || NameInUse(outer) || NameInUse(inner)) {
    return absl::InvalidArgumentError("split: loop names " + outer + ", " + inner + " are taken");
  }
  if (l->kind != ir::ForKind::kSerial) {
    return absl::InvalidArgumentError("split: loop " + loop + " is already annotated");
  }
  // Recorded first: `loop` may name the leaf renamed below.
  splits_.push_back(SplitRecord{loop, outer, inner, factor});
  retired_.push_back(loop);
  Loop i = *l;
  i.name = inner;
  l->name = outer;
  const size_t pos = l - leaves_.data();
  leaves_.insert(leaves_.begin() + pos + 1, std::move(i));
  return absl::OkStatus();
}

absl::Status Schedule::Reorder(const std::vector<std::string>& loops) {
  std::vector<size_t> positions;
  std::vector<bool> seen(leaves_.size());
  for (const std::string& name : loops) {
    Loop* l = Find(name);
    if (!l) return absl::InvalidArgumentError("reorder: no loop named " + name);
    const size_t p = l - leaves_.data();
    if (seen[p]) return absl::InvalidArgumentError("reorder: " + name + " twice");
    seen[p] = true;
    positions.push_back(p);
  }
  std::vector<Loop> moved;
  moved.reserve(positions.size());
  for (size_t p : positions) moved.push_back(std::move(leaves_[p]));
  std::sort(positions.begin(), positions.end());
  for (size_t i = 0; i < positions.size(); ++i) leaves_[positions[i]] = std::move(moved[i]);
  return absl::OkStatus();
}

absl::Status Schedule::Fuse(const std::string& outer, const std::string& inner,
                            const std::string& fused) {
  Loop* o = Find(outer);
  Loop* i = Find(inner);
  if (!o || !i) return absl::InvalidArgumentError("fuse: no loop named " + (o ? inner : outer));
  if (i != o + 1) return absl::InvalidArgumentError("fuse: " + inner + " is not right inside " + outer);
  if (o->is_reduce || i->is_reduce) return absl::InvalidArgumentError("fuse: reduction loops");
  if (o->kind != ir::ForKind::kSerial || i->kind != ir::ForKind::kSerial) {
    return absl::InvalidArgumentError("fuse: " + outer + " or " + inner + " is already annotated");
  }
  if (NameInUse(fused)) return absl::InvalidArgumentError("fuse: loop name " + fused + " is taken");
  Loop f = *o;
  f.name = fused;
  f.axis = o->axis + "*" + i->axis;
  size_t pos = o - leaves_.data();
  leaves_[pos] = f;
  leaves_.erase(leaves_.begin() + pos + 1);
  fuses_.push_back(FuseRecord{outer, inner, fused});
  retired_.push_back(outer);
  retired_.push_back(inner);
  return absl::OkStatus();
}

absl::Status Schedule::Vectorize(const std::string& loop) {
  Loop* l = Find(loop);
  if (!l) return absl::InvalidArgumentError("vectorize: no loop named " + loop);
  if (l->is_reduce) return absl::InvalidArgumentError("vectorize: " + loop + " is a reduction loop");
  l->kind = ir::ForKind::kVectorized;
  return absl::OkStatus();
}

absl::Status Schedule::Unroll(const std::string& loop) {
  Loop* l = Find(loop);
  if (!l) return absl::InvalidArgumentError("unroll: no loop named " + loop);
  l->kind = ir::ForKind::kUnrolled;
  return absl::OkStatus();
}

absl::Status Schedule::Parallel(const std::string& loop) {
  Loop* l = Find(loop);
  if (!l) return absl::InvalidArgumentError("parallel: no loop named " + loop);
  if (l->is_reduce) return absl::InvalidArgumentError("parallel: " + loop + " is a reduction loop");
  l->kind = ir::ForKind::kParallel;
  return absl::OkStatus();
}

absl::Status Schedule::CacheWrite(const std::string& loop) {
  if (!Find(loop)) return absl::InvalidArgumentError("cache_write: no loop named " + loop);
  if (cache_write_at_) return absl::InvalidArgumentError("cache_write: already set");
  cache_write_at_ = loop;
  return absl::OkStatus();
}

}  // namespace tuneforge
