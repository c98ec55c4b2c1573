// Executor: a model's steps planned, compiled, laid out in one arena and run.
#include "compiler/graph/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "compiler/codegen/build.h"
#include "compiler/codegen/ir_analysis.h"
#include "compiler/graph/kernels.h"
#include "compiler/graph/tasks.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/clock.h"
#include "compiler/support/hash.h"
#include "compiler/templates/conv2d_template.h"
#include "compiler/templates/quantized_conv2d.h"
#include "compiler/templates/dense_template.h"
#include "compiler/templates/matmul_template.h"
#include "compiler/support/status.h"

namespace tuneforge::graph {

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr int64_t kAlign = 64;

int64_t AlignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<float, FreeDeleter>;

AlignedBuffer Allocate(int64_t elements) {
  const size_t bytes = static_cast<size_t>(AlignUp(std::max<int64_t>(elements, 1) * 4));
  auto* p = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
  TF_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  std::memset(p, 0, bytes);
  return AlignedBuffer(p);
}

// Where a 4-D activation (N, C, H, W) lives: NCHW in `buffer` (block 0), or blocked
// NCHW[z]c (block z) with a zero border of pad_h, pad_w around each plane, as a
// convolution's blocked input is.
struct ActivationLayout {
  std::string buffer;
  std::vector<int64_t> dims;  // N, C, H, W
  int64_t block = 0;
  int64_t pad_h = 0, pad_w = 0;

  // The element (n, base + lane, h, w). `base` is a multiple of a divisor of the
  // block that `lane` stays below (lane never crosses a block), so the index is
  // linear in lane: one vector access when lane is the vector variable.
  ir::Expr Index(ir::Expr n, ir::Expr base, ir::Expr lane, ir::Expr h, ir::Expr w) const {
    using ir::Add;
    using ir::IntImm;
    using ir::Mul;
    if (block == 0) {
      return Add(Mul(Add(Mul(Add(Mul(n, IntImm(dims[1])), Add(base, lane)), IntImm(dims[2])), h), IntImm(dims[3])),
                 w);
    }
    const int64_t hp = dims[2] + 2 * pad_h, wp = dims[3] + 2 * pad_w;
    ir::Expr blocks = Add(Mul(n, IntImm(dims[1] / block)), ir::Div(base, IntImm(block)));
    ir::Expr row = Add(Mul(blocks, IntImm(hp)), Add(h, IntImm(pad_h)));
    ir::Expr pixel = Add(Mul(row, IntImm(wp)), Add(w, IntImm(pad_w)));
    return Add(Add(Mul(pixel, IntImm(block)), ir::Mod(base, IntImm(block))), lane);
  }
  // The blocked buffer's shape: N, C/block, H + 2 pad_h, W + 2 pad_w, block.
  std::vector<int64_t> BlockedShape() const {
    return {dims[0], dims[1] / block, dims[2] + 2 * pad_h, dims[3] + 2 * pad_w, block};
  }
};

// A kernel call before its buffers are placed: each argument is a graph tensor or
// memory the step owns.
struct PlannedStep {
  ir::LoweredFunc func;
  std::vector<int> tensors;           // per parameter; -1 = owned (scratch or computed constant)
  std::vector<std::vector<float>> owned_data;  // per parameter; used where tensors[i] == -1
  std::vector<int64_t> owned_elements;         // per parameter
  std::string source;
  bool is_conv = false;  // a conv template's kernel (params I, F, ..., O)
  const TaskUse* use = nullptr;  // the task occurrence a template step runs
  // Per parameter: another step's owned buffer this one uses instead of its own
  // (step index, parameter name); step -1 = none. See PropagateBlockedLayouts.
  std::vector<std::pair<int, std::string>> borrow;
  // A conv step: where the residual its epilogue adds lives (buffer empty: none), and
  // the max-pool fused after it (see FuseMaxPools).
  ActivationLayout residual;
  struct Pool {
    int64_t k_h = 0, k_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  };
  std::optional<Pool> pool;
  int node = -1;  // a node kernel's node
  // A conv2d template step: what re-instantiates its kernel to write a reader's
  // layout directly (PropagateBlockedLayouts).
  const Conv2dTemplate* conv_template = nullptr;
  std::optional<TuningTask> task;
  std::optional<Config> config;
  bool streams_weights = false;
  bool prologue = false;  // its input copy computes an elementwise chain (FuseConvPrologue)
};

// The memory plan: an offset in one arena for every run-time tensor's storage (its
// root) and every step's transient buffer, from their lifetimes in steps.
struct ArenaPlan {
  std::vector<int64_t> tensor_offset;  // per root tensor, in bytes; -1 when not in the arena
  // (owner step, parameter name) -> (offset, bytes) of a transient buffer
  std::map<std::pair<size_t, std::string>, std::pair<int64_t, int64_t>> transient;
  int64_t arena_bytes = 0, unplanned_bytes = 0;  // unplanned: one buffer per tensor
};

ArenaPlan PlanArena(const Graph& g, const std::vector<int>& root, const std::vector<PlannedStep>& planned) {
  // Lifetimes of the run-time tensors' storage, in steps (-1: the inputs, copied in
  // before the first step; num_steps: the outputs, read after the last).
  const int64_t num_steps = static_cast<int64_t>(planned.size());
  std::vector<int64_t> first(g.tensors.size(), INT64_MAX), last(g.tensors.size(), -1);
  auto touch = [&](int t, int64_t step) {
    const size_t r = static_cast<size_t>(root[static_cast<size_t>(t)]);
    first[r] = std::min(first[r], step);
    last[r] = std::max(last[r], step);
  };
  for (int t : g.inputs) touch(t, -1);
  for (int64_t s = 0; s < num_steps; ++s) {
    for (int t : planned[static_cast<size_t>(s)].tensors)
      if (t >= 0) touch(t, s);
  }
  for (int t : g.outputs) touch(t, num_steps);
  ArenaPlan plan;
  plan.tensor_offset.assign(g.tensors.size(), -1);
  // What the plan places: the root tensors, and the steps' transient buffers — owned
  // buffers that no prepack fills and that hold no data (a conv's blocked input and
  // output, which its input copy and kernel write before they are read, every run),
  // alive over the steps that use them (their owner and the steps that borrow them).
  // Sharing memory with other steps, a transient buffer is a recently written one
  // instead of one of its own that went cold since the last inference. What a prepack
  // fills (packed weights) keeps memory of its own.
  struct Item {
    int64_t bytes, first, last;
    int tensor;               // >= 0: a root tensor; -1: a step's transient buffer
    bool own_memory = false;  // a borrower's prepack fills it: not transient after all
  };
  std::vector<Item> items;
  for (size_t r = 0; r < g.tensors.size(); ++r) {
    if (last[r] >= 0 && !g.tensors[r].constant && root[r] == static_cast<int>(r)) {
      items.push_back({AlignUp(g.tensors[r].NumElements() * 4), first[r], last[r], static_cast<int>(r), false});
      plan.unplanned_bytes += items.back().bytes;
    }
  }
  // Per step, the buffers its prepack (what runs once, at load) uses.
  std::vector<std::set<std::string>> filled(planned.size());
  for (size_t s = 0; s < planned.size(); ++s) {
    if (planned[s].func.prepack) filled[s] = codegen::CollectUsedNames(planned[s].func.prepack).buffers;
  }
  std::map<std::pair<size_t, std::string>, size_t> transient;  // (owner step, param name) -> item
  for (size_t s = 0; s < planned.size(); ++s) {
    const PlannedStep& p = planned[s];
    for (size_t i = 0; i < p.func.params.size(); ++i) {
      if (p.tensors[i] >= 0 || p.borrow[i].first >= 0 || !p.owned_data[i].empty() ||
          filled[s].count(p.func.params[i].name)) {
        continue;
      }
      transient[{s, p.func.params[i].name}] = items.size();
      const int64_t at = static_cast<int64_t>(s);
      items.push_back({AlignUp(std::max<int64_t>(p.owned_elements[i], 1) * 4), at, at, -1, false});
    }
  }
  for (size_t s = 0; s < planned.size(); ++s) {  // a borrower's prepack must not fill it either
    const PlannedStep& p = planned[s];
    for (size_t i = 0; i < p.func.params.size(); ++i) {
      if (p.borrow[i].first < 0) continue;
      auto it = transient.find({static_cast<size_t>(p.borrow[i].first), p.borrow[i].second});
      if (it == transient.end()) continue;
      Item& item = items[it->second];
      item.own_memory |= filled[s].count(p.func.params[i].name) > 0;
      item.first = std::min(item.first, static_cast<int64_t>(s));
      item.last = std::max(item.last, static_cast<int64_t>(s));
    }
  }
  std::vector<size_t> order;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].own_memory) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<int64_t> item_offset(items.size(), -1);
  std::vector<size_t> placed;
  for (size_t k : order) {
    const Item& item = items[k];
    // The lowest offset that overlaps nothing placed alive at the same time.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t q : placed) {
      if (items[q].first <= item.last && item.first <= items[q].last) {
        busy.push_back({item_offset[q], item_offset[q] + items[q].bytes});
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + item.bytes <= lo) break;
      at = std::max(at, hi);
    }
    item_offset[k] = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + item.bytes);
    placed.push_back(k);
    if (item.tensor >= 0) plan.tensor_offset[static_cast<size_t>(item.tensor)] = at;
  }
  for (const auto& [key, k] : transient) {
    if (item_offset[k] >= 0) plan.transient[key] = {item_offset[k], items[k].bytes};
  }
  return plan;
}

}  // namespace

struct Executor::Impl {
  Graph graph;
  std::vector<TensorInfo> inputs, outputs;
  std::vector<int> input_ids, output_ids;
  std::vector<int> root;  // storage of each tensor (aliases share their input's)
  // Bytes into its root's storage where a tensor starts: a part of a Split that is a
  // contiguous range of its input (SplitIsView) is a view, not a copy.
  std::vector<int64_t> view_bytes;
  AlignedBuffer arena;
  int64_t arena_bytes = 0, unplanned_bytes = 0, scratch_bytes = 0, transient_bytes = 0;
  bool poison_arena = false;  // ExecutorOptions::poison_arena
  std::vector<int64_t> offset;  // per root tensor, in bytes; -1 when not in the arena
  std::vector<AlignedBuffer> owned;
  std::vector<std::unique_ptr<runtime::LoadedModule>> modules;
  struct Step {
    const runtime::LoadedModule* module = nullptr;
    std::string name;
    std::string source;
    std::vector<void*> buffers;
    int kernel = 0;  // index into kernels (and funcs)
  };
  std::vector<ir::LoweredFunc> funcs;          // per kernel, as built
  std::map<const void*, int64_t> buffer_bytes;  // owned buffers and constants steps read
  std::vector<Step> steps;
  std::vector<ExecutorKernel> kernels;
  double compile_seconds = 0;
  // The largest thread shortfall a run met (runtime: the system refused workers).
  int shortfall_asked = 0, shortfall_got = 0;
  int tuned = 0, defaults = 0, cancelled_pairs = 0, blocked_residuals = 0, direct_writes = 0, quantized_handovers = 0,
      dropped_steps = 0, fused_prologues = 0;

