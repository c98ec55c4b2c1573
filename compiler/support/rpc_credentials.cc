// gRPC TLS credentials from PEM files (server, agent and client flags).
#include "compiler/support/rpc_credentials.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include "compiler/support/files.h"
#include "compiler/support/status.h"

namespace tuneforge {

namespace {

// The PEM text of `path`, which must contain `marker` (what a certificate or a key
// file has); the error names the flag.
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    const char* marker, const char* what) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok() || pem->find(marker) == std::string::npos) {
    return absl::InvalidArgumentError(flag + " " + path + ": not a readable PEM " + what);
  }
  return pem;
}

constexpr char kCertificate[] = "BEGIN CERTIFICATE";
constexpr char kPrivateKey[] = "PRIVATE KEY";

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_file, const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both --tls-cert and --tls-key");
  }
  if (ca_file.empty()) {
    if (!cert_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert/--tls-key need --tls-ca (mutual TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem("--tls-ca", ca_file, kCertificate, "certificate"));
  if (!cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPem("--tls-cert", cert_file, kCertificate, "certificate"));
    RETURN_IF_ERROR(CheckSecretFileMode(key_file, "--tls-key"));
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPem("--tls-key", key_file, kPrivateKey, "private key"));
  }
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host.front() == '[') {  // [v6]:port
    const size_t close = host.find(']');
    if (close == std::string::npos) return false;
    host = host.substr(1, close - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {  // v4 or name, :port
    host = host.substr(0, host.find(':'));
  }
  // An address, parsed: "127.0.0.1.nip.io" is a name anyone's DNS may point anywhere.
  // The one name trusted is "localhost" (RFC 6761: it always resolves to loopback).
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckTransport(const std::string& address, const std::string& tls_ca,
                            bool insecure) {
  if (!tls_ca.empty() || insecure || IsLoopbackAddress(address)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "refusing plaintext to " + address +
      ": tokens and kernels would cross the network unencrypted; give the server's CA "
      "with --tls-ca (docs/security.md), or --insecure on a network you trust");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  if (cert_file.empty() && key_file.empty()) {
    if (!client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs TLS (--tls-cert and --tls-key)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (cert_file.empty() || key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  ASSIGN_OR_RETURN(std::string cert, ReadPem("--tls-cert", cert_file, kCertificate, "certificate"));
  RETURN_IF_ERROR(CheckSecretFileMode(key_file, "--tls-key"));
  ASSIGN_OR_RETURN(std::string key, ReadPem("--tls-key", key_file, kPrivateKey, "private key"));
  grpc::SslServerCredentialsOptions options(
      client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({key, cert});
  if (!client_ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPem("--tls-client-ca", client_ca_file, kCertificate, "certificate"));
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace tuneforge
