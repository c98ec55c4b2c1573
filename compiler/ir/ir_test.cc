// Tests of the loop IR: construction, printing, mutation and interpretation.
#include "compiler/ir/ir.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tuneforge::ir
