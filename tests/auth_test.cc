// Token authentication on a real server on loopback (in process, real gRPC): every
// service refuses a missing or unknown token with UNAUTHENTICATED and a token of the
// wrong role with PERMISSION_DENIED; a user cannot see or cancel another user's job
// (NOT_FOUND, so job ids of others are not revealed); an admin can.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <string>
#include <vector>
#include <fstream>
#include <thread>

#include "compiler/support/rpc_credentials.h"
#include "compiler/target/target.h"
#include "server/auth.h"
#include "tests/process_util.h"
#include "server/server.h"
#include "tuneforge/v1/agent.grpc.pb.h"
#include "tuneforge/v1/database.grpc.pb.h"
#include "tuneforge/v1/farm.grpc.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {
namespace {

const std::string kAgent = "agent-token-0123456789";
const std::string kAlice = "alice-token-0123456789";
const std::string kBob = "bob-token-0123456789abc";
const std::string kAdmin = "admin-token-0123456789";
const std::string kAgent2 = "second-agent-token-0123";
const std::string kViewer = "viewer-token-0123456789";

// A server on a free loopback port with `dir`'s tokens file and the db `db` there.
ServerOptions TokenServerOptions(const std::string& dir, const std::string& db) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/" + db;
  o.tokens_path = dir + "/tokens";
  o.builder_threads = 1;
  return o;
}

// Waits until `farm` (asked with the admin's token) lists `agent_id` as connected.
bool WaitForAgentConnected(v1::FarmService::Stub& farm, const std::string& agent_id) {
  return testing::WaitFor(
      [&] {
        grpc::ClientContext ctx;
        AddToken(&ctx, kAdmin);
        ctx.set_deadline(std::chrono::system_clock::now() + testing::Scaled(std::chrono::seconds(20)));
        v1::FarmStatus status;
        grpc::Status st = farm.Status(&ctx, v1::FarmStatusRequest(), &status);
        EXPECT_TRUE(st.ok()) << st.error_message();
        for (const v1::AgentStatus& a : status.agents())
          if (a.agent_id() == agent_id && a.state() != "lost") return true;
        return false;
      },
      std::chrono::seconds(10));
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_auth_" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    testing::WriteSecret(dir_ + "/tokens", "agent farm " + kAgent + "\nagent farm2 " + kAgent2 +
                                               "\nuser alice " + kAlice + "\nuser bob " + kBob +
                                               "\nadmin ops " + kAdmin + "\nviewer wall " + kViewer + "\n");
    auto server = Server::Start(TokenServerOptions(dir_, "auth.db"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    tuning_ = v1::TuningService::NewStub(channel);
    agents_ = v1::AgentService::NewStub(channel);
    farm_ = v1::FarmService::NewStub(channel);
    db_ = v1::DatabaseService::NewStub(channel);
  }
  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  // A context with `token` (none when empty) and a deadline.
  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    AddToken(ctx.get(), token);
    ctx->set_deadline(std::chrono::system_clock::now() + testing::Scaled(std::chrono::seconds(20)));
    return ctx;
  }
  grpc::StatusCode Submit(const std::string& token, std::string* job_id = nullptr) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_task("matmul M=8 N=8 K=8");
    req.mutable_spec()->set_trials(2);
    req.mutable_spec()->set_device_key("no-agent-has-this-key");  // the job waits
    v1::SubmitJobResponse resp;
    grpc::StatusCode code = tuning_->SubmitJob(Ctx(token).get(), req, &resp).error_code();
    if (job_id) *job_id = resp.job_id();
    return code;
  }
  grpc::StatusCode Cancel(const std::string& token, const std::string& job_id) {
    v1::JobRequest req;
    req.set_job_id(job_id);
    v1::JobStatus resp;
    return tuning_->CancelJob(Ctx(token).get(), req, &resp).error_code();
  }
  grpc::StatusCode Get(const std::string& token, const std::string& job_id) {
    v1::JobRequest req;
    req.set_job_id(job_id);
    v1::JobStatus resp;
    return tuning_->GetJob(Ctx(token).get(), req, &resp).error_code();
  }
  grpc::StatusCode Register(const std::string& token) {
    v1::RegisterRequest req;
    req.set_device_key("k");
    v1::RegisterResponse resp;
    return agents_->Register(Ctx(token).get(), req, &resp).error_code();
  }
  grpc::StatusCode Farm(const std::string& token) {
    v1::FarmStatus resp;
    return farm_->Status(Ctx(token).get(), v1::FarmStatusRequest(), &resp).error_code();
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TuningService::Stub> tuning_;
  std::unique_ptr<v1::AgentService::Stub> agents_;
  std::unique_ptr<v1::FarmService::Stub> farm_;
  std::unique_ptr<v1::DatabaseService::Stub> db_;
};

