// A job of several weighted tasks runs on the server: the task scheduler's rounds,
// each a tuning loop of one task, spend exactly the job's budget, and the job's status
// carries each task's progress and the estimated weighted latency. Real server and
// agent processes on loopback.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "server/job_manager.h"
#include "tests/farm_fixture.h"
#include "nlohmann/json.hpp"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {
namespace {

using testing::FarmFixture;
using testing::Process;
using testing::RunCommand;

class ModelJobTest : public FarmFixture {
 protected:
  std::unique_ptr<v1::TuningService::Stub> Tuning() {
    return v1::TuningService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  // Polls the job every `poll` until `done` holds for its status or the scaled deadline
  // passes; returns the last status read. A server just restarted may refuse the first
  // calls of a new channel: those are retried.
  v1::JobStatus WaitUntil(v1::TuningService::Stub* tuning, const std::string& id, int seconds,
                          const std::function<bool(const v1::JobStatus&)>& done,
                          std::chrono::milliseconds poll = std::chrono::milliseconds(200)) {
    v1::JobStatus status;
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000 * testing::TimeScale()));
    while (std::chrono::steady_clock::now() < end) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::JobRequest request;
      request.set_job_id(id);
      grpc::Status st = tuning->GetJob(&ctx, request, &status);
      last_error_ = st.ok() ? "" : st.error_message();
      if (st.ok() && done(status)) break;
      std::this_thread::sleep_for(poll);
    }
    return status;
  }
  // Until the job ends.
  v1::JobStatus WaitForEnd(v1::TuningService::Stub* tuning, const std::string& id, int seconds) {
    v1::JobStatus status = WaitUntil(tuning, id, seconds, [](const v1::JobStatus& s) { return IsTerminal(s.state()); });
    if (!IsTerminal(status.state())) ADD_FAILURE() << "the job did not end; GetJob's last error: " << last_error_;
    return status;
  }
  // Until `trials` are done (or the job ended), polled often enough to catch it mid-job.
  v1::JobStatus WaitForTrials(v1::TuningService::Stub* tuning, const std::string& id, int trials) {
    return WaitUntil(
        tuning, id, 60, [&](const v1::JobStatus& s) { return s.trials_done() >= trials || IsTerminal(s.state()); },
        std::chrono::milliseconds(50));
  }
  // A server on the same db and port as the one killed; the agents reconnect by
  // themselves and the server resumes its jobs. False (a failure added) when it did not
  // start there.
  bool RestartServer() {
    testing::ServerProcess again =
        testing::StartServerProcess(kBin, db_, dir_ + "/server2", {"--heartbeat-ms", "300"}, address_);
    if (again.address != address_) {
      ADD_FAILURE() << "the server did not restart on " << address_ << ": " << again.process->Stderr();
      return false;
    }
    server_ = std::move(again.process);
    return true;
  }
  // A server with one agent of key "m", and the MLP submitted to it with `tune --model
  // --detach` (random search, rounds of 4 trials); the job's id, "" (a failure added)
  // when it was not submitted.
  std::string SubmitDetachedMlp(int trials) {
    if (StartServer({"--heartbeat-ms", "300"}).empty()) return "";
    StartAgent("m");
    if (!WaitForIdleAgents(1)) {
      ADD_FAILURE() << "no idle agent: " << server_->Stderr();
      return "";
    }
    auto submit = RunCommand({kBin + "/tuneforge", "tune", "--model", kMlp, "--server", address_, "--device-key", "m",
                              "--trials", std::to_string(trials), "--round-trials", "4", "--batch", "2", "--policy",
                              "random", "--detach", "--json"},
                             dir_, std::chrono::seconds(60));
    if (submit.exit_code != 0) {
      ADD_FAILURE() << submit.err;
      return "";
    }
    return nlohmann::json::parse(submit.out)["job_id"];
  }

  static inline const std::string kMlp = std::string(TF_TEST_MODELS_DIR) + "/mlp.onnx";
  std::string last_error_;  // of WaitUntil's last GetJob
};

