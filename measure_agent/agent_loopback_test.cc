// The real tuneforge-agent binary, run as a child process, against a fake
// AgentService on 127.0.0.1: registration, hello, a measurement streamed back,
// heartbeats, reconnection after a broken stream, shutdown_reason, SIGTERM, an
// unreachable server and the command line.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "measure_agent/testing/kernel_request.h"
#include "nlohmann/json.hpp"
#include "tuneforge/v1/agent.grpc.pb.h"

extern char** environ;

namespace tuneforge::agent {
namespace {

using tuneforge::v1::AgentMessage;
using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;
using tuneforge::v1::ServerMessage;

// Sends `requests` down every stream. The first `broken_streams` streams end with
// UNAVAILABLE right after the hello, to make the agent reconnect. Once a result for
// every request and a heartbeat have arrived it sends shutdown_reason, unless told
// not to.
class FakeAgentService final : public tuneforge::v1::AgentService::Service {
 public:
  FakeAgentService(std::vector<MeasureRequest> requests, int broken_streams, bool send_shutdown)
      : requests_(std::move(requests)),
        broken_streams_(broken_streams),
        send_shutdown_(send_shutdown) {}

  grpc::Status Register(grpc::ServerContext*, const tuneforge::v1::RegisterRequest* request,
                        tuneforge::v1::RegisterResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++registers_;
    last_register_ = *request;
    response->set_agent_id(absl::StrCat("agent-", registers_));
    response->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }

  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<ServerMessage, AgentMessage>* stream) override {
    AgentMessage message;
    if (!stream->Read(&message) || !message.has_hello_agent_id()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "expected hello first");
    }
    int stream_index;
    {
      absl::MutexLock lock(&mu_);
      hellos_.push_back(message.hello_agent_id());
      stream_index = connects_++;
    }
    if (stream_index < broken_streams_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "test: stream broken on purpose");
    }
    for (const MeasureRequest& request : requests_) {
      ServerMessage down;
      *down.mutable_request() = request;
      stream->Write(down);
    }
    bool shutdown_sent = false;
    while (stream->Read(&message)) {
      absl::MutexLock lock(&mu_);
      if (message.has_heartbeat()) {
        ++heartbeats_;
        max_busy_ = std::max(max_busy_, message.heartbeat().busy());
        for (const std::string& id : message.heartbeat().request_ids()) heartbeat_ids_.insert(id);
      }
      if (message.has_drain()) {
        ++drains_;
        for (const std::string& id : message.drain().handback_request_ids())
          handbacks_.push_back(id);
      }
      if (message.has_result()) results_.push_back(message.result());
      if (send_shutdown_ && !shutdown_sent && results_.size() >= requests_.size() &&
          heartbeats_ > 0) {
        ServerMessage bye;
        bye.set_shutdown_reason("test done");
        stream->Write(bye);
        shutdown_sent = true;
      }
    }
    absl::MutexLock lock(&mu_);
    ++streams_closed_by_agent_;
    return grpc::Status::OK;
  }

  // Waits until a result (or a hand-back) for every request arrived; false after
  // `timeout`.
  bool WaitForResults(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(
                                    +[](FakeAgentService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                                      return s->results_.size() + s->handbacks_.size() >=
                                             s->requests_.size();
                                    },
                                    this),
                                timeout);
  }

  absl::Mutex mu_;
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int connects_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int max_busy_ ABSL_GUARDED_BY(mu_) = 0;  // most requests in progress a heartbeat reported
  int streams_closed_by_agent_ ABSL_GUARDED_BY(mu_) = 0;
  tuneforge::v1::RegisterRequest last_register_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> hellos_ ABSL_GUARDED_BY(mu_);
  std::vector<MeasureResult> results_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> heartbeat_ids_ ABSL_GUARDED_BY(mu_);  // requests heartbeats named
  int drains_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> handbacks_ ABSL_GUARDED_BY(mu_);

 private:
  const std::vector<MeasureRequest> requests_;
  const int broken_streams_;
  const bool send_shutdown_;
};

// A child process with its stderr captured in a file.
class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> args) {
    std::string templ = (std::filesystem::temp_directory_path() / "agent_stderr-XXXXXX").string();
    int fd = mkstemp(templ.data());
    EXPECT_GE(fd, 0);
    close(fd);
    stderr_path_ = templ;
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(TUNEFORGE_AGENT_BINARY));
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stderr_path_.c_str(),
                                     O_WRONLY | O_APPEND, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path_.c_str(),
                                     O_WRONLY | O_APPEND, 0);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }

  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(stderr_path_);
  }

  // Exit code, or -1 if it has not exited within `timeout` (it is then killed), or
  // 128 + signal if a signal ended it.
  int Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        exited_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void Signal(int sig) { kill(pid_, sig); }

  std::string Output() const {
    std::ifstream in(stderr_path_);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string stderr_path_;
};

