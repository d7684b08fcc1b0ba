//! Test support: start the real `runnel` binary on ephemeral ports in a temp dir, wait for it to
//! be ready (its `READY` line), stop it with SIGTERM or SIGKILL, restart it on the same data.
#![allow(dead_code)]

pub mod checker;
pub mod cluster;
pub mod pki;
pub mod workload;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a node may take to start (a debug build under a loaded CI machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Runnel {
    child: Option<Child>,
    pub kafka_addr: SocketAddr,
    /// The HTTP listener (REST API, dashboard, /metrics).
    pub http_addr: SocketAddr,
    /// Every Kafka listener by name (`READY ... listener.<NAME>=<addr>`).
    pub listeners: Vec<(String, SocketAddr)>,
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    options: SpawnOptions,
    _temp: Option<tempfile::TempDir>,
}

/// How a node's process is started, beyond its flags (kept for restarts).
#[derive(Debug, Clone, Default)]
pub struct SpawnOptions {
    /// The node's stderr (its log) goes to this file, appended, instead of the test's stderr:
    /// for tests that assert on log lines.
    pub stderr_file: Option<PathBuf>,
    /// RLIMIT_NOFILE, soft and hard, of the process (`setrlimit` before `exec`).
    pub nofile_limit: Option<u64>,
}

impl Runnel {
    /// Starts a single-node cluster in a fresh temp dir with `extra_args` (e.g. `--log`).
    pub fn start(extra_args: &[&str]) -> Runnel {
        let temp = tempfile::tempdir().expect("temp dir");
        let data_dir = temp.path().join("data");
        let mut node = Runnel::start_in(&data_dir, extra_args);
        node._temp = Some(temp);
        node
    }

    /// Starts a node on `data_dir` (kept by the caller).
    pub fn start_in(data_dir: &Path, extra_args: &[&str]) -> Runnel {
        Runnel::start_in_with(data_dir, extra_args, SpawnOptions::default())
    }

    /// Starts a node on `data_dir` (kept by the caller) with `options` for its process.
    pub fn start_in_with(data_dir: &Path, extra_args: &[&str], options: SpawnOptions) -> Runnel {
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let (child, kafka_addr, http_addr, listeners) = spawn(data_dir, &extra_args, &options);
        Runnel {
            child: Some(child),
            kafka_addr,
            http_addr,
            listeners,
            data_dir: data_dir.to_path_buf(),
            extra_args,
            options,
            _temp: None,
        }
    }

    /// The bound address of the Kafka listener `name`.
    pub fn listener(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, addr)| *addr)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.listeners))
    }

    /// `http://<http_addr>`: the base URL of the REST API.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    pub fn bootstrap(&self) -> String {
        self.kafka_addr.to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM and wait for exit; returns whether it exited with status 0.
    pub fn terminate(&mut self) -> bool {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_with_deadline(&mut child, START_TIMEOUT);
        status.is_some_and(|s| s.success())
    }

    /// SIGKILL: a crash.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts the node again on the same data dir (new ports).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the node before restarting it");
        let (child, kafka_addr, http_addr, listeners) = spawn(&self.data_dir, &self.extra_args, &self.options);
        self.child = Some(child);
        self.kafka_addr = kafka_addr;
        self.http_addr = http_addr;
        self.listeners = listeners;
    }

    /// Starts the node again on the same data dir and the same Kafka and HTTP ports (clients
    /// keep their bootstrap list), with `more_args` for this start only (e.g. `--cluster-id`).
    pub fn restart_on_same_ports(&mut self, more_args: &[&str]) {
        assert!(self.child.is_none(), "stop the node before restarting it");
        let mut args = self.extra_args.clone();
        // A listener the node was started on (a cluster's fixed Kafka port) is kept as given:
        // the flag may appear once.
        for (flag, addr) in [("--kafka-listen", self.kafka_addr), ("--http-listen", self.http_addr)] {
            if !args.iter().any(|a| a == flag) {
                args.extend([flag.to_string(), addr.to_string()]);
            }
        }
        args.extend(more_args.iter().map(|s| s.to_string()));
        let (child, kafka_addr, http_addr, listeners) = spawn(&self.data_dir, &args, &self.options);
        self.child = Some(child);
        self.kafka_addr = kafka_addr;
        self.http_addr = http_addr;
        self.listeners = listeners;
    }

    /// Whether the process is running (started and not killed or terminated; a SIGSTOPped node
    /// is running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Runnel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(
    data_dir: &Path,
    extra_args: &[String],
    options: &SpawnOptions,
) -> (Child, SocketAddr, SocketAddr, Vec<(String, SocketAddr)>) {
    // RUNNEL_TEST_BINARY runs the suite against another build (e.g. the one before a change).
    let binary = std::env::var_os("RUNNEL_TEST_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_runnel").into());
    let mut command = Command::new(binary);
    // RUNNEL_TEST_LOG_DIR keeps each node's log in a file named after its data dir (for
    // debugging a fault run; pair it with RUNNEL_LOG_LEVEL=info).
    let kept_log = std::env::var_os("RUNNEL_TEST_LOG_DIR").map(|dir| {
        let name: String =
            data_dir.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        PathBuf::from(dir).join(format!("{name}.log"))
    });
    if let Some(path) = options.stderr_file.as_ref().or(kept_log.as_ref()) {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("node log file");
        command.stderr(file);
    } else {
        command.stderr(Stdio::inherit());
    }
    if let Some(limit) = options.nofile_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
        unsafe {
            command.pre_exec(move || {
                let rlimit = libc::rlimit { rlim_cur: limit as libc::rlim_t, rlim_max: limit as libc::rlim_t };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        // A restart on the same ports brings its own listeners.
        .args(if extra_args.iter().any(|a| a == "--kafka-listen" || a == "--listeners") {
            &[][..]
        } else {
            &["--kafka-listen", "127.0.0.1:0"][..]
        })
        .args(if extra_args.iter().any(|a| a == "--http-listen") {
            &[][..]
        } else {
            &["--http-listen", "127.0.0.1:0"][..]
        })
        // A cluster member brings its own (its peers must know it before it starts).
        .args(if extra_args.iter().any(|a| a == "--controller-listen") {
            &[][..]
        } else {
            &["--controller-listen", "127.0.0.1:0"][..]
        })
        .args(extra_args)
        // openraft logs every failed RPC to a dead or cut-off peer (twice a second per peer) at
        // WARN/ERROR: fault tests would drown in it. Runnel's own warnings stay on.
        .env("RUNNEL_LOG_LEVEL", std::env::var("RUNNEL_LOG_LEVEL").unwrap_or_else(|_| "warn,openraft=off".into()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn runnel");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(rest) = line.strip_prefix("READY ") {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    let ready = match rx.recv_timeout(START_TIMEOUT) {
        Ok(ready) => ready,
        Err(_) => {
            let _ = child.kill();
            panic!("runnel did not print READY within {START_TIMEOUT:?}");
        }
    };
    let address = |name: &str| -> SocketAddr {
        ready
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("READY line names the {name} address"))
    };
    let listeners = ready
        .split_whitespace()
        .filter_map(|kv| kv.strip_prefix("listener."))
        .filter_map(|kv| kv.split_once('='))
        .map(|(name, addr)| (name.to_string(), addr.parse().expect("a listener address")))
        .collect();
    (child, address("kafka"), address("http"), listeners)
}

fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            return None;
        }
        // Polling a child's exit status has no blocking-with-timeout form in std.
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

/// Runs `command` (stdout discarded, stderr read as it comes) until it exits or `timeout`
/// passes: its exit status (`None` if it was still running: it is then killed) and stderr.
pub fn run_until_exit(mut command: Command, timeout: Duration) -> (Option<std::process::ExitStatus>, String) {
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
        text
    });
    let mut exited = None;
    wait_until(timeout, || {
        exited = child.try_wait().expect("wait");
        exited.is_some()
    });
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stderr = reader.join().unwrap_or_default();
    (exited, stderr)
}

