// The ONNX reader on models made by tests/models/make_models.py (the `onnx` package,
// seeded weights) and on broken variants of them made here: every bad input is a
// clear error naming the file and the node, operator or tensor.
#include "compiler/frontend/onnx_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

namespace tuneforge::frontend {
namespace {

using ::testing::HasSubstr;

const std::string kModels = TF_TEST_MODELS_DIR;

class OnnxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_onnx_" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // The MLP with `edit` applied, written next to a copy of its external weights.
  std::string Edited(const std::string& model, const std::function<void(onnx::ModelProto*)>& edit) {
    onnx::ModelProto proto;
    EXPECT_TRUE(proto.ParseFromString(Bytes(kModels + "/" + model)));
    edit(&proto);
    std::filesystem::copy_file(kModels + "/mlp_external.weights", dir_ + "/mlp_external.weights",
                               std::filesystem::copy_options::overwrite_existing);
    return Write("edited.onnx", proto.SerializeAsString());
  }
  // The error of reading (and checking) `path`; empty when both succeed.
  static std::string Error(const std::string& path) {
    absl::StatusOr<OnnxModel> model = ReadOnnxModel(path);
    if (!model.ok()) return std::string(model.status().message());
    absl::Status supported = CheckSupported(*model);
    return supported.ok() ? "" : std::string(supported.message());
  }

  std::string dir_;
};

TEST_F(OnnxReaderTest, ReadsTheMlp) {
  absl::StatusOr<OnnxModel> model = ReadOnnxModel(kModels + "/mlp.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->opset, 17);
  EXPECT_EQ(model->proto.graph().node_size(), 5);
  EXPECT_EQ(model->proto.graph().initializer_size(), 4);
  EXPECT_EQ(model->proto.producer_name(), "tuneforge-tests");
  EXPECT_TRUE(CheckSupported(*model).ok()) << CheckSupported(*model);
}

TEST_F(OnnxReaderTest, ExternalDataIsLoadedAndEqualsTheInlineWeights) {
  absl::StatusOr<OnnxModel> inline_model = ReadOnnxModel(kModels + "/mlp.onnx");
  absl::StatusOr<OnnxModel> external = ReadOnnxModel(kModels + "/mlp_external.onnx");
  ASSERT_TRUE(inline_model.ok()) << inline_model.status();
  ASSERT_TRUE(external.ok()) << external.status();
  const auto& a = inline_model->proto.graph().initializer();
  const auto& b = external->proto.graph().initializer();
  ASSERT_EQ(a.size(), b.size());
  for (int i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].data_location(), onnx::TensorProto::DEFAULT);
    EXPECT_EQ(b[i].name(), a[i].name());
    EXPECT_FALSE(b[i].raw_data().empty()) << b[i].name();
    EXPECT_EQ(b[i].raw_data(), a[i].raw_data()) << b[i].name();
  }
}

TEST_F(OnnxReaderTest, FilesThatAreNotModelsAreClearErrors) {
  absl::StatusOr<OnnxModel> missing = ReadOnnxModel(dir_ + "/nope.onnx");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read ONNX model"));
  EXPECT_THAT(Error(Write("empty.onnx", "")), HasSubstr("not an ONNX model"));
  EXPECT_THAT(Error(Write("text.onnx", "hello, this is a text file\n")),
              HasSubstr("not an ONNX model"));
  const std::string whole = Bytes(kModels + "/mlp.onnx");
  EXPECT_THAT(Error(Write("half.onnx", whole.substr(0, whole.size() / 2))),
              HasSubstr("not an ONNX model (not a valid protobuf: truncated or corrupt?)"));
}

TEST_F(OnnxReaderTest, TodaysFilesAreRead) {
  // What onnx 1.23's helper.make_model writes: IR version 14, opset 28, here with the
  // multi-device annotations IR 11 added (ignored: they do not change the values).
  EXPECT_EQ(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
              m->set_ir_version(14);
              m->mutable_opset_import(0)->set_version(28);
              m->add_configuration()->set_name("two_devices");
              onnx::NodeDeviceConfigurationProto* c = m->mutable_graph()->mutable_node(0)->add_device_configurations();
              c->set_configuration_id("two_devices");
              c->add_sharding_spec()->set_tensor_name(m->graph().node(0).output(0));
            })),
            "");
  // A type newer than float32 and int64 is named in the refusal.
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->set_ir_version(14);
                m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
                    onnx::TensorProto::FLOAT4E2M1);
              })),
              HasSubstr("is FLOAT4E2M1; only FLOAT"));
}

