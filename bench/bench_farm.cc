// `tuneforge bench farm --agents N --jobs J`: a load benchmark of dispatch. A real
// server (its own process, so its CPU time and peak RSS are its own) on loopback,
// N simulated agents in this process - real gRPC clients that register and hold a
// Connect stream like tuneforge-agent, but fake each measurement with a sleep - and
// J tuning jobs (policy random, so the cost model does not dominate) submitted
// through the TuningService. The server builds with a fake Builder that returns a
// tiny fixed artifact: an LLVM build (~80 ms) would otherwise be what is measured.
//
// Each simulated agent registers with `workers` = `--agent-slots` (default 1, as
// tuneforge-agent's default --workers 1; 0: the most the server allows, 256), so the
// server leases it at most that many requests at once; it heartbeats every interval
// the server asks for, naming the requests it holds, like tuneforge-agent. The
// server runs without golden-kernel checks (--no-golden-check): the agents only
// simulate. A lease's time from dispatch to result minus the sleep is the dispatch
// overhead: time on the server and the network, and any wait in the agent's own
// queue (none while the server respects `workers`; reported on its own). Figures are
// printed, never asserted.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/stats.h"
#include "compiler/support/hash.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "nlohmann/json.hpp"
#include "bench/bench.h"
#include "cli/flags.h"
#include "server/dispatch_observer.h"
#include "server/http/http_client.h"
#include "server/server.h"
#include "tuneforge/v1/agent.grpc.pb.h"
#include "tuneforge/v1/farm.grpc.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"
#include "tuner/builder.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench farm [--agents N] [--jobs J] [--measurements M] [--sleep-ms X]\n"
    "                            [--agent-slots S] [--batch B] [--task TEXT]\n"
    "                            [--poll-dashboard] [--json]\n"
    "  Load benchmark of the server's dispatch: a server process with a fake builder,\n"
    "  N simulated agents (real gRPC clients faking each measurement with a sleep) and\n"
    "  J jobs with policy random. Prints measurements/s, p50/p99 lease-to-result\n"
    "  latency minus the sleep (dispatch overhead), server CPU time and peak RSS.\n"
    "  --agents        simulated agents (default 100)\n"
    "  --jobs          concurrent tuning jobs (default 10)\n"
    "  --measurements  trials over all jobs (default 5000); each job also measures its\n"
    "                  baseline and re-measures its top 3 twice\n"
    "  --sleep-ms      simulated measurement time (default 5)\n"
    "  --agent-slots   requests each agent measures at once, sent as its workers\n"
    "                  (default 1, like tuneforge-agent; 0: 256, the most allowed)\n"
    "  --batch         candidates per round of each job (default 0: the server's\n"
    "                  default, 2 x the connected agents of the key)\n"
    "  --task          task of job 0; job j adds j to its N (distinct workloads)\n"
    "                  (default \"matmul M=64 N=64 K=64\")\n"
    "  --poll-dashboard  the server also serves the dashboard, and a browser's worth\n"
    "                  of polling hits it every second from the first job to the last\n"
    "                  (the jobs page, the first job's page, the agents page); compare\n"
    "                  the throughput with and without (scripts/bench-dashboard-overhead)\n";

using Clock = std::chrono::steady_clock;

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Returns a tiny fixed artifact for every candidate: no compiler in the loop.
class FakeBuilder : public Builder {
 public:
  FakeBuilder() : Builder(1) {
    auto a = std::make_shared<Artifact>();
    a->entry_symbol = "bench_kernel";
    a->shared_object = std::string(256, '\x7f');
    a->hash = HashHex(a->shared_object);
    artifact_ = a;
  }
  std::vector<BuildResult> Build(const TuningTask&, const Template&, const Target&,
                                 const std::vector<Candidate>& candidates) const override {
    std::vector<BuildResult> out(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      out[i].candidate = candidates[i];
      out[i].artifact = artifact_;
    }
    return out;
  }

 private:
  std::shared_ptr<const Artifact> artifact_;
};

