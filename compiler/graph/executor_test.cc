// The graph executor on small hand-built graphs (each generated kernel against a
// scalar C++ reference) and on a test model (memory plan, repeatability, errors);
// whole models against onnxruntime are the model_run_* tests (check_run.py).
#include "compiler/graph/executor.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/codegen/build.h"
#include "compiler/frontend/onnx_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tuneforge::graph {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int AddTensor(Graph* g, const std::string& name, std::vector<int64_t> shape) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  g->tensors.push_back(std::move(t));
  return static_cast<int>(g->tensors.size()) - 1;
}

std::vector<float> Random(int64_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

Target TestTarget() { return DetectHostTarget("test"); }

// One node `op` from x [shape] to y [shape]; runs it and returns y.
std::vector<float> RunUnary(const std::string& op, const std::vector<int64_t>& shape,
                            const std::vector<float>& x, std::map<std::string, Attribute> attrs = {}) {
  Graph g;
  g.opset = 17;
  const int in = AddTensor(&g, "x", shape), out = AddTensor(&g, "y", shape);
  g.nodes.push_back(Node{"n", op, {in}, {out}, std::move(attrs)});
  g.inputs = {in};
  g.outputs = {out};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  EXPECT_TRUE(e.ok()) << e.status();
  std::vector<float> y(x.size());
  EXPECT_TRUE((*e)->Run({x.data()}, {y.data()}).ok());
  return y;
}

// exp, erf and tanh are inline polynomials in the code generator: within 1e-5
// relative (1e-6 absolute) of the C library everywhere.
TEST(ExecutorTest, UnaryOperatorsMatchTheCLibrary) {
  const std::vector<int64_t> shape = {3, 37};  // a vector body and a scalar tail
  const std::vector<float> x = Random(3 * 37, 1);
  const std::vector<float> pos = Random(3 * 37, 2, 0.01f, 4.0f);
  const std::vector<float> wide = Random(3 * 37, 7, -100.0f, 100.0f);
  struct Case {
    std::string op;
    std::function<float(float)> ref;
    bool positive;
  };
  for (const Case& c : std::vector<Case>{
           {"Relu", [](float v) { return std::max(v, 0.0f); }, false},
           {"Sigmoid", [](float v) { return 1.0f / (1.0f + std::exp(-v)); }, false},
           {"Tanh", [](float v) { return std::tanh(v); }, false},
           {"Erf", [](float v) { return std::erf(v); }, false},
           {"Sqrt", [](float v) { return std::sqrt(v); }, true}}) {
    // Near zero, and far out where exp overflows or underflows without its clamp.
    for (const std::vector<float>* in : {c.positive ? &pos : &x, c.positive ? &pos : &wide}) {
      std::vector<float> y = RunUnary(c.op, shape, *in);
      for (size_t i = 0; i < in->size(); ++i) {
        const float want = c.ref((*in)[i]);
        ASSERT_NEAR(y[i], want, 1e-6 + 1e-5 * std::fabs(want)) << c.op << "(" << (*in)[i] << ")";
      }
    }
  }
}

TEST(ExecutorTest, SoftmaxOverAMiddleAxis) {
  // [2, 5, 3], axis 1: the rows are strided (inner = 3), the scalar path.
  const std::vector<float> x = Random(30, 3);
  Attribute axis;
  axis.ints = {1};
  std::vector<float> y = RunUnary("Softmax", {2, 5, 3}, x, {{"axis", axis}});
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 3; ++i) {
      double m = -1e30, s = 0;
      for (int a = 0; a < 5; ++a) m = std::max<double>(m, x[static_cast<size_t>(o * 15 + a * 3 + i)]);
      for (int a = 0; a < 5; ++a) s += std::exp(x[static_cast<size_t>(o * 15 + a * 3 + i)] - m);
      for (int a = 0; a < 5; ++a) {
        const size_t k = static_cast<size_t>(o * 15 + a * 3 + i);
        ASSERT_NEAR(y[k], std::exp(x[k] - m) / s, 1e-6);
      }
    }
  }
}

TEST(ExecutorTest, BroadcastAddAndAReshapeThatSharesStorage) {
  // y = Reshape(a [4, 1, 6] + b [5, 1]) -> [20, 6]: broadcasting on both sides.
  Graph g;
  g.opset = 17;
  const int a = AddTensor(&g, "a", {4, 1, 6}), b = AddTensor(&g, "b", {5, 1});
  const int sum = AddTensor(&g, "sum", {4, 5, 6}), y = AddTensor(&g, "y", {20, 6});
  g.nodes.push_back(Node{"add", "Add", {a, b}, {sum}, {}});
  g.nodes.push_back(Node{"flat", "Identity", {sum}, {y}, {}});
  g.inputs = {a, b};
  g.outputs = {y};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->kernels().size(), 1u);  // the Identity runs no kernel
  const std::vector<float> va = Random(24, 4), vb = Random(5, 5);
  std::vector<float> out(120);
  ASSERT_TRUE((*e)->Run({va.data(), vb.data()}, {out.data()}).ok());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 6; ++k)
        ASSERT_FLOAT_EQ(out[static_cast<size_t>((i * 5 + j) * 6 + k)],
                        va[static_cast<size_t>(i * 6 + k)] + vb[static_cast<size_t>(j)]);
}

TEST(ExecutorTest, ComparisonsLogicAndWhere) {
  // y = Where(Or(Less(a, b), Not(Equal(a, c))), a, b * inf): bool masks between
  // float tensors, broadcast ([2, 1, 9] against [3, 9] and a scalar), and a Where
  // whose branch not taken is infinite or NaN (b * inf at b == 0).
  Graph g;
  g.opset = 17;
  const int a = AddTensor(&g, "a", {2, 1, 9}), b = AddTensor(&g, "b", {3, 9});
  const int c = AddTensor(&g, "c", {}), inf = AddTensor(&g, "inf", {});
  g.tensors[static_cast<size_t>(c)].constant = true;
  g.tensors[static_cast<size_t>(c)].f32 = {0.5f};
  g.tensors[static_cast<size_t>(inf)].constant = true;
  g.tensors[static_cast<size_t>(inf)].f32 = {INFINITY};
  const int less = AddTensor(&g, "less", {2, 3, 9}), eq = AddTensor(&g, "eq", {2, 1, 9});
  const int ne = AddTensor(&g, "ne", {2, 1, 9}), mask = AddTensor(&g, "mask", {2, 3, 9});
  const int big = AddTensor(&g, "big", {3, 9}), y = AddTensor(&g, "y", {2, 3, 9});
  for (int t : {less, eq, ne, mask}) g.tensors[static_cast<size_t>(t)].dtype = DType::kBool;
  g.nodes.push_back(Node{"less", "Less", {a, b}, {less}, {}});
  g.nodes.push_back(Node{"eq", "Equal", {a, c}, {eq}, {}});
  g.nodes.push_back(Node{"not", "Not", {eq}, {ne}, {}});
  g.nodes.push_back(Node{"or", "Or", {less, ne}, {mask}, {}});
  g.nodes.push_back(Node{"big", "Mul", {b, inf}, {big}, {}});
  g.nodes.push_back(Node{"where", "Where", {mask, a, big}, {y}, {}});
  g.inputs = {a, b};
  g.outputs = {y};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<float> va = Random(18, 11), vb = Random(27, 12);
  va[3] = 0.5f;   // equal to c
  va[12] = 0.5f;
  vb[3] = 0.0f;   // b * inf is NaN
  vb[5] = -3.0f;  // -inf
  std::vector<float> out(54);
  ASSERT_TRUE((*e)->Run({va.data(), vb.data()}, {out.data()}).ok());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 9; ++k) {
        const float x = va[static_cast<size_t>(i * 9 + k)], w = vb[static_cast<size_t>(j * 9 + k)];
        const bool take = x < w || x != 0.5f;
        const float got = out[static_cast<size_t>((i * 3 + j) * 9 + k)];
        if (take) {
          ASSERT_EQ(got, x) << i << "," << j << "," << k;
        } else if (w == 0.0f) {
          ASSERT_TRUE(std::isnan(got)) << i << "," << j << "," << k;
        } else {
          ASSERT_EQ(got, w * INFINITY) << i << "," << j << "," << k;
        }
      }
    }
  }
  // A bool output is refused with a clear error (outputs are float32 files).
  g.outputs = {mask};
  e = Executor::Create(g, TestTarget());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("graph output 'mask' is bool"));
}

