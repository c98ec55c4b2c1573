// Builds small hand-written LoweredFuncs, loads the shared objects with dlopen and
// compares what they compute with plain C++ loops.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/codegen/ir_analysis.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/ir/interpreter.h"
#include "compiler/runtime/runtime.h"
#include "absl/strings/str_cat.h"

namespace tuneforge {
namespace {

using ir::Add;
using ir::Allocate;
using ir::And;
using ir::Block;
using ir::DType;
using ir::Expr;
using ir::FloatImm;
using ir::ForKind;
using ir::IfThenElse;
using ir::IntImm;
using ir::LT;
using ir::Mul;
using ir::Stmt;
using ir::Store;
using ir::Sub;
using ir::Var;

// A kernel loaded from an Artifact: the test's own minimal loader (the agent has the
// real one). The .so is written to a temporary file, dlopen'ed and the file removed.
class LoadedKernel {
 public:
  static std::unique_ptr<LoadedKernel> Load(const Artifact& artifact) {
    char path[] = "/tmp/tuneforge-codegen-test-XXXXXX.so";
    int fd = mkstemps(path, 3);
    if (fd < 0) return nullptr;
    bool written = write(fd, artifact.shared_object.data(), artifact.shared_object.size()) ==
                   static_cast<ssize_t>(artifact.shared_object.size());
    close(fd);
    void* handle = written ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!handle) ADD_FAILURE() << "dlopen failed: " << dlerror();
    unlink(path);
    if (!handle) return nullptr;
    auto entry =
        reinterpret_cast<runtime::KernelEntry>(dlsym(handle, artifact.entry_symbol.c_str()));
    if (!entry) {
      ADD_FAILURE() << "no symbol " << artifact.entry_symbol;
      dlclose(handle);
      return nullptr;
    }
    return std::unique_ptr<LoadedKernel>(new LoadedKernel(handle, entry));
  }
  ~LoadedKernel() { dlclose(handle_); }

  int32_t Run(std::vector<std::vector<float>*> buffers) {
    std::vector<void*> pointers;
    for (std::vector<float>* b : buffers) pointers.push_back(b->data());
    return entry_(pointers.data());
  }
  int32_t RunPointers(std::vector<void*> pointers) { return entry_(pointers.data()); }

 private:
  LoadedKernel(void* handle, runtime::KernelEntry entry) : handle_(handle), entry_(entry) {}
  void* handle_;
  runtime::KernelEntry entry_;
};

Target TestTarget(int threads = 4) {
  Target target = DetectHostTarget("test");
  target.num_threads = threads;
  return target;
}

ir::BufferParam Param(const std::string& name, int64_t size, bool is_output = false) {
  ir::BufferParam p;
  p.name = name;
  p.dtype = DType::kFloat32;
  p.shape = {size};
  p.is_output = is_output;
  return p;
}

Expr Ld(const std::string& buffer, Expr index) {
  return ir::Load(buffer, DType::kFloat32, std::move(index));
}

Stmt Loop(const std::string& var, int64_t extent, ForKind kind, Stmt body) {
  return ir::For(var, IntImm(extent), extent, kind, std::move(body));
}

std::vector<float> Random(int64_t n, int index) {
  std::vector<float> v(n);
  runtime::FillBuffer(42, index, v.data(), n);
  return v;
}

// Builds `func` for the host and runs it on `buffers`.
void BuildAndRun(const ir::LoweredFunc& func, std::vector<std::vector<float>*> buffers,
                 const Target& target = TestTarget()) {
  absl::StatusOr<Artifact> artifact = BuildArtifact(func, target);
  ASSERT_TRUE(artifact.ok()) << artifact.status() << "\n" << ir::ToString(func);
  EXPECT_EQ(artifact->entry_symbol, func.name);
  EXPECT_FALSE(artifact->hash.empty());
  std::unique_ptr<LoadedKernel> kernel = LoadedKernel::Load(*artifact);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->Run(std::move(buffers)), 0);
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                double tol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  int64_t bad = runtime::FirstMismatch(actual.data(), expected.data(), actual.size(), tol, tol);
  EXPECT_EQ(bad, -1) << "at " << bad << ": " << actual[bad] << " vs " << expected[bad];
}

TEST(CodegenTest, SerialLoopsWithDynamicExtent) {
  // C[i] = A[i] + 2 * B[i];  P[i] = sum_{j <= i} A[j]  (extent i + 1).
  const int64_t n = 37;
  ir::LoweredFunc f;
  f.name = "serial_kernel";
  f.params = {Param("A", n), Param("B", n), Param("C", n, true), Param("P", n, true)};
  Expr i = Var("i"), j = Var("j");
  f.body = Block({
      Loop("i", n, ForKind::kSerial,
           Store("C", i, Add(Ld("A", i), Mul(FloatImm(2.0), Ld("B", i))))),
      Loop("i", n, ForKind::kSerial,
           Block({Store("P", i, FloatImm(0.0)),
                  ir::For("j", Add(i, IntImm(1)), n, ForKind::kSerial,
                          Store("P", i, Add(Ld("P", i), Ld("A", j))))})),
  });
  std::vector<float> a = Random(n, 0), b = Random(n, 1), c(n), p(n);
  BuildAndRun(f, {&a, &b, &c, &p});
  std::vector<float> want_c(n), want_p(n);
  float sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    want_c[k] = std::fma(2.0f, b[k], a[k]);
    sum += a[k];
    want_p[k] = sum;
  }
  ExpectNear(c, want_c);
  ExpectNear(p, want_p);
}

TEST(CodegenTest, OptLevelZeroGivesTheSameResults) {
  const int64_t n = 16;
  ir::LoweredFunc f;
  f.name = "o0_kernel";
  f.params = {Param("A", n), Param("C", n, true)};
  Expr io = Var("io"), j = Var("j");
  Expr i = Add(Mul(io, IntImm(4)), j);
  f.body = Loop("io", n / 4, ForKind::kParallel,
                Loop("j", 4, ForKind::kVectorized, Store("C", i, Mul(Ld("A", i), Ld("A", i)))));
  BuildOptions options;
  options.opt_level = 0;
  absl::StatusOr<Artifact> artifact = BuildArtifact(f, TestTarget(), options);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  std::unique_ptr<LoadedKernel> kernel = LoadedKernel::Load(*artifact);
  ASSERT_NE(kernel, nullptr);
  std::vector<float> a = Random(n, 0), c(n), want(n);
  EXPECT_EQ(kernel->Run({&a, &c}), 0);
  for (int x = 0; x < n; ++x) want[x] = a[x] * a[x];
  ExpectNear(c, want, 0);
}

TEST(CodegenTest, LinearStrideAnalysis) {
  Expr i = Var("i"), j = Var("j");
  EXPECT_EQ(codegen::LinearStride(Add(Mul(i, IntImm(8)), j), "j"), 1);
  EXPECT_EQ(codegen::LinearStride(Add(Mul(i, IntImm(8)), j), "i"), 8);
  EXPECT_EQ(codegen::LinearStride(Sub(Mul(IntImm(3), Add(j, i)), j), "j"), 2);
  EXPECT_EQ(codegen::LinearStride(Mul(i, IntImm(8)), "j"), 0);
  EXPECT_EQ(codegen::LinearStride(ir::Mod(j, IntImm(3)), "j"), std::nullopt);
  EXPECT_EQ(codegen::LinearStride(Mul(i, j), "j"), std::nullopt);
  EXPECT_EQ(codegen::LinearStride(ir::Div(i, IntImm(2)), "j"), 0);
  EXPECT_TRUE(codegen::DependsOn(Add(IntImm(1), Mul(i, j)), "j"));
  EXPECT_FALSE(codegen::DependsOn(Add(IntImm(1), i), "j"));
}

