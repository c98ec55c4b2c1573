// Tests of the loop IR: construction, printing, mutation and interpretation.
#include "compiler/ir/ir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/ir/interpreter.h"

namespace tuneforge::ir {
namespace {

TEST(IrTest, ConstantFoldingAndIdentities) {
  Expr x = Var("x");
  EXPECT_TRUE(IsConst(Add(IntImm(2), IntImm(3))));
  EXPECT_EQ(Add(x, IntImm(0)), x);
  EXPECT_EQ(Mul(x, IntImm(1)), x);
  int64_t v = -1;
  EXPECT_TRUE(IsConst(Mul(x, IntImm(0)), &v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(IsConst(Min(IntImm(4), IntImm(9)), &v));
  EXPECT_EQ(v, 4);
  EXPECT_EQ(ToString(Add(Add(x, IntImm(2)), IntImm(3))), "x + 5");
}

// Small integer constants are shared nodes within a thread; others are new nodes. Both
// hold their value.
TEST(IrTest, SmallIntegerConstantsAreShared) {
  for (int64_t v : {int64_t{-64}, int64_t{0}, int64_t{7}, int64_t{4095}}) {
    EXPECT_EQ(IntImm(v), IntImm(v)) << v;
    EXPECT_EQ(IntImm(v)->int_value, v);
  }
  for (int64_t v : {int64_t{-65}, int64_t{4096}, int64_t{1} << 40}) {
    EXPECT_NE(IntImm(v), IntImm(v)) << v;
    EXPECT_EQ(IntImm(v)->int_value, v);
  }
  EXPECT_EQ(ToString(Add(Var("x"), IntImm(-64))), "x + -64");
}

TEST(IrTest, PrinterParenthesisesOnlyWhereNeeded) {
  Expr x = Var("x"), y = Var("y");
  EXPECT_EQ(ToString(Mul(Add(x, y), IntImm(4))), "(x + y)*4");
  EXPECT_EQ(ToString(Add(Mul(x, IntImm(4)), y)), "x*4 + y");
  EXPECT_EQ(ToString(Sub(x, Sub(y, IntImm(1)))), "x - (y - 1)");
  Stmt loop = For("i", IntImm(8), 8, ForKind::kVectorized, Store("C", Var("i"), FloatImm(0)));
  EXPECT_EQ(ToString(loop), "vectorized for (i, 0, 8) {\n  C[i] = 0f\n}\n");
}

TEST(IrTest, SubstituteRefoldsAndRespectsShadowing) {
  Expr e = Add(Mul(Var("x"), IntImm(4)), Var("y"));
  Expr r = Substitute(e, {{"x", IntImm(2)}, {"y", IntImm(1)}});
  int64_t v;
  ASSERT_TRUE(IsConst(r, &v));
  EXPECT_EQ(v, 9);
  Stmt loop = For("x", IntImm(2), 2, ForKind::kSerial, Store("C", Var("x"), FloatImm(1)));
  Stmt same = Substitute(loop, {{"x", IntImm(7)}});
  EXPECT_EQ(ToString(same), ToString(loop));
  // A few variables or many (looked up two ways): the shadowed one stays inside its
  // loop, the others are replaced there too.
  for (int vars : {2, 8, 9, 12}) {
    std::map<std::string, Expr> values;
    Expr sum = IntImm(0);
    for (int i = 0; i < vars; ++i) {
      const std::string name = i == 0 ? "x" : "v" + std::to_string(i);
      values[name] = IntImm(10 * i + 1);
      sum = Add(sum, Var(name));
    }
    Stmt nest = Block({Store("C", IntImm(0), Load("A", DType::kFloat32, sum)),
                       For("x", IntImm(2), 2, ForKind::kSerial, Store("C", sum, FloatImm(1)))});
    int64_t all = 0, in_loop = 0;
    for (int i = 0; i < vars; ++i) all += 10 * i + 1;
    in_loop = all - 1;
    EXPECT_EQ(ToString(Substitute(nest, values)), "C[0] = A[" + std::to_string(all) + "]\nfor (x, 0, 2) {\n  C[x + " +
                                                      std::to_string(in_loop) + "] = 1f\n}\n")
        << vars << " variables";
  }
}

TEST(IrTest, MatrixDotPrintsSubstitutesAndReads) {
  MatrixDotOperands o;
  o.a = "A";
  o.b = "B";
  o.a_index = Mul(Var("i"), IntImm(128));
  o.b_index = Mul(Var("j"), IntImm(2048));
  o.a_stride = 128;
  o.b_panel_stride = 2048;
  o.rows = 32;
  o.cols = 32;
  o.groups = 32;
  Stmt dot = MatrixDot("acc", IntImm(0), o);
  EXPECT_EQ(ToString(dot), "matrix_dot 32x32x128 acc[0] = A[i*128, row stride 128] x B[j*2048, panel stride 2048]\n");
  EXPECT_EQ(ToString(Substitute(dot, {{"i", IntImm(2)}, {"j", IntImm(1)}})),
            "matrix_dot 32x32x128 acc[0] = A[256, row stride 128] x B[2048, panel stride 2048]\n");
  EXPECT_TRUE(ReadsBuffer(dot, "A"));
  EXPECT_TRUE(ReadsBuffer(dot, "B"));
  EXPECT_FALSE(ReadsBuffer(dot, "acc"));  // overwritten, not read
  o.accumulate = true;
  EXPECT_TRUE(ReadsBuffer(MatrixDot("acc", IntImm(0), o), "acc"));
}

// A configured MatrixDot runs on tiles a TileConfig of its shape set up on the same
// thread: the interpreter refuses one without it, after a dot of another shape, or
// with the configuration outside the parallel loop whose iterations run the dots.
TEST(InterpreterTest, ConfiguredMatrixDotsNeedTheirTileConfigOnTheirThread) {
  ir::LoweredFunc f;
  f.name = "tiles";
  f.params = {{"A", DType::kUInt8, {16, 64}}, {"B", DType::kInt8, {1, 16, 16, 4}}, {"C", DType::kInt32, {16, 16}, true}};
  MatrixDotOperands o;
  o.a = "A";
  o.b = "B";
  o.a_index = IntImm(0);
  o.b_index = IntImm(0);
  o.a_stride = 64;
  o.rows = 16;
  o.cols = 16;
  o.groups = 16;
  o.configured = true;
  const Stmt dot = MatrixDot("C", IntImm(0), o);
  auto run = [&](Stmt body) {
    f.body = std::move(body);
    ir::FloatBuffers floats;
    ir::IntBuffers ints;
    ints["A"] = std::vector<int64_t>(16 * 64, 1);
    ints["B"] = std::vector<int64_t>(16 * 64, -1);
    ints["C"] = std::vector<int64_t>(16 * 16, 0);
    absl::Status st = ir::Interpret(f, &floats, &ints);
    if (st.ok()) {
      EXPECT_EQ(ints["C"][0], -64);
    }
    return st;
  };
  EXPECT_TRUE(run(Block({TileConfig(16, 16), dot, dot})).ok());
  EXPECT_FALSE(run(dot).ok());
  EXPECT_FALSE(run(Block({TileConfig(8, 16), dot})).ok());
  EXPECT_TRUE(run(For("p", IntImm(2), 2, ForKind::kParallel, Block({TileConfig(16, 16), dot}))).ok());
  absl::Status outside = run(Block({TileConfig(16, 16), For("p", IntImm(2), 2, ForKind::kParallel, dot)}));
  EXPECT_NE(std::string(outside.message()).find("nothing configured"), std::string::npos) << outside;
}

TEST(IrTest, UnflattenIsRowMajor) {
  const std::vector<int64_t> dims = {2, 3, 4};
  std::vector<Expr> idx = Unflatten(Var("x"), dims);
  ASSERT_EQ(idx.size(), 3u);
  for (int64_t flat = 0; flat < 24; ++flat) {
    int64_t rebuilt = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t v = -1;
      ASSERT_TRUE(IsConst(Substitute(idx[d], {{"x", IntImm(flat)}}), &v));
      ASSERT_GE(v, 0);
      ASSERT_LT(v, dims[d]);
      rebuilt = rebuilt * dims[d] + v;
    }
    EXPECT_EQ(rebuilt, flat);
  }
  EXPECT_EQ(ToString(Unflatten(Var("x"), {5})[0]), "x") << "one dim: the index itself";
  EXPECT_TRUE(Unflatten(Var("x"), {}).empty());
}

// Rewrite rebuilds bottom-up and shares what it does not change.
TEST(IrTest, RewriteSharesUnchangedSubtrees) {
  Stmt store = Store("C", Var("i"), Load("A", DType::kFloat32, Var("i")));
  Stmt other = Store("D", IntImm(0), FloatImm(1));
  Stmt loop = For("i", IntImm(4), 4, ForKind::kSerial, Block({store, other}));
  EXPECT_EQ(Rewrite(loop, [](const Stmt& s) { return s; }), loop);
  Stmt guarded = Rewrite(loop, [](const Stmt& s) {
    return s->kind == StmtKind::kStore && s->buffer == "C" ? IfThenElse(LT(Var("i"), IntImm(2)), s)
                                                           : s;
  });
  EXPECT_NE(guarded, loop);
  EXPECT_EQ(guarded->body->stmts[1], other);
  EXPECT_TRUE(ReadsBuffer(loop, "A"));
  EXPECT_FALSE(ReadsBuffer(loop, "C"));
}

// A constant extent is the loop's maximum; a vectorized loop may have a variable
// extent (codegen vectorizes it where the extent folds to a constant).
TEST(IrTest, ConstantExtentIsTheMaximum) {
  EXPECT_DEATH(For("i", IntImm(4), 8, ForKind::kVectorized, Store("C", Var("i"), FloatImm(0))),
               "constant extent 4 != max 8");
  Stmt tail = For("i", Var("n"), 8, ForKind::kVectorized, Store("C", Var("i"), FloatImm(0)));
  EXPECT_EQ(tail->for_kind, ForKind::kVectorized);
}

TEST(InterpreterTest, RunsLoopsAndReportsOutOfBounds) {
  LoweredFunc f;
  f.name = "fill";
  f.params = {BufferParam{"C", DType::kFloat32, {4}, true}};
  f.body = For("i", IntImm(4), 4, ForKind::kSerial,
               Store("C", Var("i"), Add(Load("C", DType::kFloat32, Var("i")), FloatImm(1.5))));
  std::map<std::string, std::vector<float>> buffers{{"C", {0, 1, 2, 3}}};
  ASSERT_TRUE(Interpret(f, &buffers).ok());
  EXPECT_EQ(buffers["C"], (std::vector<float>{1.5, 2.5, 3.5, 4.5}));

  f.body = For("i", IntImm(5), 5, ForKind::kSerial, Store("C", Var("i"), FloatImm(0)));
  absl::Status st = Interpret(f, &buffers);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out of bounds"), std::string::npos);
}

TEST(IrTest, QuantizedValuesAreCastBeforeArithmetic) {
  Expr i = Var("i");
  Expr a = Load("A", DType::kUInt8, i), w = Load("W", DType::kInt8, i);
  EXPECT_DEATH(Add(a, a), "cast them to s32 or float32 first");
  EXPECT_DEATH(Add(Cast(DType::kInt32, a), i), "cast one of them first");
  EXPECT_DEATH(Div(Cast(DType::kInt32, a), Cast(DType::kInt32, w)), "cast them to float32");
  EXPECT_DEATH(Dot4(Cast(DType::kInt32, a), a, Cast(DType::kInt32, w)), "loads of u8 or s8");
  EXPECT_DEATH(Dot4(Cast(DType::kFloat32, a), a, w), "accumulates into s32");
  EXPECT_DEATH(Cast(DType::kBool, a), "no cast from or to bool");
  Expr acc = Load("C", DType::kInt32, i);
  EXPECT_EQ(ToString(Dot4(acc, a, w)), "dot4(C[i], A[i], W[i])");
  EXPECT_EQ(ToString(Cast(DType::kUInt8, Add(acc, Cast(DType::kInt32, w)))), "u8(C[i] + s32(W[i]))");
  EXPECT_EQ(Cast(DType::kInt32, acc), acc);
  // Substitution rebuilds both new kinds.
  EXPECT_EQ(ToString(Substitute(Dot4(acc, a, w), {{"i", IntImm(3)}})), "dot4(C[3], A[3], W[3])");
  EXPECT_EQ(ToString(Substitute(Cast(DType::kFloat32, a), {{"i", IntImm(3)}})), "float32(A[3])");
}

// A u8 x s8 matrix product through Dot4 (weights packed [K/4][N][4]), requantized to
// u8; checked against plain loops, with the extreme values the instructions must not
// saturate on (255 x -128, four at a time).
TEST(InterpreterTest, QuantizedMatmulIsExact) {
  const int64_t m = 3, n = 5, k = 8;
  LoweredFunc f;
  f.name = "qmatmul";
  f.params = {BufferParam{"A", DType::kUInt8, {m, k}}, BufferParam{"B", DType::kInt8, {k / 4, n, 4}},
              BufferParam{"C", DType::kInt32, {m, n}, true}, BufferParam{"D", DType::kUInt8, {m, n}, true}};
  Expr i = Var("i"), j = Var("j"), q = Var("q");
  Expr c_index = Add(Mul(i, IntImm(n)), j);
  Expr requantized = Cast(DType::kUInt8, Add(Cast(DType::kInt32, Mul(Cast(DType::kFloat32, Load("C", DType::kInt32, c_index)),
                                                                     FloatImm(0.001))),
                                             Cast(DType::kInt32, IntImm(100))));
  f.body = For("i", IntImm(m), m, ForKind::kSerial,
               Block({For("j", IntImm(n), n, ForKind::kSerial, Store("C", c_index, Cast(DType::kInt32, IntImm(0)))),
                      For("q", IntImm(k / 4), k / 4, ForKind::kSerial,
                          For("j", IntImm(n), n, ForKind::kSerial,
                              Store("C", c_index,
                                    Dot4(Load("C", DType::kInt32, c_index),
                                         Load("A", DType::kUInt8, Add(Mul(i, IntImm(k)), Mul(q, IntImm(4)))),
                                         Load("B", DType::kInt8, Mul(Add(Mul(q, IntImm(n)), j), IntImm(4))))))),
                      For("j", IntImm(n), n, ForKind::kSerial, Store("D", c_index, requantized))}));
  IntBuffers ints{{"A", std::vector<int64_t>(m * k)}, {"B", std::vector<int64_t>(k * n)},
                  {"C", std::vector<int64_t>(m * n)}, {"D", std::vector<int64_t>(m * n)}};
  for (int64_t x = 0; x < m * k; ++x) ints["A"][x] = x < k ? 255 : (x * 37) % 256;
  for (int64_t x = 0; x < k * n; ++x) ints["B"][x] = x < 4 * n ? -128 : (x * 53) % 256 - 128;
  FloatBuffers floats;
  ASSERT_TRUE(Interpret(f, &floats, &ints).ok());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      int64_t want = 0;
      for (int64_t x = 0; x < k; ++x) want += ints["A"][r * k + x] * ints["B"][((x / 4) * n + c) * 4 + x % 4];
      EXPECT_EQ(ints["C"][r * n + c], want) << r << "," << c;
      const double scaled = std::nearbyint(static_cast<float>(static_cast<float>(want) * 0.001f));
      EXPECT_EQ(ints["D"][r * n + c], std::clamp<int64_t>(static_cast<int64_t>(scaled) + 100, 0, 255));
    }
  }
}

// Cast rounds floats to nearest with halves to even, saturates, maps NaN to 0, and
// saturates between integer types.
TEST(InterpreterTest, CastsRoundAndSaturate) {
  const std::vector<float> in = {-1.5f, 0.5f, 1.5f, 2.5f, 254.5f, 255.5f, 300.0f, std::nanf(""), -129.6f, 3e9f};
  const int64_t n = static_cast<int64_t>(in.size());
  LoweredFunc f;
  f.name = "casts";
  f.params = {BufferParam{"X", DType::kFloat32, {n}}, BufferParam{"U", DType::kUInt8, {n}, true},
              BufferParam{"S", DType::kInt8, {n}, true}, BufferParam{"W", DType::kInt32, {n}, true},
              BufferParam{"V", DType::kUInt8, {n}, true}};
  Expr i = Var("i");
  Expr x = Load("X", DType::kFloat32, i);
  f.body = For("i", IntImm(n), n, ForKind::kSerial,
               Block({Store("U", i, Cast(DType::kUInt8, x)), Store("S", i, Cast(DType::kInt8, x)),
                      Store("W", i, Cast(DType::kInt32, x)),
                      Store("V", i, Cast(DType::kUInt8, Cast(DType::kInt32, x)))}));
  FloatBuffers floats{{"X", in}};
  IntBuffers ints{{"U", std::vector<int64_t>(n)}, {"S", std::vector<int64_t>(n)}, {"W", std::vector<int64_t>(n)},
                  {"V", std::vector<int64_t>(n)}};
  ASSERT_TRUE(Interpret(f, &floats, &ints).ok());
  EXPECT_EQ(ints["U"], (std::vector<int64_t>{0, 0, 2, 2, 254, 255, 255, 0, 0, 255}));
  EXPECT_EQ(ints["S"], (std::vector<int64_t>{-2, 0, 2, 2, 127, 127, 127, 0, -128, 127}));
  EXPECT_EQ(ints["W"], (std::vector<int64_t>{-2, 0, 2, 2, 254, 256, 300, 0, -130, 2147483647}));
  EXPECT_EQ(ints["V"], ints["U"]);
}

TEST(InterpreterTest, IntegerBuffersAreChecked) {
  LoweredFunc f;
  f.name = "local";
  f.params = {BufferParam{"A", DType::kUInt8, {4}}, BufferParam{"C", DType::kInt32, {4}, true}};
  Expr i = Var("i");
  // A local s32 tile read before it is written.
  f.body = Allocate("T", DType::kInt32, 4,
                    For("i", IntImm(4), 4, ForKind::kSerial, Store("C", i, Load("T", DType::kInt32, i))));
  FloatBuffers floats;
  IntBuffers ints{{"A", {1, 2, 3, 4}}, {"C", {0, 0, 0, 0}}};
  absl::Status st = Interpret(f, &floats, &ints);
  EXPECT_NE(st.message().find("before anything was stored"), std::string::npos) << st;
  // A u8 input outside 0..255.
  f.body = For("i", IntImm(4), 4, ForKind::kSerial, Store("C", i, Cast(DType::kInt32, Load("A", DType::kUInt8, i))));
  ints["A"][2] = 256;
  st = Interpret(f, &floats, &ints);
  EXPECT_NE(st.message().find("outside the range of u8"), std::string::npos) << st;
  ints["A"][2] = 3;
  ASSERT_TRUE(Interpret(f, &floats, &ints).ok());
  EXPECT_EQ(ints["C"], (std::vector<int64_t>{1, 2, 3, 4}));
  // A Dot4 reading past the end of its buffer.
  f.body = Store("C", IntImm(0), Dot4(Load("C", DType::kInt32, IntImm(0)), Load("A", DType::kUInt8, IntImm(1)),
                                     Load("A", DType::kUInt8, IntImm(0))));
  st = Interpret(f, &floats, &ints);
  EXPECT_NE(st.message().find("out of bounds: A[4]"), std::string::npos) << st;
}

}  // namespace
}  // namespace tuneforge::ir