// Collects every lease's time in the server process.
class LeaseRecorder : public DispatchObserver {
 public:
  void OnLease(bool redispatch) override { redispatches_ += redispatch; }
  void OnResult(v1::MeasureErrorKind, double seconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    seconds_.push_back(seconds);
  }
  std::vector<double> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(seconds_);
  }
  int64_t redispatches() const { return redispatches_; }

 private:
  std::mutex mu_;
  std::vector<double> seconds_;
  std::atomic<int64_t> redispatches_{0};
};

// What the server process reports back through a pipe when it stops.
struct ServerReport {
  int64_t leases = 0;
  int64_t redispatches = 0;
  double p50_s = 0, p99_s = 0, max_s = 0;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The server process: starts, sends its port, serves until `stop_fd` closes, then
// sends its ServerReport. Never returns.
// With `dashboard` it also serves the dashboard and sends that port after the first
// (0 without).
[[noreturn]] void RunServerProcess(const std::string& db, int report_fd, int stop_fd, bool dashboard) {
  SetLogLevel(LogLevel::kWarning);
  SetLogPrefix("bench-server");
  LeaseRecorder recorder;
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = db;
  options.builder = std::make_shared<FakeBuilder>();
  options.dispatch_observer = &recorder;
  options.golden_check = false;  // --no-golden-check: simulated agents only sleep
  if (dashboard) options.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  int port = server.ok() ? (*server)->port() : -1;
  int http_port = server.ok() ? (*server)->metrics_port() : 0;
  if (!server.ok()) TF_LOG(Error) << server.status();
  WriteAll(report_fd, &port, sizeof(port));
  WriteAll(report_fd, &http_port, sizeof(http_port));
  if (!server.ok()) _exit(1);
  char c;
  while (read(stop_fd, &c, 1) > 0) {
  }
  (*server)->Shutdown();
  std::vector<double> s = recorder.Take();
  ServerReport r;
  r.leases = static_cast<int64_t>(s.size());
  r.redispatches = recorder.redispatches();
  r.p50_s = Percentile(s, 0.5);
  r.p99_s = Percentile(s, 0.99);
  r.max_s = s.empty() ? 0 : *std::max_element(s.begin(), s.end());
  WriteAll(report_fd, &r, sizeof(r));
  _exit(0);
}

// N simulated agents on gRPC's callback client API: one channel and Connect stream
// each, driven by gRPC's own few threads (a reactor per stream), and one timer thread
// that queues each request's result `sleep` after it started. Real agents run on
// other machines; here they share the server's two cores, so they are written to
// cost as little CPU as they can. A thread pair per agent (a blocking reader and a
// sender) cost 0.75 of the 2 cores at 100 agents and pushed the server into CPU
// queueing: the benchmark measured its own harness. The agents' own lateness is
// reported (send lag) so it stays visible.
class SimulatedFarm {
 public:
  SimulatedFarm(const std::string& address, int agents, std::chrono::microseconds sleep, int slots)
      : sleep_(sleep), slots_(slots) {
    for (int i = 0; i < agents; ++i) agents_.push_back(std::make_unique<SimAgent>(this));
    channel_args_.SetMaxReceiveMessageSize(256 << 20);
    address_ = address;
  }
  ~SimulatedFarm() { Stop(); }

