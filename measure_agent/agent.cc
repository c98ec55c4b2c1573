// tuneforge-agent's session: register, lease, measure, report, reconnect.
#include "measure_agent/agent.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "compiler/support/rpc_credentials.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "measure_agent/capabilities.h"
#include "measure_agent/sandbox.h"
#include "tuneforge/v1/agent.grpc.pb.h"

namespace tuneforge::agent {

using tuneforge::v1::AgentMessage;
using tuneforge::v1::AgentService;
using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;
using tuneforge::v1::ServerMessage;

namespace {

using Clock = std::chrono::steady_clock;

// Artifacts plus expected outputs of big operators exceed gRPC's 4 MiB default.
constexpr int kMaxReceiveMessageBytes = 256 << 20;
constexpr auto kRegisterDeadline = std::chrono::seconds(10);
// After WritesDone, how long the server gets to end the stream before we cancel it.
constexpr auto kCloseGrace = absl::Seconds(2);
// Heartbeat interval used when the server sends none, and the bounds we accept.
constexpr int kDefaultHeartbeatMs = 5000;
constexpr int kMinHeartbeatMs = 50;
constexpr int kMaxHeartbeatMs = 60'000;
// A session that lived this long resets the reconnect backoff.
constexpr auto kStableSession = std::chrono::seconds(10);

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  // Finds a server host that died without closing the connection (power loss, network
  // partition): heartbeats alone would sit in the send buffer forever. Six minutes
  // stays above gRPC servers' default minimum ping interval (5 min), which would
  // otherwise answer our pings with GOAWAY.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 6 * 60 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

const char* StatusCodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "UNKNOWN_CODE";
}

// One line for logs and errors: "UNAVAILABLE: failed to connect to all addresses".
std::string Describe(const grpc::Status& status) {
  return absl::StrCat(StatusCodeName(status.error_code()), ": ",
                      status.error_message().empty() ? "no message" : status.error_message());
}

}  // namespace

// One Connect stream and the threads serving it (see agent.h). Created and run by
// Agent::Run; Stop() may be called from any thread.
class Session {
 public:
  enum class End { kStopped, kShutdown, kBroken };

  Session(AgentService::Stub* stub, std::string agent_id, std::string session_token,
          int heartbeat_ms, const Sandbox* sandbox, int workers, int test_slowdown,
          bool test_wrong_answer, const std::string& token)
      : stub_(stub),
        agent_id_(std::move(agent_id)),
        session_token_(std::move(session_token)),
        heartbeat_ms_(heartbeat_ms),
        sandbox_(sandbox),
        num_workers_(workers),
        test_slowdown_(test_slowdown),
        test_wrong_answer_(test_wrong_answer) {
    if (!token.empty()) context_.AddMetadata("authorization", "Bearer " + token);
  }

  // Serves the stream until Stop(), a shutdown_reason or a broken stream, then
  // finishes the requests in progress and closes the stream. `detail` says why it
  // ended (the shutdown reason or the stream's final status).
  End Run(std::string* detail);

  void Stop() {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;
  }

 private:
  // Conditions for mu_.Await.
  bool SessionOver() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_requested_ || shutdown_received_ || stream_ended_;
  }
  bool HasWorkOrDraining() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || draining_;
  }

  void ReaderLoop();
  void HeartbeatLoop();
  void WorkerLoop();
  // Sends one message; false once the stream no longer takes writes. Thread-safe.
  bool Write(const AgentMessage& message);
  void SendResult(const MeasureResult& result);
  // Gives a received request back to the server (we are stopping) for another agent.
  void HandBack(const MeasureRequest& request);
  // Tells the server we are draining (no new requests), handing back `ids`.
  void SendDrain(const std::vector<std::string>& ids);

  AgentService::Stub* const stub_;
  const std::string agent_id_;
  const std::string session_token_;  // RegisterResponse.session_token
  const int heartbeat_ms_;
  const Sandbox* const sandbox_;
  const int num_workers_;
  const int test_slowdown_;       // AgentOptions::test_slowdown
  const bool test_wrong_answer_;  // AgentOptions::test_wrong_answer

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<AgentMessage, ServerMessage>> stream_;

  absl::Mutex write_mu_;
  bool writes_closed_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_received_ ABSL_GUARDED_BY(mu_) = false;
  std::string shutdown_reason_ ABSL_GUARDED_BY(mu_);
  bool stream_ended_ ABSL_GUARDED_BY(mu_) = false;  // Read returned false
  bool draining_ ABSL_GUARDED_BY(mu_) = false;      // no new request starts
  bool heartbeat_done_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<MeasureRequest> queue_ ABSL_GUARDED_BY(mu_);
  // Requests received and not yet answered or handed back: named in heartbeats, which
  // renew the server's leases on them.
  std::set<std::string> held_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;  // requests in the sandbox right now
};

