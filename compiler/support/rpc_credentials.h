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
// the server's certificate must name the host (or IP) the client dials. With
// `cert_file` and `key_file` (both or neither; only with `ca_file`) the client also
// presents that certificate: mutual TLS, which a server with a client CA
// (ServerCredentials) requires of agents.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_file, const std::string& cert_file = "",
    const std::string& key_file = "");

// True for HOST:PORT addresses on this machine: an IPv4 address in 127.0.0.0/8, [::1]
// (or a v4-mapped 127/8), or the name localhost. Other names are not loopback, however
// they start: 127.0.0.1.nip.io resolves wherever its DNS says.
bool IsLoopbackAddress(const std::string& address);

// Plaintext gRPC off this machine carries tokens, kernels and results in the clear.
// Clients (CLI, agent) check before dialling: an address that is not loopback needs
// TLS (`tls_ca` set) unless `insecure` (the --insecure flag) says plaintext is wanted.
absl::Status CheckTransport(const std::string& address, const std::string& tls_ca,
                            bool insecure);

// Both empty: plaintext. Both set: TLS with this PEM certificate chain and key. With
// `client_ca_file` (only with TLS) the server asks clients for a certificate and
// verifies one that is presented against that CA; a client without one still
// connects, and the services decide who must have one (agents: docs/security.md).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file = "");

}  // namespace tuneforge