TEST(CodegenTest, IntegerArithmetic) {
  // C[i] = A[(i / 3) * 3 + i % 3] + A[min(i, 5)] - A[max(i - 4, 0)].
  const int64_t n = 20;
  ir::LoweredFunc f;
  f.name = "int_kernel";
  f.params = {Param("A", n), Param("C", n, true)};
  Expr i = Var("i");
  Expr permuted = Add(Mul(ir::Div(i, IntImm(3)), IntImm(3)), ir::Mod(i, IntImm(3)));
  f.body = Loop("i", n, ForKind::kSerial,
                Store("C", i,
                      Sub(Add(Ld("A", permuted), Ld("A", ir::Min(i, IntImm(5)))),
                          Ld("A", ir::Max(Sub(i, IntImm(4)), IntImm(0))))));
  std::vector<float> a = Random(n, 0), c(n);
  BuildAndRun(f, {&a, &c});
  std::vector<float> want(n);
  for (int64_t k = 0; k < n; ++k) {
    want[k] = (a[k] + a[std::min<int64_t>(k, 5)]) - a[std::max<int64_t>(k - 4, 0)];
  }
  ExpectNear(c, want, 0);
}

TEST(CodegenTest, UnrolledLoopsConstantAndDynamic) {
  // Constant: C[i] = A[i] * A[i] for 8 unrolled i.
  // Dynamic: io in [0, 3), ii unrolled with extent min(4, 10 - 4 io): D[4 io + ii] = A + 1.
  ir::LoweredFunc f;
  f.name = "unroll_kernel";
  f.params = {Param("A", 10), Param("C", 8, true), Param("D", 10, true)};
  Expr i = Var("i"), io = Var("io"), ii = Var("ii");
  Expr flat = Add(Mul(io, IntImm(4)), ii);
  f.body = Block({
      Loop("i", 8, ForKind::kUnrolled, Store("C", i, Mul(Ld("A", i), Ld("A", i)))),
      Loop("io", 3, ForKind::kSerial,
           ir::For("ii", ir::Min(IntImm(4), Sub(IntImm(10), Mul(io, IntImm(4)))), 4,
                   ForKind::kUnrolled, Store("D", flat, Add(Ld("A", flat), FloatImm(1.0))))),
  });
  std::vector<float> a = Random(10, 0), c(8), d(10, -7.0f);
  BuildAndRun(f, {&a, &c, &d});
  std::vector<float> want_c(8), want_d(10);
  for (int k = 0; k < 8; ++k) want_c[k] = a[k] * a[k];
  for (int k = 0; k < 10; ++k) want_d[k] = a[k] + 1.0f;
  ExpectNear(c, want_c, 0);
  ExpectNear(d, want_d, 0);
}

// LLVM unrolls a kernel's serial loop only when its body is small (docs/kernels.md,
// "Build time"): four iterations of 8 stores are unrolled away, four iterations of 32
// stay a loop marked unroll.disable, and a layout transform's loops (prepack) stay
// loops however small. Checked on the optimised IR: a loop left has !llvm.loop on
// its latch.
TEST(CodegenTest, LlvmUnrollsOnlySmallKernelLoops) {
  auto kernel = [](int64_t stores, bool with_prepack) {
    ir::LoweredFunc f;
    f.name = "unroll_policy_" + std::to_string(stores);
    f.params = {Param("A", 4 * stores), Param("C", 4 * stores, true)};
    Expr i = Var("i"), j = Var("j");
    Expr flat = Add(Mul(i, IntImm(stores)), j);
    Stmt nest = Loop("i", 4, ForKind::kSerial,
                     Loop("j", stores, ForKind::kUnrolled,
                          Store("C", flat, Mul(Ld("A", flat), FloatImm(3.0)))));
    if (with_prepack) {
      f.prepack = nest;
      f.body = Loop("k", 4 * stores, ForKind::kSerial, Store("C", Var("k"), FloatImm(0.0)));
    } else {
      f.body = nest;
    }
    return f;
  };
  auto loops = [](const ir::LoweredFunc& f) {
    absl::StatusOr<std::string> text = codegen::CompileToLlvmIr(f, TestTarget(), BuildOptions{});
    EXPECT_TRUE(text.ok()) << text.status();
    int count = 0;
    for (size_t at = text->find("!llvm.loop !"); at != std::string::npos;
         at = text->find("!llvm.loop !", at + 1))
      ++count;
    return std::make_pair(count, text->find("llvm.loop.unroll.disable") != std::string::npos);
  };
  EXPECT_EQ(loops(kernel(8, false)), std::make_pair(0, false));
  EXPECT_EQ(loops(kernel(32, false)), std::make_pair(1, true));
  // The prepack's 8-store loop stays; the kernel's memset-like loop may become a call.
  auto [prepack_loops, disabled] = loops(kernel(8, true));
  EXPECT_GE(prepack_loops, 1);
  EXPECT_TRUE(disabled);

  // And what runs is unchanged: the big-bodied loop computes C = 3 A.
  ir::LoweredFunc big = kernel(32, false);
  std::vector<float> a = Random(128, 0), c(128);
  BuildAndRun(big, {&a, &c});
  std::vector<float> want(128);
  for (int k = 0; k < 128; ++k) want[k] = 3.0f * a[k];
  ExpectNear(c, want, 0);
}

TEST(CodegenTest, VectorizedStrides) {
  // For i in [0, 4), j vectorized over 8 lanes:
  //   C[8i + j] = max(A[8i + j] * B[j], 0)      stride 1 loads and store, float max
  //   D[8i + j] = A[i]                          stride 0 load, broadcast
  //   E[8i + j] = A[2j + i] - B[j % 3]          stride 2 and non-linear gathers
  //   T[4j + i] = A[8i + j]                     stride 4 scatter (transpose)
  //   L[i] = A[8i + j]                          stride 0 store: the last lane wins
  ir::LoweredFunc f;
  f.name = "vector_kernel";
  f.params = {Param("A", 32),       Param("B", 8),        Param("C", 32, true),
              Param("D", 32, true), Param("E", 32, true), Param("T", 32, true),
              Param("L", 4, true)};
  Expr i = Var("i"), j = Var("j");
  Expr row = Add(Mul(i, IntImm(8)), j);
  Stmt body = Block({
      Store("C", row, ir::Max(Mul(Ld("A", row), Ld("B", j)), FloatImm(0.0))),
      Store("D", row, Ld("A", i)),
      Store("E", row, Sub(Ld("A", Add(Mul(j, IntImm(2)), i)), Ld("B", ir::Mod(j, IntImm(3))))),
      Store("T", Add(Mul(j, IntImm(4)), i), Ld("A", row)),
      Store("L", i, Ld("A", row)),
  });
  f.body = Loop("i", 4, ForKind::kSerial, Loop("j", 8, ForKind::kVectorized, body));
  std::vector<float> a = Random(32, 0), b = Random(8, 1), c(32), d(32), e(32), t(32), l(4);
  BuildAndRun(f, {&a, &b, &c, &d, &e, &t, &l});
  std::vector<float> wc(32), wd(32), we(32), wt(32), wl(4);
  for (int x = 0; x < 4; ++x) {
    for (int y = 0; y < 8; ++y) {
      wc[8 * x + y] = std::max(a[8 * x + y] * b[y], 0.0f);
      wd[8 * x + y] = a[x];
      we[8 * x + y] = a[2 * y + x] - b[y % 3];
      wt[4 * y + x] = a[8 * x + y];
      wl[x] = a[8 * x + y];
    }
  }
  ExpectNear(c, wc, 0);
  ExpectNear(d, wd, 0);
  ExpectNear(e, we, 0);
  ExpectNear(t, wt, 0);
  ExpectNear(l, wl, 0);
}

