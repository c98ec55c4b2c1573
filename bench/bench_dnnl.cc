// oneDNN's conv2d and depthwise primitives for `bench kernels` (built only with oneDNN).
#include "bench/bench_dnnl.h"

#include <omp.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tuneforge::cli {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class DnnlConvImpl : public DnnlConv {
 public:
  // qconv2d: input u8, filter s8, output of the task's type; `scale` its scales.
  DnnlConvImpl(const TuningTask& task, const void* input, const void* filter, void* output, bool winograd,
               const float* scale)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    const bool depthwise = task.op() == "depthwise_conv2d" || task.op() == "qdepthwise_conv2d";
    const bool quantized = task.op() == "qconv2d" || task.op() == "qdepthwise_conv2d";
    const std::string out = quantized ? task.QuantizedOutput() : "";
    const dt src_type = quantized ? dt::u8 : dt::f32, wei_type = quantized ? dt::s8 : dt::f32;
    const dt dst_type = !quantized ? dt::f32 : out == "s32" ? dt::s32 : out == "f32" ? dt::f32 : dt::u8;
    const memory::dim n = task.Param("N"), c = task.Param("C"), h = task.Param("H"),
                      w = task.Param("W"), k = depthwise ? c : task.Param("K"),
                      r = task.Param("R"), s = task.Param("S"), stride = task.Param("stride"),
                      pad = task.Param("pad"), oh = task.ConvOutH(), ow = task.ConvOutW();
    memory::dims src_dims = {n, c, h, w}, dst_dims = {n, k, oh, ow};
    // Grouped (depthwise: C groups of one channel): goihw, G x K/G x C/G x R x S.
    const memory::dim groups = depthwise ? c : quantized ? 1 : task.Param("groups");  // qconv2d: groups 1
    memory::dims wei_dims =
        groups > 1 ? memory::dims{groups, k / groups, c / groups, r, s} : memory::dims{k, c, r, s};
    memory::dims strides = {stride, stride}, padding = {pad, pad};
    // The right padding that gives exactly OH x OW (oneDNN checks the arithmetic).
    memory::dims padding_r = {(oh - 1) * stride + r - h - pad, (ow - 1) * stride + s - w - pad};
    memory::desc src_any(src_dims, src_type, tag::any), wei_any(wei_dims, wei_type, tag::any),
        dst_any(dst_dims, dst_type, tag::any);
    // int8: the zero points and scales fixed at creation, as for the int8 matmul.
    dnnl::primitive_attr attr;
    if (quantized && out != "s32") {
      const bool per_channel = task.Param("per_channel") == 1;
      attr.set_output_scales(per_channel ? 1 << 1 : 0, std::vector<float>(scale, scale + (per_channel ? k : 1)));
    }
    if (quantized && task.Param("a_zero") != 0) {
      attr.set_zero_points(DNNL_ARG_SRC, 0, {static_cast<int32_t>(task.Param("a_zero"))});
    }
    if (quantized && task.Param("out_zero") != 0) {
      attr.set_zero_points(DNNL_ARG_DST, 0, {static_cast<int32_t>(task.Param("out_zero"))});
    }
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                         winograd ? dnnl::algorithm::convolution_winograd
                                                  : dnnl::algorithm::convolution_direct,
                                         src_any, wei_any,
                                         dst_any, strides, padding, padding_r);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine_);
    impl_ = pd.impl_info_str();
    conv_ = dnnl::convolution_forward(pd);

    memory user_src({src_dims, src_type, tag::nchw}, engine_, const_cast<void*>(input));
    memory user_wei({wei_dims, wei_type, groups > 1 ? tag::goihw : tag::oihw}, engine_,
                    const_cast<void*>(filter));
    user_dst_ = memory({dst_dims, dst_type, tag::nchw}, engine_, output);
    src_ = memory(pd.src_desc(), engine_);
    wei_ = memory(pd.weights_desc(), engine_);
    dst_ = memory(pd.dst_desc(), engine_);
    dnnl::reorder(user_src, src_).execute(stream_, user_src, src_);
    dnnl::reorder(user_wei, wei_).execute(stream_, user_wei, wei_);
    stream_.wait();
    unpack_ = dnnl::reorder(dst_, user_dst_);
  }

  void Run() override {
    conv_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

  void Unpack() override {
    unpack_.execute(stream_, dst_, user_dst_);
    stream_.wait();
  }

  std::string impl() const override { return impl_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::convolution_forward conv_;
  dnnl::reorder unpack_;
  memory src_, wei_, dst_, user_dst_;
  std::string impl_;
};

absl::StatusOr<std::unique_ptr<DnnlConv>> MakeConv(const TuningTask& task, const void* input, const void* filter,
                                                   void* output, int threads, bool winograd, const float* scale) {
  omp_set_num_threads(threads);
  try {
    return std::unique_ptr<DnnlConv>(new DnnlConvImpl(task, input, filter, output, winograd, scale));
  } catch (const dnnl::error& e) {  // the API's only error channel
    if (e.status == dnnl_unimplemented) return absl::UnimplementedError(std::string("oneDNN: ") + e.what());
    return absl::InternalError(std::string("oneDNN: ") + e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("oneDNN: ") + e.what());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DnnlConv>> MakeDnnlConv(const TuningTask& task, const float* input,
                                                       const float* filter, float* output,
                                                       int threads, bool winograd) {
  if (task.op() != "conv2d" && task.op() != "depthwise_conv2d")
    return absl::InvalidArgumentError("oneDNN baseline only for conv2d and depthwise_conv2d");
  return MakeConv(task, input, filter, output, threads, winograd, nullptr);
}

absl::StatusOr<std::unique_ptr<DnnlConv>> MakeDnnlQuantizedConv(const TuningTask& task, const uint8_t* input,
                                                                const int8_t* filter, const float* scale,
                                                                void* output, int threads) {
  if (task.op() != "qconv2d" && task.op() != "qdepthwise_conv2d")
    return absl::InvalidArgumentError("oneDNN int8 convolution only for qconv2d and qdepthwise_conv2d");
  if (task.Param("bias") == 1) {
    return absl::UnimplementedError("oneDNN's int8 convolution adds the bias after scaling; qconv2d adds it before");
  }
  return MakeConv(task, input, filter, output, threads, /*winograd=*/false, scale);
}

namespace {

// A matmul primitive with its memories, and the call that runs it on `threads`.
struct MatmulState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul matmul;
  memory src, wei, dst;
};

std::function<void()> RunMatmul(std::shared_ptr<MatmulState> st, int threads) {
  return [st = std::move(st), threads] {
    omp_set_num_threads(threads);
    st->matmul.execute(st->stream, {{DNNL_ARG_SRC, st->src}, {DNNL_ARG_WEIGHTS, st->wei}, {DNNL_ARG_DST, st->dst}});
    st->stream.wait();
  };
}

}  // namespace

absl::StatusOr<std::function<void()>> MakeDnnlMatmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                                                     const float* a, const float* b, float* c, int threads,
                                                     std::string* impl) {
  omp_set_num_threads(threads);
  try {
    auto st = std::make_shared<MatmulState>();
    const bool batched = batch > 0;
    auto dims = [&](memory::dim rows, memory::dim cols) {
      return batched ? memory::dims{batch, rows, cols} : memory::dims{rows, cols};
    };
    const tag plain = batched ? tag::abc : tag::ab;
    memory::desc a_md(dims(m, k), dt::f32, plain), b_md(dims(k, n), dt::f32, plain),
        c_md(dims(m, n), dt::f32, plain);
    dnnl::matmul::desc desc(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(desc, st->engine);
    *impl = pd.impl_info_str();
    st->matmul = dnnl::matmul(pd);
    st->src = memory(a_md, st->engine, const_cast<float*>(a));
    st->wei = memory(b_md, st->engine, const_cast<float*>(b));
    st->dst = memory(c_md, st->engine, c);
    return RunMatmul(std::move(st), threads);
  } catch (const std::exception& e) {  // dnnl::error
    return absl::InternalError(std::string("oneDNN matmul: ") + e.what());
  }
}

absl::StatusOr<std::function<void()>> MakeDnnlQuantizedMatmul(const TuningTask& task, const uint8_t* a,
                                                              const int8_t* b, const float* scale, void* c,
                                                              int threads, std::string* impl) {
  if (task.Param("bias") == 1) {
    return absl::UnimplementedError("oneDNN's int8 matmul adds the bias after scaling; qmatmul adds it before");
  }
  omp_set_num_threads(threads);
  try {
    auto st = std::make_shared<MatmulState>();
    const memory::dim m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
    const std::string out = task.QuantizedOutput();
    const dt dst_type = out == "s32" ? dt::s32 : out == "f32" ? dt::f32 : dt::u8;
    memory::desc a_md({m, k}, dt::u8, tag::ab), b_any({k, n}, dt::s8, tag::any), c_md({m, n}, dst_type, tag::ab);
    dnnl::primitive_attr attr;
    if (out != "s32") {
      const bool per_channel = task.Param("per_channel") == 1;
      attr.set_output_scales(per_channel ? 1 << 1 : 0,
                             std::vector<float>(scale, scale + (per_channel ? n : 1)));
    }
    if (task.Param("a_zero") != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {static_cast<int32_t>(task.Param("a_zero"))});
    if (task.Param("out_zero") != 0) {
      attr.set_zero_points(DNNL_ARG_DST, 0, {static_cast<int32_t>(task.Param("out_zero"))});
    }
    dnnl::matmul::desc desc(a_md, b_any, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, st->engine);
    *impl = pd.impl_info_str();
    st->matmul = dnnl::matmul(pd);
    st->src = memory(a_md, st->engine, const_cast<uint8_t*>(a));
    st->dst = memory(c_md, st->engine, c);
    memory user_wei({{k, n}, dt::s8, tag::ab}, st->engine, const_cast<int8_t*>(b));
    st->wei = memory(pd.weights_desc(), st->engine);
    dnnl::reorder(user_wei, st->wei).execute(st->stream, user_wei, st->wei);
    st->stream.wait();
    return RunMatmul(std::move(st), threads);
  } catch (const std::exception& e) {  // dnnl::error
    return absl::InternalError(std::string("oneDNN int8 matmul: ") + e.what());
  }
}

void DnnlSgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  dnnl_sgemm('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

void DnnlSetThreads(int threads) { omp_set_num_threads(threads); }

}  // namespace tuneforge::cli
