// The sandbox against real shared objects (measure_agent/testdata) and the real agent
// binary as the child: every way a kernel can behave must come back as a
// MeasureResult, and nothing may be left in the temp directory.
#include "measure_agent/sandbox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sched.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/hash.h"
#include "measure_agent/quiet.h"
#include "measure_agent/testing/kernel_request.h"
#include "nlohmann/json.hpp"

namespace tuneforge::agent {
namespace {

using test::MakeIntegerKernelRequest;
using test::MakeKernelRequest;
using ::testing::HasSubstr;
using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;

// The empty call's round trip comes off each sample, spread over its runs; an estimate
// as long as the samples themselves (a busy machine) takes at most half of each.
TEST(SubtractRoundTripTest, TakesTheRoundTripPerRunAndNeverMoreThanHalf) {
  const std::vector<double> costs = SubtractRoundTrip({1e-3, 2e-3}, 10, 1e-3);
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_DOUBLE_EQ(costs[0], 0.9e-3);
  EXPECT_DOUBLE_EQ(costs[1], 1.9e-3);
  EXPECT_DOUBLE_EQ(SubtractRoundTrip({2e-4}, 4, 1e-3)[0], 1e-4);  // not -5e-5, nor 0
  EXPECT_DOUBLE_EQ(SubtractRoundTrip({2e-4}, 0, 5e-5)[0], 1.5e-4);  // number < 1: one run
  EXPECT_DOUBLE_EQ(SubtractRoundTrip({2e-4}, 1, -1)[0], 2e-4);
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "sandbox_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    options_.agent_binary = TUNEFORGE_AGENT_BINARY;
    options_.temp_root = root_;
    options_.agent_id = "agent-under-test";
    options_.environment_json = R"({"cpu_model":"test"})";
  }

  void TearDown() override {
    // Every Run must have removed its private directory.
    EXPECT_TRUE(std::filesystem::is_empty(root_)) << "sandbox left files in " << root_;
    std::filesystem::remove_all(root_);
  }

  MeasureResult Run(const MeasureRequest& request) { return Sandbox(options_).Run(request); }

  // A child process that keeps `cpu` busy until it is killed (other work for the quiet
  // check); -1 when fork fails.
  static pid_t StartSpinner(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    const pid_t spinner = fork();
    if (spinner == 0) {
      sched_setaffinity(0, sizeof(set), &set);
      for (;;) {
      }
    }
    return spinner;
  }

  std::string root_;
  SandboxOptions options_;
};

TEST_F(SandboxTest, GoodKernelIsMeasured) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r1");
  MeasureResult result = Run(request);
  ASSERT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
  EXPECT_EQ(result.request_id(), "r1");
  EXPECT_EQ(result.agent_id(), "agent-under-test");
  // The agent's environment, and what the sandbox found around this measurement.
  nlohmann::json env = nlohmann::json::parse(result.environment_json());
  EXPECT_EQ(env["cpu_model"], "test");
  EXPECT_EQ(env["measurement"]["pinned"], false);
  EXPECT_EQ(env["measurement"]["cpus"], FormatCpuList(AllowedCpus()));
  EXPECT_EQ(env["measurement"]["remeasured"], false);
  ASSERT_EQ(result.costs_size(), 3);
  for (double c : result.costs()) {
    EXPECT_GT(c, 0);
    EXPECT_LT(c, 1.0);
  }
  EXPECT_GT(result.start_unix_us(), 0);
  EXPECT_GE(result.end_unix_us(), result.start_unix_us());
}

TEST_F(SandboxTest, PinnedKernelThreadsRunOnOneCpuEach) {
  // pinned_add_kernel returns 7 unless each of its two threads may run on one CPU only.
  const std::vector<int> cpus = AllowedCpus();
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "pinned_add_kernel", "r1");
  options_.pin_cpus = cpus;
  MeasureResult pinned = Run(request);
  ASSERT_EQ(pinned.error(), tuneforge::v1::NONE) << pinned.error_message();
  EXPECT_EQ(nlohmann::json::parse(pinned.environment_json())["measurement"]["pinned"], true);
  if (cpus.size() >= 2) {  // unpinned, a thread may run on any of them
    options_.pin_cpus.clear();
    MeasureResult unpinned = Run(request);
    EXPECT_EQ(unpinned.error(), tuneforge::v1::RUNTIME_ERROR);
    EXPECT_THAT(unpinned.error_message(), HasSubstr("returned 7"));
  }
}

