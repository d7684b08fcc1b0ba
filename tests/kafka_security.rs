//! Security of the Kafka listeners (issue 15) against the real `runnel` binary: a node with a
//! PLAINTEXT, an SSL, a SASL_PLAINTEXT and a SASL_SSL listener (certificates made here with
//! rcgen), SCRAM users created with AlterUserScramCredentials, and librdkafka (built with
//! OpenSSL) producing and consuming over SASL_SSL with SCRAM-SHA-512; wrong passwords, requests
//! before authentication, plaintext to a TLS port and TLS to a plaintext port fail cleanly while
//! the node keeps serving; sessions end after `connections.max.reauth.ms` and librdkafka
//! re-authenticates (KIP-368); a replaced certificate is used without a restart. Kafka's own
//! tools (`kafka-configs.sh`, the console clients with a client properties file) are in
//! `kafka_security_tools` below.

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest, MetadataRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use runnel::security::scram::ScramMechanism;
use support::pki::{authority, Pki};
use support::{wait_until, RawConn, Runnel, START_TIMEOUT};

/// A node with one listener of each security protocol.
fn secure_node(pki: &Pki, extra: &[&str]) -> Runnel {
    let keystore = pki.text("server.pem");
    let truststore = pki.text("ca.pem");
    let mut args = vec![
        "--listeners",
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "--ssl-keystore-location",
        &keystore,
        "--ssl-truststore-location",
        &truststore,
        "--ssl-client-auth",
        "requested",
    ];
    args.extend_from_slice(extra);
    Runnel::start(&args)
}

/// Creates (or replaces) `user`'s credential through AlterUserScramCredentials on the
/// PLAINTEXT listener, salted and hashed here as a client does.
fn add_user(node: &Runnel, user: &str, password: &str, mechanism: ScramMechanism) {
    let salt = runnel::security::scram::random_bytes(16);
    let salted = mechanism.salted_password(password.as_bytes(), &salt, 4096);
    let request =
        AlterUserScramCredentialsRequest::default().with_upsertions(vec![ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_string(user.to_string()))
            .with_mechanism(mechanism.id())
            .with_iterations(4096)
            .with_salt(Bytes::from(salt))
            .with_salted_password(Bytes::from(salted))]);
    let response = RawConn::open(node, "admin").call(0, &request);
    assert_eq!(response.results.len(), 1);
    assert_eq!(response.results[0].error_code, 0, "{:?}", response.results[0].error_message);
}

/// Errors librdkafka reports through its error callback.
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

impl ClientContext for Errors {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.lock().unwrap().push(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for Errors {}

impl Errors {
    fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

/// librdkafka settings for the listener `listener` of `node` with its security protocol.
fn secure_config(node: &Runnel, pki: &Pki, listener: &str, sasl: Option<(&str, &str, &str)>) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", node.listener(listener).to_string())
        .set("broker.address.family", "v4")
        .set("security.protocol", listener)
        .set("ssl.ca.location", pki.text("ca.pem"));
    if let Some((mechanism, user, password)) = sasl {
        config.set("sasl.mechanism", mechanism).set("sasl.username", user).set("sasl.password", password);
    }
    config
}

fn produce(config: &ClientConfig, topic: &str, count: usize) {
    let producer: FutureProducer = config.clone().set("acks", "all").create().expect("producer");
    support::block_on(async {
        for i in 0..count {
            let value = format!("secret {i}");
            let record = FutureRecord::<str, str>::to(topic).key("k").payload(&value);
            producer.send(record, Duration::from_secs(30)).await.expect("delivered");
        }
    });
}

fn consume_all(config: &ClientConfig, topic: &str, group: &str, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer =
        config.clone().set("group.id", group).set("auto.offset.reset", "earliest").create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut values = Vec::new();
    let done = wait_until(START_TIMEOUT, || {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("no consume error");
            use rdkafka::Message;
            values.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string());
        }
        values.len() >= expected
    });
    assert!(done, "consumed {} of {expected}", values.len());
    values
}

#[test]
fn librdkafka_produces_and_consumes_over_sasl_ssl_with_scram_sha_512() {
    // Proves the main path a platform team configures: SASL_SSL + SCRAM-SHA-512 with librdkafka,
    // bootstrap, metadata (each broker at its SASL_SSL endpoint), produce, a consumer group
    // (FindCoordinator answers the same listener) and fetch, all over TLS; and that SCRAM-SHA-256
    // and PLAIN (checked against the same stored credentials) authenticate too.
    let pki = Pki::new();
    let node = secure_node(&pki, &[]);
    add_user(&node, "alice", "alice-secret", ScramMechanism::Sha512);
    add_user(&node, "alice", "alice-secret", ScramMechanism::Sha256);
    support::create_topic(&node, "orders", 3);

    let config = secure_config(&node, &pki, "SASL_SSL", Some(("SCRAM-SHA-512", "alice", "alice-secret")));
    produce(&config, "orders", 100);
    let values = consume_all(&config, "orders", "secure-group", 100);
    assert_eq!(values.len(), 100);
    assert!(values.iter().all(|v| v.starts_with("secret ")));

    for (listener, mechanism) in
        [("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512")]
    {
        let consumer: BaseConsumer =
            secure_config(&node, &pki, listener, Some((mechanism, "alice", "alice-secret"))).create().expect("client");
        let metadata = consumer.fetch_metadata(Some("orders"), START_TIMEOUT).expect("metadata");
        assert_eq!(metadata.topics()[0].partitions().len(), 3, "{listener} {mechanism}");
        let port = node.listener(listener).port() as i32;
        assert!(metadata.brokers().iter().all(|b| b.port() == port), "{listener}: brokers at this listener's port");
    }
    // An SSL client without a certificate (ssl.client.auth=requested) is served as ANONYMOUS.
    let consumer: BaseConsumer = secure_config(&node, &pki, "PLAINTEXT", None).create().expect("client");
    assert!(consumer.fetch_metadata(Some("orders"), START_TIMEOUT).is_ok());
    let api = support::HttpApi::new(&node);
    assert!(
        api.metric_sum("kafka_server_socketserver_authentications_total{listener=\"SASL_SSL\",result=\"success\"}")
            >= 2.0
    );
    // /v1/cluster says how each listener is protected; on loopback nothing is warned about.
    let security = api.get("/v1/cluster").json["security"].clone();
    let listeners = security["listeners"].as_array().expect("listeners").clone();
    let authenticated: Vec<(&str, bool)> =
        listeners.iter().map(|l| (l["name"].as_str().unwrap(), l["authenticated"].as_bool().unwrap())).collect();
    assert_eq!(
        authenticated,
        vec![("PLAINTEXT", false), ("SSL", false), ("SASL_PLAINTEXT", true), ("SASL_SSL", true)],
        "{security}"
    );
    assert_eq!(security["warnings"].as_array().map(Vec::len), Some(0), "{security}");
}