  // Where a tensor lives (kernels take non-const pointers; they never write constants).
  float* Pointer(int tensor) const {
    const int r = root[static_cast<size_t>(tensor)];
    const Tensor& t = graph.tensors[static_cast<size_t>(r)];
    if (t.constant) return const_cast<float*>(t.f32.data());
    if (offset[static_cast<size_t>(r)] < 0) return nullptr;  // never read or written
    return reinterpret_cast<float*>(reinterpret_cast<char*>(arena.get()) + offset[static_cast<size_t>(r)] +
                                    view_bytes[static_cast<size_t>(tensor)]);
  }
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;
const std::vector<TensorInfo>& Executor::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Executor::outputs() const { return impl_->outputs; }
int64_t Executor::arena_bytes() const { return impl_->arena_bytes; }
int64_t Executor::unplanned_bytes() const { return impl_->unplanned_bytes; }
int64_t Executor::scratch_bytes() const { return impl_->scratch_bytes; }
int64_t Executor::transient_bytes() const { return impl_->transient_bytes; }
double Executor::compile_seconds() const { return impl_->compile_seconds; }
const std::vector<ExecutorKernel>& Executor::kernels() const { return impl_->kernels; }
int Executor::tuned_tasks() const { return impl_->tuned; }
int Executor::default_tasks() const { return impl_->defaults; }
int Executor::cancelled_layout_pairs() const { return impl_->cancelled_pairs; }
int Executor::blocked_residuals() const { return impl_->blocked_residuals; }
int Executor::direct_writes() const { return impl_->direct_writes; }
int Executor::quantized_handovers() const { return impl_->quantized_handovers; }
int Executor::dropped_steps() const { return impl_->dropped_steps; }
int Executor::fused_prologues() const { return impl_->fused_prologues; }

namespace {

// A copy loop nest with its outermost loop spread over the threads (its iterations
// write disjoint elements).
ir::Stmt ParallelOuter(const ir::Stmt& s) {
  if (s->kind != ir::StmtKind::kFor || s->for_kind != ir::ForKind::kSerial || s->max_extent < 2) return s;
  return ir::For(s->var, s->extent, s->max_extent, ir::ForKind::kParallel, s->body);
}

// A template's layout transforms in a model: the prepack statements that read only
// constants (packed weights) run once at load; those that read activations (the
// input's copy into its blocked layout, and its zero border) and the output's unpack
// join the kernel's body, run every time, in parallel.
void SplitLayoutTransforms(const Graph& g, PlannedStep* step) {
  ir::LoweredFunc& f = step->func;
  if (!f.prepack && !f.unpack) return;
  std::set<std::string> dynamic;
  for (size_t i = 0; i < f.params.size(); ++i) {
    const int t = step->tensors[i];
    if (!f.params[i].is_internal && t >= 0 && !g.tensors[static_cast<size_t>(t)].constant) {
      dynamic.insert(f.params[i].name);
    }
  }
  std::vector<ir::Stmt> once, each;
  // The prepack's statements, nested blocks flattened (a conv's input part is a
  // block of its own: the zero border, then the copy of the interior), so that each
  // is judged alone: the weights' packing runs once, the border and the copy run
  // every time on the thread pool.
  std::vector<ir::Stmt> prepack;
  std::function<void(const ir::Stmt&)> flatten = [&](const ir::Stmt& s) {
    if (s->kind != ir::StmtKind::kBlock) {
      prepack.push_back(s);
      return;
    }
    for (const ir::Stmt& inner : s->stmts) flatten(inner);
  };
  if (f.prepack) flatten(f.prepack);
  // A statement runs every time when it reads an activation, or when it uses only
  // buffers such statements use (the zero border of a blocked input, whose memory
  // the plan shares between steps: written whenever its interior is).
  std::set<std::string> copied;
  for (const ir::Stmt& s : prepack) {
    const std::set<std::string> used = codegen::CollectUsedNames(s).buffers;
    bool reads_activation = false;
    for (const std::string& b : used) reads_activation |= dynamic.count(b) > 0;
    if (reads_activation) copied.insert(used.begin(), used.end());
  }
  for (const ir::Stmt& s : prepack) {
    bool runs_each_time = true;
    for (const std::string& b : codegen::CollectUsedNames(s).buffers) runs_each_time &= copied.count(b) > 0;
    if (runs_each_time) {
      each.push_back(ParallelOuter(s));
    } else {
      once.push_back(s);
    }
  }
  each.push_back(f.body);
  if (f.unpack) {  // each phase of it (a block's statements) in parallel in turn
    if (f.unpack->kind == ir::StmtKind::kBlock) {
      for (const ir::Stmt& s : f.unpack->stmts) each.push_back(ParallelOuter(s));
    } else {
      each.push_back(ParallelOuter(f.unpack));
    }
  }
  f.body = ir::Block(each);
  f.unpack = nullptr;
  f.prepack = once.empty() ? nullptr : ir::Block(once);
}

size_t ParamIndex(const ir::LoweredFunc& f, const std::string& name) {
  for (size_t i = 0; i < f.params.size(); ++i)
    if (f.params[i].name == name) return i;
  return f.params.size();
}

// The final value of a conv step's output element (n, base + lane, h, w) — `base` and
// `lane` as in ActivationLayout::Index: the kernel's blocked output, max-pooled when
// a max-pool is fused after it (window positions clamped into the image: the max of
// a window is the max of its positions inside, and every window has one), then the
// epilogue: bias, the residual from wherever it lives (step.residual), relu/clip.
ir::Expr ConvOutputValue(const Graph& g, const PlannedStep& step, ir::Expr n, ir::Expr base, ir::Expr lane,
                         ir::Expr h, ir::Expr w) {
  using ir::Add;
  using ir::IntImm;
  using ir::Mul;
  const ir::LoweredFunc& f = step.func;
  const std::vector<int64_t>& os = f.params[ParamIndex(f, "O.blocked")].shape;  // N, K/y, OH, OW, y
  const ActivationLayout src{"O.blocked", {os[0], os[1] * os[4], os[2], os[3]}, os[4], 0, 0};
  ir::Expr value;
  if (!step.pool) {
    value = ir::Load("O.blocked", ir::DType::kFloat32, src.Index(n, base, lane, h, w));
  } else {
    const PlannedStep::Pool& p = *step.pool;
    auto clamp = [](ir::Expr e, int64_t hi) { return ir::Min(ir::Max(e, IntImm(0)), IntImm(hi - 1)); };
    for (int64_t i = 0; i < p.k_h; ++i) {
      for (int64_t j = 0; j < p.k_w; ++j) {
        ir::Expr ih = clamp(Add(Mul(h, IntImm(p.stride_h)), IntImm(i - p.pad_h)), os[2]);
        ir::Expr iw = clamp(Add(Mul(w, IntImm(p.stride_w)), IntImm(j - p.pad_w)), os[3]);
        ir::Expr v = ir::Load("O.blocked", ir::DType::kFloat32, src.Index(n, base, lane, ih, iw));
        value = value ? ir::Max(value, v) : v;
      }
    }
  }
  std::vector<ir::Expr> addends;
  if (ParamIndex(f, "epi.bias") < f.params.size()) {
    addends.push_back(ir::Load("epi.bias", ir::DType::kFloat32, Add(base, lane)));
  }
  if (!step.residual.buffer.empty()) {
    addends.push_back(ir::Load(step.residual.buffer, ir::DType::kFloat32, step.residual.Index(n, base, lane, h, w)));
  }
  return EpilogueExpr(g, *step.use, value, addends);
}

// A conv step's unpack: its output in NCHW "O" (ConvOutputValue of each element),
// over the channel blocks in parallel, rows inside a block (as the template's
// UnpackStmt). The channel goes in as block base u.kb * y and lane u.ko where the
// residual's layout allows (NCHW, or blocks of a multiple of y), so that the blocked
// index needs no division by y (with kb * y + ko, LLVM cannot tell that the quotient
// is kb: ShuffleNet's 240 x 28 x 28 unpack 0.15 -> 0.10 ms).
ir::Stmt UnpackWithEpilogue(const Graph& g, const PlannedStep& step) {
  using ir::Add;
  using ir::IntImm;
  using ir::Mul;
  const ir::LoweredFunc& f = step.func;
  const std::vector<int64_t>& o = f.params[ParamIndex(f, "O")].shape;  // N, K, OH, OW (pooled)
  const int64_t y = f.params[ParamIndex(f, "O.blocked")].shape[4];
  const std::vector<std::pair<std::string, int64_t>> loops = {
      {"u.n", o[0]}, {"u.kb", o[1] / y}, {"u.oh", o[2]}, {"u.ko", y}, {"u.ow", o[3]}};
  std::map<std::string, ir::Expr> v;
  for (const auto& [name, extent] : loops) v[name] = extent > 1 ? ir::Var(name) : IntImm(0);
  const ir::Expr c = Add(Mul(v["u.kb"], IntImm(y)), v["u.ko"]);
  ir::Stmt body = ir::Store(
      "O", Add(Mul(Add(Mul(Add(Mul(v["u.n"], IntImm(o[1])), c), IntImm(o[2])), v["u.oh"]), IntImm(o[3])), v["u.ow"]),
      // Lane u.ko may not cross a block of the residual's layout.
      step.residual.buffer.empty() || step.residual.block % y == 0
          ? ConvOutputValue(g, step, v["u.n"], Mul(v["u.kb"], IntImm(y)), v["u.ko"], v["u.oh"], v["u.ow"])
          : ConvOutputValue(g, step, v["u.n"], c, IntImm(0), v["u.oh"], v["u.ow"]));
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
    if (it->second > 1) body = ir::For(it->first, IntImm(it->second), it->second, ir::ForKind::kSerial, body);
  }
  return ParallelOuter(body);
}

// A run-time parameter `name` of `p` bound to graph tensor `tensor` (its shape).
void AddTensorParam(const Graph& g, PlannedStep* p, const std::string& name, int tensor) {
  p->func.params.push_back(
      ir::BufferParam{name, ir::DType::kFloat32, g.tensors[static_cast<size_t>(tensor)].shape, false});
  p->tensors.push_back(tensor);
  p->owned_data.emplace_back();
  p->owned_elements.push_back(0);
}

// A step's function renamed after what it now computes (its body changed), so that
// steps sharing a name share a kernel: "<name>_<hash of the function>".
void Rename(ir::LoweredFunc* f) {
  f->name = f->name.substr(0, f->name.rfind('_')) + "_" + HashHex(ir::ToString(*f)).substr(0, 8);
}

// The loops around a copy of one pixel's `block` channels over an [N, C, H, W]
// activation, variables `<prefix>n`, `cb`, `h`, `w`: output rows and columns,
// channel blocks, the batch; the parallel loop is the channel blocks when there are
// enough of them, else the rows.
ir::Stmt ChannelBlockNest(const std::string& prefix, const std::vector<int64_t>& dims, int64_t block,
                          ir::Stmt pixel) {
  using ir::IntImm;
  ir::Stmt copy = ir::For(prefix + "w", IntImm(dims[3]), dims[3], ir::ForKind::kSerial, std::move(pixel));
  const int64_t blocks = dims[1] / block;
  if (blocks >= 4) {
    copy = ir::For(prefix + "h", IntImm(dims[2]), dims[2], ir::ForKind::kSerial, copy);
    copy = ir::For(prefix + "cb", IntImm(blocks), blocks, ir::ForKind::kParallel, copy);
  } else {
    copy = ir::For(prefix + "cb", IntImm(blocks), blocks, ir::ForKind::kSerial, copy);
    copy = ir::For(prefix + "h", IntImm(dims[2]), dims[2], ir::ForKind::kParallel, copy);
  }
  return ir::For(prefix + "n", IntImm(dims[0]), dims[0], ir::ForKind::kSerial, copy);
}

// A convolution's epilogue (bias, residual, relu/clip) fused into its output's
// unpack (the blocked layout back to NCHW), which runs once per element anyway: the
// task's kernel stays the tuned one and no separate pass over the output is made.
// False when the kernel has no unpack (the epilogue then runs as its own kernel).
bool FuseConvEpilogue(const Graph& g, const TaskUse& use, PlannedStep* step) {
  ir::LoweredFunc& f = step->func;
  if (!f.unpack || f.params.empty() || ParamIndex(f, "O.blocked") >= f.params.size()) return false;
  const ir::BufferParam& out = f.params.back();
  if (!out.is_output || out.shape.size() != 4) return false;
  if (use.bias >= 0) AddTensorParam(g, step, "epi.bias", use.bias);
  if (use.residual >= 0) {
    AddTensorParam(g, step, "epi.residual", use.residual);
    step->residual = ActivationLayout{"epi.residual", g.tensors[static_cast<size_t>(use.residual)].shape, 0, 0, 0};
  }
  f.unpack = UnpackWithEpilogue(g, *step);
  return true;
}

int64_t NormalizedAxis(const Node& n, const std::vector<int64_t>& shape) {
  const int64_t axis = n.Int("axis", 0);
  return axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
}

// A Split whose parts are contiguous ranges of its run-time input (every axis before
// the split axis has size 1: NCHW channels at batch 1): its outputs are views.
bool SplitIsView(const Graph& g, const Node& n, const std::vector<int>& root) {
  if (n.op != "Split") return false;
  const Tensor& x = g.tensors[static_cast<size_t>(root[static_cast<size_t>(n.inputs[0])])];
  if (x.constant) return false;
  const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(n.inputs[0])].shape;
  const int64_t axis = NormalizedAxis(n, shape);
  for (int64_t d = 0; d < axis; ++d) {
    if (shape[static_cast<size_t>(d)] != 1) return false;
  }
  return true;
}

// A Concat whose parts are contiguous ranges of its output (every axis before the
// concat axis has size 1) and whose inputs are each the whole storage of a run-time
// tensor written by a kernel (not a graph input, a constant, a view, or used twice
// here): the inputs' storage (and everything sharing it) moves into the output's,
// so their producers write into place and no copy runs (DenseNet's growing blocks,
// Inception's branches). Returns false, changing nothing, when it does not apply.
bool ConcatIntoViews(const Graph& g, const Node& n, const std::vector<bool>& is_input, std::vector<int>* root,
                     std::vector<int64_t>* view_bytes) {
  const int out = n.outputs[0];
  const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(out)].shape;
  const int64_t axis = NormalizedAxis(n, shape);
  for (int64_t d = 0; d < axis; ++d) {
    if (shape[static_cast<size_t>(d)] != 1) return false;
  }
  if ((*root)[static_cast<size_t>(out)] != out) return false;
  std::set<int> roots;
  for (int t : n.inputs) {
    const int r = (*root)[static_cast<size_t>(t)];
    const Tensor& rt = g.tensors[static_cast<size_t>(r)];
    if (rt.constant || is_input[static_cast<size_t>(r)] || (*view_bytes)[static_cast<size_t>(t)] != 0 ||
        rt.NumElements() != g.tensors[static_cast<size_t>(t)].NumElements() || r == out || !roots.insert(r).second) {
      return false;
    }
  }
  const int64_t inner = Product(shape, static_cast<size_t>(axis) + 1);
  int64_t at = 0;
  for (int t : n.inputs) {
    const int r = (*root)[static_cast<size_t>(t)];
    for (size_t u = 0; u < root->size(); ++u) {
      if ((*root)[u] != r) continue;
      (*root)[u] = out;
      (*view_bytes)[u] += at * inner * 4;
    }
    at += g.tensors[static_cast<size_t>(t)].shape[static_cast<size_t>(axis)];
  }
  return true;
}

// What one parameter of a quantized step binds to (BindQuantizedStep): a graph tensor,
// constant data the step owns, or another step's buffer; none of them: memory the step
// owns, for an internal parameter.
struct ParamBinding {
  int tensor = -1;
  std::vector<float> data;
  std::pair<int, std::string> borrow = {-1, ""};
};

// The step of an int8 task's kernel `func`, each parameter bound by `bind`, then its
// layout passes split (SplitLayoutTransforms) and its name made unique to its body.
// `what` names the kernel in errors.
absl::StatusOr<PlannedStep> BindQuantizedStep(const Graph& g, const TaskUse& use, const TuningTask& task,
                                              const Config& config, const std::string& source, ir::LoweredFunc func,
                                              const std::string& what,
                                              const std::function<ParamBinding(const ir::BufferParam&)>& bind) {
  PlannedStep step;
  step.func = std::move(func);
  step.use = &use;
  step.source = source;
  step.task = task;
  step.config = config;
  for (const ir::BufferParam& p : step.func.params) {
    ParamBinding b = bind(p);
    step.borrow.push_back(b.borrow);
    step.owned_elements.push_back(b.borrow.first >= 0 || b.tensor >= 0 ? 0
                                  : !b.data.empty()                    ? static_cast<int64_t>(b.data.size())
                                                                       : p.NumElements());
    if (b.borrow.first < 0 && b.tensor < 0 && b.data.empty() && !p.is_internal) {
      return absl::InternalError(what + ": unexpected parameter " + p.name);
    }
    step.owned_data.push_back(std::move(b.data));
    const int t = b.tensor;
    if (t >= 0 && g.tensors[static_cast<size_t>(t)].NumElements() != p.NumElements()) {
      return absl::InternalError(absl::StrCat(what, ": parameter ", p.name, " has ", p.NumElements(),
                                              " elements, tensor ", g.tensors[static_cast<size_t>(t)].name, " ",
                                              g.tensors[static_cast<size_t>(t)].NumElements()));
    }
    step.tensors.push_back(t);
  }
  SplitLayoutTransforms(g, &step);
  step.func.name += "_" + HashHex(ir::ToString(step.func)).substr(0, 8);
  return step;
}

