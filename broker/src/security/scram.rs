//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84): the
//! stored credential (salt, StoredKey, ServerKey, iterations; never the password) and the server
//! side of the exchange. HMAC, PBKDF2 and the digests are ring's.

use base64::Engine as _;
use ring::{digest, hmac, pbkdf2};

/// Kafka's bounds on a credential's iterations (`ScramMechanism.minIterations`/`maxIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism, with Kafka's names and ids (`ScramMechanism` in the admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism's id in DescribeUserScramCredentials/AlterUserScramCredentials (0 is UNKNOWN).
    pub fn id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_id(id: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.id() == id)
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(name))
    }

    fn hmac_algorithm(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2_algorithm(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest_algorithm(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    /// The digest's length: of a salted password, a key, a proof.
    pub fn output_len(self) -> usize {
        self.digest_algorithm().output_len()
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac_algorithm(), key), data).as_ref().to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_algorithm(), data).as_ref().to_vec()
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.output_len()];
        let iterations = std::num::NonZeroU32::new(iterations.max(1)).expect("at least one iteration");
        pbkdf2::derive(self.pbkdf2_algorithm(), iterations, salt, password, &mut out);
        out
    }
}

/// What a broker stores for one user and mechanism (Kafka's `UserScramCredentialRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// From a salted password, the form AlterUserScramCredentials carries (the client salts and
    /// hashes; the password never reaches the broker).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: Vec<u8>,
        salted_password: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            mechanism,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            salt,
            iterations,
        }
    }

    pub fn from_password(mechanism: ScramMechanism, password: &str, salt: Vec<u8>, iterations: u32) -> ScramCredential {
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// The work [`ScramCredential::matches_password`] costs, spent for a user that does not
    /// exist, so that how long a refusal takes does not tell whether the user exists.
    pub fn decoy_check(password: &str) {
        let decoy = ScramCredential::from_salted_password(ScramMechanism::Sha256, vec![0; 16], &[0; 32], 4096);
        let _ = decoy.matches_password(password);
    }

    /// Whether `password` is the one this credential was made from (SASL/PLAIN checks the
    /// same credentials as SCRAM: one user store).
    pub fn matches_password(&self, password: &str) -> bool {
        let salted = self.mechanism.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let candidate = ScramCredential::from_salted_password(self.mechanism, Vec::new(), &salted, self.iterations);
        super::constant_time_eq(&candidate.stored_key, &self.stored_key)
    }
}

/// A user a node creates when it starts, unless it exists (Kafka's `kafka-storage.sh format
/// --add-scram`): how the first administrator gets in once every listener authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapUser {
    pub mechanism: ScramMechanism,
    pub name: String,
    pub password: String,
    pub iterations: u32,
}

impl BootstrapUser {
    /// Parses Kafka's `SCRAM-SHA-256=[name=alice,password=alice-secret]` (and `iterations=`).
    pub fn parse(text: &str) -> Result<BootstrapUser, String> {
        let syntax = || format!("invalid --add-scram {text:?}: expected SCRAM-SHA-256=[name=NAME,password=PASSWORD]");
        let (mechanism, rest) = text.trim().split_once('=').ok_or_else(syntax)?;
        let mechanism = ScramMechanism::from_name(mechanism.trim()).ok_or_else(syntax)?;
        let body = rest.trim().strip_prefix('[').and_then(|r| r.strip_suffix(']')).ok_or_else(syntax)?;
        let (mut name, mut password, mut iterations) = (None, None, MIN_ITERATIONS);
        for part in body.split(',') {
            match part.split_once('=') {
                Some(("name", v)) => name = Some(v.trim_matches('"').to_string()),
                Some(("password", v)) => password = Some(v.trim_matches('"').to_string()),
                Some(("iterations", v)) => iterations = v.parse().map_err(|_| syntax())?,
                _ => return Err(syntax()),
            }
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!("--add-scram iterations must be within {MIN_ITERATIONS}..={MAX_ITERATIONS}"));
        }
        match (name, password) {
            (Some(name), Some(password)) if !name.is_empty() && !password.is_empty() => {
                Ok(BootstrapUser { mechanism, name, password, iterations })
            }
            _ => Err(syntax()),
        }
    }

    /// A credential for it with a fresh salt.
    pub fn credential(&self) -> ScramCredential {
        ScramCredential::from_password(self.mechanism, &self.password, random_bytes(32), self.iterations)
    }
}