Session::End Session::Run(std::string* detail) {
  stream_ = stub_->Connect(&context_);
  AgentMessage hello;
  hello.set_hello_agent_id(agent_id_);
  hello.set_hello_session_token(session_token_);
  if (!Write(hello)) {
    grpc::Status status = stream_->Finish();
    *detail = absl::StrCat("cannot send hello: ", Describe(status));
    return End::kBroken;
  }
  TF_LOG(Info) << "connected as " << agent_id_ << "; waiting for measure requests";

  std::thread reader(&Session::ReaderLoop, this);
  std::thread heartbeat(&Session::HeartbeatLoop, this);
  std::vector<std::thread> workers;
  for (int i = 0; i < num_workers_; ++i) workers.emplace_back(&Session::WorkerLoop, this);

  End end;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Session::SessionOver));
    end = stop_requested_ ? End::kStopped : shutdown_received_ ? End::kShutdown : End::kBroken;
    if (end == End::kShutdown) *detail = shutdown_reason_;
    if (end == End::kStopped && busy_ > 0) {
      TF_LOG(Info) << "stopping after the " << busy_ << " request(s) in progress";
    }
    draining_ = true;
  }
  // The server stops sending us work; what is queued is handed back by the workers.
  if (end == End::kStopped) SendDrain({});
  // Workers finish the request they are running and answer the queued ones.
  for (std::thread& w : workers) w.join();
  {
    absl::MutexLock lock(&mu_);
    heartbeat_done_ = true;
  }
  heartbeat.join();

  // Half-close and give the server a moment to end the stream, so the last results
  // are delivered rather than cut off by a cancellation. A stream that has already
  // ended is left alone: Finish then reports the server's own status.
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    ended = stream_ended_;
  }
  if (!ended) {
    {
      absl::MutexLock lock(&write_mu_);
      if (!writes_closed_) {
        writes_closed_ = true;
        stream_->WritesDone();
      }
    }
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&stream_ended_), kCloseGrace)) {
      context_.TryCancel();  // the server kept the stream open; unblock the reader
    }
  }
  reader.join();
  grpc::Status status = stream_->Finish();
  if (end == End::kBroken) *detail = Describe(status);
  return end;
}

void Session::ReaderLoop() {
  ServerMessage message;
  while (stream_->Read(&message)) {
    if (message.has_request()) {
      MeasureRequest& request = *message.mutable_request();
      TF_LOG(Debug) << "received request " << request.request_id() << ": " << request.task();
      bool draining;
      {
        absl::MutexLock lock(&mu_);
        draining = draining_;
        if (!draining) {
          held_.insert(request.request_id());
          queue_.push_back(std::move(request));
        }
      }
      if (draining) SendDrain({request.request_id()});
    } else if (message.kind_case() == ServerMessage::kShutdownReason) {
      TF_LOG(Info) << "server asks to disconnect: " << message.shutdown_reason();
      absl::MutexLock lock(&mu_);
      shutdown_received_ = true;
      shutdown_reason_ = message.shutdown_reason();
    } else {
      TF_LOG(Warning) << "ignoring a server message of unknown kind " << message.kind_case();
    }
  }
  absl::MutexLock lock(&mu_);
  stream_ended_ = true;
}

void Session::HeartbeatLoop() {
  for (;;) {
    AgentMessage message;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&heartbeat_done_),
                               absl::Milliseconds(heartbeat_ms_))) {
        return;
      }
      message.mutable_heartbeat()->set_busy(busy_);
      for (const std::string& id : held_) message.mutable_heartbeat()->add_request_ids(id);
    }
    message.mutable_heartbeat()->set_unix_ms(NowUnixMs());
    Write(message);
  }
}

void Session::WorkerLoop() {
  for (;;) {
    MeasureRequest request;
    bool run;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Session::HasWorkOrDraining));
      if (queue_.empty()) return;  // draining, nothing left
      request = std::move(queue_.front());
      queue_.pop_front();
      run = !draining_;
      if (run) ++busy_;
    }
    if (!run) {
      HandBack(request);
      continue;
    }
    MeasureResult result = sandbox_->Run(request);
    if (test_slowdown_ > 1) {
      for (double& c : *result.mutable_costs()) c *= test_slowdown_;
    }
    if (test_wrong_answer_ && result.error() == tuneforge::v1::NONE) {
      // Fault injection: a device that computes garbage and says so through the
      // correctness check, as a broken FPU or a miscompiling driver would.
      result.clear_costs();
      result.set_error(tuneforge::v1::WRONG_ANSWER);
      result.set_error_message("output differs from the expected (--test-wrong-answer)");
    }
    {
      absl::MutexLock lock(&mu_);
      --busy_;
    }
    if (result.error() == tuneforge::v1::NONE && !result.costs().empty()) {
      double best = *std::min_element(result.costs().begin(), result.costs().end());
      TF_LOG(Info) << "request " << request.request_id() << " (" << request.task()
                   << "): " << best * 1e3 << " ms best of " << result.costs_size();
    } else {
      TF_LOG(Info) << "request " << request.request_id() << " (" << request.task()
                   << "): " << tuneforge::v1::MeasureErrorKind_Name(result.error()) << ": "
                   << result.error_message();
    }
    SendResult(result);
    absl::MutexLock lock(&mu_);
    held_.erase(request.request_id());
  }
}