TEST_F(SandboxTest, BusyCpusAreWaitedForAndTheMeasurementRepeated) {
  // Another process spins on the kernel's only CPU for the whole test (the agent's own
  // CPU time is not "other work"): the sandbox waits for quiet up to its bound,
  // measures, sees the CPU taken during the measurement, measures again, and says all
  // of it in the record, the figure marked disturbed.
  const int cpu = AllowedCpus().back();
  const pid_t spinner = StartSpinner(cpu);
  ASSERT_GE(spinner, 0);
  options_.pin_cpus = {cpu};
  options_.quiet.max_busy = 0.25;
  options_.quiet.max_wait_ms = 300;
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r1");
  request.mutable_options()->set_min_repeat_ms(20);
  MeasureResult result = Run(request);
  kill(spinner, SIGKILL);
  waitpid(spinner, nullptr, 0);
  ASSERT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
  nlohmann::json m = nlohmann::json::parse(result.environment_json())["measurement"];
  EXPECT_EQ(m["cpus"], std::to_string(cpu));
  EXPECT_GT(m["busy_before"].get<double>(), 0.25) << m.dump();
  EXPECT_GE(m["quiet_wait_ms"].get<int>(), 300) << m.dump();
  EXPECT_GT(m["others_busy"].get<double>(), 0.25) << m.dump();
  EXPECT_EQ(m["remeasured"], true) << m.dump();
  EXPECT_GE(m["attempts"].get<int>(), 2) << m.dump();
  EXPECT_EQ(m["disturbed"], true) << m.dump();  // the spinner never stopped
}

TEST_F(SandboxTest, PersistentLoadIsMeasuredWithoutWaitingUntilQuietReturns) {
  // A spinner that never stops: after two measurements that waited out their bound and
  // were disturbed on every attempt, the third reads the CPU once and measures once;
  // with the spinner gone, the next finds quiet and the one after waits as usual.
  const int cpu = AllowedCpus().back();
  const pid_t spinner = StartSpinner(cpu);
  ASSERT_GE(spinner, 0);
  options_.pin_cpus = {cpu};
  options_.quiet.max_busy = 0.25;
  options_.quiet.max_wait_ms = 200;
  options_.quiet.persistent_after = 2;
  Sandbox sandbox(options_);
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r1");
  request.mutable_options()->set_min_repeat_ms(20);
  std::vector<nlohmann::json> busy;
  for (int i = 0; i < 3; ++i) {
    MeasureResult result = sandbox.Run(request);
    ASSERT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
    busy.push_back(nlohmann::json::parse(result.environment_json())["measurement"]);
  }
  kill(spinner, SIGKILL);
  waitpid(spinner, nullptr, 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(busy[i]["persistent_load"], false) << busy[i].dump();
    EXPECT_GE(busy[i]["quiet_wait_ms"].get<int>(), 200) << busy[i].dump();
    EXPECT_GE(busy[i]["attempts"].get<int>(), 2) << busy[i].dump();
  }
  EXPECT_EQ(busy[2]["persistent_load"], true) << busy[2].dump();
  EXPECT_EQ(busy[2]["quiet_wait_ms"], 0) << busy[2].dump();
  EXPECT_EQ(busy[2]["attempts"], 1) << busy[2].dump();
  EXPECT_EQ(busy[2]["disturbed"], true) << busy[2].dump();
  // The spinner gone, each measurement is persistent exactly when the one before it
  // was and found no quiet (on an idle machine the first finds quiet and the next
  // waits as usual; on a busy one they stay persistent).
  nlohmann::json before = busy[2];
  for (int i = 0; i < 3; ++i) {
    MeasureResult result = sandbox.Run(request);
    ASSERT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
    nlohmann::json now = nlohmann::json::parse(result.environment_json())["measurement"];
    const bool found_quiet = before["busy_before"].get<double>() <= 0.25 ||
                             before["others_busy"].get<double>() <= 0.25;
    if (before["persistent_load"] == true) {
      EXPECT_EQ(now["persistent_load"], !found_quiet) << before.dump() << " then " << now.dump();
    }
    before = now;
  }
}

