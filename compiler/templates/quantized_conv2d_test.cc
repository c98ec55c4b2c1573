// The qconv2d task's reference and template: the reference against the float32
// convolution's and against qmatmul's; the AMX kernel interpreted everywhere and built
// and run where the host has AMX, exactly equal to the reference.
#include "compiler/templates/quantized_conv2d.h"

#include <gtest/gtest.h>

#include <list>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/task/task.h"
#include "compiler/support/status.h"
#include "compiler/templates/template.h"

namespace tuneforge {
namespace {

Target Host(int threads) {
  Target target = DetectHostTarget("test");
  target.num_threads = threads;
  return target;
}

bool HasAmx(const Target& t) { return t.HasFeature("amx-int8") && t.HasFeature("amx-tile"); }

// A target the AMX kernel accepts, for the interpreter (which needs no AMX itself).
Target AmxTarget() {
  Target t = Host(2);
  if (!HasAmx(t)) t.features += ",+amx-tile,+amx-int8";
  return t;
}

// The s32 reference of (I - a_zero) * F equals the float32 convolution's reference of
// the same numbers (all sums below 2^24, so exact in float32), padding included: a
// padded position holds a_zero, a real zero.
TEST(QuantizedConv2dReferenceTest, EqualsTheFloatConvolutionOfTheShiftedInput) {
  const TuningTask q = *ParseTask("qconv2d N=2 C=5 H=7 W=6 K=3 R=3 S=2 stride=2 pad=1 a_zero=97 dtype=u8s8s32");
  const TuningTask f = *ParseTask("conv2d N=2 C=5 H=7 W=6 K=3 R=3 S=2 stride=2 pad=1");
  const std::vector<HostBuffer> inputs = MakeTypedInputs(q, 3);
  std::vector<float> image, filter;
  for (int64_t i = 0; i < inputs[0].elements(); ++i) image.push_back(inputs[0].As<uint8_t>()[i] - 97.0f);
  for (int64_t i = 0; i < inputs[1].elements(); ++i) filter.push_back(inputs[1].As<int8_t>()[i]);
  absl::StatusOr<HostBuffer> got = TypedReferenceOutput(q, inputs);
  absl::StatusOr<std::vector<float>> want = ReferenceOutput(f, {image, filter});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got->elements(), static_cast<int64_t>(want->size()));
  for (int64_t i = 0; i < got->elements(); ++i) ASSERT_EQ(got->As<int32_t>()[i], (*want)[i]) << i;
}

// A 1x1 stride-1 convolution is a matmul of the image's pixels (rows) by the filter's
// transpose: per-channel u8 outputs with a bias agree with qmatmul's reference.
TEST(QuantizedConv2dReferenceTest, OneByOneIsTheMatmulOfPixelsByChannels) {
  const TuningTask q =
      *ParseTask("qconv2d N=1 C=8 H=3 W=5 K=4 R=1 S=1 stride=1 pad=0 a_zero=5 bias=1 per_channel=1 out_zero=7 dtype=u8s8u8");
  const TuningTask m = *ParseTask("qmatmul M=15 N=4 K=8 a_zero=5 bias=1 per_channel=1 out_zero=7 dtype=u8s8u8");
  const std::vector<HostBuffer> conv_in = MakeTypedInputs(q, 9);
  std::vector<HostBuffer> mm_in = MakeTypedInputs(m, 9);
  for (int64_t p = 0; p < 15; ++p)
    for (int64_t c = 0; c < 8; ++c) mm_in[0].As<uint8_t>()[p * 8 + c] = conv_in[0].As<uint8_t>()[c * 15 + p];
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t k = 0; k < 4; ++k) mm_in[1].As<int8_t>()[c * 4 + k] = conv_in[1].As<int8_t>()[k * 8 + c];
  for (size_t i = 2; i < 4; ++i) mm_in[i] = conv_in[i];
  absl::StatusOr<HostBuffer> conv = TypedReferenceOutput(q, conv_in);
  absl::StatusOr<HostBuffer> mm = TypedReferenceOutput(m, mm_in);
  ASSERT_TRUE(conv.ok() && mm.ok());
  std::set<int> distinct;
  for (int64_t p = 0; p < 15; ++p) {
    for (int64_t k = 0; k < 4; ++k) {
      EXPECT_EQ(conv->As<uint8_t>()[k * 15 + p], mm->As<uint8_t>()[p * 4 + k]) << p << "," << k;
      distinct.insert(conv->As<uint8_t>()[k * 15 + p]);
    }
  }
  EXPECT_GT(distinct.size(), 10u);
}

