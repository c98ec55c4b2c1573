// The dashboard over real HTTP on a real server (in process, real gRPC, a real SQLite
// file) with a tokens file: login and the session cookie, roles (a viewer only looks,
// a user cancels only their own jobs, an admin any), CSRF and cross-site refusals, and
// the JSON endpoints the pages draw (jobs, one job's curve points, agents, the paged
// tuning log, a record, the JSON-lines download). What the browser renders is tested
// by dashboard_browser (tests/dashboard_browser_test.py).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "compiler/task/task.h"
#include "db/database.h"
#include "db/tuning_log_format.h"
#include "nlohmann/json.hpp"
#include "server/auth.h"
#include "server/http/http_client.h"
#include "server/server.h"
#include "tests/process_util.h"
#include "tuneforge/v1/agent.grpc.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {
namespace {

using json = nlohmann::json;

const std::string kAgent = "agent-token-0123456789";
const std::string kAlice = "alice-token-0123456789";
const std::string kBob = "bob-token-0123456789abc";
const std::string kAdmin = "admin-token-0123456789";
const std::string kViewer = "viewer-token-0123456789";

// A response's Set-Cookie value for the session, "" when none.
std::string SessionCookie(const http::ClientResponse& r) {
  size_t at = r.head.find("Set-Cookie: tf_session=");
  if (at == std::string::npos) return "";
  size_t end = r.head.find("\r\n", at);
  return r.head.substr(at + 12, end - at - 12);
}

std::string HeaderOf(const http::ClientResponse& r, const std::string& name) {
  size_t at = r.head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  size_t start = at + 4 + name.size();
  return r.head.substr(start, r.head.find("\r\n", start) - start);
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tf_dashboard_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    testing::WriteSecret(dir_ + "/tokens", "agent farm " + kAgent + "\nuser alice " + kAlice +
                                               "\nuser bob " + kBob + "\nadmin ops " + kAdmin +
                                               "\nviewer wall " + kViewer + "\n");
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "127.0.0.1:0";
    o.db_path = dir_ + "/dash.db";
    o.tokens_path = dir_ + "/tokens";
    o.builder_threads = 1;
    o.golden_check = false;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    http_port_ = server_->metrics_port();
    host_ = "127.0.0.1:" + std::to_string(http_port_);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    tuning_ = v1::TuningService::NewStub(channel);
    agents_ = v1::AgentService::NewStub(channel);
  }
  void TearDown() override {
    server_->Shutdown();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  http::ClientResponse Request(const std::string& method, const std::string& target,
                               const std::string& headers = "", const std::string& body = "") {
    return http::SendRaw("127.0.0.1", http_port_,
                         method + " " + target + " HTTP/1.1\r\nHost: " + host_ + "\r\n" + headers +
                             "Content-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n\r\n" + body);
  }
  // Logs in with `token`; the session cookie ("tf_session=...") or "" when refused.
  std::string Login(const std::string& token, const std::string& origin = "") {
    http::ClientResponse r =
        Request("POST", "/login",
                "Content-Type: application/x-www-form-urlencoded\r\n" +
                    (origin.empty() ? "" : "Origin: " + origin + "\r\n"),
                "token=" + token);
    return SessionCookie(r).substr(0, SessionCookie(r).find(';'));
  }
  json GetJson(const std::string& target, const std::string& cookie, int expect_status = 200) {
    http::ClientResponse r = Request("GET", target, "Cookie: " + cookie + "\r\n");
    EXPECT_EQ(r.status, expect_status) << target << ": " << r.body << r.error;
    json parsed = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << target << ": " << r.body;
    return parsed;
  }
  http::ClientResponse CancelAs(const std::string& cookie, const std::string& job,
                                const std::string& csrf, const std::string& origin) {
    return Request("POST", "/api/cancel?id=" + job,
                   "Cookie: " + cookie + "\r\nX-CSRF-Token: " + csrf + "\r\n" +
                       (origin.empty() ? "" : "Origin: " + origin + "\r\n"));
  }
  // A job of alice's that waits for an agent nobody has: it stays queued until cancelled.
  std::string SubmitWaitingJob(const std::string& token) {
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_task("matmul M=8 N=8 K=8");
    req.mutable_spec()->set_trials(2);
    req.mutable_spec()->set_device_key("no-agent-has-this-key");
    v1::SubmitJobResponse resp;
    grpc::Status st = tuning_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }
  std::string JobState(const std::string& cookie, const std::string& job) {
    return GetJson("/api/job?id=" + job, cookie)["job"]["state"].get<std::string>();
  }

  std::string dir_;
  std::string host_;
  int http_port_ = 0;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TuningService::Stub> tuning_;
  std::unique_ptr<v1::AgentService::Stub> agents_;
};

TEST_F(DashboardTest, PagesAndDataNeedALoginWithAViewerUserOrAdminToken) {
  http::ClientResponse page = Request("GET", "/");
  EXPECT_EQ(page.status, 303);
  EXPECT_EQ(HeaderOf(page, "Location"), "/login");
  EXPECT_EQ(Request("GET", "/api/jobs").status, 401);
  EXPECT_EQ(Request("GET", "/api/jobs", "Cookie: tf_session=forged0123456789\r\n").status, 401);
  http::ClientResponse login_page = Request("GET", "/login");
  EXPECT_EQ(login_page.status, 200);
  EXPECT_NE(login_page.body.find("name=\"token\""), std::string::npos);
  EXPECT_EQ(Request("GET", "/static/app.js").status, 200);  // code, no data
  EXPECT_NE(HeaderOf(page, "Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(Request("GET", "/metrics").status, 200);  // Prometheus scrapes stay open

  EXPECT_EQ(Login("not-a-token-of-this-server"), "");
  EXPECT_EQ(Login(kAgent), "") << "agent tokens are for agents";
  EXPECT_EQ(Login(kViewer, "http://evil.example"), "") << "a cross-site login is refused";

  http::ClientResponse ok =
      Request("POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n", "token=" + kViewer);
  EXPECT_EQ(ok.status, 303);
  std::string set_cookie = SessionCookie(ok);
  EXPECT_NE(set_cookie.find("; HttpOnly"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("; SameSite=Strict"), std::string::npos) << set_cookie;
  std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  json who = GetJson("/api/session", cookie);
  EXPECT_EQ(who["name"], "wall");
  EXPECT_EQ(who["role"], "viewer");
  EXPECT_EQ(who["csrf"].get<std::string>().size(), 32u);
  EXPECT_EQ(Request("GET", "/", "Cookie: " + cookie + "\r\n").status, 200);

  // Logout needs the session's CSRF token; after it the cookie is worthless.
  EXPECT_EQ(Request("POST", "/logout", "Cookie: " + cookie + "\r\n", "csrf=wrong").status, 403);
  EXPECT_EQ(Request("POST", "/logout", "Cookie: " + cookie + "\r\n",
                    "csrf=" + who["csrf"].get<std::string>())
                .status,
            303);
  EXPECT_EQ(Request("GET", "/api/jobs", "Cookie: " + cookie + "\r\n").status, 401);
}

TEST_F(DashboardTest, ViewersLookUsersCancelTheirOwnAdminsAnyAndForgedRequestsAreRefused) {
  std::string job = SubmitWaitingJob(kAlice);
  std::string other = SubmitWaitingJob(kBob);
  ASSERT_FALSE(job.empty());
  std::string viewer = Login(kViewer), alice = Login(kAlice), bob = Login(kBob), admin = Login(kAdmin);
  ASSERT_FALSE(viewer.empty());
  ASSERT_FALSE(alice.empty());
  auto csrf = [&](const std::string& cookie) {
    return GetJson("/api/session", cookie)["csrf"].get<std::string>();
  };
  const std::string self = "http://" + host_;

  json jobs = GetJson("/api/jobs", viewer);
  ASSERT_EQ(jobs["total"], 2);
  EXPECT_EQ(jobs["jobs"][0]["job_id"], other);  // newest first
  EXPECT_EQ(jobs["jobs"][1]["owner"], "alice");
  json older = GetJson("/api/jobs?limit=1&offset=1", viewer);  // the jobs page's pager
  ASSERT_EQ(older["jobs"].size(), 1u);
  EXPECT_EQ(older["jobs"][0]["job_id"], job);
  EXPECT_EQ(older["total"], 2);
  GetJson("/api/jobs?limit=0", viewer, 400);
  GetJson("/api/jobs?offset=x", viewer, 400);

  http::ClientResponse r = CancelAs(viewer, job, csrf(viewer), self);
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_NE(r.body.find("viewer may only look"), std::string::npos) << r.body;
  EXPECT_EQ(CancelAs(bob, job, csrf(bob), self).status, 403) << "not bob's job";
  EXPECT_EQ(CancelAs(alice, job, "", self).status, 403) << "no CSRF token";
  EXPECT_EQ(CancelAs(alice, job, csrf(bob), self).status, 403) << "another session's token";
  EXPECT_EQ(CancelAs(alice, job, csrf(alice), "http://evil.example").status, 403) << "cross-site";
  EXPECT_EQ(Request("POST", "/api/cancel?id=" + job,
                    "Cookie: " + alice + "\r\nReferer: http://evil.example/x\r\n",
                    "csrf=" + csrf(alice))
                .status,
            403)
      << "cross-site form (Referer only)";
  EXPECT_EQ(Request("GET", "/api/cancel?id=" + job, "Cookie: " + alice + "\r\n").status, 405);
  EXPECT_NE(JobState(viewer, job), "CANCELLED");

  r = CancelAs(alice, job, csrf(alice), self);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(testing::WaitFor([&] { return JobState(viewer, job) == "CANCELLED"; },
                               std::chrono::seconds(10)));
  // A form post from the page (no header, the token in the body) works as well.
  r = Request("POST", "/api/cancel", "Cookie: " + admin + "\r\nOrigin: " + self + "\r\n",
              "id=" + other + "&csrf=" + csrf(admin));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(testing::WaitFor([&] { return JobState(viewer, other) == "CANCELLED"; },
                               std::chrono::seconds(10)));
  EXPECT_EQ(CancelAs(admin, "no-such-job", csrf(admin), self).status, 404);
}

TEST_F(DashboardTest, AgentsLogRecordsAndJobCurvesComeFromTheFarmAndTheDb) {
  // An agent whose key is markup: the JSON carries it verbatim (the page shows text).
  const std::string script_key = "<script>alert(1)</script>";
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, kAgent);
    v1::RegisterRequest req;
    req.set_device_key(script_key);
    req.mutable_capabilities()->set_cpu_model("Test CPU");
    v1::RegisterResponse resp;
    ASSERT_TRUE(agents_->Register(&ctx, req, &resp).ok());
  }
  // Records of a job in the db the server uses (a second connection to the file).
  DatabaseOptions options;
  options.path = dir_ + "/dash.db";
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
  ASSERT_TRUE(db.ok()) << db.status();
  WorkloadInfo w{"matmul-test1", "matmul", "matmul M=8 N=8 K=8 dtype=float32", "{}", 1024};
  WorkloadInfo conv{"conv2d-test", "conv2d", "conv2d <b>bold</b>", "{}", 2048};
  TargetInfo t{"x86_64/test/t2/k/f0", "x86_64-pc-linux-gnu", "znver4", "+avx2", 2, "k"};
  std::vector<TuningRecord> records;
  for (int i = 0; i < 5; ++i) {
    TuningRecord r;
    r.workload = i == 4 ? conv : w;
    r.target = t;
    r.job_id = i < 3 ? "job-curve" : "";
    r.template_name = "tiled";
    r.template_version = 1;
    r.config_json = "{\"tile\":" + std::to_string(i) + "}";
    r.result.costs = {1e-6 * (5 - i)};
    r.result.start_unix_us = 1700000000000000 + i * 1000000;
    r.result.end_unix_us = r.result.start_unix_us + 10;
    records.push_back(r);
  }
  records[1].result.costs.clear();
  records[1].result.error = MeasureErrorKind::kBuildError;
  records[1].result.error_message = "bad <tile>";
  absl::StatusOr<std::vector<int64_t>> ids = (*db)->Commit(records);
  ASSERT_TRUE(ids.ok()) << ids.status();

  std::string viewer = Login(kViewer);
  json agents = GetJson("/api/agents", viewer);
  ASSERT_EQ(agents["agents"].size(), 1u);
  EXPECT_EQ(agents["agents"][0]["device_key"], script_key);
  EXPECT_EQ(agents["agents"][0]["cpu"], "Test CPU");
  http::ClientResponse raw = Request("GET", "/api/agents", "Cookie: " + viewer + "\r\n");
  EXPECT_NE(HeaderOf(raw, "Content-Type").find("application/json"), std::string::npos);
  EXPECT_EQ(HeaderOf(raw, "X-Content-Type-Options"), "nosniff");

  // The best table: conv2d before matmul; filters; paging.
  json log = GetJson("/api/log", viewer);
  ASSERT_EQ(log["rows"].size(), 2u);
  EXPECT_EQ(log["rows"][0]["task"], "conv2d <b>bold</b>");
  EXPECT_EQ(log["rows"][1]["workload_key"], "matmul-test1");
  EXPECT_DOUBLE_EQ(log["rows"][1]["seconds"].get<double>(), 2e-6);  // record 3 (i = 3)
  EXPECT_DOUBLE_EQ(log["rows"][1]["gflops"].get<double>(), 1024 / 2e-6 / 1e9);
  EXPECT_EQ(log["more"], false);
  json page = GetJson("/api/log?op=matmul&limit=1", viewer);
  ASSERT_EQ(page["rows"].size(), 1u);
  EXPECT_EQ(page["more"], false);
  page = GetJson("/api/log?limit=1", viewer);
  EXPECT_EQ(page["more"], true);
  EXPECT_EQ(GetJson("/api/log?target=nothing", viewer)["rows"].size(), 0u);
  GetJson("/api/log?limit=0", viewer, 400);
  GetJson("/api/log?offset=-3", viewer, 400);

  json record = GetJson("/api/record?id=" + std::to_string((*ids)[1]), viewer);
  EXPECT_EQ(record["error"], "build_error");
  EXPECT_EQ(record["error_message"], "bad <tile>");
  EXPECT_EQ(record["job_id"], "job-curve");
  GetJson("/api/record?id=99999", viewer, 404);
  GetJson("/api/record?id=x", viewer, 400);

  http::ClientResponse download = Request("GET", "/api/log.jsonl?op=matmul", "Cookie: " + viewer + "\r\n");
  ASSERT_EQ(download.status, 200);
  std::istringstream lines(download.body);
  std::string header, line;
  ASSERT_TRUE(std::getline(lines, header));
  EXPECT_TRUE(CheckLogHeader(header).ok()) << header;
  int n = 0;
  while (std::getline(lines, line)) {
    absl::StatusOr<LogLine> parsed = ParseLogLine(line);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ++n;
  }
  EXPECT_EQ(n, 1);
}

TEST_F(DashboardTest, AJobsPageHasItsTasksAndOnePointPerMeasurement) {
  std::string job = SubmitWaitingJob(kAlice);
  DatabaseOptions options;
  options.path = dir_ + "/dash.db";
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
  ASSERT_TRUE(db.ok()) << db.status();
  absl::StatusOr<TuningTask> task = ParseTask("matmul M=8 N=8 K=8");
  ASSERT_TRUE(task.ok());
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<TuningRecord> records;
  for (int i = 0; i < 3; ++i) {
    TuningRecord r;
    r.workload = WorkloadInfo{task->WorkloadKey(), "matmul", task->CanonicalText(), task->ToJson(),
                              task->Flops()};
    r.target = TargetInfo{"x86_64/test/t2/k/f0", "x86_64-pc-linux-gnu", "znver4", "+avx2", 2, "k"};
    r.job_id = job;
    r.template_name = "tiled";
    r.template_version = 1;
    r.config_json = "{\"tile\":" + std::to_string(i) + "}";
    r.result.costs = {1e-6 * (3 - i)};
    r.result.start_unix_us = now_us + i * 500000;
    records.push_back(r);
  }
  records[2].result.error = MeasureErrorKind::kWrongAnswer;
  ASSERT_TRUE((*db)->Commit(records).ok());

  json page = GetJson("/api/job?id=" + job, Login(kViewer));
  EXPECT_EQ(page["job"]["owner"], "alice");
  ASSERT_EQ(page["tasks"].size(), 1u);
  EXPECT_EQ(page["tasks"][0]["workload_key"], task->WorkloadKey());
  EXPECT_DOUBLE_EQ(page["tasks"][0]["flops"].get<double>(), task->Flops());
  ASSERT_EQ(page["points"].size(), 3u);
  EXPECT_NEAR(page["points"][0][0].get<double>(), now_us / 1e6, 1e-5);
  EXPECT_EQ(page["points"][0][1], 0);
  EXPECT_EQ(page["points"][0][2], 3e-6);
  EXPECT_EQ(page["points"][0][3], "none");
  EXPECT_NEAR(page["points"][1][0].get<double>() - page["points"][0][0].get<double>(), 0.5, 1e-5);
  EXPECT_EQ(page["points"][2][3], "wrong_answer");
  ASSERT_EQ(page["errors"].size(), 1u);
  EXPECT_EQ(page["errors"][0]["error"], "wrong_answer");
  EXPECT_EQ(page["more"], false);
  // A page that has the points asks for the ones after the last: none yet.
  int64_t last = page["last_record_id"];
  json next = GetJson("/api/job?id=" + job + "&after=" + std::to_string(last), Login(kViewer));
  EXPECT_TRUE(next["points"].empty());
  EXPECT_EQ(next["last_record_id"], last);
  json tail = GetJson("/api/job?id=" + job + "&after=" + std::to_string(last - 1), Login(kViewer));
  ASSERT_EQ(tail["points"].size(), 1u);
  EXPECT_EQ(tail["points"][0][3], "wrong_answer");
  GetJson("/api/job?id=" + job + "&after=-1", Login(kViewer), 400);
  GetJson("/api/job?id=nope", Login(kViewer), 404);
}

}  // namespace
}  // namespace tuneforge