#[test]
fn wrong_credentials_and_requests_before_authentication_are_refused_and_served_nothing() {
    // Proves a wrong password or unknown user gets librdkafka's authentication error and no
    // metadata, a request before SaslHandshake closes the connection without an answer, and a
    // failed PLAIN exchange answers SASL_AUTHENTICATION_FAILED and then closes; the node serves
    // everyone else meanwhile.
    let pki = Pki::new();
    let node = secure_node(&pki, &["--connection-failed-authentication-delay-ms", "700"]);
    add_user(&node, "alice", "alice-secret", ScramMechanism::Sha512);
    for (user, password) in [("alice", "wrong"), ("mallory", "alice-secret")] {
        let errors = Errors::default();
        let consumer: BaseConsumer<Errors> =
            secure_config(&node, &pki, "SASL_SSL", Some(("SCRAM-SHA-512", user, password)))
                .create_with_context(errors.clone())
                .expect("client");
        assert!(consumer.fetch_metadata(None, Duration::from_secs(5)).is_err(), "{user} was served metadata");
        let reported = wait_until(START_TIMEOUT, || {
            consumer.poll(Duration::from_millis(100));
            errors.text().contains("invalid credentials with SASL mechanism SCRAM-SHA-512")
        });
        assert!(reported, "librdkafka reports the authentication failure: {}", errors.text());
    }

    // Raw: Metadata before authenticating on SASL_PLAINTEXT gets no answer, only a close.
    let mut raw = raw_conn(&node, "SASL_PLAINTEXT");
    assert!(raw_call_is_closed(&mut raw, &MetadataRequest::default(), 12));

    // Raw PLAIN with a wrong password: SASL_AUTHENTICATION_FAILED, then the connection closes.
    let mut raw = RawConn::from_stream(TcpStream::connect(node.listener("SASL_PLAINTEXT")).unwrap(), "raw");
    let handshake = raw.call(1, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")));
    assert_eq!(handshake.error_code, 0);
    assert!(handshake.mechanisms.iter().any(|m| m.as_str() == "SCRAM-SHA-512"));
    let asked = Instant::now();
    let answer = raw.call(2, &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0alice\0nope")));
    assert_eq!(answer.error_code, 58, "SASL_AUTHENTICATION_FAILED");
    // KIP-306: the failure is answered only after connection.failed.authentication.delay.ms.
    assert!(asked.elapsed() >= Duration::from_millis(700), "answered after {:?}", asked.elapsed());
    assert!(raw_call_is_closed(&mut raw_from(raw), &MetadataRequest::default(), 12));

    // An unsupported mechanism is named with the enabled ones.
    let mut raw = RawConn::from_stream(TcpStream::connect(node.listener("SASL_PLAINTEXT")).unwrap(), "raw");
    let handshake = raw.call(1, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("GSSAPI")));
    assert_eq!(handshake.error_code, 33, "UNSUPPORTED_SASL_MECHANISM");
    assert_eq!(handshake.mechanisms.len(), 3);

    // The PLAINTEXT listener still serves.
    let metadata = RawConn::open(&node, "raw").call(12, &MetadataRequest::default());
    assert_eq!(metadata.brokers.len(), 1);
    assert_eq!(metadata.brokers[0].port, node.kafka_addr.port() as i32);
    let api = support::HttpApi::new(&node);
    assert!(
        api.metric_sum("kafka_server_socketserver_authentications_total{listener=\"SASL_SSL\",result=\"failure\"}")
            >= 2.0
    );
}

/// A raw connection to the listener `name` (plain TCP: for the non-TLS listeners).
fn raw_conn(node: &Runnel, name: &str) -> TcpStream {
    let stream = TcpStream::connect(node.listener(name)).expect("connect");
    stream.set_read_timeout(Some(START_TIMEOUT)).expect("timeout");
    stream
}

/// The stream under a RawConn (it is a thin wrapper): to check how the peer ends it.
fn raw_from(raw: RawConn) -> TcpStream {
    raw.into_stream()
}

/// Sends `request` as one frame and reports whether the peer closed the connection instead of
/// answering (EOF or reset before any response bytes).
fn raw_call_is_closed<R: kafka_protocol::protocol::Request>(stream: &mut TcpStream, request: &R, version: i16) -> bool {
    use bytes::BufMut;
    use kafka_protocol::messages::{ApiKey, RequestHeader};
    use kafka_protocol::protocol::Encodable;
    let api = ApiKey::try_from(R::KEY).expect("api");
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(99)
        .with_client_id(Some(StrBytes::from_static_str("raw")));
    let mut buf = bytes::BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, api.request_header_version(version)).expect("header");
    request.encode(&mut buf, version).expect("body");
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    stream.set_read_timeout(Some(START_TIMEOUT)).expect("timeout");
    if stream.write_all(&buf).is_err() {
        return true;
    }
    // Everything until the peer closes (a TLS listener answers clear bytes with a TLS alert
    // record, which is no Kafka response): served only if a response with our correlation id
    // came back. A read that times out means the connection was left open: not closed.
    let mut answer = Vec::new();
    let closed = match stream.read_to_end(&mut answer) {
        Ok(_) => true,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe),
    };
    let answered = answer.len() >= 8 && answer[4..8] == 99i32.to_be_bytes();
    closed && !answered
}

#[test]
fn plaintext_to_a_tls_port_and_tls_to_a_plaintext_port_fail_cleanly() {
    // Proves the two classic misconfigurations end in a closed connection, never a hang or a
    // crash: a Kafka request in the clear on the SSL listener (the TLS handshake fails), and
    // librdkafka speaking TLS to the PLAINTEXT listener (its ClientHello read as a frame size
    // beyond socket.request.max.bytes); the node keeps serving.
    let pki = Pki::new();
    let node = secure_node(&pki, &[]);
    let mut clear = raw_conn(&node, "SSL");
    assert!(raw_call_is_closed(&mut clear, &MetadataRequest::default(), 12), "a clear request on SSL is not served");

    let errors = Errors::default();
    let mut config = secure_config(&node, &pki, "SSL", None);
    config.set("bootstrap.servers", node.kafka_addr.to_string());
    let consumer: BaseConsumer<Errors> = config.create_with_context(errors.clone()).expect("client");
    assert!(consumer.fetch_metadata(None, Duration::from_secs(5)).is_err(), "TLS to PLAINTEXT served metadata");
    let reported = wait_until(START_TIMEOUT, || {
        consumer.poll(Duration::from_millis(100));
        errors.text().contains("SSL")
    });
    assert!(reported, "librdkafka reports an SSL failure: {}", errors.text());

    let metadata = RawConn::open(&node, "raw").call(12, &MetadataRequest::default());
    assert_eq!(metadata.brokers.len(), 1);
}

