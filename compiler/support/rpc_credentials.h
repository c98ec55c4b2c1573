// gRPC credentials from files, shared by every gRPC client (CLI, agent) and the server:
// TLS when certificate files are given, plaintext otherwise.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tuneforge {

// `ca_file` empty: plaintext. Else TLS, trusting the PEM certificate(s) in the file;
// the server's certificate must name the host (or IP) the client dials.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_file);

// Both empty: plaintext. Both set: TLS with this PEM certificate chain and key.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file);

}  // namespace tuneforge
