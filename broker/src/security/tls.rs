//! TLS for the Kafka, HTTP and inter-node listeners (rustls with ring), from PEM files as
//! Kafka's PEM keystores are: `ssl.keystore.location` holds the certificate chain and the
//! private key: unencrypted (PKCS#8, PKCS#1 or SEC1), or encrypted PKCS#8 (`ENCRYPTED PRIVATE
//! KEY`, PBES2: what `openssl pkcs8 -topk8` writes) with `ssl.key.password`, as Kafka's PEM
//! keystores allow; `ssl.truststore.location` the CA certificates client certificates are
//! checked against, `ssl.client.auth` whether a client certificate is `none`, `requested` or
//! `required` (Kafka's values).
//!
//! The files are checked every `ssl.reload.interval.ms` (Kafka reloads on an AlterConfigs of
//! the keystore; a renewed certificate is usually a replaced file): a changed file is loaded
//! and used for new connections, open ones keep theirs; a file that no longer loads is logged
//! and the last good configuration stays.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::Principal;

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    #[default]
    None,
    Requested,
    Required,
}

impl ClientAuth {
    pub fn parse(text: &str) -> Option<ClientAuth> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" => Some(ClientAuth::None),
            "requested" => Some(ClientAuth::Requested),
            "required" => Some(ClientAuth::Required),
            _ => None,
        }
    }
}

/// The TLS settings of a node (one set for every TLS listener, the HTTP one included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keystore.location`: PEM with the certificate chain (leaf first) and private key.
    pub keystore: PathBuf,
    /// `ssl.key.password`: what decrypts the keystore's key when it is encrypted.
    pub key_password: Option<KeyPassword>,
    /// `ssl.truststore.location`: PEM CA certificates for client certificates.
    pub truststore: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// `ssl.reload.interval.ms`: how often the files are checked for changes.
    pub reload_interval: Duration,
}

/// One listener's TLS settings given with Kafka's listener prefix,
/// `listener.name.<listener>.ssl.*`: each one given replaces the node's setting for that
/// listener (the others are the node's), as Kafka resolves listener-prefixed configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOverrides {
    pub keystore: Option<PathBuf>,
    pub key_password: Option<KeyPassword>,
    pub truststore: Option<PathBuf>,
    pub client_auth: Option<ClientAuth>,
}

impl TlsOverrides {
    /// Sets `property` (an `ssl.*` name without the listener prefix) to `value`; `Ok(false)`
    /// when it is not one a listener may set. `key` is the whole name, for errors.
    pub fn set(&mut self, key: &str, property: &str, value: &str) -> Result<bool, String> {
        match property {
            "ssl.keystore.location" => self.keystore = Some(PathBuf::from(value)),
            "ssl.key.password" => self.key_password = Some(KeyPassword(value.to_string())),
            "ssl.truststore.location" => self.truststore = Some(PathBuf::from(value)),
            "ssl.client.auth" => {
                self.client_auth = Some(
                    ClientAuth::parse(value)
                        .ok_or_else(|| format!("invalid {key} {value:?}: expected none, requested or required"))?,
                )
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The settings of `listener`: these over the node's `base`; an error when neither names a
    /// keystore.
    pub fn over(
        &self,
        base: Option<&TlsSettings>,
        reload_interval: Duration,
        listener: &str,
    ) -> Result<TlsSettings, String> {
        let keystore = self.keystore.clone().or_else(|| base.map(|b| b.keystore.clone())).ok_or_else(|| {
            format!(
                "listener {listener}: listener.name.{}.ssl.keystore.location or ssl.keystore.location is required",
                listener.to_ascii_lowercase()
            )
        })?;
        Ok(TlsSettings {
            keystore,
            key_password: self.key_password.clone().or_else(|| base.and_then(|b| b.key_password.clone())),
            truststore: self.truststore.clone().or_else(|| base.and_then(|b| b.truststore.clone())),
            client_auth: self.client_auth.or(base.map(|b| b.client_auth)).unwrap_or_default(),
            reload_interval,
        })
    }
}

/// `ssl.key.password`; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPassword(pub String);

impl std::fmt::Debug for KeyPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPassword(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: rustls_pki_types::pem::Error },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no private key (PKCS#8, PKCS#1 or SEC1 PEM; or encrypted PKCS#8 with ssl.key.password)")]
    NoKey { path: PathBuf },
    #[error("the private key in {path} is encrypted: give ssl.key.password")]
    NoKeyPassword { path: PathBuf },
    #[error("ssl.key.password does not decrypt the private key in {path}: {message}")]
    KeyDecryption { path: PathBuf, message: String },
    #[error("ssl.client.auth={0:?} needs ssl.truststore.location")]
    NoTruststore(ClientAuth),
    #[error("invalid truststore {path}: {message}")]
    Truststore { path: PathBuf, message: String },
    #[error(
        "a TLS inter-broker listener needs ssl.truststore.location: the CA that signed the other brokers' certificates"
    )]
    NoClientTruststore,
    #[error("the certificate and key of {path} do not make a TLS configuration: {source}")]
    Config { path: PathBuf, source: rustls::Error },
}

/// ring's provider. rustls 0.23.48 deprecates it because its key exchanges lack the
/// post-quantum hybrid (X25519MLKEM768), which only the aws-lc-rs provider has; aws-lc-rs needs
/// cmake and a C toolchain setup a fresh machine may not have. Classical X25519/P-256 as
/// Kafka's JDK TLS offers by default.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain and key of the keystore.
fn keystore(settings: &TlsSettings) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let path = &settings.keystore;
    let read = |source| TlsError::Read { path: path.clone(), source };
    let pem = std::fs::read(path).map_err(|e| read(rustls_pki_types::pem::Error::Io(e)))?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<_, _>>().map_err(read)?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: path.clone() });
    }
    if let Some(key) = encrypted_key(path, &pem, settings.key_password.as_ref())? {
        return Ok((chain, key));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::NoKey { path: path.clone() })?;
    Ok((chain, key))
}