#[test]
fn sessions_end_after_connections_max_reauth_ms_and_librdkafka_reauthenticates() {
    // Proves KIP-368: SaslAuthenticate tells the session lifetime; a raw client that does not
    // re-authenticate is closed at its first request after it; librdkafka re-authenticates on its
    // open connections, so a producer keeps producing across several lifetimes without one of
    // its connections being closed for expiry.
    let pki = Pki::new();
    let node = secure_node(&pki, &["--connections-max-reauth-ms", "1500"]);
    add_user(&node, "alice", "alice-secret", ScramMechanism::Sha512);
    support::create_topic(&node, "audit", 1);

    let mut raw = RawConn::from_stream(TcpStream::connect(node.listener("SASL_PLAINTEXT")).unwrap(), "raw");
    assert_eq!(
        raw.call(1, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"))).error_code,
        0
    );
    let authenticated = Instant::now();
    let answer =
        raw.call(2, &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0alice\0alice-secret")));
    assert_eq!((answer.error_code, answer.session_lifetime_ms), (0, 1500));
    assert_eq!(raw.call(12, &MetadataRequest::default()).brokers.len(), 1, "served while the session lasts");

    // One producer, so its connections live through several session lifetimes: each must be
    // re-authenticated, or the broker closes it at its next request after expiry.
    let producer: FutureProducer =
        secure_config(&node, &pki, "SASL_SSL", Some(("SCRAM-SHA-512", "alice", "alice-secret")))
            .set("acks", "all")
            .create()
            .expect("producer");
    let started = Instant::now();
    let mut produced = 0;
    // Produce for four session lifetimes (the behaviour under test is time itself).
    wait_until(Duration::from_secs(30), || {
        let record = FutureRecord::<str, str>::to("audit").key("k").payload("entry");
        support::block_on(producer.send(record, Duration::from_secs(30))).expect("delivered");
        produced += 1;
        started.elapsed() > Duration::from_millis(6_000)
    });
    assert!(produced > 10, "{produced} records in 6 s");
    assert!(authenticated.elapsed() > Duration::from_millis(1500));
    let mut stream = raw_from(raw);
    assert!(raw_call_is_closed(&mut stream, &MetadataRequest::default(), 12), "the expired raw session is closed");

    let api = support::HttpApi::new(&node);
    assert_eq!(
        api.metric_sum("kafka_server_socketserver_expired_connections_killed_total"),
        1.0,
        "only the raw client expired"
    );
    assert!(
        api.metric_sum(
            "kafka_server_socketserver_authentications_total{listener=\"SASL_SSL\",result=\"reauthentication\"}"
        ) >= 1.0
    );
}

#[test]
fn a_replaced_certificate_is_served_without_a_restart() {
    // Proves certificate reload: the keystore is replaced by one issued by a new CA; within the
    // reload interval new connections get the new certificate (a client trusting only the new CA
    // connects), without restarting the node.
    let pki = Pki::new();
    let node = secure_node(&pki, &["--ssl-reload-interval-ms", "100"]);
    let new_ca = authority("Runnel renewed CA");
    std::fs::write(pki.path("new-ca.pem"), new_ca.cert.pem()).unwrap();
    let trusting_new = |pki: &Pki| {
        let mut config = secure_config(&node, pki, "SSL", None);
        config.set("ssl.ca.location", pki.text("new-ca.pem"));
        let consumer: BaseConsumer = config.create().expect("client");
        consumer.fetch_metadata(None, Duration::from_secs(3)).is_ok()
    };
    assert!(!trusting_new(&pki), "the old certificate is not trusted by the new CA");
    // Written to a temp file and renamed: the node never reads half a file.
    pki.issue(&new_ca, "server.pem.new");
    std::fs::rename(pki.path("server.pem.new"), pki.path("server.pem")).unwrap();
    assert!(wait_until(START_TIMEOUT, || trusting_new(&pki)), "the new certificate is served");
    assert!(node.is_running());
}

#[test]
fn scram_credentials_are_described_and_deleted_with_kafkas_errors() {
    // Proves DescribeUserScramCredentials/AlterUserScramCredentials answer as Kafka: mechanisms
    // and iterations (never keys), RESOURCE_NOT_FOUND for an unknown user, UNACCEPTABLE_CREDENTIAL
    // below 4096 iterations, DUPLICATE_RESOURCE for one credential altered twice; a deleted
    // credential no longer authenticates; credentials survive a restart (metadata quorum).
    let pki = Pki::new();
    let mut node = secure_node(&pki, &[]);
    add_user(&node, "alice", "alice-secret", ScramMechanism::Sha512);
    add_user(&node, "bob", "bob-secret", ScramMechanism::Sha256);
    let mut raw = RawConn::open(&node, "admin");
    let all = raw.call(0, &DescribeUserScramCredentialsRequest::default().with_users(None));
    let users: Vec<(String, Vec<(i8, i32)>)> = all
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.credential_infos.iter().map(|c| (c.mechanism, c.iterations)).collect()))
        .collect();
    assert_eq!(users, vec![("alice".to_string(), vec![(2, 4096)]), ("bob".to_string(), vec![(1, 4096)])]);
    let user = |name: &str| UserName::default().with_name(StrBytes::from_string(name.to_string()));
    let some = raw.call(
        0,
        &DescribeUserScramCredentialsRequest::default().with_users(Some(vec![user("carol"), user("bob"), user("bob")])),
    );
    let codes: Vec<(String, i16)> = some.results.iter().map(|r| (r.user.to_string(), r.error_code)).collect();
    assert_eq!(codes, vec![("bob".to_string(), 92), ("carol".to_string(), 91)]);

    let upsert = |name: &str, mechanism: i8, iterations: i32| {
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_string(name.to_string()))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt"))
            .with_salted_password(Bytes::from(vec![7u8; if mechanism == 1 { 32 } else { 64 }]))
    };
    let altered = raw.call(
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            upsert("weak", 1, 100),
            upsert("twice", 2, 4096),
            upsert("twice", 2, 8192),
            upsert("odd", 9, 4096),
        ]),
    );
    let codes: Vec<(String, i16)> = altered.results.iter().map(|r| (r.user.to_string(), r.error_code)).collect();
    assert_eq!(codes, vec![("odd".to_string(), 33), ("twice".to_string(), 92), ("weak".to_string(), 93)]);

    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;
    let delete = |name: &str, mechanism: i8| {
        ScramCredentialDeletion::default().with_name(StrBytes::from_string(name.to_string())).with_mechanism(mechanism)
    };
    let deleted = raw.call(
        0,
        &AlterUserScramCredentialsRequest::default().with_deletions(vec![delete("bob", 1), delete("carol", 1)]),
    );
    let codes: Vec<(String, i16)> = deleted.results.iter().map(|r| (r.user.to_string(), r.error_code)).collect();
    assert_eq!(codes, vec![("bob".to_string(), 0), ("carol".to_string(), 91)]);
    let bob: BaseConsumer<Errors> = secure_config(&node, &pki, "SASL_PLAINTEXT", Some(("PLAIN", "bob", "bob-secret")))
        .create_with_context(Errors::default())
        .expect("client");
    assert!(bob.fetch_metadata(None, Duration::from_secs(3)).is_err(), "a deleted user is refused");

    node.terminate();
    node.restart();
    let alice: BaseConsumer = secure_config(&node, &pki, "SASL_SSL", Some(("SCRAM-SHA-512", "alice", "alice-secret")))
        .create()
        .expect("client");
    assert!(alice.fetch_metadata(None, START_TIMEOUT).is_ok(), "credentials survive a restart");
}

#[test]
fn kafka_security_tools_manage_scram_users_and_the_console_clients_use_sasl_ssl() {
    // Proves Kafka's own tools work unchanged: kafka-configs.sh adds and describes SCRAM users
    // (AlterUserScramCredentials/DescribeUserScramCredentials), and the Java console producer
    // and consumer configured by a client properties file (SASL_SSL, SCRAM-SHA-512, a PEM
    // truststore) produce and consume.
    let Some(tools) = (match kafka_tools::kafka_tools() {
        Ok(tools) => Some(tools),
        Err(reason) => {
            kafka_tools::skip(reason);
            None
        }
    }) else {
        return;
    };
    let pki = Pki::new();
    let node = secure_node(&pki, &[]);
    let admin = node.bootstrap();
    let out = tools.run(
        "configs",
        &[
            "--bootstrap-server",
            &admin,
            "--alter",
            "--add-config",
            "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
        ],
        None,
    );
    assert!(out.success, "{}", out.text());
    let out = tools.run(
        "configs",
        &["--bootstrap-server", &admin, "--describe", "--entity-type", "users", "--entity-name", "alice"],
        None,
    );
    assert!(out.success && out.text().contains("SCRAM-SHA-512=iterations=8192"), "{}", out.text());
    support::create_topic(&node, "payments", 1);

    let properties = pki.path("client.properties");
    std::fs::write(
        &properties,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"alice-secret\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            pki.text("ca.pem")
        ),
    )
    .unwrap();
    let secure = node.listener("SASL_SSL").to_string();
    let properties = properties.to_str().unwrap();
    let out = tools.run(
        "console-producer",
        &["--bootstrap-server", &secure, "--topic", "payments", "--producer.config", properties],
        Some("one\ntwo\nthree\n"),
    );
    assert!(out.success, "{}", out.text());
    let out = tools.run(
        "console-consumer",
        &[
            "--bootstrap-server",
            &secure,
            "--topic",
            "payments",
            "--from-beginning",
            "--max-messages",
            "3",
            "--consumer.config",
            properties,
        ],
        None,
    );
    assert!(out.success, "{}", out.text());
    assert_eq!(out.stdout.lines().filter(|l| ["one", "two", "three"].contains(l)).count(), 3, "{}", out.text());

    // A wrong password in the properties file: the tool fails with Kafka's message.
    let wrong = pki.path("wrong.properties");
    std::fs::write(&wrong, std::fs::read_to_string(properties).unwrap().replace("alice-secret", "nope")).unwrap();
    let out = tools.run(
        "topics",
        &["--bootstrap-server", &secure, "--list", "--command-config", wrong.to_str().unwrap()],
        None,
    );
    assert!(!out.success, "a wrong password lists topics: {}", out.text());
    assert!(out.text().contains("invalid credentials"), "{}", out.text());
}

// ---- ACLs ----

/// A node with the standard authorizer: PLAINTEXT is the operators' listener (User:ANONYMOUS is
/// a super user there, Kafka's internal-listener setup), clients authenticate on SASL_PLAINTEXT
/// and SASL_SSL; alice and bob exist from the start (`--add-scram`).
fn acl_node(pki: &Pki) -> Runnel {
    secure_node(
        pki,
        &[
            "--authorizer-class-name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--super-users",
            "User:ANONYMOUS;User:admin",
            "--add-scram",
            "SCRAM-SHA-512=[name=alice,password=alice-secret]",
            "--add-scram",
            "SCRAM-SHA-512=[name=bob,password=bob-secret]",
        ],
    )
}

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;