TEST(ExecutorTest, GroupNormalizationPerGroupAndPerChannel) {
  // x [2, 6, 5]: 3 groups of 2 channels. Opset 18 gives scale and bias per group,
  // opset 21 per channel; both against a scalar reference.
  for (int64_t opset : {18, 21}) {
    const int64_t per = opset >= 21 ? 6 : 3;
    Graph g;
    g.opset = opset;
    const int x = AddTensor(&g, "x", {2, 6, 5}), y = AddTensor(&g, "y", {2, 6, 5});
    const int scale = AddTensor(&g, "scale", {per}), bias = AddTensor(&g, "bias", {per});
    g.tensors[static_cast<size_t>(scale)].constant = true;
    g.tensors[static_cast<size_t>(scale)].f32 = Random(per, 21, 0.5f, 2.0f);
    g.tensors[static_cast<size_t>(bias)].constant = true;
    g.tensors[static_cast<size_t>(bias)].f32 = Random(per, 22);
    Attribute groups, eps;
    groups.ints = {3};
    eps.floats = {1e-3f};
    g.nodes.push_back(Node{"gn", "GroupNormalization", {x, scale, bias}, {y}, {{"num_groups", groups}, {"epsilon", eps}}});
    g.inputs = {x};
    g.outputs = {y};
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
    ASSERT_TRUE(e.ok()) << e.status();
    const std::vector<float> vx = Random(60, 23);
    std::vector<float> out(60);
    ASSERT_TRUE((*e)->Run({vx.data()}, {out.data()}).ok());
    const std::vector<float>& s = g.tensors[static_cast<size_t>(scale)].f32;
    const std::vector<float>& b = g.tensors[static_cast<size_t>(bias)].f32;
    for (int n = 0; n < 2; ++n) {
      for (int gr = 0; gr < 3; ++gr) {
        const size_t base = static_cast<size_t>(n * 30 + gr * 10);
        double mean = 0, var = 0;
        for (size_t i = 0; i < 10; ++i) mean += vx[base + i] / 10.0;
        for (size_t i = 0; i < 10; ++i) var += (vx[base + i] - mean) * (vx[base + i] - mean) / 10.0;
        for (size_t i = 0; i < 10; ++i) {
          const size_t k = opset >= 21 ? static_cast<size_t>(gr * 2) + i / 5 : static_cast<size_t>(gr);
          const double want = (vx[base + i] - mean) / std::sqrt(var + 1e-3) * s[k] + b[k];
          ASSERT_NEAR(out[base + i], want, 1e-5) << "opset " << opset << " n " << n << " group " << gr << " i " << i;
        }
      }
    }
  }
}

// A padded convolution whose input comes from a leftover operator (Sigmoid) copies
// that input into its blocked layout every run and zeroes the border once, at load:
// run three times on different inputs, each output matches a scalar reference.
TEST(ExecutorTest, PaddedConvAfterALeftoverKeepsItsBorderAcrossRuns) {
  Graph g;
  g.opset = 13;
  const int x = AddTensor(&g, "x", {1, 8, 6, 7}), s = AddTensor(&g, "s", {1, 8, 6, 7});
  const int w = AddTensor(&g, "w", {16, 8, 3, 3}), y = AddTensor(&g, "y", {1, 16, 6, 7});
  g.tensors[static_cast<size_t>(w)].constant = true;
  g.tensors[static_cast<size_t>(w)].f32 = Random(16 * 8 * 9, 31);
  Attribute pads, strides;
  pads.ints = {1, 1, 1, 1};
  strides.ints = {1, 1};
  g.nodes.push_back(Node{"sigmoid", "Sigmoid", {x}, {s}, {}});
  g.nodes.push_back(Node{"conv", "Conv", {s, w}, {y}, {{"pads", pads}, {"strides", strides}}});
  g.inputs = {x};
  g.outputs = {y};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->default_tasks(), 1);
  const std::vector<float>& wf = g.tensors[static_cast<size_t>(w)].f32;
  for (uint32_t seed : {41u, 42u, 43u}) {
    const std::vector<float> vx = Random(8 * 42, seed, -4, 4);
    std::vector<float> out(16 * 42);
    ASSERT_TRUE((*e)->Run({vx.data()}, {out.data()}).ok());
    for (int k = 0; k < 16; ++k) {
      for (int h = 0; h < 6; ++h) {
        for (int col = 0; col < 7; ++col) {
          double want = 0;
          for (int c = 0; c < 8; ++c)
            for (int r = 0; r < 3; ++r)
              for (int q = 0; q < 3; ++q) {
                const int ih = h + r - 1, iw = col + q - 1;
                if (ih < 0 || ih >= 6 || iw < 0 || iw >= 7) continue;
                const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(vx[static_cast<size_t>((c * 6 + ih) * 7 + iw)])));
                want += sig * wf[static_cast<size_t>(((k * 8 + c) * 3 + r) * 3 + q)];
              }
          ASSERT_NEAR(out[static_cast<size_t>((k * 6 + h) * 7 + col)], want, 1e-4)
              << "seed " << seed << " at " << k << "," << h << "," << col;
        }
      }
    }
  }
}