// A quantized layer of a QDQ model (TaskUse::quantized, docs/int8.md): the int8
// kernel with float32 input, weights, bias and output, its requantization multipliers
// (in_scale x wscale[k] / out_scale) and the weights' scales computed here. Its input
// quantization and output dequantization ride on its layout passes, which join the
// kernel's body (SplitLayoutTransforms); the weights are packed once, at load.
// With `into`, its output goes straight into step `into_owner`'s padded input
// (HandOverQuantizedOutputs).
// How a quantized step's output and residual reach other steps (HandOverQuantizedOutputs):
// its output into step `into_owner`'s padded input; its residual read from step
// `residual_owner`'s padded input (quantized as `residual_scale`, `residual_zero`).
struct QuantizedLinks {
  std::optional<QuantizedHandOver> into;
  int into_owner = -1;
  int residual_owner = -1;
  int64_t residual_pad = 0, residual_cp = 0, residual_zero = 0;
  double residual_scale = 0;
};

absl::StatusOr<PlannedStep> PlanQuantizedConv(const Graph& g, const TaskUse& use, const TuningTask& task,
                                              const Config& config, const Target& target, const std::string& source,
                                              const QuantizedLinks& links = {}) {
  QuantizedResidual residual;
  residual.relu = use.activation == "relu";
  residual.sum_scale = use.sum_scale, residual.sum_zero = use.sum_zero;
  if (links.residual_owner >= 0) {
    residual.from = "res.I.padded";
    residual.from_pad = links.residual_pad, residual.from_cp = links.residual_cp;
    residual.from_scale = links.residual_scale, residual.from_zero = links.residual_zero;
  }
  const QuantizedHandOver* into = links.into ? &*links.into : nullptr;
  std::optional<QuantizedMaxPool> pool;
  if (use.pool) {
    const TaskUse::QuantizedPool& p = *use.pool;
    pool = QuantizedMaxPool{p.k_h, p.k_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.scale, p.zero};
  }
  ASSIGN_OR_RETURN(ir::LoweredFunc func,
                   InstantiateQuantizedConvInModel(task, target, config, use.in_scale, use.out_scale, into,
                                                   use.residual >= 0 ? &residual : nullptr,
                                                   pool ? &*pool : nullptr));
  const Tensor& weight = g.tensors[static_cast<size_t>(use.weight)];
  auto found = g.quantized_constants.find(weight.name);
  if (found == g.quantized_constants.end()) return absl::InternalError("no weight scales for " + weight.name);
  const int64_t k = weight.shape[0];
  std::vector<float> wscale(static_cast<size_t>(k)), multiplier(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const double s = found->second.scales.size() == 1 ? found->second.scales[0]
                                                       : found->second.scales[static_cast<size_t>(j)];
    wscale[static_cast<size_t>(j)] = static_cast<float>(s);
    multiplier[static_cast<size_t>(j)] = static_cast<float>(use.in_scale * s / use.out_scale);
  }
  return BindQuantizedStep(
      g, use, task, config, source, std::move(func), "quantized conv",
      [&](const ir::BufferParam& p) {
        ParamBinding b;
        if (into && p.name == into->buffer) {
          b.borrow = {links.into_owner, "I.padded"};
        } else if (links.residual_owner >= 0 && p.name == residual.from) {
          b.borrow = {links.residual_owner, "I.padded"};
        } else if (p.is_internal) {
        } else if (p.is_output) {
          b.tensor = use.output;
        } else if (p.name == "I") {
          b.tensor = use.data;
        } else if (p.name == "F") {
          b.tensor = use.weight;
        } else if (p.name == "bias") {
          b.tensor = use.bias;
        } else if (p.name == "R") {
          b.tensor = use.residual;
        } else if (p.name == "scale" || p.name == "wscale") {
          b.data = p.name == "scale" ? multiplier : wscale;
        }
        return b;
      });
}

// The elementwise chain a dense or dynamically quantized layer absorbs (PlanFusion),
// as its write-back computes it: the chain's other inputs as parameters "epi.t<id>"
// (their ids into `chain_inputs`), loaded at the element's broadcast index, and the
// chain's value from the layer's at row i (over its leading dimensions), column j. An
// error building the value lands in `error`.
struct ChainEpilogue {
  std::vector<ir::BufferParam> inputs;
  std::function<ir::Expr(ir::Expr value, ir::Expr i, ir::Expr j)> fn;
};
ChainEpilogue ChainEpilogueOf(const Graph& g, const TaskUse& use, const std::vector<int>& chain,
                              std::vector<int>* chain_inputs, absl::Status* error) {
  ChainEpilogue extra;
  for (int t : ChainInputs(g, chain)) {
    if (t == use.output) continue;
    chain_inputs->push_back(t);
    extra.inputs.push_back(ir::BufferParam{absl::StrCat("epi.t", t), ir::DType::kFloat32,
                                           g.tensors[static_cast<size_t>(t)].shape, false});
  }
  extra.fn = [&g, &use, &chain, error](ir::Expr value, ir::Expr i, ir::Expr j) {
    const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(use.output)].shape;
    absl::StatusOr<ir::Expr> e = ChainValue(g, chain, [&](int t) -> ir::Expr {
      if (t == use.output) return value;
      // t broadcast to the layer's shape [..., N]: row i spans the leading dims.
      const std::vector<int64_t>& ts = g.tensors[static_cast<size_t>(t)].shape;
      const size_t r = shape.size(), lead = r - ts.size();
      std::vector<ir::Expr> idx = ir::Unflatten(i, std::vector<int64_t>(shape.begin(), shape.end() - 1));
      idx.push_back(j);
      ir::Expr index = ir::IntImm(0);
      int64_t stride = 1;
      for (size_t d = r; d-- > 0;) {
        if (d >= lead && ts[d - lead] != 1) {
          index = ir::Add(index, ir::Mul(idx[d], ir::IntImm(stride)));
          stride *= ts[d - lead];
        }
      }
      return ir::Load(absl::StrCat("epi.t", t), ir::DType::kFloat32, index);
    });
    if (!e.ok()) {
      *error = e.status();
      return value;
    }
    return *e;
  };
  return extra;
}

// A dynamically quantized MatMul (TaskUse::dynamic, docs/int8.md): the int8 kernel
// that quantizes its float32 input itself every call; its weights converted, packed
// and summed once, at load.
// With `chain` (PlanFusion), the elementwise chain after it in its write-back.
absl::StatusOr<PlannedStep> PlanDynamicQuantizedMatmul(const Graph& g, const TaskUse& use,
                                                       const std::vector<int>* chain, const TuningTask& task,
                                                       const Config& config, const Target& target,
                                                       const std::string& source) {
  std::vector<int> chain_inputs;
  absl::Status chain_error;
  std::optional<QuantizedMatmulChain> epilogue;
  if (chain) {
    ChainEpilogue e = ChainEpilogueOf(g, use, *chain, &chain_inputs, &chain_error);
    epilogue = QuantizedMatmulChain{e.inputs, e.fn};
  }
  ASSIGN_OR_RETURN(ir::LoweredFunc func, InstantiateDynamicQuantizedMatmulInModel(task, target, config, use.bias >= 0,
                                                                                   epilogue ? &*epilogue : nullptr));
  RETURN_IF_ERROR(chain_error);
  const int output = chain ? g.nodes[static_cast<size_t>(chain->back())].outputs[0] : use.output;
  const Tensor& ws = g.tensors[static_cast<size_t>(use.wscale)];
  const int64_t n = task.Param("N");
  std::vector<float> wscale(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) wscale[static_cast<size_t>(j)] = ws.f32[ws.f32.size() == 1 ? 0 : static_cast<size_t>(j)];
  return BindQuantizedStep(g, use, task, config, source, std::move(func), "dynamic int8 matmul",
                           [&](const ir::BufferParam& p) {
                             ParamBinding b;
                             if (p.is_internal) {
                             } else if (p.is_output) {
                               b.tensor = output;
                             } else if (p.name.rfind("epi.t", 0) == 0) {
                               b.tensor = std::stoi(p.name.substr(5));
                             } else if (p.name == "X") {
                               b.tensor = use.data;
                             } else if (p.name == "F") {
                               b.tensor = use.weight;
                             } else if (p.name == "bias") {
                               b.tensor = use.bias;
                             } else if (p.name == "wscale") {
                               b.data = wscale;
                             }
                             return b;
                           });
}

// Node kernels whose results no step and no graph output reads: a dynamic
// quantization's nodes once the MatMuls reading it quantize their input themselves
// (TaskUse::dynamic). Storage is judged by its root (views read their root's).
// Returns how many steps were dropped.
int DropUnreadSteps(const Graph& g, const std::vector<int>& root, std::vector<PlannedStep>* planned) {
  std::vector<bool> read(g.tensors.size(), false);
  for (int t : g.outputs) read[static_cast<size_t>(root[static_cast<size_t>(t)])] = true;
  std::vector<bool> keep(planned->size(), true);
  for (size_t s = planned->size(); s-- > 0;) {
    const PlannedStep& p = (*planned)[s];
    bool live = p.use != nullptr;
    for (size_t i = 0; i < p.func.params.size() && !live; ++i) {
      const int t = p.tensors[i];
      live = p.func.params[i].is_output && (t < 0 || read[static_cast<size_t>(root[static_cast<size_t>(t)])]);
    }
    if (!live) {
      keep[s] = false;
      continue;
    }
    for (size_t i = 0; i < p.func.params.size(); ++i) {
      const int t = p.tensors[i];
      if (!p.func.params[i].is_output && t >= 0) read[static_cast<size_t>(root[static_cast<size_t>(t)])] = true;
    }
  }
  std::vector<PlannedStep> kept;
  for (size_t s = 0; s < planned->size(); ++s) {
    if (keep[s]) kept.push_back(std::move((*planned)[s]));
  }
  const int dropped = static_cast<int>(planned->size() - kept.size());
  *planned = std::move(kept);
  return dropped;
}