TEST_F(SandboxTest, FlushCacheAndRepeatAreHonoured) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r1");
  request.mutable_options()->set_flush_cache(true);
  request.mutable_options()->set_repeat(5);
  MeasureResult result = Run(request);
  ASSERT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
  EXPECT_EQ(result.costs_size(), 5);
}

TEST_F(SandboxTest, WrongAnswerNamesTheFirstBadElement) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "wrong_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::WRONG_ANSWER);
  EXPECT_THAT(result.error_message(), HasSubstr("C[0] = "));
  EXPECT_THAT(result.error_message(), HasSubstr("expected"));
  EXPECT_EQ(result.costs_size(), 0);
}

TEST_F(SandboxTest, KernelThatWritesNothingIsWrong) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "noop_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::WRONG_ANSWER);
  EXPECT_THAT(result.error_message(), HasSubstr("nan"));
}

TEST_F(SandboxTest, KernelThatGoesWrongWhenRepeatedIsWrong) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "flaky_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::WRONG_ANSWER);
  EXPECT_THAT(result.error_message(), HasSubstr("after the timed runs"));
}

// A kernel that replays the output it computed first passes every check while its
// inputs stay the same (the test's first half: what a single input set lets through)
// and fails when the timed samples alternate two input sets, as the server asks.
TEST_F(SandboxTest, KernelThatReplaysAnEarlierOutputIsWrong) {
  MeasureRequest one_set = MakeKernelRequest(BAD_KERNELS_PATH, "replay_kernel", "r1");
  one_set.clear_alternate_seed();
  one_set.clear_alternate_expected_output();
  MeasureResult fooled = Run(one_set);
  EXPECT_EQ(fooled.error(), tuneforge::v1::NONE) << fooled.error_message();

  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "replay_kernel", "r2"));
  EXPECT_EQ(result.error(), tuneforge::v1::WRONG_ANSWER) << result.error_message();
  EXPECT_THAT(result.error_message(), HasSubstr("on the second input set"));
  EXPECT_EQ(result.costs_size(), 0);
}

TEST_F(SandboxTest, AlternateExpectedOutputOfTheWrongSizeIsRefused) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r");
  request.set_alternate_expected_output("abcd");
  MeasureResult result = Run(request);
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("alternate_expected_output has 4 bytes"));
}

// Integer buffers: filled by type and range, the output compared exactly and
// poisoned between runs (a kernel that writes nothing fails).
TEST_F(SandboxTest, IntegerBuffersAreFilledByTypeAndCheckedExactly) {
  MeasureResult good = Run(MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "r1"));
  ASSERT_EQ(good.error(), tuneforge::v1::NONE) << good.error_message();
  EXPECT_EQ(good.costs_size(), 3);

  // One element off by one in 4096: found, named, with both values as integers.
  MeasureRequest off = MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "r2");
  std::string bytes = off.expected_output();
  int32_t v = 0;
  std::memcpy(&v, &bytes[4 * 100], 4);
  const int32_t wrong = v + 1;
  std::memcpy(&bytes[4 * 100], &wrong, 4);
  off.set_expected_output(bytes);
  MeasureResult mismatch = Run(off);
  EXPECT_EQ(mismatch.error(), tuneforge::v1::WRONG_ANSWER);
  EXPECT_THAT(mismatch.error_message(), HasSubstr("C[100] = " + std::to_string(v) + ", expected " +
                                                  std::to_string(wrong)));

  // The fill range is part of the inputs: the same kernel on A's default fill.
  MeasureRequest default_fill = MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "r3");
  default_fill.mutable_buffers(0)->clear_fill_low();
  default_fill.mutable_buffers(0)->clear_fill_high();
  EXPECT_EQ(Run(default_fill).error(), tuneforge::v1::WRONG_ANSWER);

  MeasureRequest noop = MakeIntegerKernelRequest(BAD_KERNELS_PATH, "noop_kernel", "r4");
  EXPECT_EQ(Run(noop).error(), tuneforge::v1::WRONG_ANSWER);
}