/// The `ENCRYPTED PRIVATE KEY` in `pem` (the keystore at `path`), decrypted with `password`
/// (`None`: it has none). An encrypted key without a password, or one the password does not
/// decrypt, is an error that says so.
fn encrypted_key(
    path: &PathBuf,
    pem: &[u8],
    password: Option<&KeyPassword>,
) -> Result<Option<PrivateKeyDer<'static>>, TlsError> {
    const BEGIN: &[u8] = b"-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &[u8] = b"-----END ENCRYPTED PRIVATE KEY-----";
    let find = |from: usize, what: &[u8]| pem[from..].windows(what.len()).position(|w| w == what).map(|at| at + from);
    let Some(start) = find(0, BEGIN) else { return Ok(None) };
    let failed = |message: String| TlsError::KeyDecryption { path: path.clone(), message };
    let end = find(start, END).ok_or_else(|| failed("no -----END ENCRYPTED PRIVATE KEY----- line".into()))? + END.len();
    let Some(password) = password else { return Err(TlsError::NoKeyPassword { path: path.clone() }) };
    let (_, der) = pkcs8::der::pem::decode_vec(&pem[start..end]).map_err(|e| failed(e.to_string()))?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice()).map_err(|e| failed(e.to_string()))?;
    // A wrong password shows as a padding error of the last block or, rarely, as a key that
    // does not parse: either way, not the key.
    let key = info.decrypt(password.0.as_bytes()).map_err(|e| failed(e.to_string()))?;
    pkcs8::PrivateKeyInfo::try_from(key.as_bytes()).map_err(|e| failed(format!("the decrypted key: {e}")))?;
    Ok(Some(PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into())))
}

fn truststore(path: &PathBuf) -> Result<RootCertStore, TlsError> {
    let read = |source| TlsError::Read { path: path.clone(), source };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(read)? {
        roots
            .add(cert.map_err(read)?)
            .map_err(|e| TlsError::Truststore { path: path.clone(), message: e.to_string() })?;
    }
    Ok(roots)
}

/// The configuration this node connects to the other brokers' TLS inter-broker listener with:
/// their certificates checked against the truststore (host names, as Kafka's
/// `ssl.endpoint.identification.algorithm=https`), the keystore's certificate presented as the
/// client's, so a broker's principal is its certificate's subject.
fn load_client(settings: &TlsSettings) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let path = &settings.keystore;
    let truststore_path = settings.truststore.as_ref().ok_or(TlsError::NoClientTruststore)?;
    let roots = truststore(truststore_path)?;
    let (chain, key) = keystore(settings)?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Config { path: path.clone(), source })?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|source| TlsError::Config { path: path.clone(), source })?;
    Ok(Arc::new(config))
}