fn user_config(node: &Runnel, pki: &Pki, user: &str) -> ClientConfig {
    let password = format!("{user}-secret");
    let mut config = secure_config(node, pki, "SASL_PLAINTEXT", Some(("SCRAM-SHA-512", user, &password)));
    config.set("sasl.password", password);
    config
}

#[test]
fn acls_allow_and_deny_every_api_family_for_librdkafka_clients() {
    // Proves the authorizer on the paths clients use, with an allowed (alice) and a denied (bob)
    // principal: produce (WRITE topic), metadata (topics bob may not describe are hidden),
    // consume in a group (READ group and topic), transactions (WRITE transactional id, offsets
    // into the transaction), admin (CREATE by prefix, DELETE, configs), and ACL management
    // itself (ALTER cluster); a denied request fails with Kafka's authorization error and
    // changes nothing.
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
    use rdkafka::error::RDKafkaErrorCode;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::Message;
    let pki = Pki::new();
    let node = acl_node(&pki);
    support::create_topic(&node, "orders", 2);
    support::allow_acls(
        &node,
        &[
            (TOPIC, "orders", LITERAL, "User:alice", WRITE),
            (TOPIC, "orders", LITERAL, "User:alice", READ),
            (GROUP, "alice-", PREFIXED, "User:alice", READ),
            (TRANSACTIONAL_ID, "alice-tx", LITERAL, "User:alice", WRITE),
            (TOPIC, "alice-", PREFIXED, "User:alice", CREATE),
        ],
    );
    let alice = user_config(&node, &pki, "alice");
    let bob = user_config(&node, &pki, "bob");

    // Produce.
    produce(&alice, "orders", 10);
    let producer: FutureProducer = bob.clone().set("message.timeout.ms", "10000").create().expect("producer");
    let denied =
        support::block_on(producer.send(FutureRecord::<str, str>::to("orders").payload("x"), Duration::from_secs(15)));
    let code = denied.expect_err("bob may not write").0.rdkafka_error_code();
    assert_eq!(code, Some(RDKafkaErrorCode::TopicAuthorizationFailed));

    // Metadata: bob does not see the topic in a full listing.
    let list = |config: &ClientConfig| -> Vec<String> {
        let consumer: BaseConsumer = config.create().expect("client");
        let metadata = consumer.fetch_metadata(None, START_TIMEOUT).expect("metadata");
        metadata.topics().iter().map(|t| t.name().to_string()).collect()
    };
    assert!(list(&alice).contains(&"orders".to_string()));
    assert!(!list(&bob).contains(&"orders".to_string()), "bob may not describe orders");

    // Consume in a group.
    let values = consume_all(&alice, "orders", "alice-group", 10);
    assert_eq!(values.len(), 10);
    let consumer: BaseConsumer =
        bob.clone().set("group.id", "alice-group").set("auto.offset.reset", "earliest").create().expect("consumer");
    consumer.subscribe(&["orders"]).expect("subscribe");
    let mut refused = None;
    wait_until(START_TIMEOUT, || {
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(200)) {
            refused = e.rdkafka_error_code();
        }
        refused.is_some()
    });
    assert!(
        matches!(
            refused,
            Some(RDKafkaErrorCode::GroupAuthorizationFailed | RDKafkaErrorCode::TopicAuthorizationFailed)
        ),
        "bob's group consumer: {refused:?}"
    );

    // Transactions: alice commits records and group offsets in one transaction; bob may not use
    // a transactional id.
    let txn: BaseProducer = alice.clone().set("transactional.id", "alice-tx").create().expect("producer");
    txn.init_transactions(START_TIMEOUT).expect("init");
    txn.begin_transaction().expect("begin");
    txn.send(BaseRecord::<str, str>::to("orders").payload("in a transaction")).expect("queued");
    let offsets = {
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition_offset("orders", 0, rdkafka::Offset::Offset(1)).unwrap();
        list
    };
    let group_consumer: BaseConsumer = alice.clone().set("group.id", "alice-txn-group").create().expect("consumer");
    let metadata = group_consumer.group_metadata().expect("group metadata");
    txn.send_offsets_to_transaction(&offsets, &metadata, START_TIMEOUT).expect("offsets in the transaction");
    txn.commit_transaction(START_TIMEOUT).expect("commit");
    let bob_txn: BaseProducer = bob.clone().set("transactional.id", "bob-tx").create().expect("producer");
    let refused = bob_txn.init_transactions(Duration::from_secs(15)).expect_err("bob may not use bob-tx");
    assert_eq!(refused.rdkafka_error_code(), Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed), "{refused}");

    // Admin: CREATE by prefix, nothing else.
    let create = |config: &ClientConfig, name: &str| -> Option<RDKafkaErrorCode> {
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = config.create().expect("admin");
        let topic = NewTopic::new(name, 1, TopicReplication::Fixed(1));
        let results = support::block_on(admin.create_topics(&[topic], &AdminOptions::new())).expect("answered");
        results[0].as_ref().err().map(|(_, code)| *code)
    };
    assert_eq!(create(&alice, "alice-new"), None);
    assert_eq!(create(&alice, "other"), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
    assert_eq!(create(&bob, "alice-bob"), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = bob.create().expect("admin");
    let deleted = support::block_on(admin.delete_topics(&["orders"], &AdminOptions::new())).expect("answered");
    assert_eq!(deleted[0].as_ref().err().map(|(_, c)| *c), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
    let described =
        support::block_on(admin.describe_configs(&[ResourceSpecifier::Topic("orders")], &AdminOptions::new()))
            .expect("answered");
    // rust-rdkafka drops a resource's error code (its DescribeConfigs result is always Ok): the
    // refusal shows as a resource without a single config entry.
    assert!(described[0].as_ref().map_or(true, |r| r.entries.is_empty()), "bob may not describe the configs of orders");

    // ACL management needs ALTER on the cluster; the super user's view shows alice's ACLs.
    use kafka_protocol::messages::{CreateAclsRequest, DescribeAclsRequest};
    let mut bob_raw = RawConn::from_stream(TcpStream::connect(node.listener("SASL_PLAINTEXT")).unwrap(), "raw");
    assert_eq!(
        bob_raw.call(1, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"))).error_code,
        0
    );
    let auth =
        bob_raw.call(2, &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0bob\0bob-secret")));
    assert_eq!(auth.error_code, 0);
    let creation = kafka_protocol::messages::create_acls_request::AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(StrBytes::from_static_str("orders"))
        .with_resource_pattern_type(LITERAL)
        .with_principal(StrBytes::from_static_str("User:bob"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(WRITE)
        .with_permission_type(3);
    let refused = bob_raw.call(3, &CreateAclsRequest::default().with_creations(vec![creation]));
    assert_eq!(refused.results[0].error_code, 31, "CLUSTER_AUTHORIZATION_FAILED");
    let described = RawConn::open(&node, "admin").call(
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(1)
            .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1),
    );
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.iter().map(|r| r.acls.len()).sum::<usize>(), 5);
    let by_bob = bob_raw.call(
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1),
    );
    assert_eq!(by_bob.error_code, 31);

    // The committed transaction is there for alice, read_committed.
    let committed: BaseConsumer = alice
        .clone()
        .set("group.id", "alice-check")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    committed.subscribe(&["orders"]).expect("subscribe");
    let mut seen = 0;
    let found = wait_until(START_TIMEOUT, || {
        if let Some(Ok(message)) = committed.poll(Duration::from_millis(200)) {
            seen += usize::from(message.payload() == Some(b"in a transaction".as_slice()));
        }
        seen == 1
    });
    assert!(found, "the committed transaction's record is readable");
}

#[test]
fn kafka_acls_tool_adds_lists_and_removes_acls_with_filters() {
    // Proves kafka-acls.sh (the Java AdminClient's CreateAcls/DescribeAcls/DeleteAcls) works
    // unchanged: add literal and prefixed ACLs, list them filtered by principal and by pattern
    // type, remove one with --force; and that a node without an authorizer answers
    // SECURITY_DISABLED as Kafka does.
    let Some(tools) = (match kafka_tools::kafka_tools() {
        Ok(tools) => Some(tools),
        Err(reason) => {
            kafka_tools::skip(reason);
            None
        }
    }) else {
        return;
    };
    let pki = Pki::new();
    let node = acl_node(&pki);
    let b = node.bootstrap();
    let acls = |args: &[&str]| {
        let mut all = vec!["--bootstrap-server", b.as_str()];
        all.extend_from_slice(args);
        tools.run("acls", &all, None)
    };
    let out = acls(&["--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"]);
    assert!(out.success, "{}", out.text());
    let out = acls(&[
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "logs-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    assert!(out.success, "{}", out.text());
    let out = acls(&["--add", "--deny-principal", "User:bob", "--operation", "All", "--group", "payments"]);
    assert!(out.success, "{}", out.text());

    let out = acls(&["--list", "--principal", "User:alice"]);
    let text = out.text();
    assert!(out.success && text.contains("orders") && text.contains("logs-") && !text.contains("payments"), "{text}");
    let out = acls(&["--list", "--topic", "logs-", "--resource-pattern-type", "prefixed"]);
    assert!(out.success && out.text().contains("WRITE") && !out.text().contains("orders"), "{}", out.text());
    let out = acls(&["--list", "--topic", "logs-eu", "--resource-pattern-type", "match"]);
    assert!(out.success && out.text().contains("logs-"), "MATCH finds the prefixed ACL: {}", out.text());

    let out =
        acls(&["--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"]);
    assert!(out.success, "{}", out.text());
    let out = acls(&["--list"]);
    assert!(out.success && !out.text().contains("name=orders") && out.text().contains("payments"), "{}", out.text());

    let open = Runnel::start(&[]);
    let out = tools.run("acls", &["--bootstrap-server", &open.bootstrap(), "--list"], None);
    assert!(!out.success && out.text().contains("No Authorizer is configured"), "{}", out.text());
}

#[test]
fn a_cluster_replicates_over_tls_between_brokers_that_authenticate_by_certificate() {
    // Proves TLS between brokers: three nodes whose only Kafka listener is SSL with required
    // client certificates and the standard authorizer; the brokers' replica fetchers and peer
    // calls present the node certificate, whose subject (CN=runnel) is a super user (a
    // client's is O=Runnel,CN=alice: RFC 4514 order, as Kafka's X500Principal prints it), so
    // acks=all produce (followers fetching as CLUSTER_ACTION) and a consumer group work for a
    // client certificate that is a super user, while a client certificate without ACLs is
    // refused and a client without a certificate cannot connect. The nodes' key is encrypted
    // (`ssl.key.password`), as a platform team's keystore often is; the raft listener has a
    // keystore of its own (`listener.name.controller.ssl.keystore.location`), which its
    // clients present too.
    let (pki, ca) = Pki::with_ca();
    pki.issue_encrypted(&ca, "server-encrypted.pem", "keystore-secret");
    let keystore = pki.text("server-encrypted.pem");
    let truststore = pki.text("ca.pem");
    let controller_keystore = format!("listener.name.controller.ssl.keystore.location={}", pki.text("server.pem"));
    let cluster = support::cluster::Cluster::start(
        3,
        &[
            "--listener-config",
            &controller_keystore,
            "--listener-security-protocol-map",
            "PLAINTEXT:SSL,CONTROLLER:SSL",
            "--ssl-keystore-location",
            &keystore,
            "--ssl-key-password",
            "keystore-secret",
            "--ssl-truststore-location",
            &truststore,
            "--ssl-client-auth",
            "required",
            "--authorizer-class-name",
            "standard",
            "--super-users",
            "User:CN=runnel;User:O=Runnel,CN=alice",
        ],
    );
    let bootstrap: Vec<String> = cluster.ids().map(|id| cluster.node(id).kafka_addr.to_string()).collect();
    let client = |cert: Option<(String, String)>| {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap.join(","))
            .set("broker.address.family", "v4")
            .set("security.protocol", "SSL")
            .set("ssl.ca.location", &truststore);
        if let Some((cert, key)) = cert {
            config.set("ssl.certificate.location", cert).set("ssl.key.location", key);
        }
        config
    };
    replicate_with_a_full_isr(
        &client(Some(pki.issue_client(&ca, "alice"))),
        &client(Some(pki.issue_client(&ca, "mallory"))),
    );

    let anonymous: BaseConsumer = client(None).create().expect("client");
    assert!(
        anonymous.fetch_metadata(None, Duration::from_secs(5)).is_err(),
        "a client without a certificate is served"
    );

    // The metadata quorum's raft listeners speak TLS too (CONTROLLER:SSL): a TLS client with a
    // certificate from the CA completes a handshake there (a plain raft listener would read its
    // ClientHello as an oversized frame and close).
    let (cert, key) = pki.issue_client(&ca, "raft-probe");
    assert!(tls_handshake(cluster.controller_addr(1), &truststore, &cert, &key), "the raft listener speaks TLS");
    // Every raft request can change the cluster's metadata: a certificate from the same CA
    // whose principal lacks CLUSTER_ACTION is not served (it was: any record could be
    // proposed through it, ACLs and credentials included), while the nodes' own is.
    assert!(!raft_answers(cluster.controller_addr(1), &truststore, &cert, &key), "a client certificate is served");
    let node = (pki.text("server.pem"), pki.text("server.pem"));
    assert!(
        raft_answers(cluster.controller_addr(1), &truststore, &node.0, &node.1),
        "the node's certificate is refused"
    );
}

#[test]
fn an_encrypted_key_without_its_password_stops_the_node_with_the_reason() {
    // Proves: a keystore whose key is encrypted starts nothing without ssl.key.password, or
    // with a wrong one, and says which (the node exits; no listener serves a half-configured
    // TLS).
    let (pki, ca) = Pki::with_ca();
    pki.issue_encrypted(&ca, "server-encrypted.pem", "keystore-secret");
    let binary = std::env::var_os("RUNNEL_TEST_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_runnel").into());
    let data = tempfile::tempdir().expect("temp dir");
    let start = |password: Option<&str>| {
        let mut command = std::process::Command::new(&binary);
        command
            .args(["serve", "--listeners", "SSL://127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .args(["--controller-listen", "127.0.0.1:0", "--ssl-keystore-location"])
            .arg(pki.path("server-encrypted.pem"))
            .arg("--data-dir")
            .arg(data.path())
            .env_remove("RUNNEL_SSL_KEY_PASSWORD");
        if let Some(password) = password {
            command.args(["--ssl-key-password", password]);
        }
        let output = command.output().expect("run runnel serve");
        assert!(!output.status.success(), "started with key password {password:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = start(None);
    assert!(stderr.contains("is encrypted: give ssl.key.password"), "{stderr}");
    let stderr = start(Some("guess"));
    assert!(stderr.contains("ssl.key.password does not decrypt the private key"), "{stderr}");
    assert!(!stderr.contains("guess"), "the password is not printed: {stderr}");
}

#[test]
fn a_listener_with_its_own_certificate_serves_it_while_the_others_keep_the_nodes() {
    // Proves Kafka's listener-prefixed TLS settings end to end: INTERNAL serves the node's
    // certificate (the internal CA) and requires client certificates; EXTERNAL serves its own
    // (another CA, its key encrypted under its own password) and asks for none. librdkafka
    // trusting only the public CA produces and consumes through EXTERNAL without a certificate,
    // and cannot connect to INTERNAL; a client trusting only the internal CA cannot use
    // EXTERNAL.
    let (pki, _internal_ca) = Pki::with_ca();
    let public_ca = authority("Runnel public CA");
    std::fs::write(pki.path("public-ca.pem"), public_ca.cert.pem()).expect("write CA");
    pki.issue_encrypted(&public_ca, "public.pem", "public-secret");
    let (keystore, truststore) = (pki.text("server.pem"), pki.text("ca.pem"));
    let external_keystore = format!("listener.name.external.ssl.keystore.location={}", pki.text("public.pem"));
    let node = Runnel::start(&[
        "--listeners",
        "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--listener-security-protocol-map",
        "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,EXTERNAL:SSL",
        "--ssl-keystore-location",
        &keystore,
        "--ssl-truststore-location",
        &truststore,
        "--ssl-client-auth",
        "required",
        "--listener-config",
        &external_keystore,
        "--listener-config",
        "listener.name.external.ssl.key.password=public-secret",
        "--listener-config",
        "listener.name.external.ssl.client.auth=none",
    ]);
    support::create_topic(&node, "public", 1);
    let client = |listener: &str, ca: &str| {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", node.listener(listener).to_string())
            .set("broker.address.family", "v4")
            .set("security.protocol", "SSL")
            .set("ssl.ca.location", pki.text(ca))
            .set("socket.timeout.ms", "5000");
        config
    };
    let external = client("EXTERNAL", "public-ca.pem");
    produce(&external, "public", 5);
    assert_eq!(consume_all(&external, "public", "public-readers", 5).len(), 5);

    let refused = |config: ClientConfig| {
        let consumer: BaseConsumer = config.create().expect("client");
        consumer.fetch_metadata(None, Duration::from_secs(5)).is_err()
    };
    assert!(refused(client("INTERNAL", "public-ca.pem")), "INTERNAL serves the public certificate");
    assert!(refused(client("INTERNAL", "ca.pem")), "INTERNAL serves a client without a certificate");
    assert!(refused(client("EXTERNAL", "ca.pem")), "EXTERNAL serves the internal certificate");
}

/// Whether a TLS handshake with a client certificate completes at `addr` (rustls, blocking).
/// Whether the raft listener at `addr` answers a request (a read-index probe addressed to
/// another node, which any admitted peer gets an answer to) from a TLS client with `cert`.
fn raft_answers(addr: std::net::SocketAddr, ca: &str, cert: &str, key: &str) -> bool {
    let Some((mut connection, mut tcp)) = tls_connect(addr, ca, cert, key) else { return false };
    let body = br#"{"from":99,"to":98,"body":{"ReadIndex":{"timeout_ms":100}}}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    let mut stream = rustls::Stream::new(&mut connection, &mut tcp);
    if stream.write_all(&frame).is_err() {
        return false;
    }
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).is_ok()
}

fn tls_handshake(addr: std::net::SocketAddr, ca: &str, cert: &str, key: &str) -> bool {
    tls_connect(addr, ca, cert, key).is_some()
}

fn tls_connect(
    addr: std::net::SocketAddr,
    ca: &str,
    cert: &str,
    key: &str,
) -> Option<(rustls::ClientConnection, TcpStream)> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("root");
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).expect("cert").collect::<Result<_, _>>().expect("certs");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    #[allow(deprecated)]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client config");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("connection");
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    while connection.is_handshaking() {
        if connection.complete_io(&mut tcp).is_err() {
            return None;
        }
    }
    Some((connection, tcp))
}

/// librdkafka's ACL admin calls, which rust-rdkafka does not wrap, through its C API
/// (rdkafka-sys): each call's result event polled from a queue of its own.
mod librdkafka_acls {
    use std::ffi::{CStr, CString};
    use std::ptr;

    use rdkafka_sys as rd;
    use rdkafka_sys::bindings::{
        rd_kafka_AclOperation_t as Op, rd_kafka_AclPermissionType_t as Perm, rd_kafka_ResourcePatternType_t as Pattern,
        rd_kafka_ResourceType_t as Kind,
    };

    /// An ACL or filter: (resource type, name, pattern, principal, host, operation, permission).
    pub type Acl<'a> = (Kind, Option<&'a str>, Pattern, Option<&'a str>, Option<&'a str>, Op, Perm);

    /// (resource name, principal, operation) of a returned binding.
    pub type Described = (String, String, Op);

    fn cstring(text: Option<&str>) -> Option<CString> {
        text.map(|t| CString::new(t).expect("no NUL"))
    }

    fn binding(acl: &Acl<'_>, filter: bool) -> *mut rd::bindings::rd_kafka_AclBinding_t {
        let (kind, name, pattern, principal, host, op, perm) = *acl;
        let (name, principal, host) = (cstring(name), cstring(principal), cstring(host));
        let as_ptr = |c: &Option<CString>| c.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let mut errstr = [0 as std::ffi::c_char; 512];
        // The two constructors take the same arguments (a filter is a binding type in C).
        let new =
            if filter { rd::bindings::rd_kafka_AclBindingFilter_new } else { rd::bindings::rd_kafka_AclBinding_new };
        // SAFETY: every pointer is a NUL-terminated string alive for the call, or NULL where the
        // API allows it (filters); errstr is a writable buffer of the given size.
        let made = unsafe {
            new(
                kind,
                as_ptr(&name),
                pattern,
                as_ptr(&principal),
                as_ptr(&host),
                op,
                perm,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        // SAFETY: librdkafka wrote a NUL-terminated message into errstr on failure.
        assert!(!made.is_null(), "{:?}", unsafe { CStr::from_ptr(errstr.as_ptr()) });
        made
    }

    /// Waits for the admin result event on `queue` (30 s), checking the request-level error.
    unsafe fn wait(queue: *mut rd::bindings::rd_kafka_queue_t) -> *mut rd::bindings::rd_kafka_event_t {
        let event = rd::bindings::rd_kafka_queue_poll(queue, 30_000);
        assert!(!event.is_null(), "no admin result within 30 s");
        let code = rd::bindings::rd_kafka_event_error(event);
        assert_eq!(code as i32, 0, "admin call failed: {code:?}");
        event
    }

    unsafe fn describe_bindings(list: *mut *const rd::bindings::rd_kafka_AclBinding_t, count: usize) -> Vec<Described> {
        (0..count)
            .map(|i| {
                let acl = *list.add(i);
                let text = |p: *const std::ffi::c_char| CStr::from_ptr(p).to_string_lossy().into_owned();
                (
                    text(rd::bindings::rd_kafka_AclBinding_name(acl)),
                    text(rd::bindings::rd_kafka_AclBinding_principal(acl)),
                    rd::bindings::rd_kafka_AclBinding_operation(acl),
                )
            })
            .collect()
    }

    /// CreateAcls; returns each ACL's error code (0: created).
    pub fn create(rk: *mut rd::bindings::rd_kafka_t, acls: &[Acl<'_>]) -> Vec<i32> {
        let mut bindings: Vec<_> = acls.iter().map(|a| binding(a, false)).collect();
        // SAFETY: rk is a live client; the bindings and queue live until destroyed below; the
        // result arrays belong to the event, read before it is destroyed.
        unsafe {
            let queue = rd::bindings::rd_kafka_queue_new(rk);
            rd::bindings::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), bindings.len(), ptr::null(), queue);
            let event = wait(queue);
            let result = rd::bindings::rd_kafka_event_CreateAcls_result(event);
            let mut count = 0;
            let results = rd::bindings::rd_kafka_CreateAcls_result_acls(result, &mut count);
            let codes = (0..count)
                .map(|i| {
                    let error = rd::bindings::rd_kafka_acl_result_error(*results.add(i));
                    if error.is_null() {
                        0
                    } else {
                        rd::bindings::rd_kafka_error_code(error) as i32
                    }
                })
                .collect();
            rd::bindings::rd_kafka_event_destroy(event);
            rd::bindings::rd_kafka_queue_destroy(queue);
            for b in bindings {
                rd::bindings::rd_kafka_AclBinding_destroy(b);
            }
            codes
        }
    }

    /// DescribeAcls with one filter.
    pub fn describe(rk: *mut rd::bindings::rd_kafka_t, filter: &Acl<'_>) -> Vec<Described> {
        let filter = binding(filter, true);
        // SAFETY: as in `create`.
        unsafe {
            let queue = rd::bindings::rd_kafka_queue_new(rk);
            rd::bindings::rd_kafka_DescribeAcls(rk, filter, ptr::null(), queue);
            let event = wait(queue);
            let result = rd::bindings::rd_kafka_event_DescribeAcls_result(event);
            let mut count = 0;
            let acls = rd::bindings::rd_kafka_DescribeAcls_result_acls(result, &mut count);
            let described = describe_bindings(acls, count);
            rd::bindings::rd_kafka_event_destroy(event);
            rd::bindings::rd_kafka_queue_destroy(queue);
            rd::bindings::rd_kafka_AclBinding_destroy(filter);
            described
        }
    }

    /// DeleteAcls with one filter; returns the deleted (matching) ACLs.
    pub fn delete(rk: *mut rd::bindings::rd_kafka_t, filter: &Acl<'_>) -> Vec<Described> {
        let mut filters = [binding(filter, true)];
        // SAFETY: as in `create`.
        unsafe {
            let queue = rd::bindings::rd_kafka_queue_new(rk);
            rd::bindings::rd_kafka_DeleteAcls(rk, filters.as_mut_ptr(), 1, ptr::null(), queue);
            let event = wait(queue);
            let result = rd::bindings::rd_kafka_event_DeleteAcls_result(event);
            let mut count = 0;
            let responses = rd::bindings::rd_kafka_DeleteAcls_result_responses(result, &mut count);
            assert_eq!(count, 1);
            let response = *responses;
            assert!(rd::bindings::rd_kafka_DeleteAcls_result_response_error(response).is_null());
            let mut matching = 0;
            let acls = rd::bindings::rd_kafka_DeleteAcls_result_response_matching_acls(response, &mut matching);
            let deleted = describe_bindings(acls, matching);
            rd::bindings::rd_kafka_event_destroy(event);
            rd::bindings::rd_kafka_queue_destroy(queue);
            rd::bindings::rd_kafka_AclBinding_destroy(filters[0]);
            deleted
        }
    }
}

#[test]
fn librdkafka_admin_client_creates_describes_and_deletes_acls_with_filters() {
    // Proves librdkafka's AdminClient ACL calls (rd_kafka_CreateAcls/DescribeAcls/DeleteAcls)
    // behave as against Kafka: literal and prefixed ACLs created, filters by pattern type
    // (PREFIXED, MATCH, ANY), principal and operation, a delete returning what it matched, and a
    // CLUSTER resource with another name than kafka-cluster refused as INVALID_REQUEST.
    use librdkafka_acls::{create, delete, describe};
    use rdkafka_sys::bindings::{
        rd_kafka_AclOperation_t as Op, rd_kafka_AclPermissionType_t as Perm, rd_kafka_ResourcePatternType_t as Pattern,
        rd_kafka_ResourceType_t as Kind,
    };
    let pki = Pki::new();
    let node = acl_node(&pki);
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        support::client_config(&node, &[]).create().expect("admin");
    let rk = admin.inner().native_ptr();
    let (topic, cluster) = (Kind::RD_KAFKA_RESOURCE_TOPIC, Kind::RD_KAFKA_RESOURCE_BROKER);
    let (literal, prefixed) = (Pattern::RD_KAFKA_RESOURCE_PATTERN_LITERAL, Pattern::RD_KAFKA_RESOURCE_PATTERN_PREFIXED);
    let allow = Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW;
    let codes = create(
        rk,
        &[
            (topic, Some("orders"), literal, Some("User:alice"), Some("*"), Op::RD_KAFKA_ACL_OPERATION_READ, allow),
            (topic, Some("logs-"), prefixed, Some("User:alice"), Some("*"), Op::RD_KAFKA_ACL_OPERATION_WRITE, allow),
            (topic, Some("orders"), literal, Some("User:bob"), Some("*"), Op::RD_KAFKA_ACL_OPERATION_DESCRIBE, allow),
            (
                cluster,
                Some("not-the-cluster"),
                literal,
                Some("User:bob"),
                Some("*"),
                Op::RD_KAFKA_ACL_OPERATION_ALTER,
                allow,
            ),
        ],
    );
    assert_eq!(codes, vec![0, 0, 0, 42], "the last is INVALID_REQUEST");

    let any = (
        Kind::RD_KAFKA_RESOURCE_ANY,
        None,
        Pattern::RD_KAFKA_RESOURCE_PATTERN_ANY,
        None,
        None,
        Op::RD_KAFKA_ACL_OPERATION_ANY,
        Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
    );
    assert_eq!(describe(rk, &any).len(), 3);
    let only_prefixed =
        (topic, None, prefixed, None, None, Op::RD_KAFKA_ACL_OPERATION_ANY, Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ANY);
    assert_eq!(
        describe(rk, &only_prefixed),
        vec![("logs-".to_string(), "User:alice".to_string(), Op::RD_KAFKA_ACL_OPERATION_WRITE)]
    );
    let matching = (
        topic,
        Some("logs-eu"),
        Pattern::RD_KAFKA_RESOURCE_PATTERN_MATCH,
        None,
        None,
        Op::RD_KAFKA_ACL_OPERATION_ANY,
        Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
    );
    assert_eq!(describe(rk, &matching).len(), 1, "MATCH finds the prefixed ACL covering logs-eu");
    let bobs = (
        Kind::RD_KAFKA_RESOURCE_ANY,
        None,
        Pattern::RD_KAFKA_RESOURCE_PATTERN_ANY,
        Some("User:bob"),
        None,
        Op::RD_KAFKA_ACL_OPERATION_ANY,
        Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
    );
    assert_eq!(
        describe(rk, &bobs),
        vec![("orders".to_string(), "User:bob".to_string(), Op::RD_KAFKA_ACL_OPERATION_DESCRIBE)]
    );

    let reads = (
        topic,
        Some("orders"),
        literal,
        None,
        None,
        Op::RD_KAFKA_ACL_OPERATION_READ,
        Perm::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
    );
    assert_eq!(
        delete(rk, &reads),
        vec![("orders".to_string(), "User:alice".to_string(), Op::RD_KAFKA_ACL_OPERATION_READ)]
    );
    assert_eq!(describe(rk, &any).len(), 2, "only the matched ACL was deleted");
}

#[test]
fn a_cluster_replicates_over_sasl_between_brokers_that_authenticate_with_scram() {
    // Proves SASL between brokers: three nodes whose only Kafka listener is SASL_PLAINTEXT with the
    // authorizer on; each node's replica fetchers and peer calls authenticate with SCRAM-SHA-512
    // as `broker` (a super user), so acks=all writes keep every ISR full; clients authenticate as
    // themselves and a user without ACLs is refused.
    let cluster = support::cluster::Cluster::start(
        3,
        &[
            "--listener-security-protocol-map",
            "PLAINTEXT:SASL_PLAINTEXT",
            "--add-scram",
            "SCRAM-SHA-512=[name=broker,password=broker-secret]",
            "--add-scram",
            "SCRAM-SHA-512=[name=alice,password=alice-secret]",
            "--add-scram",
            "SCRAM-SHA-512=[name=bob,password=bob-secret]",
            "--sasl-mechanism-inter-broker-protocol",
            "SCRAM-SHA-512",
            "--inter-broker-sasl-username",
            "broker",
            "--inter-broker-sasl-password",
            "broker-secret",
            "--authorizer-class-name",
            "standard",
            "--super-users",
            "User:broker;User:alice",
        ],
    );
    let bootstrap: Vec<String> = cluster.ids().map(|id| cluster.node(id).kafka_addr.to_string()).collect();
    let client = |user: &str| {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap.join(","))
            .set("broker.address.family", "v4")
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", user)
            .set("sasl.password", format!("{user}-secret"));
        config
    };
    replicate_with_a_full_isr(&client("alice"), &client("bob"));
}

/// On a three-node cluster: `allowed` creates a topic of three replicas and writes 200 records
/// acks=all, after which every partition's ISR still holds all three replicas (the followers were
/// served: a refused follower leaves the ISR after replica.lag.time.max.ms, and acks=all then
/// succeeds with the leader alone), and reads them back in a group; `denied` (no ACL) cannot write.
fn replicate_with_a_full_isr(allowed: &ClientConfig, denied: &ClientConfig) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::error::RDKafkaErrorCode;
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = allowed.create().expect("admin");
    let topic = NewTopic::new("replicated", 3, TopicReplication::Fixed(3));
    let created = support::block_on(admin.create_topics(&[topic], &AdminOptions::new())).expect("answered");
    assert!(created[0].is_ok(), "{created:?}");
    produce(allowed, "replicated", 200);
    let consumer: BaseConsumer = allowed.create().expect("client");
    let metadata = consumer.fetch_metadata(Some("replicated"), START_TIMEOUT).expect("metadata");
    let isr: Vec<usize> = metadata.topics()[0].partitions().iter().map(|p| p.isr().len()).collect();
    assert_eq!(isr, vec![3, 3, 3], "every partition's ISR holds all three replicas");
    assert_eq!(consume_all(allowed, "replicated", "replicated-group", 200).len(), 200);
    let producer: FutureProducer = denied.clone().set("message.timeout.ms", "10000").create().expect("producer");
    let refused = support::block_on(
        producer.send(FutureRecord::<str, str>::to("replicated").payload("x"), Duration::from_secs(15)),
    );
    assert_eq!(
        refused.expect_err("a principal without ACLs wrote").0.rdkafka_error_code(),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed)
    );
}

#[test]
fn consumer_group_heartbeat_needs_describe_on_every_subscribed_topic() {
    // Proves KIP-848's ConsumerGroupHeartbeat is refused TOPIC_AUTHORIZATION_FAILED when the
    // member subscribes to a topic it may not describe (Kafka's KafkaApis check), and served
    // when it may describe all of them. The PLAINTEXT client is User:ANONYMOUS; with
    // allow.everyone.if.no.acl.found only the topic with an ACL (for alice) is closed to it.
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, FindCoordinatorRequest, GroupId, TopicName};
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    let node = Runnel::start(&["--authorizer-class-name", "standard", "--allow-everyone-if-no-acl-found", "true"]);
    support::create_topic(&node, "open", 1);
    support::create_topic(&node, "secret", 1);
    support::allow_acls(&node, &[(TOPIC, "secret", LITERAL, "User:alice", READ)]);
    let mut conn = RawConn::open(&node, "kip848");
    let _ = conn.call(
        4,
        &FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![StrBytes::from_static_str("g")]),
    );
    let heartbeat = |conn: &mut RawConn, topic: &'static str| {
        conn.call(
            0,
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str(topic))])),
        )
    };
    let mut last = None;
    let served = wait_until(START_TIMEOUT, || {
        let answer = heartbeat(&mut conn, "open");
        last = Some(answer.error_code);
        answer.error_code == 0
    });
    assert!(served, "a describable subscription is served (last error {last:?})");
    assert_eq!(heartbeat(&mut conn, "secret").error_code, TOPIC_AUTHORIZATION_FAILED);

    // A regex matching both resolves to the describable one only (Kafka 4, KAFKA-18813): the
    // member is assigned "open"'s partition, never "secret"'s.
    let regex = conn.call(
        1,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("by-regex")))
            .with_member_id(StrBytes::from_static_str("regex-member-1"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_regex(Some(StrBytes::from_static_str("open|secret"))),
    );
    assert_eq!(regex.error_code, 0, "{regex:?}");
    let assigned = regex.assignment.expect("a joining member is told its assignment").topic_partitions;
    let open = support::HttpApi::new(&node).get("/v1/topics/open");
    let open_id = open.json["topic_id"].as_str().expect("topic id").to_string();
    let ids: Vec<String> = assigned.iter().map(|t| t.topic_id.to_string()).collect();
    assert_eq!(ids.len(), 1, "one topic assigned: {ids:?}");
    assert_eq!(ids[0].to_lowercase().replace('-', ""), open_id.to_lowercase().replace('-', ""), "{ids:?}");
}