/// Waits until `condition` holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    condition()
}

/// One client connection speaking the Kafka protocol synchronously: raw requests built with
/// `kafka-protocol`, so every supported version can be exercised (librdkafka picks one).
pub struct RawConn {
    stream: std::net::TcpStream,
    next_correlation_id: i32,
    client_id: &'static str,
}

impl RawConn {
    pub fn open(node: &Runnel, client_id: &'static str) -> RawConn {
        let stream = std::net::TcpStream::connect(node.kafka_addr).expect("connect to runnel");
        stream.set_read_timeout(Some(START_TIMEOUT)).expect("read timeout");
        RawConn { stream, next_correlation_id: 1, client_id }
    }

    /// A connection the caller opened (e.g. bound to another loopback source address).
    pub fn from_stream(stream: std::net::TcpStream, client_id: &'static str) -> RawConn {
        stream.set_read_timeout(Some(START_TIMEOUT)).expect("read timeout");
        RawConn { stream, next_correlation_id: 1, client_id }
    }

    /// The connection itself (to see how the peer ends it).
    pub fn into_stream(self) -> std::net::TcpStream {
        self.stream
    }

    /// Sends `request` at `version` and returns the decoded response, checking the correlation
    /// id and that the response has no trailing bytes (no field its version lacks).
    pub fn call<R: kafka_protocol::protocol::Request>(&mut self, version: i16, request: &R) -> R::Response {
        use bytes::BufMut;
        use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
        use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
        use std::io::{Read, Write};

        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let api = ApiKey::try_from(R::KEY).expect("known api key");
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(self.client_id)));
        let mut buf = bytes::BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, api.request_header_version(version)).expect("encode header");
        request.encode(&mut buf, version).expect("encode request");
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).expect("send request");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("a response");
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame).expect("the whole response");
        let mut frame = bytes::Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version)).expect("header");
        assert_eq!(header.correlation_id, correlation_id);
        let response = R::Response::decode(&mut frame, version).expect("decode response");
        assert!(frame.is_empty(), "{api:?} v{version} response has trailing bytes");
        response
    }
}