/// Builds a server configuration from the files as they are now.
fn load(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let path = &settings.keystore;
    let (chain, key) = keystore(settings)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Config { path: path.clone(), source })?;
    let builder = match (settings.client_auth, &settings.truststore) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (auth, None) => return Err(TlsError::NoTruststore(auth)),
        (auth, Some(truststore_path)) => {
            let roots = truststore(truststore_path)?;
            let truststore = truststore_path;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = if auth == ClientAuth::Requested { verifier.allow_unauthenticated() } else { verifier };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Truststore { path: truststore.clone(), message: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config =
        builder.with_single_cert(chain, key).map_err(|source| TlsError::Config { path: path.clone(), source })?;
    Ok(Arc::new(config))
}

fn modified(path: &Option<PathBuf>) -> Option<SystemTime> {
    path.as_ref().and_then(|p| std::fs::metadata(p).ok()).and_then(|m| m.modified().ok())
}

/// The node's TLS configurations (serving, and connecting to other brokers when the
/// inter-broker listener uses TLS), replaced when their files change.
pub struct TlsContext {
    settings: TlsSettings,
    current: RwLock<Loaded>,
    /// Whether this node connects to other brokers with TLS.
    client: bool,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext").field("settings", &self.settings).field("client", &self.client).finish()
    }
}

struct Loaded {
    server: Arc<ServerConfig>,
    client: Option<Arc<rustls::ClientConfig>>,
    stamps: [Option<SystemTime>; 2],
}

impl TlsContext {
    /// Loads the files; an error here stops the node from starting. With `client`, the node
    /// also connects to other brokers with TLS.
    pub fn load(settings: TlsSettings, client: bool) -> Result<Arc<TlsContext>, TlsError> {
        let server = load(&settings)?;
        let client_config = if client { Some(load_client(&settings)?) } else { None };
        let stamps = [modified(&Some(settings.keystore.clone())), modified(&settings.truststore)];
        Ok(Arc::new(TlsContext {
            settings,
            current: RwLock::new(Loaded { server, client: client_config, stamps }),
            client,
        }))
    }

    /// The configuration new connections use.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).server.clone()
    }

    /// The configuration new connections to other brokers use (`None`: they are not TLS).
    pub fn client_config(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).client.clone()
    }

    /// Opens a TLS connection over `stream` to the broker at `host` (a name or an IP address,
    /// which its certificate must carry); `None` when this node does not connect with TLS.
    pub async fn connect(
        &self,
        host: &str,
        stream: tokio::net::TcpStream,
    ) -> Option<std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>> {
        let config = self.client_config()?;
        let name = match rustls_pki_types::ServerName::try_from(host.to_string()) {
            Ok(name) => name,
            Err(e) => return Some(Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))),
        };
        Some(tokio_rustls::TlsConnector::from(config).connect(name, stream).await)
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server_config())
    }

    /// Reloads the files if one changed since the last load. Returns whether a new
    /// configuration is in use.
    pub fn reload_if_changed(&self) -> bool {
        let stamps = [modified(&Some(self.settings.keystore.clone())), modified(&self.settings.truststore)];
        if self.current.read().unwrap_or_else(|p| p.into_inner()).stamps == stamps {
            return false;
        }
        let loaded = load(&self.settings).and_then(|server| {
            let client = if self.client { Some(load_client(&self.settings)?) } else { None };
            Ok(Loaded { server, client, stamps })
        });
        match loaded {
            Ok(loaded) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = loaded;
                tracing::info!(keystore = %self.settings.keystore.display(), "TLS certificates reloaded");
                true
            }
            Err(error) => {
                // Keep serving with the last good files; remember the stamps so the error is
                // logged once per change, not once per check.
                self.current.write().unwrap_or_else(|p| p.into_inner()).stamps = stamps;
                tracing::error!(%error, "TLS files changed but do not load; the previous certificates stay in use");
                false
            }
        }
    }

    /// Checks the files every `ssl.reload.interval.ms` until `stop` turns true (the node's
    /// shutdown waits for this task).
    pub fn spawn_reloader(
        self: &Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let context = Arc::downgrade(self);
        let interval = self.settings.reload_interval.max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.wait_for(|stopped| *stopped) => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let Some(context) = context.upgrade() else { return };
                // Reading and parsing files: off the async workers.
                let _ = tokio::task::spawn_blocking(move || context.reload_if_changed()).await;
            }
        })
    }
}

