// Measuring through a launcher: the device runner under qemu-user or ssh.
#include "measure_agent/device_launch.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/files.h"
#include "compiler/support/hash.h"
#include "measure_agent/sandbox.h"

namespace tuneforge::agent {
namespace {

using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;

void Fail(MeasureResult* result, tuneforge::v1::MeasureErrorKind kind, std::string message) {
  result->clear_costs();
  result->set_error(kind);
  result->set_error_message(std::move(message));
}

bool WriteBytes(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
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

// `words` with "{local}" and "{remote}" replaced.
std::vector<std::string> Substitute(std::vector<std::string> words, const std::string& local,
                                    const std::string& remote) {
  for (std::string& w : words) {
    for (auto [key, value] : {std::pair<std::string, std::string>{"{local}", local},
                              std::pair<std::string, std::string>{"{remote}", remote}}) {
      for (size_t at = w.find(key); at != std::string::npos; at = w.find(key, at + value.size()))
        w.replace(at, key.size(), value);
    }
  }
  return words;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Runs `command` under `timeout` (a hung board or emulator cannot hold the agent),
// its output into `log` and `input` (if any) on its stdin. The exit code, 124/137 on
// timeout; -1 when it cannot start.
int RunBounded(const std::vector<std::string>& command, int timeout_ms, const std::string& log,
               const std::string* input = nullptr) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f", std::max(1, timeout_ms) / 1000.0);
  std::vector<std::string> argv = {"timeout", "--kill-after=2", seconds};
  argv.insert(argv.end(), command.begin(), command.end());
  absl::StatusOr<int> status = RunAndWait(argv, log, input);
  if (!status.ok()) return -1;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

bool TimedOut(int code) { return code == 124 || code == 137; }


}  // namespace

absl::Status CheckDeviceLaunch(const DeviceLaunch& device) {
  const bool any = !device.push.empty() || !device.pull.empty() || !device.device_dir.empty();
  if (!any) return absl::OkStatus();
  if (device.push.empty() || device.pull.empty() || device.device_dir.empty())
    return absl::InvalidArgumentError("--push, --pull and --device-dir go together");
  if (device.runner.empty()) return absl::InvalidArgumentError("--push needs --runner");
  for (const auto* command : {&device.push, &device.pull}) {
    std::string joined;
    for (const std::string& w : *command) joined += w + " ";
    if (joined.find("{local}") == std::string::npos || joined.find("{remote}") == std::string::npos)
      return absl::InvalidArgumentError("--push and --pull must name {local} and {remote}, got '" +
                                        joined.substr(0, joined.size() - 1) + "'");
  }
  if (device.device_dir[0] != '/')
    return absl::InvalidArgumentError("--device-dir must be an absolute path on the device, got '" +
                                      device.device_dir + "'");
  return absl::OkStatus();
}

void MeasureOnDevice(const MeasureRequest& request, const DeviceLaunch& device, const std::string& dir,
                     int timeout_ms, MeasureResult* result) {
  const std::string kernel = dir + "/kernel.so", output = dir + "/output.bin";
  // Every buffer goes to the runner in bytes (inb:, outb:, tmpb:); the output is
  // checked as floats within the request's tolerance when it is float32, else bit for
  // bit (checkb:: the int8 kernels' integer outputs).
  runtime::ElementType output_type = runtime::ElementType::kFloat32;
  for (const auto& b : request.buffers()) {
    if (b.role() == tuneforge::v1::OUTPUT) output_type = ElementTypeOf(b);
  }
  const bool exact = output_type != runtime::ElementType::kFloat32;
  if (!WriteFile(kernel, request.artifact()).ok()) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write the kernel for the device");
  }
  // With `push`, every file the runner reads is copied to the device and named there.
  const bool remote = !device.push.empty();
  std::vector<std::string> to_push;
  auto on_device = [&](const std::string& local) {
    if (!remote) return local;
    to_push.push_back(local);
    return device.device_dir + "/" + Basename(local);
  };
  std::vector<std::string> argv = device.launcher;
  const int runs = std::clamp(request.options().repeat(), 3, 100);
  const std::string output_on_device = remote ? device.device_dir + "/output.bin" : output;
  argv.insert(argv.end(), {on_device(device.runner), on_device(kernel), request.entry_symbol(),
                           request.prepack_symbol().empty() ? "-" : request.prepack_symbol(),
                           request.unpack_symbol().empty() ? "-" : request.unpack_symbol(), std::to_string(runs)});
  int64_t output_elements = 0;
  // The expected output goes to the runner, which checks every run against it (and
  // removes the file before it loads the kernel); the agent checks the output again.
  // With a second input set, the runner alternates the sets between runs.
  const std::string expected_path = dir + "/expected.bin", alternate_path = dir + "/expected.alt.bin";
  const bool two_sets = !request.alternate_expected_output().empty();
  {
    const std::string& want = request.expected_output();
    if (!WriteBytes(expected_path, want.data(), want.size())) {
      return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write the expected output");
    }
    char tolerance[64];
    std::snprintf(tolerance, sizeof tolerance, "%.9g:%.9g", request.atol(), request.rtol());
    argv.push_back(exact ? absl::StrCat("checkb:", want.size(), ":", on_device(expected_path))
                         : absl::StrCat("check:", want.size() / sizeof(float), ":", tolerance, ":",
                                        on_device(expected_path)));
    if (two_sets) {
      const std::string& alt = request.alternate_expected_output();
      if (alt.size() != want.size() || !WriteBytes(alternate_path, alt.data(), alt.size())) {
        return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write the expected output");
      }
      argv.push_back(exact ? absl::StrCat("altcheckb:", alt.size(), ":", on_device(alternate_path))
                           : absl::StrCat("altcheck:", alt.size() / sizeof(float), ":", on_device(alternate_path)));
    }
  }
  for (int i = 0; i < request.buffers_size(); ++i) {
    const auto& b = request.buffers(i);
    const int64_t bytes = b.num_elements() * runtime::ElementBytes(ElementTypeOf(b));
    const std::string n = std::to_string(bytes);
    if (b.role() == tuneforge::v1::OUTPUT) {
      output_elements = b.num_elements();
      argv.push_back("outb:" + n + ":" + output_on_device);
    } else if (b.role() == tuneforge::v1::INTERNAL) {
      argv.push_back("tmpb:" + n);
    } else {
      // The inputs the server computed the expected outputs from.
      for (int set = 0; set < (two_sets ? 2 : 1); ++set) {
        std::vector<char> data(static_cast<size_t>(bytes));
        runtime::FillBuffer(set == 0 ? request.seed() : request.alternate_seed(), i, FillOf(b), data.data(),
                            b.num_elements());
        const std::string path = absl::StrCat(dir, "/input", i, set == 0 ? "" : ".alt", ".bin");
        if (!WriteBytes(path, data.data(), data.size())) {
          return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot write input " + path);
        }
        argv.push_back(absl::StrCat(set == 0 ? "inb:" : "altb:", n, ":", on_device(path)));
      }
    }
  }
  const std::string copy_log = dir + "/copy.log";
  if (remote) {
    std::vector<std::string> mkdir = device.launcher;
    mkdir.insert(mkdir.end(), {"mkdir", "-p", device.device_dir});
    const int made = RunBounded(mkdir, timeout_ms, copy_log);
    if (made != 0) {
      return Fail(result, TimedOut(made) ? tuneforge::v1::RUN_TIMEOUT : tuneforge::v1::RUNTIME_ERROR,
                  absl::StrCat("cannot make ", device.device_dir, " on the device (exit ", made,
                               "): ", LastLine(ReadFile(copy_log).value_or(""))));
    }
    for (const std::string& file : to_push) {
      const int code = RunBounded(Substitute(device.push, file, device.device_dir + "/" + Basename(file)),
                                  timeout_ms, copy_log);
      if (code != 0) {
        return Fail(result, TimedOut(code) ? tuneforge::v1::RUN_TIMEOUT : tuneforge::v1::RUNTIME_ERROR,
                    absl::StrCat("cannot copy ", Basename(file), " to the device (exit ", code,
                                 "): ", LastLine(ReadFile(copy_log).value_or(""))));
      }
    }
  }
  // The runner prints it in its result line, which the kernel (in a child process of
  // the runner) can neither read nor print.
  const std::string nonce = RandomToken();
  const std::string stdin_line = nonce + "\n";
  const int code = RunBounded(argv, timeout_ms, dir + "/device.log", &stdin_line);
  std::remove(expected_path.c_str());
  std::remove(alternate_path.c_str());
  if (code < 0) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR, "cannot start the launcher");
  }
  const std::string log = ReadFile(dir + "/device.log").value_or("");
  if (TimedOut(code)) {
    return Fail(result, tuneforge::v1::RUN_TIMEOUT,
                absl::StrCat("the device did not answer within ", timeout_ms, " ms (launcher '",
                             device.launcher.empty() ? device.runner : device.launcher[0], "')"));
  }
  // The runner's result line, known by this run's nonce (a launcher may print before
  // it; a kernel may print anything, but not the nonce).
  double cost = -1;
  std::istringstream lines(log);
  std::string line;
  const std::string ok = "ok nonce=" + nonce + " seconds=";
  while (std::getline(lines, line))
    if (line.rfind(ok, 0) == 0) cost = std::strtod(line.c_str() + ok.size(), nullptr);
  if (code != 0 && LastLine(log).rfind("error wrong answer", 0) == 0) {
    return Fail(result, tuneforge::v1::WRONG_ANSWER, "device runner: " + LastLine(log));
  }
  if (code != 0 || !(cost > 0) || !std::isfinite(cost)) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR,
                absl::StrCat("device runner failed (exit ", code, "): ", LastLine(log)));
  }
  if (remote) {
    const int pulled = RunBounded(Substitute(device.pull, output, output_on_device), timeout_ms, copy_log);
    if (pulled != 0) {
      return Fail(result, TimedOut(pulled) ? tuneforge::v1::RUN_TIMEOUT : tuneforge::v1::RUNTIME_ERROR,
                  absl::StrCat("cannot copy the output back from the device (exit ", pulled,
                               "): ", LastLine(ReadFile(copy_log).value_or(""))));
    }
  }
  // The runner wrote the output of its last run, which used the second input set when
  // the run count was even.
  const std::string& last_expected = two_sets && runs % 2 == 0 ? request.alternate_expected_output()
                                                                : request.expected_output();
  std::vector<char> out(last_expected.size(), 0);
  std::ifstream in(output, std::ios::binary);
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  if (!in || static_cast<int64_t>(out.size()) != output_elements * runtime::ElementBytes(output_type)) {
    return Fail(result, tuneforge::v1::RUNTIME_ERROR, "the device runner wrote no output of the expected size");
  }
  const int64_t bad = runtime::FirstMismatch(output_type, out.data(), last_expected.data(), output_elements,
                                             request.atol(), request.rtol());
  if (bad >= 0) {
    return Fail(result, tuneforge::v1::WRONG_ANSWER,
                absl::StrCat("wrong answer on the device at index ", bad, ": ",
                             runtime::ElementAt(output_type, out.data(), bad), " vs ",
                             runtime::ElementAt(output_type, last_expected.data(), bad)));
  }
  result->clear_costs();
  result->add_costs(cost);
  result->set_error(tuneforge::v1::NONE);
}

}  // namespace tuneforge::agent
