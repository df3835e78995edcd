#include "control/tls.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "common/digest.h"
#include "common/files.h"

namespace scdino::control {

namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

Cert ParseCertificate(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

std::string Fingerprint(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(cert, EVP_sha256(), md, &n);
  return "sha256:" + HexEncode(md, n);
}

bool AddExtension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// The first DNS subjectAltName, else the common name.
std::string IssuedName(X509* cert) {
  std::string name;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans) && name.empty(); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      if (g->type == GEN_DNS) {
        name.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                    static_cast<size_t>(ASN1_STRING_length(g->d.dNSName)));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (name.empty()) {
    char cn[256] = {};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0) name = cn;
  }
  return name;
}

}  // namespace

StatusOr<std::string> CertificateFingerprint(const std::string& pem, const std::string& what) {
  Cert cert = ParseCertificate(pem);
  if (!cert) return Status::InvalidArgument(what + ": not a PEM certificate");
  return Fingerprint(cert.get());
}

StatusOr<TlsIdentity> MakeSelfSignedIdentity(const std::string& dir, const std::string& stem, const std::string& name,
                                             const std::string& host) {
  if (auto s = MakeOwnDir(dir, 0700, "the control API's TLS directory"); !s.ok()) return s;
  auto fail = [&](const std::string& step) {
    return Status::Internal("cannot make the control API's TLS certificate in " + dir + " (" + step + ")");
  };
  Key key(EVP_EC_gen("P-256"));
  if (!key) return fail("key generation");
  Cert cert(X509_new());
  if (!cert) return fail("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return fail("random serial");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // clocks of a cluster's nodes differ a little
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 400L * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1,
                             -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  std::string sans = "DNS:" + name;
  if (!host.empty() && host != name) sans += ",DNS:" + host;
  if (!AddExtension(cert.get(), NID_subject_alt_name, sans) ||
      !AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign") ||
      !AddExtension(cert.get(), NID_ext_key_usage, "serverAuth") ||
      !AddExtension(cert.get(), NID_subject_key_identifier, "hash")) {
    return fail("extensions for " + sans);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return fail("signature");
  Bio key_pem(BIO_new(BIO_s_mem())), cert_pem(BIO_new(BIO_s_mem()));
  if (!key_pem || !cert_pem || PEM_write_bio_PrivateKey(key_pem.get(), key.get(), nullptr, nullptr, 0, nullptr,
                                                        nullptr) != 1 ||
      PEM_write_bio_X509(cert_pem.get(), cert.get()) != 1) {
    return fail("PEM encoding");
  }
  TlsIdentity id;
  id.key_file = dir + "/" + stem + ".key";
  id.cert_file = dir + "/" + stem + ".crt";
  id.name = name;
  id.fingerprint = Fingerprint(cert.get());
  if (auto s = WriteFileAtomic(id.key_file, BioText(key_pem.get()), 0600); !s.ok()) return s;
  if (auto s = WriteFileAtomic(id.cert_file, BioText(cert_pem.get()), 0600); !s.ok()) return s;
  return id;
}

StatusOr<TlsIdentity> DescribeIdentity(const std::string& cert_file, const std::string& key_file) {
  auto pem = ReadFile(cert_file);
  if (!pem.ok()) return pem.status();
  Cert cert = ParseCertificate(*pem);
  if (!cert) return Status::InvalidArgument(cert_file + " (scdino.control.tls_cert_file): not a PEM certificate");
  TlsIdentity id;
  id.cert_file = cert_file;
  id.key_file = key_file;
  id.fingerprint = Fingerprint(cert.get());
  id.name = IssuedName(cert.get());
  if (id.name.empty()) {
    return Status::InvalidArgument(cert_file + " (scdino.control.tls_cert_file): names no host (no DNS "
                                   "subjectAltName, no common name); clients could not verify it");
  }
  return id;
}

}  // namespace scdino::control