#[test]
fn large_fetch_responses_over_tls_arrive_whole() {
    // Proves a Fetch answer far larger than the socket's buffer (48 MiB written over PLAINTEXT)
    // reaches a TLS consumer whole, and the consumer reads every record (the flush at the end
    // of every response, `Frame::write_to`, is what the unit test there proves).
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    const RECORDS: usize = 3072;
    let pki = Pki::new();
    let node = secure_node(&pki, &[]);
    support::create_topic(&node, "big", 1);
    let plain = support::client_config(&node, &[("linger.ms", "20"), ("acks", "all")]);
    let producer: BaseProducer = plain.create().expect("producer");
    let value = vec![b'x'; 16 << 10];
    for _ in 0..RECORDS {
        producer.send(BaseRecord::<(), [u8]>::to("big").payload(&value)).map_err(|(e, _)| e).expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(START_TIMEOUT).expect("flush");
    let topic = support::HttpApi::new(&node).get("/v1/topics/big");
    assert_eq!(topic.json["partitions"][0]["high_watermark"], RECORDS, "{}", topic.text);
    let consumer: BaseConsumer = secure_config(&node, &pki, "SSL", None)
        .set("group.id", "big-readers")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "60000")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "52428800")
        .create()
        .expect("consumer");
    consumer.subscribe(&["big"]).expect("subscribe");
    let mut read = 0;
    let done = wait_until(START_TIMEOUT, || {
        // Everything that arrived, not one record per check.
        while let Some(message) = consumer.poll(Duration::from_millis(100)) {
            read += usize::from(message.expect("no consume error").payload_len() == value.len());
        }
        read >= RECORDS
    });
    assert!(done, "read {read} of {RECORDS} records over TLS");
}