// The template kernel of one task occurrence, its parameters bound.
absl::StatusOr<PlannedStep> PlanTask(const Graph& g, const TaskTable& table, const TaskUse& use,
                                     const std::vector<int>* chain, const Target& target,
                                     const ExecutorOptions& options, bool* tuned) {
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(table.tasks[static_cast<size_t>(use.task)].task));
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  std::optional<Config> config;
  if (options.schedule) {
    ASSIGN_OR_RETURN(config, options.schedule(task, *tmpl));
  }
  *tuned = config.has_value();
  if (!config) {
    std::vector<Config> heuristics = tmpl->Heuristics(task, target);
    config = heuristics.empty() ? tmpl->Naive(task, target) : heuristics.front();
  }
  if (use.dynamic) {
    return PlanDynamicQuantizedMatmul(g, use, chain, task, *config, target,
                                      absl::StrCat(*tuned ? "tuned " : "default ", task.CanonicalText()));
  }
  if (use.quantized) {
    return PlanQuantizedConv(g, use, task, *config, target,
                             absl::StrCat(*tuned ? "tuned " : "default ", task.CanonicalText()));
  }
  const auto* conv_template = dynamic_cast<const Conv2dTemplate*>(tmpl);
  const bool streams_weights =
      conv_template && task.op() == "conv2d" && options.prefetch_weight_bytes > 0 &&
      task.ConvFilterElements() * 4 >= options.prefetch_weight_bytes;
  // A dense layer absorbs the elementwise chain after it (Gelu): the chain's other
  // inputs become parameters, loaded at the element's broadcast index.
  std::vector<int> chain_inputs;
  absl::Status chain_error;
  absl::StatusOr<ir::LoweredFunc> func = absl::UnknownError("not instantiated");
  if (chain) {
    const auto* dense = dynamic_cast<const DenseTemplate*>(tmpl);
    if (!dense) return absl::InternalError("only dense absorbs an elementwise chain");
    ChainEpilogue chain_epilogue = ChainEpilogueOf(g, use, *chain, &chain_inputs, &chain_error);
    DenseEpilogue extra{chain_epilogue.inputs, chain_epilogue.fn};
    func = dense->InstantiateWithEpilogue(task, target, *config, extra);
    RETURN_IF_ERROR(chain_error);
  } else if (use.conv_as_gemm) {
    // A pointwise conv as a matmul per group: its epilogue (bias and residual per
    // output channel b * M + i, relu or clip) in the write-back.
    const auto* matmul = dynamic_cast<const MatmulTemplate*>(tmpl);
    if (!matmul) return absl::InternalError("a conv as a matmul needs the matmul template");
    const int64_t rows = task.Param("M"), pixels = task.Param("N");
    GemmEpilogue extra;
    for (const auto& [name, t] : {std::pair<const char*, int>{"epi.bias", use.bias}, {"epi.residual", use.residual}}) {
      if (t < 0) continue;
      extra.inputs.push_back(
          ir::BufferParam{name, ir::DType::kFloat32, g.tensors[static_cast<size_t>(t)].shape, false});
      chain_inputs.push_back(t);
    }
    if (!extra.inputs.empty() || !use.activation.empty()) {
      extra.fn = [&](ir::Expr value, ir::Expr b, ir::Expr i, ir::Expr j) {
        const ir::Expr channel = ir::Add(ir::Mul(b, ir::IntImm(rows)), i);
        std::vector<ir::Expr> addends;
        if (use.bias >= 0) addends.push_back(ir::Load("epi.bias", ir::DType::kFloat32, channel));
        if (use.residual >= 0) {
          addends.push_back(ir::Load("epi.residual", ir::DType::kFloat32,
                                     ir::Add(ir::Mul(channel, ir::IntImm(pixels)), j)));
        }
        return EpilogueExpr(g, use, value, addends);
      };
    }
    func = matmul->InstantiateWithEpilogue(task, target, *config, extra);
  } else if (streams_weights) {
    // In a model the weights come from memory: large ones stream in while the kernel
    // computes.
    func = conv_template->InstantiateStreamingWeights(task, target, *config);
  } else {
    func = tmpl->Instantiate(task, target, *config);
  }
  if (!func.ok()) {
    return absl::Status(func.status().code(), absl::StrCat("task ", task.CanonicalText(), " config ",
                                                           config->ToJson(), ": ", func.status().message()));
  }
  PlannedStep step;
  step.func = std::move(*func);
  step.is_conv = g.nodes[static_cast<size_t>(use.anchor)].op == "Conv" && !use.conv_as_gemm;
  step.use = &use;
  if (conv_template && step.is_conv) {
    step.conv_template = conv_template;
    step.task = task;
    step.config = *config;
    step.streams_weights = streams_weights;
  }
  step.source = absl::StrCat(*tuned ? "tuned " : "default ", task.CanonicalText());
  const Node& anchor = g.nodes[static_cast<size_t>(use.anchor)];
  // A conv as a matmul: A is the weights, B the input.
  std::vector<int> operands = use.conv_as_gemm ? std::vector<int>{use.weight, use.data}
                                               : std::vector<int>{use.data, use.weight};
  if (task.op() == "dense" && task.Param("bias") == 1) operands.push_back(use.bias);
  operands.insert(operands.end(), chain_inputs.begin(), chain_inputs.end());
  // The template writes what the last absorbed node would: a conv's epilogue fuses
  // into its unpack, dense's chain into its write-back.
  const bool conv_epilogue = step.is_conv && (use.bias >= 0 || use.residual >= 0 || !use.activation.empty());
  const int output = chain ? g.nodes[static_cast<size_t>(chain->back())].outputs[0] : use.output;
  size_t next = 0;
  for (const ir::BufferParam& p : step.func.params) {
    step.owned_data.emplace_back();
    step.owned_elements.push_back(0);
    if (p.is_internal) {
      step.tensors.push_back(-1);
      step.owned_elements.back() = p.NumElements();
    } else if (p.is_output) {
      step.tensors.push_back(output);
    } else if (next < operands.size()) {
      const int t = operands[next++];
      const Tensor& tensor = g.tensors[static_cast<size_t>(t)];
      if (tensor.NumElements() != p.NumElements()) {
        return absl::InternalError(absl::StrCat("task ", task.CanonicalText(), ": parameter ", p.name,
                                                " has ", p.NumElements(), " elements, tensor ",
                                                tensor.name, " ", tensor.NumElements()));
      }
      if (p.name == "W" && use.transpose_weight) {
        // Gemm's transB weights [N, K] -> the template's [K, N], once at load.
        const int64_t n = tensor.shape[0], k = tensor.shape[1];
        std::vector<float> w(static_cast<size_t>(n * k));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(j * n + i)] = tensor.f32[static_cast<size_t>(i * k + j)];
        step.tensors.push_back(-1);
        step.owned_elements.back() = n * k;
        step.owned_data.back() = std::move(w);
      } else {
        step.tensors.push_back(t);
      }
    } else {
      return absl::InternalError(absl::StrCat("template ", tmpl->name(), " has more inputs than the graph gives"));
    }
  }
  if (conv_epilogue && !FuseConvEpilogue(g, use, &step)) {
    return absl::InternalError("cannot fuse the epilogue of " + anchor.name);
  }
  SplitLayoutTransforms(g, &step);
  // Occurrences of one task share the tuned kernel but not always the epilogue and
  // layout work around it: name the function after what it now computes.
  step.func.name += "_" + HashHex(ir::ToString(step.func)).substr(0, 8);
  return step;
}

PlannedStep FromNodeKernel(NodeKernel k, std::string source) {
  PlannedStep step;
  step.func = std::move(k.func);
  step.tensors = std::move(k.tensors);
  step.source = std::move(source);
  for (size_t i = 0; i < step.func.params.size(); ++i) {
    auto it = k.constants.find(i);
    step.owned_elements.push_back(it == k.constants.end() ? 0 : static_cast<int64_t>(it->second.size()));
    step.owned_data.push_back(it == k.constants.end() ? std::vector<float>() : std::move(it->second));
  }
  return step;
}

void EraseParam(PlannedStep* p, size_t i) {
  p->func.params.erase(p->func.params.begin() + static_cast<std::ptrdiff_t>(i));
  p->tensors.erase(p->tensors.begin() + static_cast<std::ptrdiff_t>(i));
  p->owned_data.erase(p->owned_data.begin() + static_cast<std::ptrdiff_t>(i));
  p->owned_elements.erase(p->owned_elements.begin() + static_cast<std::ptrdiff_t>(i));
  p->borrow.erase(p->borrow.begin() + static_cast<std::ptrdiff_t>(i));
}

// How many top-level statements of `body` (a Block) use `buffer`; SIZE_MAX when the
// body is not a Block.
size_t CountTopLevel(const ir::Stmt& body, const std::string& buffer) {
  if (body->kind != ir::StmtKind::kBlock) return SIZE_MAX;
  size_t n = 0;
  for (const ir::Stmt& st : body->stmts) n += codegen::CollectUsedNames(st).buffers.count(buffer);
  return n;
}

// `body` (a Block) with its top-level statements that use `buffer` replaced by `with`.
ir::Stmt ReplaceTopLevel(const ir::Stmt& body, const std::string& buffer, const ir::Stmt& with) {
  std::vector<ir::Stmt> stmts = body->stmts;
  for (ir::Stmt& st : stmts) {
    if (codegen::CollectUsedNames(st).buffers.count(buffer)) st = with;
  }
  return ir::Block(stmts);
}

// The top-level statements of `body` (a Block) that do not use `buffer`.
std::vector<ir::Stmt> WithoutTopLevel(const ir::Stmt& body, const std::string& buffer) {
  std::vector<ir::Stmt> kept;
  for (const ir::Stmt& st : body->stmts) {
    if (!codegen::CollectUsedNames(st).buffers.count(buffer)) kept.push_back(st);
  }
  return kept;
}

// A parameter `layout.buffer` of `p` bound to step `owner`'s blocked input.
void BorrowBlockedInput(PlannedStep* p, const ActivationLayout& layout, size_t owner) {
  p->func.params.push_back(ir::BufferParam{layout.buffer, ir::DType::kFloat32, layout.BlockedShape(), false});
  p->tensors.push_back(-1);
  p->owned_data.emplace_back();
  p->owned_elements.push_back(0);
  p->borrow.push_back({static_cast<int>(owner), "I.blocked"});
}

// The layout of a conv step's blocked input: (N, C/x, HP, WP, x) around "I".
ActivationLayout BlockedInputLayout(const PlannedStep& p, const std::string& buffer) {
  const std::vector<int64_t>& bs = p.func.params[ParamIndex(p.func, "I.blocked")].shape;
  const std::vector<int64_t>& dims = p.func.params[ParamIndex(p.func, "I")].shape;
  ActivationLayout layout{buffer, dims, bs[4], (bs[2] - dims[2]) / 2, (bs[3] - dims[3]) / 2};
  TF_CHECK(layout.BlockedShape() == bs, "a conv's blocked input is not its input with an even border");
  return layout;
}

// The operators of an elementwise chain, "Mul+Add+Relu".
std::string ChainOps(const Graph& g, const std::vector<int>& chain) {
  std::string ops;
  for (int c : chain) ops += (ops.empty() ? "" : "+") + g.nodes[static_cast<size_t>(c)].op;
  return ops;
}

// What a convolution computes in the copy of its input into the blocked layout
// (FuseConvPrologue): an elementwise chain whose output is its input and nothing
// else's, or a channel shuffle (Reshape to [N, g, C/g, H, W], Transpose
// [0, 2, 1, 3, 4], Reshape back: ShuffleNet's) of `source`.
struct ConvPrologue {
  std::vector<int> chain;       // the elementwise nodes, or empty
  int source = -1;              // with an empty chain: the shuffle's input
  int64_t shuffle_groups = 0;   // g of the shuffle
  int shuffle_node = -1;        // its Transpose
};

// A conv step computing `pro` while it copies its input into its blocked,
// zero-bordered layout: "I" is bound to the chain's input of the same shape (the
// shuffle's input), the chain's other inputs (per-channel scale and shift, a scalar,
// a [N, C, 1, 1] gate) become parameters loaded at their broadcast index, and the
// copy stores the chain's value (input channel c of a shuffle reads channel
// (c mod g) * C/g + c / g of the source). The border stays zero, as the
// convolution's padding of the chain's output must. False, the step unchanged, when
// the step does not copy its input in one statement or no run-time chain input has
// the input's shape.
absl::StatusOr<bool> FuseConvPrologue(const Graph& g, const ConvPrologue& pro, PlannedStep* p) {
  using ir::Add;
  using ir::IntImm;
  using ir::Mul;
  using ir::Var;
  ir::LoweredFunc& f = p->func;
  const size_t in = ParamIndex(f, "I"), bi = ParamIndex(f, "I.blocked");
  if (!p->is_conv || in >= f.params.size() || bi >= f.params.size() || f.params[bi].shape.size() != 5 ||
      f.params[in].shape.size() != 4 || CountTopLevel(f.body, "I") != 1) {
    return false;
  }
  const std::vector<int64_t> dims = f.params[in].shape;  // N, C, H, W
  const std::vector<int> inputs = pro.chain.empty() ? std::vector<int>{pro.source} : ChainInputs(g, pro.chain);
  int main = -1;
  for (int t : inputs) {
    const Tensor& tensor = g.tensors[static_cast<size_t>(t)];
    if (tensor.shape.size() > dims.size()) return false;
    if (main < 0 && !tensor.constant && tensor.dtype == DType::kFloat32 && tensor.shape == dims) main = t;
  }
  if (main < 0) return false;
  const ActivationLayout dst = BlockedInputLayout(*p, "I.blocked");
  const ir::Expr n = Var("pro.n"), cb = Var("pro.cb"), h = Var("pro.h"), w = Var("pro.w"), ci = Var("pro.ci");
  const std::vector<ir::Expr> at = {n, Add(Mul(cb, IntImm(dst.block)), ci), h, w};
  // t broadcast to the input's shape: the dimensions it has of size > 1.
  auto load = [&](int t) -> ir::Expr {
    const std::vector<int64_t>& ts = g.tensors[static_cast<size_t>(t)].shape;
    const size_t lead = dims.size() - ts.size();
    ir::Expr index = IntImm(0);
    int64_t stride = 1;
    for (size_t d = dims.size(); d-- > lead;) {
      if (ts[d - lead] == 1) continue;
      index = Add(index, Mul(at[d], IntImm(stride)));
      stride *= ts[d - lead];
    }
    return ir::Load(t == main ? "I" : absl::StrCat("pro.t", t), ir::DType::kFloat32, index);
  };
  ir::Expr value;
  ir::Stmt shuffle_copy;
  if (pro.chain.empty()) {
    // Over the source's channels, a of each group and b within it, rows contiguous:
    // source channel a * C/g + b is input channel b * g + a.
    const int64_t groups = pro.shuffle_groups;
    if (groups < 1 || dims[1] % groups != 0) return absl::InternalError("a channel shuffle without groups");
    const int64_t per = dims[1] / groups;
    const ir::Expr a = Var("pro.a"), b = Var("pro.b");
    const ir::Expr from = Add(Mul(Add(Mul(Add(Mul(n, IntImm(dims[1])), Add(Mul(a, IntImm(per)), b)), IntImm(dims[2])), h),
                                  IntImm(dims[3])),
                              w);
    ir::Stmt copy = ir::Store("I.blocked", dst.Index(n, Add(Mul(b, IntImm(groups)), a), IntImm(0), h, w),
                              ir::Load("I", ir::DType::kFloat32, from));
    copy = ir::For("pro.w", IntImm(dims[3]), dims[3], ir::ForKind::kSerial, copy);
    copy = ir::For("pro.h", IntImm(dims[2]), dims[2], ir::ForKind::kSerial, copy);
    copy = ir::For("pro.a", IntImm(groups), groups, ir::ForKind::kSerial, copy);
    copy = ir::For("pro.b", IntImm(per), per, per > 1 ? ir::ForKind::kParallel : ir::ForKind::kSerial, copy);
    shuffle_copy = ir::For("pro.n", IntImm(dims[0]), dims[0], ir::ForKind::kSerial, copy);
  } else {
    ASSIGN_OR_RETURN(value, ChainValue(g, pro.chain, load));
  }
  p->tensors[in] = main;
  p->prologue = true;
  for (int t : inputs) {
    if (t != main) AddTensorParam(g, p, absl::StrCat("pro.t", t), t);
  }
  if (shuffle_copy) {
    f.body = ReplaceTopLevel(f.body, "I", shuffle_copy);
  } else {
    const ir::Stmt pixel = ir::For(
        "pro.ci", IntImm(dst.block), dst.block, dst.block >= 4 ? ir::ForKind::kVectorized : ir::ForKind::kSerial,
        ir::Store("I.blocked", dst.Index(n, Mul(cb, IntImm(dst.block)), ci, h, w), value));
    f.body = ReplaceTopLevel(f.body, "I", ChannelBlockNest("pro.", dims, dst.block, pixel));
  }
  p->source = (pro.chain.empty() ? std::string("channel shuffle") : ChainOps(g, pro.chain)) + " -> " + p->source;
  Rename(&f);
  return true;
}

