// TokenAuth: the token file, roles and the gRPC auth check.
#include "server/auth.h"

#include "compiler/support/files.h"

#include <fstream>
#include <set>
#include <sstream>

namespace tuneforge {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 256;

}  // namespace

// Compares in time that depends on neither secret: always kMaxTokenLength steps, with
// the lengths folded into the result instead of an early exit, so timing reveals
// neither a prefix nor the secret's length. A presented token longer than any secret
// can be is refused at once (that says nothing about the secret).
bool SameSecret(const std::string& secret, const std::string& given) {
  if (given.size() > kMaxTokenLength) return false;
  unsigned diff = static_cast<unsigned>(secret.size() ^ given.size());
  for (size_t i = 0; i < kMaxTokenLength; ++i) {
    const unsigned char s = i < secret.size() ? static_cast<unsigned char>(secret[i]) : 0;
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned>(s ^ g);
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::Load(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the tokens file path is empty");
  if (absl::Status mode = CheckSecretFileMode(path, "tokens file"); !mode.ok()) return mode;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read tokens file " + path);
  auto auth = std::make_unique<TokenAuth>();
  std::set<std::string> tokens;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string role, name, token, extra;
    if (!(words >> role) || role[0] == '#') continue;
    std::string where = path + ":" + std::to_string(number) + ": ";
    if (!(words >> name >> token) || (words >> extra)) {
      return absl::InvalidArgumentError(where + "expected: ROLE NAME TOKEN");
    }
    Entry e;
    e.principal.name = name;
    if (role == "agent") {
      e.principal.role = Role::kAgent;
    } else if (role == "user") {
      e.principal.role = Role::kUser;
    } else if (role == "admin") {
      e.principal.role = Role::kAdmin;
    } else if (role == "viewer") {
      e.principal.role = Role::kViewer;
    } else {
      return absl::InvalidArgumentError(where + "unknown role '" + role +
                                        "' (agent, user, admin, viewer)");
    }
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
      return absl::InvalidArgumentError(where + "token of " + name + " must have " +
                                        std::to_string(kMinTokenLength) + ".." +
                                        std::to_string(kMaxTokenLength) + " characters");
    }
    if (!tokens.insert(token).second) return absl::InvalidArgumentError(where + "duplicate token");
    e.token = token;
    auth->entries_.push_back(std::move(e));
  }
  if (auth->entries_.empty()) return absl::InvalidArgumentError("tokens file " + path + " has no tokens");
  return auth;
}

grpc::Status TokenAuth::Check(grpc::ServerContext* ctx, std::initializer_list<Role> allowed,
                              Principal* who) const {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing token (use --token-file)");
  }
  std::string value(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  std::string token = value.rfind(prefix, 0) == 0 ? value.substr(prefix.size()) : "";
  const Principal* found = Lookup(token);
  if (!found) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unknown token");
  for (Role r : allowed) {
    if (r == found->role) {
      *who = *found;
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      found->name + " may not call this service with its role");
}

const Principal* TokenAuth::Lookup(const std::string& token) const {
  const Principal* found = nullptr;
  for (const Entry& e : entries_)  // every entry compared: the time says nothing of which
    if (SameSecret(e.token, token)) found = &e.principal;
  return found;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kAgent: return "agent";
    case Role::kUser: return "user";
    case Role::kAdmin: return "admin";
    case Role::kViewer: return "viewer";
  }
  return "unknown";
}

grpc::Status Authorize(const TokenAuth* auth, grpc::ServerContext* ctx,
                       std::initializer_list<Role> allowed, Principal* who) {
  if (!auth) {
    *who = Principal{"", Role::kAdmin};
    return grpc::Status::OK;
  }
  return auth->Check(ctx, allowed, who);
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace tuneforge