  absl::Status Start() {
    for (size_t i = 0; i < agents_.size(); ++i) {
      SimAgent& a = *agents_[i];
      a.channel = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), channel_args_);
      a.stub = v1::AgentService::NewStub(a.channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::RegisterRequest req;
      req.set_device_key("bench");
      req.mutable_capabilities()->set_cpu_model("simulated");
      req.mutable_capabilities()->set_cores(1);
      req.mutable_capabilities()->set_agent_version("bench-farm");
      req.mutable_capabilities()->set_hostname("sim-" + std::to_string(i));
      req.set_workers(slots_ > 0 ? slots_ : kMaxWorkers);
      v1::RegisterResponse resp;
      grpc::Status st = a.stub->Register(&ctx, req, &resp);
      if (!st.ok()) return absl::UnavailableError("register: " + st.error_message());
      a.id = resp.agent_id();
      if (resp.heartbeat_interval_ms() > 0) heartbeat_ms_ = resp.heartbeat_interval_ms();
      a.stub->async()->Connect(&a.context, &a);
      v1::AgentMessage hello;
      hello.set_hello_agent_id(a.id);
      hello.set_hello_session_token(resp.session_token());
      a.Send(std::move(hello));
      a.StartRead(&a.incoming);
      a.StartCall();
      a.started = true;
    }
    timer_ = std::thread([this] { TimerLoop(); });
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    return absl::OkStatus();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    if (timer_.joinable()) timer_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
    for (auto& a : agents_)
      if (a->started) a->context.TryCancel();
    for (auto& a : agents_)
      if (a->started) a->WaitDone();
  }

  int64_t results() const { return results_; }
  // Time requests waited in their agent's own queue for a free slot, seconds.
  std::vector<double> queue_waits() const { return queue_waits_; }
  // How late each result started on its way back after its sleep ended, seconds.
  std::vector<double> send_lags() const { return send_lags_; }
  Clock::time_point first_request() const { return first_request_; }
  Clock::time_point last_result() const { return last_result_; }

 private:
  // One agent's stream. Reads are always outstanding; writes go out one at a time
  // (the callback API allows one in flight) from a queue.
  class SimAgent : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ServerMessage> {
   public:
    explicit SimAgent(SimulatedFarm* farm) : farm_(farm) {}

    void Send(v1::AgentMessage m) {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (closed_) return;
      outbox_.push_back(std::move(m));
      if (!writing_) WriteNextLocked();
    }
    void WaitDone() {
      std::unique_lock<std::mutex> lock(write_mu_);
      done_cv_.wait(lock, [this] { return done_; });
    }

    void OnReadDone(bool ok) override {
      if (!ok) return;  // the stream ended; OnDone follows
      if (incoming.has_request()) farm_->Arrived(this, incoming.request().request_id());
      StartRead(&incoming);
    }
    void OnWriteDone(bool ok) override {
      std::lock_guard<std::mutex> lock(write_mu_);
      outbox_.pop_front();
      writing_ = false;
      if (!ok) {
        closed_ = true;
        outbox_.clear();
        return;
      }
      if (!outbox_.empty()) WriteNextLocked();
    }
    void OnDone(const grpc::Status&) override {
      std::lock_guard<std::mutex> lock(write_mu_);
      closed_ = true;
      done_ = true;
      done_cv_.notify_all();
    }

    std::string id;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::AgentService::Stub> stub;
    grpc::ClientContext context;
    v1::ServerMessage incoming;  // the read in flight
    bool started = false;        // Connect was called; set by Start before any callback
    int busy = 0;                // GUARDED_BY(SimulatedFarm::mu_)
    std::set<std::string> held;  // received, not yet answered; GUARDED_BY(SimulatedFarm::mu_)
    std::deque<std::pair<std::string, Clock::time_point>> waiting;  // GUARDED_BY(farm mu_)

   private:
    // REQUIRES: write_mu_ held, outbox_ not empty, no write in flight.
    void WriteNextLocked() {
      writing_ = true;
      StartWrite(&outbox_.front());
    }

    SimulatedFarm* farm_;
    std::mutex write_mu_;
    std::condition_variable done_cv_;
    std::deque<v1::AgentMessage> outbox_;  // GUARDED_BY(write_mu_); front is in flight
    bool writing_ = false;                 // GUARDED_BY(write_mu_)
    bool closed_ = false;                  // GUARDED_BY(write_mu_)
    bool done_ = false;                    // GUARDED_BY(write_mu_)
  };
  struct Due {
    Clock::time_point at;
    SimAgent* agent;
    std::string request_id;
    int64_t start_unix_us;
    bool operator>(const Due& o) const { return at > o.at; }
  };