TEST(ValidateMeasureRequestTest, IntegerBuffersNeedAKnownTypeAFillTheyCanHoldAndTheirOutputSize) {
  auto error = [](const MeasureRequest& r) { return std::string(ValidateMeasureRequest(r).message()); };
  const MeasureRequest good = MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "r");
  EXPECT_TRUE(ValidateMeasureRequest(good).ok()) << ValidateMeasureRequest(good);
  MeasureRequest r = good;
  r.mutable_buffers(1)->set_element_type(static_cast<tuneforge::v1::ElementType>(9));
  EXPECT_THAT(error(r), HasSubstr("buffer B has an unknown element type 9"));
  r = good;
  r.mutable_buffers(0)->set_fill_high(300);
  EXPECT_THAT(error(r), HasSubstr("buffer A: the fill range of an uint8 buffer must be integers within [0, 256)"));
  r = good;
  r.mutable_buffers(2)->set_element_type(tuneforge::v1::UINT8);  // 4096 bytes, not 16384
  EXPECT_THAT(error(r), HasSubstr("expected_output has 16384 bytes, the OUTPUT buffer 4096"));
}

TEST_F(SandboxTest, SegfaultIsARuntimeError) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "segv_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("SIGSEGV"));
  EXPECT_EQ(result.agent_id(), "agent-under-test");
}

TEST_F(SandboxTest, AbortIsARuntimeError) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "abort_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("SIGABRT"));
}

TEST_F(SandboxTest, ExitInsideTheKernelIsARuntimeError) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "exit_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("exited with code 3"));
}

TEST_F(SandboxTest, NonZeroReturnIsARuntimeError) {
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "fail_kernel", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("returned 7"));
}

TEST_F(SandboxTest, InfiniteLoopTimesOut) {
  MeasureRequest request = MakeKernelRequest(BAD_KERNELS_PATH, "loop_kernel", "r");
  request.mutable_options()->set_timeout_ms(500);
  auto start = std::chrono::steady_clock::now();
  MeasureResult result = Run(request);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.error(), tuneforge::v1::RUN_TIMEOUT);
  EXPECT_THAT(result.error_message(), HasSubstr("500 ms"));
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 60.0);  // killed: the kernel never returns by itself
}

TEST_F(SandboxTest, ZeroTimeoutMeansTheDefault) {
  options_.default_timeout_ms = 300;
  MeasureRequest request = MakeKernelRequest(BAD_KERNELS_PATH, "loop_kernel", "r");
  request.mutable_options()->set_timeout_ms(0);
  MeasureResult result = Run(request);
  EXPECT_EQ(result.error(), tuneforge::v1::RUN_TIMEOUT);
  EXPECT_THAT(result.error_message(), HasSubstr("300 ms"));
}

TEST_F(SandboxTest, HashMismatchIsRejectedBeforeLoading) {
  // The segfaulting kernel: had it been run, the error would name SIGSEGV.
  MeasureRequest request = MakeKernelRequest(BAD_KERNELS_PATH, "segv_kernel", "r");
  request.set_artifact_hash(HashHex("something else"));
  MeasureResult result = Run(request);
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("artifact hash mismatch"));
  EXPECT_THAT(result.error_message(), ::testing::Not(HasSubstr("SIGSEGV")));
}

TEST_F(SandboxTest, MissingEntrySymbolReportsDlerror) {
  MeasureResult result = Run(MakeKernelRequest(ADD_KERNEL_PATH, "no_such_entry", "r"));
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("dlsym(no_such_entry)"));
}

TEST_F(SandboxTest, ArtifactThatIsNotASharedObjectReportsDlerror) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r");
  request.set_artifact("definitely not ELF");
  request.set_artifact_hash(HashHex(request.artifact()));
  MeasureResult result = Run(request);
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("dlopen failed"));
}

