// The dashboard's routes, sessions and JSON endpoints.
#include "server/dashboard/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/support/hash.h"
#include "compiler/task/task.h"
#include "db/tuning_log_format.h"
#include "nlohmann/json.hpp"
#include "server/dashboard/assets.h"
#include "server/job_json.h"

namespace tuneforge {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json; charset=utf-8";
constexpr const char* kText = "text/plain; charset=utf-8";

// Every dashboard answer: no framing, no sniffing, scripts and styles from here only.
void AddSecurityHeaders(http::Response* r) {
  r->headers.push_back({"Content-Security-Policy",
                        "default-src 'self'; script-src 'self'; style-src 'self'; "
                        "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                        "frame-ancestors 'none'; form-action 'self'"});
  r->headers.push_back({"X-Content-Type-Options", "nosniff"});
  r->headers.push_back({"X-Frame-Options", "DENY"});
  // "same-origin", not "no-referrer": with no-referrer a browser sends "Origin: null"
  // on its form posts, and the same-origin check would refuse the login.
  r->headers.push_back({"Referrer-Policy", "same-origin"});
}

http::Response JsonResponse(int status, const json& body) {
  // Invalid UTF-8 (a task or agent name is any bytes) becomes U+FFFD, never an error.
  http::Response r(status, kJson, body.dump(-1, ' ', false, json::error_handler_t::replace));
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

http::Response JsonError(int status, const std::string& message) {
  return JsonResponse(status, json{{"error", message}});
}

http::Response Redirect(const std::string& location) {
  http::Response r(303, kText, "see " + location + "\n");
  r.headers.push_back({"Location", location});
  return r;
}

http::Response Page(const char* name) {
  const Asset* a = FindAsset(name);
  if (!a) return http::Response(500, kText, "asset missing from this build\n");
  http::Response r(200, a->content_type, std::string(a->bytes));
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

// A non-negative integer query parameter, `fallback` when absent; nullopt when bad.
std::optional<int64_t> IntParam(const http::Request& request, const std::string& name,
                                int64_t fallback, int64_t max) {
  std::string v = request.Param(name);
  if (v.empty()) return fallback;
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 0 || n > max) return std::nullopt;
  return n;
}

double Gflops(double flops, double seconds) {
  return seconds > 0 && std::isfinite(seconds) ? flops / seconds / 1e9 : 0;
}

// Stored JSON text as JSON; text that does not parse (or none) is kept as a string.
json StoredJson(const std::string& text) {
  if (text.empty()) return nullptr;
  json parsed = json::parse(text, nullptr, false);
  return parsed.is_discarded() ? json(text) : parsed;
}

json RecordJson(const TuningRecord& r) {
  json costs = json::array();
  for (double c : r.result.costs) costs.push_back(c);
  return {{"id", r.id},
          {"workload_key", r.workload.key},
          {"op", r.workload.op},
          {"task", r.workload.task_text},
          {"flops", r.workload.flops},
          {"target_key", r.target.key},
          {"device_key", r.target.device_key},
          {"cpu", r.target.cpu},
          {"job_id", r.job_id},
          {"template", r.template_name},
          {"template_version", r.template_version},
          {"config", StoredJson(r.config_json)},
          {"costs", costs},
          {"error", std::string(MeasureErrorKindName(r.result.error))},
          {"error_message", r.result.error_message},
          {"build_seconds", r.result.build_seconds},
          {"start_unix_us", r.result.start_unix_us},
          {"agent_id", r.result.agent_id},
          {"environment", StoredJson(r.result.environment_json)},
          {"content_id", r.content_id},
          {"proposed_by", r.proposed_by},
          {"uploaded_by", r.uploaded_by}};
}

json AgentJson(const AgentInfo& a, int64_t now_ms) {
  const v1::AgentCapabilities& c = a.capabilities;
  return {{"id", a.id},
          {"device_key", a.device_key},
          {"state", a.State()},
          {"reason", a.state_reason},
          {"cpu", c.cpu_model()},
          {"triple", c.triple()},
          {"cores", c.cores()},
          {"hostname", c.hostname()},
          {"launcher", c.launcher()},
          {"version", c.agent_version()},
          {"workers", a.workers},
          {"in_flight", a.in_flight},
          {"measurements", a.measurements},
          {"errors", a.errors},
          {"lease_expiries", a.lease_expiries},
          {"golden_seconds", a.golden_seconds},
          {"last_seen_seconds_ago",
           a.last_heartbeat_unix_ms > 0 ? (now_ms - a.last_heartbeat_unix_ms) / 1000.0 : -1.0}};
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The tasks of a job as the page draws them: text, weight, workload key and flops.
json TasksOf(const v1::JobSpec& spec) {
  json out = json::array();
  auto add = [&](const std::string& text, double weight) {
    json t = {{"task", text}, {"weight", weight}, {"workload_key", ""}, {"flops", 0.0}};
    absl::StatusOr<TuningTask> task = ParseTask(text);
    if (task.ok()) {
      t["workload_key"] = task->WorkloadKey();
      t["flops"] = task->Flops();
    }
    out.push_back(t);
  };
  if (spec.tasks_size() > 0) {
    for (const v1::WeightedTask& t : spec.tasks()) add(t.task(), t.weight());
  } else if (!spec.task().empty()) {
    add(spec.task(), 1.0);
  }
  return out;
}

}  // namespace

Dashboard::Dashboard(JobManager* jobs, const AgentRegistry* agents, Database* db,
                     const TokenAuth* auth)
    : jobs_(jobs), agents_(agents), db_(db), auth_(auth), open_csrf_(RandomToken()) {}

std::optional<http::Response> Dashboard::Handle(const http::Request& request) {
  const std::string& path = request.path;
  const bool page = path == "/" || path == "/job" || path == "/agents" || path == "/log";
  const bool api = path.rfind("/api/", 0) == 0;
  std::optional<http::Response> out;
  if (path.rfind("/static/", 0) == 0) {
    const Asset* a = FindAsset(path.substr(8));
    out = a ? http::Response(200, a->content_type, std::string(a->bytes))
            : http::Response(404, kText, "no such file\n");
    if (a) out->headers.push_back({"Cache-Control", "max-age=300"});
  } else if (path == "/favicon.ico") {
    out = http::Response(204, kText, "");
  } else if (path == "/login") {
    if (request.method == "POST") {
      out = Login(request);
    } else if (!auth_) {
      out = Redirect("/");
    } else {
      out = Page("login.html");
    }
  } else if (path == "/logout") {
    out = request.method == "POST" ? Logout(request)
                                   : http::Response(405, kText, "log out with POST\n");
  } else if (page || api) {
    std::optional<Session> session = Authenticate(request);
    if (!session) {
      out = page ? Redirect("/login") : JsonError(401, "log in first (POST /login with a token)");
    } else if (page) {
      out = request.method == "POST" ? http::Response(405, kText, "pages are read with GET\n")
                                     : Page("index.html");
    } else {
      out = Api(request, *session);
    }
  } else {
    return std::nullopt;
  }
  AddSecurityHeaders(&*out);
  return out;
}

std::optional<Dashboard::Session> Dashboard::Authenticate(const http::Request& request) {
  if (!auth_) return Session{Principal{"", Role::kAdmin}, open_csrf_, Clock::time_point::max()};
  std::string id = request.Cookie(kSessionCookie);
  if (id.empty()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expires < Clock::now()) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

bool Dashboard::SameOriginWithCsrf(const http::Request& request, const Session& session) const {
  const std::string self = "http://" + request.Header("host");
  std::string origin = request.Header("origin");
  if (!origin.empty() && origin != self) return false;
  std::string referer = request.Header("referer");
  if (origin.empty() && !referer.empty() && referer != self && referer.rfind(self + "/", 0) != 0) {
    return false;
  }
  std::string given = request.Header(kCsrfHeader);
  if (given.empty()) given = http::ParseForm(request.body)["csrf"];
  return SameSecret(session.csrf, given);
}

http::Response Dashboard::Login(const http::Request& request) {
  if (!auth_) return Redirect("/");
  std::string origin = request.Header("origin");
  if (!origin.empty() && origin != "http://" + request.Header("host")) {
    return http::Response(403, kText, "cross-site login refused\n");
  }
  const Principal* who = auth_->Lookup(http::ParseForm(request.body)["token"]);
  if (!who || who->role == Role::kAgent) return Redirect("/login?failed=1");
  std::string id = RandomToken() + RandomToken();
  {
    absl::MutexLock lock(&mu_);
    Clock::time_point now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      it = it->second.expires < now ? sessions_.erase(it) : std::next(it);
    }
    while (sessions_.size() >= kMaxSessions) {
      auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
        return a.second.expires < b.second.expires;
      });
      sessions_.erase(oldest);
    }
    sessions_[id] = Session{*who, RandomToken(), now + std::chrono::hours(kSessionHours)};
  }
  http::Response r = Redirect("/");
  r.headers.push_back({"Set-Cookie", absl::StrCat(kSessionCookie, "=", id,
                                                  "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                                                  kSessionHours * 3600)});
  return r;
}

http::Response Dashboard::Logout(const http::Request& request) {
  std::optional<Session> session = Authenticate(request);
  if (!session) return Redirect("/login");
  if (!SameOriginWithCsrf(request, *session)) {
    return http::Response(403, kText, "logout refused: no CSRF token of this session\n");
  }
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(request.Cookie(kSessionCookie));
  }
  http::Response r = Redirect(auth_ ? "/login" : "/");
  r.headers.push_back({"Set-Cookie", absl::StrCat(kSessionCookie,
                                                  "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")});
  return r;
}

http::Response Dashboard::Api(const http::Request& request, const Session& session) {
  const std::string name = request.path.substr(5);
  if (name == "cancel") {
    if (request.method != "POST") return JsonError(405, "cancel with POST");
    return Cancel(request, session);
  }
  if (request.method == "POST") return JsonError(405, "only /api/cancel takes POST");
  if (name == "session") {
    return JsonResponse(200, json{{"name", session.who.name},
                                  {"role", RoleName(session.who.role)},
                                  {"csrf", session.csrf},
                                  {"auth", auth_ != nullptr}});
  }
  if (name == "jobs") return Jobs(request);
  if (name == "job") return Job(request);
  if (name == "agents") return Agents();
  if (name == "log") return Log(request);
  if (name == "log.jsonl") return LogDownload(request);
  if (name == "record") return Record(request);
  return JsonError(404, "no such endpoint: " + request.path);
}

http::Response Dashboard::Jobs(const http::Request& request) {
  std::optional<int64_t> offset = IntParam(request, "offset", 0, int64_t{1} << 40);
  std::optional<int64_t> limit = IntParam(request, "limit", 100, 1000);
  if (!offset || !limit || *limit == 0) return JsonError(400, "offset >= 0 and limit 1..1000");
  // This run's jobs (live progress) and the db's older ones, newest first.
  std::vector<v1::JobStatus> live = jobs_->List();
  std::set<std::string> seen;
  json rows = json::array();
  for (auto it = live.rbegin(); it != live.rend(); ++it) {
    seen.insert(it->job_id());
    json j = JobStatusJson(*it);
    j["owner"] = it->spec().owner();
    j["priority"] = it->spec().priority();
    rows.push_back(std::move(j));
  }
  absl::StatusOr<std::vector<JobRow>> stored = db_->ListJobs();
  if (!stored.ok()) return JsonError(500, std::string(stored.status().message()));
  std::sort(stored->begin(), stored->end(),
            [](const JobRow& a, const JobRow& b) { return a.created_unix_us > b.created_unix_us; });
  for (const JobRow& row : *stored) {
    if (seen.count(row.id)) continue;
    // The stored spec is the JobSpec's JSON form; only two fields are shown here.
    json spec = json::parse(row.spec_json, nullptr, false);
    auto field = [&](const char* name, json fallback) {
      return spec.is_object() && spec.contains(name) ? spec[name] : fallback;
    };
    rows.push_back({{"job_id", row.id},
                    {"state", row.state},
                    {"message", row.message},
                    {"owner", row.owner},
                    {"task", field("task", "")},
                    {"trials", field("trials", 0)},
                    {"stored_only", true}});
  }
  json page = json::array();
  for (int64_t i = *offset; i < static_cast<int64_t>(rows.size()) && i < *offset + *limit; ++i) {
    page.push_back(std::move(rows[static_cast<size_t>(i)]));
  }
  return JsonResponse(200, json{{"jobs", page}, {"total", rows.size()}, {"offset", *offset}});
}

http::Response Dashboard::Job(const http::Request& request) {
  std::string id = request.Param("id");
  if (id.empty()) return JsonError(400, "which job? /api/job?id=JOB");
  json out;
  absl::StatusOr<v1::JobStatus> live = jobs_->Get(id);
  // The stored row: the job itself when this server run does not know it, and its
  // creation time either way.
  absl::StatusOr<JobRow> stored = db_->GetJob(id);
  v1::JobSpec spec;
  if (live.ok()) {
    out["job"] = JobStatusJson(*live);
    out["job"]["owner"] = live->spec().owner();
    spec = live->spec();
  } else {
    if (!stored.ok()) return JsonError(absl::IsNotFound(stored.status()) ? 404 : 500, "no job " + id);
    (void)google::protobuf::util::JsonStringToMessage(stored->spec_json, &spec);
    out["job"] = {{"job_id", stored->id}, {"state", stored->state}, {"message", stored->message},
                  {"owner", stored->owner}, {"task", spec.task()}, {"trials", spec.trials()},
                  {"stored_only", true}};
  }
  out["tasks"] = TasksOf(spec);
  std::map<std::string, int> index;
  std::vector<std::string> workloads;
  for (size_t i = 0; i < out["tasks"].size(); ++i) {
    workloads.push_back(out["tasks"][i]["workload_key"].get<std::string>());
    index[workloads.back()] = static_cast<int>(i);
  }
  // From a day before the job was stored: records carry their agents' clocks.
  JobRecordsQuery query;
  query.job_id = id;
  query.workload_keys = workloads;
  query.since_unix_us = stored.ok() ? stored->created_unix_us - int64_t{86400} * 1000000 : 0;
  std::optional<int64_t> after = IntParam(request, "after", 0, int64_t{1} << 62);
  if (!after) return JsonError(400, "after must be a record id (>= 0)");
  query.after_record_id = *after;
  query.limit = kMaxJobPoints;
  absl::StatusOr<std::vector<JobRecordPoint>> points = db_->JobRecords(query);
  if (!points.ok()) return JsonError(500, std::string(points.status().message()));
  // The job's records after `after`, in measurement order: [start (unix seconds), task
  // index, median cost or null, error kind]; the page keeps them and asks for the ones
  // after the last id it has. Up to 20,000 a call, written straight into the text (a
  // json value per point costs more than the query).
  std::string rows = "[";
  json errors = json::array();
  for (const JobRecordPoint& p : *points) {
    auto it = index.find(p.workload_key);
    const int task = it == index.end() ? -1 : it->second;
    absl::StrAppend(&rows, rows.size() > 1 ? "," : "", "[",
                    absl::StrFormat("%.6f", static_cast<double>(p.start_unix_us) / 1e6), ",", task, ",",
                    std::isfinite(p.median_cost) ? absl::StrFormat("%.9g", p.median_cost) : "null",
                    ",\"", MeasureErrorKindName(p.error), "\"]");
    if (p.error != MeasureErrorKind::kNone) {
      errors.push_back({{"record_id", p.record_id}, {"error", MeasureErrorKindName(p.error)}, {"task", task}});
    }
  }
  rows += "]";
  out["errors"] = errors;  // the failed records among these points
  out["last_record_id"] = points->empty() ? *after : points->back().record_id;
  out["more"] = static_cast<int>(points->size()) >= kMaxJobPoints;  // ask again at once
  http::Response r = JsonResponse(200, out);  // an object with keys: "{...}"
  r.body = "{\"points\":" + rows + "," + r.body.substr(1);
  return r;
}

http::Response Dashboard::Agents() {
  json rows = json::array();
  int64_t now = NowUnixMs();
  for (const AgentInfo& a : agents_->Agents()) rows.push_back(AgentJson(a, now));
  AgentRegistry::Counters c = agents_->Stats();
  return JsonResponse(200, json{{"agents", rows}, {"queued", c.queued}, {"leased", c.leased}});
}

http::Response Dashboard::Log(const http::Request& request) {
  BestPageQuery q;
  q.op = request.Param("op");
  q.target_key = request.Param("target");
  std::optional<int64_t> offset = IntParam(request, "offset", 0, int64_t{1} << 40);
  std::optional<int64_t> limit = IntParam(request, "limit", 50, BestPageQuery::kMaxLimit - 1);
  if (!offset || !limit || *limit == 0) {
    return JsonError(400, absl::StrCat("offset >= 0 and limit 1..", BestPageQuery::kMaxLimit - 1));
  }
  q.offset = *offset;
  q.limit = static_cast<int>(*limit) + 1;  // one more: is there a next page?
  absl::StatusOr<std::vector<BestEntry>> page = db_->BestPage(q);
  if (!page.ok()) return JsonError(500, std::string(page.status().message()));
  bool more = static_cast<int64_t>(page->size()) > *limit;
  if (more) page->pop_back();
  json rows = json::array();
  for (const BestEntry& e : *page) {
    rows.push_back({{"workload_key", e.workload.key},
                    {"op", e.workload.op},
                    {"task", e.workload.task_text},
                    {"target_key", e.target.key},
                    {"device_key", e.target.device_key},
                    {"seconds", e.best.median_cost},
                    {"gflops", Gflops(e.workload.flops, e.best.median_cost)},
                    {"measurements", e.best.measurements},
                    {"template", e.best.template_name},
                    {"record_id", e.best.record.id},
                    {"start_unix_us", e.best.record.result.start_unix_us}});
  }
  return JsonResponse(200, json{{"rows", rows}, {"offset", *offset}, {"more", more}});
}

http::Response Dashboard::LogDownload(const http::Request& request) {
  // The best record of every (workload, target) the filter selects, as tuning-log lines
  // (`tuneforge db import` reads them back).
  BestPageQuery q;
  q.op = request.Param("op");
  q.target_key = request.Param("target");
  q.limit = BestPageQuery::kMaxLimit;
  std::string body = LogHeaderLine() + "\n";
  for (q.offset = 0; q.offset < kMaxDownloadPairs; q.offset += q.limit) {
    absl::StatusOr<std::vector<BestEntry>> page = db_->BestPage(q);
    if (!page.ok()) return JsonError(500, std::string(page.status().message()));
    for (const BestEntry& e : *page) body += RecordToLogLine(e.best.record) + "\n";
    if (static_cast<int>(page->size()) < q.limit) break;
  }
  http::Response r(200, "application/x-ndjson; charset=utf-8", std::move(body));
  r.headers.push_back({"Content-Disposition", "attachment; filename=\"tuneforge-best.jsonl\""});
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

http::Response Dashboard::Record(const http::Request& request) {
  std::optional<int64_t> id = IntParam(request, "id", -1, int64_t{1} << 62);
  if (!id || *id < 0) return JsonError(400, "which record? /api/record?id=N");
  absl::StatusOr<TuningRecord> r = db_->RecordById(*id);
  if (!r.ok()) {
    return JsonError(absl::IsNotFound(r.status()) ? 404 : 500, std::string(r.status().message()));
  }
  return JsonResponse(200, RecordJson(*r));
}

http::Response Dashboard::Cancel(const http::Request& request, const Session& session) {
  if (!SameOriginWithCsrf(request, session)) {
    return JsonError(403, "refused: a cancel needs this session's CSRF token, from this server's pages");
  }
  if (session.who.role == Role::kViewer) return JsonError(403, "a viewer may only look");
  std::string id = request.Param("id");
  if (id.empty()) id = http::ParseForm(request.body)["id"];
  if (id.empty()) return JsonError(400, "which job? POST /api/cancel?id=JOB");
  absl::StatusOr<v1::JobStatus> job = jobs_->Get(id);
  if (!job.ok()) return JsonError(404, "no running job " + id + " on this server");
  if (session.who.role != Role::kAdmin && job->spec().owner() != session.who.name) {
    return JsonError(403, "only the job's owner or an admin may cancel it");
  }
  absl::StatusOr<v1::JobStatus> s = jobs_->Cancel(id);
  if (!s.ok()) return JsonError(409, std::string(s.status().message()));
  return JsonResponse(200, JobStatusJson(*s));
}

}  // namespace tuneforge