TEST_F(ModelJobTest, TasksShareTheBudgetInRoundsAndEachHasItsProgress) {
  ASSERT_FALSE(StartServer({"--heartbeat-ms", "300"}).empty());
  StartAgent("m");
  ASSERT_TRUE(WaitForIdleAgents(1)) << server_->Stderr();
  const std::string heavy = "matmul M=24 N=20 K=16", light = "dense M=8 N=24 K=32 bias=1 relu=0";
  v1::SubmitJobRequest submit;
  v1::JobSpec* spec = submit.mutable_spec();
  spec->set_device_key("m");
  spec->set_trials(14);
  spec->set_round_trials(4);
  spec->set_batch_size(4);
  spec->set_policy("random");
  v1::WeightedTask* t = spec->add_tasks();
  t->set_task(heavy);
  t->set_weight(3);
  t = spec->add_tasks();
  t->set_task(light);  // weight 0: 1
  auto tuning = Tuning();
  grpc::ClientContext ctx;
  v1::SubmitJobResponse submitted;
  grpc::Status st = tuning->SubmitJob(&ctx, submit, &submitted);
  ASSERT_TRUE(st.ok()) << st.error_message();

  v1::JobStatus done = WaitForEnd(tuning.get(), submitted.job_id(), 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.message() << "\n" << server_->Stderr();
  EXPECT_EQ(done.trials_done(), 14);
  ASSERT_EQ(done.tasks_size(), 2);
  EXPECT_EQ(done.tasks(0).weight(), 3);
  EXPECT_EQ(done.tasks(1).weight(), 1);
  int trials = 0;
  double estimated = 0;
  for (const v1::TaskProgress& p : done.tasks()) {
    SCOPED_TRACE(p.task());
    trials += p.trials();
    EXPECT_GE(p.rounds(), 1);  // every task has its warm-up round
    EXPECT_GE(p.trials(), 4);
    ASSERT_GT(p.best().seconds(), 0);
    EXPECT_TRUE(p.error().empty()) << p.error();
    estimated += p.weight() * p.best().seconds();
    // Exactly its trials of distinct configs measured (the baseline and the finalists'
    // re-measurements aside), none twice as a trial.
    std::map<std::string, int> searched;
    for (const TuningRecord& r : Records(p.task())) {
      EXPECT_EQ(r.job_id, submitted.job_id());
      if (r.proposed_by != "baseline" && r.proposed_by != "remeasure") ++searched[r.config_json];
    }
    EXPECT_EQ(static_cast<int>(searched.size()), p.trials());
    for (const auto& [config, n] : searched) EXPECT_EQ(n, 1) << config;
  }
  EXPECT_EQ(trials, 14);
  EXPECT_NEAR(done.estimated_seconds(), estimated, 1e-12);
  // The canonical texts, in the spec's order.
  EXPECT_EQ(done.tasks(0).task(), ParseTask(heavy)->CanonicalText());
  EXPECT_EQ(done.tasks(1).task(), ParseTask(light)->CanonicalText());
}

// The server's scheduler options: round-robin splits a budget evenly whatever the
// weights; a task that stops improving is stopped early (flat) with flat_rounds, and
// the job then ends before its budget with "every task flat".
TEST_F(ModelJobTest, RoundRobinAndFlatRoundsRunOnTheServer) {
  ASSERT_FALSE(StartServer({"--heartbeat-ms", "300"}).empty());
  StartAgent("m");
  ASSERT_TRUE(WaitForIdleAgents(1)) << server_->Stderr();
  auto tuning = Tuning();
  auto run = [&](const std::function<void(v1::JobSpec*)>& edit) {
    v1::SubmitJobRequest submit;
    v1::JobSpec* spec = submit.mutable_spec();
    spec->set_device_key("m");
    spec->set_round_trials(2);
    spec->set_batch_size(2);
    spec->set_policy("random");
    v1::WeightedTask* t = spec->add_tasks();
    t->set_task("matmul M=24 N=20 K=16");
    t->set_weight(50);
    spec->add_tasks()->set_task("dense M=8 N=24 K=32 bias=1 relu=0");
    edit(spec);
    grpc::ClientContext ctx;
    v1::SubmitJobResponse submitted;
    grpc::Status st = tuning->SubmitJob(&ctx, submit, &submitted);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return WaitForEnd(tuning.get(), submitted.job_id(), 300);
  };
  v1::JobStatus even = run([](v1::JobSpec* s) {
    s->set_trials(12);
    s->set_scheduler("round-robin");
  });
  ASSERT_EQ(even.state(), v1::SUCCEEDED) << even.message();
  ASSERT_EQ(even.tasks_size(), 2);
  EXPECT_EQ(even.tasks(0).trials(), 6) << "weight 50 makes no difference to round-robin";
  EXPECT_EQ(even.tasks(1).trials(), 6);

  // flat_rounds 1: a round of 2 random trials that does not lower a task's best by 1%
  // stops it; every task goes flat long before 200 trials.
  v1::JobStatus flat = run([](v1::JobSpec* s) {
    s->set_trials(200);
    s->set_flat_rounds(1);
  });
  ASSERT_EQ(flat.state(), v1::SUCCEEDED) << flat.message();
  EXPECT_LT(flat.trials_done(), 200);
  EXPECT_NE(flat.last_event().find("trials: every task flat"), std::string::npos) << flat.last_event();
  for (const v1::TaskProgress& p : flat.tasks()) EXPECT_TRUE(p.flat()) << p.task();
}

TEST_F(ModelJobTest, KilledServerResumesTheJobWhichSpendsExactlyItsBudget) {
  ASSERT_FALSE(StartServer({"--heartbeat-ms", "300"}).empty());
  StartAgent("m");
  ASSERT_TRUE(WaitForIdleAgents(1)) << server_->Stderr();
  const std::vector<std::string> tasks = {"matmul M=24 N=20 K=16", "matmul M=16 N=24 K=20"};
  v1::SubmitJobRequest submit;
  v1::JobSpec* spec = submit.mutable_spec();
  spec->set_device_key("m");
  spec->set_trials(24);
  spec->set_round_trials(4);
  spec->set_batch_size(2);
  spec->set_policy("random");
  for (const std::string& t : tasks) spec->add_tasks()->set_task(t);
  auto tuning = Tuning();
  grpc::ClientContext ctx;
  v1::SubmitJobResponse submitted;
  grpc::Status st = tuning->SubmitJob(&ctx, submit, &submitted);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // kill -9 mid-job, once both tasks have had a round.
  v1::JobStatus seen = WaitForTrials(tuning.get(), submitted.job_id(), 10);
  ASSERT_GE(seen.trials_done(), 10) << server_->Stderr();
  ASSERT_LT(seen.trials_done(), 24) << "the job ended before the kill";
  server_->Kill(SIGKILL);

  // The same db and port; the agent reconnects by itself, the job resumes by its id.
  ASSERT_TRUE(RestartServer());
  tuning = Tuning();
  v1::JobStatus done = WaitForEnd(tuning.get(), submitted.job_id(), 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.message() << "\n" << server_->Stderr();
  EXPECT_EQ(done.trials_done(), 24);
  int trials = 0, searched_total = 0;
  for (const v1::TaskProgress& p : done.tasks()) {
    SCOPED_TRACE(p.task());
    trials += p.trials();
    std::map<std::string, int> searched;
    for (const TuningRecord& r : Records(p.task())) {
      EXPECT_EQ(r.job_id, submitted.job_id());
      if (r.proposed_by != "baseline" && r.proposed_by != "remeasure") ++searched[r.config_json];
    }
    searched_total += static_cast<int>(searched.size());
    for (const auto& [config, n] : searched) EXPECT_EQ(n, 1) << "measured twice: " << config;
  }
  EXPECT_EQ(trials, 24);
  EXPECT_EQ(searched_total, 24);  // exactly the budget of distinct configs, across the restart
}

// The CLI's way in: `tune --model --detach` submits the model's tasks as one job and
// exits; `jobs watch` follows it to its end (exit 0), `jobs show`, `jobs list` and
// `jobs cancel` see it.
TEST_F(ModelJobTest, DetachedModelJobIsFollowedWithTheJobsCommand) {
  const std::string id = SubmitDetachedMlp(10), tf = kBin + "/tuneforge";
  ASSERT_FALSE(id.empty());

  auto watch = RunCommand({tf, "jobs", "watch", id, "--server", address_, "--json"}, dir_, std::chrono::seconds(300));
  ASSERT_EQ(watch.exit_code, 0) << watch.err << server_->Stderr();
  nlohmann::json done = nlohmann::json::parse(watch.out);
  EXPECT_EQ(done["state"], "SUCCEEDED");
  EXPECT_EQ(done["trials_done"], 10);
  ASSERT_EQ(done["tasks"].size(), 2u) << done.dump();  // the MLP's two dense layers
  int trials = 0;
  for (const nlohmann::json& t : done["tasks"]) {
    trials += t["trials"].get<int>();
    EXPECT_GT(t["best"]["seconds"].get<double>(), 0) << t.dump();
  }
  EXPECT_EQ(trials, 10);
  EXPECT_GT(done["estimated_seconds"].get<double>(), 0);
  EXPECT_NE(watch.err.find("trials:"), std::string::npos) << watch.err;  // progress lines
  // The model went with the job: kept beside the db under its SHA-256.
  EXPECT_EQ(done["model"]["name"], "mlp.onnx");
  const std::string stored = db_ + ".models/" + done["model"]["sha256"].get<std::string>() + ".onnx";
  EXPECT_TRUE(std::filesystem::exists(stored)) << stored;
  EXPECT_EQ(std::filesystem::file_size(stored), std::filesystem::file_size(kMlp));
  // The agent is this machine, so the server timed the model: the estimate is each task's
  // best alone x its in-run factor (its kernels' time in the model's run over that),
  // plus the leftovers; the model ran with the best schedules after the warm-up and at
  // the end.
  const nlohmann::json& timing = done["model"]["timing"];
  ASSERT_TRUE(timing["timed"].get<bool>()) << done.dump();
  EXPECT_GT(timing["untuned_seconds"].get<double>(), 0) << timing;
  EXPECT_GE(timing["in_runs"].get<int>(), 2) << timing;
  EXPECT_EQ(timing["measured_when"], "at the end") << timing;
  EXPECT_GT(timing["measured_seconds"].get<double>(), 0) << timing;
  double estimate = timing["leftover_seconds"].get<double>();
  for (const nlohmann::json& t : done["tasks"]) {
    EXPECT_GT(t["in_run_factor"].get<double>(), 0) << t.dump();
    estimate += t["weight"].get<double>() * t["in_run_factor"].get<double>() * t["best"]["seconds"].get<double>();
  }
  EXPECT_NEAR(done["estimated_seconds"].get<double>(), estimate, 1e-6 * estimate) << done.dump();

  auto show = RunCommand({tf, "jobs", "show", id, "--server", address_}, dir_, std::chrono::seconds(30));
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("state:       SUCCEEDED"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("estimated:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("model run:"), std::string::npos) << show.out;
  auto list = RunCommand({tf, "jobs", "list", "--server", address_, "--json"}, dir_, std::chrono::seconds(30));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  nlohmann::json jobs = nlohmann::json::parse(list.out);
  ASSERT_EQ(jobs.size(), 1u) << list.out;
  EXPECT_EQ(jobs[0]["job_id"], id);
  EXPECT_EQ(jobs[0]["task"], "mlp.onnx: 2 tasks") << list.out;

  // A job that cannot start (no agent of its key) is cancelled; watch then exits 1.
  auto waiting = RunCommand({tf, "tune", "--task", "matmul M=8 N=8 K=8", "--server", address_, "--device-key",
                             "nobody", "--trials", "2", "--detach", "--json"},
                            dir_, std::chrono::seconds(60));
  ASSERT_EQ(waiting.exit_code, 0) << waiting.err;
  const std::string waiting_id = nlohmann::json::parse(waiting.out)["job_id"];
  auto cancel = RunCommand({tf, "jobs", "cancel", waiting_id, "--server", address_}, dir_, std::chrono::seconds(30));
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  auto cancelled = RunCommand({tf, "jobs", "watch", waiting_id, "--server", address_, "--json"}, dir_,
                              std::chrono::seconds(60));
  EXPECT_EQ(cancelled.exit_code, 1) << cancelled.out << cancelled.err;
  EXPECT_EQ(nlohmann::json::parse(cancelled.out)["state"], "CANCELLED");

  // Clear errors: an unknown id, --detach without a server, a verb without its id.
  auto unknown = RunCommand({tf, "jobs", "show", "job-0-0", "--server", address_}, dir_, std::chrono::seconds(30));
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no job job-0-0"), std::string::npos) << unknown.err;
  auto no_server = RunCommand({tf, "tune", "--task", "matmul M=8 N=8 K=8", "--detach"}, dir_, std::chrono::seconds(30));
  EXPECT_NE(no_server.exit_code, 0);
  EXPECT_NE(no_server.err.find("--detach needs --server"), std::string::npos) << no_server.err;
  auto no_id = RunCommand({tf, "jobs", "watch", "--server", address_}, dir_, std::chrono::seconds(30));
  EXPECT_NE(no_id.exit_code, 0);
  EXPECT_NE(no_id.err.find("takes one job id"), std::string::npos) << no_id.err;
}

// The goal as a user meets it: a model job submitted detached survives kill -9
// of its watching client and of the server; after the restart a new client's `jobs
// watch` follows it to the end, and it has measured exactly its budget of distinct
// configs.
TEST_F(ModelJobTest, ModelJobSurvivesKilledClientAndServerAndANewClientWatchesItToTheEnd) {
  const std::string id = SubmitDetachedMlp(20), tf = kBin + "/tuneforge";
  ASSERT_FALSE(id.empty());
  Process first({tf, "jobs", "watch", id, "--server", address_}, dir_ + "/watch1.out", dir_ + "/watch1.err");
  auto tuning = Tuning();
  v1::JobStatus seen = WaitForTrials(tuning.get(), id, 6);
  ASSERT_GE(seen.trials_done(), 6) << server_->Stderr();
  ASSERT_LT(seen.trials_done(), 20) << "the job ended before the kills";
  first.Kill(SIGKILL);
  server_->Kill(SIGKILL);

  ASSERT_TRUE(RestartServer());
  auto watch = RunCommand({tf, "jobs", "watch", id, "--server", address_, "--json"}, dir_, std::chrono::seconds(300));
  ASSERT_EQ(watch.exit_code, 0) << watch.err << server_->Stderr();
  nlohmann::json done = nlohmann::json::parse(watch.out);
  EXPECT_EQ(done["state"], "SUCCEEDED");
  EXPECT_EQ(done["trials_done"], 20);
  int searched = 0;
  for (const nlohmann::json& t : done["tasks"]) {
    std::map<std::string, int> configs;
    for (const TuningRecord& r : Records(t["task"]))
      if (r.proposed_by != "baseline" && r.proposed_by != "remeasure") ++configs[r.config_json];
    for (const auto& [config, n] : configs) EXPECT_EQ(n, 1) << "measured twice: " << config;
    searched += static_cast<int>(configs.size());
  }
  EXPECT_EQ(searched, 20);
}

// `tune --tasks` on the embedded default is one such job too: the budget is the tasks'
// total in the db, so the same command again measures nothing new.
TEST_F(ModelJobTest, TasksFileIsOneJobAndASecondRunMeasuresNothingNew) {
  const std::string tasks = dir_ + "/tasks.txt", db = dir_ + "/tasks.db";
  {
    std::ofstream out(tasks);
    out << "# two layers\nmatmul M=24 N=20 K=16 weight=2.5\nmatmul M=16 N=24 K=20\n";
  }
  const std::vector<std::string> argv = {kBin + "/tuneforge", "tune", "--tasks", tasks, "--trials", "8",
                                         "--round-trials", "4", "--batch", "2", "--policy", "random",
                                         "--db", db, "--json"};
  auto first = RunCommand(argv, dir_, std::chrono::seconds(300));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  nlohmann::json a = nlohmann::json::parse(first.out);
  EXPECT_EQ(a["trials"], 8) << a.dump();
  ASSERT_EQ(a["tasks"].size(), 2u) << a.dump();
  EXPECT_EQ(a["tasks"][0]["weight"], 2.5);
  EXPECT_GE(a["rounds"].get<int>(), 2);
  double objective = 0;
  for (const nlohmann::json& t : a["tasks"]) objective += t["weight"].get<double>() * t["best"]["seconds"].get<double>();
  EXPECT_NEAR(a["objective_seconds"].get<double>(), objective, 1e-12);
  db_ = db;  // what Records() reads
  EXPECT_GT(Records("matmul M=24 N=20 K=16").size() + Records("matmul M=16 N=24 K=20").size(), 8u);

  auto second = RunCommand(argv, dir_, std::chrono::seconds(300));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  nlohmann::json b = nlohmann::json::parse(second.out);
  EXPECT_EQ(b["trials"], 8) << b.dump();
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(b["tasks"][i]["trials"], a["tasks"][i]["trials"]) << b.dump();
  size_t searched_again = 0;
  for (const char* t : {"matmul M=24 N=20 K=16", "matmul M=16 N=24 K=20"})
    for (const TuningRecord& r : Records(t))
      searched_again += r.job_id == b["job_id"] && r.proposed_by != "baseline" && r.proposed_by != "remeasure";
  EXPECT_EQ(searched_again, 0u) << "the second run measured new configs";
}

// The server checks an uploaded model itself (a client need not be tuneforge's CLI):
// what its importer refuses is not kept, nor is a model over the size limit, and a
// job may only name a model it holds.
TEST_F(ModelJobTest, UploadedModelsAreCheckedKeptByHashAndBounded) {
  ASSERT_FALSE(StartServer({"--max-model-bytes", "1MiB"}).empty());
  auto tuning = Tuning();
  auto upload = [&](const std::string& bytes, v1::ModelUploaded* out) {
    grpc::ClientContext ctx;
    auto writer = tuning->UploadModel(&ctx, out);
    for (size_t at = 0; at < bytes.size(); at += 512 << 10) {
      v1::ModelChunk chunk;
      if (at == 0) chunk.set_name("m.onnx");
      chunk.set_data(bytes.substr(at, 512 << 10));
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  v1::ModelUploaded uploaded;
  grpc::Status st = upload(std::string(1000, 'x'), &uploaded);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("m.onnx"), std::string::npos) << st.error_message();
  st = upload(std::string(1536 << 10, 'x'), &uploaded);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("--max-model-bytes"), std::string::npos) << st.error_message();
  EXPECT_FALSE(std::filesystem::exists(db_ + ".models") && !std::filesystem::is_empty(db_ + ".models"))
      << "a refused model was kept";

  std::ifstream in(kMlp, std::ios::binary);
  const std::string mlp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  st = upload(mlp, &uploaded);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(uploaded.model_hash().size(), 64u);
  EXPECT_EQ(uploaded.bytes(), static_cast<int64_t>(mlp.size()));
  ASSERT_EQ(uploaded.tasks_size(), 2);
  EXPECT_TRUE(std::filesystem::exists(db_ + ".models/" + uploaded.model_hash() + ".onnx"));
  v1::ModelUploaded again;
  ASSERT_TRUE(upload(mlp, &again).ok());
  EXPECT_EQ(again.model_hash(), uploaded.model_hash());  // the same bytes, the same name

  struct Case {
    std::string hash;
    grpc::StatusCode code;
    std::string message;
  } cases[] = {
      {std::string(64, '0'), grpc::StatusCode::NOT_FOUND, "no uploaded model"},
      {"abc", grpc::StatusCode::INVALID_ARGUMENT, "64 hex digits"},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest submit;
    submit.mutable_spec()->set_trials(4);
    submit.mutable_spec()->set_model_hash(c.hash);
    grpc::ClientContext ctx;
    v1::SubmitJobResponse response;
    st = tuning->SubmitJob(&ctx, submit, &response);
    EXPECT_EQ(st.error_code(), c.code) << st.error_message();
    EXPECT_NE(st.error_message().find(c.message), std::string::npos) << st.error_message();
  }
  // A job of the model lists no tasks of its own.
  v1::SubmitJobRequest both;
  both.mutable_spec()->set_trials(4);
  both.mutable_spec()->set_model_hash(uploaded.model_hash());
  both.mutable_spec()->add_tasks()->set_task("matmul M=8 N=8 K=8");
  grpc::ClientContext ctx;
  v1::SubmitJobResponse response;
  st = tuning->SubmitJob(&ctx, both, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();

  // Weights kept as external data go inside the upload: the server keeps one file that
  // reads on its own (the job is accepted; no agent of its key, so it only waits).
  const std::string external = std::string(TF_TEST_MODELS_DIR) + "/mlp_external.onnx";
  auto submit = RunCommand({kBin + "/tuneforge", "tune", "--model", external, "--server", address_, "--device-key",
                            "nobody", "--trials", "4", "--detach", "--json"},
                           dir_, std::chrono::seconds(60));
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = nlohmann::json::parse(submit.out)["job_id"];
  v1::JobStatus status = WaitUntil(tuning.get(), id, 30, [](const v1::JobStatus& s) { return !s.job_id().empty(); });
  const std::string stored = db_ + ".models/" + status.spec().model_hash() + ".onnx";
  ASSERT_TRUE(std::filesystem::exists(stored)) << stored;
  EXPECT_GT(std::filesystem::file_size(stored), std::filesystem::file_size(external)) << "the weights are inside";
  EXPECT_EQ(status.spec().tasks_size(), 2);
  RunCommand({kBin + "/tuneforge", "jobs", "cancel", id, "--server", address_}, dir_, std::chrono::seconds(30));
}

TEST_F(ModelJobTest, BadListsOfTasksAreRefusedBeforeAnyJobStarts) {
  ASSERT_FALSE(StartServer().empty());
  auto tuning = Tuning();
  struct Case {
    std::function<void(v1::JobSpec*)> edit;
    std::string message;
  } cases[] = {
      {[](v1::JobSpec* s) { s->set_task("matmul M=8 N=8 K=8"); }, "either a task or a list of tasks"},
      {[](v1::JobSpec* s) { s->add_tasks()->set_task("matmul M=8 N=8 K=8"); }, "is listed twice"},
      {[](v1::JobSpec* s) { s->mutable_tasks(0)->set_weight(-2); }, "weight must be > 0 and <= 1000000 (0: 1), got -2"},
      {[](v1::JobSpec* s) { s->add_tasks()->set_task("conv9d M=1"); }, "task 2: "},
      {[](v1::JobSpec* s) { s->add_configs("{}"); }, "fixed configs are for a job of one task"},
      {[](v1::JobSpec* s) { s->set_round_trials(-1); }, "round_trials must be 0..100000"},
      {[](v1::JobSpec* s) { s->set_trials(0); }, "trials must be between 1 and"},
      {[](v1::JobSpec* s) { s->set_flat_rounds(-1); }, "flat_rounds must be 0..1000"},
      {[](v1::JobSpec* s) { s->set_scheduler("greedy"); }, "scheduler must be gradient or round-robin, got 'greedy'"},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest submit;
    v1::JobSpec* spec = submit.mutable_spec();
    spec->set_trials(8);
    spec->add_tasks()->set_task("matmul M=8 N=8 K=8");
    c.edit(spec);
    grpc::ClientContext ctx;
    v1::SubmitJobResponse submitted;
    grpc::Status st = tuning->SubmitJob(&ctx, submit, &submitted);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_NE(st.error_message().find(c.message), std::string::npos) << st.error_message();
  }
}

}  // namespace
}  // namespace tuneforge