/// Runs a future to completion on a fresh current-thread runtime (rdkafka's admin calls).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(future)
}

/// A librdkafka client config pointed at `node`, plus `extra` settings.
pub fn client_config(node: &Runnel, extra: &[(&str, &str)]) -> rdkafka::ClientConfig {
    let mut config = rdkafka::ClientConfig::new();
    config.set("bootstrap.servers", node.bootstrap()).set("broker.address.family", "v4");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config
}

/// Creates a topic with replication factor 1 through librdkafka's AdminClient.
pub fn create_topic(node: &Runnel, name: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        client_config(node, &[]).create().expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(START_TIMEOUT)).request_timeout(Some(START_TIMEOUT));
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let results = block_on(admin.create_topics(&[topic], &options)).expect("CreateTopics");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code:?}"));
    }
}

/// Creates every topic of `names` (RF 1) in one CreateTopics request, as `kafka-topics.sh`
/// scripts and Terraform providers do in bulk.
pub fn create_topics(node: &Runnel, names: &[String], partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        client_config(node, &[]).create().expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(START_TIMEOUT)).request_timeout(Some(START_TIMEOUT));
    let topics: Vec<NewTopic> =
        names.iter().map(|name| NewTopic::new(name, partitions, TopicReplication::Fixed(1))).collect();
    let results = block_on(admin.create_topics(&topics, &options)).expect("CreateTopics");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code:?}"));
    }
}