TEST_F(OnnxReaderTest, VersionsOutOfRangeAreRefused) {
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_opset_import(0)->set_version(5);
              })),
              HasSubstr("opset 5 is not supported (7..28)"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_opset_import(0)->set_version(29);
              })),
              HasSubstr("opset 29 is not supported"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) { m->set_ir_version(15); })),
              HasSubstr("IR version 15 is not supported (3..14)"));
  // Another domain's operator set that no node uses is no obstacle (onnxruntime's
  // tools import several); a node of that domain is refused.
  auto microsoft = [](onnx::ModelProto* m) {
    onnx::OperatorSetIdProto* ms = m->add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
  };
  EXPECT_EQ(Error(Edited("mlp.onnx", microsoft)), "");
  EXPECT_THAT(Error(Edited("mlp.onnx", [&](onnx::ModelProto* m) {
                microsoft(m);
                m->mutable_graph()->mutable_node(2)->set_domain("com.microsoft");
              })),
              HasSubstr("operator domain 'com.microsoft' is not supported"));
}

TEST_F(OnnxReaderTest, UnsupportedOperatorsAndTensorsNameTheNode) {
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_node(2)->set_op_type("NonMaxSuppression");
              })),
              HasSubstr("node 'relu1' (#2, NonMaxSuppression): operator 'NonMaxSuppression' is "
                        "not supported (supported: Abs, Acos,"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
                    ->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
              })),
              HasSubstr("graph input 'x' dimension 0 is 'batch'; bind it: --dim batch=N (or --shape x=D0,D1,...)"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
                    ->set_elem_type(onnx::TensorProto::DOUBLE);
              })),
              HasSubstr("graph input 'x' is DOUBLE; only FLOAT"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                m->mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::FLOAT16);
              })),
              HasSubstr("initializer 'w1' is FLOAT16"));
}

// A model exported with dynamic axes runs once its symbolic dimensions are bound by
// name (--dim) or whole input shapes (--shape); a binding that names nothing, or that
// contradicts a fixed size, is an error.
TEST_F(OnnxReaderTest, SymbolicDimensionsAreBoundByNameOrShape) {
  auto symbolic = [](onnx::ModelProto* m) {
    m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)
        ->set_dim_param("batch");
  };
  const std::string path = Edited("mlp.onnx", symbolic);
  auto bound = [&](const std::vector<std::string>& dims, const std::vector<std::string>& shapes) -> std::string {
    DimBindings b;
    for (const std::string& d : dims) {
      absl::Status s = ParseDimBinding(d, &b);
      if (!s.ok()) return std::string(s.message());
    }
    for (const std::string& d : shapes) {
      absl::Status s = ParseShapeBinding(d, &b);
      if (!s.ok()) return std::string(s.message());
    }
    absl::StatusOr<OnnxModel> model = ReadOnnxModel(path);
    if (!model.ok()) return std::string(model.status().message());
    absl::Status s = BindDimensions(&*model, b);
    if (s.ok()) s = CheckSupported(*model);
    if (!s.ok()) return std::string(s.message());
    const auto& dim = model->proto.graph().input(0).type().tensor_type().shape().dim(0);
    return "batch " + std::to_string(dim.dim_value());
  };
  const int64_t features = [&] {
    absl::StatusOr<OnnxModel> m = ReadOnnxModel(kModels + "/mlp.onnx");
    return m->proto.graph().input(0).type().tensor_type().shape().dim(1).dim_value();
  }();
  EXPECT_EQ(bound({"batch=4"}, {}), "batch 4");
  EXPECT_EQ(bound({}, {"x=3," + std::to_string(features)}), "batch 3");
  EXPECT_THAT(bound({}, {}), HasSubstr("dimension 0 is 'batch'; bind it: --dim batch=N"));
  EXPECT_THAT(bound({"batch=4", "seq=8"}, {}), HasSubstr("--dim seq: no graph input has a dimension named 'seq'"));
  EXPECT_THAT(bound({}, {"y=1,2"}), HasSubstr("--shape y: the model has no graph input named 'y'"));
  EXPECT_THAT(bound({}, {"x=3"}), HasSubstr("--shape x has 1 sizes; the input has rank 2"));
  EXPECT_THAT(bound({}, {"x=3," + std::to_string(features + 1)}), HasSubstr("dimension 1 is "));
  EXPECT_THAT(bound({"batch=0"}, {}), HasSubstr("'0' is not a size"));
  EXPECT_THAT(bound({"batch"}, {}), HasSubstr("--dim wants NAME=N"));
  EXPECT_THAT(bound({"batch=1,batch=2"}, {}), HasSubstr("--dim batch given twice"));
}