// The copy of conv step `a`'s blocked output (N, K/y, OH, OW, y) into `dst`, a
// reader's blocked input, its channels from `channel_offset` on (a part of a concat;
// 0 otherwise), with a's epilogue applied on the way. The channels go in runs of the
// largest size every layout involved (output, destination, residual) blocks by, one
// vector each.
ir::Stmt HandOverCopy(const Graph& g, const PlannedStep& a, const ActivationLayout& dst, int64_t channel_offset = 0) {
  using ir::Add;
  using ir::IntImm;
  using ir::Mul;
  using ir::Var;
  const ir::LoweredFunc& f = a.func;
  int64_t lanes = std::gcd(f.params[ParamIndex(f, "O.blocked")].shape[4], dst.block);
  if (a.residual.block > 0) lanes = std::gcd(lanes, a.residual.block);
  const std::vector<int64_t>& os = f.params[ParamIndex(f, "O")].shape;  // the producer's N, K, OH, OW (pooled)
  const ir::Expr n = Var("ho.n"), cb = Var("ho.cb"), h = Var("ho.h"), w = Var("ho.w"), co = Var("ho.co"),
                 cl = Var("ho.cl");
  const ir::Expr base = Add(Mul(cb, IntImm(dst.block)), Mul(co, IntImm(lanes)));
  ir::Stmt copy = ir::For("ho.cl", IntImm(lanes), lanes, lanes >= 4 ? ir::ForKind::kVectorized : ir::ForKind::kSerial,
                          ir::Store(dst.buffer, dst.Index(n, Add(base, IntImm(channel_offset)), cl, h, w),
                                    ConvOutputValue(g, a, n, base, cl, h, w)));
  copy = ir::For("ho.co", IntImm(dst.block / lanes), dst.block / lanes, ir::ForKind::kSerial, copy);
  return ChannelBlockNest("ho.", os, dst.block, copy);
}

// A max-pool whose input only a convolution's step writes and only the pool reads
// (ResNet's stem) runs inside that step: the convolution's output is pooled on its
// way out of the blocked layout (ConvOutputValue), its full-size output never exists
// and the pool's step goes. The step then writes the pool's output like any other
// convolution's (so PropagateBlockedLayouts can hand it over blocked). Plain pools
// only: 2-D, no dilation, symmetric padding, no Indices output; the convolution's
// epilogue without a residual (bias and relu/clip commute with the max).
void FuseMaxPools(const Graph& g, const std::vector<std::vector<int>>& consumers, const std::vector<bool>& is_output,
                  std::vector<PlannedStep>* planned) {
  std::vector<PlannedStep>& steps = *planned;
  for (size_t p = 0; p < steps.size(); ++p) {
    if (steps[p].node < 0) continue;
    const Node& pool = g.nodes[static_cast<size_t>(steps[p].node)];
    if (pool.op != "MaxPool" || pool.outputs.size() != 1) continue;
    const int in = pool.inputs[0], out = pool.outputs[0];
    const std::vector<int64_t> k = pool.Ints("kernel_shape");
    const std::vector<int64_t> st = pool.Ints("strides", {1, 1});
    const std::vector<int64_t> dil = pool.Ints("dilations", {1, 1});
    const std::vector<int64_t> pads = pool.Ints("pads", {0, 0, 0, 0});
    if (k.size() != 2 || st.size() != 2 || dil != std::vector<int64_t>{1, 1} || pads.size() != 4 ||
        pads[0] != pads[2] || pads[1] != pads[3] || pool.Int("storage_order", 0) != 0 ||
        (pool.attrs.count("auto_pad") && pool.attrs.at("auto_pad").text != "NOTSET") ||
        is_output[static_cast<size_t>(in)] || consumers[static_cast<size_t>(in)].size() != 1) {
      continue;
    }
    // The step writing the pool's input: a conv template's, its output unpacked to NCHW.
    size_t a = steps.size();
    for (size_t s = 0; s < p; ++s) {
      const size_t o = ParamIndex(steps[s].func, "O");
      if (steps[s].is_conv && o < steps[s].func.params.size() && steps[s].tensors[o] == in) a = s;
    }
    if (a == steps.size()) continue;
    PlannedStep& A = steps[a];
    if (!A.use || A.use->residual >= 0 || ParamIndex(A.func, "O.blocked") >= A.func.params.size() ||
        CountTopLevel(A.func.body, "O") != 1) {
      continue;
    }
    const std::vector<int64_t>& ins = g.tensors[static_cast<size_t>(in)].shape;
    const std::vector<int64_t>& outs = g.tensors[static_cast<size_t>(out)].shape;
    // Every window must hold a position inside the image (else clamping would invent one).
    bool windows_inside = pads[0] < k[0] && pads[1] < k[1];
    windows_inside &= (outs[2] - 1) * st[0] - pads[0] < ins[2] && (outs[3] - 1) * st[1] - pads[1] < ins[3];
    if (!windows_inside) continue;
    A.pool = PlannedStep::Pool{k[0], k[1], st[0], st[1], pads[0], pads[1]};
    const size_t o = ParamIndex(A.func, "O");
    A.func.params[o].shape = outs;
    A.tensors[o] = out;
    A.func.body = ReplaceTopLevel(A.func.body, "O", UnpackWithEpilogue(g, A));
    A.source += "+MaxPool";
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(p));
    --p;
  }
}

// The kernel of conv step `a` re-instantiated to write its output straight into
// `dst` from the register tile, its epilogue applied there (Conv2dTemplate::
// InstantiateInto): the blocked output and the copy out of it go. Only for a single
// reader (the tile writes one place), no fused pool, and blocks the template can
// write whole vectors of; nullopt otherwise.
absl::StatusOr<std::optional<ir::Stmt>> WriteBackInto(const Graph& g, const Target& target, const PlannedStep& a,
                                                      const ActivationLayout& dst, size_t readers) {
  if (readers != 1 || a.pool || !a.conv_template || !a.config ||
      !Conv2dTemplate::CanWriteInto(*a.config, dst.block, a.residual.block)) {
    return std::optional<ir::Stmt>();
  }
  const ir::LoweredFunc& f = a.func;
  ConvOutputSpec spec;
  spec.buffer = dst.buffer;
  spec.block = dst.block;
  spec.pad_h = dst.pad_h;
  spec.pad_w = dst.pad_w;
  for (const std::string& name : {std::string("epi.bias"), a.residual.buffer}) {
    if (!name.empty() && ParamIndex(f, name) < f.params.size()) spec.inputs.push_back(f.params[ParamIndex(f, name)]);
  }
  const bool bias = ParamIndex(f, "epi.bias") < f.params.size();
  spec.epilogue = [&](ir::Expr sum, ir::Expr n, ir::Expr base, ir::Expr lane, ir::Expr h, ir::Expr w) {
    std::vector<ir::Expr> addends;
    if (bias) addends.push_back(ir::Load("epi.bias", ir::DType::kFloat32, ir::Add(base, lane)));
    if (!a.residual.buffer.empty()) {
      addends.push_back(ir::Load(a.residual.buffer, ir::DType::kFloat32, a.residual.Index(n, base, lane, h, w)));
    }
    return EpilogueExpr(g, *a.use, sum, addends);
  };
  ASSIGN_OR_RETURN(ir::LoweredFunc func,
                   a.conv_template->InstantiateInto(*a.task, target, *a.config, a.streams_weights, spec));
  return std::optional<ir::Stmt>(func.body);
}

// Where each graph tensor is bound: tensor -> (step, parameter) of every use.
std::map<int, std::vector<std::pair<size_t, size_t>>> BoundParams(const std::vector<PlannedStep>& steps) {
  std::map<int, std::vector<std::pair<size_t, size_t>>> bound;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t i = 0; i < steps[s].tensors.size(); ++i) {
      if (steps[s].tensors[i] >= 0) bound[steps[s].tensors[i]].push_back({s, i});
    }
  }
  return bound;
}

// One convolution's output handed over in the blocked layout.
struct HandOver {
  size_t producer = 0;
  std::vector<size_t> readers;           // conv steps reading the tensor as their input
  std::vector<size_t> residual_readers;  // conv steps adding it in their epilogue
};

// Layout transforms cancelled between convolutions. When a convolution's output (its
// epilogue applied) is read only by other convolutions — as their input, or as the
// residual their epilogue adds — the producer writes it straight into each reader's
// blocked, zero-bordered input (NCHW[x]c with the padding in place) instead of
// unpacking it to NCHW, and the residual readers load it from the first reader's
// blocked input. The NCHW tensor is never materialized, no reader blocks it again:
// in a ResNet block, the output of one block is written once, in the layout the next
// block's first convolution reads, and its second convolution adds it from there.
// Returns the number of blocking passes removed; counts the residuals read blocked in
// `residual_reads`.
absl::StatusOr<int> PropagateBlockedLayouts(const Graph& g, const Target& target,
                                            const std::vector<std::vector<int>>& consumers,
                                            const std::vector<bool>& is_output, std::vector<PlannedStep>* planned,
                                            int* residual_reads, int* direct_writes) {
  std::vector<PlannedStep>& steps = *planned;
  std::map<int, std::vector<std::pair<size_t, size_t>>> bound = BoundParams(steps);
  // A conv step whose only use of its input is the copy into its blocked input (and
  // no prologue: its copy computes a chain from the tensor).
  auto blocks_its_input = [](const PlannedStep& p) {
    const size_t bi = ParamIndex(p.func, "I.blocked");
    return p.is_conv && !p.prologue && bi < p.func.params.size() && p.func.params[bi].shape.size() == 5 &&
           CountTopLevel(p.func.body, "I") == 1;
  };
  std::vector<HandOver> plan;
  for (size_t a = 0; a < steps.size(); ++a) {
    const PlannedStep& A = steps[a];
    const size_t o = ParamIndex(A.func, "O");
    if (!A.is_conv || !A.use || o >= A.func.params.size() || ParamIndex(A.func, "O.blocked") >= A.func.params.size() ||
        CountTopLevel(A.func.body, "O") != 1) {
      continue;
    }
    const int t = A.tensors[o];
    if (t < 0 || is_output[static_cast<size_t>(t)]) continue;
    // A reshape of the tensor shares its storage: it must stay NCHW.
    bool ok = true;
    for (int c : consumers[static_cast<size_t>(t)]) {
      const std::string& op = g.nodes[static_cast<size_t>(c)].op;
      ok &= !IsAliasOp(op) && op != "Split" && op != "Concat";  // views, or kernels reading NCHW
    }
    HandOver h;
    h.producer = a;
    for (const auto& [s, i] : bound[t]) {
      if (s == a && i == o) continue;
      const PlannedStep& p = steps[s];
      const std::string& name = p.func.params[i].name;
      if (s > a && name == "I" && blocks_its_input(p) && p.func.params[i].shape == A.func.params[o].shape) {
        h.readers.push_back(s);
      } else if (s > a && p.is_conv && name == "epi.residual" && CountTopLevel(p.func.body, "O") == 1) {
        h.residual_readers.push_back(s);
      } else {
        ok = false;
      }
    }
    if (ok && !h.readers.empty()) plan.push_back(std::move(h));
  }
  // The residual readers first: their epilogues (in their unpack, or in the copies of
  // their own hand-over below) load the residual from where it now lives.
  for (const HandOver& h : plan) {
    for (size_t c : h.residual_readers) {
      PlannedStep& C = steps[c];
      EraseParam(&C, ParamIndex(C.func, "epi.residual"));
      C.residual = BlockedInputLayout(steps[h.readers[0]], "epi.residual.blocked");
      BorrowBlockedInput(&C, C.residual, h.readers[0]);
      C.func.body = ReplaceTopLevel(C.func.body, "O", UnpackWithEpilogue(g, C));
      ++*residual_reads;
    }
  }
  int removed = 0;
  for (const HandOver& h : plan) {
    PlannedStep& A = steps[h.producer];
    std::vector<ir::Stmt> a_body = WithoutTopLevel(A.func.body, "O");
    for (size_t r = 0; r < h.readers.size(); ++r) {
      PlannedStep& B = steps[h.readers[r]];
      const ActivationLayout dst = BlockedInputLayout(B, absl::StrCat("next", r, ".I.blocked"));
      BorrowBlockedInput(&A, dst, h.readers[r]);
      ASSIGN_OR_RETURN(std::optional<ir::Stmt> direct, WriteBackInto(g, target, A, dst, h.readers.size()));
      if (direct) {
        // The kernel itself writes the reader's layout: its statement replaces the one
        // writing O.blocked, and no copy follows.
        for (ir::Stmt& st : a_body) {
          if (codegen::CollectUsedNames(st).buffers.count("O.blocked")) st = *direct;
        }
        ++*direct_writes;
      } else {
        a_body.push_back(HandOverCopy(g, A, dst));
      }
      B.func.body = ir::Block(WithoutTopLevel(B.func.body, "I"));
      EraseParam(&B, ParamIndex(B.func, "I"));
      ++removed;
    }
    A.func.body = ir::Block(a_body);
    EraseParam(&A, ParamIndex(A.func, "O"));
  }
  for (PlannedStep& p : steps) {
    if (p.is_conv) {
      Rename(&p.func);
    }
  }
  return removed;
}