bool Session::Write(const AgentMessage& message) {
  absl::MutexLock lock(&write_mu_);
  if (writes_closed_) return false;
  if (!stream_->Write(message)) {
    // The stream is broken; the reader sees it too and the session ends.
    writes_closed_ = true;
    return false;
  }
  return true;
}

void Session::SendResult(const MeasureResult& result) {
  AgentMessage message;
  *message.mutable_result() = result;
  if (!Write(message)) {
    TF_LOG(Warning) << "result of request " << result.request_id()
                    << " not sent: the stream is closed";
  }
}

void Session::HandBack(const MeasureRequest& request) {
  SendDrain({request.request_id()});
  absl::MutexLock lock(&mu_);
  held_.erase(request.request_id());
}

void Session::SendDrain(const std::vector<std::string>& ids) {
  AgentMessage message;
  for (const std::string& id : ids) message.mutable_drain()->add_handback_request_ids(id);
  message.mutable_drain();  // an empty Drain still says "no new requests"
  if (!Write(message)) {
    TF_LOG(Warning) << "could not tell the server we are draining: the stream is closed";
  }
}

Agent::Agent(AgentOptions options) : options_(std::move(options)) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ClientCredentials(options_.tls_ca, options_.tls_cert, options_.tls_key);
  TF_CHECK(credentials.ok(), "bad TLS files should have been rejected by flag parsing: ",
           credentials.status().ToString());
  credentials_ = *std::move(credentials);
  TF_CHECK(options_.workers >= 1);
  TF_CHECK(options_.initial_backoff_ms > 0 &&
           options_.max_backoff_ms >= options_.initial_backoff_ms);
}

Agent::~Agent() {
  absl::MutexLock lock(&mu_);
  TF_CHECK(session_ == nullptr, "Agent destroyed while Run() is running");
}

void Agent::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (session_ != nullptr) session_->Stop();
}

bool Agent::SleepUnlessStopped(int ms) {
  absl::MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(ms));
}