// An attribute the importer does not read would be silently ignored, and the node
// would compute something else: it is refused, naming it and what the operator takes.
TEST_F(OnnxReaderTest, UnknownAttributesAreRefused) {
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                onnx::AttributeProto* a = m->mutable_graph()->mutable_node(1)->add_attribute();
                a->set_name("broadcast");
                a->set_type(onnx::AttributeProto::INT);
                a->set_i(1);
              })),
              HasSubstr("(#1, Add): attribute 'broadcast' of Add is not supported (it takes none)"));
  EXPECT_THAT(Error(Edited("mlp.onnx", [](onnx::ModelProto* m) {
                onnx::AttributeProto* a = m->mutable_graph()->mutable_node(3)->add_attribute();
                a->set_name("transC");
                a->set_type(onnx::AttributeProto::INT);
                a->set_i(1);
              })),
              HasSubstr("attribute 'transC' of Gemm is not supported (supported: alpha, beta, "
                        "transA, transB)"));
}

TEST_F(OnnxReaderTest, ExternalDataMustStayBesideTheModelAndInRange) {
  auto set_entry = [](const std::string& key, const std::string& value) {
    return [=](onnx::ModelProto* m) {
      for (auto& e : *m->mutable_graph()->mutable_initializer(0)->mutable_external_data()) {
        if (e.key() == key) e.set_value(value);
      }
    };
  };
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "../secret.bin"))),
              HasSubstr("tensor 'w1': external data location '../secret.bin' is outside the "
                        "model's directory"));
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "/etc/passwd"))),
              HasSubstr("outside the model's directory"));
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "gone.weights"))),
              HasSubstr("gone.weights cannot be read"));
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("length", "1000000000"))),
              HasSubstr("is past the end of"));
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("offset", "-3"))),
              HasSubstr("external data offset '-3' is not a size"));
  // A directory (it opened as a stream of nonsense size and aborted the command).
  std::filesystem::create_directories(dir_ + "/weights.d");
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "weights.d"))),
              HasSubstr("is not a regular file"));
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "."))),
              HasSubstr("tensor 'w1': external data"));
  // A symlink beside the model that leads out of its directory.
  const std::string outside = dir_ + "_outside.bin";
  std::filesystem::copy_file(kModels + "/mlp_external.weights", outside,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(dir_ + "/link.weights");
  std::filesystem::create_symlink(outside, dir_ + "/link.weights");
  EXPECT_THAT(Error(Edited("mlp_external.onnx", set_entry("location", "link.weights"))),
              HasSubstr("outside the model's directory"));
  std::filesystem::remove(outside);
  // A symlink that stays inside is followed.
  std::filesystem::remove(dir_ + "/link.weights");
  std::filesystem::create_symlink("mlp_external.weights", dir_ + "/link.weights");
  EXPECT_EQ(Error(Edited("mlp_external.onnx", set_entry("location", "link.weights"))), "");
}


namespace qdq {

onnx::TensorProto Scalar(const std::string& name, int32_t type, double v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  if (type == onnx::TensorProto::FLOAT) t.add_float_data(static_cast<float>(v));
  else t.add_int32_data(static_cast<int32_t>(v));
  return t;
}

onnx::NodeProto Node(const std::string& op, std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto n;
  n.set_name(out + "." + op);
  n.set_op_type(op);
  for (const std::string& i : in) n.add_input(i);
  n.add_output(out);
  return n;
}

// The MLP's first weights as int8 "w1.q": 16 x 32, value (i + j) % 7 - 3.
onnx::TensorProto MlpInt8Weights() {
  onnx::TensorProto w;
  w.set_name("w1.q");
  w.set_data_type(onnx::TensorProto::INT8);
  w.add_dims(16), w.add_dims(32);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) w.add_int32_data((i + j) % 7 - 3);
  return w;
}