// uint8 tensors between int8 layers (docs/int8.md). When a quantized layer's output
// (a QDQ model's tensor after its quantization round trip) is read by another
// quantized layer as its input, and by nothing else but possibly a third quantized
// layer's residual, the producer writes its uint8 results straight into the reader's
// padded NHWC input (from its kernel's write-back, or from its way out when it adds a
// residual itself), and the residual reader dequantizes them from there: no float32
// NCHW tensor, no quantization back (the reader keeps writing its border). All agree
// on the quantization (the same tensor's scale and zero point; checked). Returns the
// number of tensors so handed over.
absl::StatusOr<int> HandOverQuantizedOutputs(const Graph& g, const Target& target,
                                             const std::vector<std::vector<int>>& consumers,
                                             const std::vector<bool>& is_output, std::vector<PlannedStep>* planned) {
  std::vector<PlannedStep>& steps = *planned;
  std::map<int, std::vector<std::pair<size_t, size_t>>> bound = BoundParams(steps);
  auto quantized = [](const PlannedStep& p) { return p.use && p.use->quantized && p.task && p.config; };
  // The links first, then every step involved re-instantiated once with all of its
  // links, then every reader's input pass removed (a layer is often producer and
  // reader both).
  std::map<size_t, QuantizedLinks> links;
  std::vector<size_t> readers;
  std::vector<std::pair<size_t, size_t>> twins;  // (second reader, the reader whose buffer it reads)
  for (size_t a = 0; a < steps.size(); ++a) {
    const PlannedStep& A = steps[a];
    const size_t o = ParamIndex(A.func, "O");
    if (!quantized(A) || o >= A.func.params.size() || A.use->pool) continue;
    const int t = A.tensors[o];
    if (t < 0 || is_output[static_cast<size_t>(t)]) continue;
    bool views = false;
    for (int c : consumers[static_cast<size_t>(t)]) views |= IsAliasOp(g.nodes[static_cast<size_t>(c)].op);
    if (views) continue;
    // The quantization of what A writes: its output's, or its sum's.
    const bool sums = A.use->residual >= 0;
    const double scale = sums ? A.use->sum_scale : A.use->out_scale;
    const int64_t zero = sums ? A.use->sum_zero : A.task->Param("out_zero");
    std::optional<std::pair<size_t, size_t>> input, twin, residual;
    bool other = false;
    for (const auto& [s, i] : bound[t]) {
      if (s == a && i == o) continue;
      const PlannedStep& P = steps[s];
      const std::string& name = P.func.params[i].name;
      const bool reads_it = s > a && quantized(P) && name == "I" &&
                            ParamIndex(P.func, "I.padded") < P.func.params.size() &&
                            P.func.params[i].shape == A.func.params[o].shape && CountTopLevel(P.func.body, "I") == 1 &&
                            P.use->in_scale == scale && P.task->Param("a_zero") == zero;
      if (reads_it && !input) {
        input = {s, i};
      } else if (reads_it && !twin &&
                 P.func.params[ParamIndex(P.func, "I.padded")].shape ==
                     steps[input->first].func.params[ParamIndex(steps[input->first].func, "I.padded")].shape) {
        // A second reader of the same padded layout (a ResNet block output read by the
        // next block's first conv and its downsampling conv, both 1x1 unpadded): it
        // reads the first reader's buffer.
        twin = {s, i};
      } else if (s > a && quantized(P) && name == "R" && !residual && P.use->residual == t) {
        residual = {s, i};
      } else {
        other = true;
      }
    }
    if (other || !input) continue;
    const PlannedStep& B = steps[input->first];
    const std::vector<int64_t>& ps = B.func.params[ParamIndex(B.func, "I.padded")].shape;  // N, Hp, Wp, Cp
    const int64_t pad = (ps[1] - B.func.params[input->second].shape[2]) / 2;
    links[a].into = QuantizedHandOver{"next.I.padded", pad, ps[3]};
    links[a].into_owner = static_cast<int>(input->first);
    if (residual) {
      QuantizedLinks& c = links[residual->first];
      c.residual_owner = static_cast<int>(input->first);
      c.residual_pad = pad, c.residual_cp = ps[3], c.residual_zero = zero, c.residual_scale = scale;
    }
    readers.push_back(input->first);
    if (twin) twins.push_back({twin->first, input->first});
  }
  for (const auto& [s, l] : links) {
    const PlannedStep& P = steps[s];
    ASSIGN_OR_RETURN(PlannedStep replanned, PlanQuantizedConv(g, *P.use, *P.task, *P.config, target, P.source, l));
    steps[s] = std::move(replanned);
  }
  for (size_t b : readers) {
    PlannedStep& B = steps[b];
    B.func.body = ir::Block(WithoutTopLevel(B.func.body, "I"));
    EraseParam(&B, ParamIndex(B.func, "I"));
    Rename(&B.func);
  }
  for (const auto& [b, owner] : twins) {  // its border is the owner's too: same zero point, same pad
    PlannedStep& B = steps[b];
    B.func.body = ir::Block(WithoutTopLevel(B.func.body, "I"));
    EraseParam(&B, ParamIndex(B.func, "I"));
    B.borrow[ParamIndex(B.func, "I.padded")] = {static_cast<int>(owner), "I.padded"};
    Rename(&B.func);
  }
  return static_cast<int>(readers.size());
}

// Concatenations handed over blocked. A channel Concat whose parts are views of its
// output (ConcatIntoViews), each part written by a convolution's step and read by
// nothing else, and whose output only convolutions read, as their input (a fire
// module of SqueezeNet: the 1x1 and 3x3 expand layers concatenated into the next
// squeeze layer's input): each part's producer writes its channels, epilogue
// applied, straight into each reader's blocked input at the part's channel offset,
// and the readers skip their copy. The NCHW concatenation is never written. Every
// part's offset and channel count must be whole blocks of every reader. Returns the
// readers' inputs so handed over.
int HandOverConcats(const Graph& g, const std::vector<std::vector<int>>& consumers, const std::vector<bool>& is_output,
                    const std::vector<int>& root, std::vector<PlannedStep>* planned) {
  std::vector<PlannedStep>& steps = *planned;
  int handed = 0;
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    const Node& cat = g.nodes[c];
    if (cat.op != "Concat" || cat.outputs.size() != 1) continue;
    const int out = cat.outputs[0];
    const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(out)].shape;
    if (shape.size() != 4 || NormalizedAxis(cat, shape) != 1 || root[static_cast<size_t>(out)] != out) continue;
    // No graph output may share its storage (the concatenation itself, an alias of it).
    bool read_out = false;
    for (size_t u = 0; u < root.size(); ++u) read_out |= root[u] == out && is_output[u];
    if (read_out) continue;
    // The parts: (producing step, channel offset).
    std::vector<std::pair<size_t, int64_t>> parts;
    int64_t at = 0;
    bool ok = true;
    for (int t : cat.inputs) {
      size_t a = steps.size();
      for (size_t s = 0; s < steps.size(); ++s) {
        const size_t o = ParamIndex(steps[s].func, "O");
        if (o < steps[s].func.params.size() && steps[s].tensors[o] == t) a = s;
      }
      ok &= root[static_cast<size_t>(t)] == out && !is_output[static_cast<size_t>(t)] &&
            consumers[static_cast<size_t>(t)] == std::vector<int>{static_cast<int>(c)} && a < steps.size();
      if (!ok) break;
      const PlannedStep& A = steps[a];
      ok &= A.is_conv && A.use && A.residual.buffer.empty() &&
            ParamIndex(A.func, "O.blocked") < A.func.params.size() && CountTopLevel(A.func.body, "O") == 1;
      parts.push_back({a, at});
      at += g.tensors[static_cast<size_t>(t)].shape[1];
    }
    if (!ok || parts.empty()) continue;
    size_t last_part = 0;
    for (const auto& part : parts) last_part = std::max(last_part, part.first);
    // The readers: conv steps copying the concatenation into their blocked input.
    std::vector<size_t> readers;
    for (size_t s = 0; s < steps.size() && ok; ++s) {
      const PlannedStep& p = steps[s];
      for (size_t i = 0; i < p.tensors.size(); ++i) {
        if (p.tensors[i] < 0 || root[static_cast<size_t>(p.tensors[i])] != out) continue;
        const bool writes_a_part = p.func.params[i].name == "O" &&
                                   std::any_of(parts.begin(), parts.end(), [&](const auto& q) { return q.first == s; });
        if (writes_a_part) continue;
        const size_t bi = ParamIndex(p.func, "I.blocked");
        // The concatenation itself, or an alias of it (Dropout, Identity) of its shape.
        ok &= g.tensors[static_cast<size_t>(p.tensors[i])].shape == shape && p.func.params[i].name == "I" &&
              p.is_conv && !p.prologue &&
              bi < p.func.params.size() && p.func.params[bi].shape.size() == 5 &&
              CountTopLevel(p.func.body, "I") == 1 && s > last_part;
        if (ok) readers.push_back(s);
      }
    }
    if (!ok || readers.empty()) continue;
    for (size_t r : readers) {
      const int64_t block = BlockedInputLayout(steps[r], "").block;
      for (size_t k = 0; k < parts.size(); ++k) {
        const int64_t channels = g.tensors[static_cast<size_t>(cat.inputs[k])].shape[1];
        ok &= parts[k].second % block == 0 && channels % block == 0;
      }
    }
    if (!ok) continue;
    for (const auto& [a, offset] : parts) {
      PlannedStep& A = steps[a];
      std::vector<ir::Stmt> body = WithoutTopLevel(A.func.body, "O");
      for (size_t r = 0; r < readers.size(); ++r) {
        const ActivationLayout dst = BlockedInputLayout(steps[readers[r]], absl::StrCat("cat", r, ".I.blocked"));
        BorrowBlockedInput(&A, dst, readers[r]);
        body.push_back(HandOverCopy(g, A, dst, offset));
      }
      A.func.body = ir::Block(body);
      EraseParam(&A, ParamIndex(A.func, "O"));
      Rename(&A.func);
    }
    for (size_t r : readers) {
      PlannedStep& B = steps[r];
      B.func.body = ir::Block(WithoutTopLevel(B.func.body, "I"));
      EraseParam(&B, ParamIndex(B.func, "I"));
      Rename(&B.func);
      ++handed;
    }
  }
  return handed;
}

// Builds the distinct functions (by entry symbol) on `threads` threads.
absl::StatusOr<std::map<std::string, Artifact>> BuildAll(const std::vector<PlannedStep>& steps,
                                                         const Target& target, int threads) {
  std::vector<const ir::LoweredFunc*> funcs;
  std::map<std::string, Artifact> built;
  for (const PlannedStep& s : steps) {
    if (built.emplace(s.func.name, Artifact()).second) funcs.push_back(&s.func);
  }
  std::vector<absl::StatusOr<Artifact>> results(funcs.size(), absl::UnknownError("not built"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < funcs.size(); i = next++) results[i] = BuildArtifact(*funcs[i], target);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < funcs.size(); ++i) {
    if (!results[i].ok()) {
      return absl::Status(results[i].status().code(), absl::StrCat("building ", funcs[i]->name, ": ",
                                                                   results[i].status().message()));
    }
    built[funcs[i]->name] = std::move(*results[i]);
  }
  return built;
}

