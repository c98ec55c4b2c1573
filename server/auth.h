// Token authentication with roles. The server reads a tokens file (never tokens on
// the command line):
//
//   # role  name    token (at least 16 characters)
//   agent   farm    9f2c...        agents: AgentService only
//   user    alice   41ab...        users: tuning jobs (their own), farm status, db
//   admin   ops     77d0...        everything, every user's jobs
//   viewer  wall    c3e1...        the dashboard, read-only (no gRPC service)
//
// Every RPC then needs "authorization: Bearer <token>" metadata. Without a tokens
// file the server is open (for loopback use, as the embedded default); see
// docs/security.md for the threat model.
#pragma once

#include <grpcpp/grpcpp.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/support/hash.h"  // RandomToken

namespace tuneforge {

enum class Role { kAgent, kUser, kAdmin, kViewer };

const char* RoleName(Role role);

// True when `given` equals `secret`, in time that depends on neither (a fixed number
// of steps, lengths folded into the result): tokens and session secrets.
bool SameSecret(const std::string& secret, const std::string& given);


struct Principal {
  std::string name;
  Role role = Role::kAdmin;
};

// Thread-safe (immutable after Load).
class TokenAuth {
 public:
  static absl::StatusOr<std::unique_ptr<TokenAuth>> Load(const std::string& path);

  // Who sent this call, if their token's role is one of `allowed`. UNAUTHENTICATED
  // for a missing or unknown token, PERMISSION_DENIED for a role not allowed.
  grpc::Status Check(grpc::ServerContext* ctx, std::initializer_list<Role> allowed,
                     Principal* who) const;
  // Whose token this is (compared in constant time); nullptr when unknown.
  const Principal* Lookup(const std::string& token) const;

 private:
  struct Entry {
    Principal principal;
    std::string token;
  };
  std::vector<Entry> entries_;
};

// Check for an optional TokenAuth: with none configured every call is an anonymous admin.
grpc::Status Authorize(const TokenAuth* auth, grpc::ServerContext* ctx,
                       std::initializer_list<Role> allowed, Principal* who);

// Adds the bearer token (when not empty) to an outgoing call.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace tuneforge