/// The principal of a TLS connection: the subject of the client's certificate in RFC 4514
/// form (`CN=alice,OU=eng,O=Example`), Kafka's default `ssl.principal.mapping.rules`, or
/// `User:ANONYMOUS` without one.
pub fn principal_of(connection: &rustls::ServerConnection) -> Principal {
    let Some(leaf) = connection.peer_certificates().and_then(|certs| certs.first()) else {
        return Principal::anonymous();
    };
    use x509_cert::der::Decode;
    match x509_cert::Certificate::from_der(leaf.as_ref()) {
        Ok(cert) => Principal::user(&rfc2253(&cert.tbs_certificate.subject)),
        // The verifier accepted it, so it parses; should it not, it names no one.
        Err(_) => Principal::anonymous(),
    }
}

/// A distinguished name as Java's `X500Principal.getName()` (RFC 2253) writes it, which is the
/// principal Kafka's default builder gives: most specific RDN first, `+` inside an RDN, and
/// only RFC 2253's keywords (CN, C, L, ST, STREET, O, OU, DC, UID) by name; any other
/// attribute (emailAddress, serialNumber, ...) as `<oid>=#<hex of its DER value>`, so ACLs and
/// `super.users` copied from a Kafka cluster name the same principals.
fn rfc2253(name: &x509_cert::name::Name) -> String {
    use x509_cert::der::Encode;
    const KEYWORDS: [&str; 9] = [
        "2.5.4.3",                    // CN
        "2.5.4.6",                    // C
        "2.5.4.7",                    // L
        "2.5.4.8",                    // ST
        "2.5.4.9",                    // STREET
        "2.5.4.10",                   // O
        "2.5.4.11",                   // OU
        "0.9.2342.19200300.100.1.25", // DC
        "0.9.2342.19200300.100.1.1",  // UID
    ];
    let attribute = |atv: &x509_cert::attr::AttributeTypeAndValue| {
        let oid = atv.oid.to_string();
        if KEYWORDS.contains(&oid.as_str()) {
            // x509-cert names these by their keyword, escaped as RFC 4514/2253 say.
            return atv.to_string();
        }
        let hex: String = atv.value.to_der().unwrap_or_default().iter().map(|b| format!("{b:02x}")).collect();
        format!("{oid}=#{hex}")
    };
    name.0
        .iter()
        .rev()
        .map(|rdn| rdn.0.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn principals_are_written_as_javas_rfc_2253_names() {
        use x509_cert::attr::AttributeTypeAndValue;
        use x509_cert::der::asn1::{Any, ObjectIdentifier, SetOfVec};
        use x509_cert::der::Tag;
        use x509_cert::name::{RdnSequence, RelativeDistinguishedName};
        let atv = |oid: &str, tag: Tag, value: &str| AttributeTypeAndValue {
            oid: ObjectIdentifier::new_unwrap(oid),
            value: Any::new(tag, value.as_bytes()).unwrap(),
        };
        let rdn = |atvs: Vec<AttributeTypeAndValue>| RelativeDistinguishedName(SetOfVec::try_from(atvs).unwrap());
        // In DER order (least specific first): O, then CN with an emailAddress, then a UID.
        let name = RdnSequence(vec![
            rdn(vec![atv("2.5.4.10", Tag::Utf8String, "Example, Inc")]),
            rdn(vec![atv("2.5.4.3", Tag::Utf8String, "alice"), atv("1.2.840.113549.1.9.1", Tag::Ia5String, "a@x")]),
            rdn(vec![atv("0.9.2342.19200300.100.1.1", Tag::Utf8String, "7")]),
        ]);
        assert_eq!(rfc2253(&name), "UID=7,CN=alice+1.2.840.113549.1.9.1=#1603614078,O=Example\\, Inc");
    }

    /// A CA, and a server certificate for 127.0.0.1/localhost signed by it, written as PEM files.
    pub(crate) struct TestPki {
        pub dir: tempfile::TempDir,
        pub ca: rcgen::CertifiedKey,
    }

    impl TestPki {
        pub fn new() -> TestPki {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, "Runnel test CA");
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            let pki = TestPki { dir: tempfile::tempdir().unwrap(), ca: rcgen::CertifiedKey { cert, key_pair: key } };
            std::fs::write(pki.path("ca.pem"), pki.ca.cert.pem()).unwrap();
            pki
        }

        pub fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        /// Issues a certificate for `common_name` (with 127.0.0.1 and localhost as names) and
        /// writes it with its key to `file`.
        pub fn issue(&self, file: &str, common_name: &str) -> PathBuf {
            let mut params =
                rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
            params.distinguished_name.push(rcgen::DnType::OrganizationName, "Runnel");
            params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.ca.cert, &self.ca.key_pair).unwrap();
            let path = self.path(file);
            std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
            path
        }
    }

    #[test]
    fn a_keystore_loads_and_a_broken_one_names_what_is_missing() {
        let pki = TestPki::new();
        let keystore = pki.issue("server.pem", "localhost");
        let settings = TlsSettings {
            keystore: keystore.clone(),
            key_password: None,
            truststore: Some(pki.path("ca.pem")),
            client_auth: ClientAuth::Required,
            reload_interval: Duration::from_secs(1),
        };
        let context = TlsContext::load(settings.clone(), false).expect("loads");
        assert!(!context.reload_if_changed(), "nothing changed");

        std::fs::write(pki.path("cert-only.pem"), pki.ca.cert.pem()).unwrap();
        let no_key = TlsSettings { keystore: pki.path("cert-only.pem"), ..settings.clone() };
        assert!(matches!(TlsContext::load(no_key, false), Err(TlsError::NoKey { .. })));
        let no_trust = TlsSettings { truststore: None, ..settings.clone() };
        assert!(matches!(TlsContext::load(no_trust, false), Err(TlsError::NoTruststore(ClientAuth::Required))));
        let missing = TlsSettings { keystore: pki.path("absent.pem"), ..settings };
        assert!(matches!(TlsContext::load(missing, false), Err(TlsError::Read { .. })));
    }

    /// The PEM of `key` as encrypted PKCS#8 (PBES2: PBKDF2-SHA256, AES-256-CBC), as
    /// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it.
    pub(crate) fn encrypted_pem(key: &rcgen::KeyPair, password: &str) -> String {
        use pkcs8::der::EncodePem;
        let der = key.serialize_der();
        let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).unwrap();
        let params =
            pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, b"saltsalt", b"0123456789abcdef").unwrap();
        let encrypted = info.encrypt_with_params(params, password).unwrap();
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(encrypted.as_bytes()).unwrap();
        info.to_pem(pkcs8::LineEnding::LF).unwrap()
    }

    #[test]
    fn an_encrypted_key_loads_with_ssl_key_password_and_says_what_is_wrong_without_it() {
        let pki = TestPki::new();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "localhost");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &pki.ca.cert, &pki.ca.key_pair).unwrap();
        let keystore = pki.path("encrypted.pem");
        let pem = encrypted_pem(&key, "key-secret");
        assert!(pem.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"), "{pem}");
        std::fs::write(&keystore, format!("{}{pem}", cert.pem())).unwrap();
        let settings = TlsSettings {
            keystore: keystore.clone(),
            key_password: Some(KeyPassword("key-secret".into())),
            truststore: Some(pki.path("ca.pem")),
            client_auth: ClientAuth::None,
            reload_interval: Duration::from_secs(1),
        };
        let context = TlsContext::load(settings.clone(), true).expect("loads with the password");
        assert!(context.client_config().is_some(), "and presents it as a client");
        let no_password = TlsSettings { key_password: None, ..settings.clone() };
        let error = TlsContext::load(no_password, false).unwrap_err();
        assert!(matches!(error, TlsError::NoKeyPassword { .. }), "{error}");
        assert!(error.to_string().contains("give ssl.key.password"), "{error}");
        let wrong = TlsSettings { key_password: Some(KeyPassword("guess".into())), ..settings };
        let error = TlsContext::load(wrong, false).unwrap_err();
        assert!(matches!(error, TlsError::KeyDecryption { .. }), "{error}");
        assert!(!format!("{:?}", KeyPassword("key-secret".into())).contains("key-secret"));
    }

    #[test]
    fn a_replaced_keystore_is_used_and_a_broken_replacement_keeps_the_old_one() {
        let pki = TestPki::new();
        let keystore = pki.issue("server.pem", "first");
        let settings = TlsSettings {
            keystore: keystore.clone(),
            key_password: None,
            truststore: None,
            client_auth: ClientAuth::None,
            reload_interval: Duration::from_secs(1),
        };
        let context = TlsContext::load(settings, false).expect("loads");
        let first = context.server_config();
        // A new file (a new modification time: set it explicitly, the clock may not tick).
        pki.issue("server.pem", "second");
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options().write(true).open(&keystore).unwrap().set_modified(later).unwrap();
        assert!(context.reload_if_changed());
        assert!(!Arc::ptr_eq(&first, &context.server_config()));
        let second = context.server_config();
        std::fs::write(&keystore, "not pem").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&keystore)
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        assert!(!context.reload_if_changed(), "a broken file is not used");
        assert!(Arc::ptr_eq(&second, &context.server_config()));
    }
}