absl::Status Agent::Run() {
  const Clock::time_point start = Clock::now();
  tuneforge::v1::AgentCapabilities capabilities = DetectCapabilities();
  if (!options_.device.runner.empty()) {  // the device's, not this machine's
    capabilities.set_triple(options_.device_triple);
    capabilities.set_cpu_model(options_.device_triple + " device via " +
                               (options_.device.launcher.empty() ? options_.device.runner : options_.device.launcher[0]));
    capabilities.set_cores(1);  // the runner runs parallel loops serially
    std::string launcher = options_.device.launcher.empty() ? "(runs the runner directly)"
                                                            : absl::StrJoin(options_.device.launcher, " ");
    if (!options_.device.push.empty())
      launcher += " (files copied with: " + absl::StrJoin(options_.device.push, " ") + ")";
    capabilities.set_launcher(launcher);
  } else if (!options_.device_flags.empty()) {
    // This machine with fewer features (an AVX2-only agent on an AVX-512 host): the
    // server then builds for what the flags allow. Only flags the machine has.
    std::set<std::string> have(capabilities.cpu_flags().begin(), capabilities.cpu_flags().end());
    for (const std::string& f : options_.device_flags) {
      if (!have.count(f)) return absl::InvalidArgumentError("--device-flags: this machine has no CPU flag '" + f + "'");
    }
    capabilities.set_cpu_model(capabilities.cpu_model() + " (limited to " + std::to_string(options_.device_flags.size()) +
                               " flags)");
  }
  if (!options_.device.runner.empty() || !options_.device_flags.empty()) {
    capabilities.clear_cpu_flags();
    for (const std::string& f : options_.device_flags) capabilities.add_cpu_flags(f);
  }
  const std::string environment = EnvironmentJson(capabilities);
  TF_LOG(Info) << "tuneforge-agent " << AgentVersion() << " on " << capabilities.hostname() << " ("
               << capabilities.cpu_model() << ", " << capabilities.cores() << " cores, "
               << capabilities.triple() << "), device key " << options_.device_key;

  if (int stale = RemoveStaleSandboxDirs(options_.temp_dir); stale > 0) {
    TF_LOG(Info) << "removed " << stale << " sandbox directories left by a killed agent";
  }

  std::mt19937_64 rng(std::random_device{}());
  int backoff_ms = options_.initial_backoff_ms;
  // Next wait: jittered to [1/2, 1] of the current backoff, which then doubles.
  auto next_wait_ms = [&] {
    std::uniform_int_distribution<int> jitter(backoff_ms / 2, backoff_ms);
    int wait = jitter(rng);
    backoff_ms = std::min(backoff_ms * 2, options_.max_backoff_ms);
    return wait;
  };
  bool ever_registered = false;

  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    // A fresh channel per attempt: no state (subchannel backoff, a stale resolution)
    // carries over from a connection that failed.
    std::unique_ptr<AgentService::Stub> stub =
        AgentService::NewStub(MakeChannel(options_.server_address, credentials_));
    tuneforge::v1::RegisterRequest register_request;
    register_request.set_device_key(options_.device_key);
    register_request.set_workers(options_.workers);
    *register_request.mutable_capabilities() = capabilities;
    tuneforge::v1::RegisterResponse registered;
    grpc::ClientContext context;
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    auto deadline = kRegisterDeadline;
    if (!ever_registered) {
      // Do not let one attempt run past the start-up limit.
      auto left = std::chrono::seconds(options_.connect_timeout_s) -
                  std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      deadline = std::clamp<std::chrono::seconds>(left, std::chrono::seconds(1), deadline);
    }
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status status = stub->Register(&context, register_request, &registered);
    if (status.ok() && registered.agent_id().empty()) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "server returned an empty agent_id");
    }

    if (!status.ok()) {
      int wait_ms = next_wait_ms();
      if (!ever_registered) {
        auto elapsed = Clock::now() - start;
        auto limit = std::chrono::seconds(options_.connect_timeout_s);
        if (elapsed >= limit) {
          return absl::UnavailableError(
              absl::StrCat("cannot register with server ", options_.server_address, " within ",
                           options_.connect_timeout_s, " s: ", Describe(status)));
        }
        int left_ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(limit - elapsed).count());
        wait_ms = std::min(wait_ms, left_ms);
      }
      TF_LOG(Warning) << "cannot register with " << options_.server_address << ": "
                      << Describe(status) << "; retrying in " << wait_ms << " ms";
      if (!SleepUnlessStopped(wait_ms)) return absl::OkStatus();
      continue;
    }

    ever_registered = true;
    int heartbeat_ms =
        registered.heartbeat_interval_ms() > 0
            ? std::clamp(registered.heartbeat_interval_ms(), kMinHeartbeatMs, kMaxHeartbeatMs)
            : kDefaultHeartbeatMs;
    TF_LOG(Info) << "registered with " << options_.server_address << " as " << registered.agent_id()
                 << " (heartbeat every " << heartbeat_ms << " ms)";

    SandboxOptions sandbox_options;
    sandbox_options.agent_binary = options_.agent_binary;
    sandbox_options.temp_root = options_.temp_dir;
    sandbox_options.agent_id = registered.agent_id();
    sandbox_options.environment_json = environment;
    sandbox_options.device = options_.device;
    sandbox_options.pin_cpus = options_.pin_cpus;
    sandbox_options.quiet = options_.quiet;
    Sandbox sandbox(sandbox_options);
    Session session(stub.get(), registered.agent_id(), registered.session_token(), heartbeat_ms, &sandbox, options_.workers,
                    options_.test_slowdown, options_.test_wrong_answer, options_.token);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
      session_ = &session;
    }
    const Clock::time_point session_start = Clock::now();
    std::string detail;
    Session::End end = session.Run(&detail);
    {
      absl::MutexLock lock(&mu_);
      session_ = nullptr;
    }
    switch (end) {
      case Session::End::kStopped:
        TF_LOG(Info) << "stopped";
        return absl::OkStatus();
      case Session::End::kShutdown:
        TF_LOG(Info) << "disconnected at the server's request: " << detail;
        return absl::OkStatus();
      case Session::End::kBroken:
        break;
    }
    if (Clock::now() - session_start >= kStableSession) backoff_ms = options_.initial_backoff_ms;
    int wait_ms = next_wait_ms();
    TF_LOG(Warning) << "stream to " << options_.server_address << " broke: " << detail
                    << "; reconnecting in " << wait_ms << " ms";
    if (!SleepUnlessStopped(wait_ms)) return absl::OkStatus();
  }
}

}  // namespace tuneforge::agent