/// The client side of an exchange (RFC 5802): how a broker authenticates to another broker's
/// SASL inter-broker listener.
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    nonce: String,
    /// The server signature the last message must carry (known once the client-final is made).
    expected: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> ScramClient {
        let nonce = base64::engine::general_purpose::STANDARD.encode(random_bytes(24));
        ScramClient::with_nonce(mechanism, user, password, &nonce)
    }

    pub fn with_nonce(mechanism: ScramMechanism, user: &str, password: &str, nonce: &str) -> ScramClient {
        ScramClient {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            nonce: nonce.to_string(),
            expected: None,
        }
    }

    fn first_bare(&self) -> String {
        format!("n={},r={}", self.user.replace('=', "=3D").replace(',', "=2C"), self.nonce)
    }

    /// The client-first message.
    pub fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.first_bare()).into_bytes()
    }

    /// The client-final message answering `server_first`.
    pub fn last(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let malformed = ScramError::Malformed("server-first");
        let engine = base64::engine::general_purpose::STANDARD;
        let server_first = std::str::from_utf8(server_first).map_err(|_| malformed.clone())?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = engine.decode(v).ok(),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else { return Err(malformed) };
        // The server's nonce extends ours; anything else is not our exchange.
        if !nonce.starts_with(&self.nonce) || iterations < MIN_ITERATIONS {
            return Err(ScramError::NonceMismatch);
        }
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.first_bare());
        let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        self.expected = Some(m.hmac(&m.hmac(&salted, b"Server Key"), auth.as_bytes()));
        Ok(format!("{without_proof},p={}", engine.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proved it knows the credential too.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let engine = base64::engine::general_purpose::STANDARD;
        let text = std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("server-final"))?;
        let signature = text.strip_prefix("v=").and_then(|v| engine.decode(v).ok());
        match (signature, &self.expected) {
            (Some(signature), Some(expected)) if super::constant_time_eq(&signature, expected) => Ok(()),
            _ => Err(ScramError::InvalidProof),
        }
    }
}

/// `count` random bytes from the operating system's generator.
pub fn random_bytes(count: usize) -> Vec<u8> {
    use ring::rand::SecureRandom;
    let mut bytes = vec![0u8; count];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the system random generator works");
    bytes
}

/// Why a SCRAM exchange failed. The client is told only that authentication failed (Kafka's
/// message); the reason is logged.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    #[error("malformed {0} message")]
    Malformed(&'static str),
    #[error("unknown user or no {0} credential for it")]
    UnknownUser(&'static str),
    #[error("channel binding and authorization ids other than the user are not supported")]
    Unsupported,
    #[error("delegation tokens (tokenauth) are not supported")]
    TokenAuth,
    #[error("the client's final message changed the nonce")]
    NonceMismatch,
    #[error("invalid proof (wrong password)")]
    InvalidProof,
    #[error("the exchange is over")]
    Finished,
}

/// One server-side SCRAM exchange: client-first → server-first → client-final → server-final.
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: State,
}

enum State {
    Start,
    SentFirst {
        user: String,
        credential: ScramCredential,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Done,
}

/// What a step of the exchange answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge; the exchange continues.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send this last message.
    Done { user: String, response: Vec<u8> },
}