class AgentLoopbackTest : public ::testing::Test {
 protected:
  void StartServer(int broken_streams, bool send_shutdown,
                   std::vector<MeasureRequest> requests = {
                       test::MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "loopback-1")}) {
    service_ =
        std::make_unique<FakeAgentService>(std::move(requests), broken_streams, send_shutdown);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  std::vector<std::string> AgentArgs() {
    return {"--server",
            absl::StrCat("127.0.0.1:", port_),
            "--device-key",
            "loopback-cpu",
            "--connect-timeout-s",
            "10"};
  }

  // Checks the result the fake received for the add kernel.
  void ExpectGoodResult(const std::string& agent_id) {
    absl::MutexLock lock(&service_->mu_);
    ASSERT_EQ(service_->results_.size(), 1u);
    const MeasureResult& result = service_->results_[0];
    EXPECT_EQ(result.request_id(), "loopback-1");
    EXPECT_EQ(result.error(), tuneforge::v1::NONE) << result.error_message();
    EXPECT_EQ(result.costs_size(), 3);
    EXPECT_EQ(result.agent_id(), agent_id);
    nlohmann::json env = nlohmann::json::parse(result.environment_json());
    EXPECT_TRUE(env.contains("cpu_model"));
    EXPECT_TRUE(env.contains("kernel_release"));
    EXPECT_EQ(service_->last_register_.device_key(), "loopback-cpu");
    EXPECT_GE(service_->last_register_.capabilities().cores(), 1);
  }

  std::unique_ptr<FakeAgentService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(AgentLoopbackTest, MeasuresAndExitsOnShutdownReason) {
  StartServer(/*broken_streams=*/0, /*send_shutdown=*/true);
  ChildProcess agent(AgentArgs());
  ASSERT_TRUE(service_->WaitForResults(absl::Seconds(20))) << agent.Output();
  EXPECT_EQ(agent.Wait(std::chrono::seconds(10)), 0) << agent.Output();
  ExpectGoodResult("agent-1");
  absl::MutexLock lock(&service_->mu_);
  EXPECT_EQ(service_->hellos_, std::vector<std::string>{"agent-1"});
  EXPECT_GE(service_->heartbeats_, 1);
}

TEST_F(AgentLoopbackTest, ReregistersAndReconnectsAfterABrokenStream) {
  StartServer(/*broken_streams=*/1, /*send_shutdown=*/true);
  ChildProcess agent(AgentArgs());
  ASSERT_TRUE(service_->WaitForResults(absl::Seconds(20))) << agent.Output();
  EXPECT_EQ(agent.Wait(std::chrono::seconds(10)), 0) << agent.Output();
  ExpectGoodResult("agent-2");
  absl::MutexLock lock(&service_->mu_);
  EXPECT_EQ(service_->registers_, 2);
  EXPECT_EQ(service_->hellos_, (std::vector<std::string>{"agent-1", "agent-2"}));
}

TEST_F(AgentLoopbackTest, SigtermExitsZeroAndClosesTheStream) {
  StartServer(/*broken_streams=*/0, /*send_shutdown=*/false);
  ChildProcess agent(AgentArgs());
  ASSERT_TRUE(service_->WaitForResults(absl::Seconds(20))) << agent.Output();
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.Wait(std::chrono::seconds(10)), 0) << agent.Output();
  ExpectGoodResult("agent-1");
  absl::MutexLock lock(&service_->mu_);
  EXPECT_EQ(service_->streams_closed_by_agent_, 1);
}