// DenseNet's pre-activation before a conv, and a squeeze-excitation gate: x scaled and
// shifted per channel, multiplied by a run-time [1, C, 1, 1] gate, ReLU, then a padded
// 3x3 conv. The chain runs inside the conv's copy of its input into the blocked layout
// (one kernel, the chain's output never written); when the chain's output is also a
// graph output it stays a kernel of its own. Both match a scalar reference.
TEST(ExecutorTest, ConvsComputeTheElementwiseChainBeforeThem) {
  for (const bool chain_is_output : {false, true}) {
    Graph g;
    g.opset = 13;
    const int64_t c = 16, hh = 5, ww = 6, k = 8;
    const int x = AddTensor(&g, "x", {1, c, hh, ww}), gate = AddTensor(&g, "gate", {1, c, 1, 1});
    auto constant = [&](const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
      const int t = AddTensor(&g, name, std::move(shape));
      g.tensors[static_cast<size_t>(t)].constant = true;
      g.tensors[static_cast<size_t>(t)].f32 = Random(g.tensors[static_cast<size_t>(t)].NumElements(), seed);
      return t;
    };
    const int scale = constant("scale", {c, 1, 1}, 51), shift = constant("shift", {1, c, 1, 1}, 52);
    const int w = constant("w", {k, c, 3, 3}, 53);
    const int a = AddTensor(&g, "a", {1, c, hh, ww}), b = AddTensor(&g, "b", {1, c, hh, ww});
    const int d = AddTensor(&g, "d", {1, c, hh, ww}), r = AddTensor(&g, "r", {1, c, hh, ww});
    const int y = AddTensor(&g, "y", {1, k, hh, ww});
    Attribute pads;
    pads.ints = {1, 1, 1, 1};
    g.nodes.push_back(Node{"mul", "Mul", {x, scale}, {a}, {}});
    g.nodes.push_back(Node{"add", "Add", {a, shift}, {b}, {}});
    g.nodes.push_back(Node{"gate", "Mul", {gate, b}, {d}, {}});
    g.nodes.push_back(Node{"relu", "Relu", {d}, {r}, {}});
    g.nodes.push_back(Node{"conv", "Conv", {r, w}, {y}, {{"pads", pads}}});
    g.inputs = {x, gate};
    g.outputs = {y};
    if (chain_is_output) g.outputs.push_back(r);
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->fused_prologues(), chain_is_output ? 0 : 1);
    ASSERT_EQ((*e)->kernels().size(), chain_is_output ? 2u : 1u);
    if (!chain_is_output) {
      EXPECT_THAT((*e)->kernels()[0].source, HasSubstr("Mul+Add+Mul+Relu -> default conv2d"));
    }
    const std::vector<float>& sc = g.tensors[static_cast<size_t>(scale)].f32;
    const std::vector<float>& sh = g.tensors[static_cast<size_t>(shift)].f32;
    const std::vector<float>& wf = g.tensors[static_cast<size_t>(w)].f32;
    for (uint32_t seed : {61u, 62u}) {
      const std::vector<float> vx = Random(c * hh * ww, seed), vg = Random(c, seed + 10);
      std::vector<float> out(static_cast<size_t>(k * hh * ww)), chain(static_cast<size_t>(c * hh * ww));
      std::vector<float*> outs = {out.data()};
      if (chain_is_output) outs.push_back(chain.data());
      ASSERT_TRUE((*e)->Run({vx.data(), vg.data()}, outs).ok());
      auto pre = [&](int64_t ch, int64_t i, int64_t j) {
        const size_t at = static_cast<size_t>((ch * hh + i) * ww + j);
        return std::max(0.0, (static_cast<double>(vx[at]) * sc[static_cast<size_t>(ch)] + sh[static_cast<size_t>(ch)]) *
                                 vg[static_cast<size_t>(ch)]);
      };
      for (int64_t o = 0; o < k; ++o) {
        for (int64_t i = 0; i < hh; ++i) {
          for (int64_t j = 0; j < ww; ++j) {
            double want = 0;
            for (int64_t ch = 0; ch < c; ++ch)
              for (int64_t p = 0; p < 3; ++p)
                for (int64_t q = 0; q < 3; ++q) {
                  const int64_t ih = i + p - 1, iw = j + q - 1;
                  if (ih < 0 || ih >= hh || iw < 0 || iw >= ww) continue;
                  want += pre(ch, ih, iw) * wf[static_cast<size_t>(((o * c + ch) * 3 + p) * 3 + q)];
                }
            ASSERT_NEAR(out[static_cast<size_t>((o * hh + i) * ww + j)], want, 1e-3)
                << "seed " << seed << " at " << o << "," << i << "," << j;
          }
        }
      }
      if (chain_is_output) {
        for (int64_t ch = 0; ch < c; ++ch)
          ASSERT_NEAR(chain[static_cast<size_t>(ch * hh * ww)], pre(ch, 0, 0), 1e-5) << ch;
      }
    }
  }
}

// Pointwise convs whose output channels per group are not a multiple of 16 run as a
// matmul per group on the NCHW tensors (ShuffleNet's 60 channels, 20 per group):
// grouped with bias, residual and ReLU, and ungrouped with a Clip (a tail of
// pixels: 5 x 7). Both match a scalar reference; a 1x1 conv of 32 channels stays a
// conv.
TEST(ExecutorTest, PointwiseConvsOfOddWidthRunAsMatmuls) {
  struct Case {
    int64_t c, k, groups;
    bool bias, residual;
    std::string activation;
  };
  for (const Case& cs : std::vector<Case>{{12, 60, 3, true, true, "relu"},
                                          {8, 24, 1, false, false, "clip"},
                                          {8, 32, 1, true, false, ""}}) {
    Graph g;
    g.opset = 13;
    const int64_t hh = 5, ww = 7, cg = cs.c / cs.groups, kg = cs.k / cs.groups;
    auto constant = [&](const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
      const int t = AddTensor(&g, name, std::move(shape));
      g.tensors[static_cast<size_t>(t)].constant = true;
      g.tensors[static_cast<size_t>(t)].f32 = Random(g.tensors[static_cast<size_t>(t)].NumElements(), seed);
      return t;
    };
    const int x = AddTensor(&g, "x", {1, cs.c, hh, ww}), res = AddTensor(&g, "res", {1, cs.k, hh, ww});
    const int w = constant("w", {cs.k, cg, 1, 1}, 71), b = constant("b", {cs.k}, 72);
    const int lo = constant("lo", {}, 73), hi = constant("hi", {}, 74);
    g.tensors[static_cast<size_t>(lo)].f32 = {-0.5f};
    g.tensors[static_cast<size_t>(hi)].f32 = {1.5f};
    int y = AddTensor(&g, "conv", {1, cs.k, hh, ww});
    Attribute group;
    group.ints = {cs.groups};
    std::vector<int> conv_in = {x, w};
    if (cs.bias) conv_in.push_back(b);
    g.nodes.push_back(Node{"conv", "Conv", conv_in, {y}, {{"group", group}}});
    if (cs.residual) {
      const int sum = AddTensor(&g, "sum", {1, cs.k, hh, ww});
      g.nodes.push_back(Node{"add", "Add", {y, res}, {sum}, {}});
      y = sum;
    }
    if (!cs.activation.empty()) {
      const int act = AddTensor(&g, "act", {1, cs.k, hh, ww});
      g.nodes.push_back(cs.activation == "relu" ? Node{"relu", "Relu", {y}, {act}, {}}
                                                : Node{"clip", "Clip", {y, lo, hi}, {act}, {}});
      y = act;
    }
    g.inputs = {x};
    if (cs.residual) g.inputs.push_back(res);
    g.outputs = {y};
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ((*e)->kernels().size(), 1u);
    const std::string want_task =
        cs.k % 16 == 0 ? "default conv2d" : cs.groups > 1 ? "default batch_matmul B=3 M=20 N=35 K=4" : "default matmul M=24 N=35 K=8";
    EXPECT_THAT((*e)->kernels()[0].source, HasSubstr(want_task));
    const std::vector<float>& wf = g.tensors[static_cast<size_t>(w)].f32;
    const std::vector<float>& bf = g.tensors[static_cast<size_t>(b)].f32;
    for (uint32_t seed : {81u, 82u}) {
      const std::vector<float> vx = Random(cs.c * hh * ww, seed), vr = Random(cs.k * hh * ww, seed + 5);
      std::vector<float> out(static_cast<size_t>(cs.k * hh * ww));
      std::vector<const float*> ins = {vx.data()};
      if (cs.residual) ins.push_back(vr.data());
      ASSERT_TRUE((*e)->Run(ins, {out.data()}).ok());
      for (int64_t o = 0; o < cs.k; ++o) {
        for (int64_t p = 0; p < hh * ww; ++p) {
          double want = cs.bias ? bf[static_cast<size_t>(o)] : 0.0;
          for (int64_t ch = 0; ch < cg; ++ch) {
            want += static_cast<double>(vx[static_cast<size_t>((o / kg * cg + ch) * hh * ww + p)]) *
                    wf[static_cast<size_t>(o * cg + ch)];
          }
          if (cs.residual) want += vr[static_cast<size_t>(o * hh * ww + p)];
          if (cs.activation == "relu") want = std::max(want, 0.0);
          if (cs.activation == "clip") want = std::min(std::max(want, -0.5), 1.5);
          ASSERT_NEAR(out[static_cast<size_t>(o * hh * ww + p)], want, 1e-4)
              << cs.k << " channels, seed " << seed << " at " << o << "," << p;
        }
      }
    }
  }
}