// Secrets readable by others are refused as ssh refuses such keys, and a refused start
// leaves no db file behind.
TEST(ServerSecretsTest, GroupOrWorldReadableSecretsRefuseTheStartAndLeaveNoDb) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tf_secrets_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokens") << "admin ops " << kAdmin << "\n";
  std::filesystem::permissions(dir + "/tokens", std::filesystem::perms::owner_read |
                                                    std::filesystem::perms::owner_write |
                                                    std::filesystem::perms::group_read |
                                                    std::filesystem::perms::others_read);
  const ServerOptions o = TokenServerOptions(dir, "new.db");
  auto refused = Server::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("mode 0644"), std::string::npos)
      << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("chmod 600"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.db_path));
  // A tokens file with a bad line: no db either.
  testing::WriteSecret(dir + "/tokens", "admin ops short\n");
  EXPECT_FALSE(Server::Start(o).ok());
  EXPECT_FALSE(std::filesystem::exists(o.db_path));
  std::filesystem::remove_all(dir);
}

// Loopback is an address (or the name localhost), never a name that merely starts
// like one.
TEST(LoopbackTest, OnlyLoopbackAddressesAreLoopback) {
  for (const char* a : {"127.0.0.1:7070", "127.1.2.3:1", "localhost:7070", "[::1]:7070",
                        "[::ffff:127.0.0.1]:80"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"127.0.0.1.nip.io:7070", "127.example.com:1", "0.0.0.0:7070",
                        "10.0.0.1:7070", "[::]:7070", "ip6-localhost:1", "localhost.evil:1",
                        "[::1:7070", "128.0.0.1:1", "[::ffff:10.0.0.1]:80"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
  EXPECT_FALSE(CheckTransport("127.0.0.1.nip.io:7070", "", false).ok());
  EXPECT_TRUE(CheckTransport("127.0.0.1:7070", "", false).ok());
}

TEST_F(AuthTest, MissingOrUnknownTokenIsUnauthenticatedOnEveryService) {
  for (const std::string& token : {std::string(), std::string("not-a-token-at-all-xyz")}) {
    EXPECT_EQ(Submit(token), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Get(token, "job-1"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Cancel(token, "job-1"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Register(token), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Farm(token), grpc::StatusCode::UNAUTHENTICATED);
    v1::StatsResponse stats;
    EXPECT_EQ(db_->Stats(Ctx(token).get(), v1::StatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // The agent stream too: refused before the hello is read.
  auto ctx = Ctx("");
  auto stream = agents_->Connect(ctx.get());
  v1::AgentMessage hello;
  hello.set_hello_agent_id("agent-1");
  stream->Write(hello);
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// Agent identity: a stream must present its registration's session token, from the
// principal that registered, once. Knowing an agent's id (farm status, logs, records)
// is not enough to take its work and reputation.
TEST_F(AuthTest, AgentStreamsCannotBeHijacked) {
  v1::RegisterRequest req;
  req.set_device_key("k");
  v1::RegisterResponse reg, other;
  ASSERT_TRUE(agents_->Register(Ctx(kAgent).get(), req, &reg).ok());
  ASSERT_TRUE(agents_->Register(Ctx(kAgent).get(), req, &other).ok());
  EXPECT_EQ(reg.session_token().size(), 32u);
  EXPECT_NE(reg.session_token(), other.session_token());
  // Opens a stream as `token` claiming `id` with `session`; returns its status once the
  // server ends it, or OK if it is still open after the hello (then cancels it).
  auto hello = [](const std::string& id, const std::string& session) {
    v1::AgentMessage m;
    m.set_hello_agent_id(id);
    m.set_hello_session_token(session);
    return m;
  };
  auto attempt = [&](const std::string& token, const std::string& id, const std::string& session) {
    auto ctx = Ctx(token);
    auto stream = agents_->Connect(ctx.get());
    stream->Write(hello(id, session));
    stream->WritesDone();
    return stream->Finish().error_code();
  };
  EXPECT_EQ(attempt(kAgent, reg.agent_id(), "0123456789abcdef0123456789abcdef"),
            grpc::StatusCode::PERMISSION_DENIED);                           // guessed session
  EXPECT_EQ(attempt(kAgent, reg.agent_id(), other.session_token()),
            grpc::StatusCode::PERMISSION_DENIED);                           // another one's
  EXPECT_EQ(attempt(kAgent2, reg.agent_id(), reg.session_token()),
            grpc::StatusCode::PERMISSION_DENIED);                           // other principal
  EXPECT_EQ(attempt(kAgent, "agent-999", reg.session_token()), grpc::StatusCode::NOT_FOUND);
  // The legitimate stream, left open.
  auto first_ctx = Ctx(kAgent);
  auto first = agents_->Connect(first_ctx.get());
  ASSERT_TRUE(first->Write(hello(reg.agent_id(), reg.session_token())));
  // Wait until the server has the legitimate stream.
  const bool connected = WaitForAgentConnected(*farm_, reg.agent_id());
  ASSERT_TRUE(connected);
  EXPECT_EQ(attempt(kAgent, reg.agent_id(), reg.session_token()),
            grpc::StatusCode::ALREADY_EXISTS);  // a second stream for a connected id
  first_ctx->TryCancel();
  first->Finish();
}

TEST_F(AuthTest, WrongRoleIsPermissionDenied) {
  EXPECT_EQ(Submit(kAgent), grpc::StatusCode::PERMISSION_DENIED);  // agent token as a user
  EXPECT_EQ(Farm(kAgent), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register(kAlice), grpc::StatusCode::PERMISSION_DENIED);  // user as an agent
  EXPECT_EQ(Register(kAgent), grpc::StatusCode::OK);
}

// The peak-speed bound on results scales with an agent's cores: a claim of more cores
// than any machine has is refused at registration (it let 1e-15 s results through).
TEST_F(AuthTest, AnAgentCannotClaimUnboundedCores) {
  for (int cores : {-1, 1025, 2147483647}) {
    v1::RegisterRequest req;
    req.set_device_key("k");
    req.mutable_capabilities()->set_cores(cores);
    v1::RegisterResponse resp;
    grpc::Status st = agents_->Register(Ctx(kAgent).get(), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << cores;
    EXPECT_NE(st.error_message().find("cores must be 0..1024"), std::string::npos) << st.error_message();
  }
  v1::RegisterRequest req;
  req.set_device_key("k");
  req.mutable_capabilities()->set_cores(1024);
  v1::RegisterResponse resp;
  EXPECT_TRUE(agents_->Register(Ctx(kAgent).get(), req, &resp).ok());
  Target huge;
  huge.num_threads = 2147483647;
  Target most = huge;
  most.num_threads = Target::kMaxThreads;
  EXPECT_EQ(huge.PlausiblePeakGflops(), most.PlausiblePeakGflops());
}

// The auth matrix: every RPC of every service with no token, an unknown token and a
// token of each role. Refused: UNAUTHENTICATED without a valid token,
// PERMISSION_DENIED for a role the RPC is not for; allowed roles get past
// authentication (whatever the empty request then earns: OK, INVALID_ARGUMENT,
// NOT_FOUND). The agent stream's identity cases are AgentStreamsCannotBeHijacked;
// forged results and uploaded fake records are agent_registry_test and
// database_service_test.
TEST_F(AuthTest, EveryRpcRefusesWhatItMust) {
  using Code = grpc::StatusCode;
  using Call = std::function<Code(const std::string&)>;
  // Who may call an RPC besides the admin: agents, users, users and viewers (reads), or
  // nobody else.
  enum Allowed { kAgentRole, kUserRoles, kAdminRole, kReadRoles };
  enum CallerRole { kAgentCaller, kUserCaller, kAdminCaller, kViewerCaller };
  struct Rpc {
    std::string name;
    Allowed allowed;
    Call call;
  };
#define TF_UNARY(stub, Method, Req, Resp)                                   \
  [this](const std::string& t) {                                            \
    Req q;                                                                  \
    Resp r;                                                                 \
    return stub->Method(Ctx(t).get(), q, &r).error_code();                  \
  }
#define TF_READER(stub, Method, Req, Resp)                                  \
  [this](const std::string& t) {                                            \
    auto ctx = Ctx(t);                                                      \
    Req q;                                                                  \
    auto reader = stub->Method(ctx.get(), q);                               \
    Resp r;                                                                 \
    while (reader->Read(&r)) {                                              \
    }                                                                       \
    return reader->Finish().error_code();                                   \
  }
  const std::vector<Rpc> rpcs = {
      {"TuningService.SubmitJob", kUserRoles,
       TF_UNARY(tuning_, SubmitJob, v1::SubmitJobRequest, v1::SubmitJobResponse)},
      {"TuningService.WatchJob", kReadRoles,
       TF_READER(tuning_, WatchJob, v1::JobRequest, v1::JobStatus)},
      {"TuningService.GetJob", kReadRoles, TF_UNARY(tuning_, GetJob, v1::JobRequest, v1::JobStatus)},
      {"TuningService.CancelJob", kUserRoles,
       TF_UNARY(tuning_, CancelJob, v1::JobRequest, v1::JobStatus)},
      {"AgentService.Register", kAgentRole,
       TF_UNARY(agents_, Register, v1::RegisterRequest, v1::RegisterResponse)},
      {"FarmService.Status", kReadRoles,
       TF_UNARY(farm_, Status, v1::FarmStatusRequest, v1::FarmStatus)},
      {"DatabaseService.TopK", kReadRoles, TF_UNARY(db_, TopK, v1::TopKRequest, v1::TopKResponse)},
      {"DatabaseService.TargetsOf", kReadRoles,
       TF_UNARY(db_, TargetsOf, v1::TargetsOfRequest, v1::TargetsOfResponse)},
      {"DatabaseService.Upload", kUserRoles,
       TF_UNARY(db_, Upload, v1::UploadRequest, v1::UploadResponse)},
      {"DatabaseService.Download", kReadRoles,
       TF_READER(db_, Download, v1::DownloadRequest, v1::DownloadChunk)},
      {"DatabaseService.Stats", kReadRoles,
       TF_UNARY(db_, Stats, v1::StatsRequest, v1::StatsResponse)},
      {"DatabaseService.List", kReadRoles, TF_READER(db_, List, v1::ListRequest, v1::ListResponse)},
      {"DatabaseService.History", kReadRoles,
       TF_UNARY(db_, History, v1::HistoryRequest, v1::HistoryResponse)},
      {"DatabaseService.TargetSummaries", kReadRoles,
       TF_UNARY(db_, TargetSummaries, v1::TargetSummariesRequest, v1::TargetSummariesResponse)},
      {"DatabaseService.TemplateVersions", kReadRoles,
       TF_UNARY(db_, TemplateVersions, v1::TemplateVersionsRequest, v1::TemplateVersionsResponse)},
      {"DatabaseService.Compact", kAdminRole,
       TF_UNARY(db_, Compact, v1::CompactRequest, v1::CompactResponse)},
      // The agent stream: refused before its hello is looked at.
      {"AgentService.Connect", kAgentRole,
       [this](const std::string& t) {
         auto ctx = Ctx(t);
         auto stream = agents_->Connect(ctx.get());
         v1::AgentMessage hello;
         hello.set_hello_agent_id("agent-1");
         stream->Write(hello);
         stream->WritesDone();
         v1::ServerMessage m;
         while (stream->Read(&m)) {
         }
         return stream->Finish().error_code();
       }},
  };
#undef TF_UNARY
#undef TF_READER
  struct Caller {
    const char* name;
    std::string token;
    int role;  // -1: not a valid token
  };
  const Caller callers[] = {{"no token", "", -1},
                            {"unknown token", "unknown-token-0123456789", -1},
                            {"agent", kAgent, kAgentCaller},
                            {"user", kAlice, kUserCaller},
                            {"admin", kAdmin, kAdminCaller},
                            {"viewer", kViewer, kViewerCaller}};
  int cases = 0, refused = 0;
  for (const Rpc& rpc : rpcs) {
    for (const Caller& caller : callers) {
      // The admin may call everything; a user what is for users and readers; a viewer
      // what is for readers; an agent the agent service.
      const bool allowed = caller.role == kAdminCaller ||
                           (caller.role == kAgentCaller && rpc.allowed == kAgentRole) ||
                           (caller.role == kUserCaller && (rpc.allowed == kUserRoles || rpc.allowed == kReadRoles)) ||
                           (caller.role == kViewerCaller && rpc.allowed == kReadRoles);
      // An admin's (or anyone's) agent stream without a registration is refused for
      // its session, which AgentStreamsCannotBeHijacked covers.
      if (allowed && rpc.name == "AgentService.Connect") continue;
      const Code code = rpc.call(caller.token);
      ++cases;
      if (caller.role < 0) {
        EXPECT_EQ(code, Code::UNAUTHENTICATED) << rpc.name << " with " << caller.name;
        refused += code == Code::UNAUTHENTICATED;
      } else if (!allowed) {
        EXPECT_EQ(code, Code::PERMISSION_DENIED) << rpc.name << " with " << caller.name;
        refused += code == Code::PERMISSION_DENIED;
      } else {
        EXPECT_NE(code, Code::UNAUTHENTICATED) << rpc.name << " with " << caller.name;
        EXPECT_NE(code, Code::PERMISSION_DENIED) << rpc.name << " with " << caller.name;
      }
    }
  }
  std::printf("auth matrix: %zu RPCs x %zu callers: %d cases, %d refused as they must be\n",
              rpcs.size(), std::size(callers), cases, refused);
}

// A viewer (the dashboard's wall display, a monitoring script) reads every job and the
// log over gRPC as in the browser, and changes nothing.
TEST_F(AuthTest, ViewersReadEveryJobButChangeNothing) {
  std::string job;
  ASSERT_EQ(Submit(kAlice, &job), grpc::StatusCode::OK);
  EXPECT_EQ(Get(kViewer, job), grpc::StatusCode::OK);
  EXPECT_EQ(Cancel(kViewer, job), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Submit(kViewer), grpc::StatusCode::PERMISSION_DENIED);
  v1::FarmStatus farm;
  ASSERT_TRUE(farm_->Status(Ctx(kViewer).get(), v1::FarmStatusRequest(), &farm).ok());
  ASSERT_EQ(farm.jobs_size(), 1);
  EXPECT_EQ(farm.jobs(0).job_id(), job);
  v1::UploadRequest upload;
  upload.set_format_version(1);
  v1::UploadResponse uploaded;
  EXPECT_EQ(db_->Upload(Ctx(kViewer).get(), upload, &uploaded).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::ModelUploaded model;
  auto ctx = Ctx(kViewer);
  auto writer = tuning_->UploadModel(ctx.get(), &model);
  v1::ModelChunk chunk;
  chunk.set_data("x");
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Get(kAlice, job), grpc::StatusCode::OK);  // still alice's, still there
}

TEST_F(AuthTest, UsersSeeAndCancelOnlyTheirOwnJobsAdminsAll) {
  std::string job;
  ASSERT_EQ(Submit(kAlice, &job), grpc::StatusCode::OK);
  EXPECT_EQ(Get(kAlice, job), grpc::StatusCode::OK);
  EXPECT_EQ(Get(kBob, job), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Cancel(kBob, job), grpc::StatusCode::NOT_FOUND);  // bob cannot cancel it
  EXPECT_EQ(Cancel(kAgent, job), grpc::StatusCode::PERMISSION_DENIED);

  // Still alive after bob's attempt; the admin may cancel anyone's job.
  v1::JobRequest req;
  req.set_job_id(job);
  v1::JobStatus status;
  ASSERT_TRUE(tuning_->GetJob(Ctx(kAlice).get(), req, &status).ok());
  EXPECT_NE(status.state(), v1::CANCELLED);
  EXPECT_EQ(Cancel(kAdmin, job), grpc::StatusCode::OK);
  testing::WaitFor(
      [&] {
        EXPECT_TRUE(tuning_->GetJob(Ctx(kAlice).get(), req, &status).ok());
        return status.state() == v1::CANCELLED;
      },
      std::chrono::seconds(10));
  EXPECT_EQ(status.state(), v1::CANCELLED);
}

// Mutual TLS (--tls-client-ca): agents must present a certificate signed by the
// agents' CA, and a registration is bound to it. A stolen agent token and session
// are not enough from another device; users need no certificate.
class MutualTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_mtls_" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    // The agents' CA, devices a and b signed by it, an impostor self-signed as "a",
    // and the server's own certificate.
    Openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", Path("ca.key"), "-out",
             Path("ca.crt"), "-days", "1", "-subj", "/CN=tuneforge-agents-ca"});
    for (const char* device : {"device-a", "device-b"}) {
      const std::string base = Path(device);
      Openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", base + ".key", "-out",
               base + ".csr", "-subj", std::string("/CN=") + device});
      Openssl({"x509", "-req", "-in", base + ".csr", "-CA", Path("ca.crt"), "-CAkey",
               Path("ca.key"), "-CAcreateserial", "-out", base + ".crt", "-days", "1"});
    }
    Openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", Path("impostor.key"),
             "-out", Path("impostor.crt"), "-days", "1", "-subj", "/CN=device-a"});
    Openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", Path("server.key"),
             "-out", Path("server.crt"), "-days", "1", "-subj", "/CN=localhost", "-addext",
             "subjectAltName=IP:127.0.0.1"});
    testing::WriteSecret(Path("tokens"),
                         "agent farm " + kAgent + "\nuser alice " + kAlice + "\nadmin ops " + kAdmin + "\n");
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.db_path = Path("mtls.db");
    o.tokens_path = Path("tokens");
    o.tls_cert_path = Path("server.crt");
    o.tls_key_path = Path("server.key");
    o.tls_client_ca_path = Path("ca.crt");
    o.builder_threads = 1;
    auto server = Server::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Openssl(std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    auto r = testing::RunCommand(args, dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // A channel presenting `device`'s certificate (none when empty).
  std::shared_ptr<grpc::Channel> Channel(const std::string& device) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = testing::ReadFile(Path("server.crt"));
    if (!device.empty()) {
      tls.pem_cert_chain = testing::ReadFile(Path(device + ".crt"));
      tls.pem_private_key = testing::ReadFile(Path(device + ".key"));
    }
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                               grpc::SslCredentials(tls));
  }
  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    AddToken(ctx.get(), token);
    ctx->set_deadline(std::chrono::system_clock::now() + testing::Scaled(std::chrono::seconds(20)));
    return ctx;
  }
  static grpc::Status Register(const std::shared_ptr<grpc::Channel>& channel,
                               v1::RegisterResponse* reg) {
    v1::RegisterRequest req;
    req.set_device_key("k");
    return v1::AgentService::NewStub(channel)->Register(Ctx(kAgent).get(), req, reg);
  }
  // A stream claiming `reg`'s registration; its status once the server ends it.
  static grpc::StatusCode Claim(const std::shared_ptr<grpc::Channel>& channel,
                                const v1::RegisterResponse& reg) {
    auto ctx = Ctx(kAgent);
    auto stream = v1::AgentService::NewStub(channel)->Connect(ctx.get());
    v1::AgentMessage hello;
    hello.set_hello_agent_id(reg.agent_id());
    hello.set_hello_session_token(reg.session_token());
    stream->Write(hello);
    stream->WritesDone();
    return stream->Finish().error_code();
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
};