// The MLP's input through a QuantizeLinear/DequantizeLinear pair (uint8, scale 0.25,
// zero 3) before its MatMul, whose weights are int8 dequantized per column (axis 1).
void QuantizeTheMlp(onnx::ModelProto* m) {
  onnx::GraphProto* g = m->mutable_graph();
  *g->add_initializer() = Scalar("s", onnx::TensorProto::FLOAT, 0.25);
  *g->add_initializer() = Scalar("z", onnx::TensorProto::UINT8, 3);
  *g->add_initializer() = MlpInt8Weights();
  onnx::TensorProto ws;
  ws.set_name("w1.s");
  ws.set_data_type(onnx::TensorProto::FLOAT);
  ws.add_dims(32);
  for (int j = 0; j < 32; ++j) ws.add_float_data(0.5f + 0.5f * static_cast<float>(j));
  *g->add_initializer() = ws;
  onnx::NodeProto dqw = Node("DequantizeLinear", {"w1.q", "w1.s"}, "w1.f");
  onnx::AttributeProto* axis = dqw.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  std::vector<onnx::NodeProto> nodes = {Node("QuantizeLinear", {"x", "s", "z"}, "x.q"),
                                        Node("DequantizeLinear", {"x.q", "s", "z"}, "x.f"), dqw};
  for (const onnx::NodeProto& n : g->node()) nodes.push_back(n);
  nodes[3].set_input(0, "x.f");
  nodes[3].set_input(1, "w1.f");
  g->clear_node();
  for (const onnx::NodeProto& n : nodes) *g->add_node() = n;
}

// The MLP's first MatMul quantized dynamically, as onnxruntime's quantize_dynamic
// writes it: DynamicQuantizeLinear(x), MatMulInteger with int8 weights (zero point
// 0), Cast to float, times x's scale x the weights' scale.
void QuantizeTheMlpDynamically(onnx::ModelProto* m) {
  onnx::GraphProto* g = m->mutable_graph();
  *g->add_initializer() = MlpInt8Weights();
  *g->add_initializer() = Scalar("w1.z", onnx::TensorProto::INT8, 0);
  *g->add_initializer() = Scalar("w1.s", onnx::TensorProto::FLOAT, 0.5);
  const onnx::NodeProto matmul = g->node(0);
  onnx::NodeProto dql;
  dql.set_name("x.dql");
  dql.set_op_type("DynamicQuantizeLinear");
  dql.add_input("x");
  for (const char* out : {"x.q", "x.s", "x.z"}) dql.add_output(out);
  onnx::NodeProto cast = Node("Cast", {"mm.i"}, "mm.f");
  onnx::AttributeProto* to = cast.add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  std::vector<onnx::NodeProto> nodes = {dql, Node("MatMulInteger", {"x.q", "w1.q", "x.z", "w1.z"}, "mm.i"), cast,
                                        Node("Mul", {"x.s", "w1.s"}, "s.prod"),
                                        Node("Mul", {"mm.f", "s.prod"}, matmul.output(0))};
  for (int i = 1; i < g->node_size(); ++i) nodes.push_back(g->node(i));
  g->clear_node();
  for (const onnx::NodeProto& n : nodes) *g->add_node() = n;
}

