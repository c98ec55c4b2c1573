#include "compiler/support/rpc_credentials.h"

#include "compiler/support/files.h"

namespace tuneforge {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::string> pem = ReadFile(ca_file);
  if (!pem.ok() || pem->find("BEGIN CERTIFICATE") == std::string::npos) {
    return absl::InvalidArgumentError("--tls-ca " + ca_file + ": not a readable PEM certificate");
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *pem;
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 ||
         host == "ip6-localhost";
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
    const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return grpc::InsecureServerCredentials();
  if (cert_file.empty() || key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  absl::StatusOr<std::string> cert = ReadFile(cert_file);
  absl::StatusOr<std::string> key = ReadFile(key_file);
  if (!cert.ok() || cert->find("BEGIN CERTIFICATE") == std::string::npos) {
    return absl::InvalidArgumentError("--tls-cert " + cert_file + ": not a readable PEM certificate");
  }
  if (!key.ok() || key->find("PRIVATE KEY") == std::string::npos) {
    return absl::InvalidArgumentError("--tls-key " + key_file + ": not a readable PEM private key");
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace tuneforge