  // A request arrived on `a`'s stream (a gRPC callback thread).
  void Arrived(SimAgent* a, const std::string& request_id) {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::time_point now = Clock::now();
    if (!any_request_) first_request_ = now;
    any_request_ = true;
    a->held.insert(request_id);
    if (slots_ > 0 && a->busy >= slots_) {
      a->waiting.emplace_back(request_id, now);
      return;
    }
    StartLocked(a, request_id, now);
  }

  // REQUIRES: mu_ held. The agent starts measuring a request that arrived at `arrived`.
  void StartLocked(SimAgent* a, const std::string& request_id, Clock::time_point arrived) {
    Clock::time_point now = Clock::now();
    ++a->busy;
    queue_waits_.push_back(std::chrono::duration<double>(now - arrived).count());
    bool earliest = due_.empty() || now + sleep_ < due_.top().at;
    due_.push(Due{now + sleep_, a, request_id, NowUnixUs()});
    if (earliest) cv_.notify_all();
  }

  // Answers each request when it is due. Sending only queues the message on the
  // agent's stream, so one thread keeps up with every agent.
  void TimerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      Clock::time_point now = Clock::now();
      if (now < due_.top().at) {
        cv_.wait_until(lock, due_.top().at);
        continue;
      }
      Due d = due_.top();
      due_.pop();
      send_lags_.push_back(std::chrono::duration<double>(now - d.at).count());
      SimAgent* a = d.agent;
      a->held.erase(d.request_id);
      ++results_;
      last_result_ = now;
      --a->busy;
      if (!a->waiting.empty()) {
        auto [id, arrived] = a->waiting.front();
        a->waiting.pop_front();
        StartLocked(a, id, arrived);
      }
      lock.unlock();
      v1::AgentMessage out;
      v1::MeasureResult* r = out.mutable_result();
      r->set_request_id(d.request_id);
      r->set_error(v1::NONE);
      r->add_costs(std::chrono::duration<double>(sleep_).count());
      r->set_start_unix_us(d.start_unix_us);
      r->set_end_unix_us(NowUnixUs());
      r->set_agent_id(a->id);
      a->Send(std::move(out));
      lock.lock();
    }
  }

  // Every heartbeat interval, each agent names the requests it holds (renewing their
  // leases), as tuneforge-agent does; without it the server would expire the leases
  // and call the agents lost.
  void HeartbeatLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(heartbeat_ms_), [this] { return stopped_; })) {
      std::vector<std::pair<SimAgent*, v1::AgentMessage>> beats;
      for (auto& a : agents_) {
        v1::AgentMessage m;
        m.mutable_heartbeat()->set_unix_ms(NowUnixUs() / 1000);
        m.mutable_heartbeat()->set_busy(a->busy);
        for (const std::string& id : a->held) m.mutable_heartbeat()->add_request_ids(id);
        beats.emplace_back(a.get(), std::move(m));
      }
      lock.unlock();
      for (auto& [a, m] : beats) a->Send(std::move(m));
      lock.lock();
    }
  }

  static constexpr int kMaxWorkers = 256;  // AgentRegistry's bound on workers
  std::string address_;
  grpc::ChannelArguments channel_args_;
  std::chrono::microseconds sleep_;
  int slots_;  // 0: unlimited
  std::vector<std::unique_ptr<SimAgent>> agents_;
  std::thread timer_;
  std::thread heartbeat_;
  int heartbeat_ms_ = 2000;  // from RegisterResponse; set before the threads start
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;  // GUARDED_BY(mu_)
  bool stopped_ = false;                                               // GUARDED_BY(mu_)
  bool any_request_ = false;                                           // GUARDED_BY(mu_)
  Clock::time_point first_request_, last_result_;                      // GUARDED_BY(mu_)
  int64_t results_ = 0;                                                // GUARDED_BY(mu_)
  std::vector<double> queue_waits_;                                    // GUARDED_BY(mu_)
  std::vector<double> send_lags_;                                      // GUARDED_BY(mu_)
};