/// A group member subscribed to `topic`: 6 s session, manual commits, from the earliest offset.
pub fn group_consumer(node: &Runnel, group: &str, topic: &str) -> rdkafka::consumer::BaseConsumer {
    use rdkafka::consumer::Consumer;
    let consumer: rdkafka::consumer::BaseConsumer = client_config(
        node,
        &[
            ("group.id", group),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "300"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

/// A blocking HTTP client for a node's REST API (reqwest on its own runtime).
pub struct HttpApi {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    pub base: String,
    /// Sent with every request (credentials, `X-Runnel-UI`, a cookie).
    pub headers: Vec<(String, String)>,
}

/// One HTTP answer: status, body text, and the body as JSON when it is JSON.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub content_type: String,
    pub text: String,
    pub json: serde_json::Value,
    pub headers: reqwest::header::HeaderMap,
}

impl HttpApi {
    pub fn new(node: &Runnel) -> HttpApi {
        HttpApi::at(&node.http_url())
    }

    pub fn at(base: &str) -> HttpApi {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
        HttpApi { runtime, client, base: base.trim_end_matches('/').to_string(), headers: Vec::new() }
    }

    /// The HTTPS API of `node` (started with `--http-tls`), trusting the CA certificates in
    /// the PEM file `ca`.
    pub fn https(node: &Runnel, ca: &Path) -> HttpApi {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let pem = std::fs::read(ca).expect("read the CA file");
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(60)).tls_built_in_root_certs(false);
        for certificate in reqwest::Certificate::from_pem_bundle(&pem).expect("CA PEM") {
            builder = builder.add_root_certificate(certificate);
        }
        let base = node.http_url().replacen("http://", "https://", 1);
        HttpApi { runtime, client: builder.build().expect("client"), base, headers: Vec::new() }
    }

    /// The same API with `name: value` sent on every request.
    pub fn with_header(mut self, name: &str, value: &str) -> HttpApi {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The same API authenticating with HTTP Basic.
    pub fn with_basic(self, user: &str, password: &str) -> HttpApi {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.with_header("authorization", &format!("Basic {encoded}"))
    }

    /// The sum of every series of metric `name` on the node's `/metrics` (0 when absent).
    pub fn metric_sum(&self, name: &str) -> f64 {
        let text = self.get("/metrics").text;
        text.lines()
            .filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Any request; `body` is sent with `content_type` when given.
    pub fn call(&self, method: &str, path: &str, content_type: Option<&str>, body: Option<Vec<u8>>) -> HttpAnswer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.client.request(method, format!("{}{}", self.base, path));
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        self.runtime.block_on(async {
            let response = request.send().await.expect("HTTP request");
            let status = response.status().as_u16();
            let content_type =
                response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            let headers = response.headers().clone();
            let text = response.text().await.expect("HTTP body");
            let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
            HttpAnswer { status, content_type, text, json, headers }
        })
    }

    pub fn get(&self, path: &str) -> HttpAnswer {
        self.call("GET", path, None, None)
    }

    pub fn delete(&self, path: &str) -> HttpAnswer {
        self.call("DELETE", path, None, None)
    }

    /// POST/PUT of a JSON value with `content_type` (application/json when `None`).
    pub fn send_json(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &serde_json::Value,
    ) -> HttpAnswer {
        let body = serde_json::to_vec(body).expect("JSON");
        self.call(method, path, Some(content_type.unwrap_or("application/json")), Some(body))
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> HttpAnswer {
        self.send_json("POST", path, None, body)
    }

    /// The cluster id (for v3 paths).
    pub fn cluster_id(&self) -> String {
        self.get("/v1/cluster").json["cluster_id"].as_str().expect("cluster id").to_string()
    }
}

/// Builds guest crate `package` (an SDK example or a `tests/guests` crate) for wasm32-wasip2
/// with profile `wasm` into `target/wasm` and returns the component's bytes. One build at a
/// time per test binary (cargo would serialise them on its lock anyway).
#[allow(dead_code)]
pub fn guest_component(package: &str) -> Vec<u8> {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target_dir = root.join("target/wasm");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args(["build", "--quiet", "--profile", "wasm", "--target", "wasm32-wasip2", "-p", package, "--target-dir"])
        .arg(&target_dir)
        .status()
        .expect("run cargo");
    assert!(status.success(), "building {package} for wasm32-wasip2 failed (rustup target add wasm32-wasip2?)");
    let file = target_dir.join("wasm32-wasip2/wasm").join(format!("{}.wasm", package.replace('-', "_")));
    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Creates ALLOW ACLs through CreateAcls on the PLAINTEXT listener (its User:ANONYMOUS must be
/// allowed to: a super user, or no ACL on the cluster with allow.everyone.if.no.acl.found):
/// (resource type, name, pattern type, principal, operation) with Kafka's codes.
pub fn allow_acls(node: &Runnel, acls: &[(i8, &str, i8, &str, i8)]) {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::CreateAclsRequest;
    use kafka_protocol::protocol::StrBytes;
    let creations = acls
        .iter()
        .map(|(kind, name, pattern, principal, operation)| {
            AclCreation::default()
                .with_resource_type(*kind)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_resource_pattern_type(*pattern)
                .with_principal(StrBytes::from_string(principal.to_string()))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(*operation)
                .with_permission_type(3)
        })
        .collect();
    let response = RawConn::open(node, "admin").call(3, &CreateAclsRequest::default().with_creations(creations));
    for result in &response.results {
        assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    }
}

#[path = "skip.rs"]
mod skip_file;
#[allow(unused_imports)] // (test binaries that skip nothing)
pub use skip_file::skip;