TEST(QuantizedConv2dTemplateTest, BlockRowsSplitRowsEvenly) {
  EXPECT_EQ(QuantizedConvBlockRows(56), (std::vector<int64_t>{14, 16, 28, 32}));
  EXPECT_EQ(QuantizedConvBlockRows(7), (std::vector<int64_t>{7}));
  EXPECT_EQ(QuantizedConvBlockRows(28), (std::vector<int64_t>{14, 16, 28}));
  QuantizedConvShape d;
  d.s = 3, d.c = 64;
  EXPECT_EQ(d.cp(), 64);
  d.c = 3, d.s = 7;
  EXPECT_EQ(d.cp(), 4);  // 28 bytes: one shorter tile row per filter row
  d.c = 12, d.s = 7;
  EXPECT_EQ(d.cp(), 64);  // 84 bytes: 7 x Cp must be a multiple of 64
  d.c = 20, d.s = 1;
  EXPECT_EQ(d.cp(), 20);
  d.c = 30, d.s = 2;
  EXPECT_EQ(d.cp(), 32);
  d.c = 36, d.s = 2;
  EXPECT_EQ(d.cp(), 64);
}

// The host without AMX (the vector kernel's target), and without VNNI too.
Target WithoutAmx(Target t, bool vnni = true) {
  std::vector<std::string> kept;
  for (absl::string_view f : absl::StrSplit(t.features, ',')) {
    if (!absl::StartsWith(f, "+amx") && !(!vnni && absl::StrContains(f, "vnni"))) kept.emplace_back(f);
  }
  t.features = absl::StrJoin(kept, ",") + ",-amx-tile,-amx-int8" + (vnni ? "" : ",-avx512vnni,-avxvnni");
  return t;
}

// Inputs as the agent makes them, the kernel's buffers in entry order: interpreted,
// or built and run (prepack, kernel, unpack). Returns the output.
// `out_name`: the parameter read as the output (a hand-over buffer; "O" by default).
absl::StatusOr<HostBuffer> RunKernel(const ir::LoweredFunc& func, const std::vector<HostBuffer>& inputs,
                                     runtime::ElementType out_type, int64_t out_elements, const Target* built_for,
                                     const std::string& out_name = "O") {
  auto is_out = [&](const ir::BufferParam& p) { return out_name == "O" ? p.is_output : p.name == out_name; };
  if (!built_for) {
    ir::FloatBuffers floats;
    ir::IntBuffers ints;
    size_t next = 0;
    for (const ir::BufferParam& p : func.params) {
      const bool is_float = p.dtype == ir::DType::kFloat32;
      if (is_out(p) || p.is_internal) {
        if (is_float) floats[p.name].assign(p.NumElements(), 0.0f);
        else ints[p.name].assign(p.NumElements(), 0);
        continue;
      }
      const HostBuffer& in = inputs.at(next++);
      for (int64_t i = 0; i < in.elements(); ++i) {
        if (is_float) floats[p.name].push_back(in.As<float>()[i]);
        else ints[p.name].push_back(static_cast<int64_t>(runtime::ElementAt(in.type(), in.data(), i)));
      }
    }
    RETURN_IF_ERROR(ir::Interpret(func, &floats, &ints));
    HostBuffer out(out_type, out_elements);
    for (int64_t i = 0; i < out_elements; ++i) {
      if (out_type == runtime::ElementType::kFloat32) out.As<float>()[i] = floats[out_name][i];
      else if (out_type == runtime::ElementType::kUInt8) out.As<uint8_t>()[i] = static_cast<uint8_t>(ints[out_name][i]);
      else out.As<int32_t>()[i] = static_cast<int32_t>(ints[out_name][i]);
    }
    return out;
  }
  ASSIGN_OR_RETURN(Artifact artifact, BuildArtifact(func, *built_for));
  std::string error;
  auto module = runtime::LoadedModule::Load(artifact.shared_object, artifact.entry_symbol, &error);
  if (!module) return absl::InternalError(error);
  HostBuffer out(out_type, out_elements);
  runtime::PoisonBuffer(out.type(), out.data(), out.elements());
  std::list<HostBuffer> internal;
  std::vector<void*> buffers;
  size_t next = 0;
  for (const ir::BufferParam& p : func.params) {
    if (is_out(p)) buffers.push_back(out.data());
    else if (p.is_internal) buffers.push_back(internal.emplace_back(ElementTypeOf(p), p.NumElements()).data());
    else buffers.push_back(const_cast<void*>(inputs.at(next++).data()));
  }
  if (module->Prepack(buffers.data()) != 0 || module->Run(buffers.data()) != 0 || module->Unpack(buffers.data()) != 0)
    return absl::InternalError("the kernel failed");
  return out;
}