// ShuffleNet's channel shuffle (Reshape to [1, g, C/g, H, W], Transpose [0, 2, 1, 3,
// 4], Reshape back) before a depthwise conv: the conv's copy of its input reads the
// shuffled channels (no Transpose kernel); when the shuffle's output is also a graph
// output the Transpose stays. Both match a scalar reference.
TEST(ExecutorTest, ConvsReadAChannelShuffleInPlace) {
  for (const bool shuffled_is_output : {false, true}) {
    Graph g;
    g.opset = 13;
    const int64_t groups = 3, c = 48, h = 5, w = 6;
    auto shape_constant = [&](const std::string& name, std::vector<int64_t> values) {
      const int t = AddTensor(&g, name, {static_cast<int64_t>(values.size())});
      g.tensors[static_cast<size_t>(t)].dtype = DType::kInt64;
      g.tensors[static_cast<size_t>(t)].constant = true;
      g.tensors[static_cast<size_t>(t)].i64 = std::move(values);
      return t;
    };
    const int x = AddTensor(&g, "x", {1, c, h, w}), r = AddTensor(&g, "r", {1, c, h, w});
    const int split_shape = shape_constant("split_shape", {1, groups, c / groups, h, w});
    const int back_shape = shape_constant("back_shape", {1, c, h, w});
    const int five = AddTensor(&g, "five", {1, groups, c / groups, h, w});
    const int swapped = AddTensor(&g, "swapped", {1, c / groups, groups, h, w});
    const int shuffled = AddTensor(&g, "shuffled", {1, c, h, w}), y = AddTensor(&g, "y", {1, c, h, w});
    const int f = AddTensor(&g, "f", {c, 1, 3, 3});
    g.tensors[static_cast<size_t>(f)].constant = true;
    g.tensors[static_cast<size_t>(f)].f32 = Random(c * 9, 91);
    Attribute perm, pads, group;
    perm.ints = {0, 2, 1, 3, 4};
    pads.ints = {1, 1, 1, 1};
    group.ints = {c};
    g.nodes.push_back(Node{"relu", "Relu", {x}, {r}, {}});
    g.nodes.push_back(Node{"split", "Reshape", {r, split_shape}, {five}, {}});
    g.nodes.push_back(Node{"transpose", "Transpose", {five}, {swapped}, {{"perm", perm}}});
    g.nodes.push_back(Node{"back", "Reshape", {swapped, back_shape}, {shuffled}, {}});
    g.nodes.push_back(Node{"dw", "Conv", {shuffled, f}, {y}, {{"pads", pads}, {"group", group}}});
    g.inputs = {x};
    g.outputs = {y};
    if (shuffled_is_output) g.outputs.push_back(shuffled);
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->fused_prologues(), shuffled_is_output ? 0 : 1);
    EXPECT_EQ((*e)->kernels().size(), shuffled_is_output ? 3u : 2u);  // Relu, (Transpose,) the conv
    const std::vector<float>& wf = g.tensors[static_cast<size_t>(f)].f32;
    const std::vector<float> vx = Random(c * h * w, 92);
    std::vector<float> out(static_cast<size_t>(c * h * w)), sh(out.size());
    std::vector<float*> outs = {out.data()};
    if (shuffled_is_output) outs.push_back(sh.data());
    ASSERT_TRUE((*e)->Run({vx.data()}, outs).ok());
    // Channel ch of the shuffle is channel (ch % g) * C/g + ch / g of the input.
    auto in = [&](int64_t ch, int64_t i, int64_t j) {
      const int64_t src = (ch % groups) * (c / groups) + ch / groups;
      return std::max(0.0f, vx[static_cast<size_t>((src * h + i) * w + j)]);
    };
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          double want = 0;
          for (int64_t p = 0; p < 3; ++p)
            for (int64_t q = 0; q < 3; ++q) {
              const int64_t ih = i + p - 1, iw = j + q - 1;
              if (ih >= 0 && ih < h && iw >= 0 && iw < w) want += in(ch, ih, iw) * wf[static_cast<size_t>((ch * 3 + p) * 3 + q)];
            }
          ASSERT_NEAR(out[static_cast<size_t>((ch * h + i) * w + j)], want, 1e-4) << ch << "," << i << "," << j;
          if (shuffled_is_output) {
            ASSERT_EQ(sh[static_cast<size_t>((ch * h + i) * w + j)], in(ch, i, j));
          }
        }
      }
    }
  }
}

TEST(ExecutorTest, ElementwiseChainsFuseIntoOneKernel) {
  // Gelu as exporters write it: x * (erf(x / c) + 1), x read twice, constants scalars.
  Graph g;
  g.opset = 17;
  const int x = AddTensor(&g, "x", {4, 33});
  auto scalar = [&](const std::string& name, float v) {
    const int t = AddTensor(&g, name, {});
    g.tensors[static_cast<size_t>(t)].constant = true;
    g.tensors[static_cast<size_t>(t)].f32 = {v};
    return t;
  };
  const int c = scalar("c", 1.41421356f), one = scalar("one", 1.0f);
  const int a = AddTensor(&g, "a", {4, 33}), b = AddTensor(&g, "b", {4, 33});
  const int d = AddTensor(&g, "d", {4, 33}), y = AddTensor(&g, "y", {4, 33});
  g.nodes.push_back(Node{"div", "Div", {x, c}, {a}, {}});
  g.nodes.push_back(Node{"erf", "Erf", {a}, {b}, {}});
  g.nodes.push_back(Node{"add", "Add", {b, one}, {d}, {}});
  g.nodes.push_back(Node{"mul", "Mul", {x, d}, {y}, {}});
  g.inputs = {x};
  g.outputs = {y};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ((*e)->kernels().size(), 1u);
  EXPECT_EQ((*e)->kernels()[0].source, "Div+Erf+Add+Mul");
  EXPECT_EQ((*e)->arena_bytes(), 2 * 576);  // x and y only (528 bytes each, 64-byte aligned)
  const std::vector<float> in = Random(4 * 33, 8);
  std::vector<float> out(in.size());
  ASSERT_TRUE((*e)->Run({in.data()}, {out.data()}).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_NEAR(out[i], in[i] * (std::erf(in[i] / 1.41421356f) + 1.0f), 1e-5) << i;
  }
}

TEST(ExecutorTest, ModelRunsRepeatablyAndThePlanReusesMemory) {
  absl::StatusOr<frontend::OnnxModel> model =
      frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/resblock.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Graph> g = ImportOnnx(*model);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  Executor& exec = **e;
  EXPECT_LT(exec.arena_bytes(), exec.unplanned_bytes() + exec.transient_bytes());
  EXPECT_GT(exec.transient_bytes(), 0);  // the convs' blocked outputs share the arena
  EXPECT_EQ(exec.default_tasks(), 3);
  // conv1 -> relu -> conv2 and conv2 (+residual, relu) -> the depthwise conv: both
  // pairs hand over the blocked layout directly.
  EXPECT_EQ(exec.cancelled_layout_pairs(), 2);
  ASSERT_EQ(exec.inputs().size(), 1u);
  const std::vector<float> x = Random(exec.inputs()[0].NumElements(), 6);
  std::vector<float> y1(static_cast<size_t>(exec.outputs()[0].NumElements()));
  std::vector<float> y2(y1.size());
  ASSERT_TRUE(exec.Run({x.data()}, {y1.data()}).ok());
  ASSERT_TRUE(exec.Run({x.data()}, {y2.data()}).ok());
  EXPECT_EQ(y1, y2);
  EXPECT_THAT(exec.Run({}, {y1.data()}).message(), HasSubstr("takes 1 inputs"));
}

