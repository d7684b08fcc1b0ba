//! The HTTP API's security (issue 15): authentication (HTTP Basic against the SCRAM users,
//! bearer tokens, the dashboard's login cookie with its CSRF rule), the same ACLs as the
//! Kafka listeners for REST produce, consume and admin, the permissions of deployed code
//! (transforms) with its audit log, and the principal kept when a request is forwarded to the
//! broker that leads a partition (KIP-590 Envelope). Real `runnel` processes, real HTTP.

mod support;

use std::collections::BTreeMap;

use std::time::Duration;

use base64::Engine;
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};
use support::cluster::Cluster;
use support::{wait_until, HttpApi, RawConn, Runnel};

const TIMEOUT: Duration = Duration::from_secs(30);
const UI: &str = "x-runnel-ui";

fn users(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "--http-authentication",
        "required",
        "--add-scram",
        "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=alice,password=alice-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=bob,password=bob-secret]",
    ];
    args.extend_from_slice(extra);
    args
}

/// With the standard authorizer: admin is a super user, and so is User:ANONYMOUS, the
/// principal of the PLAINTEXT Kafka listener (the operators' and brokers' listener here, as in
/// Kafka's internal-listener setups); HTTP clients must authenticate, so none is anonymous.
const AUTHORIZER: [&str; 4] = [
    "--authorizer-class-name",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "--super-users",
    "User:ANONYMOUS;User:admin",
];

fn as_user(node: &Runnel, user: &str) -> HttpApi {
    HttpApi::new(node).with_basic(user, &format!("{user}-secret"))
}

/// The `runnel_session` cookie a login answered with (`name=value`).
fn session_cookie(answer: &support::HttpAnswer) -> String {
    let set = answer.headers.get("set-cookie").and_then(|v| v.to_str().ok()).expect("Set-Cookie").to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap().to_string()
}