TEST(CodegenTest, SelectOnFloatComparisons) {
  // C[j] = A[j] < B[j] ? A[j] : inf / 0, D[j] = A[j] == 1 ? 2 : B[j]: vectorized (8
  // lanes, a scalar condition operand splat) and scalar. The branch not taken is
  // infinite or NaN and must not leak into the result, as a 0/1 product would.
  for (ForKind kind : {ForKind::kVectorized, ForKind::kSerial}) {
    ir::LoweredFunc f;
    f.name = kind == ForKind::kSerial ? "select_scalar" : "select_vector";
    f.params = {Param("A", 8), Param("B", 8), Param("C", 8, true), Param("D", 8, true)};
    Expr j = Var("j");
    Stmt body = Block({
        Store("C", j, ir::Select(ir::LT(Ld("A", j), Ld("B", j)), Ld("A", j), FloatImm(INFINITY))),
        Store("D", j, ir::Select(ir::EQ(Ld("A", j), FloatImm(1.0)), FloatImm(2.0), ir::Div(Ld("B", j), FloatImm(0.0)))),
    });
    f.body = Loop("j", 8, kind, body);
    std::vector<float> a = {0, 1, 2, 3, NAN, 1, -1, 5}, b = {1, 1, 1, 4, 0, 2, -2, 6}, c(8), d(8);
    BuildAndRun(f, {&a, &b, &c, &d});
    for (size_t k = 0; k < 8; ++k) {
      const float want_c = a[k] < b[k] ? a[k] : INFINITY;
      EXPECT_EQ(c[k], want_c) << f.name << " lane " << k;
      if (a[k] == 1.0f) {
        EXPECT_EQ(d[k], 2.0f) << f.name << " lane " << k;
      } else {
        EXPECT_EQ(std::isnan(d[k]), b[k] == 0.0f) << f.name << " lane " << k;
        if (b[k] != 0.0f) {
          EXPECT_EQ(d[k], b[k] > 0 ? INFINITY : -INFINITY) << f.name << " lane " << k;
        }
      }
    }
  }
}

TEST(CodegenTest, VectorizedBodyWithLoopsIfsAndScalarFallback) {
  // j vectorized (16 lanes) around a serial k loop and an if on a scalar condition:
  //   C[j] = sum_k A[16k + j];  if (K > 2) C[j] = C[j] + 1.
  // A second vectorized loop whose body allocates must be scalarised:
  //   for v vectorized 4: allocate t[1] { t[0] = B[v] * 2; D[v] = t[0] + B[v] }.
  const int64_t k_extent = 5;
  ir::LoweredFunc f;
  f.name = "vector_control_kernel";
  f.params = {Param("A", 16 * k_extent), Param("B", 4), Param("C", 16, true), Param("D", 4, true)};
  Expr j = Var("j"), k = Var("k"), v = Var("v");
  f.body = Block({
      Loop("j", 16, ForKind::kVectorized,
           Block({Store("C", j, FloatImm(0.0)),
                  Loop("k", k_extent, ForKind::kSerial,
                       Store("C", j, Add(Ld("C", j), Ld("A", Add(Mul(k, IntImm(16)), j))))),
                  IfThenElse(LT(IntImm(2), IntImm(k_extent)),
                             Store("C", j, Add(Ld("C", j), FloatImm(1.0))))})),
      Loop("v", 4, ForKind::kVectorized,
           Allocate("t", DType::kFloat32, 1,
                    Block({Store("t", IntImm(0), Mul(Ld("B", v), FloatImm(2.0))),
                           Store("D", v, Add(Ld("t", IntImm(0)), Ld("B", v)))}))),
  });
  std::vector<float> a = Random(16 * k_extent, 0), b = Random(4, 1), c(16), d(4);
  BuildAndRun(f, {&a, &b, &c, &d});
  std::vector<float> wc(16), wd(4);
  for (int x = 0; x < 16; ++x) {
    float s = 0;
    for (int y = 0; y < k_extent; ++y) s += a[16 * y + x];
    wc[x] = s + 1.0f;
  }
  for (int x = 0; x < 4; ++x) wd[x] = b[x] * 2.0f + b[x];
  ExpectNear(c, wc, 1e-6);
  ExpectNear(d, wd, 1e-6);
}

TEST(CodegenTest, LocalAccumulatorTile) {
  // Row sums, four rows at a time, accumulated in a local buffer:
  //   for io: allocate acc[4] { for ii unrolled: acc[ii] = 0;
  //     for k: for ii unrolled: acc[ii] += A[(4io + ii) K + k];
  //     for ii unrolled: C[4io + ii] = acc[ii] }
  const int64_t rows = 12, cols = 33;
  ir::LoweredFunc f;
  f.name = "accumulate_kernel";
  f.params = {Param("A", rows * cols), Param("C", rows, true)};
  Expr io = Var("io"), ii = Var("ii"), k = Var("k");
  Expr row = Add(Mul(io, IntImm(4)), ii);
  f.body = Loop(
      "io", rows / 4, ForKind::kSerial,
      Allocate(
          "acc", DType::kFloat32, 4,
          Block({Loop("ii", 4, ForKind::kUnrolled, Store("acc", ii, FloatImm(0.0))),
                 Loop("k", cols, ForKind::kSerial,
                      Loop("ii", 4, ForKind::kUnrolled,
                           Store("acc", ii,
                                 Add(Ld("acc", ii), Ld("A", Add(Mul(row, IntImm(cols)), k)))))),
                 Loop("ii", 4, ForKind::kUnrolled, Store("C", row, Ld("acc", ii)))})));
  std::vector<float> a = Random(rows * cols, 0), c(rows);
  BuildAndRun(f, {&a, &c});
  std::vector<float> want(rows);
  for (int r = 0; r < rows; ++r) {
    float s = 0;
    for (int x = 0; x < cols; ++x) s += a[r * cols + x];
    want[r] = s;
  }
  ExpectNear(c, want, 0);
}