// ResNet-18 imported, and the output of its default schedules (2 threads, `options`)
// on a random input drawn with `seed`.
struct ResNet18Reference {
  Graph graph;
  Target target;
  std::vector<float> input, expected;
};
void MakeResNet18Reference(uint64_t seed, const ExecutorOptions& options, ResNet18Reference* out) {
  absl::StatusOr<frontend::OnnxModel> model =
      frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/resnet18.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Graph> g = ImportOnnx(*model);
  ASSERT_TRUE(g.ok()) << g.status();
  out->graph = *std::move(g);
  out->target = TestTarget();
  out->target.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Executor>> reference = Executor::Create(out->graph, out->target, options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  out->input = Random((*reference)->inputs()[0].NumElements(), seed, 0, 1);
  out->expected.resize(static_cast<size_t>((*reference)->outputs()[0].NumElements()));
  ASSERT_TRUE((*reference)->Run({out->input.data()}, {out->expected.data()}).ok());
}

// ResNet-18 on random configs (every task its own blocks x and y, tiles, orders):
// the layouts handed over between convolutions (block outputs written once, blocked,
// for the next block's convolutions and its residual add), the max-pool fused into
// the stem and the streamed weights give the output of the default schedules with
// neither.
TEST(ExecutorTest, BlockedHandOversAndWeightPrefetchKeepResNet18sOutput) {
  ExecutorOptions plain;
  plain.prefetch_weight_bytes = 0;
  ResNet18Reference r;
  MakeResNet18Reference(8, plain, &r);
  if (HasFatalFailure()) return;
  const Graph* g = &r.graph;
  const Target& target = r.target;
  const std::vector<float>& x = r.input;
  const std::vector<float>& expected = r.expected;
  for (uint64_t seed : {1, 2}) {
    std::mt19937_64 rng(seed);
    ExecutorOptions options;
    options.prefetch_weight_bytes = 256 << 10;
    options.poison_arena = true;  // no kernel reads a transient buffer before writing it
    options.schedule = [&](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
      absl::StatusOr<Config> c = tmpl.Space(task, target).Sample(rng);
      if (!c.ok()) return c.status();
      return std::optional<Config>(*c);
    };
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, target, options);
    ASSERT_TRUE(e.ok()) << e.status();
    // 9 convolutions read a block's output (the stem's max-pooled one included; two
    // each after the downsampling blocks), 10 the output of the convolution before
    // them; 5 residual adds read it blocked. The max-pool runs in the stem's step.
    EXPECT_EQ((*e)->cancelled_layout_pairs(), 19);
    EXPECT_EQ((*e)->blocked_residuals(), 5);
    // Some producers write their single reader's layout from the register tile (8 and
    // 9 of the 19 with these seeds; it depends on the blocks the configs drew).
    EXPECT_GT((*e)->direct_writes(), 0);
    const std::vector<std::string> steps = (*e)->steps();
    EXPECT_EQ(std::count(steps.begin(), steps.end(), "MaxPool"), 0);
    EXPECT_THAT(steps[0], HasSubstr("+MaxPool"));
    std::vector<float> y(expected.size());
    ASSERT_TRUE((*e)->Run({x.data()}, {y.data()}).ok());
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], expected[i], 1e-3 + 1e-3 * std::fabs(expected[i])) << "seed " << seed << " output " << i;
    }
  }
}

// Winograd kernels in a model: every 3x3 stride-1 convolution (ResNet-18's 56x56,
// 28x28, 14x14 layers, and the 7x7 ones with partial tiles) runs its first Winograd
// heuristic, taking its blocked input from the layer before
// and handing its blocked output on; the output matches the default schedules'.
TEST(ExecutorTest, WinogradLayersKeepResNet18sOutput) {
  ResNet18Reference r;
  MakeResNet18Reference(9, ExecutorOptions(), &r);
  if (HasFatalFailure()) return;
  const Graph* g = &r.graph;
  const Target& target = r.target;
  const std::vector<float>& x = r.input;
  const std::vector<float>& expected = r.expected;
  int winograd = 0;
  ExecutorOptions options;
  options.poison_arena = true;
  options.schedule = [&](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
    for (const Config& c : tmpl.Heuristics(task, target)) {
      if (c.values().value("algorithm", "direct") != "direct") {
        ++winograd;
        return std::optional<Config>(c);
      }
    }
    return std::optional<Config>();
  };
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, target, options);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(winograd, 13);  // 4 + 3 + 3 + 3 of the 3x3 stride-1 convolutions, per occurrence
  EXPECT_EQ((*e)->cancelled_layout_pairs(), 19);
  // Every hand-over to a single reader is written from the kernel, as with direct
  // schedules (12 of 19): the Winograd output transforms among them (the first
  // convolution of each block but the stride-2 ones, the 7x7 ones' partial tiles
  // too) store into the reader's blocked input, bias and relu applied.
  EXPECT_EQ((*e)->direct_writes(), 12);
  std::vector<float> y(expected.size());
  ASSERT_TRUE((*e)->Run({x.data()}, {y.data()}).ok());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(y[i], expected[i], 1e-3 + 1e-3 * std::fabs(expected[i])) << "output " << i;
  }
}

// A QDQ model (tests/models/make_quantized.py) on the default schedules, and on
// random configs of its int8 layers with the arena poisoned: the outputs are equal
// exactly (integer layers; the float32 steps between them keep their defaults).
// Returns the default executor's steps; `handovers` is checked on both.
std::vector<std::string> CheckQuantizedModelOnRandomConfigs(const std::string& file, int handovers,
                                                            int min_sampled) {
  absl::StatusOr<frontend::OnnxModel> model = frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/" + file);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  absl::StatusOr<Graph> g = ImportOnnx(*model);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return {};
  Target target = TestTarget();
  target.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Executor>> reference = Executor::Create(*g, target);
  EXPECT_TRUE(reference.ok()) << reference.status();
  if (!reference.ok()) return {};
  EXPECT_EQ((*reference)->quantized_handovers(), handovers);
  const std::vector<float> x = Random((*reference)->inputs()[0].NumElements(), 12, -1, 1);
  std::vector<float> expected(static_cast<size_t>((*reference)->outputs()[0].NumElements()));
  EXPECT_TRUE((*reference)->Run({x.data()}, {expected.data()}).ok());
  std::mt19937_64 rng(5);
  ExecutorOptions options;
  options.poison_arena = true;
  int sampled = 0;
  options.schedule = [&](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
    if (task.op() != "qconv2d" && task.op() != "qdepthwise_conv2d") return std::optional<Config>();
    absl::StatusOr<Config> c = tmpl.Space(task, target).Sample(rng);
    if (!c.ok()) return c.status();
    ++sampled;
    return std::optional<Config>(*c);
  };
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, target, options);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  EXPECT_GE(sampled, min_sampled);
  EXPECT_EQ((*e)->quantized_handovers(), handovers);
  std::vector<float> y(expected.size());
  EXPECT_TRUE((*e)->Run({x.data()}, {y.data()}).ok());
  EXPECT_EQ(y, expected);
  return (*reference)->steps();
}

// MobileNetV2: the int8 layers hand their uint8 outputs to the next int8 layer
// (expand -> depthwise -> project in every block: 36; and 15 block outputs, each to
// the next block's expand, whose residual, if any, reads it from there); the residual
// Adds (and their round trips) run in the projections' way out.
TEST(ExecutorTest, QuantizedLayersHandOverUint8AndKeepTheOutput) {
  const std::vector<std::string> steps = CheckQuantizedModelOnRandomConfigs("mobilenetv2.qdq.onnx", 51, 40);
  ASSERT_FALSE(steps.empty());
  for (const std::string& step : steps) EXPECT_THAT(step, Not(StartsWith("Add"))) << step;
}