TEST_F(SandboxTest, MalformedRequestIsARuntimeError) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "r");
  request.set_expected_output("short");
  MeasureResult result = Run(request);
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(result.error_message(), HasSubstr("invalid MeasureRequest"));
}

TEST_F(SandboxTest, OneSandboxSurvivesFailuresAndGoesOn) {
  Sandbox sandbox(options_);
  EXPECT_EQ(sandbox.Run(MakeKernelRequest(BAD_KERNELS_PATH, "segv_kernel", "a")).error(),
            tuneforge::v1::RUNTIME_ERROR);
  EXPECT_EQ(sandbox.Run(MakeKernelRequest(BAD_KERNELS_PATH, "abort_kernel", "b")).error(),
            tuneforge::v1::RUNTIME_ERROR);
  MeasureResult good = sandbox.Run(MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "c"));
  EXPECT_EQ(good.error(), tuneforge::v1::NONE) << good.error_message();
  EXPECT_EQ(good.request_id(), "c");
}

// ---------------------------------------------------------------------------------
// Hostile kernels (testdata/bad_kernels.c): each ends as a measurement error with no
// cost, and the same Sandbox goes on measuring good kernels afterwards.

struct HostileCase {
  const char* entry;
  tuneforge::v1::MeasureErrorKind kind;
  const char* message;  // a substring of the error message
  int timeout_ms = 2000;
};

TEST_F(SandboxTest, HostileKernelsAreMeasurementErrorsAndTheSandboxGoesOn) {
  const HostileCase cases[] = {
      {"oob_write_kernel", tuneforge::v1::RUNTIME_ERROR, "SIGSEGV"},
      {"input_write_kernel", tuneforge::v1::WRONG_ANSWER, "wrote into its input A: A[5] = "},
      {"fork_kernel", tuneforge::v1::RUNTIME_ERROR, "SIGSYS"},
      {"socket_kernel", tuneforge::v1::RUNTIME_ERROR, "SIGSYS"},
      {"kill_parent_kernel", tuneforge::v1::RUNTIME_ERROR, "SIGSYS"},
      // Touches about 1.5 GB before the address-space limit stops it: time to spare
      // when other tests hold the cores.
      {"memory_kernel", tuneforge::v1::RUNTIME_ERROR, "SIGSEGV", 30000},
      {"forge_kernel", tuneforge::v1::WRONG_ANSWER, "C[0] = nan"},
      {"loop_kernel", tuneforge::v1::RUN_TIMEOUT, "timeout"},
  };
  Sandbox sandbox(options_);
  int refused = 0;
  for (const HostileCase& c : cases) {
    MeasureRequest request = MakeKernelRequest(BAD_KERNELS_PATH, c.entry, c.entry);
    request.mutable_options()->set_timeout_ms(c.timeout_ms);
    MeasureResult result = sandbox.Run(request);
    EXPECT_EQ(result.error(), c.kind) << c.entry << ": " << result.error_message();
    EXPECT_THAT(result.error_message(), HasSubstr(c.message)) << c.entry;
    EXPECT_EQ(result.costs_size(), 0) << c.entry;
    refused += result.error() == c.kind && result.costs_size() == 0;
    MeasureResult good = sandbox.Run(MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "good"));
    EXPECT_EQ(good.error(), tuneforge::v1::NONE) << "after " << c.entry << ": "
                                                 << good.error_message();
  }
  std::printf("hostile kernels refused: %d of %zu\n", refused, std::size(cases));
}