// The MLP's first MatMul in the QOperator form: QuantizeLinear(x) (uint8, scale 0.25,
// zero 3), QLinearMatMul by the int8 weights (per column), its uint8 output (scale
// 0.5, zero 128) dequantized for the Add after it.
void QuantizeTheMlpQOperator(onnx::ModelProto* m) {
  onnx::GraphProto* g = m->mutable_graph();
  *g->add_initializer() = Scalar("s", onnx::TensorProto::FLOAT, 0.25);
  *g->add_initializer() = Scalar("z", onnx::TensorProto::UINT8, 3);
  *g->add_initializer() = Scalar("hs", onnx::TensorProto::FLOAT, 0.5);
  *g->add_initializer() = Scalar("hz", onnx::TensorProto::UINT8, 128);
  *g->add_initializer() = MlpInt8Weights();
  onnx::TensorProto ws, wz;
  ws.set_name("w1.s");
  ws.set_data_type(onnx::TensorProto::FLOAT);
  ws.add_dims(32);
  wz.set_name("w1.z");
  wz.set_data_type(onnx::TensorProto::INT8);
  wz.add_dims(32);
  for (int j = 0; j < 32; ++j) ws.add_float_data(0.5f + 0.5f * static_cast<float>(j)), wz.add_int32_data(0);
  *g->add_initializer() = ws;
  *g->add_initializer() = wz;
  std::vector<onnx::NodeProto> nodes = {
      Node("QuantizeLinear", {"x", "s", "z"}, "x.q"),
      Node("QLinearMatMul", {"x.q", "s", "z", "w1.q", "w1.s", "w1.z", "hs", "hz"}, "h0.q"),
      Node("DequantizeLinear", {"h0.q", "hs", "hz"}, g->node(0).output(0))};
  for (int i = 1; i < g->node_size(); ++i) nodes.push_back(g->node(i));
  g->clear_node();
  for (const onnx::NodeProto& n : nodes) *g->add_node() = n;
}

}  // namespace qdq

// A QDQ model reads as float operators: the pair becomes the round trip (Div, Round,
// Add, Clip to uint8's range, Sub, Mul), the int8 weights a float initializer of
// (q - 0) * scale[column], and the model passes the support check.
TEST_F(OnnxReaderTest, QdqPairsAndDequantizedWeightsBecomeFloatOperators) {
  const std::string path = Edited("mlp.onnx", qdq::QuantizeTheMlp);
  EXPECT_EQ(Error(path), "");
  absl::StatusOr<OnnxModel> model = ReadOnnxModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : model->proto.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Div", "Round", "Add", "Clip", "Sub", "Mul", "MatMul", "Add", "Relu",
                                           "Gemm", "Softmax"}));
  EXPECT_EQ(model->proto.graph().node(6).input(0), "x.f");
  const onnx::TensorProto* w = nullptr;
  for (const onnx::TensorProto& t : model->proto.graph().initializer()) {
    EXPECT_NE(t.data_type(), onnx::TensorProto::INT8) << t.name();
    if (t.name() == "w1.f") w = &t;
  }
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->raw_data().size(), 16u * 32 * 4);
  float v = 0;
  std::memcpy(&v, w->raw_data().data() + (5 * 32 + 9) * 4, 4);  // (5 + 9) % 7 - 3 = -3, scale 5
  EXPECT_EQ(v, -3.0f * 5.0f);
}

// The dynamic form reads as float operators: DynamicQuantizeLinear as the reductions
// and the rounding its definition computes, MatMulInteger as a MatMul of (x_q - x_z)
// by the weights as float (q - w_z); no integer initializer remains. Weights computed
// at run time are refused.
TEST_F(OnnxReaderTest, DynamicQuantizationBecomesFloatOperators) {
  const std::string path = Edited("mlp.onnx", qdq::QuantizeTheMlpDynamically);
  EXPECT_EQ(Error(path), "");
  absl::StatusOr<OnnxModel> model = ReadOnnxModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : model->proto.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(std::vector<std::string>(ops.begin(), ops.begin() + 2), (std::vector<std::string>{"ReduceMax", "ReduceMin"}));
  EXPECT_THAT(ops, ::testing::Contains("Where"));  // scale 1 for an all-zero input
  EXPECT_THAT(ops, ::testing::Not(::testing::Contains("MatMulInteger")));
  EXPECT_THAT(ops, ::testing::Not(::testing::Contains("DynamicQuantizeLinear")));
  const onnx::TensorProto* w = nullptr;
  for (const onnx::TensorProto& t : model->proto.graph().initializer()) {
    EXPECT_NE(t.data_type(), onnx::TensorProto::INT8) << t.name();
    if (t.name() == "mm.i.MatMulInteger.mmi.b") w = &t;
  }
  ASSERT_NE(w, nullptr);
  float v = 0;
  std::memcpy(&v, w->raw_data().data() + (5 * 32 + 9) * 4, 4);  // (5 + 9) % 7 - 3 = -3
  EXPECT_EQ(v, -3.0f);
  // Recorded for the int8 kernel (tasks.cc): what was quantized, and its scale.
  ASSERT_EQ(model->dynamic_matmuls.size(), 1u);
  EXPECT_EQ(model->dynamic_matmuls.at("mm.i").source, "x");
  EXPECT_EQ(model->dynamic_matmuls.at("mm.i").scale, "x.s");
  // Not with weights of another zero point (their centred values leave int8's range).
  absl::StatusOr<OnnxModel> shifted = ReadOnnxModel(Edited("mlp.onnx", [](onnx::ModelProto* m) {
    qdq::QuantizeTheMlpDynamically(m);
    for (onnx::TensorProto& t : *m->mutable_graph()->mutable_initializer()) {
      if (t.name() == "w1.z") t = qdq::Scalar("w1.z", onnx::TensorProto::INT8, 3);
    }
  }));
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  EXPECT_TRUE(shifted->dynamic_matmuls.empty());
  EXPECT_THAT(Error(Edited("mlp.onnx",
                           [](onnx::ModelProto* m) {
                             qdq::QuantizeTheMlpDynamically(m);
                             m->mutable_graph()->mutable_node(1)->set_input(1, "x.q");
                           })),
              HasSubstr("(#1, MatMulInteger) has a B that is not a 2-D int8 or uint8 initializer"));
}