TEST(CodegenTest, IfThenElse) {
  // C[i] = (i < 5 && 2 < i) ? A[i] : -A[i];  D[i] = A[i] only where i < 3.
  const int64_t n = 10;
  ir::LoweredFunc f;
  f.name = "if_kernel";
  f.params = {Param("A", n), Param("C", n, true), Param("D", n, true)};
  Expr i = Var("i");
  f.body =
      Loop("i", n, ForKind::kSerial,
           Block({IfThenElse(And(LT(i, IntImm(5)), LT(IntImm(2), i)), Store("C", i, Ld("A", i)),
                             Store("C", i, Sub(FloatImm(0.0), Ld("A", i)))),
                  IfThenElse(ir::LE(i, IntImm(2)), Store("D", i, Ld("A", i)))}));
  std::vector<float> a = Random(n, 0), c(n), d(n, 9.0f);
  BuildAndRun(f, {&a, &c, &d});
  std::vector<float> wc(n), wd(n, 9.0f);
  for (int x = 0; x < n; ++x) {
    wc[x] = (x < 5 && 2 < x) ? a[x] : 0.0f - a[x];
    if (x <= 2) wd[x] = a[x];
  }
  ExpectNear(c, wc, 0);
  ExpectNear(d, wd, 0);
}

TEST(CodegenTest, ParallelLoopWithCapturedVariables) {
  // for t in [0, 3): for i parallel, extent 20 + 10 t (captures t, A, B, C):
  //   allocate tmp[8] { for v vectorized 8: tmp[v] = A[64 t + i] * B[v];
  //                     for p parallel 2 (nested: runs serially):
  //                       C[64 t + i] += tmp[4p] + tmp[4p + 3] }
  ir::LoweredFunc f;
  f.name = "parallel_kernel";
  f.params = {Param("A", 192), Param("B", 8), Param("C", 192, true)};
  Expr t = Var("t"), i = Var("i"), v = Var("v"), p = Var("p");
  Expr at = Add(Mul(t, IntImm(64)), i);
  Stmt inner = Allocate(
      "tmp", DType::kFloat32, 8,
      Block({Loop("v", 8, ForKind::kVectorized, Store("tmp", v, Mul(Ld("A", at), Ld("B", v)))),
             Loop("p", 2, ForKind::kParallel,
                  Store("C", at,
                        Add(Ld("C", at), Add(Ld("tmp", Mul(p, IntImm(4))),
                                             Ld("tmp", Add(Mul(p, IntImm(4)), IntImm(3)))))))}));
  f.body = Loop("t", 3, ForKind::kSerial,
                ir::For("i", Add(IntImm(20), Mul(t, IntImm(10))), 40, ForKind::kParallel, inner));
  std::vector<float> a = Random(192, 0), b = Random(8, 1), c(192, 0.5f);
  BuildAndRun(f, {&a, &b, &c});
  std::vector<float> want(192, 0.5f);
  for (int x = 0; x < 3; ++x) {
    for (int y = 0; y < 20 + 10 * x; ++y) {
      float av = a[64 * x + y];
      for (int q = 0; q < 2; ++q) want[64 * x + y] += av * b[4 * q] + av * b[4 * q + 3];
    }
  }
  ExpectNear(c, want, 1e-6);
}

TEST(CodegenTest, FusedMultiplyAdd) {
  // C[i] = A[i] * B[i] + C[i];  D[i] = A[i] * B[i] - 1;  E[i] = 1 - A[i] * B[i].
  const int64_t n = 64;
  ir::LoweredFunc f;
  f.name = "fma_kernel";
  f.params = {Param("A", n), Param("B", n), Param("C", n, true), Param("D", n, true),
              Param("E", n, true)};
  Expr io = Var("io"), j = Var("j");
  Expr i = Add(Mul(io, IntImm(8)), j);
  Expr ab = Mul(Ld("A", i), Ld("B", i));
  f.body =
      Loop("io", n / 8, ForKind::kSerial,
           Loop("j", 8, ForKind::kVectorized,
                Block({Store("C", i, Add(ab, Ld("C", i))), Store("D", i, Sub(ab, FloatImm(1.0))),
                       Store("E", i, Sub(FloatImm(1.0), ab))})));
  std::vector<float> a = Random(n, 0), b = Random(n, 1), c = Random(n, 2), d(n), e(n);
  const std::vector<float> c0 = c;
  std::vector<float> wc(n), wd(n), we(n);
  for (int x = 0; x < n; ++x) {
    wc[x] = a[x] * b[x] + c[x];
    wd[x] = a[x] * b[x] - 1.0f;
    we[x] = 1.0f - a[x] * b[x];
  }
  BuildAndRun(f, {&a, &b, &c, &d, &e});
  ExpectNear(c, wc, 1e-6);
  ExpectNear(d, wd, 1e-6);
  ExpectNear(e, we, 1e-6);
  if (TestTarget().HasFeature("fma")) {
    // With FMA hardware the contraction is a single rounding.
    for (int x = 0; x < n; ++x) EXPECT_EQ(c[x], std::fma(a[x], b[x], c0[x])) << x;
  }
}

// C[M x N] = A[M x K] * B[K x N], tiled 4 x 16 with accumulators in registers:
//   for io parallel M/4: for jo N/16: allocate acc[4 * 16] {
//     for ii unrolled 4: for jj vectorized 16: acc[16 ii + jj] = 0
//     for k: for ii unrolled 4: for jj vectorized 16:
//       acc[16 ii + jj] = acc[16 ii + jj] + A[(4 io + ii) K + k] * B[k N + 16 jo + jj]
//     for ii unrolled 4: for jj vectorized 16: C[(4 io + ii) N + 16 jo + jj] = acc[...] }
ir::LoweredFunc TiledMatmul(int64_t m, int64_t n, int64_t k_extent) {
  ir::LoweredFunc f;
  f.name = "matmul_tiled";
  f.params = {Param("A", m * k_extent), Param("B", k_extent * n), Param("C", m * n, true)};
  Expr io = Var("io"), jo = Var("jo"), ii = Var("ii"), jj = Var("jj"), k = Var("k");
  Expr acc_index = Add(Mul(ii, IntImm(16)), jj);
  Expr row = Add(Mul(io, IntImm(4)), ii);
  Expr col = Add(Mul(jo, IntImm(16)), jj);
  auto tile = [&](Stmt body) {
    return Loop("ii", 4, ForKind::kUnrolled, Loop("jj", 16, ForKind::kVectorized, body));
  };
  Stmt update = Store("acc", acc_index,
                      Add(Ld("acc", acc_index), Mul(Ld("A", Add(Mul(row, IntImm(k_extent)), k)),
                                                    Ld("B", Add(Mul(k, IntImm(n)), col)))));
  f.body = Loop(
      "io", m / 4, ForKind::kParallel,
      Loop("jo", n / 16, ForKind::kSerial,
           Allocate(
               "acc", DType::kFloat32, 64,
               Block({tile(Store("acc", acc_index, FloatImm(0.0))),
                      Loop("k", k_extent, ForKind::kSerial, tile(update)),
                      tile(Store("C", Add(Mul(row, IntImm(n)), col), Ld("acc", acc_index)))}))));
  return f;
}