#[test]
fn http_authenticates_with_basic_tokens_and_the_dashboard_login() {
    // Proves: without credentials only the dashboard's files, /openapi.json and the login are
    // served (401 elsewhere, with a Basic challenge unless the dashboard asks); Basic checks the
    // SCRAM user's password; a token from POST /v1/tokens authenticates as its owner until it
    // is revoked, cannot make tokens, and a principal holds at most
    // --http-tokens-max-per-principal of them; a dashboard login sets an HttpOnly SameSite
    // cookie that authenticates reads, and changes only with X-Runnel-UI (CSRF), until logout.
    let node = Runnel::start(&users(&[
        "--http-tokens-max-per-principal",
        "2",
        "--connection-failed-authentication-delay-ms",
        "700",
    ]));
    let anonymous = HttpApi::new(&node);
    let refused = anonymous.get("/v1/topics");
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert_eq!(refused.json["error_code"], 40101);
    assert!(refused.headers.get("www-authenticate").is_some_and(|v| v.to_str().unwrap().starts_with("Basic")));
    let from_dashboard = HttpApi::new(&node).with_header(UI, "1").get("/v1/topics");
    assert_eq!(from_dashboard.status, 401);
    assert!(from_dashboard.headers.get("www-authenticate").is_none(), "no browser prompt over the login form");
    assert_eq!(anonymous.get("/").status, 200, "the dashboard (its login form) is open");
    let openapi = anonymous.get("/openapi.json");
    assert_eq!(openapi.status, 200);
    // The document says how to authenticate and what a refusal looks like on every route but
    // the login.
    let schemes = &openapi.json["components"]["securitySchemes"];
    assert_eq!(schemes["basic"]["scheme"], "basic", "{schemes}");
    assert_eq!(schemes["token"]["scheme"], "bearer", "{schemes}");
    assert_eq!(schemes["session"]["in"], "cookie", "{schemes}");
    let responses = &openapi.json["paths"]["/v1/topics"]["get"]["responses"];
    assert!(responses.get("401").is_some() && responses.get("403").is_some(), "{responses}");
    let paths = openapi.json["paths"].as_object().expect("paths");
    let undocumented: Vec<String> = paths
        .iter()
        .flat_map(|(path, item)| item.as_object().into_iter().flatten().map(move |(method, op)| (path, method, op)))
        .filter(|(path, method, op)| {
            !(method.as_str() == "post" && path.as_str() == "/v1/login")
                && (op["responses"].get("401").is_none() || op["responses"].get("403").is_none())
        })
        .map(|(path, method, _)| format!("{method} {path}"))
        .collect();
    assert!(undocumented.is_empty(), "routes without 401/403: {undocumented:?}");
    assert!(paths["/v1/login"]["post"]["responses"].get("401").is_some(), "a wrong password at login is a 401 too");
    assert_eq!(anonymous.get("/metrics").status, 401);

    let asked = std::time::Instant::now();
    let wrong = HttpApi::new(&node).with_basic("admin", "nope").get("/v1/topics");
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    // As on the Kafka listeners (KIP-306): a wrong password is answered after the delay.
    assert!(asked.elapsed() >= std::time::Duration::from_millis(700), "answered after {:?}", asked.elapsed());
    let garbled = HttpApi::new(&node).with_header("authorization", "Basic !!!").get("/v1/topics");
    assert_eq!(garbled.status, 401);
    let admin = as_user(&node, "admin");
    let me = admin.get("/v1/whoami");
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!((me.json["principal"].as_str(), me.json["method"].as_str()), (Some("User:admin"), Some("basic")));
    assert_eq!(admin.get("/v1/cluster").json["security"]["http_authenticated"], true);
    // Authentications over HTTP are counted by outcome, as the Kafka listeners' are.
    let metrics = admin.get("/metrics").text;
    let count = |result: &str| {
        let series =
            format!("kafka_server_socketserver_authentications_total{{listener=\"http\",result=\"{result}\"}}");
        metrics.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    assert!(count("failure") >= 2.0, "the wrong and garbled passwords: {metrics}");
    assert!(count("success") >= 1.0);

    // Tokens.
    assert_eq!(admin.post("/v1/tokens", &json!({"lifetime_ms": 0})).status, 422);
    let first = admin.post("/v1/tokens", &json!({"description": "ci"}));
    assert_eq!(first.status, 201, "{}", first.text);
    let secret = first.json["token"].as_str().unwrap().to_string();
    assert!(secret.starts_with("rnl_"), "{secret}");
    let bearer = HttpApi::new(&node).with_header("authorization", &format!("Bearer {secret}"));
    let me = bearer.get("/v1/whoami");
    assert_eq!((me.json["principal"].as_str(), me.json["method"].as_str()), (Some("User:admin"), Some("token")));
    let minted = bearer.post("/v1/tokens", &json!({}));
    assert_eq!(minted.status, 403, "a token cannot make tokens: {}", minted.text);
    // A browser request from another site is refused whatever credentials it rides on.
    let forged = as_user(&node, "admin").with_header("origin", "http://evil.example");
    let refused = forged.post("/v1/topics", &json!({"name": "forged", "partitions": 1}));
    assert_eq!((refused.status, refused.json["error_code"].as_i64()), (403, Some(40303)), "{}", refused.text);
    let fetched = as_user(&node, "admin").with_header("sec-fetch-site", "cross-site").get("/v1/topics");
    assert_eq!(fetched.status, 403);
    assert_eq!(as_user(&node, "admin").with_header("sec-fetch-site", "same-origin").get("/v1/topics").status, 200);
    assert_eq!(admin.post("/v1/tokens", &json!({})).status, 201);
    let third = admin.post("/v1/tokens", &json!({}));
    assert_eq!(third.status, 429, "{}", third.text);
    let listed = admin.get("/v1/tokens");
    let mine: Vec<&Value> = listed.json["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["principal"] == "User:admin" && t["kind"] == "api")
        .collect();
    assert_eq!(mine.len(), 2, "{}", listed.text);
    assert!(!listed.text.contains(secret.rsplit('_').next().unwrap()), "a listing never shows a secret");
    let id = first.json["id"].as_str().unwrap();
    assert_eq!(admin.delete(&format!("/v1/tokens/{id}")).status, 204);
    assert_eq!(bearer.get("/v1/whoami").status, 401, "a revoked token authenticates nothing");
    assert_eq!(HttpApi::new(&node).with_header("authorization", "Bearer rnl_00_11").get("/v1/topics").status, 401);

    // The dashboard's login.
    assert_eq!(anonymous.post("/v1/login", &json!({"username": "admin", "password": "nope"})).status, 401);
    let login = anonymous.post("/v1/login", &json!({"username": "admin", "password": "admin-secret"}));
    assert_eq!(login.status, 200, "{}", login.text);
    let cookie = session_cookie(&login);
    let browser = HttpApi::new(&node).with_header("cookie", &cookie);
    assert_eq!(browser.get("/v1/whoami").json["method"], "session");
    let forged = browser.post("/v1/topics", &json!({"name": "csrf", "partitions": 1}));
    assert_eq!(forged.status, 403, "a cookie-authenticated change without X-Runnel-UI: {}", forged.text);
    assert_eq!(forged.json["error_code"], 40302);
    let dashboard = HttpApi::new(&node).with_header("cookie", &cookie).with_header(UI, "1");
    assert_eq!(dashboard.post("/v1/topics", &json!({"name": "from-ui", "partitions": 1})).status, 201);
    assert_eq!(dashboard.post("/v1/tokens", &json!({})).status, 403, "a login cannot make tokens");
    let session = cookie.split_once('=').unwrap().1;
    let as_bearer = HttpApi::new(&node).with_header("authorization", &format!("Bearer {session}"));
    assert_eq!(as_bearer.get("/v1/whoami").status, 401, "a login is a cookie, not a bearer token");
    assert_eq!(dashboard.post("/v1/logout", &json!({})).status, 204);
    assert_eq!(browser.get("/v1/whoami").status, 401, "a logged-out session authenticates nothing");

    // A user's tokens end with the user.
    let alices = as_user(&node, "alice").post("/v1/tokens", &json!({}));
    assert_eq!(alices.status, 201, "{}", alices.text);
    let alice_bearer = format!("Bearer {}", alices.json["token"].as_str().unwrap());
    let alice_token = HttpApi::new(&node).with_header("authorization", &alice_bearer);
    assert_eq!(alice_token.get("/v1/whoami").status, 200);
    delete_user(&node, "alice");
    assert!(
        wait_until(TIMEOUT, || alice_token.get("/v1/whoami").status == 401),
        "a deleted user's token still authenticates"
    );
}

/// Sends `head` and then `body_len` bytes of body on `stream` (from another thread: the server
/// may answer before it reads them) and reads one answer: its status line and headers
/// (lower-cased) and its body.
fn exchange(stream: &std::net::TcpStream, head: &str, body_len: usize) -> (String, String) {
    use std::io::{Read, Write};
    let mut writer = stream.try_clone().expect("clone");
    let head = head.to_string();
    let sending = std::thread::spawn(move || {
        let body = vec![b'x'; body_len];
        writer.write_all(head.as_bytes()).and_then(|_| writer.write_all(&body)).is_ok()
    });
    let mut reader = stream.try_clone().expect("clone");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match reader.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            other => {
                panic!("the connection ended before an answer ({other:?}) after {:?}", String::from_utf8_lossy(&got))
            }
        }
    }
    let headers = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let length: usize = headers
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().expect("content-length"));
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).expect("answer body");
    if body_len <= 4 << 20 {
        assert!(sending.join().unwrap(), "the server stopped reading a body it drains");
    }
    (headers, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn an_answer_given_before_the_body_is_read_keeps_the_connection_usable() {
    // Proves: a request answered without its body being read (a 401 before an upload, a 403 on
    // a transform's name) leaves its connection usable for the next request: the server reads
    // the rest of the body (a pooling client would otherwise reuse a connection the server
    // closes, and its next request fail with a broken pipe); a body beyond what it drains is
    // answered with `Connection: close`.
    let mut args = users(&[]);
    args.extend_from_slice(&AUTHORIZER);
    let node = Runnel::start(&args);
    let stream = std::net::TcpStream::connect(node.http_addr).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let basic = |user: &str| base64::engine::general_purpose::STANDARD.encode(format!("{user}:{user}-secret"));
    let upload = |auth: &str, path: &str, len: usize| {
        format!("PUT {path} HTTP/1.1\r\nhost: runnel\r\n{auth}content-type: application/json\r\ncontent-length: {len}\r\n\r\n")
    };
    let one_mib = 1 << 20;
    let (headers, body) = exchange(&stream, &upload("", "/v1/transforms/t", one_mib), one_mib);
    assert!(headers.starts_with("http/1.1 401"), "{headers}{body}");
    assert!(!headers.contains("connection: close"), "{headers}");
    let bob = format!("authorization: Basic {}\r\n", basic("bob"));
    let (headers, body) = exchange(&stream, &upload(&bob, "/v1/transforms/t", one_mib), one_mib);
    assert!(headers.starts_with("http/1.1 403"), "{headers}{body}");
    let admin = format!("authorization: Basic {}\r\n", basic("admin"));
    let (headers, body) = exchange(&stream, &format!("GET /v1/whoami HTTP/1.1\r\nhost: runnel\r\n{admin}\r\n"), 0);
    assert!(headers.starts_with("http/1.1 200"), "the connection serves on: {headers}{body}");
    assert!(body.contains("User:admin"), "{body}");

    let beyond = 6 << 20;
    let (headers, body) = exchange(&stream, &upload("", "/v1/transforms/t", beyond), beyond);
    assert!(headers.starts_with("http/1.1 401"), "{headers}{body}");
    assert!(headers.contains("connection: close"), "a body past the drain bound closes: {headers}");
}

#[test]
fn logins_and_tokens_past_the_issue_rate_are_refused_with_retry_after() {
    // Proves --http-token-issues-per-minute: each login and token is a write to the metadata
    // quorum, so one principal gets at most that many a minute (logins and tokens together);
    // the next is a 429 saying when to retry, and other principals are not held back.
    let mut args = users(&["--http-token-issues-per-minute", "3"]);
    args.extend_from_slice(&AUTHORIZER);
    let node = Runnel::start(&args);
    let anonymous = HttpApi::new(&node);
    let login =
        |user: &str| anonymous.post("/v1/login", &json!({"username": user, "password": format!("{user}-secret")}));
    for _ in 0..2 {
        assert_eq!(login("alice").status, 200);
    }
    let token = as_user(&node, "alice").post("/v1/tokens", &json!({"description": "ci"}));
    assert_eq!(token.status, 201, "{}", token.text);
    for refused in [login("alice"), as_user(&node, "alice").post("/v1/tokens", &json!({}))] {
        assert_eq!(refused.status, 429, "{}", refused.text);
        assert_eq!(refused.json["error_code"], 42902, "{}", refused.text);
        let retry: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=20).contains(&retry), "Retry-After {retry}");
    }
    assert_eq!(login("bob").status, 200, "another principal is not held back");
    // What alice was issued still works.
    assert_eq!(
        HttpApi::new(&node)
            .with_header("authorization", &format!("Bearer {}", token.json["token"].as_str().unwrap()))
            .get("/v1/whoami")
            .status,
        200
    );
}

