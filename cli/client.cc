// TuningClient (job submit/watch/cancel over gRPC) and the embedded default farm.
#include "cli/client.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <climits>
#include <filesystem>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/support/files.h"
#include "compiler/support/rpc_credentials.h"
#include "compiler/support/status.h"
#include "server/auth.h"
#include "tuneforge/v1/farm.grpc.pb.h"

namespace tuneforge::cli {

namespace {
bool g_insecure = false;
}  // namespace

void SetInsecure(bool insecure) { g_insecure = insecure; }
bool Insecure() { return g_insecure; }

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const std::string& address,
                                                              const std::string& tls_ca) {
  RETURN_IF_ERROR(CheckAddress(address));
  RETURN_IF_ERROR(CheckTransport(address, tls_ca, Insecure()));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials, ClientCredentials(tls_ca));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    return absl::UnavailableError("cannot reach tuneforge server at " + address);
  }
  return channel;
}

absl::StatusOr<std::string> TokenFromFlag(const std::string& token_file) {
  if (token_file.empty()) return std::string();
  return ReadSecretFile(token_file);
}

absl::StatusOr<std::unique_ptr<TuningClient>> TuningClient::Connect(const std::string& address,
                                                                   const std::string& token,
                                                                   const std::string& tls_ca) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ConnectChannel(address, tls_ca));
  auto client = std::make_unique<TuningClient>();
  client->token_ = token;
  client->address_ = address;
  client->stub_ = v1::TuningService::NewStub(channel);
  return client;
}

absl::StatusOr<std::string> TuningClient::Submit(const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::Status st = stub_->SubmitJob(&ctx, req, &resp);
  if (!st.ok()) return absl::InvalidArgumentError(st.error_message());
  return resp.job_id();
}

namespace {

bool Finished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

// Errors that a server coming back can cure; the others (unknown job, refused token,
// bad request) end the watch at once.
bool Retryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:  // server shut down under the stream
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:   // connection reset mid-stream
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<v1::JobStatus> TuningClient::Wait(
    const std::string& job_id, const std::function<void(const v1::JobStatus&)>& on_status) {
  v1::JobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus last;
  bool lost = false;
  absl::Time lost_at;
  absl::Duration backoff = absl::Milliseconds(250);
  for (;;) {
    grpc::ClientContext ctx;
    AddToken(&ctx, token_);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobStatus status;
    while (reader->Read(&status)) {
      if (lost) {
        std::fprintf(stderr, "tuneforge: re-attached to job %s at %s\n", job_id.c_str(),
                     address_.c_str());
        lost = false;
        backoff = absl::Milliseconds(250);
      }
      last = status;
      if (on_status) on_status(status);
    }
    grpc::Status st = reader->Finish();
    if (st.ok() && Finished(last.state())) return last;
    if (!st.ok() && !Retryable(st.error_code())) {
      return absl::FailedPreconditionError("watching job " + job_id + " at " + address_ + ": " +
                                           st.error_message());
    }
    // The stream ended before the job did: the server is gone (or going).
    const std::string reason = st.ok() ? "stream ended" : st.error_message();
    if (!lost) {
      lost = true;
      lost_at = absl::Now();
      std::fprintf(stderr,
                   "tuneforge: lost the server at %s while watching job %s (%s); re-attaching "
                   "for up to %s\n",
                   address_.c_str(), job_id.c_str(), reason.c_str(),
                   absl::FormatDuration(reconnect_timeout_).c_str());
    }
    if (absl::Now() - lost_at >= reconnect_timeout_) {
      return absl::UnavailableError("lost the server at " + address_ + " while watching job " +
                                    job_id + " and it did not come back within " +
                                    absl::FormatDuration(reconnect_timeout_) + ": " + reason);
    }
    absl::SleepFor(std::min(backoff, reconnect_timeout_ - (absl::Now() - lost_at)));
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

absl::Status TuningClient::Cancel(const std::string& job_id) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  v1::JobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus ignored;
  grpc::Status st = stub_->CancelJob(&ctx, req, &ignored);
  return st.ok() ? absl::OkStatus() : absl::UnavailableError(st.error_message());
}

absl::StatusOr<v1::ModelUploaded> TuningClient::UploadModel(const std::string& path,
                                                            const std::vector<std::string>& dims,
                                                            const std::vector<std::string>& shapes) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  // Weights kept as external data go inside the upload (the server keeps one file): the
  // model as read, with them inlined. A model that does not read is sent as it is, for
  // the server's importer to say what it refuses.
  if (absl::StatusOr<frontend::OnnxModel> read = frontend::ParseOnnxModel(bytes, path);
      read.ok() && read->had_external_data) {
    bytes = read->proto.SerializeAsString();
  }
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  v1::ModelUploaded uploaded;
  std::unique_ptr<grpc::ClientWriter<v1::ModelChunk>> writer = stub_->UploadModel(&ctx, &uploaded);
  constexpr size_t kChunk = 1 << 20;
  for (size_t at = 0; at < bytes.size() || at == 0; at += kChunk) {
    v1::ModelChunk chunk;
    if (at == 0) {
      chunk.set_name(std::filesystem::path(path).filename().string());
      for (const std::string& d : dims) chunk.add_dims(d);
      for (const std::string& s : shapes) chunk.add_shapes(s);
    }
    chunk.set_data(bytes.substr(at, kChunk));
    if (!writer->Write(chunk)) break;  // the server ended the call; Finish says why
    if (bytes.empty()) break;
  }
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        "uploading " + path + " to " + address_ + ": " + st.error_message());
  }
  return uploaded;
}