TEST_F(AgentLoopbackTest, EveryRequestGetsAResultWhateverTheKernelDoes) {
  MeasureRequest timeout = test::MakeKernelRequest(BAD_KERNELS_PATH, "loop_kernel", "loop");
  timeout.mutable_options()->set_timeout_ms(300);
  MeasureRequest tampered = test::MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "tampered");
  tampered.set_artifact_hash("0000000000000000");
  StartServer(/*broken_streams=*/0, /*send_shutdown=*/true,
              {test::MakeKernelRequest(BAD_KERNELS_PATH, "segv_kernel", "segv"), timeout,
               test::MakeKernelRequest(BAD_KERNELS_PATH, "wrong_kernel", "wrong"), tampered,
               // Hostile kernels (bad_kernels.c): the agent process must survive them.
               test::MakeKernelRequest(BAD_KERNELS_PATH, "fork_kernel", "fork"),
               test::MakeKernelRequest(BAD_KERNELS_PATH, "socket_kernel", "socket"),
               test::MakeKernelRequest(BAD_KERNELS_PATH, "kill_parent_kernel", "kill"),
               test::MakeKernelRequest(BAD_KERNELS_PATH, "forge_kernel", "forge"),
               test::MakeKernelRequest(BAD_KERNELS_PATH, "oob_write_kernel", "oob"),
               test::MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "good")});
  std::vector<std::string> args = AgentArgs();
  args.insert(args.end(), {"--workers", "2"});
  ChildProcess agent(args);
  ASSERT_TRUE(service_->WaitForResults(absl::Seconds(20))) << agent.Output();
  EXPECT_EQ(agent.Wait(std::chrono::seconds(10)), 0) << agent.Output();
  absl::MutexLock lock(&service_->mu_);
  EXPECT_EQ(service_->last_register_.workers(), 2);
  std::map<std::string, tuneforge::v1::MeasureErrorKind> kinds;
  for (const MeasureResult& r : service_->results_) kinds[r.request_id()] = r.error();
  EXPECT_EQ(kinds, (std::map<std::string, tuneforge::v1::MeasureErrorKind>{
                       {"segv", tuneforge::v1::RUNTIME_ERROR},
                       {"loop", tuneforge::v1::RUN_TIMEOUT},
                       {"wrong", tuneforge::v1::WRONG_ANSWER},
                       {"tampered", tuneforge::v1::RUNTIME_ERROR},
                       {"fork", tuneforge::v1::RUNTIME_ERROR},
                       {"socket", tuneforge::v1::RUNTIME_ERROR},
                       {"kill", tuneforge::v1::RUNTIME_ERROR},
                       {"forge", tuneforge::v1::WRONG_ANSWER},
                       {"oob", tuneforge::v1::RUNTIME_ERROR},
                       {"good", tuneforge::v1::NONE}}));
}

TEST_F(AgentLoopbackTest, SigtermFinishesTheRequestInProgressAndHandsBackTheQueue) {
  MeasureRequest slow = test::MakeKernelRequest(BAD_KERNELS_PATH, "loop_kernel", "slow");
  slow.mutable_options()->set_timeout_ms(800);
  StartServer(/*broken_streams=*/0, /*send_shutdown=*/false,
              {slow, test::MakeKernelRequest(ADD_KERNEL_PATH, "add_kernel", "queued")});
  ChildProcess agent(AgentArgs());
  {
    // A heartbeat saying busy=1: the slow request is in the sandbox.
    absl::MutexLock lock(&service_->mu_);
    ASSERT_TRUE(service_->mu_.AwaitWithTimeout(
        absl::Condition(
            +[](FakeAgentService* s)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->max_busy_ >= 1; },
            service_.get()),
        absl::Seconds(10)));
  }
  agent.Signal(SIGTERM);
  ASSERT_TRUE(service_->WaitForResults(absl::Seconds(10))) << agent.Output();
  EXPECT_EQ(agent.Wait(std::chrono::seconds(10)), 0) << agent.Output();
  absl::MutexLock lock(&service_->mu_);
  ASSERT_EQ(service_->results_.size(), 1u);
  EXPECT_EQ(service_->results_[0].request_id(), "slow");
  EXPECT_EQ(service_->results_[0].error(), tuneforge::v1::RUN_TIMEOUT);
  // The queued request is handed back (for another agent), not answered.
  EXPECT_EQ(service_->handbacks_, std::vector<std::string>{"queued"});
  EXPECT_GE(service_->drains_, 1);
  // Heartbeats named the requests the agent held: they renew the leases on them.
  EXPECT_EQ(service_->heartbeat_ids_.count("slow"), 1u);
}

TEST(AgentProcessTest, UnreachableServerExitsNonZeroWithOneLine) {
  // A port nothing listens on: bind one, note it, close it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  close(fd);

  // --connect-timeout-s 1: the agent gives up by itself (Wait's 60 s is only a guard
  // against a hang; no wall-time assertion).
  ChildProcess agent({"--server", absl::StrCat("127.0.0.1:", port), "--device-key", "k",
                      "--connect-timeout-s", "1", "--quiet"});
  EXPECT_EQ(agent.Wait(std::chrono::seconds(60)), 1) << agent.Output();
  std::string output = agent.Output();
  EXPECT_NE(output.find("cannot register with server 127.0.0.1:"), std::string::npos) << output;
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
}

TEST(AgentProcessTest, CommandLineErrorsAndHelp) {
  ChildProcess unknown({"--server", "h:1", "--device-key", "k", "--bogus"});
  EXPECT_EQ(unknown.Wait(std::chrono::seconds(5)), 1);
  EXPECT_EQ(unknown.Output(), "tuneforge-agent: unknown flag '--bogus' (see --help)\n");

  ChildProcess missing({"--server", "h:1"});
  EXPECT_EQ(missing.Wait(std::chrono::seconds(5)), 1);
  EXPECT_NE(missing.Output().find("--device-key"), std::string::npos);

  ChildProcess help({"--help"});
  EXPECT_EQ(help.Wait(std::chrono::seconds(5)), 0);
  EXPECT_NE(help.Output().find("usage: tuneforge-agent --server HOST:PORT"), std::string::npos);
}

}  // namespace
}  // namespace tuneforge::agent