// Tasks of every output kind, strides 1 and 2, padded and not, a 7x7 filter over 3
// channels (padded to 4: filter rows of 28 bytes, shorter than a tile row), rows that split evenly and rows with a short
// last block, on both kernels: the AMX kernel's space (for a target with AMX) and the
// vector kernel's (without AMX). The naive config, the heuristics' first, and random
// points equal the reference exactly: interpreted (the naive and first heuristic
// config), and built and run where the host can (AMX only on an AMX host; the vector
// kernel with vpdpbusd where the host has it, and without it).
TEST(QuantizedConv2dTemplateTest, KernelsEqualTheReferenceExactly) {
  const Target host = Host(2);
  std::mt19937_64 rng(17);
  struct Engine {
    Target target;                 // the space and the kernel's
    std::vector<Target> run_on;    // built for and run on
  };
  std::vector<Engine> engines = {{AmxTarget(), {}}, {WithoutAmx(host), {WithoutAmx(host), WithoutAmx(host, false)}}};
  if (HasAmx(host)) engines[0].run_on = {host};
  for (const char* text : {"qconv2d N=1 C=64 H=9 W=20 K=32 R=3 S=3 stride=1 pad=1 a_zero=128 dtype=u8s8s32",
                           "qconv2d N=2 C=32 H=8 W=11 K=48 R=3 S=3 stride=2 pad=1 a_zero=3 bias=1 per_channel=1 "
                           "out_zero=120 dtype=u8s8u8",
                           "qconv2d N=1 C=3 H=12 W=12 K=16 R=7 S=7 stride=2 pad=3 a_zero=200 dtype=u8s8f32",
                           "qconv2d N=1 C=64 H=5 W=5 K=64 R=1 S=1 stride=1 pad=0 a_zero=1 per_channel=1 dtype=u8s8u8",
                           // K = 24: a last channel block past K (weights padded to 32)
                           "qconv2d N=1 C=96 H=6 W=7 K=24 R=1 S=1 stride=1 pad=0 a_zero=9 bias=1 per_channel=1 "
                           "out_zero=131 dtype=u8s8u8"}) {
    SCOPED_TRACE(text);
    const TuningTask task = *ParseTask(text);
    absl::StatusOr<const Template*> tmpl = FindTemplate(task);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    const std::vector<HostBuffer> inputs = MakeTypedInputs(task, 23);
    absl::StatusOr<HostBuffer> want = TypedReferenceOutput(task, inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    if (task.QuantizedOutput() == "u8") {
      std::set<uint8_t> values(want->As<uint8_t>(), want->As<uint8_t>() + want->elements());
      EXPECT_GT(values.size(), std::min<size_t>(64, static_cast<size_t>(want->elements()) / 8));
    }
    for (const Engine& engine : engines) {
      const ConfigSpace space = (*tmpl)->Space(task, engine.target);
      std::vector<Config> configs = {(*tmpl)->Naive(task, engine.target)};
      const std::vector<Config> heuristics = (*tmpl)->Heuristics(task, engine.target);
      ASSERT_FALSE(heuristics.empty());
      configs.push_back(heuristics.front());
      for (int i = 0; i < 3; ++i) configs.push_back(*space.Sample(rng));
      for (size_t i = 0; i < configs.size(); ++i) {
        const Config& config = configs[i];
        SCOPED_TRACE(config.ToJson());
        ASSERT_TRUE(space.Check(config).ok()) << space.Check(config);
        absl::StatusOr<ir::LoweredFunc> func = (*tmpl)->Instantiate(task, engine.target, config);
        ASSERT_TRUE(func.ok()) << func.status();
        if (i < 2) {  // the interpreter is slow: the naive and the first heuristic config
          absl::StatusOr<HostBuffer> got = RunKernel(*func, inputs, want->type(), want->elements(), nullptr);
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ(runtime::FirstMismatch(want->type(), got->data(), want->data(), want->elements(), 0, 0), -1);
        }
        for (const Target& target : engine.run_on) {
          SCOPED_TRACE(target.features.substr(target.features.size() - 40));
          absl::StatusOr<HostBuffer> got = RunKernel(*func, inputs, want->type(), want->elements(), &target);
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ(runtime::FirstMismatch(want->type(), got->data(), want->data(), want->elements(), 0, 0), -1);
        }
      }
    }
    // The AMX kernel is refused for a target without AMX, with the reason.
    absl::StatusOr<ir::LoweredFunc> refused = QuantizedConv2dAmxKernel(
        QuantizedConvShapeOf(task), (*tmpl)->Naive(task, AmxTarget()), WithoutAmx(host), "q");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(std::string(refused.status().message()).find("has none"), std::string::npos) << refused.status();
  }
}

TEST(QuantizedConv2dTemplateTest, UnsupportedShapesAndConfigsAreRefused) {
  const Target amx = AmxTarget();
  // K = 24: the vector kernel's channel vectors must divide it.
  const TuningTask task = *ParseTask("qconv2d N=1 C=16 H=6 W=6 K=24 R=3 S=3 stride=1 pad=1 dtype=u8s8s32");
  const Config vector(nlohmann::json{{"engine", "vnni"}, {"ow_reg", 2}, {"vec_lanes", 16}, {"oc_vecs", 1},
                                     {"loop_order", "pk"}, {"parallel", 0}});
  absl::StatusOr<ir::LoweredFunc> func = QuantizedConv2dVnniKernel(QuantizedConvShapeOf(task), vector, amx, "q");
  ASSERT_FALSE(func.ok());
  EXPECT_NE(std::string(func.status().message()).find("must divide K = 24"), std::string::npos) << func.status();
  const Config config(nlohmann::json{{"engine", "amx"}, {"block_rows", 6}, {"block_cols", 16}, {"loop_order", "pk"},
                                     {"parallel", 0}});
  const TuningTask ok = *ParseTask("qconv2d N=1 C=16 H=6 W=6 K=48 R=3 S=3 stride=1 pad=1 dtype=u8s8s32");
  Config wide = config;
  wide = Config(nlohmann::json{{"engine", "amx"}, {"block_rows", 6}, {"block_cols", 32}, {"loop_order", "pk"},
                               {"parallel", 0}});
  func = QuantizedConv2dAmxKernel(QuantizedConvShapeOf(ok), wide, amx, "q");
  ASSERT_FALSE(func.ok());
  EXPECT_NE(std::string(func.status().message()).find("divides K = 48"), std::string::npos);
}

// The depthwise reference equals the float32 depthwise convolution's of the shifted
// input, and its kernels (naive, first heuristic, random configs) equal it exactly:
// interpreted, and built for the host (vpmovzxbd + vpmulld where it has them).
TEST(QuantizedDepthwiseTest, ReferenceAndKernelsAreExact) {
  {
    const TuningTask q = *ParseTask("qdepthwise_conv2d N=2 C=8 H=7 W=6 R=3 S=3 stride=2 pad=1 a_zero=97 dtype=u8s8s32");
    const TuningTask f = *ParseTask("depthwise_conv2d N=2 C=8 H=7 W=6 R=3 S=3 stride=2 pad=1");
    const std::vector<HostBuffer> inputs = MakeTypedInputs(q, 5);
    std::vector<float> image, filter;
    for (int64_t i = 0; i < inputs[0].elements(); ++i) image.push_back(inputs[0].As<uint8_t>()[i] - 97.0f);
    for (int64_t i = 0; i < inputs[1].elements(); ++i) filter.push_back(inputs[1].As<int8_t>()[i]);
    absl::StatusOr<HostBuffer> got = TypedReferenceOutput(q, inputs);
    absl::StatusOr<std::vector<float>> want = ReferenceOutput(f, {image, filter});
    ASSERT_TRUE(got.ok() && want.ok());
    for (int64_t i = 0; i < got->elements(); ++i) ASSERT_EQ(got->As<int32_t>()[i], (*want)[i]) << i;
  }
  const Target host = Host(2);
  std::mt19937_64 rng(29);
  for (const char* text : {"qdepthwise_conv2d N=1 C=32 H=12 W=13 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 "
                           "out_zero=100 dtype=u8s8u8",
                           "qdepthwise_conv2d N=2 C=48 H=9 W=9 R=3 S=3 stride=2 pad=1 a_zero=5 bias=1 dtype=u8s8s32",
                           "qdepthwise_conv2d N=1 C=12 H=7 W=7 R=5 S=5 stride=1 pad=2 a_zero=250 dtype=u8s8f32"}) {
    SCOPED_TRACE(text);
    const TuningTask task = *ParseTask(text);
    absl::StatusOr<const Template*> tmpl = FindTemplate(task);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    const std::vector<HostBuffer> inputs = MakeTypedInputs(task, 31);
    absl::StatusOr<HostBuffer> want = TypedReferenceOutput(task, inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    const ConfigSpace space = (*tmpl)->Space(task, host);
    std::vector<Config> configs = {(*tmpl)->Naive(task, host), (*tmpl)->Heuristics(task, host).front()};
    for (int i = 0; i < 3; ++i) configs.push_back(*space.Sample(rng));
    for (size_t i = 0; i < configs.size(); ++i) {
      SCOPED_TRACE(configs[i].ToJson());
      ASSERT_TRUE(space.Check(configs[i]).ok()) << space.Check(configs[i]);
      absl::StatusOr<ir::LoweredFunc> func = (*tmpl)->Instantiate(task, host, configs[i]);
      ASSERT_TRUE(func.ok()) << func.status();
      std::vector<const Target*> runs = {&host};
      if (i < 2) runs.insert(runs.begin(), nullptr);  // interpreted too
      for (const Target* target : runs) {
        absl::StatusOr<HostBuffer> got = RunKernel(*func, inputs, want->type(), want->elements(), target);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(runtime::FirstMismatch(want->type(), got->data(), want->data(), want->elements(), 0, 0), -1)
            << (target ? "built" : "interpreted");
      }
    }
  }
  EXPECT_FALSE(ParseTask("qdepthwise_conv2d N=1 C=6 H=7 W=7 R=3 S=3 stride=1 pad=1 dtype=u8s8s32").ok());
}

// Inside a model (InstantiateQuantizedConvInModel): fed the float32 values a QDQ model
// holds (in_scale x (q - a_zero), wscale[k] x q_w, in_scale x wscale[k] x q_bias), the
// kernel writes out_scale x (q_out - out_zero) for exactly the q_out the standalone
// kernel's reference gives with multipliers in_scale x wscale[k] / out_scale:
// interpreted, and built for the host.
TEST(QuantizedConv2dTemplateTest, FloatBoundaryRecoversTheIntegersExactly) {
  const Target host = Host(2);
  for (const char* text : {"qconv2d N=1 C=32 H=9 W=11 K=32 R=3 S=3 stride=1 pad=1 a_zero=5 bias=1 per_channel=1 "
                           "out_zero=100 dtype=u8s8u8",
                           "qconv2d N=1 C=3 H=20 W=19 K=32 R=7 S=7 stride=2 pad=3 a_zero=120 bias=1 per_channel=1 "
                           "out_zero=90 dtype=u8s8u8",
                           "qconv2d N=1 C=32 H=9 W=10 K=24 R=1 S=1 stride=1 pad=0 a_zero=60 bias=1 per_channel=1 "
                           "out_zero=140 dtype=u8s8u8",
                           "qdepthwise_conv2d N=1 C=16 H=10 W=9 R=3 S=3 stride=2 pad=1 a_zero=130 bias=1 per_channel=1 "
                           "out_zero=7 dtype=u8s8u8"}) {
    SCOPED_TRACE(text);
    const TuningTask task = *ParseTask(text);
    const bool depthwise = task.op() == "qdepthwise_conv2d";
    const int64_t k = depthwise ? task.Param("C") : task.Param("K");
    const double in_scale = 0.037, out_scale = 0.21;
    std::vector<HostBuffer> q = MakeTypedInputs(task, 41);  // I u8, F s8, bias s32, scale f32
    std::vector<float> wscale(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      wscale[static_cast<size_t>(j)] = 0.004f * static_cast<float>(1 + j % 5);
      q[3].As<float>()[j] = static_cast<float>(in_scale * wscale[static_cast<size_t>(j)] / out_scale);
    }
    absl::StatusOr<HostBuffer> want_q = TypedReferenceOutput(task, q);
    ASSERT_TRUE(want_q.ok()) << want_q.status();
    HostBuffer want(runtime::ElementType::kFloat32, want_q->elements());
    std::set<uint8_t> distinct;
    for (int64_t i = 0; i < want.elements(); ++i) {
      distinct.insert(want_q->As<uint8_t>()[i]);
      want.As<float>()[i] = (static_cast<float>(want_q->As<uint8_t>()[i]) - static_cast<float>(task.Param("out_zero"))) *
                            static_cast<float>(out_scale);
    }
    EXPECT_GT(distinct.size(), 20u);
    // The float32 inputs a QDQ model holds, as its DequantizeLinears compute them.
    const int64_t per_channel = q[1].elements() / k;
    std::vector<HostBuffer> f;
    f.push_back(HostBuffer(runtime::ElementType::kFloat32, q[0].elements()));
    for (int64_t i = 0; i < q[0].elements(); ++i) {
      f[0].As<float>()[i] = static_cast<float>(q[0].As<uint8_t>()[i] - task.Param("a_zero")) * static_cast<float>(in_scale);
    }
    f.push_back(HostBuffer(runtime::ElementType::kFloat32, q[1].elements()));
    for (int64_t i = 0; i < q[1].elements(); ++i) {
      f[1].As<float>()[i] = static_cast<float>(q[1].As<int8_t>()[i]) * wscale[static_cast<size_t>(i / per_channel)];
    }
    f.push_back(HostBuffer(runtime::ElementType::kFloat32, k));
    for (int64_t j = 0; j < k; ++j) {
      f[2].As<float>()[j] = static_cast<float>(q[2].As<int32_t>()[j]) *
                            static_cast<float>(in_scale * wscale[static_cast<size_t>(j)]);
    }
    f.push_back(q[3]);
    f.push_back(HostBuffer::FromFloats(wscale));
    absl::StatusOr<const Template*> tmpl = FindTemplate(task);
    ASSERT_TRUE(tmpl.ok());
    absl::StatusOr<ir::LoweredFunc> func =
        InstantiateQuantizedConvInModel(task, host, (*tmpl)->Heuristics(task, host).front(), in_scale, out_scale);
    ASSERT_TRUE(func.ok()) << func.status();
    for (const Target* target : {static_cast<const Target*>(nullptr), &host}) {
      absl::StatusOr<HostBuffer> got = RunKernel(*func, f, runtime::ElementType::kFloat32, want.elements(), target);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(runtime::FirstMismatch(want.type(), got->data(), want.data(), want.elements(), 0, 0), -1)
          << (target ? "built" : "interpreted");
    }
    // Handed over: the uint8 results written into the next layer's padded input
    // (border 2, 4 channels past K), each at its place; nothing else written.
    const int64_t n = task.Param("N"), oh = want_q->elements() / (n * k), pad = 2, cp = k + 4;
    const QuantizedConvShape shape = QuantizedConvShapeOf(task);
    ASSERT_EQ(shape.oh() * shape.ow(), oh);
    const int64_t hp = shape.oh() + 2 * pad, wp = shape.ow() + 2 * pad;
    const QuantizedHandOver into{"next", pad, cp};
    absl::StatusOr<ir::LoweredFunc> handing =
        InstantiateQuantizedConvInModel(task, host, (*tmpl)->Heuristics(task, host).front(), in_scale, out_scale, &into);
    ASSERT_TRUE(handing.ok()) << handing.status();
    EXPECT_FALSE(handing->unpack);
    for (const ir::BufferParam& p : handing->params) EXPECT_NE(p.name, "O");
    for (const Target* target : {static_cast<const Target*>(nullptr), &host}) {
      absl::StatusOr<HostBuffer> got =
          RunKernel(*handing, f, runtime::ElementType::kUInt8, n * hp * wp * cp, target, "next");
      ASSERT_TRUE(got.ok()) << got.status();
      int64_t mismatches = 0;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t j = 0; j < k; ++j) {
          for (int64_t y = 0; y < shape.oh(); ++y) {
            for (int64_t x = 0; x < shape.ow(); ++x) {
              const uint8_t expect = want_q->As<uint8_t>()[((b * k + j) * shape.oh() + y) * shape.ow() + x];
              mismatches += got->As<uint8_t>()[((b * hp + y + pad) * wp + x + pad) * cp + j] != expect;
            }
          }
        }
      }
      EXPECT_EQ(mismatches, 0) << (target ? "built" : "interpreted");
    }
  }
}

}  // namespace
}  // namespace tuneforge