TEST_F(MutualTlsTest, AgentsAreBoundToTheirCertificates) {
  v1::RegisterResponse reg;
  // No client certificate: the agent token alone is not enough.
  grpc::Status none = Register(Channel(""), &reg);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("client certificate"), std::string::npos)
      << none.error_message();
  // A certificate the agents' CA did not sign: the handshake itself fails.
  EXPECT_EQ(Register(Channel("impostor"), &reg).error_code(), grpc::StatusCode::UNAVAILABLE);
  // Device a registers; device b, with a's token and session, cannot take it over.
  ASSERT_TRUE(Register(Channel("device-a"), &reg).ok());
  EXPECT_EQ(Claim(Channel("device-b"), reg), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Claim(Channel(""), reg), grpc::StatusCode::UNAUTHENTICATED);
  // Device a itself connects.
  auto channel = Channel("device-a");
  auto ctx = Ctx(kAgent);
  auto stream = v1::AgentService::NewStub(channel)->Connect(ctx.get());
  v1::AgentMessage hello;
  hello.set_hello_agent_id(reg.agent_id());
  hello.set_hello_session_token(reg.session_token());
  ASSERT_TRUE(stream->Write(hello));
  auto farm = v1::FarmService::NewStub(Channel(""));  // users need no certificate
  const bool connected = WaitForAgentConnected(*farm, reg.agent_id());
  EXPECT_TRUE(connected);
  ctx->TryCancel();
  stream->Finish();
}

}  // namespace
}  // namespace tuneforge