absl::StatusOr<v1::JobStatus> TuningClient::Get(const std::string& job_id) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::JobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus status;
  grpc::Status st = stub_->GetJob(&ctx, req, &status);
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError("no job " + job_id + " on the server at " + address_);
  }
  if (!st.ok()) return absl::UnavailableError("job " + job_id + " at " + address_ + ": " + st.error_message());
  return status;
}

absl::StatusOr<v1::FarmStatus> FetchFarmStatus(const std::string& address, const std::string& token,
                                               const std::string& tls_ca, const std::string& what) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ConnectChannel(address, tls_ca));
  auto stub = v1::FarmService::NewStub(channel);
  grpc::ClientContext ctx;
  AddToken(&ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::FarmStatus status;
  grpc::Status st = stub->Status(&ctx, v1::FarmStatusRequest(), &status);
  if (!st.ok()) return absl::UnavailableError(what + " failed: " + st.error_message());
  return status;
}

std::string AgentBinaryPath() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "tuneforge-agent";
  std::string self(buf, n);
  return self.substr(0, self.rfind('/') + 1) + "tuneforge-agent";
}

absl::StatusOr<std::unique_ptr<AgentProcess>> AgentProcess::Spawn(
    const std::string& server, const std::string& device_key, bool verbose,
    const std::vector<std::string>& extra_args) {
  std::string path = AgentBinaryPath();
  if (access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError("agent binary not found at " + path);
  }
  std::vector<std::string> argv = {path, "--server", server, "--device-key", device_key,
                                   verbose ? "--verbose" : "--quiet"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the CLI
    execv(path.c_str(), args.data());
    _exit(127);
  }
  auto p = std::make_unique<AgentProcess>();
  p->pid_ = pid;
  return p;
}

AgentProcess::~AgentProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

bool AgentProcess::Exited() {
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
  return pid_ <= 0;
}

absl::StatusOr<NamedTarget> FindNamedTarget(const std::string& name) {
  static const std::vector<NamedTarget>* targets = new std::vector<NamedTarget>{
      {"aarch64", "-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon -threads=1",
       "aarch64-unknown-linux-gnu", {"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"}, "asimd"},
      {"riscv64", "-mtriple=riscv64-unknown-linux-gnu -mcpu=generic-rv64 -mattr=+m,+a,+f,+d,+c,+v -threads=1",
       "riscv64-unknown-linux-gnu",
       {"qemu-riscv64", "-L", "/usr/riscv64-linux-gnu", "-cpu", "rv64,v=true,vlen=128,vext_spec=v1.0"}, ""},
      // AVX2 only, on this machine's own agent (which has AVX-512 too).
      {"x86-64-v3", "-mcpu=x86-64-v3 -mattr=+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+movbe", "", {}, ""},
  };
  std::vector<std::string> names;
  for (const NamedTarget& t : *targets) {
    if (t.name == name) return t;
    names.push_back(t.name);
  }
  return absl::NotFoundError("unknown target '" + name + "' (known: " + absl::StrJoin(names, ", ") +
                             ", or target options such as \"-mcpu=znver4 -threads=2\")");
}

bool IsTargetName(const std::string& text) { return !text.empty() && text[0] != '-' && text.rfind("llvm", 0) != 0; }

absl::StatusOr<std::vector<std::string>> DeviceAgentArgs(const NamedTarget& t) {
  if (t.triple.empty()) return std::vector<std::string>();
  const std::string agent = AgentBinaryPath();
  const std::string runner = agent.substr(0, agent.rfind('/') + 1) + "tuneforge-runner-" + t.name;
  if (access(runner.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError("the device runner for " + t.name + " is not at " + runner +
                                         " (built with the cross compilers scripts/install-deps installs)");
  }
  std::vector<std::string> args = {"--runner", runner, "--launcher", absl::StrJoin(t.launcher, " "),
                                   "--device-triple", t.triple};
  if (!t.cpu_flags.empty()) args.insert(args.end(), {"--device-flags", t.cpu_flags});
  return args;
}

absl::StatusOr<std::unique_ptr<EmbeddedFarm>> EmbeddedFarm::Start(
    const std::string& db_path, const std::vector<std::string>& device_keys, bool verbose,
    const std::vector<std::string>& agent_args) {
  auto farm = std::make_unique<EmbeddedFarm>();
  // One-time tokens for this run, in a private (0700) directory removed at the end.
  ASSIGN_OR_RETURN(TempDir secrets, TempDir::Create("tuneforge-embedded"));
  farm->secrets_ = std::make_unique<TempDir>(std::move(secrets));
  farm->user_token_ = RandomToken();
  const std::string agent_token = RandomToken();
  RETURN_IF_ERROR(WriteSecretFile(farm->secrets_->File("tokens"),
                                  "admin local-user " + farm->user_token_ + "\nagent local-agent " +
                                      agent_token + "\n"));
  RETURN_IF_ERROR(WriteSecretFile(farm->secrets_->File("agent.token"), agent_token + "\n"));
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = db_path;
  options.tokens_path = farm->secrets_->File("tokens");
  ASSIGN_OR_RETURN(farm->server_, Server::Start(options));
  farm->address_ = "127.0.0.1:" + std::to_string(farm->server_->port());
  for (const std::string& key : device_keys) {
    std::vector<std::string> args = {"--token-file", farm->secrets_->File("agent.token")};
    args.insert(args.end(), agent_args.begin(), agent_args.end());
    ASSIGN_OR_RETURN(std::unique_ptr<AgentProcess> agent, AgentProcess::Spawn(farm->address_, key, verbose, args));
    farm->agents_.push_back(std::move(agent));
  }
  return farm;
}

EmbeddedFarm::~EmbeddedFarm() {
  agents_.clear();
  if (server_) server_->Shutdown();
}

}  // namespace tuneforge::cli