// ResNet-18: the stem's max-pool (and its round trip) runs in the first conv's way
// out, every residual Add in its block's second conv; the two convs of each block
// hand over uint8 (8), and so do the 4 block outputs read by the next block's first
// conv and, as its residual, its second (not those a downsampling conv reads too).
// The same model in the QOperator form (QLinearConv, QLinearAdd, MaxPool on uint8,
// QGemm: expanded into the QDQ form at read time) runs the same way.
TEST(ExecutorTest, QuantizedStemPoolsAndResidualsRunInTheConvs) {
  for (const char* file : {"resnet18.qdq.onnx", "resnet18.qop.onnx"}) {
    SCOPED_TRACE(file);
    const std::vector<std::string> steps = CheckQuantizedModelOnRandomConfigs(file, 12, 15);
    ASSERT_FALSE(steps.empty());
    for (const std::string& step : steps) {
      EXPECT_THAT(step, Not(StartsWith("Add"))) << step;
      EXPECT_THAT(step, Not(StartsWith("MaxPool"))) << step;
    }
  }
}

// ResNet-50: besides the 44 tensors with one int8 reader (and a residual one), the 3
// block outputs before a downsampling block are read by two 1x1 convs of the same
// padded layout: handed to the first, the second reads its buffer (47).
TEST(ExecutorTest, QuantizedTwinReadersShareOneBuffer) {
  EXPECT_FALSE(CheckQuantizedModelOnRandomConfigs("resnet50.qdq.onnx", 47, 20).empty());
}

// The dynamically quantized BERT layer (DynamicQuantizeLinear + MatMulInteger): its six
// MatMuls run on the int8 kernel, each quantizing its float32 input itself, on random
// configs of that kernel with the arena poisoned; the DynamicQuantizeLinears' own
// steps are gone, and the FFN's Gelu runs in its first layer's write-back. Against the float32 rewrite of the same definition (the int8 path
// taken away): equal up to float32's rounding of the integer sums (a rounding flip
// in a later quantization moves a value by at most one step of it).
TEST(ExecutorTest, DynamicallyQuantizedMatmulsRunOnTheInt8Kernel) {
  absl::StatusOr<frontend::OnnxModel> model =
      frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/bert_layer.dyn.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Graph> g = ImportOnnx(*model);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->dynamic_matmuls.size(), 6u);
  Target target = TestTarget();
  target.num_threads = 2;
  Graph float_path = *g;
  float_path.dynamic_matmuls.clear();
  absl::StatusOr<std::unique_ptr<Executor>> reference = Executor::Create(float_path, target);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ((*reference)->dropped_steps(), 0);
  std::mt19937_64 rng(7);
  ExecutorOptions options;
  options.poison_arena = true;
  int sampled = 0;
  options.schedule = [&](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
    if (task.op() != "qmatmul") return std::optional<Config>();
    absl::StatusOr<Config> c = tmpl.Space(task, target).Sample(rng);
    if (!c.ok()) return c.status();
    ++sampled;
    return std::optional<Config>(*c);
  };
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, target, options);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(sampled, 6);
  EXPECT_GT((*e)->dropped_steps(), 0);
  int qmatmuls = 0;
  for (const std::string& step : (*e)->steps()) {
    qmatmuls += step.find("qmatmul") != std::string::npos;
    for (const char* gone : {"ReduceMax", "ReduceMin", "Round", "Where", "Clip", "MatMul"}) {
      EXPECT_THAT(step, Not(StartsWith(gone))) << step;
    }
  }
  EXPECT_EQ(qmatmuls, 6);
  // The FFN's first layer computes Gelu (Div, Erf, Add, Mul, Mul) in its write-back.
  EXPECT_THAT((*e)->steps(), ::testing::Contains(HasSubstr("qmatmul M=128 N=3072 K=768 a_zero=128 per_channel=1 "
                                                           "dtype=u8s8f32+Div+Erf+Add+Mul+Mul")));
  for (const std::string& step : (*e)->steps()) EXPECT_THAT(step, Not(StartsWith("Div+Erf"))) << step;
  const std::vector<float> x = Random((*e)->inputs()[0].NumElements(), 21, -2, 2);
  std::vector<float> want(static_cast<size_t>((*e)->outputs()[0].NumElements())), got(want.size());
  ASSERT_TRUE((*reference)->Run({x.data()}, {want.data()}).ok());
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE((*e)->Run({x.data()}, {got.data()}).ok());
    double worst = 0, sum = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      sum += (got[i] - want[i]) * (got[i] - want[i]);
    }
    EXPECT_LT(worst, 0.02);
    EXPECT_LT(std::sqrt(sum / static_cast<double>(got.size())), 1e-3);
    std::printf("dynamic int8 vs float32 rewrite: max |diff| %.3g, rms %.3g\n", worst,
                std::sqrt(sum / static_cast<double>(got.size())));
  }
}

// On an AVX2-only CPU (x86-64-v3, as Zen 3: no AMX, no VNNI) the int8 layers take the
// vector kernels with the exact widening multiply-adds (natively here): ResNet-18's
// QDQ layers give this machine's (AMX) outputs within one step of the output's
// quantization (the float32 steps between int8 layers, the average pool, sum in
// another order with 8 lanes), the dynamic BERT layer its outputs within the bound
// its test against the float32 rewrite has.
TEST(ExecutorTest, QuantizedModelsKeepTheirOutputsOnAnAvx2OnlyCpu) {
  absl::StatusOr<Target> v3 = ParseTarget("-mcpu=x86-64-v3 -mattr=+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+movbe -threads=2",
                                          TestTarget());
  ASSERT_TRUE(v3.ok()) << v3.status();
  ASSERT_FALSE(v3->HasFeature("amx-int8"));
  ASSERT_FALSE(v3->HasFeature("avx512vnni"));
  Target host = TestTarget();
  host.num_threads = 2;
  for (const char* file : {"resnet18.qdq.onnx", "bert_layer.dyn.onnx"}) {
    SCOPED_TRACE(file);
    absl::StatusOr<frontend::OnnxModel> model = frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/" + file);
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<Graph> g = ImportOnnx(*model);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<std::unique_ptr<Executor>> a = Executor::Create(*g, host);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<std::unique_ptr<Executor>> b = Executor::Create(*g, *v3);
    ASSERT_TRUE(b.ok()) << b.status();
    int int8 = 0;
    for (const std::string& step : (*b)->steps()) int8 += step.find(" dtype=u8s8") != std::string::npos;
    EXPECT_GE(int8, 6);
    const std::vector<float> x = Random((*a)->inputs()[0].NumElements(), 31, -1, 1);
    std::vector<float> want(static_cast<size_t>((*a)->outputs()[0].NumElements())), got(want.size());
    ASSERT_TRUE((*a)->Run({x.data()}, {want.data()}).ok());
    ASSERT_TRUE((*b)->Run({x.data()}, {got.data()}).ok());
    double worst = 0, sum = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      sum += (got[i] - want[i]) * (got[i] - want[i]);
    }
    const double rms = std::sqrt(sum / static_cast<double>(got.size()));
    std::printf("%s: x86-64-v3 vs this CPU: max |diff| %.3g, rms %.3g\n", file, worst, rms);
    if (std::string(file) == "resnet18.qdq.onnx") {
      auto q = g->quantized_tensors.find(g->tensors[static_cast<size_t>(g->outputs[0])].name);
      ASSERT_NE(q, g->quantized_tensors.end());
      EXPECT_LE(worst, q->second.scale * 1.001);
    } else {
      EXPECT_LT(worst, 0.02);
      EXPECT_LT(rms, 1e-3);
    }
  }
}

