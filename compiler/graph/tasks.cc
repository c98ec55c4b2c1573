// Task extraction: the graph's conv/matmul/dense anchors and their fused epilogues.
#include "compiler/graph/tasks.h"

#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"

namespace tuneforge::graph {

namespace {

// Consumers of each tensor, and whether it is a graph output.
struct Uses {
  std::vector<std::vector<int>> consumers;
  std::vector<bool> is_output;
};

Uses CountUses(const Graph& g) {
  Uses u;
  u.consumers.resize(g.tensors.size());
  u.is_output.resize(g.tensors.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in >= 0) u.consumers[static_cast<size_t>(in)].push_back(static_cast<int>(i));
    }
  }
  for (int out : g.outputs) u.is_output[static_cast<size_t>(out)] = true;
  return u;
}

class Extractor {
 public:
  explicit Extractor(const Graph& g) : g_(g), uses_(CountUses(g)), taken_(g.nodes.size(), false) {}

  absl::StatusOr<TaskTable> Run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (taken_[i]) continue;
      const Node& n = g_.nodes[i];
      if (n.op == "MatMul" || n.op == "Gemm") {
        RETURN_IF_ERROR(MatMulLike(static_cast<int>(i)));
      } else if (n.op == "Conv") {
        RETURN_IF_ERROR(Conv(static_cast<int>(i)));
      } else {
        Leave(static_cast<int>(i), NonAnchorReason(n.op), Elementwise(n));
      }
    }
    for (const ExtractedTask& t : table_.tasks) table_.total_flops += t.flops * t.weight;
    for (const Leftover& l : table_.leftovers) table_.total_flops += l.flops;
    return std::move(table_);
  }

 private:
  const Tensor& T(int id) const { return g_.tensors[static_cast<size_t>(id)]; }

  // The only consumer of `node`'s single output, if that consumer is `op` and the
  // output is not itself a graph output; -1 otherwise.
  int SoleConsumer(int node, const char* op) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    if (n.outputs.size() != 1) return -1;
    const size_t out = static_cast<size_t>(n.outputs[0]);
    if (uses_.is_output[out] || uses_.consumers[out].size() != 1) return -1;
    int c = uses_.consumers[out][0];
    return g_.nodes[static_cast<size_t>(c)].op == op && !taken_[static_cast<size_t>(c)] ? c : -1;
  }

  // A Clip whose bounds are constants (or absent): the conv epilogue folds them in.
  bool ConstantBounds(int node) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] >= 0 && !T(n.inputs[i]).constant) return false;
    }
    return true;
  }

  // Add of a constant vector of `n` elements (a bias over the last dimension).
  bool IsBiasAdd(int node, int64_t n, int from) const {
    const Node& add = g_.nodes[static_cast<size_t>(node)];
    const int other = add.inputs[0] == from ? add.inputs[1] : add.inputs[0];
    const Tensor& b = T(other);
    return b.constant && b.dtype == DType::kFloat32 && b.NumElements() == n &&
           (b.shape.empty() ? false : b.shape.back() == n);
  }

  void Leave(int node, const std::string& reason, double flops) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    table_.leftovers.push_back({n.name, n.op, reason, flops});
    taken_[static_cast<size_t>(node)] = true;
  }

  absl::Status AddTask(const std::string& text, std::vector<int> nodes, std::string epilogue,
                       TaskUse use) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    const std::string canonical = task.CanonicalText();
    auto it = index_.find(canonical);
    if (it == index_.end()) {
      it = index_.emplace(canonical, table_.tasks.size()).first;
      table_.tasks.push_back({canonical, task.op(), 0, task.Flops(), {}, ""});
    }
    ExtractedTask& t = table_.tasks[it->second];
    ++t.weight;
    // Occurrences of one anchor kernel may differ in their epilogues: list each.
    if (!epilogue.empty() && (" | " + t.unfused_epilogue + " | ").find(" | " + epilogue + " | ") ==
                                 std::string::npos) {
      t.unfused_epilogue += t.unfused_epilogue.empty() ? epilogue : " | " + epilogue;
    }
    for (int n : nodes) {
      t.nodes.push_back(g_.nodes[static_cast<size_t>(n)].name);
      taken_[static_cast<size_t>(n)] = true;
    }
    use.task = static_cast<int>(it->second);
    use.anchor = nodes.front();
    use.anchor_output = g_.nodes[static_cast<size_t>(nodes.front())].outputs[0];
    use.output = g_.nodes[static_cast<size_t>(nodes.back())].outputs[0];
    use.nodes = std::move(nodes);
    table_.uses.push_back(std::move(use));
    return absl::OkStatus();
  }

  absl::Status MatMulLike(int node) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const Tensor& a = T(n.inputs[0]);
    const Tensor& b = T(n.inputs[1]);
    const Tensor& y = T(n.outputs[0]);
    if (n.op == "Gemm" && (n.Int("transA", 0) != 0 || n.Float("alpha", 1) != 1.0f ||
                           n.Float("beta", 1) != 1.0f)) {
      Leave(node, "Gemm with transA or alpha/beta != 1: no template", 2.0 * y.NumElements() * a.shape.back());
      return absl::OkStatus();
    }
    if (n.op == "Gemm" && !(b.constant && b.shape.size() == 2)) {
      // The matmul template has neither transB nor C: the generic kernel has both.
      Leave(node, "Gemm with B computed at run time: no template", 2.0 * y.NumElements() * a.shape.back());
      return absl::OkStatus();
    }
    if (b.constant && b.shape.size() == 2) {
      if (n.op == "MatMul") {
        ASSIGN_OR_RETURN(bool dynamic, DynamicQuantizedMatmul(node));
        if (dynamic) return absl::OkStatus();
      }
      // An inference layer: constant weights -> dense (weights transposed at load
      // for Gemm's transB), bias and relu absorbed when they follow.
      const bool tb = n.op == "Gemm" && n.Int("transB", 0) != 0;
      if (tb && a.shape.size() == 2 && a.shape[0] == 1) {
        // A quantized classifier: the 1x1 int8 convolution of a 1x1 image.
        TaskUse q;
        q.data = n.inputs[0];
        q.weight = n.inputs[1];
        const bool has_c = n.inputs.size() > 2 && n.inputs[2] >= 0;
        if (has_c) q.bias = n.inputs[2];
        if (!has_c || T(n.inputs[2]).shape == std::vector<int64_t>{b.shape[0]}) {
          ASSIGN_OR_RETURN(bool quantized, QuantizedConv(node, q, false, /*gemm=*/true));
          if (quantized) return absl::OkStatus();
        }
      }
      const int64_t k = tb ? b.shape[1] : b.shape[0];
      const int64_t nn = tb ? b.shape[0] : b.shape[1];
      const int64_t m = a.NumElements() / k;
      std::vector<int> nodes = {node};
      int tail = node;
      bool bias = false;
      TaskUse use;
      use.data = n.inputs[0];
      use.weight = n.inputs[1];
      use.transpose_weight = tb;
      if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
        // A bias adds one value per output column: C is [N] or [1, N] (a [M, 1] or
        // [M, N] C broadcasts otherwise, even when it has N elements).
        const Tensor& c = T(n.inputs[2]);
        const bool row_vector = c.shape == std::vector<int64_t>{nn} ||
                                c.shape == std::vector<int64_t>{1, nn};
        if (!c.constant || !row_vector) {
          Leave(node, "Gemm with a C that is not a constant bias vector: no template",
                2.0 * m * nn * k);
          return absl::OkStatus();
        }
        bias = true;
        use.bias = n.inputs[2];
      } else if (int add = SoleConsumer(node, "Add");
                 add >= 0 && IsBiasAdd(add, nn, n.outputs[0])) {
        bias = true;
        const Node& a = g_.nodes[static_cast<size_t>(add)];
        use.bias = a.inputs[0] == n.outputs[0] ? a.inputs[1] : a.inputs[0];
        nodes.push_back(add);
        tail = add;
      }
      bool relu = false;
      if (int r = SoleConsumer(tail, "Relu"); r >= 0) {
        relu = true;
        use.activation = "relu";
        nodes.push_back(r);
      }
      return AddTask(absl::StrCat("dense M=", m, " N=", nn, " K=", k, " bias=", bias ? 1 : 0,
                                  " relu=", relu ? 1 : 0),
                     nodes, "", use);
    }
    TaskUse use;
    use.data = n.inputs[0];
    use.weight = n.inputs[1];
    if (a.shape.size() == 2 && b.shape.size() == 2) {
      return AddTask(absl::StrCat("matmul M=", a.shape[0], " N=", b.shape[1], " K=", a.shape[1]),
                     {node}, "", use);
    }
    if (a.shape.size() >= 3 && a.shape.size() == b.shape.size() &&
        std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin())) {
      int64_t batch = 1;
      for (size_t i = 0; i + 2 < a.shape.size(); ++i) batch *= a.shape[i];
      return AddTask(absl::StrCat("batch_matmul B=", batch, " M=", a.shape[a.shape.size() - 2],
                                  " N=", b.shape.back(), " K=", a.shape.back()),
                     {node}, "", use);
    }
    Leave(node, "MatMul with broadcast batch dimensions: no template",
          2.0 * y.NumElements() * a.shape.back());
    return absl::OkStatus();
  }

  absl::Status Conv(int node) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const Tensor& x = T(n.inputs[0]);
    const Tensor& w = T(n.inputs[1]);
    const Tensor& y = T(n.outputs[0]);
    const double flops = 2.0 * y.NumElements() * w.NumElements() / w.shape[0];
    const std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
    const std::vector<int64_t> strides = n.Ints("strides", {1, 1});
    const std::vector<int64_t> dilations = n.Ints("dilations", {1, 1});
    std::string why;
    if (pads[0] != pads[1] || pads[0] != pads[2] || pads[0] != pads[3]) {
      why = "asymmetric padding";
    } else if (strides[0] != strides[1]) {
      why = "different strides per dimension";
    } else if (dilations[0] != 1 || dilations[1] != 1) {
      why = "dilation";
    }
    const int64_t group = n.Int("group", 1);
    // Depthwise (one channel per group, multiplier 1) has a template of its own;
    // other groupings are conv2d's `groups`.
    const bool depthwise = group > 1 && group == x.shape[1] && w.shape[0] == x.shape[1];
    if (!why.empty()) {
      Leave(node, "Conv with " + why + ": no template", flops);
      return absl::OkStatus();
    }
    std::vector<int> nodes = {node};
    TaskUse use;
    use.data = n.inputs[0];
    use.weight = n.inputs[1];
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) use.bias = n.inputs[2];
    // Depthwise layers too, though the float32 depthwise kernel is faster than the
    // int8 one: a float32 layer rounds an output that lies within an ulp of a
    // half-step boundary either way, and a deep network amplifies each such flip
    // (docs/int8.md, "Accuracy").
    if (group == 1 || depthwise) {
      ASSIGN_OR_RETURN(bool quantized, QuantizedConv(node, use, depthwise));
      if (quantized) return absl::OkStatus();
    }
    std::string epilogue = use.bias >= 0 ? "bias" : "";
    int tail = node;
    if (int add = SoleConsumer(node, "Add"); add >= 0) {
      // A residual connection (ResNet): Add of another activation of the same shape.
      const Node& a = g_.nodes[static_cast<size_t>(add)];
      const int other = a.inputs[0] == n.outputs[0] ? a.inputs[1] : a.inputs[0];
      if (!T(other).constant && T(other).shape == y.shape) {
        epilogue += epilogue.empty() ? "residual" : "+residual";
        use.residual = other;
        nodes.push_back(add);
        tail = add;
      }
    }
    if (int r = SoleConsumer(tail, "Relu"); r >= 0) {
      epilogue += epilogue.empty() ? "relu" : "+relu";
      use.activation = "relu";
      nodes.push_back(r);
    } else if (int c = SoleConsumer(tail, "Clip"); c >= 0 && ConstantBounds(c)) {
      epilogue += epilogue.empty() ? "clip" : "+clip";
      use.activation = "clip";
      use.clip_node = c;
      nodes.push_back(c);
    }
    // A pointwise convolution (1x1, stride 1, no padding, one image) whose output
    // channels per group are not a multiple of 16 is a matmul per group on the NCHW
    // tensors: out[g] (K/G x H*W) = W[g] (K/G x C/G) * in[g] (C/G x H*W). The blocked
    // conv kernel vectorises over a group's output channels and must then take
    // narrow vectors (ShuffleNet's 60 and 20 channels: 4 lanes); the matmul
    // vectorises over the pixels. On a Zen 4 (AVX-512), alone: ShuffleNet's
    // C=240 -> K=60 in 3 groups at 28x28 0.16 ms as a conv, 0.05 ms as a matmul;
    // C=24 -> K=60 at 56x56 0.27 -> 0.06 ms. 16 is the widest float32 vector of the
    // targets (AVX-512), fixed so that the tasks do not depend on the machine.
    const int64_t out_per_group = w.shape[0] / group;
    if (!depthwise && x.shape[0] == 1 && w.shape[2] == 1 && w.shape[3] == 1 && strides[0] == 1 &&
        pads[0] == 0 && out_per_group % 16 != 0) {
      use.conv_as_gemm = true;
      const int64_t pixels = x.shape[2] * x.shape[3];
      return AddTask(group > 1 ? absl::StrCat("batch_matmul B=", group, " M=", out_per_group, " N=", pixels,
                                              " K=", x.shape[1] / group)
                               : absl::StrCat("matmul M=", out_per_group, " N=", pixels, " K=", x.shape[1]),
                     nodes, epilogue, use);
    }
    const std::string text =
        depthwise ? absl::StrCat("depthwise_conv2d N=", x.shape[0], " C=", x.shape[1], " H=",
                                 x.shape[2], " W=", x.shape[3], " R=", w.shape[2], " S=",
                                 w.shape[3], " stride=", strides[0], " pad=", pads[0])
                  : absl::StrCat("conv2d N=", x.shape[0], " C=", x.shape[1], " H=", x.shape[2],
                                 " W=", x.shape[3], " K=", w.shape[0], " R=", w.shape[2],
                                 " S=", w.shape[3], " stride=", strides[0], " pad=", pads[0],
                                 group > 1 ? absl::StrCat(" groups=", group) : "");
    return AddTask(text, nodes, epilogue, use);
  }

  // The node that writes tensor `t`; -1 for a constant or a graph input.
  int Producer(int t) const {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (int o : g_.nodes[i].outputs)
        if (o == t) return static_cast<int>(i);
    }
    return -1;
  }

  // A MatMul of the dynamic form (frontend::DynamicMatmul) followed by what
  // onnxruntime's quantize_dynamic writes after its MatMulInteger: a Cast to float32
  // and a Mul by (the DynamicQuantizeLinear's scale x the weights' constant scales),
  // then a bias Add when one follows. Then one qmatmul task covers them (TaskUse::
  // dynamic); its kernel is tuned as the static qmatmul with a_zero = 128 (the kernel
  // loops do not depend on the zero point). False when the pattern differs: the
  // float32 rewrite then runs as it stands.
  absl::StatusOr<bool> DynamicQuantizedMatmul(int node) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    auto found = g_.dynamic_matmuls.find(T(n.outputs[0]).name);
    if (found == g_.dynamic_matmuls.end()) return false;
    const int source = g_.Find(found->second.source), scale = g_.Find(found->second.scale);
    const Tensor& b = T(n.inputs[1]);
    if (source < 0 || scale < 0 || T(source).constant || b.dtype != DType::kFloat32) return false;
    const int64_t k = b.shape[0], cols = b.shape[1];
    const Tensor& x = T(source);
    if (x.shape.empty() || x.shape.back() != k || k % 4 != 0 || x.NumElements() / k != T(n.inputs[0]).NumElements() / k) {
      return false;
    }
    for (float v : b.f32) {
      if (v != std::nearbyint(v) || v < -128 || v > 127) return false;
    }
    const int cast = SoleConsumer(node, "Cast");
    if (cast < 0 || g_.nodes[static_cast<size_t>(cast)].Int("to", 0) != 1) return false;
    const int mul = SoleConsumer(cast, "Mul");
    if (mul < 0) return false;
    const Node& m = g_.nodes[static_cast<size_t>(mul)];
    const int cast_out = g_.nodes[static_cast<size_t>(cast)].outputs[0];
    const int factor = m.inputs[0] == cast_out ? m.inputs[1] : m.inputs[0];
    const int scales = Producer(factor);
    if (factor == cast_out || scales < 0) return false;
    const Node& sm = g_.nodes[static_cast<size_t>(scales)];
    if (sm.op != "Mul" || sm.inputs.size() != 2 || (sm.inputs[0] != scale && sm.inputs[1] != scale)) return false;
    const int wscale = sm.inputs[0] == scale ? sm.inputs[1] : sm.inputs[0];
    const Tensor& ws = T(wscale);
    if (!ws.constant || ws.dtype != DType::kFloat32 || (ws.NumElements() != 1 && ws.NumElements() != cols) ||
        (ws.NumElements() > 1 && ws.shape.back() != cols) || T(factor).NumElements() != ws.NumElements()) {
      return false;
    }
    for (float v : ws.f32) {
      if (!(v > 0) || !std::isfinite(v)) return false;
    }
    TaskUse use;
    use.dynamic = true;
    use.data = source;
    use.weight = n.inputs[1];
    use.wscale = wscale;
    std::vector<int> nodes = {node, cast, mul};
    if (int add = SoleConsumer(mul, "Add"); add >= 0 && IsBiasAdd(add, cols, m.outputs[0])) {
      const Node& a = g_.nodes[static_cast<size_t>(add)];
      use.bias = a.inputs[0] == m.outputs[0] ? a.inputs[1] : a.inputs[0];
      nodes.push_back(add);
    }
    RETURN_IF_ERROR(AddTask(absl::StrCat("qmatmul M=", x.NumElements() / k, " N=", cols, " K=", k,
                                         " a_zero=128 bias=0 per_channel=1 out_zero=0 dtype=u8s8f32"),
                            nodes, "", use));
    return true;
  }

  // A Conv of a QDQ model (docs/int8.md): its input a uint8 round trip's output, its
  // weights dequantized int8 (per output channel, or per tensor), and its output read
  // only by the round trip Div -> Round -> Add -> Clip -> Sub -> Mul that the QDQ
  // rewrite made of the QuantizeLinear after it (uint8). Then the int8 task covers
  // the conv and that round trip; true when it did. Groups 1, or depthwise
  // (qdepthwise_conv2d); output channels a multiple of 4 (the vector kernels').
  // The quantization round trip that alone reads `node`'s output: the QDQ rewrite's
  // Div -> Round -> Add -> Clip -> Sub -> Mul of a uint8 QuantizeLinear (its Div by
  // exactly the quantization's scale); nullopt when it is not one.
  struct RoundTrip {
    std::vector<int> nodes;
    frontend::QuantizedTensor q;
  };
  std::optional<RoundTrip> RoundTripAfter(int node) const {
    RoundTrip rt;
    int tail = node;
    for (const char* op : {"Div", "Round", "Add", "Clip", "Sub", "Mul"}) {
      tail = SoleConsumer(tail, op);
      if (tail < 0) return std::nullopt;
      rt.nodes.push_back(tail);
    }
    const Tensor& y = T(g_.nodes[static_cast<size_t>(tail)].outputs[0]);
    auto out = g_.quantized_tensors.find(y.name);
    if (out == g_.quantized_tensors.end() || out->second.low != 0 || out->second.high != 255) return std::nullopt;
    const Node& div = g_.nodes[static_cast<size_t>(rt.nodes[0])];
    const Tensor& divisor = T(div.inputs[1]);
    if (div.inputs[0] != g_.nodes[static_cast<size_t>(node)].outputs[0] || !divisor.constant ||
        divisor.f32.size() != 1 || divisor.f32[0] != static_cast<float>(out->second.scale)) {
      return std::nullopt;
    }
    rt.q = out->second;
    return rt;
  }

  // A Gemm (transB, one row, bias or none) is the 1x1 convolution of a 1x1 image
  // (a classifier): `gemm`.
  absl::StatusOr<bool> QuantizedConv(int node, TaskUse use, bool depthwise, bool gemm = false) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const Tensor& x = T(n.inputs[0]);
    const Tensor& w = T(n.inputs[1]);
    // The convolution's input N, C, H, W and filter R, S (a Gemm's: [1, K] x [N, K]^T).
    const std::vector<int64_t> xs = gemm ? std::vector<int64_t>{1, x.shape[1], 1, 1} : x.shape;
    const std::vector<int64_t> ws = gemm ? std::vector<int64_t>{w.shape[0], w.shape[1], 1, 1} : w.shape;
    auto in = g_.quantized_tensors.find(x.name);
    auto weights = g_.quantized_constants.find(w.name);
    if (in == g_.quantized_tensors.end() || weights == g_.quantized_constants.end()) return false;
    const frontend::QuantizedTensor& qx = in->second;
    const int64_t k = w.shape[0];
    if (qx.low != 0 || qx.high != 255 || weights->second.axis != 0 ||
        (weights->second.scales.size() != 1 && static_cast<int64_t>(weights->second.scales.size()) != k) ||
        k % 4 != 0 || (use.bias >= 0 && !T(use.bias).constant)) {
      return false;
    }
    std::optional<RoundTrip> out = RoundTripAfter(node);
    if (!out) return false;
    std::vector<int> nodes = {node};
    nodes.insert(nodes.end(), out->nodes.begin(), out->nodes.end());
    // A residual Add of another activation after it (ResNet's blocks), a Relu, and
    // the round trip of the sum: computed on the way out (docs/int8.md).
    if (!gemm) {
      const int conv_out = g_.nodes[static_cast<size_t>(out->nodes.back())].outputs[0];
      if (int add = SoleConsumer(out->nodes.back(), "Add"); add >= 0) {
        const Node& a = g_.nodes[static_cast<size_t>(add)];
        const int other = a.inputs[0] == conv_out ? a.inputs[1] : a.inputs[0];
        int last = add;
        const int relu = SoleConsumer(add, "Relu");
        if (relu >= 0) last = relu;
        std::optional<RoundTrip> sum = RoundTripAfter(last);
        if (other != conv_out && !T(other).constant && T(other).shape == T(conv_out).shape && sum) {
          nodes.push_back(add);
          if (relu >= 0) nodes.push_back(relu);
          nodes.insert(nodes.end(), sum->nodes.begin(), sum->nodes.end());
          use.residual = other;
          use.activation = relu >= 0 ? "relu" : "";
          use.sum_scale = sum->q.scale;
          use.sum_zero = static_cast<int64_t>(sum->q.zero);
        }
      }
      // Or a MaxPool (2-D, no dilation, symmetric pads, every window holding a
      // position inside the image) and its round trip: pooled on the way out.
      if (use.residual < 0) {
        if (int mp = SoleConsumer(out->nodes.back(), "MaxPool"); mp >= 0) {
          const Node& pool = g_.nodes[static_cast<size_t>(mp)];
          const std::vector<int64_t> pk = pool.Ints("kernel_shape");
          const std::vector<int64_t> st = pool.Ints("strides", {1, 1});
          const std::vector<int64_t> pp = pool.Ints("pads", {0, 0, 0, 0});
          const std::vector<int64_t>& in_shape = T(pool.inputs[0]).shape;
          const std::vector<int64_t>& out_shape = T(pool.outputs[0]).shape;
          std::optional<RoundTrip> pooled = RoundTripAfter(mp);
          const bool plain = pool.outputs.size() == 1 && pk.size() == 2 && st.size() == 2 && pp.size() == 4 &&
                             pool.Ints("dilations", {1, 1}) == std::vector<int64_t>{1, 1} && pp[0] == pp[2] &&
                             pp[1] == pp[3] && pool.Int("storage_order", 0) == 0 && pool.Int("ceil_mode", 0) == 0 &&
                             (!pool.attrs.count("auto_pad") || pool.attrs.at("auto_pad").text == "NOTSET") &&
                             in_shape.size() == 4 && out_shape.size() == 4;
          if (plain && pooled && pp[0] < pk[0] && pp[1] < pk[1] &&
              (out_shape[2] - 1) * st[0] - pp[0] < in_shape[2] && (out_shape[3] - 1) * st[1] - pp[1] < in_shape[3]) {
            nodes.push_back(mp);
            nodes.insert(nodes.end(), pooled->nodes.begin(), pooled->nodes.end());
            use.pool = TaskUse::QuantizedPool{pk[0], pk[1], st[0], st[1], pp[0], pp[1], pooled->q.scale,
                                              static_cast<int64_t>(pooled->q.zero)};
          }
        }
      }
    }
    const std::vector<int64_t> pads = gemm ? std::vector<int64_t>{0, 0, 0, 0} : n.Ints("pads", {0, 0, 0, 0});
    const std::vector<int64_t> strides = gemm ? std::vector<int64_t>{1, 1} : n.Ints("strides", {1, 1});
    const std::string text =
        absl::StrCat(depthwise ? "qdepthwise_conv2d" : "qconv2d", " N=", xs[0], " C=", xs[1],
                     " H=", xs[2], " W=", xs[3], depthwise ? "" : absl::StrCat(" K=", k),
                     " R=", ws[2], " S=", ws[3], " stride=", strides[0], " pad=", pads[0],
                     " a_zero=", static_cast<int64_t>(qx.zero), " bias=", use.bias >= 0 ? 1 : 0,
                     " per_channel=1 out_zero=", static_cast<int64_t>(out->q.zero), " dtype=u8s8u8");
    use.quantized = true;
    use.in_scale = qx.scale;
    use.out_scale = out->q.scale;
    RETURN_IF_ERROR(AddTask(text, nodes, "", use));
    return true;
  }

  static std::string NonAnchorReason(const std::string& op) {
    if (op == "ConvTranspose") return "transposed convolution (no template yet)";
    if (op == "DeformConv") return "deformable convolution (direct, no template yet)";
    if (op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "GlobalAveragePool" ||
        op == "GlobalMaxPool") {
      return "pooling";
    }
    if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax" || op == "LayerNormalization" ||
        op == "InstanceNormalization" || op == "GroupNormalization" || op == "MeanVarianceNormalization" ||
        op == "LRN" || op == "LpNormalization" || op == "CumSum" || op == "ArgMax" || op == "ArgMin" || op == "TopK" || op == "DFT" || op == "Det" ||
        IsReduceOp(op)) {
      return "normalization/reduction";
    }
    if (op == "Reshape" || op == "Flatten" || op == "Transpose" || op == "Squeeze" ||
        op == "Unsqueeze" || op == "Concat" || op == "Split" || op == "Slice" || op == "Gather" ||
        op == "DepthToSpace" || op == "SpaceToDepth" || op == "Resize" || op == "Upsample" || op == "GridSample" ||
        op == "Identity" || op == "Pad" || op == "Expand" || op == "Tile" || op == "Trilu" ||
        op == "GatherElements" || op == "ScatterND") {
      return "data movement";
    }
    return "elementwise";
  }

  // About one operation per output element (a few for normalizations).
  double Elementwise(const Node& n) const {
    if (n.op == "ConvTranspose") {  // a multiply-add per input element, kernel tap and output channel of its group
      const std::vector<int64_t>& w = T(n.inputs[1]).shape;
      double k = 1;
      for (size_t d = 2; d < w.size(); ++d) k *= static_cast<double>(w[d]);
      return 2.0 * static_cast<double>(T(n.inputs[0]).NumElements()) * static_cast<double>(w[1]) * k;
    }
    double out = 0;
    for (int o : n.outputs) out += static_cast<double>(T(o).NumElements());
    return n.op == "Softmax" || n.op == "LogSoftmax" || n.op == "LayerNormalization" ? 5 * out : out;
  }

  const Graph& g_;
  Uses uses_;
  std::vector<bool> taken_;
  TaskTable table_;
  std::map<std::string, size_t> index_;
};

}  // namespace

absl::StatusOr<TaskTable> ExtractTasks(const Graph& graph) { return Extractor(graph).Run(); }

}  // namespace tuneforge::graph