// The QOperator form expands into the QDQ form, which reads as float operators: the
// input's round trip, the MatMul of the dequantized weights, the output's round trip.
// An operator other than the QLinear ones, DequantizeLinear and those that move values
// reading an integer tensor is refused, named.
TEST_F(OnnxReaderTest, QOperatorFormBecomesTheQdqForm) {
  const std::string path = Edited("mlp.onnx", qdq::QuantizeTheMlpQOperator);
  EXPECT_EQ(Error(path), "");
  absl::StatusOr<OnnxModel> model = ReadOnnxModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : model->proto.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Div", "Round", "Add", "Clip", "Sub", "Mul", "MatMul", "Div", "Round", "Add",
                                           "Clip", "Sub", "Mul", "Add", "Relu", "Gemm", "Softmax"}));
  EXPECT_EQ(model->quantized_tensors.size(), 2u);
  EXPECT_EQ(model->quantized_tensors.begin()->second.scale + std::next(model->quantized_tensors.begin())->second.scale,
            0.75);
  EXPECT_THAT(Error(Edited("mlp.onnx",
                           [](onnx::ModelProto* m) {
                             qdq::QuantizeTheMlpQOperator(m);
                             m->mutable_graph()->mutable_node(2)->set_op_type("Relu");
                             m->mutable_graph()->mutable_node(2)->mutable_input()->RemoveLast();
                             m->mutable_graph()->mutable_node(2)->mutable_input()->RemoveLast();
                           })),
              HasSubstr("(#2, Relu) reads the quantized tensor 'h0.q'"));
}

TEST_F(OnnxReaderTest, QdqFormsThatAreNotPairsAreRefusedNamingTheNode) {
  // The quantized input read by a Relu, not a DequantizeLinear.
  EXPECT_THAT(Error(Edited("mlp.onnx",
                           [](onnx::ModelProto* m) {
                             qdq::QuantizeTheMlp(m);
                             m->mutable_graph()->mutable_node(1)->set_op_type("Relu");
                             m->mutable_graph()->mutable_node(1)->clear_input();
                             m->mutable_graph()->mutable_node(1)->add_input("x.q");
                           })),
              HasSubstr("(#0, QuantizeLinear) feeds node 'x.f.DequantizeLinear' (Relu), not a DequantizeLinear"));
  // A DequantizeLinear of the run-time input itself.
  EXPECT_THAT(Error(Edited("mlp.onnx",
                           [](onnx::ModelProto* m) {
                             qdq::QuantizeTheMlp(m);
                             m->mutable_graph()->mutable_node(1)->set_input(0, "x");
                           })),
              HasSubstr("reads 'x', which is neither a constant nor the output of a QuantizeLinear"));
  // The pair with another zero point on the way back.
  EXPECT_THAT(Error(Edited("mlp.onnx",
                           [](onnx::ModelProto* m) {
                             qdq::QuantizeTheMlp(m);
                             *m->mutable_graph()->add_initializer() = qdq::Scalar("z2", onnx::TensorProto::UINT8, 4);
                             m->mutable_graph()->mutable_node(1)->set_input(2, "z2");
                           })),
              HasSubstr("dequantizes with another scale or zero point"));
}

}  // namespace
}  // namespace tuneforge::frontend