TEST(ExecutorTest, DenseLayersAbsorbTheElementwiseChainAfterThem) {
  absl::StatusOr<frontend::OnnxModel> model =
      frontend::ReadOnnxModel(std::string(TF_TEST_MODELS_DIR) + "/bert_layer.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Graph> g = ImportOnnx(*model);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::string> steps = (*e)->steps();
  // The FFN's first layer computes Gelu (Div, Erf, Add, Mul, Mul) in its write-back;
  // the attention output and FFN output layers add their residual there.
  EXPECT_THAT(steps, ::testing::Contains(HasSubstr("N=3072 K=768 bias=1 relu=0 dtype=float32+Div+Erf+Add+Mul+Mul")));
  EXPECT_THAT(steps, ::testing::Contains(HasSubstr("N=768 K=3072 bias=1 relu=0 dtype=float32+Add")));
  for (const std::string& s : steps) {
    if (s.find("dense") == std::string::npos) {
      EXPECT_EQ(s.find("Erf"), std::string::npos) << s;  // no separate Gelu pass
    }
  }
}

// Token ids as an int64 input into an embedding Gather: negative ids count from the
// end, ids out of range are refused before the run, and ids computed out of range
// (ids + 3) give NaN rows rather than some other row.
TEST(ExecutorTest, RunTimeInt64IndicesIntoAGather) {
  Graph g;
  g.opset = 17;
  const int table = AddTensor(&g, "table", {5, 3}), ids = AddTensor(&g, "ids", {2, 2});
  const int three = AddTensor(&g, "three", {}), shifted = AddTensor(&g, "shifted", {2, 2});
  const int y = AddTensor(&g, "y", {2, 2, 3}), z = AddTensor(&g, "z", {2, 2, 3});
  for (int t : {ids, three, shifted}) g.tensors[static_cast<size_t>(t)].dtype = DType::kInt64;
  g.tensors[static_cast<size_t>(table)].constant = true;
  g.tensors[static_cast<size_t>(table)].f32 = Random(15, 3);
  g.tensors[static_cast<size_t>(three)].constant = true;
  g.tensors[static_cast<size_t>(three)].i64 = {3};
  g.nodes.push_back(Node{"lookup", "Gather", {table, ids}, {y}, {}});
  g.nodes.push_back(Node{"add", "Add", {ids, three}, {shifted}, {}});
  g.nodes.push_back(Node{"lookup2", "Gather", {table, shifted}, {z}, {}});
  g.inputs = {ids};
  g.outputs = {y, z};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->inputs()[0].index_bound, 5);
  const std::vector<float>& t = g.tensors[static_cast<size_t>(table)].f32;
  const std::vector<float> in = {0, -1, 1, 4};  // rows 0, 4, 1, 4; shifted 3, 2, 4, out of range
  std::vector<float> out(12), out2(12);
  ASSERT_TRUE((*e)->Run({in.data()}, {out.data(), out2.data()}).ok());
  const int rows[] = {0, 4, 1, 4}, rows2[] = {3, 2, 4, -1};
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[static_cast<size_t>(k * 3 + c)], t[static_cast<size_t>(rows[k] * 3 + c)]);
      if (rows2[k] < 0) {
        EXPECT_TRUE(std::isnan(out2[static_cast<size_t>(k * 3 + c)]));
      } else {
        EXPECT_EQ(out2[static_cast<size_t>(k * 3 + c)], t[static_cast<size_t>(rows2[k] * 3 + c)]);
      }
    }
  }
  for (const std::vector<float>& bad : {std::vector<float>{0, 5, 1, 2}, std::vector<float>{0, -6, 1, 2},
                                         std::vector<float>{0, 1.5f, 1, 2}}) {
    EXPECT_THAT((*e)->Run({bad.data()}, {out.data(), out2.data()}).message(),
                HasSubstr("it must be a whole number in [-5, 4] (it indexes a Gather)"));
  }
}

// At batch 1 a channel Split's parts and a channel Concat's inputs are ranges of one
// buffer: no copy runs, and the values are those of the copies.
TEST(ExecutorTest, ChannelSplitAndConcatAreViews) {
  Graph g;
  g.opset = 17;
  const int x = AddTensor(&g, "x", {1, 6, 4}), a = AddTensor(&g, "a", {1, 2, 4}), b = AddTensor(&g, "b", {1, 4, 4});
  const int ra = AddTensor(&g, "ra", {1, 2, 4}), rb = AddTensor(&g, "rb", {1, 4, 4});
  const int y = AddTensor(&g, "y", {1, 6, 4});
  Node split{"split", "Split", {x}, {a, b}, {}};
  split.attrs["axis"].ints = {1};
  split.attrs["split"].ints = {2, 4};
  g.nodes.push_back(split);
  g.nodes.push_back(Node{"relu_a", "Relu", {a}, {ra}, {}});
  g.nodes.push_back(Node{"neg_b", "Neg", {b}, {rb}, {}});
  Node concat{"concat", "Concat", {rb, ra}, {y}, {}};
  concat.attrs["axis"].ints = {1};
  g.nodes.push_back(concat);
  g.inputs = {x};
  g.outputs = {y};
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT((*e)->steps(), ::testing::ElementsAre("Relu", "Neg"));
  const std::vector<float> in = Random(24, 9);
  std::vector<float> out(24);
  ASSERT_TRUE((*e)->Run({in.data()}, {out.data()}).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], -in[static_cast<size_t>(8 + i)]);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[static_cast<size_t>(16 + i)], std::max(in[static_cast<size_t>(i)], 0.0f));
}

// A scalar NCHW convolution (batch 1, stride 1, `pad` on every side), ReLU after
// when `relu`.
std::vector<double> ConvReference(const std::vector<double>& in, int64_t c, int64_t h, int64_t w,
                                      const std::vector<float>& f, const std::vector<float>& bias, int64_t k,
                                      int64_t r, int64_t pad, bool relu) {
  std::vector<double> out(static_cast<size_t>(k * h * w));
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t p = 0; p < r; ++p)
            for (int64_t q = 0; q < r; ++q) {
              const int64_t ih = i + p - pad, iw = j + q - pad;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              sum += in[static_cast<size_t>((ch * h + ih) * w + iw)] *
                     f[static_cast<size_t>(((o * c + ch) * r + p) * r + q)];
            }
        out[static_cast<size_t>((o * h + i) * w + j)] = relu ? std::max(sum, 0.0) : sum;
      }
  return out;
}