// Job j's task: the base task with its N grown by j, so jobs tune distinct workloads.
absl::StatusOr<std::string> JobTask(const std::string& base, int j) {
  size_t p = base.find(" N=");
  if (p == std::string::npos) return absl::InvalidArgumentError("--task needs an N=... dimension");
  size_t end = base.find(' ', p + 3);
  int n = 0;
  if (!absl::SimpleAtoi(base.substr(p + 3, end - p - 3), &n)) {
    return absl::InvalidArgumentError("--task: N=... must be a number");
  }
  return base.substr(0, p + 3) + std::to_string(n + j) + (end == std::string::npos ? "" : base.substr(end));
}

}  // namespace

// A browser with three dashboard pages open: every second, the data of the jobs page,
// of `job`'s page and of the agents page, until Stop. Counts requests and their times.
class DashboardPoller {
 public:
  DashboardPoller(int port, std::string job) : port_(port), job_(std::move(job)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~DashboardPoller() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<double>& ms() const { return ms_; }  // after Stop
  int failures() const { return failures_; }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      for (const std::string& path : {std::string("/api/jobs"), "/api/job?id=" + job_, std::string("/api/agents")}) {
        auto s = Clock::now();
        http::ClientResponse r = http::Get("127.0.0.1", port_, path);
        ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
        failures_ += r.status != 200;
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
    }
  }
  const int port_;
  const std::string job_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<double> ms_;
  int failures_ = 0;
  std::thread thread_;
};

