// Importing ONNX models into the graph IR: shapes inferred, shape computations and
// BatchNormalization folded, dead nodes removed, and errors that name the node.
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace tuneforge::graph {
namespace {

using ::testing::HasSubstr;

const std::string kModels = TF_TEST_MODELS_DIR;

absl::StatusOr<Graph> Import(const std::string& path) {
  absl::StatusOr<frontend::OnnxModel> model = frontend::ReadOnnxModel(path);
  if (!model.ok()) return model.status();
  absl::Status supported = frontend::CheckSupported(*model);
  if (!supported.ok()) return supported;
  return ImportOnnx(*model);
}

std::vector<std::string> Ops(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op);
  return ops;
}

const Tensor& Named(const Graph& g, const std::string& name) {
  int id = g.Find(name);
  EXPECT_GE(id, 0) << name;
  return g.tensors[static_cast<size_t>(std::max(id, 0))];
}

class GraphImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_graph_" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The import error of `model` after `edit`.
  std::string ErrorAfter(const std::string& model, const std::function<void(onnx::ModelProto*)>& edit) {
    onnx::ModelProto proto;
    std::ifstream in(kModels + "/" + model, std::ios::binary);
    EXPECT_TRUE(proto.ParseFromIstream(&in));
    edit(&proto);
    const std::string path = dir_ + "/edited.onnx";
    std::ofstream(path, std::ios::binary) << proto.SerializeAsString();
    absl::StatusOr<Graph> g = Import(path);
    return g.ok() ? "" : std::string(g.status().message());
  }
  std::string dir_;
};