// Build time is printed for the record, not asserted (bench kernels reports it).
TEST(CodegenTest, TiledMatmulBuildsAndIsCorrect) {
  const int64_t m = 64, n = 64, k = 64;
  ir::LoweredFunc f = TiledMatmul(m, n, k);
  const Target target = TestTarget();
  std::vector<double> seconds;
  Artifact artifact;
  for (int rep = 0; rep < 5; ++rep) {
    absl::StatusOr<Artifact> built = BuildArtifact(f, target);
    ASSERT_TRUE(built.ok()) << built.status();
    seconds.push_back(built->build_seconds);
    artifact = *std::move(built);
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("tiled matmul build: median %.1f ms, min %.1f ms, max %.1f ms\n", seconds[2] * 1e3,
              seconds[0] * 1e3, seconds[4] * 1e3);

  std::unique_ptr<LoadedKernel> kernel = LoadedKernel::Load(artifact);
  ASSERT_NE(kernel, nullptr);
  std::vector<float> a = Random(m * k, 0), b = Random(k * n, 1), c(m * n);
  EXPECT_EQ(kernel->Run({&a, &b, &c}), 0);
  std::vector<float> want(m * n, 0.0f);
  for (int64_t x = 0; x < m; ++x) {
    for (int64_t z = 0; z < k; ++z) {
      for (int64_t y = 0; y < n; ++y) want[x * n + y] += a[x * k + z] * b[z * n + y];
    }
  }
  ExpectNear(c, want, 1e-4);
}

TEST(CodegenTest, BuildsAreDeterministicAndThreadSafe) {
  ir::LoweredFunc f = TiledMatmul(32, 32, 16);
  std::vector<std::string> hashes(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<Artifact> built = BuildArtifact(f, TestTarget());
      hashes[t] = built.ok() ? built->hash : built.status().ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(hashes[t], hashes[0]);
  EXPECT_EQ(hashes[0].size(), 16u);
}

TEST(CodegenTest, MalformedIrIsAnError) {
  ir::LoweredFunc f;
  f.name = "bad_kernel";
  f.params = {Param("A", 4)};
  f.body = Loop("i", 4, ForKind::kSerial, Store("Nope", Var("i"), FloatImm(1.0)));
  absl::StatusOr<Artifact> built = BuildArtifact(f, TestTarget());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(built.status().message().find("Nope"), std::string::npos) << built.status();

  f.body = Loop("i", 4, ForKind::kSerial, Store("A", Var("q"), FloatImm(1.0)));
  built = BuildArtifact(f, TestTarget());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);

  f.body = Loop("i", 4, ForKind::kSerial, Store("A", Var("i"), Var("i")));
  built = BuildArtifact(f, TestTarget());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);

  f.params = {Param("A", 4), Param("A", 4)};
  f.body = Loop("i", 4, ForKind::kSerial, Store("A", Var("i"), FloatImm(1.0)));
  built = BuildArtifact(f, TestTarget());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  f.params = {Param("A", 4)};

  Target bad = TestTarget();
  bad.triple = "nonsense-unknown-none";
  f.body = Loop("i", 4, ForKind::kSerial, Store("A", Var("i"), FloatImm(1.0)));
  built = BuildArtifact(f, bad);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Quantized (int8) kernels: every path checked against the interpreter ----

// Seeded values for every param of `func` (u8 0..255, s8 -128..127, s32 -1000..1000,
// float32 as Random), run through the interpreter and through the kernel built for
// `target`; every output must be equal, bit for bit.
void ExpectKernelMatchesInterpreter(const ir::LoweredFunc& func, const Target& target) {
  ir::FloatBuffers floats;
  ir::IntBuffers ints;
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(state >> 33);
  };
  for (size_t p = 0; p < func.params.size(); ++p) {
    const ir::BufferParam& param = func.params[p];
    const int64_t n = param.NumElements();
    switch (param.dtype) {
      case DType::kFloat32: floats[param.name] = Random(n, static_cast<int>(p)); break;
      case DType::kUInt8:
        for (int64_t i = 0; i < n; ++i) ints[param.name].push_back(next() % 256);
        break;
      case DType::kInt8:
        for (int64_t i = 0; i < n; ++i) ints[param.name].push_back(next() % 256 - 128);
        break;
      default:
        for (int64_t i = 0; i < n; ++i) ints[param.name].push_back(next() % 2001 - 1000);
        break;
    }
  }
  // The kernel's own copies, in its element types.
  std::vector<std::vector<char>> memory;
  std::vector<void*> pointers;
  for (const ir::BufferParam& param : func.params) {
    const int64_t n = param.NumElements();
    memory.emplace_back(n * ir::DTypeBytes(param.dtype));
    char* data = memory.back().data();
    for (int64_t i = 0; i < n; ++i) {
      switch (param.dtype) {
        case DType::kFloat32: reinterpret_cast<float*>(data)[i] = floats[param.name][i]; break;
        case DType::kUInt8: reinterpret_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(ints[param.name][i]); break;
        case DType::kInt8: reinterpret_cast<int8_t*>(data)[i] = static_cast<int8_t>(ints[param.name][i]); break;
        default: reinterpret_cast<int32_t*>(data)[i] = static_cast<int32_t>(ints[param.name][i]); break;
      }
    }
    pointers.push_back(data);
  }
  absl::Status interpreted = ir::Interpret(func, &floats, &ints);
  ASSERT_TRUE(interpreted.ok()) << interpreted;
  absl::StatusOr<Artifact> artifact = BuildArtifact(func, target);
  ASSERT_TRUE(artifact.ok()) << artifact.status() << "\n" << ir::ToString(func);
  std::unique_ptr<LoadedKernel> kernel = LoadedKernel::Load(*artifact);
  ASSERT_NE(kernel, nullptr);
  ASSERT_EQ(kernel->RunPointers(pointers), 0);
  for (size_t p = 0; p < func.params.size(); ++p) {
    const ir::BufferParam& param = func.params[p];
    if (!param.is_output) continue;
    const char* data = memory[p].data();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < param.NumElements() && mismatches < 5; ++i) {
      double got = 0, want = 0;
      switch (param.dtype) {
        case DType::kFloat32:
          got = reinterpret_cast<const float*>(data)[i];
          want = floats[param.name][i];
          break;
        case DType::kUInt8: got = reinterpret_cast<const uint8_t*>(data)[i]; want = ints[param.name][i]; break;
        case DType::kInt8: got = reinterpret_cast<const int8_t*>(data)[i]; want = ints[param.name][i]; break;
        default: got = reinterpret_cast<const int32_t*>(data)[i]; want = ints[param.name][i]; break;
      }
      if (got != want) {
        ++mismatches;
        ADD_FAILURE() << func.name << " on " << target.cpu << " " << target.features << ": " << param.name
                      << "[" << i << "] = " << got << ", the interpreter gives " << want;
      }
    }
  }
}

// C (s32, m x n) = A (m x k) times B packed [k/4][n][4], then D (u8) = C requantized:
// u8(s32(f32(C) * 0.0005) + 100). The j loops are `kind` (vectorized: one vector of n
// lanes; A's word is broadcast and B's words are one load). With `by_rows`, the
// vectorized loop runs over i instead (n = 1 column at a time): A's words are gathered
// (stride k) and B's broadcast, and the stores scatter.
ir::LoweredFunc QuantizedMatmul(int64_t m, int64_t n, int64_t k, DType a_type, DType b_type,
                                ForKind kind, bool by_rows = false) {
  ir::LoweredFunc f;
  f.name = "qmm";
  f.params = {{"A", a_type, {m, k}}, {"B", b_type, {k / 4, n, 4}},
              {"C", DType::kInt32, {m, n}, true}, {"D", DType::kUInt8, {m, n}, true}};
  Expr i = Var("i"), j = Var("j"), q = Var("q");
  Expr c_index = Add(Mul(i, IntImm(n)), j);
  Expr c = ir::Load("C", DType::kInt32, c_index);
  Stmt zero = Store("C", c_index, ir::Cast(DType::kInt32, IntImm(0)));
  Stmt step = Store("C", c_index,
                    ir::Dot4(c, ir::Load("A", a_type, Add(Mul(i, IntImm(k)), Mul(q, IntImm(4)))),
                             ir::Load("B", b_type, Mul(Add(Mul(q, IntImm(n)), j), IntImm(4)))));
  Stmt requantize = Store(
      "D", c_index,
      ir::Cast(DType::kUInt8, Add(ir::Cast(DType::kInt32, Mul(ir::Cast(DType::kFloat32, c), FloatImm(0.0005))),
                                  ir::Cast(DType::kInt32, IntImm(100)))));
  if (by_rows) {
    auto rows = [&](Stmt body) { return Loop("i", m, kind, std::move(body)); };
    f.body = Loop("j", n, ForKind::kSerial,
                  Block({rows(zero), Loop("q", k / 4, ForKind::kSerial, rows(step)), rows(requantize)}));
    return f;
  }
  auto columns = [&](Stmt body) { return Loop("j", n, kind, std::move(body)); };
  f.body = Loop("i", m, ForKind::kSerial,
                Block({columns(zero), Loop("q", k / 4, ForKind::kSerial, columns(step)), columns(requantize)}));
  return f;
}

