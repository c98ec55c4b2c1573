// Dashboard: the farm in a browser, served on the server's HTTP listener (the port of
// /metrics). Pages: jobs (the root), one job, agents, the tuning log; their data come
// from JSON endpoints under /api/ that the pages poll every second. The HTML, script,
// style sheet and Chart.js (Debian's libjs-chart.js) are embedded in the binary.
//
// Auth: with a tokens file, a browser logs in with its token (POST /login) and gets a
// session cookie (HttpOnly, SameSite=Strict); every page and endpoint needs it. Roles
// as in the gRPC API: viewers, users and admins may look; cancelling a job needs its
// owner's or an admin's session; agent tokens are refused. The one state-changing
// action (and logout) needs the session's CSRF token in a header or form field and,
// when the browser sends one, an Origin of this server. Without a tokens file the
// dashboard is open (an anonymous admin), as the gRPC API is, and the CSRF check stays.
// Every string from users or agents reaches the page as JSON and is shown as text.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "db/database.h"
#include "server/agent_registry.h"
#include "server/auth.h"
#include "server/http/http_server.h"
#include "server/job_manager.h"

namespace tuneforge {

class Dashboard {
 public:
  static constexpr const char* kSessionCookie = "tf_session";
  static constexpr const char* kCsrfHeader = "x-csrf-token";
  static constexpr int kSessionHours = 12;
  static constexpr size_t kMaxSessions = 10000;  // the oldest go first beyond it
  static constexpr int kMaxJobPoints = 20000;    // points of a job page per call
  static constexpr int kMaxDownloadPairs = 100000;

  // None owned; `auth` null = open. They must outlive the Dashboard.
  Dashboard(JobManager* jobs, const AgentRegistry* agents, Database* db, const TokenAuth* auth);

  // The answer for a dashboard path, nullopt for any other (/metrics, /healthz).
  std::optional<http::Response> Handle(const http::Request& request);

 private:
  struct Session {
    Principal who;
    std::string csrf;
    std::chrono::steady_clock::time_point expires;
  };

  // The caller's session, or the open dashboard's anonymous admin; nullopt when a
  // login is needed.
  std::optional<Session> Authenticate(const http::Request& request);
  // Origin (or Referer) of this server when the browser sent one, and the CSRF token.
  bool SameOriginWithCsrf(const http::Request& request, const Session& session) const;

  http::Response Login(const http::Request& request);
  http::Response Logout(const http::Request& request);
  http::Response Api(const http::Request& request, const Session& session);
  http::Response Jobs(const http::Request& request);
  http::Response Job(const http::Request& request);
  http::Response Agents();
  http::Response Log(const http::Request& request);
  http::Response LogDownload(const http::Request& request);
  http::Response Record(const http::Request& request);
  http::Response Cancel(const http::Request& request, const Session& session);

  JobManager* jobs_;
  const AgentRegistry* agents_;
  Database* db_;
  const TokenAuth* auth_;
  const std::string open_csrf_;  // the open dashboard's CSRF token (per server run)
  absl::Mutex mu_;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tuneforge