TEST_F(GraphImportTest, MlpShapesAreInferred) {
  absl::StatusOr<Graph> g = Import(kModels + "/mlp.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"MatMul", "Add", "Relu", "Gemm", "Softmax"}));
  EXPECT_EQ(Named(*g, "h0").shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(Named(*g, "h2").shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(Named(*g, "logits").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(Named(*g, "y").shape, (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(g->inputs.size(), 1u);
  EXPECT_THAT(PrintGraph(*g),
              HasSubstr("fc2 = Gemm(h2, w2=const[4, 32], b2=const[4]) {transB=1} -> "
                        "logits: float32[2, 4]"));
}

TEST_F(GraphImportTest, ConvBnModelIsFoldedAndPruned) {
  absl::StatusOr<Graph> g = Import(kModels + "/convbn.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  // BatchNormalization folded into the conv, the Shape/Gather/Unsqueeze/Concat chain
  // folded into the Reshape's constant shape, the unused Sigmoid gone.
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Conv", "Relu", "MaxPool", "Reshape", "Gemm"}));
  const Node& conv = g->nodes[0];
  EXPECT_EQ(conv.Ints("pads"), (std::vector<int64_t>{0, 0, 1, 1}));  // SAME_UPPER resolved
  EXPECT_EQ(g->tensors[static_cast<size_t>(conv.outputs[0])].name, "b");  // the BN's output
  EXPECT_EQ(Named(*g, "b").shape, (std::vector<int64_t>{1, 8, 8, 8}));
  EXPECT_EQ(Named(*g, "p").shape, (std::vector<int64_t>{1, 8, 4, 4}));
  const Tensor& flat_shape = Named(*g, "flat_shape");
  EXPECT_TRUE(flat_shape.constant);
  EXPECT_EQ(flat_shape.i64, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(Named(*g, "flat").shape, (std::vector<int64_t>{1, 128}));
  EXPECT_EQ(Named(*g, "y").shape, (std::vector<int64_t>{1, 10}));

  // The folded conv computes conv + BN: one output element, computed both ways from
  // the original parameters of the file.
  absl::StatusOr<frontend::OnnxModel> model = frontend::ReadOnnxModel(kModels + "/convbn.onnx");
  ASSERT_TRUE(model.ok());
  std::map<std::string, std::vector<float>> orig;
  for (const auto& t : model->proto.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT) continue;
    std::vector<float> v(t.raw_data().size() / 4);
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    orig[t.name()] = v;
  }
  std::vector<float> x(3 * 16 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  auto conv_at = [&](const std::vector<float>& w, float bias, int c, int oh, int ow) {
    double sum = bias;
    for (int ci = 0; ci < 3; ++ci)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) {
          int ih = oh * 2 + kh, iw = ow * 2 + kw;  // pads begin at 0
          if (ih >= 16 || iw >= 16) continue;
          sum += w[static_cast<size_t>(((c * 3 + ci) * 3 + kh) * 3 + kw)] *
                 x[static_cast<size_t>((ci * 16 + ih) * 16 + iw)];
        }
    return sum;
  };
  const Tensor& fw = g->tensors[static_cast<size_t>(conv.inputs[1])];
  const Tensor& fb = g->tensors[static_cast<size_t>(conv.inputs[2])];
  for (int c : {0, 3, 7}) {
    const size_t cc = static_cast<size_t>(c);
    double raw = conv_at(orig["conv_w"], orig["conv_b"][cc], c, 7, 5);  // at the padded edge
    double bn = (raw - orig["bn_mean"][cc]) / std::sqrt(orig["bn_var"][cc] + 1e-5) *
                    orig["bn_scale"][cc] + orig["bn_bias"][cc];
    EXPECT_NEAR(conv_at(fw.f32, fb.f32[cc], c, 7, 5), bn, 1e-4 * (1 + std::fabs(bn))) << c;
  }
}

TEST_F(GraphImportTest, ShapeErrorsNameTheNode) {
  EXPECT_THAT(ErrorAfter("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
                    ->mutable_shape()->mutable_dim(1)->set_dim_value(17);
              }),
              HasSubstr("node 'fc1' (#0, MatMul): inner dimensions differ: [2, 17] x [16, 32]"));
  EXPECT_THAT(ErrorAfter("convbn.onnx", [](onnx::ModelProto* m) {
                for (auto& t : *m->mutable_graph()->mutable_initializer()) {
                  if (t.name() != "minus_one") continue;
                  int64_t v = 100;
                  t.set_raw_data(std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
                }
              }),
              HasSubstr("node 'flatten' (#9, Reshape): cannot reshape [1, 8, 4, 4] (128 "
                        "elements) to [1, 100]"));
  EXPECT_THAT(ErrorAfter("convbn.onnx", [](onnx::ModelProto* m) {
                auto* a = m->mutable_graph()->mutable_node(0)->add_attribute();
                a->set_name("group");
                a->set_type(onnx::AttributeProto::INT);
                a->set_i(2);
              }),
              HasSubstr("node 'conv' (#0, Conv): attribute group 2 does not fit input "
                        "[1, 3, 16, 16] and weight [8, 3, 3, 3]"));
  EXPECT_THAT(ErrorAfter("convbn.onnx", [](onnx::ModelProto* m) {
                for (auto& a : *m->mutable_graph()->mutable_node(0)->mutable_attribute()) {
                  if (a.name() == "auto_pad") a.set_s("SAME_SIDEWAYS");
                }
              }),
              HasSubstr("attribute auto_pad 'SAME_SIDEWAYS' is unknown"));
  EXPECT_THAT(ErrorAfter("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_node(1)->set_input(1, "no_such_tensor");
              }),
              HasSubstr("node 'fc1_bias' (#1, Add): input 'no_such_tensor' is not defined"));
  // A unary op without its input (found by fuzzing: its int64 shortcut read input 0
  // before the input count was checked).
  for (const char* op : {"Relu", "Neg"}) {
    EXPECT_THAT(ErrorAfter("mlp.onnx", [op](onnx::ModelProto* m) {
                  onnx::NodeProto* n = m->mutable_graph()->mutable_node(2);
                  n->set_op_type(op);
                  n->clear_input();
                }),
                HasSubstr(std::string(op) + "): takes 1 inputs, got 0"))
        << op;
    EXPECT_THAT(ErrorAfter("mlp.onnx", [op](onnx::ModelProto* m) {
                  onnx::NodeProto* n = m->mutable_graph()->mutable_node(2);
                  n->set_op_type(op);
                  n->set_input(0, "");
                }),
                HasSubstr(std::string(op) + "): input 0 is required"))
        << op;
  }
}

absl::StatusOr<TaskTable> Tasks(const std::string& model) {
  absl::StatusOr<Graph> g = Import(kModels + "/" + model);
  if (!g.ok()) return g.status();
  return ExtractTasks(*g);
}

// Pad's index map against numpy.pad: x = [a b c d], 3 before and 5 after.
TEST(PadSourceTest, ModesMatchNumpyPad) {
  auto row = [](const std::string& mode, int64_t begin, int64_t end) {
    std::vector<int64_t> r;
    for (int64_t o = 0; o < 4 + begin + end; ++o) r.push_back(PadSource(o, begin, end, 4, mode));
    return r;
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(row("constant", 3, 5), (V{-1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, -1}));
  EXPECT_EQ(row("edge", 3, 5), (V{0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3, 3}));
  // np.pad(range(4), (3, 5), "reflect") = [3 2 1 0 1 2 3 2 1 0 1 2]
  EXPECT_EQ(row("reflect", 3, 5), (V{3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2}));
  // np.pad(range(4), (3, 5), "wrap") = [1 2 3 0 1 2 3 0 1 2 3 0]
  EXPECT_EQ(row("wrap", 3, 5), (V{1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0}));
  // Cropping one element off the front, then wrapping what is kept ([b c d]).
  EXPECT_EQ(row("wrap", -1, 2), (V{1, 2, 3, 1, 2}));
  EXPECT_EQ(row("reflect", -1, 3), (V{1, 2, 3, 2, 1, 2}));
  EXPECT_EQ(PadSource(5, 2, 4, 1, "reflect"), 0);  // one element reflects onto itself
}

TEST(TaskExtractionTest, DenseLayersAbsorbTheirBiasAndRelu) {
  absl::StatusOr<TaskTable> t = Tasks("mlp.onnx");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->tasks.size(), 2u);
  EXPECT_EQ(t->tasks[0].task, "dense M=2 N=32 K=16 bias=1 relu=1 dtype=float32");
  EXPECT_EQ(t->tasks[0].nodes, (std::vector<std::string>{"fc1", "fc1_bias", "relu1"}));
  // Gemm with transB and a constant C: dense with bias (weights transposed at load).
  EXPECT_EQ(t->tasks[1].task, "dense M=2 N=4 K=32 bias=1 relu=0 dtype=float32");
  ASSERT_EQ(t->leftovers.size(), 1u);
  EXPECT_EQ(t->leftovers[0].op, "Softmax");
}

TEST(TaskExtractionTest, IdenticalConvsMergeWithAWeightAndKeepTheirEpilogues) {
  absl::StatusOr<TaskTable> t = Tasks("resblock.onnx");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->tasks.size(), 2u);
  EXPECT_EQ(t->tasks[0].task, "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 dtype=float32");
  EXPECT_EQ(t->tasks[0].weight, 2);
  EXPECT_EQ(t->tasks[0].nodes, (std::vector<std::string>{"conv1", "relu1", "conv2", "residual",
                                                         "relu2"}));
  EXPECT_EQ(t->tasks[0].unfused_epilogue, "bias+relu | bias+residual+relu");
  EXPECT_EQ(t->tasks[1].task, "depthwise_conv2d N=1 C=8 H=8 W=8 R=3 S=3 stride=1 pad=1 dtype=float32");
  EXPECT_EQ(t->tasks[1].unfused_epilogue, "bias+clip");
  EXPECT_TRUE(t->leftovers.empty());
  // Shares: 2 x 2*8*8*8*8*9 flops of conv against 2*8*8*8*9 of the depthwise layer.
  EXPECT_NEAR(t->tasks[0].flops * 2 / t->total_flops, 16.0 / 17.0, 1e-9);
}

TEST(TaskExtractionTest, ConvolutionsNoTemplateTakesAreLeftOversWithTheReason) {
  absl::StatusOr<TaskTable> t = Tasks("convbn.onnx");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->tasks.size(), 1u);
  EXPECT_EQ(t->tasks[0].task, "dense M=1 N=10 K=128 bias=1 relu=0 dtype=float32");
  ASSERT_FALSE(t->leftovers.empty());
  EXPECT_EQ(t->leftovers[0].node, "conv");
  EXPECT_EQ(t->leftovers[0].reason, "Conv with asymmetric padding: no template");
}

TEST(TaskExtractionTest, GroupedConvolutionsAreOneConvTaskWithGroups) {
  // resblock's conv1 made grouped (group 2: weight [8, 4, 3, 3]): one conv2d task
  // with groups=2 (its bias and ReLU fused as an ungrouped one's); the depthwise conv
  // stays depthwise.
  onnx::ModelProto proto;
  std::ifstream in(kModels + "/resblock.onnx", std::ios::binary);
  ASSERT_TRUE(proto.ParseFromIstream(&in));
  for (onnx::NodeProto& n : *proto.mutable_graph()->mutable_node()) {
    if (n.name() != "conv1") continue;
    onnx::AttributeProto* group = n.add_attribute();
    group->set_name("group");
    group->set_type(onnx::AttributeProto::INT);
    group->set_i(2);
  }
  for (onnx::TensorProto& t : *proto.mutable_graph()->mutable_initializer()) {
    if (t.name() != "w1") continue;
    t.set_dims(1, 4);
    std::string raw = t.raw_data();
    raw.resize(raw.size() / 2);
    t.set_raw_data(raw);
    t.clear_float_data();
  }
  const std::string path = (std::filesystem::temp_directory_path() / "tf_grouped_conv.onnx").string();
  std::ofstream(path, std::ios::binary) << proto.SerializeAsString();
  absl::StatusOr<Graph> g = Import(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Conv", "Relu", "Conv", "Add", "Relu", "Conv", "Clip"}));
  EXPECT_EQ(g->nodes[0].Int("group", 0), 2);
  absl::StatusOr<TaskTable> t = ExtractTasks(*g);
  ASSERT_TRUE(t.ok()) << t.status();
  bool found = false;
  for (const ExtractedTask& task : t->tasks) {
    if (task.task == "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 groups=2 dtype=float32") {
      found = true;
      EXPECT_EQ(task.weight, 1);
      EXPECT_EQ(task.unfused_epilogue, "bias+relu");  // fused at run time as for G = 1
    }
  }
  EXPECT_TRUE(found);
  for (const Leftover& l : t->leftovers) EXPECT_THAT(l.reason, ::testing::Not(HasSubstr("grouped")));
}

TEST(TaskExtractionTest, ResNet18HasElevenDistinctConvTasksWithTheirWeights) {
  absl::StatusOr<TaskTable> t = Tasks("resnet18.onnx");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::pair<std::string, int>> got;
  for (const ExtractedTask& task : t->tasks) got.push_back({task.task, task.weight});
  auto conv = [](int c, int h, int k, int r, int stride) {
    return absl::StrCat("conv2d N=1 C=", c, " H=", h, " W=", h, " K=", k, " R=", r, " S=", r,
                        " stride=", stride, " pad=", r / 2, " dtype=float32");
  };
  // In order of first occurrence: the stem, then per stage the first block's 3x3
  // (stride 2 from stage 2 on), its 1x1 downsample, and the stage's other three
  // 3x3 convs (stage 1 has four alike and no downsample); the classifier.
  const std::vector<std::pair<std::string, int>> want = {
      {conv(3, 224, 64, 7, 2), 1},
      {conv(64, 56, 64, 3, 1), 4},
      {conv(64, 56, 128, 3, 2), 1},
      {conv(128, 28, 128, 3, 1), 3},
      {conv(64, 56, 128, 1, 2), 1},
      {conv(128, 28, 256, 3, 2), 1},
      {conv(256, 14, 256, 3, 1), 3},
      {conv(128, 28, 256, 1, 2), 1},
      {conv(256, 14, 512, 3, 2), 1},
      {conv(512, 7, 512, 3, 1), 3},
      {conv(256, 14, 512, 1, 2), 1},
      {"dense M=1 N=1000 K=512 bias=1 relu=0 dtype=float32", 1},
  };
  EXPECT_EQ(got, want);
  // Every BatchNormalization folded; what is left: the pools and the Flatten.
  std::vector<std::string> left;
  for (const Leftover& l : t->leftovers) left.push_back(l.op);
  EXPECT_EQ(left, (std::vector<std::string>{"MaxPool", "GlobalAveragePool", "Flatten"}));
  // The residual Adds and Relus are absorbed by the second conv of each block.
  int residual = 0;
  for (const TaskUse& use : t->uses) residual += use.residual >= 0;
  EXPECT_EQ(residual, 8);
}

}  // namespace
}  // namespace tuneforge::graph