Target WithFeatures(Target target, const std::string& extra) {
  target.features += (target.features.empty() ? "" : ",") + extra;
  return target;
}

TEST(CodegenTest, QuantizedDotProductsMatchTheInterpreterOnEveryPath) {
  const Target host = TestTarget(1);
  // The host as it is (vpdpbusd where it has VNNI), and without any dot-product
  // instruction (the exact widening path every x86 CPU runs).
  const std::vector<Target> targets = {host, WithFeatures(host, "-avx512vnni,-avxvnni")};
  absl::StatusOr<std::string> host_ir = codegen::CompileToLlvmIr(
      QuantizedMatmul(2, 16, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized), host, BuildOptions{});
  ASSERT_TRUE(host_ir.ok()) << host_ir.status();
  EXPECT_EQ(host_ir->find("llvm.x86.avx512.vpdpbusd.512") != std::string::npos, host.HasFeature("avx512vnni"))
      << "host features " << host.features;
  std::printf("host %s: the 16-lane dot products %s vpdpbusd\n", host.cpu.c_str(),
              host.HasFeature("avx512vnni") ? "run" : "do not run (no AVX-512 VNNI here)");
  for (const Target& target : targets) {
    for (int64_t lanes : {16, 8, 4}) {
      SCOPED_TRACE(absl::StrCat(target.features.substr(target.features.size() > 40 ? target.features.size() - 40 : 0),
                                " lanes ", lanes));
      ExpectKernelMatchesInterpreter(
          QuantizedMatmul(3, lanes, 12, DType::kUInt8, DType::kInt8, ForKind::kVectorized), target);
      // s8 activations x u8 weights: the operands swap for the instruction.
      ExpectKernelMatchesInterpreter(
          QuantizedMatmul(2, lanes, 8, DType::kInt8, DType::kUInt8, ForKind::kVectorized), target);
      // s8 x s8 and u8 x u8: no instruction multiplies these; the exact path does.
      ExpectKernelMatchesInterpreter(
          QuantizedMatmul(2, lanes, 8, DType::kInt8, DType::kInt8, ForKind::kVectorized), target);
      ExpectKernelMatchesInterpreter(
          QuantizedMatmul(2, lanes, 8, DType::kUInt8, DType::kUInt8, ForKind::kVectorized), target);
      // Gathered activations, broadcast weights, scattered stores.
      ExpectKernelMatchesInterpreter(
          QuantizedMatmul(lanes, 3, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized, /*by_rows=*/true),
          target);
    }
    // Scalar code, and a vector width no instruction has.
    ExpectKernelMatchesInterpreter(QuantizedMatmul(3, 5, 8, DType::kUInt8, DType::kInt8, ForKind::kSerial), target);
    ExpectKernelMatchesInterpreter(QuantizedMatmul(2, 6, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized), target);
  }
}

// C = A x B (u8 x s8 -> s32) through MatrixDot blocks: 32 x 32 blocks over the full
// rows (one statement overwriting, one more accumulating: C = 2 A B there), then the
// tail rows in 16-column blocks; B in 16-column panels [N/16][K/4][16][4].
ir::LoweredFunc MatrixDotMatmul(int64_t m, int64_t n, int64_t k) {
  ir::LoweredFunc f;
  f.name = "amx_mm";
  const int64_t panel_bytes = k * 16, full_rows = m / 32 * 32;
  f.params = {{"A", DType::kUInt8, {m, k}}, {"B", DType::kInt8, {n / 16, k / 4, 16, 4}},
              {"C", DType::kInt32, {m, n}, true}};
  auto block = [&](const std::string& acc, Expr row0, Expr col0, int64_t rows, int64_t cols, bool twice) {
    ir::MatrixDotOperands o;
    o.a = "A";
    o.b = "B";
    o.a_index = Mul(row0, IntImm(k));
    o.b_index = Mul(ir::Div(col0, IntImm(16)), IntImm(panel_bytes));
    o.a_stride = k;
    o.b_panel_stride = panel_bytes;
    o.rows = rows;
    o.cols = cols;
    o.groups = k / 4;
    std::vector<Stmt> body = {ir::MatrixDot(acc, IntImm(0), o)};
    if (twice) {
      o.accumulate = true;
      body.push_back(ir::MatrixDot(acc, IntImm(0), o));
    }
    Expr r = Var(acc + ".r"), c = Var(acc + ".c");
    body.push_back(Loop(acc + ".r", rows, ForKind::kSerial,
                        Loop(acc + ".c", cols, ForKind::kVectorized,
                             Store("C", Add(Mul(Add(row0, r), IntImm(n)), Add(col0, c)),
                                   ir::Load(acc, DType::kInt32, Add(Mul(r, IntImm(cols)), c))))));
    return ir::Allocate(acc, DType::kInt32, rows * cols, Block(body));
  };
  Expr ib = Var("ib"), jb = Var("jb"), jt = Var("jt");
  std::vector<Stmt> stmts;
  if (full_rows > 0) {
    stmts.push_back(Loop("ib", m / 32, ForKind::kParallel,
                         Loop("jb", n / 32, ForKind::kSerial,
                              block("acc", Mul(ib, IntImm(32)), Mul(jb, IntImm(32)), 32, 32, true))));
  }
  if (m > full_rows) {
    stmts.push_back(Loop("jt", n / 16, ForKind::kSerial,
                         block("tail", IntImm(full_rows), Mul(jt, IntImm(16)), m - full_rows, 16, false)));
  }
  f.body = Block(stmts);
  return f;
}

