//! Test certificates: a CA and certificates it signs, as PEM files in a temp dir (rcgen).

use std::path::PathBuf;

/// A certificate authority and a server certificate for 127.0.0.1 signed by it, as PEM files.
pub struct Pki {
    dir: tempfile::TempDir,
}

pub struct Authority {
    pub cert: rcgen::Certificate,
    pub key: rcgen::KeyPair,
}

pub fn authority(name: &str) -> Authority {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    Authority { cert, key }
}

impl Pki {
    pub fn new() -> Pki {
        Pki::with_ca().0
    }

    /// A PKI and its CA, to issue more certificates.
    pub fn with_ca() -> (Pki, Authority) {
        let pki = Pki { dir: tempfile::tempdir().expect("temp dir") };
        let ca = authority("Runnel test CA");
        std::fs::write(pki.path("ca.pem"), ca.cert.pem()).expect("write ca");
        pki.issue(&ca, "server.pem");
        (pki, ca)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn text(&self, name: &str) -> String {
        self.path(name).to_str().expect("utf-8 path").to_string()
    }

    /// A client certificate for `common_name` (organization Runnel) signed by `ca`: certificate
    /// and key in two PEM files, as librdkafka's `ssl.certificate.location`/`ssl.key.location`.
    pub fn issue_client(&self, ca: &Authority, common_name: &str) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Runnel");
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("signed");
        let (cert_file, key_file) = (format!("{common_name}.crt"), format!("{common_name}.key"));
        std::fs::write(self.path(&cert_file), cert.pem()).expect("write cert");
        std::fs::write(self.path(&key_file), key.serialize_pem()).expect("write key");
        (self.text(&cert_file), self.text(&key_file))
    }

    /// A server certificate for 127.0.0.1 and localhost signed by `ca`, with its key, in `file`.
    pub fn issue(&self, ca: &Authority, file: &str) {
        let (cert, key) = server_certificate(ca);
        std::fs::write(self.path(file), format!("{}{}", cert.pem(), key.serialize_pem())).expect("write keystore");
    }

    /// As [`Pki::issue`], with the key encrypted under `password` (`ENCRYPTED PRIVATE KEY`:
    /// PKCS#8, PBES2 with PBKDF2-SHA256 and AES-256-CBC, as `openssl pkcs8 -topk8` writes it).
    #[allow(dead_code)]
    pub fn issue_encrypted(&self, ca: &Authority, file: &str, password: &str) {
        use pkcs8::der::EncodePem;
        let (cert, key) = server_certificate(ca);
        let der = key.serialize_der();
        let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).expect("PKCS#8");
        let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, b"keystore", b"0123456789abcdef")
            .expect("PBES2 parameters");
        let encrypted = info.encrypt_with_params(params, password).expect("encrypt");
        let pem = pkcs8::EncryptedPrivateKeyInfo::try_from(encrypted.as_bytes())
            .expect("encrypted PKCS#8")
            .to_pem(pkcs8::LineEnding::LF)
            .expect("PEM");
        std::fs::write(self.path(file), format!("{}{pem}", cert.pem())).expect("write keystore");
    }
}

fn server_certificate(ca: &Authority) -> (rcgen::Certificate, rcgen::KeyPair) {
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, "runnel");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("signed");
    (cert, key)
}
