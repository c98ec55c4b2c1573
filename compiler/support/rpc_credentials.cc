#include "compiler/support/rpc_credentials.h"

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
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPem("--tls-key", key_file, kPrivateKey, "private key"));
  }
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