// MatrixDot: the interpreter equals plain loops; where the host has AMX, the built
// kernel equals the interpreter (tiles of 32 and 16 rows, a tail of 8, accumulate and
// overwrite, a parallel loop whose workers configure their own tiles); elsewhere the
// build says AMX is missing. tdpbusd appears for Sapphire Rapids and never for a CPU
// without AMX.
TEST(CodegenTest, MatrixDotRunsOnAmxAndMatchesTheInterpreter) {
  const int64_t m = 72, n = 64, k = 128;
  const ir::LoweredFunc func = MatrixDotMatmul(m, n, k);
  // Plain loops on the interpreter's inputs.
  ir::FloatBuffers floats;
  ir::IntBuffers ints;
  uint64_t state = 7;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(state >> 33);
  };
  for (int64_t i = 0; i < m * k; ++i) ints["A"].push_back(next() % 256);
  for (int64_t i = 0; i < n * k; ++i) ints["B"].push_back(next() % 256 - 128);
  ints["C"] = std::vector<int64_t>(m * n, 0);
  ASSERT_TRUE(ir::Interpret(func, &floats, &ints).ok()) << ir::Interpret(func, &floats, &ints);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int64_t x = 0; x < k; ++x) {
        sum += ints["A"][i * k + x] * ints["B"][(j / 16) * k * 16 + (x / 4) * 64 + (j % 16) * 4 + x % 4];
      }
      ASSERT_EQ(ints["C"][i * n + j], i < m / 32 * 32 ? 2 * sum : sum) << i << "," << j;
    }
  }
  Target host = TestTarget(2);
  if (host.HasFeature("amx-int8") && host.HasFeature("amx-tile")) {
    std::printf("host %s has AMX: the MatrixDot kernel runs here\n", host.cpu.c_str());
    ExpectKernelMatchesInterpreter(func, host);
  } else {
    absl::StatusOr<Artifact> artifact = BuildArtifact(func, host);
    ASSERT_FALSE(artifact.ok());
    EXPECT_NE(std::string(artifact.status().message()).find("matrix_dot needs AMX"), std::string::npos)
        << artifact.status();
  }
  Target spr = TestTarget(1);
  spr.triple = "x86_64-pc-linux-gnu";
  spr.cpu = "sapphirerapids";
  spr.features = "";
  absl::StatusOr<std::string> text = codegen::CompileToLlvmIr(func, spr, BuildOptions{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("llvm.x86.tdpbusd"), std::string::npos);
  EXPECT_NE(text->find("llvm.x86.ldtilecfg"), std::string::npos);
  spr.cpu = "znver4";  // AVX-512 VNNI, no AMX
  absl::StatusOr<std::string> refused = codegen::CompileToLlvmIr(func, spr, BuildOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("matrix_dot needs AMX"), std::string::npos);
}

// A segmented MatrixDot as a convolution uses it: 20 rows two bytes apart (they
// overlap), each reading 3 segments of 64 bytes 160 bytes apart, B's 48 groups
// contiguous across the segments. The interpreter equals the formula written out;
// on an AMX host the built kernel equals the interpreter.
TEST(CodegenTest, SegmentedMatrixDotReadsEachSegmentFromItsOwnRow) {
  const int64_t rows = 20, segments = 3, a_bytes = 2 * rows + 2 * 160 + 64, panel = segments * 16 * 64;
  ir::LoweredFunc f;
  f.name = "amx_segments";
  f.params = {{"A", DType::kUInt8, {a_bytes}}, {"B", DType::kInt8, {2 * panel}}, {"C", DType::kInt32, {rows * 32}, true}};
  ir::MatrixDotOperands o;
  o.a = "A";
  o.b = "B";
  o.a_index = IntImm(0);
  o.b_index = IntImm(0);
  o.a_stride = 2;
  o.b_panel_stride = panel;
  o.rows = rows;
  o.cols = 32;
  o.groups = 16;
  o.segments = segments;
  o.a_segment_stride = 160;
  Expr r = Var("r"), c = Var("c");
  f.body = ir::Allocate("acc", DType::kInt32, rows * 32,
                        Block({ir::MatrixDot("acc", IntImm(0), o),
                               Loop("r", rows, ForKind::kSerial,
                                    Loop("c", 32, ForKind::kVectorized,
                                         Store("C", Add(Mul(r, IntImm(32)), c),
                                               ir::Load("acc", DType::kInt32, Add(Mul(r, IntImm(32)), c)))))}));
  ir::FloatBuffers floats;
  ir::IntBuffers ints;
  for (int64_t i = 0; i < a_bytes; ++i) ints["A"].push_back((i * 37 + 11) % 256);
  for (int64_t i = 0; i < 2 * panel; ++i) ints["B"].push_back((i * 53 + 5) % 256 - 128);
  ints["C"] = std::vector<int64_t>(rows * 32, 0);
  ASSERT_TRUE(ir::Interpret(f, &floats, &ints).ok()) << ir::Interpret(f, &floats, &ints);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < 32; ++j) {
      int64_t sum = 0;
      for (int64_t e = 0; e < segments; ++e) {
        for (int64_t x = 0; x < 64; ++x) {
          sum += ints["A"][e * 160 + i * 2 + x] * ints["B"][(j / 16) * panel + (e * 16 + x / 4) * 64 + (j % 16) * 4 + x % 4];
        }
      }
      ASSERT_EQ(ints["C"][i * 32 + j], sum) << i << "," << j;
    }
  }
  Target host = TestTarget(1);
  if (host.HasFeature("amx-int8") && host.HasFeature("amx-tile")) ExpectKernelMatchesInterpreter(f, host);
}

// vpdpbusd is emitted exactly where the target has it, and a target without it builds
// (the intrinsic there would abort LLVM's backend) with the exact path instead.
TEST(CodegenTest, DotProductInstructionFollowsTheTargetFeatures) {
  const ir::LoweredFunc zmm = QuantizedMatmul(2, 16, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized);
  const ir::LoweredFunc ymm = QuantizedMatmul(2, 8, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized);
  auto llvm_ir = [](const ir::LoweredFunc& f, const std::string& cpu, const std::string& features) {
    Target target = TestTarget(1);
    target.triple = "x86_64-pc-linux-gnu";
    target.cpu = cpu;
    target.features = features;
    absl::StatusOr<std::string> text = codegen::CompileToLlvmIr(f, target, BuildOptions{});
    EXPECT_TRUE(text.ok()) << cpu << " " << features << ": " << text.status();
    return text.ok() ? *text : std::string();
  };
  // By CPU name alone: Sapphire Rapids has AVX-512 VNNI, Alder Lake AVX-VNNI on ymm
  // only, Zen 3 neither.
  EXPECT_NE(llvm_ir(zmm, "sapphirerapids", "").find("llvm.x86.avx512.vpdpbusd.512"), std::string::npos);
  EXPECT_NE(llvm_ir(ymm, "sapphirerapids", "").find("llvm.x86.avx512.vpdpbusd.256"), std::string::npos);
  EXPECT_EQ(llvm_ir(zmm, "alderlake", "").find("vpdpbusd"), std::string::npos);
  EXPECT_NE(llvm_ir(ymm, "alderlake", "").find("llvm.x86.avx512.vpdpbusd.256"), std::string::npos);
  EXPECT_EQ(llvm_ir(zmm, "znver3", "").find("vpdpbusd"), std::string::npos);
  EXPECT_EQ(llvm_ir(ymm, "znver3", "").find("vpdpbusd"), std::string::npos);
  // A feature taken away wins over the CPU's default.
  EXPECT_EQ(llvm_ir(zmm, "sapphirerapids", "-avx512vnni").find("vpdpbusd"), std::string::npos);
  // Objects, not just IR: the backend accepts what was chosen for each CPU.
  for (const std::string cpu : {"sapphirerapids", "alderlake", "znver3"}) {
    Target target = TestTarget(1);
    target.triple = "x86_64-pc-linux-gnu";
    target.cpu = cpu;
    target.features = "";
    EXPECT_TRUE(codegen::CompileToObject(zmm, target, BuildOptions{}).ok()) << cpu;
    EXPECT_TRUE(codegen::CompileToObject(ymm, target, BuildOptions{}).ok()) << cpu;
  }
  // aarch64: usdot (u8 x s8, 4 lanes per q register) where the core has i8mm, a
  // 16-lane vector as four of them; the exact path on a core without it.
  const ir::LoweredFunc q4 = QuantizedMatmul(2, 4, 8, DType::kUInt8, DType::kInt8, ForKind::kVectorized);
  auto arm = [](const ir::LoweredFunc& f, const std::string& cpu, const std::string& features) {
    Target target = TestTarget(1);
    target.triple = "aarch64-unknown-linux-gnu";
    target.cpu = cpu;
    target.features = features;
    absl::StatusOr<std::string> text = codegen::CompileToLlvmIr(f, target, BuildOptions{});
    EXPECT_TRUE(text.ok()) << cpu << " " << features << ": " << text.status();
    EXPECT_TRUE(codegen::CompileToObject(f, target, BuildOptions{}).ok()) << cpu << " " << features;
    return text.ok() ? *text : std::string();
  };
  EXPECT_NE(arm(q4, "neoverse-v1", "").find("llvm.aarch64.neon.usdot.v4i32.v16i8"), std::string::npos);
  const std::string wide = arm(zmm, "neoverse-v1", "");
  size_t calls = 0;
  for (size_t at = wide.find("call <4 x i32> @llvm.aarch64.neon.usdot"); at != std::string::npos;
       at = wide.find("call <4 x i32> @llvm.aarch64.neon.usdot", at + 1)) {
    ++calls;
  }
  EXPECT_GE(calls, 4u);
  EXPECT_EQ(arm(q4, "cortex-a76", "").find("usdot"), std::string::npos);
  EXPECT_EQ(arm(q4, "neoverse-v1", "-i8mm").find("usdot"), std::string::npos);
}