TEST_F(SandboxTest, KernelCannotWriteOutsideItsDirectory) {
  std::string outside = std::filesystem::temp_directory_path() / "tuneforge-escape-XXXXXX";
  ASSERT_NE(mkdtemp(outside.data()), nullptr);
  std::string escape_path = outside + "/escaped.txt";
  setenv("TUNEFORGE_TEST_ESCAPE_PATH", escape_path.c_str(), 1);
  MeasureResult result = Run(MakeKernelRequest(BAD_KERNELS_PATH, "escape_kernel", "r"));
  unsetenv("TUNEFORGE_TEST_ESCAPE_PATH");
  bool escaped = std::filesystem::exists(escape_path);
  std::filesystem::remove_all(outside);
  // Landlock refuses the open (the kernel then returns 9). This machine's kernel has
  // Landlock; where one does not, the agent logs that it runs without it.
  EXPECT_FALSE(escaped);
  EXPECT_EQ(result.error(), tuneforge::v1::RUNTIME_ERROR) << result.error_message();
  EXPECT_THAT(result.error_message(), HasSubstr("returned 9"));
}

TEST_F(SandboxTest, StaleDirectoriesOfDeadAgentsAreRemoved) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  namespace fs = std::filesystem;
  fs::path stale = fs::path(root_) / absl::StrCat("tuneforge-sandbox-", dead, "-abcdef");
  fs::path live = fs::path(root_) / absl::StrCat("tuneforge-sandbox-", getpid(), "-abcdef");
  fs::path other = fs::path(root_) / "tuneforge-sandbox-notapid";
  for (const fs::path& p : {stale, live, other}) fs::create_directories(p / "inner");

  EXPECT_EQ(RemoveStaleSandboxDirs(root_), 1);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  fs::remove_all(live);
  fs::remove_all(other);
}

}  // namespace
}  // namespace tuneforge::agent

namespace tuneforge::agent {
namespace {

// A device agent's failures (device_launch.h) come back as measurement errors, never
// as speeds, and leave nothing behind: a launcher that fails, one that hangs past the
// timeout, and a runner that cannot load the kernel (the host's add kernel given to
// the aarch64 runner under qemu: the wrong architecture).
class DeviceLaunchTest : public SandboxTest {};

TEST_F(DeviceLaunchTest, LauncherFailuresHangsAndWrongArchitectureAreErrors) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "d1");
  options_.device.runner = AARCH64_RUNNER_PATH;