// A fire module (SqueezeNet): a 1x1 squeeze conv read by a 1x1 and a 3x3 expand conv,
// their outputs concatenated (through a Dropout) into the next conv's input. The
// expand convs write their channels straight into the reader's blocked input at their
// offsets (the concatenation is never written); when a MaxPool reads the
// concatenation too, or an alias of it (Identity) is a graph output, it stays NCHW.
// All match a scalar reference.
TEST(ExecutorTest, ConcatenatedConvOutputsAreHandedOverBlocked) {
  for (const std::string also : {"", "pool", "identity"}) {
    const bool pool_reads_it = also == "pool", alias_is_output = also == "identity";
    Graph g;
    g.opset = 13;
    const int64_t c = 16, h = 6, w = 7, e1 = 32, e3 = 16, k = 16;
    auto constant = [&](const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
      const int t = AddTensor(&g, name, std::move(shape));
      g.tensors[static_cast<size_t>(t)].constant = true;
      g.tensors[static_cast<size_t>(t)].f32 = Random(g.tensors[static_cast<size_t>(t)].NumElements(), seed, -0.5f, 0.5f);
      return t;
    };
    const int x = AddTensor(&g, "x", {1, c, h, w});
    const int ws = constant("ws", {c, c, 1, 1}, 71), w1 = constant("w1", {e1, c, 1, 1}, 72);
    const int b1 = constant("b1", {e1}, 73), w3 = constant("w3", {e3, c, 3, 3}, 74);
    const int wk = constant("wk", {k, e1 + e3, 1, 1}, 75);
    const int s0 = AddTensor(&g, "s0", {1, c, h, w}), s = AddTensor(&g, "s", {1, c, h, w});
    const int a0 = AddTensor(&g, "a0", {1, e1, h, w}), a = AddTensor(&g, "a", {1, e1, h, w});
    const int b0 = AddTensor(&g, "b0", {1, e3, h, w}), b = AddTensor(&g, "b", {1, e3, h, w});
    const int cat = AddTensor(&g, "cat", {1, e1 + e3, h, w}), drop = AddTensor(&g, "drop", {1, e1 + e3, h, w});
    const int y = AddTensor(&g, "y", {1, k, h, w}), pooled = AddTensor(&g, "pooled", {1, e1 + e3, h - 1, w - 1});
    Attribute pads, axis, kernel;
    pads.ints = {1, 1, 1, 1};
    axis.ints = {1};
    kernel.ints = {2, 2};
    g.nodes.push_back(Node{"squeeze", "Conv", {x, ws}, {s0}, {}});
    g.nodes.push_back(Node{"squeeze_relu", "Relu", {s0}, {s}, {}});
    g.nodes.push_back(Node{"expand1", "Conv", {s, w1, b1}, {a0}, {}});
    g.nodes.push_back(Node{"expand1_relu", "Relu", {a0}, {a}, {}});
    g.nodes.push_back(Node{"expand3", "Conv", {s, w3}, {b0}, {{"pads", pads}}});
    g.nodes.push_back(Node{"expand3_relu", "Relu", {b0}, {b}, {}});
    g.nodes.push_back(Node{"concat", "Concat", {a, b}, {cat}, {{"axis", axis}}});
    g.nodes.push_back(Node{"dropout", "Dropout", {cat}, {drop}, {}});
    g.nodes.push_back(Node{"next", "Conv", {drop, wk}, {y}, {}});
    g.inputs = {x};
    g.outputs = {y};
    if (pool_reads_it) {
      g.nodes.push_back(Node{"pool", "MaxPool", {cat}, {pooled}, {{"kernel_shape", kernel}}});
      g.outputs.push_back(pooled);
    }
    const int same = AddTensor(&g, "same", {1, e1 + e3, h, w});
    if (alias_is_output) {
      g.nodes.push_back(Node{"identity", "Identity", {cat}, {same}, {}});
      g.outputs.push_back(same);
    }
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(g, TestTarget());
    ASSERT_TRUE(e.ok()) << e.status();
    // The squeeze output to both expand convs; the concatenation to the next conv.
    EXPECT_EQ((*e)->cancelled_layout_pairs(), also.empty() ? 3 : 2);
    auto f32 = [&](int t) { return g.tensors[static_cast<size_t>(t)].f32; };
    for (uint32_t seed : {81u, 82u}) {
      const std::vector<float> vx = Random(c * h * w, seed);
      std::vector<float> out(static_cast<size_t>(k * h * w)), pool_out(static_cast<size_t>((e1 + e3) * (h - 1) * (w - 1)));
      std::vector<float*> outs = {out.data()};
      std::vector<float> cat_out(static_cast<size_t>((e1 + e3) * h * w));
      if (pool_reads_it) outs.push_back(pool_out.data());
      if (alias_is_output) outs.push_back(cat_out.data());
      ASSERT_TRUE((*e)->Run({vx.data()}, outs).ok());
      const std::vector<double> sq =
          ConvReference(std::vector<double>(vx.begin(), vx.end()), c, h, w, f32(ws), {}, c, 1, 0, true);
      std::vector<double> both = ConvReference(sq, c, h, w, f32(w1), f32(b1), e1, 1, 0, true);
      const std::vector<double> third = ConvReference(sq, c, h, w, f32(w3), {}, e3, 3, 1, true);
      both.insert(both.end(), third.begin(), third.end());
      const std::vector<double> want = ConvReference(both, e1 + e3, h, w, f32(wk), {}, k, 1, 0, false);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-3) << "seed " << seed << " at " << i;
      if (alias_is_output) {
        for (size_t i = 0; i < cat_out.size(); ++i) ASSERT_NEAR(cat_out[i], both[i], 1e-4) << "concat at " << i;
      }
      if (pool_reads_it) {
        for (int64_t ch = 0; ch < e1 + e3; ++ch) {
          const double m = std::max({both[static_cast<size_t>(ch * h * w)], both[static_cast<size_t>(ch * h * w + 1)],
                                     both[static_cast<size_t>(ch * h * w + w)], both[static_cast<size_t>(ch * h * w + w + 1)]});
          ASSERT_NEAR(pool_out[static_cast<size_t>(ch * (h - 1) * (w - 1))], m, 1e-4) << ch;
        }
      }
    }
  }
}

TEST(ExecutorTest, NpyRoundTripAndBadFiles) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/a.npy";
  ASSERT_TRUE(WriteNpy(path, {2, 3}, {1, 2, 3, 4, 5, 6}).ok());
  std::vector<int64_t> shape;
  absl::StatusOr<std::vector<float>> back = ReadNpy(path, &shape);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*back, (std::vector<float>{1, 2, 3, 4, 5, 6}));

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/short.npy", std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  EXPECT_THAT(ReadNpy(dir + "/short.npy", &shape).status().message(), HasSubstr("needs 24 bytes"));
  std::string f8 = bytes;
  f8.replace(f8.find("<f4"), 3, "<f8");
  std::ofstream(dir + "/f8.npy", std::ios::binary) << f8;
  EXPECT_THAT(ReadNpy(dir + "/f8.npy", &shape).status().message(), HasSubstr("not little-endian float32"));
  std::ofstream(dir + "/text.npy") << "hello";
  EXPECT_THAT(ReadNpy(dir + "/text.npy", &shape).status().message(), HasSubstr("no NumPy magic"));
  EXPECT_TRUE(absl::IsNotFound(ReadNpy(dir + "/none.npy", &shape).status()));
  // Shapes that aborted the command (std::stoll threw, or the product overflowed).
  auto with_shape = [&](const std::string& dims) {
    std::string edited = bytes;
    edited.replace(edited.find("(2,3)"), 5, dims);
    std::ofstream(dir + "/shape.npy", std::ios::binary) << edited;
    return std::string(ReadNpy(dir + "/shape.npy", &shape).status().message());
  };
  EXPECT_THAT(with_shape("(abc,)"), HasSubstr("shape dimension 'abc' is not"));
  EXPECT_THAT(with_shape("(1e23,)"), HasSubstr("shape dimension '1e23' is not"));
  EXPECT_THAT(with_shape("(-6, -1)"), HasSubstr("shape dimension '-6' is not"));
  EXPECT_THAT(with_shape("(99999999999999999999,)"), HasSubstr("is not a non-negative integer"));
  EXPECT_THAT(with_shape("(4294967296, 4294967296, 16)"), HasSubstr("needs more data than"));
  EXPECT_THAT(with_shape("(3,3)"), HasSubstr("needs 36 bytes of data"));
  EXPECT_THAT(with_shape("(6,1)"), ::testing::IsEmpty());  // same bytes, other shape: fine
  EXPECT_THAT(with_shape("(9223372036854775807, 0)"), HasSubstr("needs 0 bytes"));

  // int64 files: whole numbers, read into float32 when they are exact there.
  ASSERT_TRUE(WriteNpy(path, {3}, {-2, 0, 16777216}, DType::kInt64).ok());
  back = ReadNpy(path, &shape);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, (std::vector<float>{-2, 0, 16777216}));
  std::ifstream in64(path, std::ios::binary);
  std::string ints((std::istreambuf_iterator<char>(in64)), std::istreambuf_iterator<char>());
  ASSERT_NE(ints.find("'<i8'"), std::string::npos);
  const int64_t big = (int64_t{1} << 24) + 1;
  ints.replace(ints.size() - 8, 8, reinterpret_cast<const char*>(&big), 8);
  std::ofstream(dir + "/big.npy", std::ios::binary) << ints;
  EXPECT_THAT(ReadNpy(dir + "/big.npy", &shape).status().message(), HasSubstr("element 2 is 16777217"));
}

}  // namespace
}  // namespace tuneforge::graph