// The model's inputs as Run takes them. An int64 input that indexes Gathers directly
// is bounded by their smallest indexed dimension.
std::vector<TensorInfo> DescribeInputs(const Graph& g) {
  std::vector<TensorInfo> out;
  for (int t : g.inputs) {
    const Tensor& x = g.tensors[static_cast<size_t>(t)];
    TensorInfo info{x.name, x.shape, x.dtype, 0};
    for (const Node& n : g.nodes) {
      if (n.op == "Gather" && n.inputs[1] == t) {
        const std::vector<int64_t>& data = g.tensors[static_cast<size_t>(n.inputs[0])].shape;
        int64_t axis = n.Int("axis", 0);
        if (axis < 0) axis += static_cast<int64_t>(data.size());
        const int64_t dim = data[static_cast<size_t>(axis)];
        info.index_bound = info.index_bound == 0 ? dim : std::min(info.index_bound, dim);
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

// Bool masks are float32 0 and 1 in memory (graph.h), int64 tensors computed at run
// time whole numbers in float32; int64 constants that kernels read get that form
// here, when their values fit (a kernel reading one that does not is refused when its
// step is bound). A bool graph input or output is refused.
absl::Status PrepareRunTimeTensors(Graph* g) {
  for (Tensor& t : g->tensors) {
    if (t.dtype != DType::kInt64 || !t.constant || !t.f32.empty()) continue;
    bool fits = true;
    for (int64_t v : t.i64) fits &= v >= -kMaxRunTimeInt && v <= kMaxRunTimeInt;
    if (fits) t.f32.assign(t.i64.begin(), t.i64.end());
  }
  for (const std::vector<int>* ends : {&g->inputs, &g->outputs}) {
    for (int id : *ends) {
      const Tensor& t = g->tensors[static_cast<size_t>(id)];
      if (t.dtype == DType::kBool) {
        return absl::UnimplementedError(absl::StrCat("graph ", ends == &g->inputs ? "input" : "output", " '",
                                                     t.name, "' is bool; the model's inputs and outputs must be "
                                                     "float32 or int64"));
      }
    }
  }
  return absl::OkStatus();
}

// Which nodes run in which kernel: each task occurrence where the last node it
// absorbs stood, chains of elementwise nodes fused into one kernel, a dense layer
// absorbing the chain after it, a conv computing the chain or channel shuffle before
// it while it copies its input (FuseConvPrologue). The TaskUse pointers point into
// `table`, which must outlive the plan.
struct FusionPlan {
  std::map<int, const TaskUse*> task_at;         // node -> the task occurrence run there
  std::vector<bool> covered;                     // per node: inside a task occurrence
  std::vector<std::vector<int>> consumers;       // per tensor: the nodes reading it
  std::vector<bool> is_output;                   // per tensor: a graph output
  std::map<int, std::vector<int>> chain_ending_at;  // last node -> an elementwise chain
  std::vector<bool> in_chain;                    // per node: in some chain
  std::map<const TaskUse*, std::vector<int>> absorbed;  // dense -> the chain it computes
  std::map<const TaskUse*, ConvPrologue> prologue;      // conv -> what its input copy computes
  std::set<int> shuffles;                        // Transpose nodes a conv's copy computes
};

FusionPlan PlanFusion(const Graph& g, const TaskTable& table) {
  FusionPlan f;
  // Each task occurrence runs where the last node it absorbs stood: every operand of
  // its epilogue (a residual computed later in the graph) is ready there, and the
  // anchor's own output feeds nothing else.
  std::map<int, const TaskUse*>& task_at = f.task_at;
  std::vector<bool>& covered = f.covered;
  covered.assign(g.nodes.size(), false);
  for (const TaskUse& use : table.uses) {
    task_at[use.nodes.back()] = &use;
    for (int n : use.nodes) covered[static_cast<size_t>(n)] = true;
  }

  // Chains of elementwise nodes fuse into one kernel, run where the chain ends.
  std::vector<std::vector<int>>& consumers = f.consumers;
  consumers.resize(g.tensors.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int t : g.nodes[i].inputs) {
      if (t >= 0) consumers[static_cast<size_t>(t)].push_back(static_cast<int>(i));
    }
  }
  std::vector<bool>& is_output = f.is_output;
  is_output.assign(g.tensors.size(), false);
  for (int t : g.outputs) is_output[static_cast<size_t>(t)] = true;
  std::map<int, std::vector<int>>& chain_ending_at = f.chain_ending_at;
  std::vector<bool>& in_chain = f.in_chain;
  in_chain.assign(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (covered[i] || in_chain[i] || !IsElementwiseOp(g.nodes[i].op)) continue;
    std::vector<int> chain = {static_cast<int>(i)};
    for (;;) {
      const int out = g.nodes[static_cast<size_t>(chain.back())].outputs[0];
      const std::vector<int>& users = consumers[static_cast<size_t>(out)];
      if (is_output[static_cast<size_t>(out)] || users.size() != 1) break;
      const size_t next = static_cast<size_t>(users[0]);
      if (covered[next] || in_chain[next] || !IsElementwiseOp(g.nodes[next].op) ||
          g.tensors[static_cast<size_t>(g.nodes[next].outputs[0])].shape != g.tensors[static_cast<size_t>(out)].shape) {
        break;
      }
      chain.push_back(static_cast<int>(next));
    }
    for (int n : chain) in_chain[static_cast<size_t>(n)] = true;
    chain_ending_at[chain.back()] = chain;
  }

  // A dense layer (or a dynamically quantized MatMul) whose output only an
  // elementwise chain reads absorbs the chain (it then runs where the chain ends).
  std::map<const TaskUse*, std::vector<int>>& absorbed = f.absorbed;
  for (const TaskUse& use : table.uses) {
    const std::string& op = table.tasks[static_cast<size_t>(use.task)].op;
    const size_t t = static_cast<size_t>(use.output);
    if ((op != "dense" && !(op == "qmatmul" && use.dynamic)) || is_output[t] || consumers[t].empty()) continue;
    auto chain = std::find_if(chain_ending_at.begin(), chain_ending_at.end(), [&](const auto& c) {
      return std::find(c.second.begin(), c.second.end(), consumers[t][0]) != c.second.end();
    });
    if (chain == chain_ending_at.end()) continue;
    bool all_inside = true;
    for (int c : consumers[t]) {
      all_inside &= std::find(chain->second.begin(), chain->second.end(), c) != chain->second.end();
    }
    const int result = g.nodes[static_cast<size_t>(chain->second.back())].outputs[0];
    if (!all_inside || g.tensors[static_cast<size_t>(result)].shape != g.tensors[t].shape) continue;
    absorbed[&use] = chain->second;
    task_at.erase(use.nodes.back());
    task_at[chain->first] = &use;
    chain_ending_at.erase(chain);
  }

  // A convolution whose input only an elementwise chain writes (DenseNet's BatchNorm
  // and ReLU before every conv) or only a channel shuffle (ShuffleNet's, before its
  // depthwise convs) computes it while it copies its input into the blocked layout
  // (FuseConvPrologue); where it cannot, the chain or the Transpose runs as its own
  // kernel just before it.
  std::vector<int> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int t : g.nodes[i].outputs)
      if (t >= 0) producer[static_cast<size_t>(t)] = static_cast<int>(i);
  }
  // The node writing t when only `reader` reads t, -1 otherwise.
  auto sole_producer = [&](int t, int reader) {
    const size_t u = static_cast<size_t>(t);
    return !is_output[u] && consumers[u] == std::vector<int>{reader} ? producer[u] : -1;
  };
  std::map<const TaskUse*, ConvPrologue>& prologue = f.prologue;
  std::set<int>& shuffles = f.shuffles;
  for (const TaskUse& use : table.uses) {
    if (g.nodes[static_cast<size_t>(use.anchor)].op != "Conv" || use.quantized ||
        sole_producer(use.data, use.anchor) < 0) {
      continue;
    }
    auto chain = std::find_if(chain_ending_at.begin(), chain_ending_at.end(), [&](const auto& c) {
      return g.nodes[static_cast<size_t>(c.first)].outputs[0] == use.data;
    });
    if (chain != chain_ending_at.end()) {
      prologue[&use] = ConvPrologue{chain->second};
      chain_ending_at.erase(chain);
      continue;
    }
    // Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose [0, 2, 1, 3, 4], Reshape back.
    const int back = sole_producer(use.data, use.anchor);
    if (g.nodes[static_cast<size_t>(back)].op != "Reshape") continue;
    const int transpose = sole_producer(g.nodes[static_cast<size_t>(back)].inputs[0], back);
    if (transpose < 0 || covered[static_cast<size_t>(transpose)]) continue;
    const Node& tr = g.nodes[static_cast<size_t>(transpose)];
    if (tr.op != "Transpose" || tr.Ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4}) continue;
    const int split = sole_producer(tr.inputs[0], transpose);
    if (split < 0 || g.nodes[static_cast<size_t>(split)].op != "Reshape") continue;
    const int source = g.nodes[static_cast<size_t>(split)].inputs[0];
    const std::vector<int64_t>& xs = g.tensors[static_cast<size_t>(source)].shape;
    const std::vector<int64_t>& ss = g.tensors[static_cast<size_t>(tr.inputs[0])].shape;
    if (xs.size() != 4 || ss.size() != 5 || xs != g.tensors[static_cast<size_t>(use.data)].shape || ss[0] != xs[0] ||
        ss[1] * ss[2] != xs[1] || ss[3] != xs[2] || ss[4] != xs[3]) {
      continue;
    }
    prologue[&use] = ConvPrologue{{}, source, ss[1], transpose};
    shuffles.insert(transpose);
  }
  return f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, const Target& target,
                                                           const ExecutorOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->graph = graph;
  impl->poison_arena = options.poison_arena;
  Graph& g = impl->graph;
  const int lanes = target.MaxF32Lanes();
  impl->inputs = DescribeInputs(g);
  impl->input_ids = g.inputs;
  for (int t : g.outputs) {
    const Tensor& x = g.tensors[static_cast<size_t>(t)];
    impl->outputs.push_back({x.name, x.shape, x.dtype, 0});
  }
  impl->output_ids = g.outputs;
  RETURN_IF_ERROR(PrepareRunTimeTensors(&g));

  ASSIGN_OR_RETURN(TaskTable table, ExtractTasks(g));
  const FusionPlan fusion = PlanFusion(g, table);
  const std::map<int, const TaskUse*>& task_at = fusion.task_at;
  const std::vector<bool>& covered = fusion.covered;
  const std::vector<std::vector<int>>& consumers = fusion.consumers;
  const std::vector<bool>& is_output = fusion.is_output;
  const std::map<int, std::vector<int>>& chain_ending_at = fusion.chain_ending_at;
  const std::vector<bool>& in_chain = fusion.in_chain;
  const std::map<const TaskUse*, std::vector<int>>& absorbed = fusion.absorbed;
  const std::map<const TaskUse*, ConvPrologue>& prologue = fusion.prologue;
  const std::set<int>& shuffles = fusion.shuffles;

  impl->root.resize(g.tensors.size());
  impl->view_bytes.assign(g.tensors.size(), 0);
  std::vector<bool> is_input(g.tensors.size(), false);
  for (int t : g.inputs) is_input[static_cast<size_t>(t)] = true;
  for (size_t i = 0; i < g.tensors.size(); ++i) impl->root[i] = static_cast<int>(i);
  std::vector<PlannedStep> planned;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const int node = static_cast<int>(i);
    if (auto it = task_at.find(node); it != task_at.end()) {
      bool tuned = false;
      auto chain = absorbed.find(it->second);
      ASSIGN_OR_RETURN(PlannedStep step, PlanTask(g, table, *it->second,
                                                  chain == absorbed.end() ? nullptr : &chain->second,
                                                  target, options, &tuned));
      if (chain != absorbed.end()) {
        for (int c : chain->second) step.source += "+" + g.nodes[static_cast<size_t>(c)].op;
      }
      if (auto pro = prologue.find(it->second); pro != prologue.end()) {
        ASSIGN_OR_RETURN(const bool fused, FuseConvPrologue(g, pro->second, &step));
        const std::vector<int>& chain_nodes = pro->second.chain;
        if (fused) {
          ++impl->fused_prologues;
        } else if (!chain_nodes.empty()) {
          ASSIGN_OR_RETURN(NodeKernel k, GenerateElementwiseKernel(g, chain_nodes, lanes));
          planned.push_back(FromNodeKernel(std::move(k), ChainOps(g, chain_nodes)));
        } else {
          ASSIGN_OR_RETURN(NodeKernel k, GenerateNodeKernel(g, pro->second.shuffle_node, lanes));
          planned.push_back(FromNodeKernel(std::move(k), "Transpose"));
          planned.back().node = pro->second.shuffle_node;
        }
      }
      ++(tuned ? impl->tuned : impl->defaults);
      planned.push_back(std::move(step));
    }
    if (covered[i] || shuffles.count(node)) continue;
    if (in_chain[i]) {
      auto it = chain_ending_at.find(node);
      if (it == chain_ending_at.end()) continue;  // runs with the chain's last node
      ASSIGN_OR_RETURN(NodeKernel k, GenerateElementwiseKernel(g, it->second, lanes));
      planned.push_back(FromNodeKernel(std::move(k), ChainOps(g, it->second)));
      continue;
    }
    if (IsAliasOp(n.op)) {
      impl->root[static_cast<size_t>(n.outputs[0])] = impl->root[static_cast<size_t>(n.inputs[0])];
      impl->view_bytes[static_cast<size_t>(n.outputs[0])] = impl->view_bytes[static_cast<size_t>(n.inputs[0])];
      continue;
    }
    if (n.op == "Concat" && ConcatIntoViews(g, n, is_input, &impl->root, &impl->view_bytes)) continue;
    if (SplitIsView(g, n, impl->root)) {  // each part a range of the input (ShuffleNet's channel split)
      const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(n.inputs[0])].shape;
      const size_t axis = static_cast<size_t>(NormalizedAxis(n, shape));
      int64_t at = 0;
      for (int out : n.outputs) {
        impl->root[static_cast<size_t>(out)] = impl->root[static_cast<size_t>(n.inputs[0])];
        impl->view_bytes[static_cast<size_t>(out)] =
            impl->view_bytes[static_cast<size_t>(n.inputs[0])] + at * Product(shape, axis + 1) * 4;
        at += g.tensors[static_cast<size_t>(out)].shape[axis];
      }
      continue;
    }
    ASSIGN_OR_RETURN(NodeKernel k, GenerateNodeKernel(g, node, lanes));
    planned.push_back(FromNodeKernel(std::move(k), n.op));
    planned.back().node = node;
  }

  impl->dropped_steps = DropUnreadSteps(g, impl->root, &planned);
  FuseMaxPools(g, consumers, is_output, &planned);
  for (PlannedStep& p : planned) p.borrow.resize(p.func.params.size(), {-1, ""});
  ASSIGN_OR_RETURN(impl->cancelled_pairs, PropagateBlockedLayouts(g, target, consumers, is_output, &planned,
                                                                  &impl->blocked_residuals, &impl->direct_writes));
  impl->cancelled_pairs += HandOverConcats(g, consumers, is_output, impl->root, &planned);
  ASSIGN_OR_RETURN(impl->quantized_handovers, HandOverQuantizedOutputs(g, target, consumers, is_output, &planned));

  const ArenaPlan plan = PlanArena(g, impl->root, planned);
  impl->offset = plan.tensor_offset;
  impl->arena_bytes = plan.arena_bytes;
  impl->unplanned_bytes = plan.unplanned_bytes;
  impl->arena = Allocate(impl->arena_bytes / 4);

  ASSIGN_OR_RETURN(auto built, BuildAll(planned, options.run_on ? *options.run_on : target,
                                        std::max(1, target.num_threads)));
  // Memory the steps own (scratch, packed weights, computed constants), before any
  // step binds it: a step may use another's (PropagateBlockedLayouts).
  std::vector<std::map<std::string, float*>> owned_by(planned.size());
  for (size_t s = 0; s < planned.size(); ++s) {
    PlannedStep& p = planned[s];
    for (size_t i = 0; i < p.func.params.size(); ++i) {
      if (p.tensors[i] >= 0 || p.borrow[i].first >= 0) continue;
      auto planned_at = plan.transient.find({s, p.func.params[i].name});
      if (planned_at != plan.transient.end()) {
        owned_by[s][p.func.params[i].name] =
            reinterpret_cast<float*>(reinterpret_cast<char*>(impl->arena.get()) + planned_at->second.first);
        impl->transient_bytes += planned_at->second.second;
        continue;
      }
      AlignedBuffer b = Allocate(p.owned_elements[i]);
      impl->buffer_bytes[b.get()] = AlignUp(std::max<int64_t>(p.owned_elements[i], 1) * 4);
      if (!p.owned_data[i].empty()) {
        std::memcpy(b.get(), p.owned_data[i].data(), p.owned_data[i].size() * 4);
      } else {
        impl->scratch_bytes += AlignUp(p.owned_elements[i] * 4);
      }
      owned_by[s][p.func.params[i].name] = b.get();
      impl->owned.push_back(std::move(b));
    }
  }
  std::map<std::string, runtime::LoadedModule*> loaded;
  std::map<std::string, size_t> kernel_index;
  for (size_t s = 0; s < planned.size(); ++s) {
    PlannedStep& p = planned[s];
    runtime::LoadedModule*& module = loaded[p.func.name];
    if (!module) {
      const Artifact& a = built.at(p.func.name);
      std::string error;
      std::unique_ptr<runtime::LoadedModule> m = runtime::LoadedModule::Load(a.shared_object, a.entry_symbol, &error);
      if (!m) return absl::InternalError("loading " + p.func.name + ": " + error);
      module = m.get();
      impl->modules.push_back(std::move(m));
      kernel_index[p.func.name] = impl->kernels.size();
      impl->kernels.push_back({p.func.name, p.source, 0});
      impl->funcs.push_back(p.func);
    }
    ++impl->kernels[kernel_index[p.func.name]].calls;
    Impl::Step step;
    step.module = module;
    step.name = p.func.name;
    step.source = p.source;
    step.kernel = static_cast<int>(kernel_index[p.func.name]);
    for (size_t i = 0; i < p.func.params.size(); ++i) {
      if (p.tensors[i] >= 0) {
        const Tensor& t = g.tensors[static_cast<size_t>(p.tensors[i])];
        if (t.dtype == DType::kInt64 && t.constant && t.f32.size() != t.i64.size()) {
          return absl::UnimplementedError(absl::StrCat("kernel ", p.source, " reads int64 constant '", t.name,
                                                       "' whose values exceed +-", kMaxRunTimeInt,
                                                       " (run-time int64 values are whole numbers in float32)"));
        }
        step.buffers.push_back(impl->Pointer(p.tensors[i]));
        const Tensor& root = g.tensors[static_cast<size_t>(impl->root[static_cast<size_t>(p.tensors[i])])];
        if (root.constant) impl->buffer_bytes[step.buffers.back()] = root.NumElements() * 4;
        continue;
      }
      if (p.borrow[i].first >= 0) {
        step.buffers.push_back(owned_by[static_cast<size_t>(p.borrow[i].first)].at(p.borrow[i].second));
        continue;
      }
      step.buffers.push_back(owned_by[s].at(p.func.params[i].name));
    }
    // What is left of a prepack reads only constants (SplitLayoutTransforms moved the
    // rest, and the unpack, into the kernel): it runs once, here.
    if (module->has_unpack()) return absl::InternalError(p.func.name + " kept an unpack entry");
    if (module->Prepack(step.buffers.data()) != 0) {
      return absl::InternalError("prepack of " + p.func.name + " failed");
    }
    impl->steps.push_back(std::move(step));
  }
  impl->compile_seconds = SecondsSince(start);
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::StatusOr<ExportedModel> Executor::Export() const {
  const Impl& m = *impl_;
  for (const std::vector<TensorInfo>* ends : {&m.inputs, &m.outputs}) {
    for (const TensorInfo& t : *ends) {
      if (t.dtype != DType::kFloat32) {
        // The library's entry points take float32 arrays; an int64 one would need its
        // own entry (and the range checks Run makes).
        return absl::UnimplementedError(absl::StrCat("the model's ", ends == &m.inputs ? "input" : "output", " '",
                                                     t.name, "' is int64; a deployed library takes and gives "
                                                     "float32 only (run it with `model run`)"));
      }
    }
  }
  ExportedModel out;
  out.kernels = m.funcs;
  out.arena_bytes = m.arena_bytes;
  const char* arena = reinterpret_cast<const char*>(m.arena.get());
  std::map<const void*, int64_t> in_blob;  // buffer -> its offset in the blob
  // `constant_bytes`: the size of a constant the steps do not read (an output).
  auto where = [&](const void* p, int64_t constant_bytes = 0) -> absl::StatusOr<ExportedArg> {
    ExportedArg a;
    if (!p) return a;
    const char* c = static_cast<const char*>(p);
    if (c >= arena && c < arena + m.arena_bytes) {
      a.kind = ExportedArg::kArena;
      a.offset = c - arena;
      return a;
    }
    auto bytes = m.buffer_bytes.find(p);
    if (bytes == m.buffer_bytes.end() && constant_bytes == 0) {
      return absl::InternalError("a step argument of unknown size");
    }
    auto [it, inserted] = in_blob.emplace(p, static_cast<int64_t>(out.blob.size()));
    if (inserted) {
      out.blob.append(c, static_cast<size_t>(bytes != m.buffer_bytes.end() ? bytes->second : constant_bytes));
      out.blob.resize(static_cast<size_t>(AlignUp(static_cast<int64_t>(out.blob.size()))), '\0');
    }
    a.kind = ExportedArg::kBlob;
    a.offset = it->second;
    return a;
  };
  for (const Impl::Step& s : m.steps) {
    ExportedStep e;
    e.kernel = s.kernel;
    e.source = s.source;
    for (void* b : s.buffers) {
      ASSIGN_OR_RETURN(ExportedArg a, where(b));
      e.args.push_back(a);
    }
    out.steps.push_back(std::move(e));
  }
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    float* p = m.Pointer(m.input_ids[i]);
    ASSIGN_OR_RETURN(ExportedArg a, where(p));
    out.inputs.push_back({m.inputs[i].name, m.inputs[i].shape, a});
  }
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    float* p = m.Pointer(m.output_ids[i]);
    if (m.outputs[i].NumElements() == 0) {  // an empty output: nothing to copy (kNull)
      out.outputs.push_back({m.outputs[i].name, m.outputs[i].shape, ExportedArg{}});
      continue;
    }
    if (!p) return absl::InternalError("output " + m.outputs[i].name + " is never computed");
    const Tensor& root = m.graph.tensors[static_cast<size_t>(m.root[static_cast<size_t>(m.output_ids[i])])];
    ASSIGN_OR_RETURN(ExportedArg a, where(p, root.constant ? root.NumElements() * 4 : 0));
    out.outputs.push_back({m.outputs[i].name, m.outputs[i].shape, a});
  }
  return out;
}