/// Deletes `user`'s SCRAM-SHA-512 credential with AlterUserScramCredentials (PLAINTEXT
/// listener, no authorizer).
fn delete_user(node: &Runnel, user: &str) {
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;
    use kafka_protocol::messages::AlterUserScramCredentialsRequest;
    let deletion =
        ScramCredentialDeletion::default().with_name(StrBytes::from_string(user.to_string())).with_mechanism(2);
    let request = AlterUserScramCredentialsRequest::default().with_deletions(vec![deletion]);
    let response = RawConn::open(node, "admin").call(0, &request);
    assert!(response.results.iter().all(|r| r.error_code == 0), "{response:?}");
}

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const TRANSACTIONAL_ID: i8 = 5;
const TRANSFORM: i8 = 100;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DELETE: i8 = 6;
const DESCRIBE: i8 = 8;

fn produce(api: &HttpApi, cluster: &str, topic: &str, partition: i32, value: &str) -> support::HttpAnswer {
    api.post(
        &format!("/v3/clusters/{cluster}/topics/{topic}/records"),
        &json!({"partition_id": partition, "value": {"type": "STRING", "data": value}}),
    )
}

fn topic_names(api: &HttpApi) -> Vec<String> {
    let answer = api.get("/v1/topics");
    assert_eq!(answer.status, 200, "{}", answer.text);
    answer.json["topics"].as_array().expect("topics").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn http_acls_govern_rest_produce_consume_admin_and_deployed_code() {
    // Proves the Kafka ACLs hold for HTTP principals: REST produce needs WRITE, a consumer
    // instance READ on its group (and is its creator's alone), topic listings hide what a
    // principal may not describe; deploying a transform needs CREATE on it plus READ on its
    // input and WRITE on its outputs, deleting it DELETE; every change of deployed code is in
    // the audit log with who, the module's hash and when, shown to those who may describe it.
    let mut args = users(&[]);
    args.extend_from_slice(&AUTHORIZER);
    let node = Runnel::start(&args);
    let admin = as_user(&node, "admin");
    let (alice, bob) = (as_user(&node, "alice"), as_user(&node, "bob"));
    let cluster = admin.cluster_id();
    for topic in ["orders", "alice-out", "secret"] {
        let created = admin.post("/v1/topics", &json!({"name": topic, "partitions": 1}));
        assert_eq!(created.status, 201, "{}", created.text);
    }
    support::allow_acls(
        &node,
        &[
            (TOPIC, "orders", LITERAL, "User:alice", WRITE),
            (TOPIC, "orders", LITERAL, "User:alice", READ),
            (TOPIC, "alice-out", LITERAL, "User:alice", WRITE),
            (GROUP, "alice-", PREFIXED, "User:alice", READ),
            (TRANSFORM, "alice-", PREFIXED, "User:alice", CREATE),
            (TRANSFORM, "alice-", PREFIXED, "User:alice", DELETE),
            (TRANSFORM, "alice-", PREFIXED, "User:alice", DESCRIBE),
        ],
    );

    // Produce.
    let produced = produce(&alice, &cluster, "orders", 0, "o-1");
    assert_eq!(produced.status, 200, "{}", produced.text);
    let denied = produce(&bob, &cluster, "orders", 0, "o-2");
    assert_eq!(denied.status, 403, "{}", denied.text);
    assert_eq!(denied.json["error_code"], 40301);
    // Listing: bob is told of no topic; alice of hers.
    assert!(topic_names(&bob).is_empty(), "{:?}", topic_names(&bob));
    assert!(topic_names(&alice).contains(&"orders".to_string()));

    // Consume through a v2 consumer instance.
    let v2 = Some("application/vnd.kafka.v2+json");
    let create = |api: &HttpApi, group: &str| {
        let body = json!({"name": "web", "format": "json", "auto.offset.reset": "earliest"});
        api.send_json("POST", &format!("/consumers/{group}"), v2, &body)
    };
    assert_eq!(create(&bob, "alice-g").status, 403, "bob may not read alice's groups");
    assert_eq!(create(&alice, "alice-g").status, 200);
    let base = "/consumers/alice-g/instances/web";
    assert_eq!(alice.post(&format!("{base}/subscription"), &json!({"topics": ["orders"]})).status, 204);
    assert_eq!(bob.get(&format!("{base}/subscription")).status, 404, "an instance is its creator's alone");
    // A manual assignment of a topic alice may not describe is refused before its partitions
    // are told (partition 0 exists, 7 does not: both 403).
    for partition in [0, 7] {
        let assign = json!({"partitions": [{"topic": "secret", "partition": partition}]});
        let refused = alice.post(&format!("{base}/assignments"), &assign);
        assert_eq!(refused.status, 403, "secret-{partition}: {}", refused.text);
    }
    let mut seen = Vec::new();
    assert!(
        wait_until(TIMEOUT, || {
            let polled = alice.get(&format!("{base}/records?timeout=500"));
            if let Some(records) = polled.json.as_array() {
                seen.extend(records.iter().map(|r| r["value"].clone()));
            }
            !seen.is_empty()
        }),
        "alice's instance reads what she produced"
    );
    assert_eq!(alice.delete(base).status, 204);

    // Deployed code.
    let module = support::guest_component("runnel-example-identity");
    let deploy = |api: &HttpApi, name: &str, output: &str| {
        let body = json!({
            "input_topic": "orders",
            "output_topics": [output],
            "module_base64": base64::engine::general_purpose::STANDARD.encode(&module),
        });
        api.send_json("PUT", &format!("/v1/transforms/{name}"), None, &body)
    };
    assert_eq!(deploy(&bob, "alice-copy", "alice-out").status, 403, "bob may not deploy");
    assert_eq!(deploy(&alice, "copy", "alice-out").status, 403, "no CREATE on that name");
    let unwritable = deploy(&alice, "alice-leak", "orders-public");
    assert_eq!(unwritable.status, 403, "outputs alice may not write: {}", unwritable.text);
    let deployed = deploy(&alice, "alice-copy", "alice-out");
    assert_eq!(deployed.status, 201, "{}", deployed.text);
    assert_eq!(alice.post("/v1/transforms/alice-copy/pause", &json!({})).status, 403, "pausing needs ALTER");
    assert_eq!(bob.delete("/v1/transforms/alice-copy").status, 403);
    assert_eq!(bob.get("/v1/transforms/alice-copy").status, 403);
    assert!(bob.get("/v1/transforms").json["transforms"].as_array().unwrap().is_empty(), "hidden from bob");
    assert_eq!(alice.delete("/v1/transforms/alice-copy").status, 204);

    let audit = admin.get("/v1/audit");
    assert_eq!(audit.status, 200, "{}", audit.text);
    let entries = audit.json["entries"].as_array().unwrap();
    let actions: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| (e["principal"].as_str().unwrap(), e["action"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    assert_eq!(actions, vec![("User:alice", "deploy", "alice-copy"), ("User:alice", "delete", "alice-copy")]);
    assert_eq!(entries[0]["sha256"].as_str().map(str::len), Some(64), "{}", audit.text);
    assert!(entries[0]["at_ms"].as_i64().unwrap() > 0);
    assert_eq!(entries[0]["client_host"], "127.0.0.1");
    assert!(bob.get("/v1/audit").json["entries"].as_array().unwrap().is_empty(), "bob may describe no transform");
    assert_eq!(alice.get("/v1/audit").json["entries"].as_array().unwrap().len(), 2);

    // A transaction shows only the partitions of topics the client may describe (Kafka's
    // DescribeTransactions): an open one over orders and a topic alice may not see.
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    assert_eq!(admin.post("/v1/topics", &json!({"name": "ledger", "partitions": 1})).status, 201);
    support::allow_acls(&node, &[(TRANSACTIONAL_ID, "alice-tx", LITERAL, "User:alice", DESCRIBE)]);
    let producer: BaseProducer =
        support::client_config(&node, &[("transactional.id", "alice-tx")]).create().expect("producer");
    producer.init_transactions(TIMEOUT).expect("init_transactions");
    producer.begin_transaction().expect("begin");
    for topic in ["orders", "ledger"] {
        producer.send(BaseRecord::<(), str>::to(topic).payload("in a transaction")).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(TIMEOUT).expect("flush");
    let topics_of = |api: &HttpApi| {
        let answer = api.get("/v1/transactions/alice-tx");
        assert_eq!(answer.status, 200, "{}", answer.text);
        let partitions = answer.json["partitions"].as_array().expect("partitions").clone();
        partitions.iter().map(|p| p["topic"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(topics_of(&admin), vec!["ledger", "orders"]);
    assert_eq!(topics_of(&alice), vec!["orders"], "ledger is hidden from alice");
    producer.abort_transaction(TIMEOUT).expect("abort");
}

#[test]
fn forwarded_http_requests_keep_their_principal_on_the_leader() {
    // Proves a request one node forwards to the partition's leader is authorized there as the
    // HTTP client (KIP-590 Envelope), not as the forwarding broker: alice's produce through
    // node 1 to a partition node 2 leads is appended, bob's is refused by node 2's ACL check;
    // and nodes reach each other's HTTP API with their own tokens (the cluster-wide transform
    // view asks every node and hears from all).
    let mut args = users(&[]);
    args.extend_from_slice(&AUTHORIZER);
    let cluster = Cluster::start(2, &args);
    let node1 = cluster.node(1);
    let admin = as_user(node1, "admin");
    let created = admin.post("/v1/topics", &json!({"name": "spread", "partitions": 4, "replication_factor": 1}));
    assert_eq!(created.status, 201, "{}", created.text);
    support::allow_acls(node1, &[(TOPIC, "spread", LITERAL, "User:alice", WRITE)]);
    let leaders = admin.get(&format!("/v3/clusters/{}/topics/spread/partitions", admin.cluster_id()));
    let remote = leaders.json["data"]
        .as_array()
        .expect("partitions")
        .iter()
        .find(|p| p["leader"]["related"].as_str().is_some_and(|l| l.ends_with("/replicas/2")))
        .map(|p| p["partition_id"].as_i64().unwrap() as i32)
        .unwrap_or_else(|| panic!("no partition led by node 2: {}", leaders.text));
    let cluster_id = admin.cluster_id();
    let allowed = produce(&as_user(node1, "alice"), &cluster_id, "spread", remote, "through node 1");
    assert_eq!(allowed.status, 200, "{}", allowed.text);
    let denied = produce(&as_user(node1, "bob"), &cluster_id, "spread", remote, "through node 1");
    assert_eq!(denied.status, 403, "refused by the leader as bob: {}", denied.text);

    let view = admin.get("/v1/transforms");
    assert_eq!(view.status, 200, "{}", view.text);
    assert!(
        wait_until(TIMEOUT, || admin.get("/v1/transforms").json["nodes_unreachable"] == json!([])),
        "node 2 answers node 1's token: {}",
        admin.get("/v1/transforms").text
    );

    // The group list node 1 gathers from node 2 (which answers node 1, not the client) counts
    // only the lag of topics the client may describe: a group node 2 coordinates lags on `seen`
    // and on `hidden`, alice may describe only `seen`. The coordinator asks the leaders of the
    // partitions it does not host for their high watermarks (lag was unknown there before).
    for topic in ["seen", "hidden"] {
        let created = admin.post("/v1/topics", &json!({"name": topic, "partitions": 1, "replication_factor": 1}));
        assert_eq!(created.status, 201, "{}", created.text);
        // The leader may learn of the new topic a moment after the creation is answered.
        assert!(wait_until(TIMEOUT, || produce(&admin, &cluster_id, topic, 0, "r0").status == 200), "{topic}");
        for n in 1..5 {
            assert_eq!(produce(&admin, &cluster_id, topic, 0, &format!("r{n}")).status, 200);
        }
    }
    let v2 = Some("application/vnd.kafka.v2+json");
    let group = (0..40)
        .map(|i| format!("lag-{i}"))
        .find(|group| {
            let body = json!({"name": "c", "format": "json"});
            let created = admin.send_json("POST", &format!("/consumers/{group}"), v2, &body);
            assert_eq!(created.status, 200, "{}", created.text);
            let base = format!("/consumers/{group}/instances/c");
            let partitions =
                json!({"partitions": [{"topic": "seen", "partition": 0}, {"topic": "hidden", "partition": 0}]});
            // 503 while the group's coordinator is not elected yet (__consumer_offsets is new).
            let assigned =
                wait_until(TIMEOUT, || admin.post(&format!("{base}/assignments"), &partitions).status == 204);
            assert!(assigned, "assignment in {group}");
            let offsets = json!({"offsets": [
                {"topic": "seen", "partition": 0, "offset": 0},
                {"topic": "hidden", "partition": 0, "offset": 0},
            ]});
            let committed = wait_until(TIMEOUT, || admin.post(&format!("{base}/offsets"), &offsets).status == 200);
            assert!(committed, "commit in {group}");
            admin.get(&format!("/v1/groups/{group}")).json["coordinator"] == 2
        })
        .expect("a group coordinated by node 2");
    support::allow_acls(
        node1,
        &[(TOPIC, "seen", LITERAL, "User:alice", DESCRIBE), (GROUP, "lag-", PREFIXED, "User:alice", DESCRIBE)],
    );
    let summary = |api: &HttpApi| {
        let list = api.get("/v1/groups");
        let groups = list.json["groups"].as_array().cloned().unwrap_or_default();
        groups.into_iter().find(|g| g["group_id"] == group.as_str())
    };
    let mut seen_by_admin = None;
    assert!(
        wait_until(TIMEOUT, || {
            seen_by_admin = summary(&admin);
            // A v2 commit of offset 0 means record 0 was consumed: committed 1, lag 4 of 5.
            seen_by_admin.as_ref().is_some_and(|g| g["topic_lag"] == json!({"seen": 4, "hidden": 4}))
        }),
        "admin sees both topics' lag: {seen_by_admin:?}"
    );
    assert_eq!(seen_by_admin.unwrap()["total_lag"], 8);
    let alice = summary(&as_user(node1, "alice")).expect("alice may describe the group");
    assert_eq!(alice["total_lag"], 4, "{alice}");
    assert_eq!(alice["topic_lag"], json!({"seen": 4}), "{alice}");
    // Prometheus: the group's lag is reported by its coordinator alone, for every partition
    // (one of them led by the other node).
    let lag_lines = |node: &Runnel| -> Vec<String> {
        let prefix = format!("kafka_consumergroup_lag{{consumergroup=\"{group}\",");
        as_user(node, "admin")
            .get("/metrics")
            .text
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(String::from)
            .collect()
    };
    let coordinator = lag_lines(cluster.node(2));
    assert_eq!(coordinator.len(), 2, "{coordinator:?}");
    assert!(coordinator.iter().all(|l| l.ends_with(" 4")), "{coordinator:?}");
    assert!(lag_lines(node1).is_empty(), "node 1 does not coordinate it: {:?}", lag_lines(node1));

    // The v3 (Confluent) group views on node 1 show the coordinator's group: listed, described,
    // its lags (node 1 has no copy of the group's offsets: it answered 404 before).
    let v3 = format!("/v3/clusters/{cluster_id}/consumer-groups");
    let listed = admin.get(&v3);
    let ids: Vec<&str> =
        listed.json["data"].as_array().expect("data").iter().filter_map(|g| g["consumer_group_id"].as_str()).collect();
    assert!(ids.contains(&group.as_str()), "{ids:?}");
    let described = admin.get(&format!("{v3}/{group}"));
    assert_eq!(described.status, 200, "{}", described.text);
    assert!(
        described.json["coordinator"]["related"].as_str().is_some_and(|c| c.ends_with("/brokers/2")),
        "{}",
        described.text
    );
    let lags = |api: &HttpApi| -> BTreeMap<String, i64> {
        let answer = api.get(&format!("{v3}/{group}/lags"));
        assert_eq!(answer.status, 200, "{}", answer.text);
        answer.json["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|l| (l["topic_name"].as_str().unwrap().to_string(), l["lag"].as_i64().unwrap()))
            .collect()
    };
    assert_eq!(lags(&admin), BTreeMap::from([("hidden".to_string(), 4), ("seen".to_string(), 4)]));
    assert_eq!(lags(&as_user(node1, "alice")), BTreeMap::from([("seen".to_string(), 4)]));
    let one = as_user(node1, "alice").get(&format!("{v3}/{group}/lags/seen/partitions/0"));
    assert_eq!((one.status, one.json["lag"].as_i64()), (200, Some(4)), "{}", one.text);
    let hidden = as_user(node1, "alice").get(&format!("{v3}/{group}/lags/hidden/partitions/0"));
    assert_eq!(hidden.status, 404, "{}", hidden.text);
}

/// `runnel` (the CLI) with `args` and extra environment; (exit code, stdout, stderr).
fn cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"));
    command.args(args).env_remove("RUNNEL_USER").env_remove("RUNNEL_PASSWORD").env_remove("RUNNEL_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().expect("run the CLI");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn https_serves_the_api_and_the_cli_authenticates_with_a_user_or_a_token() {
    // Proves --http-tls: the API answers over HTTPS with the node's certificate to a client
    // that trusts its CA, plain HTTP to the port gets no HTTP answer, the login cookie is
    // Secure; the CLI reaches it with --ca-cert and --user/--password or RUNNEL_TOKEN, and
    // without credentials fails with the API's 401 message; two nodes serving HTTPS ask each
    // other over HTTPS with their own tokens.
    use std::io::{Read, Write};
    let pki = support::pki::Pki::new();
    let (keystore, truststore) = (pki.text("server.pem"), pki.text("ca.pem"));
    let mut args: Vec<&str> = users(&[]);
    args.extend(["--http-tls", "true", "--ssl-keystore-location", &keystore, "--ssl-truststore-location", &truststore]);
    let mut cluster = Cluster::start(2, &args);
    let node = cluster.node(1);
    let admin = HttpApi::https(node, &pki.path("ca.pem")).with_basic("admin", "admin-secret");
    let me = admin.get("/v1/whoami");
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!(admin.get("/v1/cluster").json["security"]["http_tls"], true);
    let login = HttpApi::https(node, &pki.path("ca.pem"))
        .post("/v1/login", &json!({"username": "admin", "password": "admin-secret"}));
    let cookie = login.headers.get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");

    let address = node.http_url().trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut plain = std::net::TcpStream::connect(&address).expect("connect");
    plain.set_read_timeout(Some(TIMEOUT)).unwrap();
    plain.write_all(b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP is not served on an HTTPS port");

    let url = format!("https://{address}");
    let ca = pki.text("ca.pem");
    let base = ["--url", url.as_str(), "--ca-cert", ca.as_str()];
    let (code, _, stderr) = cli(&[&base[..], &["topic", "list"]].concat(), &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("authentication required"), "{stderr}");
    let with_user =
        [&base[..], &["--user", "admin", "--password", "admin-secret", "topic", "create", "from-cli"]].concat();
    let (code, stdout, stderr) = cli(&with_user, &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let token = admin.post("/v1/tokens", &json!({"description": "cli"}));
    let token = token.json["token"].as_str().expect("token").to_string();
    let (code, stdout, stderr) = cli(&[&base[..], &["topic", "list"]].concat(), &[("RUNNEL_TOKEN", &token)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("from-cli"), "{stdout}");
    let (code, _, stderr) =
        cli(&[&["--url", url.as_str()][..], &["topic", "list"]].concat(), &[("RUNNEL_TOKEN", &token)]);
    assert_ne!(code, 0, "an HTTPS node is not trusted without --ca-cert: {stderr}");

    assert!(
        wait_until(TIMEOUT, || admin.get("/v1/transforms").json["nodes_unreachable"] == json!([])),
        "node 2 answers node 1 over HTTPS: {}",
        admin.get("/v1/transforms").text
    );
    // The certificate reloader stops with the node: SIGTERM ends it cleanly.
    assert!(cluster.terminate(2), "a node with TLS settings did not exit cleanly on SIGTERM");
}

#[test]
fn consumer_instances_are_bounded_per_principal_and_per_node() {
    // Proves both bounds on REST Proxy consumer instances are settings a client can push past:
    // with --http-consumer-instances-max-per-principal 2, alice's third instance is 503 (she
    // cannot take the node's slots from others); with --http-consumer-instances-max 3, bob's
    // second is 503 once the node holds three; a deleted instance frees its slot.
    let node = Runnel::start(&users(&[
        "--http-consumer-instances-max",
        "3",
        "--http-consumer-instances-max-per-principal",
        "2",
    ]));
    let (alice, bob) = (as_user(&node, "alice"), as_user(&node, "bob"));
    let v2 = Some("application/vnd.kafka.v2+json");
    let create = |api: &HttpApi, group: &str, name: &str| {
        let body = json!({"name": name, "format": "json"});
        api.send_json("POST", &format!("/consumers/{group}"), v2, &body)
    };
    assert_eq!(create(&alice, "g", "a1").status, 200);
    assert_eq!(create(&alice, "g", "a2").status, 200);
    let third = create(&alice, "g", "a3");
    assert_eq!((third.status, third.json["error_code"].as_i64()), (503, Some(50302)), "{}", third.text);
    assert!(third.text.contains("of User:alice") && third.text.contains("per-principal"), "{}", third.text);
    assert_eq!(create(&bob, "g", "b1").status, 200, "bob has slots of his own");
    let full = create(&bob, "g", "b2");
    assert_eq!(full.status, 503, "{}", full.text);
    assert!(full.text.contains("on this node (at most 3"), "{}", full.text);
    let deleted = alice.delete("/consumers/g/instances/a1");
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    assert_eq!(create(&bob, "g", "b2").status, 200, "the freed slot is taken");
}

#[test]
fn without_authentication_only_this_nodes_host_names_are_served() {
    // Proves the DNS-rebinding guard: with HTTP authentication off, a request whose Host names
    // another site (a page whose name was rebound to 127.0.0.1, so its requests look
    // same-origin) is refused 403 40303 and changes nothing, while IP literals, localhost
    // and --http-allowed-hosts are served (the advertised hosts too: config's unit test).
    let node = Runnel::start(&["--http-allowed-hosts", "runnel.internal"]);
    support::create_topic(&node, "kept", 1);
    let ask = |method: &str, path: &str, host: &str| {
        let stream = std::net::TcpStream::connect(node.http_addr).expect("connect");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        exchange(&stream, &head, 0)
    };
    let port = node.http_addr.port();
    let (status, body) = ask("DELETE", "/v1/topics/kept", &format!("evil.test:{port}"));
    assert!(status.starts_with("http/1.1 403"), "{status}");
    assert!(body.contains("40303") && body.contains("--http-allowed-hosts"), "{body}");
    assert!(ask("GET", "/v1/topics", "evil.test").0.starts_with("http/1.1 403"), "the dashboard's reads too");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("localhost:{port}"),
        format!("RUNNEL.internal:{port}"),
    ] {
        let (status, body) = ask("GET", "/v1/topics/kept", &host);
        assert!(status.starts_with("http/1.1 200"), "{host}: {status} {body}");
    }
    // The dashboard may not be framed by another site.
    let (headers, _) = ask("GET", "/", &format!("127.0.0.1:{port}"));
    assert!(headers.contains("x-frame-options: deny"), "{headers}");
    assert!(headers.contains("content-security-policy: frame-ancestors 'none'"), "{headers}");
}
