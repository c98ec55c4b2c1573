// Test helper: MeasureRequests for the test kernels.
#include "measure_agent/testing/kernel_request.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "compiler/runtime/runtime.h"
#include "compiler/support/hash.h"
#include "measure_agent/testdata/test_kernel.h"

namespace tuneforge::agent::test {

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

tuneforge::v1::MeasureRequest MakeKernelRequest(const std::string& so_path,
                                                const std::string& entry,
                                                const std::string& request_id) {
  tuneforge::v1::MeasureRequest request;
  request.set_request_id(request_id);
  request.set_task("test add n=4096");
  request.set_config_json("{}");
  request.set_artifact(ReadFileOrDie(so_path));
  request.set_artifact_hash(HashHex(request.artifact()));
  request.set_entry_symbol(entry);
  const char* names[] = {"A", "B", "C"};
  for (int i = 0; i < 3; ++i) {
    auto* b = request.add_buffers();
    b->set_name(names[i]);
    b->set_num_elements(kTestElements);
    b->set_role(i < 2 ? tuneforge::v1::INPUT : tuneforge::v1::OUTPUT);
  }
  // Two input sets, as the server sends them: C = A + B for each.
  request.set_seed(42);
  request.set_alternate_seed(43);
  for (uint64_t seed : {request.seed(), request.alternate_seed()}) {
    std::vector<float> a(kTestElements), b(kTestElements), c(kTestElements);
    runtime::FillBuffer(seed, 0, a.data(), kTestElements);
    runtime::FillBuffer(seed, 1, b.data(), kTestElements);
    for (int i = 0; i < kTestElements; ++i) c[i] = a[i] + b[i];
    std::string bytes(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(float));
    if (seed == request.seed()) {
      request.set_expected_output(std::move(bytes));
    } else {
      request.set_alternate_expected_output(std::move(bytes));
    }
  }
  request.set_atol(1e-6);
  request.set_rtol(1e-6);
  auto* options = request.mutable_options();
  options->set_warmup(1);
  options->set_number(1);
  options->set_repeat(3);
  options->set_min_repeat_ms(1);
  options->set_timeout_ms(5000);
  return request;
}

tuneforge::v1::MeasureRequest MakeIntegerKernelRequest(const std::string& so_path,
                                                       const std::string& entry,
                                                       const std::string& request_id) {
  tuneforge::v1::MeasureRequest request = MakeKernelRequest(so_path, entry, request_id);
  request.set_task("test add_u8_s8 n=4096");
  const runtime::FillSpec a_fill{runtime::ElementType::kUInt8, 10, 20};
  const runtime::FillSpec b_fill = runtime::DefaultFill(runtime::ElementType::kInt8);
  request.mutable_buffers(0)->set_element_type(tuneforge::v1::UINT8);
  request.mutable_buffers(0)->set_fill_low(a_fill.low);
  request.mutable_buffers(0)->set_fill_high(a_fill.high);
  request.mutable_buffers(1)->set_element_type(tuneforge::v1::INT8);
  request.mutable_buffers(2)->set_element_type(tuneforge::v1::INT32);
  for (uint64_t seed : {request.seed(), request.alternate_seed()}) {
    std::vector<uint8_t> a(kTestElements);
    std::vector<int8_t> b(kTestElements);
    std::vector<int32_t> c(kTestElements);
    runtime::FillBuffer(seed, 0, a_fill, a.data(), kTestElements);
    runtime::FillBuffer(seed, 1, b_fill, b.data(), kTestElements);
    for (int i = 0; i < kTestElements; ++i) c[i] = a[i] + b[i];
    std::string bytes(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(int32_t));
    if (seed == request.seed()) {
      request.set_expected_output(std::move(bytes));
    } else {
      request.set_alternate_expected_output(std::move(bytes));
    }
  }
  request.set_atol(0);
  request.set_rtol(0);
  return request;
}

}  // namespace tuneforge::agent::test
