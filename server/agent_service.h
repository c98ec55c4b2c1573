// AgentService (proto/tuneforge/v1/agent.proto): agents register, then hold one
// stream over which they lease MeasureRequests and return results. Thin: proto <->
// AgentRegistry and AgentHealth.
#pragma once

#include <string>

#include "server/agent_health.h"
#include "server/agent_registry.h"
#include "server/auth.h"
#include "tuneforge/v1/agent.grpc.pb.h"

namespace tuneforge {

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  // `health` (may be null: no golden-kernel checks) checks every agent that connects.
  // `require_client_certificate` (mutual TLS, ServerOptions::tls_client_ca_path):
  // every call must come with a verified client certificate, and a registration is
  // bound to the certificate's identity as well as to the token's principal.
  AgentServiceImpl(AgentRegistry* registry, AgentHealth* health, const TokenAuth* auth,
                   bool require_client_certificate = false)
      : registry_(registry), health_(health), auth_(auth),
        require_client_certificate_(require_client_certificate) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>*) override;

 private:
  AgentRegistry* registry_;
  AgentHealth* health_;
  const TokenAuth* auth_;
  const bool require_client_certificate_;

  // Authorizes an agent call; `identity` gets what the registration is bound to: the
  // token's principal and, with mutual TLS, the client certificate's identity.
  grpc::Status AuthorizeAgent(grpc::ServerContext* ctx, std::string* identity) const;
};

}  // namespace tuneforge