#[test]
fn an_anonymous_sender_cannot_envelope_unless_anonymous_is_a_super_user() {
    // Proves KIP-590 envelopes need an authenticated sender (or User:ANONYMOUS as a super user):
    // on a PLAINTEXT inter-broker listener where ANONYMOUS may CLUSTER_ACTION (here: no cluster
    // ACL with allow.everyone.if.no.acl.found, as admins grant it for plain replication), any
    // anonymous client enveloped a request as User:admin and was served as admin.
    use kafka_protocol::messages::{EnvelopeRequest, MetadataRequest, RequestHeader};
    use kafka_protocol::protocol::{Encodable, HeaderVersion};
    let node = Runnel::start(&[
        "--authorizer-class-name",
        "standard",
        "--super-users",
        "User:admin",
        "--allow-everyone-if-no-acl-found",
        "true",
    ]);
    let mut inner = bytes::BytesMut::new();
    let header = RequestHeader::default().with_request_api_key(3).with_request_api_version(12).with_correlation_id(7);
    header.encode(&mut inner, MetadataRequest::header_version(12)).expect("header");
    MetadataRequest::default().with_topics(None).encode(&mut inner, 12).expect("body");
    let envelope = EnvelopeRequest::default()
        .with_request_data(inner.freeze())
        .with_request_principal(Some(Bytes::from_static(b"User:admin")))
        .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1]));
    let response = RawConn::open(&node, "anonymous").call(0, &envelope);
    const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    assert_eq!(response.error_code, CLUSTER_AUTHORIZATION_FAILED, "served as admin: {response:?}");
}

