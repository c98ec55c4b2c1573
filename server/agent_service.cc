// AgentService's handlers: registration and the agent's lease/result stream.
#include "server/agent_service.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/support/log.h"
#include "compiler/support/thread_name.h"

namespace tuneforge {

grpc::Status AgentServiceImpl::AuthorizeAgent(grpc::ServerContext* ctx,
                                              std::string* identity) const {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kAgent, Role::kAdmin}, &who);
  if (!st.ok()) return st;
  *identity = who.name;
  if (!require_client_certificate_) return grpc::Status::OK;
  // gRPC verified the certificate against the client CA during the handshake; the
  // peer identity is its subjectAltName entries, or its common name without them.
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  std::string certificate;
  if (auth && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& name : auth->GetPeerIdentity()) {
      if (!certificate.empty()) certificate += ",";
      certificate.append(name.data(), name.size());
    }
  }
  if (certificate.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this server requires agents to present a client certificate signed by "
                        "its agents' CA (mutual TLS): give the agent --tls-cert and --tls-key");
  }
  absl::StrAppend(identity, " certificate ", certificate);
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                        v1::RegisterResponse* resp) {
  std::string identity;
  grpc::Status st = AuthorizeAgent(ctx, &identity);
  if (!st.ok()) return st;
  if (req->device_key().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "device_key must not be empty");
  }
  if (req->workers() < 0 || req->workers() > 256) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "workers must be 0..256");
  }
  // The peak-speed bound on results scales with the cores: an agent may not claim
  // more than any machine has.
  if (req->capabilities().cores() < 0 || req->capabilities().cores() > Target::kMaxThreads) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "capabilities.cores must be 0.." + std::to_string(Target::kMaxThreads) +
                            ", got " + std::to_string(req->capabilities().cores()));
  }
  std::string session_token;
  std::string id = registry_->Register(req->device_key(), req->capabilities(),
                                       std::max(1, req->workers()), /*checking=*/health_ != nullptr,
                                       identity, &session_token);
  TF_LOG(Info) << "agent " << id << " registered from " << ctx->peer() << " with device key '"
               << req->device_key() << "' (" << req->capabilities().cpu_model() << ", "
               << req->capabilities().cores() << " cores)";
  resp->set_agent_id(id);
  resp->set_session_token(session_token);
  resp->set_heartbeat_interval_ms(registry_->options().heartbeat_interval_ms);
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::Connect(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream) {
  std::string identity;
  grpc::Status st = AuthorizeAgent(ctx, &identity);
  if (!st.ok()) return st;
  v1::AgentMessage hello;
  if (!stream->Read(&hello) || hello.kind_case() != v1::AgentMessage::kHelloAgentId) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be hello");
  }
  const std::string agent_id = hello.hello_agent_id();
  switch (registry_->ConnectSession(agent_id, hello.hello_session_token(), identity)) {
    case AgentRegistry::SessionCheck::kOk:
      break;
    case AgentRegistry::SessionCheck::kUnknown:
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "unknown agent id " + agent_id + "; register first");
    case AgentRegistry::SessionCheck::kWrongSession:
      TF_LOG(Warning) << "refused a stream for " << agent_id << " from " << ctx->peer()
                      << ": wrong session token";
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "session token does not match the registration of " + agent_id);
    case AgentRegistry::SessionCheck::kWrongPrincipal:
      TF_LOG(Warning) << "refused a stream for " << agent_id << " from " << ctx->peer()
                      << ": registered by another principal";
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          agent_id + " was registered with another token" +
                              (require_client_certificate_ ? " or client certificate" : ""));
    case AgentRegistry::SessionCheck::kAlreadyConnected:
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          agent_id + " is already connected; register to get a new id");
  }
  if (health_) health_->CheckAgent(agent_id);  // queued before any other work
  // Reader: results and heartbeats up. Writer (this thread): requests down.
  std::thread reader([&] {
    SetThreadName("tf-agent-read");
    v1::AgentMessage msg;
    while (stream->Read(&msg)) {
      if (msg.has_result()) {
        v1::MeasureResult r = msg.result();
        r.set_agent_id(agent_id);
        registry_->Complete(agent_id, r);
      } else if (msg.has_heartbeat()) {
        const auto& ids = msg.heartbeat().request_ids();
        registry_->Heartbeat(agent_id, msg.heartbeat().unix_ms(),
                             std::vector<std::string>(ids.begin(), ids.end()));
      } else if (msg.has_drain()) {
        const auto& ids = msg.drain().handback_request_ids();
        registry_->Drain(agent_id, std::vector<std::string>(ids.begin(), ids.end()));
      }
    }
    registry_->Disconnect(agent_id);
  });
  v1::MeasureRequest request;
  while (registry_->NextRequest(agent_id, &request)) {
    v1::ServerMessage out;
    *out.mutable_request() = std::move(request);
    if (!stream->Write(out)) break;
  }
  // The agent went away, or the server is shutting down: end the stream so the
  // reader's Read returns.
  if (!ctx->IsCancelled()) ctx->TryCancel();
  reader.join();
  registry_->Disconnect(agent_id);
  TF_LOG(Info) << "agent " << agent_id << " disconnected";
  return grpc::Status::OK;
}

}  // namespace tuneforge