  options_.device.launcher = {"false"};
  MeasureResult failed = Run(request);
  EXPECT_EQ(failed.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(failed.error_message(), HasSubstr("device runner failed (exit 1)"));
  EXPECT_EQ(failed.costs_size(), 0);

  options_.device.launcher = {"sh", "-c", "sleep 30", "hung-board"};  // ignores the runner's arguments
  request.mutable_options()->set_timeout_ms(500);
  const auto start = std::chrono::steady_clock::now();
  MeasureResult hung = Run(request);
  EXPECT_EQ(hung.error(), tuneforge::v1::RUN_TIMEOUT) << hung.error_message();
  EXPECT_THAT(hung.error_message(), HasSubstr("did not answer within 500 ms (launcher 'sh')"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  options_.device.launcher = {"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"};
  request.mutable_options()->set_timeout_ms(20000);
  MeasureResult wrong_arch = Run(request);
  EXPECT_EQ(wrong_arch.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(wrong_arch.error_message(), HasSubstr("cannot load the kernel"));
  EXPECT_EQ(wrong_arch.costs_size(), 0);
}

// The device runner holds the verdict in a process the kernel cannot write into
// (issue 63): a kernel that prints a forged result line (with a fake time) is an
// error, one that does the work only when untimed is a wrong answer, and an honest
// kernel is measured. Natively, with this machine's runner (no launcher).
TEST_F(DeviceLaunchTest, DeviceKernelsCannotForgeTheirTimeOrSkipTheirWork) {
  options_.device.runner = HOST_RUNNER_PATH;
  MeasureResult good = Run(MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "d3"));
  EXPECT_EQ(good.error(), tuneforge::v1::NONE) << good.error_message();
  ASSERT_EQ(good.costs_size(), 1);
  EXPECT_GT(good.costs(0), 0);

  MeasureResult fake = Run(MakeKernelRequest(BAD_KERNELS_PATH, "device_fake_time_kernel", "d4"));
  EXPECT_EQ(fake.error(), tuneforge::v1::RUNTIME_ERROR) << fake.error_message();
  EXPECT_THAT(fake.error_message(), HasSubstr("the kernel printed"));
  EXPECT_EQ(fake.costs_size(), 0);

  MeasureResult lazy = Run(MakeKernelRequest(BAD_KERNELS_PATH, "device_lazy_kernel", "d5"));
  EXPECT_EQ(lazy.error(), tuneforge::v1::WRONG_ANSWER) << lazy.error_message();
  EXPECT_THAT(lazy.error_message(), HasSubstr("of run 2"));
  EXPECT_EQ(lazy.costs_size(), 0);

  MeasureResult changer = Run(MakeKernelRequest(BAD_KERNELS_PATH, "input_write_kernel", "d6"));
  EXPECT_EQ(changer.error(), tuneforge::v1::RUNTIME_ERROR) << changer.error_message();
  EXPECT_THAT(changer.error_message(), HasSubstr("changed its input"));

  MeasureResult replay = Run(MakeKernelRequest(BAD_KERNELS_PATH, "replay_kernel", "d7"));
  EXPECT_EQ(replay.error(), tuneforge::v1::WRONG_ANSWER) << replay.error_message();
  EXPECT_THAT(replay.error_message(), HasSubstr("of run 2 (second input set)"));
  EXPECT_EQ(replay.costs_size(), 0);
}

// Integer buffers through the device runner (its byte buffers and exact check), as the
// int8 kernels' measurements on a board take them: measured, and an output one off in
// one element is a wrong answer, as is a kernel that writes nothing.
TEST_F(DeviceLaunchTest, IntegerBuffersGoToTheDeviceAsBytesAndAreCheckedExactly) {
  options_.device.runner = HOST_RUNNER_PATH;
  MeasureResult good = Run(MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "d8"));
  ASSERT_EQ(good.error(), tuneforge::v1::NONE) << good.error_message();
  ASSERT_EQ(good.costs_size(), 1);
  EXPECT_GT(good.costs(0), 0);

  MeasureRequest off = MakeIntegerKernelRequest(ADD_KERNEL_PATH, "add_u8_s8_kernel", "d9");
  std::string bytes = off.expected_output();
  ++bytes[4 * 100];
  off.set_expected_output(bytes);
  MeasureResult mismatch = Run(off);
  EXPECT_EQ(mismatch.error(), tuneforge::v1::WRONG_ANSWER) << mismatch.error_message();
  EXPECT_THAT(mismatch.error_message(), HasSubstr("byte 400 of run 1"));

  MeasureResult noop = Run(MakeIntegerKernelRequest(BAD_KERNELS_PATH, "noop_kernel", "d10"));
  EXPECT_EQ(noop.error(), tuneforge::v1::WRONG_ANSWER) << noop.error_message();
  EXPECT_EQ(noop.costs_size(), 0);
}

// A device that does not share the agent's files: a copy to it that fails or hangs is
// a measurement error naming the file, never a speed.
TEST_F(DeviceLaunchTest, CopyFailuresAreErrors) {
  MeasureRequest request = MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "d2");
  const std::string board = root_ + "-board";
  options_.device.runner = AARCH64_RUNNER_PATH;
  options_.device.device_dir = board;
  options_.device.pull = {"cp", "{remote}", "{local}"};

  options_.device.push = {"false", "{local}", "{remote}"};
  MeasureResult failed = Run(request);
  EXPECT_EQ(failed.error(), tuneforge::v1::RUNTIME_ERROR);
  EXPECT_THAT(failed.error_message(), HasSubstr("cannot copy tuneforge-runner-aarch64 to the device (exit 1)"));
  EXPECT_EQ(failed.costs_size(), 0);

  options_.device.push = {"sh", "-c", "sleep 30", "{local}", "{remote}"};
  request.mutable_options()->set_timeout_ms(500);
  MeasureResult hung = Run(request);
  EXPECT_EQ(hung.error(), tuneforge::v1::RUN_TIMEOUT) << hung.error_message();
  EXPECT_EQ(hung.costs_size(), 0);
  std::filesystem::remove_all(board);
}

}  // namespace
}  // namespace tuneforge::agent