#[test]
fn unauthenticated_requests_cannot_hold_the_request_pool() {
    // Proves a client without credentials cannot stall the node by sending large request
    // headers to a SASL listener and never the bodies: before authentication a request is
    // bounded by sasl.server.max.receive.size (larger ones close the connection) and read
    // outside the queued.max.request.bytes pool, as Kafka's SaslServerAuthenticator reads it.
    // Before, three 8 MiB headers held the 16 MiB pool and everyone else's requests waited.
    use kafka_protocol::messages::ApiVersionsRequest;
    let node = Runnel::start(&[
        "--listeners",
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "--socket-request-max-bytes",
        "8388608",
        "--queued-max-request-bytes",
        "16777216",
        "--sasl-server-max-receive-size",
        "65536",
    ]);
    let sasl = node.listener("SASL_PLAINTEXT");
    let hogs: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut stream = TcpStream::connect(sasl).expect("connect");
            stream.write_all(&(8i32 << 20).to_be_bytes()).expect("header");
            stream.write_all(&[0; 10]).expect("some body");
            stream
        })
        .collect();
    for mut hog in hogs {
        hog.set_read_timeout(Some(START_TIMEOUT)).expect("timeout");
        let mut byte = [0u8; 1];
        match hog.read(&mut byte) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("an 8 MiB request before authentication is not refused: {other:?}"),
        }
    }
    for listener in ["SASL_PLAINTEXT", "PLAINTEXT"] {
        let stream = TcpStream::connect(node.listener(listener)).expect("connect");
        let answer = RawConn::from_stream(stream, "after-hogs").call(3, &ApiVersionsRequest::default());
        assert_eq!(answer.error_code, 0, "{listener} still serves");
    }
}