// Float to integer casts round halves to even, saturate and map NaN to 0 in vectors
// and in scalar code, as the interpreter does (the values a requantization meets and
// the edges: halves, the ends of every range, 2^31, NaN).
TEST(CodegenTest, FloatToIntegerCastsMatchTheInterpreter) {
  const std::vector<float> in = {-1.5f, 0.5f,  1.5f,  2.5f,  254.5f, 255.5f,      300.0f,      std::nanf(""),
                                 -129.6f, 3e9f, -3e9f, -0.5f, 127.5f, -128.5f, 2147483520.0f, 2147483648.0f};
  const int64_t n = static_cast<int64_t>(in.size());
  for (ForKind kind : {ForKind::kVectorized, ForKind::kSerial}) {
    ir::LoweredFunc f;
    f.name = "casts";
    f.params = {{"X", DType::kFloat32, {n}},       {"U", DType::kUInt8, {n}, true}, {"S", DType::kInt8, {n}, true},
                {"W", DType::kInt32, {n}, true},   {"I", DType::kFloat32, {n}, true}};
    Expr i = Var("i"), x = ir::Load("X", DType::kFloat32, i);
    f.body = Loop("i", n, kind,
                  Block({Store("U", i, ir::Cast(DType::kUInt8, x)), Store("S", i, ir::Cast(DType::kInt8, x)),
                         Store("W", i, ir::Cast(DType::kInt32, x)),
                         // s32 and back to float32 (exact below 2^24).
                         Store("I", i, ir::Cast(DType::kFloat32, ir::Cast(DType::kInt32, ir::Mul(x, FloatImm(0.001)))))}));
    ir::FloatBuffers floats{{"X", in}, {"I", std::vector<float>(n)}};
    ir::IntBuffers ints{{"U", std::vector<int64_t>(n)}, {"S", std::vector<int64_t>(n)}, {"W", std::vector<int64_t>(n)}};
    ASSERT_TRUE(ir::Interpret(f, &floats, &ints).ok());
    std::vector<float> x_data = in, i_data(n);
    std::vector<uint8_t> u(n);
    std::vector<int8_t> s8(n);
    std::vector<int32_t> w(n);
    absl::StatusOr<Artifact> artifact = BuildArtifact(f, TestTarget(1));
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    std::unique_ptr<LoadedKernel> kernel = LoadedKernel::Load(*artifact);
    ASSERT_NE(kernel, nullptr);
    ASSERT_EQ(kernel->RunPointers({x_data.data(), u.data(), s8.data(), w.data(), i_data.data()}), 0);
    for (int64_t k = 0; k < n; ++k) {
      SCOPED_TRACE(absl::StrCat("x = ", in[k], kind == ForKind::kSerial ? " (scalar)" : " (vector)"));
      EXPECT_EQ(u[k], ints["U"][k]);
      EXPECT_EQ(s8[k], ints["S"][k]);
      EXPECT_EQ(w[k], ints["W"][k]);
      EXPECT_EQ(i_data[k], floats["I"][k]);
    }
  }
}

TEST(CodegenTest, QuantizedIrErrorsAreReported) {
  ir::LoweredFunc f = QuantizedMatmul(2, 4, 8, DType::kUInt8, DType::kInt8, ForKind::kSerial);
  // A float value stored into an s32 buffer.
  f.body = Loop("i", 4, ForKind::kSerial, Store("C", Var("i"), FloatImm(1.0)));
  absl::StatusOr<Artifact> built = BuildArtifact(f, TestTarget(1));
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(built.status().message().find("float32 value into s32 buffer 'C'"), std::string::npos)
      << built.status();
  // A load that names the wrong element type.
  f.body = Loop("i", 4, ForKind::kSerial, Store("C", Var("i"), ir::Cast(DType::kInt32, ir::Load("A", DType::kInt8, Var("i")))));
  built = BuildArtifact(f, TestTarget(1));
  EXPECT_NE(built.status().message().find("load of s8 from u8 buffer 'A'"), std::string::npos)
      << built.status();
  // Buffers of int64 are not kernel arguments.
  f.params.push_back({"I", DType::kInt64, {4}});
  f.body = Loop("i", 4, ForKind::kSerial, Store("C", Var("i"), ir::Cast(DType::kInt32, IntImm(0))));
  built = BuildArtifact(f, TestTarget(1));
  EXPECT_NE(built.status().message().find("'I' is int64"), std::string::npos) << built.status();
}

TEST(CodegenTest, DetectHostTarget) {
  Target host = DetectHostTarget("my-box");
  EXPECT_FALSE(host.triple.empty());
  EXPECT_FALSE(host.cpu.empty());
  EXPECT_EQ(host.device_key, "my-box");
  EXPECT_GE(host.num_threads, 1);
  // Enabled features only, sorted, in "+a,+b" form.
  std::vector<std::string> features;
  for (size_t start = 0; start < host.features.size();) {
    size_t comma = std::min(host.features.find(',', start), host.features.size());
    features.push_back(host.features.substr(start, comma - start));
    start = comma + 1;
  }
  for (const std::string& feature : features) {
    EXPECT_GT(feature.size(), 1u);
    EXPECT_EQ(feature[0], '+') << feature;
  }
  EXPECT_TRUE(std::is_sorted(features.begin(), features.end()));
  std::printf("host target: %s features=%s\n", host.ToString().c_str(), host.features.c_str());
}

}  // namespace
}  // namespace tuneforge