/// `saslname` of RFC 5802: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn unescape_user(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer { mechanism, state: State::Start }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Takes the client's next message; `credential` looks a user's credential up.
    pub fn step(
        &mut self,
        message: &[u8],
        credential: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Step, ScramError> {
        let message = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("client"))?;
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start => {
                let (step, state) = self.client_first(message, credential)?;
                self.state = state;
                Ok(step)
            }
            State::SentFirst { user, credential, client_first_bare, server_first, nonce } => {
                let response = self.client_final(message, &credential, &client_first_bare, &server_first, &nonce)?;
                Ok(Step::Done { user, response })
            }
            State::Done => Err(ScramError::Finished),
        }
    }

    fn client_first(
        &self,
        message: &str,
        credential: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<(Step, State), ScramError> {
        let malformed = ScramError::Malformed("client-first");
        // gs2-header: "n," (no channel binding) or "y," then an optional "a=authzid", then ",".
        let (binding, rest) = message.split_once(',').ok_or(malformed.clone())?;
        if binding != "n" && binding != "y" {
            return Err(ScramError::Unsupported);
        }
        let (authzid, bare) = rest.split_once(',').ok_or(malformed.clone())?;
        let mut user = None;
        let mut client_nonce = None;
        for attribute in bare.split(',') {
            match attribute.split_once('=') {
                Some(("n", name)) => user = Some(unescape_user(name).ok_or(malformed.clone())?),
                Some(("r", nonce)) => client_nonce = Some(nonce),
                Some(("tokenauth", _)) => return Err(ScramError::TokenAuth),
                Some(("m", _)) => return Err(ScramError::Unsupported),
                // Other extensions (KIP-86) are ignored.
                _ => {}
            }
        }
        let (Some(user), Some(client_nonce)) = (user, client_nonce) else { return Err(malformed) };
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
            return Err(malformed);
        }
        // Kafka: an authorization id, if given, must be the user itself.
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if unescape_user(authzid).as_deref() != Some(user.as_str()) {
                return Err(ScramError::Unsupported);
            }
        } else if !authzid.is_empty() {
            return Err(malformed);
        }
        let credential = credential(&user).ok_or(ScramError::UnknownUser(self.mechanism.name()))?;
        let engine = base64::engine::general_purpose::STANDARD;
        let nonce = format!("{client_nonce}{}", engine.encode(random_bytes(24)));
        let server_first = format!("r={nonce},s={},i={}", engine.encode(&credential.salt), credential.iterations);
        let step = Step::Continue(server_first.clone().into_bytes());
        Ok((step, State::SentFirst { user, credential, client_first_bare: bare.to_string(), server_first, nonce }))
    }

    fn client_final(
        &self,
        message: &str,
        credential: &ScramCredential,
        client_first_bare: &str,
        server_first: &str,
        nonce: &str,
    ) -> Result<Vec<u8>, ScramError> {
        let malformed = ScramError::Malformed("client-final");
        let (without_proof, proof) = message.rsplit_once(",p=").ok_or(malformed.clone())?;
        let mut channel_binding = None;
        let mut final_nonce = None;
        for attribute in without_proof.split(',') {
            match attribute.split_once('=') {
                Some(("c", value)) => channel_binding = Some(value),
                Some(("r", value)) => final_nonce = Some(value),
                _ => {}
            }
        }
        let engine = base64::engine::general_purpose::STANDARD;
        // Without channel binding the client echoes its gs2 header "n,," (or "y,,").
        let binding = channel_binding.and_then(|c| engine.decode(c).ok()).ok_or(malformed.clone())?;
        if !binding.starts_with(b"n,") && !binding.starts_with(b"y,") {
            return Err(ScramError::Unsupported);
        }
        if final_nonce != Some(nonce) {
            return Err(ScramError::NonceMismatch);
        }
        let proof = engine.decode(proof).map_err(|_| malformed.clone())?;
        let mechanism = self.mechanism;
        if proof.len() != mechanism.output_len() {
            return Err(ScramError::InvalidProof);
        }
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = mechanism.hmac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        if !super::constant_time_eq(&mechanism.hash(&client_key), &credential.stored_key) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = mechanism.hmac(&credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", engine.encode(server_signature)).into_bytes())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The client side of the exchange, as RFC 5802 describes it (what librdkafka and the Java
    /// client do), to drive the server in tests.
    pub(crate) struct TestClient {
        pub mechanism: ScramMechanism,
        pub user: String,
        pub password: String,
        pub nonce: String,
    }

    impl TestClient {
        pub fn first(&self) -> Vec<u8> {
            format!("n,,n={},r={}", self.user.replace('=', "=3D").replace(',', "=2C"), self.nonce).into_bytes()
        }

        /// The client-final message for `server_first`, and the server-final message it expects.
        pub fn last(&self, server_first: &[u8]) -> (Vec<u8>, Vec<u8>) {
            let mut client = ScramClient::with_nonce(self.mechanism, &self.user, &self.password, &self.nonce);
            let last = client.last(server_first).expect("a valid server-first");
            let expected = client.expected.clone().expect("computed with the client-final");
            (last, format!("v={}", base64::engine::general_purpose::STANDARD.encode(expected)).into_bytes())
        }
    }

    #[test]
    fn the_client_side_authenticates_to_the_server_side_and_checks_its_signature() {
        let credential = ScramCredential::from_password(ScramMechanism::Sha512, "pw", random_bytes(16), 8192);
        let mut server = ScramServer::new(ScramMechanism::Sha512);
        let mut client = ScramClient::new(ScramMechanism::Sha512, "broker", "pw");
        let Step::Continue(first) = server.step(&client.first(), |_| Some(credential.clone())).unwrap() else {
            panic!()
        };
        let last = client.last(&first).unwrap();
        let Step::Done { user, response } = server.step(&last, |_| None).unwrap() else { panic!() };
        assert_eq!(user, "broker");
        assert_eq!(client.verify(&response), Ok(()));
        assert_eq!(client.verify(b"v=AAAA"), Err(ScramError::InvalidProof), "a server without the key is caught");
        let mut other = ScramClient::new(ScramMechanism::Sha512, "broker", "pw");
        assert_eq!(other.last(b"r=someone-else,s=c2FsdA==,i=4096"), Err(ScramError::NonceMismatch));
    }

    #[test]
    fn bootstrap_users_parse_kafkas_add_scram_syntax() {
        let user = BootstrapUser::parse("SCRAM-SHA-512=[name=admin,password=s3cret,iterations=8192]").unwrap();
        assert_eq!((user.mechanism, user.name.as_str(), user.iterations), (ScramMechanism::Sha512, "admin", 8192));
        assert!(user.credential().matches_password("s3cret"));
        assert!(BootstrapUser::parse("SCRAM-SHA-1=[name=a,password=b]").is_err());
        assert!(BootstrapUser::parse("SCRAM-SHA-256=[name=a]").is_err());
        assert!(BootstrapUser::parse("SCRAM-SHA-256=[name=a,password=b,iterations=10]").is_err());
    }

    #[test]
    fn rfc_7677_test_vector_derives_the_expected_keys() {
        // RFC 7677 §3: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096
        // iterations; the server's final message is v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=.
        let engine = base64::engine::general_purpose::STANDARD;
        let salt = engine.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", salt, 4096);
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let first = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let Step::Continue(server_first) = server.step(first, |_| Some(credential.clone())).unwrap() else { panic!() };
        // The server nonce is random: recompute the client's final for the nonce it chose.
        let client = TestClient {
            mechanism: ScramMechanism::Sha256,
            user: "user".into(),
            password: "pencil".into(),
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
        };
        let (client_final, expected) = client.last(&server_first);
        let Step::Done { user, response } = server.step(&client_final, |_| None).unwrap() else { panic!() };
        assert_eq!(user, "user");
        assert_eq!(response, expected);
        assert!(credential.matches_password("pencil"));
        assert!(!credential.matches_password("pencil2"));
        // The RFC's own exchange, with its server nonce, checks the key derivation itself.
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                    s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let signature = ScramMechanism::Sha256.hmac(&credential.server_key, auth.as_bytes());
        assert_eq!(engine.encode(signature), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn a_wrong_password_an_unknown_user_or_a_changed_nonce_fails() {
        for mechanism in ScramMechanism::ALL {
            let credential = ScramCredential::from_password(mechanism, "secret", random_bytes(16), MIN_ITERATIONS);
            let client = |password: &str| TestClient {
                mechanism,
                user: "a=b,c".into(),
                password: password.into(),
                nonce: "abc".into(),
            };
            let lookup = |user: &str| (user == "a=b,c").then(|| credential.clone());

            let mut server = ScramServer::new(mechanism);
            let Step::Continue(first) = server.step(&client("secret").first(), lookup).unwrap() else { panic!() };
            let (last, expected) = client("secret").last(&first);
            assert_eq!(server.step(&last, lookup), Ok(Step::Done { user: "a=b,c".into(), response: expected }));
            assert_eq!(server.step(b"again", lookup), Err(ScramError::Finished));

            let mut server = ScramServer::new(mechanism);
            let Step::Continue(first) = server.step(&client("wrong").first(), lookup).unwrap() else { panic!() };
            assert_eq!(server.step(&client("wrong").last(&first).0, lookup), Err(ScramError::InvalidProof));

            let mut server = ScramServer::new(mechanism);
            assert_eq!(server.step(b"n,,n=bob,r=xyz", lookup), Err(ScramError::UnknownUser(mechanism.name())));

            let mut server = ScramServer::new(mechanism);
            let Step::Continue(first) = server.step(&client("secret").first(), lookup).unwrap() else { panic!() };
            let (last, _) = client("secret").last(&first);
            let tampered = String::from_utf8(last).unwrap().replacen("r=abc", "r=abd", 1);
            assert_eq!(server.step(tampered.as_bytes(), lookup), Err(ScramError::NonceMismatch));

            let mut server = ScramServer::new(mechanism);
            assert_eq!(server.step(b"n,,n=a=3Db=2Cc,r=x,tokenauth=true", lookup), Err(ScramError::TokenAuth));
            let mut server = ScramServer::new(mechanism);
            assert_eq!(server.step(b"p=tls-unique,,n=u,r=x", lookup), Err(ScramError::Unsupported));
            let mut server = ScramServer::new(mechanism);
            assert_eq!(server.step(b"garbage", lookup), Err(ScramError::Malformed("client-first")));
        }
    }
}