std::pair<int, int> Executor::thread_shortfall() const {
  return {impl_->shortfall_asked, impl_->shortfall_got};
}

std::vector<std::string> Executor::steps() const {
  std::vector<std::string> out;
  for (const Impl::Step& s : impl_->steps) out.push_back(s.source);
  return out;
}

absl::Status Executor::Run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs) {
  return RunProfiled(inputs, outputs, nullptr);
}

absl::Status Executor::RunProfiled(const std::vector<const float*>& inputs, const std::vector<float*>& outputs,
                                   std::vector<double>* step_ms) {
  Impl& m = *impl_;
  if (step_ms) step_ms->resize(m.steps.size(), 0.0);
  if (inputs.size() != m.inputs.size() || outputs.size() != m.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the model takes ", m.inputs.size(), " inputs and ",
                                                   m.outputs.size(), " outputs"));
  }
  if (m.poison_arena) {
    float* arena = m.arena.get();
    std::fill(arena, arena + m.arena_bytes / 4, std::numeric_limits<float>::quiet_NaN());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorInfo& info = m.inputs[i];
    if (info.dtype == DType::kInt64) {
      const int64_t lo = info.index_bound > 0 ? -info.index_bound : -kMaxRunTimeInt;
      const int64_t hi = info.index_bound > 0 ? info.index_bound - 1 : kMaxRunTimeInt;
      for (int64_t k = 0; k < info.NumElements(); ++k) {
        const float v = inputs[i][k];
        if (!(v >= static_cast<float>(lo) && v <= static_cast<float>(hi)) || v != std::floor(v)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "int64 input ", info.name, " element ", k, " is ", v, "; it must be a whole number in [", lo, ", ",
              hi, "]", info.index_bound > 0 ? " (it indexes a Gather)" : ""));
        }
      }
    }
    if (float* to = m.Pointer(m.input_ids[i])) {
      std::memcpy(to, inputs[i], static_cast<size_t>(m.inputs[i].NumElements()) * 4);
    }
  }
  (void)tf_take_thread_shortfall(nullptr);  // only this run's loops count
  for (size_t s = 0; s < m.steps.size(); ++s) {
    Impl::Step& step = m.steps[s];
    void** b = step.buffers.data();
    const auto start = step_ms ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (step.module->Run(b) != 0) {
      return absl::InternalError("kernel " + step.name + " failed");
    }
    if (step_ms) {
      (*step_ms)[s] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
  }
  int32_t got = 0;
  if (const int32_t asked = tf_take_thread_shortfall(&got); asked > 0 && asked - got > m.shortfall_asked - m.shortfall_got) {
    m.shortfall_asked = asked;
    m.shortfall_got = got;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (m.outputs[i].NumElements() == 0) continue;  // an empty output has no values
    const float* from = m.Pointer(m.output_ids[i]);
    if (!from) return absl::InternalError("output " + m.outputs[i].name + " was never computed");
    std::memcpy(outputs[i], from, static_cast<size_t>(m.outputs[i].NumElements()) * 4);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Executor::TimeStepHot(size_t s, int reps) {
  Impl& m = *impl_;
  if (s >= m.steps.size() || reps < 1) return absl::InvalidArgumentError(absl::StrCat("no step ", s));
  Impl::Step& step = m.steps[s];
  std::vector<double> ms;
  for (int i = 0; i < reps + 1; ++i) {  // the first run warms the cache
    const auto start = std::chrono::steady_clock::now();
    if (step.module->Run(step.buffers.data()) != 0) return absl::InternalError("kernel " + step.name + " failed");
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

RunBuffers SeededRunBuffers(const Executor& exec, uint32_t seed) {
  RunBuffers b;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const TensorInfo& t : exec.inputs()) {
    b.inputs.emplace_back(static_cast<size_t>(t.NumElements()));
    // int64 inputs: valid indices where they index a Gather (token ids), else 1 (an
    // attention mask that keeps everything).
    std::uniform_int_distribution<int64_t> index(0, std::max<int64_t>(t.index_bound - 1, 0));
    for (float& v : b.inputs.back()) {
      v = t.dtype != DType::kInt64 ? dist(rng) : t.index_bound > 0 ? static_cast<float>(index(rng)) : 1.0f;
    }
    b.input_ptrs.push_back(b.inputs.back().data());
  }
  for (const TensorInfo& t : exec.outputs()) {
    b.outputs.emplace_back(static_cast<size_t>(t.NumElements()));
    b.output_ptrs.push_back(b.outputs.back().data());
  }
  return b;
}

// ---- .npy ----

absl::Status WriteNpy(const std::string& path, const std::vector<int64_t>& shape,
                      const std::vector<float>& data, DType dtype) {
  std::string dims;
  for (int64_t d : shape) absl::StrAppend(&dims, d, ",");
  if (shape.size() > 1) dims.pop_back();
  const bool ints = dtype == DType::kInt64;
  std::string header = absl::StrCat("{'descr': '", ints ? "<i8" : "<f4", "', 'fortran_order': False, 'shape': (",
                                    dims, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n', a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::PermissionDeniedError("cannot write " + path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (ints) {
    const std::vector<int64_t> values(data.begin(), data.end());
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 8));
  } else {
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  }
  if (!out) return absl::DataLossError("writing " + path + " failed");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadNpy(const std::string& path, std::vector<int64_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InvalidArgumentError(path + ": cannot be read (a directory?)");
  return ParseNpy(all, path, shape);
}

absl::StatusOr<std::vector<float>> ParseNpy(const std::string& all, const std::string& path,
                                            std::vector<int64_t>* shape) {
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(path + ": not a usable .npy file (" + why + ")"); };
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) return bad("no NumPy magic");
  const int major = static_cast<unsigned char>(all[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<unsigned char>(all[8]) | (static_cast<size_t>(static_cast<unsigned char>(all[9])) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (all.size() < 12) return bad("truncated");
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(all[8 + static_cast<size_t>(i)]);
    header_at = 12;
  } else {
    return bad("version " + std::to_string(major));
  }
  if (all.size() < header_at + header_len) return bad("truncated header");
  const std::string header = all.substr(header_at, header_len);
  // float32, or int64/int32 converted to float32 below.
  enum class Stored { kFloat32, kInt64, kInt32 };
  Stored stored;
  if (header.find("'descr': '<f4'") != std::string::npos || header.find("'descr': '|f4'") != std::string::npos) {
    stored = Stored::kFloat32;
  } else if (header.find("'descr': '<i8'") != std::string::npos) {
    stored = Stored::kInt64;
  } else if (header.find("'descr': '<i4'") != std::string::npos) {
    stored = Stored::kInt32;
  } else {
    return bad("dtype is not little-endian float32, int64 or int32: " + header);
  }
  const size_t width = stored == Stored::kInt64 ? 8 : 4;
  if (header.find("'fortran_order': False") == std::string::npos) return bad("Fortran order");
  const size_t open = header.find("'shape': (");
  const size_t close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return bad("no shape");
  shape->clear();
  std::stringstream dims(header.substr(open + 10, close - open - 10));
  std::string item;
  const size_t data_at = header_at + header_len;
  int64_t n = 1;
  bool too_big = false, zero = false;
  while (std::getline(dims, item, ',')) {
    item = std::string(absl::StripAsciiWhitespace(item));
    if (item.empty()) continue;
    int64_t d = 0;
    if (!absl::SimpleAtoi(item, &d) || d < 0) {
      return bad("shape dimension '" + item + "' is not a non-negative integer");
    }
    shape->push_back(d);
    // Checked as it grows, so the product cannot overflow (a 0 dimension anywhere
    // still makes the array empty).
    zero = zero || d == 0;
    too_big = too_big || (d > 0 && (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)));
  }
  if (too_big && !zero) {
    return bad(absl::StrCat("shape (", absl::StrJoin(*shape, ", "), ") needs more data than the file's ",
                            all.size() - data_at, " bytes"));
  }
  if (zero) n = 0;
  if (all.size() - data_at != static_cast<size_t>(n) * width) {
    return bad(absl::StrCat("shape (", absl::StrJoin(*shape, ", "), ") needs ", static_cast<size_t>(n) * width,
                            " bytes of data, file has ", all.size() - data_at));
  }
  std::vector<float> data(static_cast<size_t>(n));
  if (n == 0) return data;
  if (stored == Stored::kFloat32) {
    std::memcpy(data.data(), all.data() + data_at, static_cast<size_t>(n) * 4);
    return data;
  }
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    int64_t v = 0;
    if (stored == Stored::kInt64) {
      std::memcpy(&v, all.data() + data_at + i * 8, 8);
    } else {
      int32_t w = 0;
      std::memcpy(&w, all.data() + data_at + i * 4, 4);
      v = w;
    }
    if (v < -kMaxRunTimeInt || v > kMaxRunTimeInt) {
      return bad(absl::StrCat("element ", i, " is ", v, ", beyond the +-", kMaxRunTimeInt,
                              " integers are exact to at run time"));
    }
    data[i] = static_cast<float>(v);
  }
  return data;
}

}  // namespace tuneforge::graph