absl::StatusOr<int> BenchFarmCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"agents", "jobs", "measurements", "sleep-ms", "agent-slots", "batch", "task"},
                                             {"json", "help", "poll-dashboard"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  ASSIGN_OR_RETURN(int64_t agents, flags.GetInt("agents", 100, 1, 2000));
  ASSIGN_OR_RETURN(int64_t jobs, flags.GetInt("jobs", 10, 1, 200));
  ASSIGN_OR_RETURN(int64_t measurements, flags.GetInt("measurements", 5000, 1, 10000000));
  ASSIGN_OR_RETURN(int64_t sleep_ms, flags.GetInt("sleep-ms", 5, 0, 60000));
  ASSIGN_OR_RETURN(int64_t slots, flags.GetInt("agent-slots", 1, 0, 1024));
  ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch", 0, 0, 1024));
  const std::string base_task = flags.Get("task", "matmul M=64 N=64 K=64");
  if (measurements < jobs) return absl::InvalidArgumentError("--measurements must be >= --jobs");
  std::vector<std::string> tasks;
  for (int j = 0; j < jobs; ++j) {
    ASSIGN_OR_RETURN(std::string t, JobTask(base_task, j));
    absl::StatusOr<TuningTask> parsed = ParseTask(t);
    if (!parsed.ok()) return absl::InvalidArgumentError("--task: " + std::string(parsed.status().message()));
    tasks.push_back(t);
  }
  const bool json = flags.Has("json");
  const bool poll_dashboard = flags.Has("poll-dashboard");

  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tf_bench_farm_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int report_pipe[2], stop_pipe[2];
  if (pipe(report_pipe) != 0 || pipe(stop_pipe) != 0) return absl::InternalError("pipe failed");
  // Fork before any gRPC object exists in this process.
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    close(report_pipe[0]);
    close(stop_pipe[1]);
    RunServerProcess((dir / "bench.db").string(), report_pipe[1], stop_pipe[0], poll_dashboard);
  }
  close(report_pipe[1]);
  close(stop_pipe[0]);
  auto cleanup = [&] {
    close(stop_pipe[1]);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  int port = -1, http_port = 0;
  if (!ReadAll(report_pipe[0], &port, sizeof(port)) || port <= 0 ||
      !ReadAll(report_pipe[0], &http_port, sizeof(http_port))) {
    cleanup();
    waitpid(pid, nullptr, 0);
    return absl::InternalError("the benchmark server did not start");
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);

  SimulatedFarm farm(address, static_cast<int>(agents), std::chrono::milliseconds(sleep_ms),
                     static_cast<int>(slots));
  absl::Status started = farm.Start();
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto tuning = v1::TuningService::NewStub(channel);
  auto farm_stub = v1::FarmService::NewStub(channel);
  // Every agent connected (the registry says so) before the clock starts.
  for (int i = 0; started.ok() && i < 200; ++i) {
    grpc::ClientContext ctx;
    v1::FarmStatus status;
    if (farm_stub->Status(&ctx, v1::FarmStatusRequest(), &status).ok()) {
      int idle = 0;
      for (const auto& a : status.agents()) idle += a.state() == "idle";
      if (idle == agents) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  std::vector<std::string> ids;
  Clock::time_point t0 = Clock::now();
  int64_t per_job = measurements / jobs;
  for (int j = 0; started.ok() && j < jobs; ++j) {
    v1::SubmitJobRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->set_task(tasks[static_cast<size_t>(j)]);
    spec->set_trials(static_cast<int>(per_job + (j < measurements % jobs ? 1 : 0)));
    spec->set_device_key("bench");
    spec->set_policy("random");
    spec->set_batch_size(static_cast<int>(batch));
    spec->set_seed(static_cast<uint64_t>(j + 1));
    spec->set_owner("bench");
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    grpc::Status st = tuning->SubmitJob(&ctx, req, &resp);
    if (!st.ok()) {
      started = absl::InvalidArgumentError("submit: " + st.error_message());
      break;
    }
    ids.push_back(resp.job_id());
  }
  std::unique_ptr<DashboardPoller> poller;
  if (poll_dashboard && !ids.empty()) poller = std::make_unique<DashboardPoller>(http_port, ids.front());
  int64_t trials_done = 0, records = 0, failed_jobs = 0;
  for (const std::string& id : ids) {
    v1::JobRequest req;
    req.set_job_id(id);
    v1::JobStatus last;
    grpc::ClientContext ctx;
    auto reader = tuning->WatchJob(&ctx, req);
    v1::JobStatus s;
    while (reader->Read(&s)) last = s;
    reader->Finish();
    trials_done += last.trials_done();
    records += last.records();
    if (last.state() != v1::SUCCEEDED) {
      ++failed_jobs;
      TF_LOG(Warning) << "job " << id << " ended " << v1::JobState_Name(last.state()) << ": "
                      << last.message();
    }
  }
  Clock::time_point t1 = Clock::now();
  if (poller) poller->Stop();
  farm.Stop();
  close(stop_pipe[1]);
  ServerReport report;
  bool got_report = ReadAll(report_pipe[0], &report, sizeof(report));
  close(report_pipe[0]);
  int wstatus = 0;
  struct rusage usage {};
  wait4(pid, &wstatus, 0, &usage);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!started.ok()) return started;
  if (!got_report) return absl::InternalError("the benchmark server did not report");

  double wall = std::chrono::duration<double>(t1 - t0).count();
  double active = std::chrono::duration<double>(farm.last_result() - farm.first_request()).count();
  double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  double sleep_s = static_cast<double>(sleep_ms) / 1000;
  std::vector<double> waits = farm.queue_waits();
  double wait_p50 = Percentile(waits, 0.5), wait_p99 = Percentile(waits, 0.99);
  std::vector<double> lags = farm.send_lags();
  double lag_p50 = Percentile(lags, 0.5), lag_p99 = Percentile(lags, 0.99);
  nlohmann::json j = {
      {"agents", agents},
      {"jobs", jobs},
      {"policy", "random"},
      {"builder", "fake (tiny fixed artifact; no LLVM)"},
      {"sleep_ms", sleep_ms},
      {"agent_slots", slots},
      {"batch", batch},
      {"task", base_task},
      {"trials", trials_done},
      {"measurements", farm.results()},
      {"records", records},
      {"failed_jobs", failed_jobs},
      {"wall_seconds", wall},
      {"measurements_per_second", farm.results() / wall},
      {"active_measurements_per_second", active > 0 ? farm.results() / active : 0},
      {"leases", report.leases},
      {"redispatches", report.redispatches},
      {"lease_to_result_p50_ms", report.p50_s * 1e3},
      {"lease_to_result_p99_ms", report.p99_s * 1e3},
      {"dispatch_overhead_p50_ms", (report.p50_s - sleep_s) * 1e3},
      {"dispatch_overhead_p99_ms", (report.p99_s - sleep_s) * 1e3},
      {"dispatch_overhead_max_ms", (report.max_s - sleep_s) * 1e3},
      {"agent_queue_wait_p50_ms", wait_p50 * 1e3},
      {"agent_queue_wait_p99_ms", wait_p99 * 1e3},
      {"agent_send_lag_p50_ms", lag_p50 * 1e3},
      {"agent_send_lag_p99_ms", lag_p99 * 1e3},
      {"server_cpu_seconds", cpu},
      {"server_cpu_cores", cpu / wall},
      {"server_peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024},
      {"server_context_switches", usage.ru_nvcsw + usage.ru_nivcsw},
  };
  if (poller) {
    j["dashboard_requests"] = poller->ms().size();
    j["dashboard_failures"] = poller->failures();
    j["dashboard_p50_ms"] = Percentile(poller->ms(), 0.5);
    j["dashboard_p99_ms"] = Percentile(poller->ms(), 0.99);
  }
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "bench farm: %lld simulated agents, %lld jobs (policy random: no cost model), fake builder\n"
        "  (no LLVM), simulated measurement %lld ms, %s per agent, batch %s,\n"
        "  tasks from \"%s\"\n"
        "  measurements      %lld in %.2f s (%lld trials, %lld records, %lld failed jobs)\n"
        "  throughput        %.0f measurements/s overall, %.0f/s from first lease to last result\n"
        "  lease->result     p50 %.2f ms, p99 %.2f ms (%lld leases, %lld re-dispatches)\n"
        "  dispatch overhead p50 %.2f ms, p99 %.2f ms, max %.2f ms (lease->result minus the sleep)\n"
        "  agent queue wait  p50 %.2f ms, p99 %.2f ms (leased ahead of a free slot; part of the\n"
        "                    overhead)\n"
        "  agent send lag    p50 %.2f ms, p99 %.2f ms (a result's start on its way back after its\n"
        "                    sleep: this process's own share of the overhead)\n"
        "  server            %.2f s CPU (%.2f cores), peak RSS %.1f MB, %.0f context switches\n"
        "                    per measurement\n",
        static_cast<long long>(agents), static_cast<long long>(jobs),
        static_cast<long long>(sleep_ms),
        slots ? absl::StrCat(slots, " slot(s)").c_str() : "unlimited slots",
        batch ? std::to_string(batch).c_str() : "server default", base_task.c_str(),
        static_cast<long long>(farm.results()), wall, static_cast<long long>(trials_done),
        static_cast<long long>(records), static_cast<long long>(failed_jobs),
        j["measurements_per_second"].get<double>(), j["active_measurements_per_second"].get<double>(),
        report.p50_s * 1e3, report.p99_s * 1e3, static_cast<long long>(report.leases),
        static_cast<long long>(report.redispatches), (report.p50_s - sleep_s) * 1e3,
        (report.p99_s - sleep_s) * 1e3, (report.max_s - sleep_s) * 1e3, wait_p50 * 1e3,
        wait_p99 * 1e3, lag_p50 * 1e3, lag_p99 * 1e3, cpu, cpu / wall,
        static_cast<double>(usage.ru_maxrss) / 1024,
        static_cast<double>(usage.ru_nvcsw + usage.ru_nivcsw) /
            static_cast<double>(std::max<int64_t>(1, farm.results())));
    if (poller) {
      std::printf("  dashboard polled  %zu requests (%d failed), p50 %.2f ms, p99 %.2f ms\n",
                  poller->ms().size(), poller->failures(), j["dashboard_p50_ms"].get<double>(),
                  j["dashboard_p99_ms"].get<double>());
    }
  }
  return failed_jobs == 0 && (!poller || poller->failures() == 0) ? 0 : 1;
}

}  // namespace tuneforge::cli
