#include "measure_agent/device_launch.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/files.h"

namespace tuneforge::agent {
namespace {

using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;

void Fail(MeasureResult* result, tuneforge::v1::MeasureErrorKind kind, std::string message) {
  result->clear_costs();
  result->set_error(kind);
  result->set_error_message(std::move(message));
}

bool WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return static_cast<bool>(out);
}

// The last non-empty line of `text` (a failing program's own words).
std::string LastLine(const std::string& text) {
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

void MeasureOnDevice(const MeasureRequest& request, const DeviceLaunch& device, const std::string& dir,
                     int timeout_ms, MeasureResult* result) {
  const std::string kernel = dir + "/kernel.so", output = dir + "/output.bin";
  if (!WriteFile(kernel, request.artifact()).ok()) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write the kernel for the device");
  }
  // `timeout` bounds the launcher and everything it starts (a hung board or emulator).
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f", std::max(1, timeout_ms) / 1000.0);
  std::vector<std::string> argv = {"timeout", "--kill-after=2", seconds};
  argv.insert(argv.end(), device.launcher.begin(), device.launcher.end());
  const int runs = std::clamp(request.options().repeat(), 3, 100);
  argv.insert(argv.end(), {device.runner, kernel, request.entry_symbol(),
                           request.prepack_symbol().empty() ? "-" : request.prepack_symbol(),
                           request.unpack_symbol().empty() ? "-" : request.unpack_symbol(), std::to_string(runs)});
  int64_t output_elements = 0;
  for (int i = 0; i < request.buffers_size(); ++i) {
    const auto& b = request.buffers(i);
    const std::string n = std::to_string(b.num_elements());
    if (b.role() == tuneforge::v1::OUTPUT) {
      output_elements = b.num_elements();
      argv.push_back("out:" + n + ":" + output);
    } else if (b.role() == tuneforge::v1::INTERNAL) {
      argv.push_back("tmp:" + n);
    } else {
      // The inputs the server computed the expected output from.
      std::vector<float> data(static_cast<size_t>(b.num_elements()));
      runtime::FillBuffer(request.seed(), i, data.data(), b.num_elements());
      const std::string path = dir + "/input" + std::to_string(i) + ".bin";
      if (!WriteFloats(path, data)) return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write input " + path);
      argv.push_back("in:" + n + ":" + path);
    }
  }
  absl::StatusOr<int> status = RunAndWait(argv, dir + "/device.log");
  if (!status.ok()) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot start the launcher: " + std::string(status.status().message()));
  }
  const std::string log = ReadFile(dir + "/device.log").value_or("");
  const int code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  if (code == 124 || code == 137) {
    return Fail(result, tuneforge::v1::RUN_TIMEOUT,
                absl::StrCat("the device did not answer within ", timeout_ms, " ms (launcher '",
                             device.launcher.empty() ? device.runner : device.launcher[0], "')"));
  }
  // The runner's result line (a launcher may print before it).
  double cost = -1;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("ok seconds=", 0) == 0) cost = std::strtod(line.c_str() + 11, nullptr);
  if (code != 0 || cost < 0) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR,
                absl::StrCat("device runner failed (exit ", code, "): ", LastLine(log)));
  }
  std::vector<float> out(static_cast<size_t>(output_elements), 0.0f);
  std::ifstream in(output, std::ios::binary);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  if (!in) return Fail(result, tuneforge::v1::RUNTIME_ERROR, "the device runner wrote no output");
  const auto* expected = reinterpret_cast<const float*>(request.expected_output().data());
  const int64_t bad = runtime::FirstMismatch(out.data(), expected, output_elements, request.atol(), request.rtol());
  if (bad >= 0) {
    return Fail(result, tuneforge::v1::WRONG_ANSWER,
                absl::StrCat("wrong answer on the device at index ", bad, ": ", out[static_cast<size_t>(bad)],
                             " vs ", expected[bad]));
  }
  result->clear_costs();
  result->add_costs(cost);
  result->set_error(tuneforge::v1::NONE);
}

}  // namespace tuneforge::agent
