//! Node configuration: embedded defaults, overridden by an optional TOML file, then by
//! environment variables (`RUNNEL_*`), then by command-line flags.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::log::{ConfigError, LogConfig};
use crate::security::acl::AuthorizerSettings;
use crate::security::listeners::Listeners;
use crate::security::sasl::SaslSettings;
use crate::security::tls::{ClientAuth, TlsSettings};
use crate::security::{HttpSecurity, SecurityConfig};
use crate::server::ConnectionLimits;

/// `max.broker.partitions` when unset: five times Kafka's old guidance of 4,000 per broker. At
/// 20,000, issue 16's scale bench restarted a node in 1.4 s (tmpfs) with 212 MB resident.
pub const DEFAULT_MAX_BROKER_PARTITIONS: u64 = 20_000;
/// REST Proxy consumer instances on a node, and per principal, unless set.
const DEFAULT_HTTP_CONSUMER_INSTANCES: usize = 1_000;

/// Flags and environment variables of `runnel serve`. Every field is optional so that the
/// file and the defaults can fill what is not given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (snake_case keys) and a `[log]` table of topic
    /// config defaults.
    #[arg(long, env = "RUNNEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's id.
    #[arg(long, env = "RUNNEL_NODE_ID")]
    pub node_id: Option<u64>,
    /// Kafka listener address [default: 127.0.0.1:9092].
    #[arg(long, env = "RUNNEL_KAFKA_LISTEN")]
    pub kafka_listen: Option<SocketAddr>,
    /// Host advertised to clients in Metadata [default: the listener's IP].
    #[arg(long, env = "RUNNEL_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    /// Port advertised to clients [default: the listener's port].
    #[arg(long, env = "RUNNEL_ADVERTISED_PORT")]
    pub advertised_port: Option<u16>,
    /// `listeners`: the Kafka listeners, `NAME://host:port,...` (e.g.
    /// `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`); replaces --kafka-listen
    /// [default: PLAINTEXT://<kafka-listen>].
    #[arg(long, env = "RUNNEL_LISTENERS")]
    pub listeners: Option<String>,
    /// `advertised.listeners`: `NAME://host:port,...`, what clients of each listener are told
    /// [default: each listener's bound address].
    #[arg(long, env = "RUNNEL_ADVERTISED_LISTENERS")]
    pub advertised_listeners: Option<String>,
    /// `listener.security.protocol.map`: `NAME:PROTOCOL,...` with PLAINTEXT, SSL,
    /// SASL_PLAINTEXT or SASL_SSL [default: the four protocol names map to themselves].
    #[arg(long, env = "RUNNEL_LISTENER_SECURITY_PROTOCOL_MAP")]
    pub listener_security_protocol_map: Option<String>,
    /// `inter.broker.listener.name`: the listener other brokers reach this one on
    /// [default: the first of --listeners].
    #[arg(long, env = "RUNNEL_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
    /// `ssl.keystore.location`: PEM file with the certificate chain and the private key of TLS
    /// listeners (unencrypted, or encrypted PKCS#8 with --ssl-key-password).
    #[arg(long, env = "RUNNEL_SSL_KEYSTORE_LOCATION")]
    pub ssl_keystore_location: Option<PathBuf>,
    /// `ssl.key.password`: the password of the keystore's encrypted private key (`ENCRYPTED
    /// PRIVATE KEY`, as `openssl pkcs8 -topk8` writes it); prefer the environment variable to
    /// the command line.
    #[arg(long, env = "RUNNEL_SSL_KEY_PASSWORD", hide_env_values = true)]
    pub ssl_key_password: Option<String>,
    /// A listener's own TLS setting, with Kafka's listener prefix:
    /// `listener.name.<listener>.ssl.keystore.location=...` (also `ssl.key.password`,
    /// `ssl.truststore.location`, `ssl.client.auth`); it replaces the node's `ssl.*` setting for
    /// that listener (`controller` for the metadata quorum's). Repeatable; in the environment,
    /// `;`-separated.
    #[arg(long = "listener-config", env = "RUNNEL_LISTENER_CONFIG", value_delimiter = ';', hide_env_values = true)]
    pub listener_config: Vec<String>,
    /// `ssl.truststore.location`: PEM CA certificates that client certificates are checked
    /// against.
    #[arg(long, env = "RUNNEL_SSL_TRUSTSTORE_LOCATION")]
    pub ssl_truststore_location: Option<PathBuf>,
    /// `ssl.client.auth`: none, requested or required [default: none].
    #[arg(long, env = "RUNNEL_SSL_CLIENT_AUTH")]
    pub ssl_client_auth: Option<String>,
    /// `ssl.reload.interval.ms`: how often the keystore and truststore files are checked for
    /// changes; changed ones are used for new connections without a restart [default: 30000].
    #[arg(long, env = "RUNNEL_SSL_RELOAD_INTERVAL_MS")]
    pub ssl_reload_interval_ms: Option<u64>,
    /// `sasl.enabled.mechanisms` of SASL listeners [default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512].
    #[arg(long, env = "RUNNEL_SASL_ENABLED_MECHANISMS")]
    pub sasl_enabled_mechanisms: Option<String>,
    /// `connections.max.reauth.ms` (KIP-368): a SASL session ends this long after it
    /// authenticated unless the client re-authenticates; 0 never [default: 0].
    #[arg(long, env = "RUNNEL_CONNECTIONS_MAX_REAUTH_MS")]
    pub connections_max_reauth_ms: Option<u64>,
    /// `connection.failed.authentication.delay.ms` (KIP-306): a failed SASL authentication is
    /// answered, and its connection closed, this long after it failed; a wrong HTTP password
    /// waits as long before its 401. Slows password guessing; below
    /// `connections.max.idle.ms` [default: 100].
    #[arg(long, env = "RUNNEL_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS")]
    pub connection_failed_authentication_delay_ms: Option<u64>,
    /// `sasl.server.max.receive.size`: the largest request a SASL connection may send before
    /// it has authenticated; a larger one closes it. Such requests are read outside the
    /// `queued.max.request.bytes` pool, so clients without credentials cannot fill it
    /// [default: 524288].
    #[arg(long, env = "RUNNEL_SASL_SERVER_MAX_RECEIVE_SIZE")]
    pub sasl_server_max_receive_size: Option<usize>,
    /// `authorizer.class.name`: `org.apache.kafka.metadata.authorizer.StandardAuthorizer` (or
    /// `standard`) authorizes every request with the ACLs of the metadata quorum; empty: no
    /// authorization [default: empty].
    #[arg(long, env = "RUNNEL_AUTHORIZER_CLASS_NAME")]
    pub authorizer_class_name: Option<String>,
    /// `super.users`: principals allowed everything, `User:a;User:b`.
    #[arg(long, env = "RUNNEL_SUPER_USERS")]
    pub super_users: Option<String>,
    /// `allow.everyone.if.no.acl.found`: a resource no ACL matches is open to everyone
    /// [default: false].
    #[arg(long, env = "RUNNEL_ALLOW_EVERYONE_IF_NO_ACL_FOUND")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// A SCRAM user to create when the node starts unless it exists, in Kafka's
    /// `kafka-storage.sh format --add-scram` syntax: `SCRAM-SHA-512=[name=admin,password=...]`
    /// (repeatable; in the environment, `;`-separated).
    #[arg(long = "add-scram", env = "RUNNEL_ADD_SCRAM", value_delimiter = ';')]
    pub add_scram: Vec<String>,
    /// `sasl.mechanism.inter.broker.protocol`: how this node authenticates to the others when
    /// the inter-broker listener uses SASL [default: SCRAM-SHA-512].
    #[arg(long, env = "RUNNEL_SASL_MECHANISM_INTER_BROKER_PROTOCOL")]
    pub sasl_mechanism_inter_broker_protocol: Option<String>,
    /// The SASL user this node authenticates as on a SASL inter-broker listener (Kafka puts it
    /// in the listener's JAAS config); a super user, or one with CLUSTER_ACTION.
    #[arg(long, env = "RUNNEL_INTER_BROKER_SASL_USERNAME")]
    pub inter_broker_sasl_username: Option<String>,
    /// Its password (prefer the environment variable to the command line).
    #[arg(long, env = "RUNNEL_INTER_BROKER_SASL_PASSWORD", hide_env_values = true)]
    pub inter_broker_sasl_password: Option<String>,
    /// Whether HTTP requests authenticate: `none` (every request is `User:ANONYMOUS`) or
    /// `required` (HTTP Basic with a SCRAM user's password, a bearer token from
    /// `POST /v1/tokens`, or the dashboard's login cookie; only the dashboard's static files,
    /// `/openapi.json` and `POST /v1/login` are open) [default: none].
    #[arg(long, env = "RUNNEL_HTTP_AUTHENTICATION")]
    pub http_authentication: Option<String>,
    /// Serve the HTTP API (and dashboard) over HTTPS with the certificate and key of
    /// `--ssl-keystore-location` (reloaded like the Kafka listeners'); the nodes of a cluster
    /// then call each other over HTTPS, trusting `--ssl-truststore-location` [default: false].
    #[arg(long, env = "RUNNEL_HTTP_TLS")]
    pub http_tls: Option<bool>,
    /// Host names the HTTP API answers to without authentication, comma-separated, `*` for
    /// any: a request whose `Host` header names another (a web page rebinding its DNS name
    /// to this node) is refused 403. IP literals, `localhost` and the listeners' advertised
    /// hosts are always allowed [default: empty].
    #[arg(long, env = "RUNNEL_HTTP_ALLOWED_HOSTS")]
    pub http_allowed_hosts: Option<String>,
    /// How long a dashboard login lasts [default: 28800000, 8 hours].
    #[arg(long, env = "RUNNEL_HTTP_SESSION_MS")]
    pub http_session_ms: Option<u64>,
    /// The longest lifetime a `POST /v1/tokens` token may ask for (Kafka's
    /// `delegation.token.max.lifetime.ms`) [default: 604800000, 7 days].
    #[arg(long, env = "RUNNEL_HTTP_TOKEN_MAX_LIFETIME_MS")]
    pub http_token_max_lifetime_ms: Option<u64>,
    /// Unexpired API tokens one principal may hold; dashboard logins beyond it end the oldest
    /// login [default: 100].
    #[arg(long, env = "RUNNEL_HTTP_TOKENS_MAX_PER_PRINCIPAL")]
    pub http_tokens_max_per_principal: Option<usize>,
    /// Dashboard logins and API tokens one principal may be issued a minute on this node (each
    /// is a write to the metadata quorum), a minute's worth at once; beyond it 429 with
    /// Retry-After [default: 30].
    #[arg(long, env = "RUNNEL_HTTP_TOKEN_ISSUES_PER_MINUTE")]
    pub http_token_issues_per_minute: Option<u32>,
    /// REST Proxy consumer instances (`POST /consumers/{group}`) this node holds at once, each
    /// a group membership and a task; beyond it 503 [default: 1000].
    #[arg(long, env = "RUNNEL_HTTP_CONSUMER_INSTANCES_MAX")]
    pub http_consumer_instances_max: Option<usize>,
    /// Of those, how many one principal may hold (so one user cannot take them all when HTTP
    /// authenticates); beyond it 503 [default: 1000].
    #[arg(long, env = "RUNNEL_HTTP_CONSUMER_INSTANCES_MAX_PER_PRINCIPAL")]
    pub http_consumer_instances_max_per_principal: Option<usize>,
    /// HTTP listener: REST API, dashboard, /metrics [default: 127.0.0.1:8080].
    #[arg(long, env = "RUNNEL_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// Metadata quorum (raft) listener address [default: 127.0.0.1:9093].
    #[arg(long, env = "RUNNEL_CONTROLLER_LISTEN")]
    pub controller_listen: Option<SocketAddr>,
    /// Voters of the metadata quorum: `id@host:port,...` [default: this node alone].
    #[arg(long, env = "RUNNEL_VOTERS")]
    pub voters: Option<String>,
    /// `process.roles`: `broker,controller` (a voter of the metadata quorum that also hosts
    /// partitions) or `broker` (a broker-only node: an observer of the quorum, not in
    /// `--voters`, which must then name the voters) [default: broker,controller].
    #[arg(long, env = "RUNNEL_PROCESS_ROLES")]
    pub process_roles: Option<String>,
    /// Data directory [default: ./runnel-data].
    #[arg(long, env = "RUNNEL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `metadata.log.dir`: the metadata quorum's directory (raft log, vote, snapshot), e.g. on
    /// another filesystem than the partition logs so a full data disk leaves the quorum writing
    /// [default: <data-dir>/metadata].
    #[arg(long, env = "RUNNEL_METADATA_LOG_DIR")]
    pub metadata_log_dir: Option<PathBuf>,
    /// Cluster id for a new data directory [default: random]. Kafka's ids are base64url, so
    /// one in 64 starts with `-`: taken as a value, not a flag.
    #[arg(long, env = "RUNNEL_CLUSTER_ID", allow_hyphen_values = true)]
    pub cluster_id: Option<String>,
    /// `num.partitions`: partitions of auto-created topics [default: 1].
    #[arg(long, env = "RUNNEL_NUM_PARTITIONS")]
    pub num_partitions: Option<u32>,
    /// `default.replication.factor`: replicas of auto-created topics and of CreateTopics with
    /// -1 [default: 1].
    #[arg(long, env = "RUNNEL_DEFAULT_REPLICATION_FACTOR")]
    pub default_replication_factor: Option<u16>,
    /// `broker.rack`: this broker's rack; replica placement puts the replicas of a partition on
    /// different racks [default: none].
    #[arg(long, env = "RUNNEL_RACK")]
    pub rack: Option<String>,
    /// `min.insync.replicas`: broker default of the topic config (the same as
    /// `--log min.insync.replicas=N`, which it overrides) [default: 1].
    #[arg(long, env = "RUNNEL_MIN_INSYNC_REPLICAS")]
    pub min_insync_replicas: Option<i32>,
    /// `unclean.leader.election.enable`: broker default of the topic config (the same as
    /// `--log unclean.leader.election.enable=...`, which it overrides) [default: false].
    #[arg(long, env = "RUNNEL_UNCLEAN_LEADER_ELECTION_ENABLE")]
    pub unclean_leader_election_enable: Option<bool>,
    /// `auto.create.topics.enable` [default: true].
    #[arg(long, env = "RUNNEL_AUTO_CREATE_TOPICS_ENABLE")]
    pub auto_create_topics_enable: Option<bool>,
    /// `socket.request.max.bytes` [default: 104857600].
    #[arg(long, env = "RUNNEL_SOCKET_REQUEST_MAX_BYTES")]
    pub socket_request_max_bytes: Option<usize>,
    /// `queued.max.request.bytes`: bytes of requests being read or waiting to be handled, over
    /// all connections; at least `socket.request.max.bytes` [default: 536870912; Kafka's -1,
    /// unbounded, is not accepted].
    #[arg(long, env = "RUNNEL_QUEUED_MAX_REQUEST_BYTES")]
    pub queued_max_request_bytes: Option<usize>,
    /// `max.connections`: Kafka connections of the node; beyond it accepting waits for one to
    /// close [default: 10000].
    #[arg(long, env = "RUNNEL_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// `max.connections.per.ip`: connections from one address; more are closed at once
    /// [default: 10000].
    #[arg(long, env = "RUNNEL_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// `connections.max.idle.ms`: a connection that reads and writes nothing for this long is
    /// closed [default: 600000].
    #[arg(long, env = "RUNNEL_CONNECTIONS_MAX_IDLE_MS")]
    pub connections_max_idle_ms: Option<u64>,
    /// `max.connection.creation.rate` (KIP-612): new Kafka connections accepted per second
    /// over every listener but the inter-broker one (a burst of one second's worth); beyond it
    /// accepting waits and clients wait in the listen backlog [default: unbounded].
    #[arg(long, env = "RUNNEL_MAX_CONNECTION_CREATION_RATE")]
    pub max_connection_creation_rate: Option<u32>,
    /// `fetch.max.bytes`: record bytes of one Fetch response; a request's `max_bytes` is capped
    /// by it [default: 57671680].
    #[arg(long, env = "RUNNEL_FETCH_MAX_BYTES")]
    pub fetch_max_bytes: Option<usize>,
    /// Retention, compaction and flush checks every this many ms [default: 15000].
    #[arg(long, env = "RUNNEL_HOUSEKEEPING_INTERVAL_MS")]
    pub housekeeping_interval_ms: Option<u64>,
    /// `producer.id.expiration.ms`: a partition forgets a producer (its epoch and sequences)
    /// that wrote nothing for this long and has no open transaction; checked every
    /// housekeeping interval [default: 86400000].
    #[arg(long, env = "RUNNEL_PRODUCER_ID_EXPIRATION_MS")]
    pub producer_id_expiration_ms: Option<u64>,
    /// `log.cleaner.dedupe.buffer.size`: the memory one compaction's key map may take (about
    /// 56 bytes per distinct key); a compacted log with more dirty keys is cleaned in several
    /// passes, each up to where its map filled [default: 134217728].
    #[arg(long, env = "RUNNEL_LOG_CLEANER_DEDUPE_BUFFER_SIZE")]
    pub log_cleaner_dedupe_buffer_size: Option<u64>,
    /// `transaction.max.timeout.ms`: the largest `transaction.timeout.ms` a transactional
    /// producer may ask for (InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it)
    /// [default: 900000].
    #[arg(long, env = "RUNNEL_TRANSACTION_MAX_TIMEOUT_MS")]
    pub transaction_max_timeout_ms: Option<i32>,
    /// `transaction.partition.verification.enable` (KIP-890 part 1): before a transaction's
    /// first batch in a partition is appended, its leader asks the transaction coordinator
    /// whether the partition is in the producer's ongoing transaction; a late or zombie batch is
    /// refused (INVALID_TXN_STATE) instead of opening a transaction that never ends
    /// [default: true].
    #[arg(long, env = "RUNNEL_TRANSACTION_PARTITION_VERIFICATION_ENABLE")]
    pub transaction_partition_verification_enable: Option<bool>,
    /// The finalized level of Kafka's `transaction.version` feature that ApiVersions
    /// advertises: 2 (KIP-890 part 2, Kafka 4's default) lets clients that support it (Java 4.x)
    /// bump the epoch on every commit and abort and add partitions by producing; 0 or 1 keeps
    /// every client on the classic protocol. Both are served either way [default: 2].
    #[arg(long, env = "RUNNEL_TRANSACTION_VERSION", value_parser = clap::value_parser!(i16).range(0..=2))]
    pub transaction_version: Option<i16>,
    /// `transactional.id.expiration.ms`: a transactional id whose last transaction ended (or
    /// that never began one) this long ago is forgotten by its coordinator, as Kafka does
    /// [default: 604800000, 7 days].
    #[arg(long, env = "RUNNEL_TRANSACTIONAL_ID_EXPIRATION_MS", value_parser = clap::value_parser!(i64).range(1..))]
    pub transactional_id_expiration_ms: Option<i64>,
    /// `transaction.state.log.num.partitions`: partitions `__transaction_state` is created with
    /// (fixed once it exists: ids map to partitions by count) [default: 50].
    #[arg(long, env = "RUNNEL_TRANSACTION_STATE_LOG_NUM_PARTITIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub transaction_state_log_num_partitions: Option<u32>,
    /// `transaction.state.log.replication.factor`: replicas `__transaction_state` is created
    /// with, capped to the brokers usable at that moment [default: 3].
    #[arg(long, env = "RUNNEL_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", value_parser = clap::value_parser!(u16).range(1..))]
    pub transaction_state_log_replication_factor: Option<u16>,
    /// `broker.session.timeout.ms`: the active controller fences a broker it has not heard a
    /// heartbeat from for this long; its leaderships move and it leaves every ISR [default: 1000].
    #[arg(long, env = "RUNNEL_BROKER_SESSION_TIMEOUT_MS")]
    pub broker_session_timeout_ms: Option<u64>,
    /// `broker.heartbeat.interval.ms` [default: 200].
    #[arg(long, env = "RUNNEL_BROKER_HEARTBEAT_INTERVAL_MS")]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// `replica.lag.time.max.ms`: a follower that has not caught up with the leader for this long
    /// leaves the ISR [default: 30000].
    #[arg(long, env = "RUNNEL_REPLICA_LAG_TIME_MAX_MS")]
    pub replica_lag_time_max_ms: Option<u64>,
    /// `auto.leader.rebalance.enable`: the active controller moves leaderships back to each
    /// partition's preferred (first) replica when it is live and in sync [default: true].
    #[arg(long, env = "RUNNEL_AUTO_LEADER_REBALANCE_ENABLE")]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// `leader.imbalance.check.interval.seconds` [default: 300].
    #[arg(long, env = "RUNNEL_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS")]
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// `replica.selector.class`: `org.apache.kafka.common.replica.RackAwareReplicaSelector` (or
    /// `rack-aware`) lets a leader send a consumer that names its `client.rack` to an in-sync
    /// replica in that rack (KIP-392 follower fetching) [default: none, consumers read from the
    /// leader].
    #[arg(long, env = "RUNNEL_REPLICA_SELECTOR_CLASS")]
    pub replica_selector_class: Option<String>,
    /// `offsets.retention.minutes`: committed offsets of groups without members expire after
    /// this long [default: 10080, 7 days].
    #[arg(long, env = "RUNNEL_OFFSETS_RETENTION_MINUTES")]
    pub offsets_retention_minutes: Option<u64>,
    /// `offsets.topic.num.partitions`: partitions `__consumer_offsets` is created with
    /// [default: 50].
    #[arg(long, env = "RUNNEL_OFFSETS_TOPIC_NUM_PARTITIONS")]
    pub offsets_topic_num_partitions: Option<u32>,
    /// `offsets.topic.replication.factor`: replicas `__consumer_offsets` is created with, capped
    /// to the brokers usable at that moment (Kafka refuses instead) [default: 3].
    #[arg(long, env = "RUNNEL_OFFSETS_TOPIC_REPLICATION_FACTOR")]
    pub offsets_topic_replication_factor: Option<u16>,
    /// `group.max.size`: members per consumer group [default: 1000].
    #[arg(long, env = "RUNNEL_GROUP_MAX_SIZE")]
    pub group_max_size: Option<usize>,
    /// `group.max.count` (Runnel's own): consumer groups a node holds in memory [default: 10000].
    #[arg(long, env = "RUNNEL_GROUP_MAX_COUNT")]
    pub group_max_count: Option<usize>,
    /// `group.initial.rebalance.delay.ms`: the first rebalance of an empty group waits this long
    /// for more members [default: 3000].
    #[arg(long, env = "RUNNEL_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// `group.consumer.session.timeout.ms`: a consumer-protocol member (KIP-848) that sends no
    /// heartbeat for this long leaves its group [default: 45000].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
    pub group_consumer_session_timeout_ms: Option<u32>,
    /// `group.consumer.heartbeat.interval.ms`: how often consumer-protocol members heartbeat,
    /// hence how soon they learn of a new assignment [default: 5000].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
    pub group_consumer_heartbeat_interval_ms: Option<u32>,
    /// `group.consumer.reconcile.heartbeat.interval.ms` (Runnel's own): the interval answered
    /// instead to a consumer-protocol member that has just joined or is still reconciling (has
    /// partitions to give up or to wait for), so a rebalance takes a few of these rather than a
    /// few full intervals; capped at the heartbeat interval [default: 500].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_RECONCILE_HEARTBEAT_INTERVAL_MS")]
    pub group_consumer_reconcile_heartbeat_interval_ms: Option<u32>,
    /// `group.consumer.max.size`: members per consumer-protocol group [default: 1000].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_MAX_SIZE")]
    pub group_consumer_max_size: Option<usize>,
    /// `group.consumer.assignors`: the built-in server assignors offered, the first the default
    /// (`uniform`, `range`) [default: uniform,range].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_ASSIGNORS", value_delimiter = ',')]
    pub group_consumer_assignors: Option<Vec<String>>,
    /// `group.consumer.migration.policy`: which online conversions a group with members may go
    /// through between the classic and the consumer protocol: `bidirectional`, `upgrade`
    /// (classic → consumer when a consumer-protocol member joins), `downgrade` (consumer →
    /// classic when the last consumer-protocol member leaves), `disabled`; an empty group always
    /// converts [default: bidirectional].
    #[arg(long, env = "RUNNEL_GROUP_CONSUMER_MIGRATION_POLICY")]
    pub group_consumer_migration_policy: Option<String>,
    /// `log.open.files.max` (Runnel's own; Kafka has none): segment `.log` files the node keeps
    /// open at once over all its partitions; beyond it the least recently used are closed and
    /// reopened when next needed. `auto` is half the soft RLIMIT_NOFILE at start, after the node
    /// raised it to the hard limit; at least 16 [default: auto].
    #[arg(long, env = "RUNNEL_LOG_OPEN_FILES_MAX")]
    pub log_open_files_max: Option<String>,
    /// `metrics.aggregate` (Redpanda's `aggregate_metrics`; Kafka has none): `/metrics` writes
    /// the per-partition series (log size and offsets, group lag and offsets) summed per topic,
    /// without a partition label: one series per topic instead of one per partition, for nodes
    /// with tens of thousands of partitions [default: false].
    #[arg(long, env = "RUNNEL_METRICS_AGGREGATE")]
    pub metrics_aggregate: Option<bool>,
    /// `max.broker.partitions` (KIP-578's name; Kafka has no bound): partition replicas one
    /// broker may host; a CreateTopics or CreatePartitions that would put more on a broker is
    /// refused with POLICY_VIOLATION and creates nothing. The internal topics are exempt
    /// [default: 20000].
    #[arg(long, env = "RUNNEL_MAX_BROKER_PARTITIONS")]
    pub max_broker_partitions: Option<u64>,
    /// `max.producers.per.partition` (Runnel's own; Redpanda's `max_concurrent_producer_ids`,
    /// Kafka bounds producer state only by `producer.id.expiration.ms`): producer ids one
    /// partition keeps sequence and transaction state for. A new one past it evicts the idle
    /// producer written longest ago (its later retries are no longer de-duplicated); if every
    /// producer there has an open transaction, a new producer's batch is refused with
    /// POLICY_VIOLATION [default: 10000].
    #[arg(long, env = "RUNNEL_MAX_PRODUCERS_PER_PARTITION", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_producers_per_partition: Option<u64>,
    /// Topic config defaults, Kafka names: `--log retention.ms=3600000` (repeatable; in the
    /// environment, comma-separated).
    #[arg(long = "log", env = "RUNNEL_LOG", value_delimiter = ',')]
    pub log: Vec<String>,
    /// `ID=HOST:PORT`: reach broker ID there instead of at the address it registered, for this
    /// node's own traffic to it only (replica fetches, forwarded requests); clients are still
    /// told the registered address. For test proxies and NAT (repeatable; in the environment,
    /// comma-separated).
    #[arg(
        long = "broker-address-override",
        env = "RUNNEL_BROKER_ADDRESS_OVERRIDE",
        value_delimiter = ',',
        hide = true
    )]
    pub broker_address_override: Vec<String>,
}

/// The TOML file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node_id: Option<u64>,
    kafka_listen: Option<SocketAddr>,
    advertised_host: Option<String>,
    advertised_port: Option<u16>,
    http_listen: Option<SocketAddr>,
    listeners: Option<String>,
    advertised_listeners: Option<String>,
    listener_security_protocol_map: Option<String>,
    inter_broker_listener_name: Option<String>,
    ssl_keystore_location: Option<PathBuf>,
    ssl_key_password: Option<String>,
    listener_config: Option<Vec<String>>,
    ssl_truststore_location: Option<PathBuf>,
    ssl_client_auth: Option<String>,
    ssl_reload_interval_ms: Option<u64>,
    sasl_enabled_mechanisms: Option<String>,
    connections_max_reauth_ms: Option<u64>,
    connection_failed_authentication_delay_ms: Option<u64>,
    sasl_server_max_receive_size: Option<usize>,
    http_authentication: Option<String>,
    http_tls: Option<bool>,
    http_session_ms: Option<u64>,
    http_allowed_hosts: Option<String>,
    http_token_max_lifetime_ms: Option<u64>,
    http_tokens_max_per_principal: Option<usize>,
    http_token_issues_per_minute: Option<u32>,
    http_consumer_instances_max: Option<usize>,
    http_consumer_instances_max_per_principal: Option<usize>,
    authorizer_class_name: Option<String>,
    sasl_mechanism_inter_broker_protocol: Option<String>,
    inter_broker_sasl_username: Option<String>,
    inter_broker_sasl_password: Option<String>,
    add_scram: Option<Vec<String>>,
    super_users: Option<String>,
    allow_everyone_if_no_acl_found: Option<bool>,
    controller_listen: Option<SocketAddr>,
    voters: Option<String>,
    process_roles: Option<String>,
    data_dir: Option<PathBuf>,
    metadata_log_dir: Option<PathBuf>,
    cluster_id: Option<String>,
    num_partitions: Option<u32>,
    default_replication_factor: Option<u16>,
    rack: Option<String>,
    min_insync_replicas: Option<i32>,
    unclean_leader_election_enable: Option<bool>,
    auto_create_topics_enable: Option<bool>,
    socket_request_max_bytes: Option<usize>,
    queued_max_request_bytes: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    max_connection_creation_rate: Option<u32>,
    connections_max_idle_ms: Option<u64>,
    fetch_max_bytes: Option<usize>,
    housekeeping_interval_ms: Option<u64>,
    producer_id_expiration_ms: Option<u64>,
    log_cleaner_dedupe_buffer_size: Option<u64>,
    transaction_max_timeout_ms: Option<i32>,
    transaction_partition_verification_enable: Option<bool>,
    transaction_version: Option<i16>,
    transactional_id_expiration_ms: Option<i64>,
    transaction_state_log_num_partitions: Option<u32>,
    transaction_state_log_replication_factor: Option<u16>,
    broker_session_timeout_ms: Option<u64>,
    broker_heartbeat_interval_ms: Option<u64>,
    replica_lag_time_max_ms: Option<u64>,
    auto_leader_rebalance_enable: Option<bool>,
    leader_imbalance_check_interval_seconds: Option<u64>,
    replica_selector_class: Option<String>,
    offsets_retention_minutes: Option<u64>,
    offsets_topic_num_partitions: Option<u32>,
    offsets_topic_replication_factor: Option<u16>,
    group_max_size: Option<usize>,
    group_max_count: Option<usize>,
    group_initial_rebalance_delay_ms: Option<u64>,
    group_consumer_session_timeout_ms: Option<u32>,
    group_consumer_heartbeat_interval_ms: Option<u32>,
    group_consumer_reconcile_heartbeat_interval_ms: Option<u32>,
    group_consumer_max_size: Option<usize>,
    group_consumer_assignors: Option<Vec<String>>,
    group_consumer_migration_policy: Option<String>,
    broker_address_override: Option<Vec<String>>,
    log_open_files_max: Option<toml::Value>,
    metrics_aggregate: Option<bool>,
    max_broker_partitions: Option<u64>,
    max_producers_per_partition: Option<u64>,
    #[serde(default)]
    log: BTreeMap<String, toml::Value>,
}

/// The `group.consumer.*` settings, checked: the heartbeat interval below the session timeout
/// (Kafka's rule), at least one member per group, only built-in assignors.
fn consumer_group_config(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<crate::group::consumer::ConsumerGroupConfig, ConfigFileError> {
    let defaults = crate::group::consumer::ConsumerGroupConfig::default();
    let invalid = |m: String| Err(ConfigFileError::ConsumerGroup(m));
    let session = args
        .group_consumer_session_timeout_ms
        .or(file.group_consumer_session_timeout_ms)
        .map_or(defaults.session_timeout_ms, |v| v.min(i32::MAX as u32) as i32);
    let heartbeat = args
        .group_consumer_heartbeat_interval_ms
        .or(file.group_consumer_heartbeat_interval_ms)
        .map_or(defaults.heartbeat_interval_ms, |v| v.min(i32::MAX as u32) as i32);
    if heartbeat < 1 || heartbeat >= session {
        return invalid(format!(
            "group.consumer.heartbeat.interval.ms ({heartbeat}) must be at least 1 and below \
             group.consumer.session.timeout.ms ({session})"
        ));
    }
    let reconcile_heartbeat = args
        .group_consumer_reconcile_heartbeat_interval_ms
        .or(file.group_consumer_reconcile_heartbeat_interval_ms)
        .map_or(defaults.reconcile_heartbeat_interval_ms, |v| v.min(i32::MAX as u32) as i32);
    if reconcile_heartbeat < 1 {
        return invalid("group.consumer.reconcile.heartbeat.interval.ms must be at least 1".to_string());
    }
    let max_size = args.group_consumer_max_size.or(file.group_consumer_max_size).unwrap_or(defaults.max_size);
    if max_size == 0 {
        return invalid("group.consumer.max.size must be at least 1".to_string());
    }
    let assignors =
        args.group_consumer_assignors.clone().or(file.group_consumer_assignors.clone()).unwrap_or(defaults.assignors);
    if assignors.is_empty() {
        return invalid("group.consumer.assignors must name at least one assignor".to_string());
    }
    if let Some(unknown) = assignors.iter().find(|a| crate::group::assignor::builtin(a).is_none()) {
        return invalid(format!("group.consumer.assignors: unknown assignor {unknown:?} (built in: uniform, range)"));
    }
    let max_count = args.group_max_count.or(file.group_max_count).unwrap_or(defaults.max_count);
    let migration_policy =
        match args.group_consumer_migration_policy.as_ref().or(file.group_consumer_migration_policy.as_ref()) {
            Some(value) => {
                crate::group::consumer::MigrationPolicy::parse(value).map_err(ConfigFileError::ConsumerGroup)?
            }
            None => defaults.migration_policy,
        };
    let classic_max_size = args.group_max_size.or(file.group_max_size).unwrap_or(defaults.classic_max_size);
    Ok(crate::group::consumer::ConsumerGroupConfig {
        session_timeout_ms: session,
        heartbeat_interval_ms: heartbeat,
        reconcile_heartbeat_interval_ms: reconcile_heartbeat.min(heartbeat),
        max_size,
        max_count,
        assignors,
        migration_policy,
        classic_max_size,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid log default: {0}")]
    Log(#[from] ConfigError),
    #[error("invalid consumer group setting: {0}")]
    ConsumerGroup(String),
    #[error("invalid --log {0:?}: expected name=value")]
    LogSyntax(String),
    #[error("invalid voters {0:?}: expected id@host:port,...")]
    Voters(String),
    #[error("invalid broker address override {0:?}: expected ID=HOST:PORT")]
    BrokerAddressOverride(String),
    #[error(
        "invalid process.roles {0:?}: expected broker,controller or broker (a controller-only node is not supported)"
    )]
    ProcessRoles(String),
    #[error("a broker-only node (process.roles=broker) needs --voters naming the metadata quorum, without itself")]
    BrokerOnlyVoters,
    #[error(
        "invalid replica.selector.class {0:?}: expected org.apache.kafka.common.replica.RackAwareReplicaSelector \
         (or rack-aware), or none"
    )]
    ReplicaSelector(String),
    #[error("invalid log.open.files.max {0:?}: expected auto or a number of at least {min}", min = crate::log::files::OPEN_FILES_MIN)]
    OpenFilesMax(String),
    #[error("{0}")]
    Security(String),
    #[error("{name} must be positive")]
    NotPositive { name: &'static str },
    #[error(
        "queued.max.request.bytes {queued_max_request_bytes} must be at least socket.request.max.bytes \
         {socket_request_max_bytes}: a request larger than the pool could never be read"
    )]
    QueuedMaxRequestBytesBelowRequestMax { queued_max_request_bytes: usize, socket_request_max_bytes: usize },
}

/// `listeners` and friends, TLS and SASL settings, checked together.
fn security_config(args: &ServeArgs, file: &FileConfig) -> Result<SecurityConfig, ConfigFileError> {
    let listeners = match args.listeners.clone().or(file.listeners.clone()) {
        Some(text) => {
            if args.kafka_listen.is_some() || file.kafka_listen.is_some() {
                return Err(ConfigFileError::Security("give either listeners or kafka_listen, not both".into()));
            }
            Listeners::parse(
                &text,
                args.listener_security_protocol_map.as_deref().or(file.listener_security_protocol_map.as_deref()),
                args.advertised_listeners.as_deref().or(file.advertised_listeners.as_deref()),
                args.inter_broker_listener_name.as_deref().or(file.inter_broker_listener_name.as_deref()),
            )
            .map_err(|e| ConfigFileError::Security(e.to_string()))?
        }
        None => {
            // `--kafka-listen` is the listener named PLAINTEXT.
            Listeners::single(
                args.kafka_listen
                    .or(file.kafka_listen)
                    .unwrap_or_else(|| "127.0.0.1:9092".parse().expect("valid default")),
                args.advertised_host.clone().or(file.advertised_host.clone()),
                args.advertised_port.or(file.advertised_port),
                args.listener_security_protocol_map.as_deref().or(file.listener_security_protocol_map.as_deref()),
            )
            .map_err(|e| ConfigFileError::Security(e.to_string()))?
        }
    };
    let client_auth = match args.ssl_client_auth.as_deref().or(file.ssl_client_auth.as_deref()) {
        Some(text) => ClientAuth::parse(text).ok_or_else(|| {
            ConfigFileError::Security(format!("invalid ssl.client.auth {text:?}: expected none, requested or required"))
        })?,
        None => ClientAuth::None,
    };
    let reload_interval = std::time::Duration::from_millis(
        args.ssl_reload_interval_ms.or(file.ssl_reload_interval_ms).unwrap_or(30_000).max(1),
    );
    let tls = match args.ssl_keystore_location.clone().or(file.ssl_keystore_location.clone()) {
        Some(keystore) => Some(TlsSettings {
            keystore,
            key_password: args
                .ssl_key_password
                .clone()
                .or(file.ssl_key_password.clone())
                .map(crate::security::tls::KeyPassword),
            truststore: args.ssl_truststore_location.clone().or(file.ssl_truststore_location.clone()),
            client_auth,
            reload_interval,
        }),
        None => None,
    };
    let listener_config = if args.listener_config.is_empty() {
        file.listener_config.clone().unwrap_or_default()
    } else {
        args.listener_config.clone()
    };
    let mut listener_tls = std::collections::BTreeMap::new();
    let mut listener_creation_rates = std::collections::BTreeMap::new();
    let overrides =
        crate::security::listeners::parse_listener_configs(&listener_config).map_err(ConfigFileError::Security)?;
    for (name, overrides) in overrides {
        let lower = name.to_ascii_lowercase();
        if name != "CONTROLLER" && !listeners.listeners.iter().any(|l| l.name == name) {
            return Err(ConfigFileError::Security(format!(
                "listener.name.{lower}.*: {name} is not in listeners (nor CONTROLLER)"
            )));
        }
        if let Some(rate) = overrides.max_connection_creation_rate {
            if name == "CONTROLLER" {
                return Err(ConfigFileError::Security(format!(
                    "listener.name.{lower}.max.connection.creation.rate: only Kafka listeners have one"
                )));
            }
            listener_creation_rates.insert(name.clone(), rate);
        }
        if let Some(tls_overrides) = overrides.tls {
            let settings =
                tls_overrides.over(tls.as_ref(), reload_interval, &name).map_err(ConfigFileError::Security)?;
            listener_tls.insert(name, settings);
        }
    }
    for listener in listeners.listeners.iter().filter(|l| l.protocol.uses_tls()) {
        if tls.is_none() && !listener_tls.contains_key(&listener.name) {
            return Err(ConfigFileError::Security(format!(
                "listener {} uses {}: ssl.keystore.location (PEM certificate chain and key) is required",
                listener.name, listener.protocol
            )));
        }
    }
    let mechanisms = match args.sasl_enabled_mechanisms.as_deref().or(file.sasl_enabled_mechanisms.as_deref()) {
        Some(text) => SaslSettings::parse_mechanisms(text).map_err(ConfigFileError::Security)?,
        None => SaslSettings::default().mechanisms,
    };
    let max_reauth_ms = args.connections_max_reauth_ms.or(file.connections_max_reauth_ms).unwrap_or(0);
    let failed_authentication_delay_ms = args
        .connection_failed_authentication_delay_ms
        .or(file.connection_failed_authentication_delay_ms)
        .unwrap_or(crate::security::sasl::FAILED_AUTHENTICATION_DELAY_MS_DEFAULT);
    let idle_ms = args
        .connections_max_idle_ms
        .or(file.connections_max_idle_ms)
        .unwrap_or(crate::server::ConnectionLimits::default().connections_max_idle_ms);
    let max_receive_bytes = args
        .sasl_server_max_receive_size
        .or(file.sasl_server_max_receive_size)
        .unwrap_or(crate::security::sasl::MAX_RECEIVE_BYTES_DEFAULT);
    if max_receive_bytes == 0 {
        return Err(ConfigFileError::Security("sasl.server.max.receive.size must be at least 1".to_string()));
    }
    if failed_authentication_delay_ms >= idle_ms {
        return Err(ConfigFileError::Security(format!(
            "connection.failed.authentication.delay.ms ({failed_authentication_delay_ms}) must be below \
             connections.max.idle.ms ({idle_ms})"
        )));
    }
    let enabled = match args.authorizer_class_name.as_deref().or(file.authorizer_class_name.as_deref()).map(str::trim) {
        None | Some("") => false,
        Some(
            "standard"
            | "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            | "kafka.security.authorizer.AclAuthorizer",
        ) => true,
        Some(other) => {
            return Err(ConfigFileError::Security(format!(
                "unsupported authorizer.class.name {other:?}: Runnel has org.apache.kafka.metadata.authorizer.StandardAuthorizer (or standard)"
            )))
        }
    };
    let authorizer = AuthorizerSettings {
        enabled,
        super_users: AuthorizerSettings::parse_super_users(
            args.super_users.as_deref().or(file.super_users.as_deref()).unwrap_or_default(),
        ),
        allow_everyone_if_no_acl_found: args
            .allow_everyone_if_no_acl_found
            .or(file.allow_everyone_if_no_acl_found)
            .unwrap_or(false),
    };
    let add_scram =
        if args.add_scram.is_empty() { file.add_scram.clone().unwrap_or_default() } else { args.add_scram.clone() };
    let bootstrap_users = add_scram
        .iter()
        .map(|text| crate::security::scram::BootstrapUser::parse(text).map_err(ConfigFileError::Security))
        .collect::<Result<_, _>>()?;
    let map = args.listener_security_protocol_map.as_deref().or(file.listener_security_protocol_map.as_deref());
    let controller_protocol = crate::security::listeners::protocol_map(map)
        .map_err(|e| ConfigFileError::Security(e.to_string()))?
        .get("CONTROLLER")
        .copied()
        .unwrap_or(crate::security::SecurityProtocol::Plaintext);
    if controller_protocol.uses_sasl() {
        return Err(ConfigFileError::Security(format!(
            "CONTROLLER:{controller_protocol}: the metadata quorum's listener may be PLAINTEXT or SSL"
        )));
    }
    let controller_tls = listener_tls.get("CONTROLLER").or(tls.as_ref());
    if controller_protocol.uses_tls() && controller_tls.is_none_or(|t| t.truststore.is_none()) {
        return Err(ConfigFileError::Security(
            "CONTROLLER:SSL needs ssl.keystore.location and ssl.truststore.location".into(),
        ));
    }
    let inter_broker_sasl = if listeners.inter_broker().protocol.uses_sasl() {
        let name = args
            .sasl_mechanism_inter_broker_protocol
            .as_deref()
            .or(file.sasl_mechanism_inter_broker_protocol.as_deref())
            .unwrap_or("SCRAM-SHA-512");
        let mechanism =
            crate::security::sasl::Mechanism::parse(name).filter(|m| mechanisms.contains(m)).ok_or_else(|| {
                ConfigFileError::Security(format!(
                    "sasl.mechanism.inter.broker.protocol {name:?} is not one of sasl.enabled.mechanisms"
                ))
            })?;
        let username = args.inter_broker_sasl_username.clone().or(file.inter_broker_sasl_username.clone());
        let password = args.inter_broker_sasl_password.clone().or(file.inter_broker_sasl_password.clone());
        let (Some(username), Some(password)) = (username, password) else {
            return Err(ConfigFileError::Security(format!(
                "the inter-broker listener {} uses {}: give --inter-broker-sasl-username and \
                 --inter-broker-sasl-password (the user this node authenticates as)",
                listeners.inter_broker,
                listeners.inter_broker().protocol
            )));
        };
        Some(std::sync::Arc::new(crate::security::sasl::InterBrokerSasl { mechanism, username, password }))
    } else {
        None
    };
    let http = HttpSecurity {
        failed_authentication_delay_ms,
        authentication: match args.http_authentication.as_deref().or(file.http_authentication.as_deref()).map(str::trim)
        {
            None | Some("none") => false,
            Some("required") => true,
            Some(other) => {
                return Err(ConfigFileError::Security(format!(
                    "http.authentication {other:?}: expected none or required"
                )))
            }
        },
        tls: args.http_tls.or(file.http_tls).unwrap_or(false),
        session_ms: args.http_session_ms.or(file.http_session_ms).unwrap_or(8 * 3_600_000).max(1),
        token_max_lifetime_ms: args
            .http_token_max_lifetime_ms
            .or(file.http_token_max_lifetime_ms)
            .unwrap_or(7 * 24 * 3_600_000)
            .max(1),
        tokens_max_per_principal: args
            .http_tokens_max_per_principal
            .or(file.http_tokens_max_per_principal)
            .unwrap_or(100)
            .max(1),
        token_issues_per_minute: args
            .http_token_issues_per_minute
            .or(file.http_token_issues_per_minute)
            .unwrap_or(HttpSecurity::default().token_issues_per_minute)
            .max(1),
        allowed_hosts: args
            .http_allowed_hosts
            .as_deref()
            .or(file.http_allowed_hosts.as_deref())
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .chain(
                listeners.listeners.iter().filter_map(|l| l.advertised_host.as_ref().map(|h| h.to_ascii_lowercase())),
            )
            .collect(),
    };
    if http.tls && tls.is_none() {
        return Err(ConfigFileError::Security(
            "--http-tls needs ssl.keystore.location (PEM certificate chain and key)".into(),
        ));
    }
    Ok(SecurityConfig {
        http,
        listeners,
        tls,
        listener_tls,
        listener_creation_rates,
        inter_broker_sasl,
        sasl: SaslSettings { mechanisms, max_reauth_ms, failed_authentication_delay_ms, max_receive_bytes },
        authorizer,
        bootstrap_users,
        controller_protocol,
    })
}

/// The resolved settings of a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: u64,
    /// The Kafka listeners (`listeners`, or one PLAINTEXT listener at `--kafka-listen`), TLS
    /// and SASL settings.
    pub security: SecurityConfig,
    pub http_listen: SocketAddr,
    pub controller_listen: SocketAddr,
    pub voters: BTreeMap<u64, String>,
    /// `process.roles`: whether this node is a voter of the metadata quorum.
    pub process_roles: ProcessRoles,
    pub data_dir: PathBuf,
    /// `metadata.log.dir`: the quorum's own directory (by default `data_dir/metadata`).
    pub metadata_log_dir: PathBuf,
    pub cluster_id: Option<String>,
    pub num_partitions: u32,
    pub default_replication_factor: u16,
    /// `broker.rack` (`None` when unset or empty), registered with the broker.
    pub rack: Option<String>,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    /// `queued.max.request.bytes`, `max.connections`, `max.connections.per.ip`,
    /// `connections.max.idle.ms`.
    pub connection_limits: ConnectionLimits,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: usize,
    pub housekeeping_interval_ms: u64,
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`.
    pub log_cleaner_dedupe_buffer_size: u64,
    /// The transaction coordinator's settings (`transaction.max.timeout.ms`, ...).
    pub transactions: crate::txn::TxnSettings,
    /// `broker.session.timeout.ms`, `broker.heartbeat.interval.ms`, `replica.lag.time.max.ms`.
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    pub replica_lag_time_max_ms: u64,
    /// `leader.imbalance.check.interval.seconds` in ms, `None` when
    /// `auto.leader.rebalance.enable` is false.
    pub leader_imbalance_check_interval_ms: Option<u64>,
    /// `replica.selector.class`: where consumers may read (KIP-392).
    pub replica_selector: ReplicaSelector,
    pub offsets_retention_minutes: u64,
    /// `offsets.topic.num.partitions`, `offsets.topic.replication.factor`, `group.max.size`,
    /// `group.max.count`.
    pub groups: crate::group::GroupSettings,
    pub log_defaults: LogConfig,
    /// `log.open.files.max`: the capacity of the node's cache of open segment files; `None` is
    /// `auto` (see `OpenFiles::auto_capacity`, read when the node starts).
    pub log_open_files_max: Option<usize>,
    /// `metrics.aggregate`: per-partition series summed per topic.
    pub metrics_aggregate: bool,
    /// `max.broker.partitions`.
    pub max_broker_partitions: u64,
    /// REST Proxy consumer instances on this node, and per principal.
    pub http_consumer_instances_max: usize,
    pub http_consumer_instances_max_per_principal: usize,
    /// `max.producers.per.partition`.
    pub max_producers_per_partition: usize,
    /// `--broker-address-override`: broker id → `host:port` this node reaches it at instead of
    /// its registered address (node-to-node traffic only).
    pub broker_address_overrides: BTreeMap<u64, String>,
}

impl NodeConfig {
    /// Defaults < file < environment and flags (clap merges those two).
    pub fn resolve(args: &ServeArgs) -> Result<NodeConfig, ConfigFileError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ConfigFileError::Read { path: path.clone(), source })?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|source| ConfigFileError::Parse { path: path.clone(), source })?
            }
            None => FileConfig::default(),
        };
        let consumer_groups = consumer_group_config(args, &file)?;
        let security = security_config(args, &file)?;
        let socket_request_max_bytes =
            args.socket_request_max_bytes.or(file.socket_request_max_bytes).unwrap_or(104_857_600);
        let connection_limits = resolve_connection_limits(args, &file, socket_request_max_bytes)?;
        let node_id = args.node_id.or(file.node_id).unwrap_or(1);
        let controller_listen = args
            .controller_listen
            .or(file.controller_listen)
            .unwrap_or_else(|| "127.0.0.1:9093".parse().expect("valid default"));
        let process_roles = match args.process_roles.clone().or(file.process_roles) {
            Some(text) => ProcessRoles::parse(&text)?,
            None => ProcessRoles::BrokerController,
        };
        let voters = match args.voters.clone().or(file.voters) {
            Some(text) => parse_voters(&text)?,
            None if process_roles == ProcessRoles::Broker => return Err(ConfigFileError::BrokerOnlyVoters),
            None => BTreeMap::from([(node_id, controller_listen.to_string())]),
        };
        if process_roles == ProcessRoles::Broker && voters.contains_key(&node_id) {
            return Err(ConfigFileError::BrokerOnlyVoters);
        }
        // Topic config defaults: the file's `[log]` table, then its named keys, then `--log`,
        // then the named flags (flags win over the file; within one source the named key wins).
        let mut log_defaults = LogConfig::default();
        for (name, value) in &file.log {
            log_defaults.set(name, &toml_text(value))?;
        }
        set_named_log_defaults(&mut log_defaults, file.min_insync_replicas, file.unclean_leader_election_enable)?;
        for pair in &args.log {
            let (name, value) = pair.split_once('=').ok_or_else(|| ConfigFileError::LogSyntax(pair.clone()))?;
            log_defaults.set(name.trim(), value.trim())?;
        }
        set_named_log_defaults(&mut log_defaults, args.min_insync_replicas, args.unclean_leader_election_enable)?;
        let offsets_topic_replication_factor = args
            .offsets_topic_replication_factor
            .or(file.offsets_topic_replication_factor)
            .unwrap_or(crate::group::OFFSETS_TOPIC_REPLICATION_FACTOR_DEFAULT);
        if offsets_topic_replication_factor == 0 {
            return Err(ConfigFileError::NotPositive { name: "offsets.topic.replication.factor" });
        }
        let broker_address_overrides = if args.broker_address_override.is_empty() {
            parse_broker_address_overrides(file.broker_address_override.as_deref().unwrap_or_default())?
        } else {
            parse_broker_address_overrides(&args.broker_address_override)?
        };
        let log_open_files_max =
            match args.log_open_files_max.clone().or(file.log_open_files_max.as_ref().map(toml_text)) {
                Some(text) => parse_open_files_max(&text)?,
                None => None,
            };
        let data_dir = args.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("runnel-data"));
        Ok(NodeConfig {
            node_id,
            security,
            http_listen: args
                .http_listen
                .or(file.http_listen)
                .unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid default")),
            controller_listen,
            voters,
            process_roles,
            metadata_log_dir: args
                .metadata_log_dir
                .clone()
                .or(file.metadata_log_dir)
                .unwrap_or_else(|| data_dir.join(crate::controller::METADATA_DIR)),
            data_dir,
            cluster_id: args.cluster_id.clone().or(file.cluster_id),
            num_partitions: args.num_partitions.or(file.num_partitions).unwrap_or(1).max(1),
            default_replication_factor: args
                .default_replication_factor
                .or(file.default_replication_factor)
                .unwrap_or(1)
                .max(1),
            rack: args.rack.clone().or(file.rack).filter(|rack| !rack.is_empty()),
            auto_create_topics_enable: args
                .auto_create_topics_enable
                .or(file.auto_create_topics_enable)
                .unwrap_or(true),
            socket_request_max_bytes,
            connection_limits,
            fetch_max_bytes: args.fetch_max_bytes.or(file.fetch_max_bytes).unwrap_or(57_671_680),
            housekeeping_interval_ms: args.housekeeping_interval_ms.or(file.housekeeping_interval_ms).unwrap_or(15_000),
            producer_id_expiration_ms: args
                .producer_id_expiration_ms
                .or(file.producer_id_expiration_ms)
                .unwrap_or(86_400_000),
            log_cleaner_dedupe_buffer_size: args
                .log_cleaner_dedupe_buffer_size
                .or(file.log_cleaner_dedupe_buffer_size)
                .unwrap_or(134_217_728),
            transactions: crate::txn::TxnSettings {
                max_timeout_ms: args
                    .transaction_max_timeout_ms
                    .or(file.transaction_max_timeout_ms)
                    .unwrap_or(crate::txn::TxnSettings::default().max_timeout_ms),
                partition_verification: args
                    .transaction_partition_verification_enable
                    .or(file.transaction_partition_verification_enable)
                    .unwrap_or(true),
                version: args
                    .transaction_version
                    .or(file.transaction_version)
                    .unwrap_or(crate::txn::TxnSettings::default().version)
                    .clamp(0, 2),
                id_expiration_ms: args
                    .transactional_id_expiration_ms
                    .or(file.transactional_id_expiration_ms)
                    .unwrap_or(crate::txn::TxnSettings::default().id_expiration_ms)
                    .max(1),
                num_partitions: args
                    .transaction_state_log_num_partitions
                    .or(file.transaction_state_log_num_partitions)
                    .unwrap_or(crate::txn::TxnSettings::default().num_partitions)
                    .max(1),
                replication_factor: args
                    .transaction_state_log_replication_factor
                    .or(file.transaction_state_log_replication_factor)
                    .unwrap_or(crate::txn::TxnSettings::default().replication_factor)
                    .max(1),
                ..crate::txn::TxnSettings::default()
            },
            broker_session_timeout_ms: args
                .broker_session_timeout_ms
                .or(file.broker_session_timeout_ms)
                .unwrap_or(crate::controller::DEFAULT_BROKER_SESSION_TIMEOUT_MS)
                .max(1),
            broker_heartbeat_interval_ms: args
                .broker_heartbeat_interval_ms
                .or(file.broker_heartbeat_interval_ms)
                .unwrap_or(crate::controller::DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS)
                .max(1),
            replica_lag_time_max_ms: args
                .replica_lag_time_max_ms
                .or(file.replica_lag_time_max_ms)
                .unwrap_or(crate::partition::DEFAULT_REPLICA_LAG_TIME_MAX_MS as u64)
                .max(1),
            leader_imbalance_check_interval_ms: args
                .auto_leader_rebalance_enable
                .or(file.auto_leader_rebalance_enable)
                .unwrap_or(true)
                .then(|| {
                    args.leader_imbalance_check_interval_seconds
                        .or(file.leader_imbalance_check_interval_seconds)
                        .unwrap_or(300)
                        .max(1)
                        .saturating_mul(1000)
                }),
            replica_selector: ReplicaSelector::parse(
                args.replica_selector_class.as_deref().or(file.replica_selector_class.as_deref()).unwrap_or(""),
            )?,
            offsets_retention_minutes: args
                .offsets_retention_minutes
                .or(file.offsets_retention_minutes)
                .unwrap_or(7 * 24 * 60),
            groups: {
                let defaults = crate::group::GroupSettings::default();
                crate::group::GroupSettings {
                    offsets_topic_num_partitions: args
                        .offsets_topic_num_partitions
                        .or(file.offsets_topic_num_partitions)
                        .unwrap_or(defaults.offsets_topic_num_partitions)
                        .max(1),
                    offsets_topic_replication_factor,
                    membership: crate::group::membership::GroupConfig {
                        max_size: args.group_max_size.or(file.group_max_size).unwrap_or(defaults.membership.max_size),
                        max_count: args
                            .group_max_count
                            .or(file.group_max_count)
                            .unwrap_or(defaults.membership.max_count),
                        initial_rebalance_delay_ms: args
                            .group_initial_rebalance_delay_ms
                            .or(file.group_initial_rebalance_delay_ms)
                            .unwrap_or(defaults.membership.initial_rebalance_delay_ms),
                        ..defaults.membership
                    },
                    consumer: consumer_groups,
                }
            },
            log_defaults,
            log_open_files_max,
            metrics_aggregate: args.metrics_aggregate.or(file.metrics_aggregate).unwrap_or(false),
            max_broker_partitions: args
                .max_broker_partitions
                .or(file.max_broker_partitions)
                .unwrap_or(DEFAULT_MAX_BROKER_PARTITIONS),
            http_consumer_instances_max: args
                .http_consumer_instances_max
                .or(file.http_consumer_instances_max)
                .unwrap_or(DEFAULT_HTTP_CONSUMER_INSTANCES)
                .max(1),
            http_consumer_instances_max_per_principal: args
                .http_consumer_instances_max_per_principal
                .or(file.http_consumer_instances_max_per_principal)
                .unwrap_or(DEFAULT_HTTP_CONSUMER_INSTANCES)
                .max(1),
            max_producers_per_partition: args
                .max_producers_per_partition
                .or(file.max_producers_per_partition)
                .map_or(10_000, |n| usize::try_from(n.max(1)).unwrap_or(usize::MAX)),
            broker_address_overrides,
        })
    }
}

/// A TOML value as the text a topic config is parsed from (`2` and `"2"` alike).
fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The topic config defaults that have a flag and a key of their own, validated as topic configs.
fn set_named_log_defaults(
    log_defaults: &mut LogConfig,
    min_insync_replicas: Option<i32>,
    unclean_leader_election_enable: Option<bool>,
) -> Result<(), ConfigError> {
    if let Some(value) = min_insync_replicas {
        log_defaults.set("min.insync.replicas", &value.to_string())?;
    }
    if let Some(enable) = unclean_leader_election_enable {
        log_defaults.set("unclean.leader.election.enable", &enable.to_string())?;
    }
    Ok(())
}

fn resolve_connection_limits(
    args: &ServeArgs,
    file: &FileConfig,
    socket_request_max_bytes: usize,
) -> Result<ConnectionLimits, ConfigFileError> {
    let defaults = ConnectionLimits::default();
    let limits = ConnectionLimits {
        queued_max_request_bytes: args
            .queued_max_request_bytes
            .or(file.queued_max_request_bytes)
            .unwrap_or(defaults.queued_max_request_bytes),
        max_connections: args.max_connections.or(file.max_connections).unwrap_or(defaults.max_connections),
        max_connections_per_ip: args
            .max_connections_per_ip
            .or(file.max_connections_per_ip)
            .unwrap_or(defaults.max_connections_per_ip),
        connections_max_idle_ms: args
            .connections_max_idle_ms
            .or(file.connections_max_idle_ms)
            .unwrap_or(defaults.connections_max_idle_ms),
        max_connection_creation_rate: args.max_connection_creation_rate.or(file.max_connection_creation_rate),
    };
    for (name, value) in [
        ("socket.request.max.bytes", socket_request_max_bytes as u64),
        ("queued.max.request.bytes", limits.queued_max_request_bytes as u64),
        ("max.connections", limits.max_connections as u64),
        ("max.connections.per.ip", limits.max_connections_per_ip as u64),
        ("connections.max.idle.ms", limits.connections_max_idle_ms),
        ("max.connection.creation.rate", limits.max_connection_creation_rate.map_or(1, u64::from)),
    ] {
        if value == 0 {
            return Err(ConfigFileError::NotPositive { name });
        }
    }
    // Every frame's bytes are taken from the pool before its body is read: a frame the pool
    // cannot hold would wait forever.
    if limits.queued_max_request_bytes < socket_request_max_bytes {
        return Err(ConfigFileError::QueuedMaxRequestBytesBelowRequestMax {
            queued_max_request_bytes: limits.queued_max_request_bytes,
            socket_request_max_bytes,
        });
    }
    Ok(limits)
}

/// Kafka's `replica.selector.class`: which replica a consumer is sent to read from (KIP-392).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicaSelector {
    /// Kafka's default (`LeaderSelector`, or the setting unset): consumers read from the leader.
    #[default]
    LeaderOnly,
    /// `RackAwareReplicaSelector`: a consumer that names its rack reads from an in-sync replica
    /// there, the leader if it is in that rack.
    RackAware,
}

impl ReplicaSelector {
    fn parse(text: &str) -> Result<ReplicaSelector, ConfigFileError> {
        match text.trim() {
            "" | "none" | "org.apache.kafka.common.replica.LeaderSelector" => Ok(ReplicaSelector::LeaderOnly),
            "rack-aware" | "org.apache.kafka.common.replica.RackAwareReplicaSelector" => Ok(ReplicaSelector::RackAware),
            other => Err(ConfigFileError::ReplicaSelector(other.to_string())),
        }
    }
}

/// Kafka's `process.roles`. Every node is a broker; a controller-only node (a voter hosting no
/// partitions) is not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessRoles {
    /// `broker,controller`: a voter of the metadata quorum.
    BrokerController,
    /// `broker`: an observer of the quorum (it receives every committed record, never votes).
    Broker,
}

impl ProcessRoles {
    fn parse(text: &str) -> Result<ProcessRoles, ConfigFileError> {
        let mut broker = false;
        let mut controller = false;
        for role in text.split(',').map(str::trim) {
            match role {
                "broker" => broker = true,
                "controller" => controller = true,
                _ => return Err(ConfigFileError::ProcessRoles(text.to_string())),
            }
        }
        match (broker, controller) {
            (true, true) => Ok(ProcessRoles::BrokerController),
            (true, false) => Ok(ProcessRoles::Broker),
            _ => Err(ConfigFileError::ProcessRoles(text.to_string())),
        }
    }
}

fn parse_voters(text: &str) -> Result<BTreeMap<u64, String>, ConfigFileError> {
    let mut voters = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('@').ok_or_else(|| ConfigFileError::Voters(text.to_string()))?;
        let id: u64 = id.trim().parse().map_err(|_| ConfigFileError::Voters(text.to_string()))?;
        voters.insert(id, addr.trim().to_string());
    }
    if voters.is_empty() {
        return Err(ConfigFileError::Voters(text.to_string()));
    }
    Ok(voters)
}

/// `log.open.files.max`: `auto` (`None`) or a count of at least `OPEN_FILES_MIN`.
fn parse_open_files_max(text: &str) -> Result<Option<usize>, ConfigFileError> {
    match text.trim() {
        "auto" => Ok(None),
        number => match number.parse::<usize>() {
            Ok(n) if n >= crate::log::files::OPEN_FILES_MIN => Ok(Some(n)),
            _ => Err(ConfigFileError::OpenFilesMax(text.to_string())),
        },
    }
}

/// `ID=HOST:PORT` pairs; a later pair for the same id wins.
fn parse_broker_address_overrides(pairs: &[String]) -> Result<BTreeMap<u64, String>, ConfigFileError> {
    let mut overrides = BTreeMap::new();
    for pair in pairs.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let invalid = || ConfigFileError::BrokerAddressOverride(pair.to_string());
        let (id, addr) = pair.split_once('=').ok_or_else(invalid)?;
        let id: u64 = id.trim().parse().map_err(|_| invalid())?;
        let addr = addr.trim();
        let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(invalid());
        }
        overrides.insert(id, addr.to_string());
    }
    Ok(overrides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_id_starting_with_a_hyphen_is_a_value() {
        // Kafka's base64url ids start with `-` one time in 64; clap took `-wX…` as a flag (seen
        // in cluster_brokers' restart with the kept id).
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["runnel", "--cluster-id", "-wXyZ0123456789abcdefg"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.serve.cluster_id.as_deref(), Some("-wXyZ0123456789abcdefg"));
    }

    #[test]
    fn a_sasl_inter_broker_listener_needs_this_nodes_credentials_and_an_enabled_mechanism() {
        // Proves the node refuses to start with a SASL inter-broker listener it could not
        // authenticate to, naming what is missing.
        let base = ServeArgs {
            listeners: Some("INTERNAL://127.0.0.1:0".into()),
            listener_security_protocol_map: Some("INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_SSL".into()),
            ..ServeArgs::default()
        };
        let error = NodeConfig::resolve(&base).unwrap_err().to_string();
        assert!(error.contains("CONTROLLER"), "{error}");
        let args = ServeArgs { listener_security_protocol_map: Some("INTERNAL:SASL_PLAINTEXT".into()), ..base.clone() };
        let error = NodeConfig::resolve(&args).unwrap_err().to_string();
        assert!(error.contains("--inter-broker-sasl-username"), "{error}");
        let args = ServeArgs {
            inter_broker_sasl_username: Some("broker".into()),
            inter_broker_sasl_password: Some("secret".into()),
            sasl_enabled_mechanisms: Some("PLAIN".into()),
            ..args
        };
        let error = NodeConfig::resolve(&args).unwrap_err().to_string();
        assert!(error.contains("sasl.mechanism.inter.broker.protocol"), "{error}");
        let args = ServeArgs { sasl_enabled_mechanisms: None, ..args };
        let config = NodeConfig::resolve(&args).expect("valid");
        assert_eq!(config.security.inter_broker_sasl.map(|s| s.username.clone()), Some("broker".to_string()));
    }

    #[test]
    fn listener_prefixed_ssl_settings_replace_the_nodes_for_that_listener_only() {
        // Proves Kafka's listener-prefixed TLS configs: each given property replaces the node's
        // for its listener, the others are inherited; a listener named nowhere, a property that
        // cannot be per listener and a TLS listener with no keystore at all are refused.
        let base = ServeArgs {
            listeners: Some("INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0".into()),
            listener_security_protocol_map: Some("INTERNAL:SSL,EXTERNAL:SASL_SSL".into()),
            ssl_keystore_location: Some("/etc/runnel/internal.pem".into()),
            ssl_truststore_location: Some("/etc/runnel/internal-ca.pem".into()),
            ssl_client_auth: Some("required".into()),
            listener_config: vec![
                "listener.name.external.ssl.keystore.location=/etc/runnel/public.pem".into(),
                "listener.name.external.ssl.key.password = secret".into(),
                "listener.name.external.ssl.client.auth=none".into(),
            ],
            ..ServeArgs::default()
        };
        let config = NodeConfig::resolve(&base).expect("valid");
        let internal = config.security.tls_of("INTERNAL").expect("the node's").clone();
        assert_eq!(internal.keystore, PathBuf::from("/etc/runnel/internal.pem"));
        assert_eq!(internal.client_auth, ClientAuth::Required);
        let external = config.security.tls_of("EXTERNAL").expect("its own").clone();
        assert_eq!(external.keystore, PathBuf::from("/etc/runnel/public.pem"));
        assert_eq!(external.key_password, Some(crate::security::tls::KeyPassword("secret".into())));
        assert_eq!(external.client_auth, ClientAuth::None);
        assert_eq!(external.truststore, internal.truststore, "inherited");
        assert!(config.security.listener_tls.get("INTERNAL").is_none());

        let refused = |listener_config: &[&str], without_node_keystore: bool| {
            let args = ServeArgs {
                listener_config: listener_config.iter().map(|s| s.to_string()).collect(),
                ssl_keystore_location: if without_node_keystore { None } else { base.ssl_keystore_location.clone() },
                ..base.clone()
            };
            NodeConfig::resolve(&args).unwrap_err().to_string()
        };
        let error = refused(&["listener.name.other.ssl.client.auth=none"], false);
        assert!(error.contains("OTHER is not in listeners"), "{error}");
        let error = refused(&["listener.name.external.ssl.cipher.suites=x"], false);
        assert!(error.contains("ssl.cipher.suites cannot be set per listener"), "{error}");
        let error = refused(&["listener.name.external.ssl.client.auth=maybe"], false);
        assert!(error.contains("expected none, requested or required"), "{error}");
        let error = refused(&["ssl.client.auth=none"], false);
        assert!(error.contains("expected listener.name.<listener>.<property>=<value>"), "{error}");
        let error = refused(&["listener.name.external.ssl.keystore.location=/etc/runnel/public.pem"], true);
        assert!(error.contains("listener INTERNAL uses SSL: ssl.keystore.location"), "{error}");
        let error = refused(&["listener.name.external.ssl.client.auth=none"], true);
        assert!(error.contains("listener.name.external.ssl.keystore.location"), "{error}");
        for rate in ["0", "fast", "-1"] {
            let error = refused(&[&format!("listener.name.external.max.connection.creation.rate={rate}")], false);
            assert!(error.contains("expected a positive whole number"), "{error}");
        }
        let error = refused(&["listener.name.controller.max.connection.creation.rate=5"], false);
        assert!(error.contains("only Kafka listeners"), "{error}");

        // A connection creation rate alone gives a listener no TLS settings of its own.
        let args = ServeArgs {
            listener_config: vec!["listener.name.internal.max.connection.creation.rate=50".into()],
            ..base.clone()
        };
        let config = NodeConfig::resolve(&args).expect("valid");
        assert_eq!(config.security.listener_creation_rates.get("INTERNAL"), Some(&50));
        assert!(config.security.listener_tls.is_empty());
    }

    #[test]
    fn http_allowed_hosts_add_to_the_advertised_ones() {
        let args = ServeArgs {
            advertised_host: Some("Broker-1.example".into()),
            http_allowed_hosts: Some(" runnel.internal., ,lb.example ".into()),
            ..ServeArgs::default()
        };
        let http = NodeConfig::resolve(&args).expect("valid").security.http;
        assert_eq!(http.allowed_hosts, ["runnel.internal", "lb.example", "broker-1.example"]);
        assert!(http.allows_host("broker-1.example:8080") && http.allows_host("LB.example"));
        assert!(http.allows_host("10.1.2.3:80") && http.allows_host("[fe80::1]:80") && http.allows_host("a.localhost"));
        assert!(!http.allows_host("evil.test:8080") && !http.allows_host("[evil]:80"));
    }

    #[test]
    fn the_failed_authentication_delay_is_kafkas_and_stays_below_the_idle_timeout() {
        // Proves KIP-306's default (100 ms) reaches the Kafka listeners and HTTP, and a delay
        // a connection would idle out in is refused at start, naming both settings.
        let config = NodeConfig::resolve(&ServeArgs::default()).expect("defaults");
        assert_eq!(config.security.sasl.failed_authentication_delay_ms, 100);
        assert_eq!(config.security.http.failed_authentication_delay_ms, 100);
        let args = ServeArgs {
            connection_failed_authentication_delay_ms: Some(5_000),
            connections_max_idle_ms: Some(5_000),
            ..ServeArgs::default()
        };
        let error = NodeConfig::resolve(&args).unwrap_err().to_string();
        assert!(
            error.contains("connection.failed.authentication.delay.ms") && error.contains("connections.max.idle.ms")
        );
        let args = ServeArgs { connection_failed_authentication_delay_ms: Some(0), ..args };
        assert_eq!(NodeConfig::resolve(&args).expect("0 is no delay").security.sasl.failed_authentication_delay_ms, 0);
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        // Proves the precedence defaults < TOML file < flags, and the [log] table.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runnel.toml");
        std::fs::write(
            &path,
            "node_id = 7\nnum_partitions = 3\n[log]\n\"retention.ms\" = 1000\n\"cleanup.policy\" = \"compact\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            num_partitions: Some(5),
            log: vec!["segment.bytes=1048576".into()],
            ..ServeArgs::default()
        };
        let config = NodeConfig::resolve(&args).unwrap();
        assert_eq!(config.node_id, 7);
        assert_eq!(config.num_partitions, 5);
        assert_eq!(config.log_defaults.retention_ms, 1000);
        assert_eq!(config.log_defaults.segment_bytes, 1 << 20);
        assert!(config.log_defaults.cleanup_policy.compact);
        assert_eq!(config.voters, BTreeMap::from([(7, "127.0.0.1:9093".to_string())]));
        assert_eq!(config.security.listeners.listeners[0].bind.port(), 9092);
    }

    #[test]
    fn metadata_log_dir_defaults_inside_the_data_dir_and_can_be_elsewhere() {
        // Proves `metadata.log.dir`: `<data-dir>/metadata` unless the file or a flag names another.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runnel.toml");
        std::fs::write(&path, "data_dir = \"/d\"\n").unwrap();
        let args = ServeArgs { config: Some(path.clone()), ..ServeArgs::default() };
        assert_eq!(NodeConfig::resolve(&args).unwrap().metadata_log_dir, PathBuf::from("/d/metadata"));
        std::fs::write(&path, "data_dir = \"/d\"\nmetadata_log_dir = \"/m\"\n").unwrap();
        let args = ServeArgs { config: Some(path.clone()), ..ServeArgs::default() };
        assert_eq!(NodeConfig::resolve(&args).unwrap().metadata_log_dir, PathBuf::from("/m"));
        let args = ServeArgs { config: Some(path), metadata_log_dir: Some("/f".into()), ..ServeArgs::default() };
        assert_eq!(NodeConfig::resolve(&args).unwrap().metadata_log_dir, PathBuf::from("/f"));
    }

    #[test]
    fn replication_settings_resolve_from_file_and_flags() {
        // Proves broker.rack, offsets.topic.replication.factor and the named topic defaults
        // (min.insync.replicas, unclean.leader.election.enable): Kafka's defaults, the file's
        // keys, flags over the file, named keys over `--log`, and Kafka's validation.
        let defaults = NodeConfig::resolve(&ServeArgs::default()).unwrap();
        assert_eq!(defaults.rack, None);
        assert_eq!(defaults.groups.offsets_topic_replication_factor, 3);
        assert_eq!(defaults.log_defaults.min_insync_replicas, 1);
        assert!(!defaults.log_defaults.unclean_leader_election_enable);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runnel.toml");
        std::fs::write(
            &path,
            "rack = \"r1\"\noffsets_topic_replication_factor = 2\nmin_insync_replicas = 2\n\
             unclean_leader_election_enable = true\n[log]\n\"min.insync.replicas\" = 3\n",
        )
        .unwrap();
        let from_file = NodeConfig::resolve(&ServeArgs { config: Some(path.clone()), ..ServeArgs::default() }).unwrap();
        assert_eq!(from_file.rack.as_deref(), Some("r1"));
        assert_eq!(from_file.groups.offsets_topic_replication_factor, 2);
        assert_eq!(from_file.log_defaults.min_insync_replicas, 2, "the named key wins over [log]");
        assert!(from_file.log_defaults.unclean_leader_election_enable);

        let flags = ServeArgs {
            config: Some(path),
            rack: Some("r2".into()),
            offsets_topic_replication_factor: Some(1),
            log: vec!["min.insync.replicas=4".into(), "unclean.leader.election.enable=false".into()],
            ..ServeArgs::default()
        };
        let config = NodeConfig::resolve(&flags).unwrap();
        assert_eq!(config.rack.as_deref(), Some("r2"));
        assert_eq!(config.groups.offsets_topic_replication_factor, 1);
        assert_eq!(config.log_defaults.min_insync_replicas, 4, "--log wins over the file");
        assert!(!config.log_defaults.unclean_leader_election_enable);
        let named = ServeArgs { min_insync_replicas: Some(5), ..flags };
        assert_eq!(NodeConfig::resolve(&named).unwrap().log_defaults.min_insync_replicas, 5);

        let empty_rack = ServeArgs { rack: Some(String::new()), ..ServeArgs::default() };
        assert_eq!(NodeConfig::resolve(&empty_rack).unwrap().rack, None);
        let zero = ServeArgs { offsets_topic_replication_factor: Some(0), ..ServeArgs::default() };
        assert!(matches!(
            NodeConfig::resolve(&zero),
            Err(ConfigFileError::NotPositive { name: "offsets.topic.replication.factor" })
        ));
        let invalid = ServeArgs { min_insync_replicas: Some(0), ..ServeArgs::default() };
        assert_eq!(
            NodeConfig::resolve(&invalid).unwrap_err().to_string(),
            "invalid log default: Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"
        );
    }

    #[test]
    fn bad_values_are_clear_errors() {
        // Proves invalid log defaults and voters are reported, not ignored.
        let args = ServeArgs { log: vec!["retention.ms=-5".into()], ..ServeArgs::default() };
        assert!(matches!(NodeConfig::resolve(&args), Err(ConfigFileError::Log(_))));
        let args = ServeArgs { voters: Some("1-localhost".into()), ..ServeArgs::default() };
        assert!(matches!(NodeConfig::resolve(&args), Err(ConfigFileError::Voters(_))));
    }

    #[test]
    fn replica_selector_accepts_kafkas_class_names() {
        // Proves replica.selector.class takes Kafka's class names (and rack-aware), defaults to
        // the leader, and refuses anything else.
        let resolve = |value: Option<&str>| {
            NodeConfig::resolve(&ServeArgs { replica_selector_class: value.map(String::from), ..ServeArgs::default() })
        };
        assert_eq!(resolve(None).unwrap().replica_selector, ReplicaSelector::LeaderOnly);
        for rack_aware in ["rack-aware", "org.apache.kafka.common.replica.RackAwareReplicaSelector"] {
            assert_eq!(resolve(Some(rack_aware)).unwrap().replica_selector, ReplicaSelector::RackAware);
        }
        assert_eq!(
            resolve(Some("org.apache.kafka.common.replica.LeaderSelector")).unwrap().replica_selector,
            ReplicaSelector::LeaderOnly
        );
        assert!(matches!(resolve(Some("com.example.Mine")), Err(ConfigFileError::ReplicaSelector(_))));
    }

    #[test]
    fn process_roles_resolve_and_a_broker_only_node_needs_voters_without_itself() {
        // Proves process.roles: the default is a voter, `broker` is an observer that must name
        // the voters and not be one, and a controller-only node or an unknown role is refused.
        assert_eq!(NodeConfig::resolve(&ServeArgs::default()).unwrap().process_roles, ProcessRoles::BrokerController);
        let roles = |roles: &str, voters: Option<&str>| {
            let args = ServeArgs {
                node_id: Some(4),
                process_roles: Some(roles.into()),
                voters: voters.map(Into::into),
                ..ServeArgs::default()
            };
            NodeConfig::resolve(&args).map(|c| c.process_roles)
        };
        assert_eq!(roles("controller, broker", None).unwrap(), ProcessRoles::BrokerController);
        assert_eq!(roles("broker", Some("1@127.0.0.1:9093")).unwrap(), ProcessRoles::Broker);
        assert!(matches!(roles("broker", None), Err(ConfigFileError::BrokerOnlyVoters)));
        assert!(matches!(roles("broker", Some("4@127.0.0.1:9093")), Err(ConfigFileError::BrokerOnlyVoters)));
        assert!(matches!(roles("controller", None), Err(ConfigFileError::ProcessRoles(_))));
        assert!(matches!(roles("broker,zookeeper", None), Err(ConfigFileError::ProcessRoles(_))));
    }

    #[test]
    fn queued_max_request_bytes_below_socket_request_max_bytes_is_refused() {
        // Proves the request pool must hold the largest frame, and limits must be positive.
        let args = ServeArgs {
            socket_request_max_bytes: Some(1 << 20),
            queued_max_request_bytes: Some(1 << 19),
            ..ServeArgs::default()
        };
        assert!(matches!(
            NodeConfig::resolve(&args),
            Err(ConfigFileError::QueuedMaxRequestBytesBelowRequestMax {
                queued_max_request_bytes: 524_288,
                socket_request_max_bytes: 1_048_576
            })
        ));
        let args = ServeArgs { max_connections_per_ip: Some(0), ..ServeArgs::default() };
        assert!(matches!(
            NodeConfig::resolve(&args),
            Err(ConfigFileError::NotPositive { name: "max.connections.per.ip" })
        ));
        let limits = NodeConfig::resolve(&ServeArgs::default()).unwrap().connection_limits;
        assert_eq!(limits.connections_max_idle_ms, 600_000);
        assert_eq!(limits.queued_max_request_bytes, 536_870_912);
    }

    #[test]
    fn the_reconcile_heartbeat_interval_is_positive_and_capped_at_the_heartbeat_interval() {
        // Proves group.consumer.reconcile.heartbeat.interval.ms defaults to 500, is capped at
        // group.consumer.heartbeat.interval.ms and refuses 0.
        let groups = |args: ServeArgs| NodeConfig::resolve(&args).map(|c| c.groups.consumer);
        let config = groups(ServeArgs::default()).unwrap();
        assert_eq!((config.heartbeat_interval_ms, config.reconcile_heartbeat_interval_ms), (5_000, 500));
        let args = ServeArgs { group_consumer_heartbeat_interval_ms: Some(200), ..ServeArgs::default() };
        assert_eq!(groups(args).unwrap().reconcile_heartbeat_interval_ms, 200);
        let args = ServeArgs { group_consumer_reconcile_heartbeat_interval_ms: Some(0), ..ServeArgs::default() };
        assert!(matches!(groups(args), Err(ConfigFileError::ConsumerGroup(m)) if m.contains("reconcile")));
    }

    #[test]
    fn log_open_files_max_is_auto_or_a_bounded_count() {
        // Proves log.open.files.max defaults to auto, takes a count from the file (as a number or
        // a string) and from flags over it, and refuses counts below the minimum and other text.
        let resolve = |flag: Option<&str>, file: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("runnel.toml");
            std::fs::write(&path, file.map(|v| format!("log_open_files_max = {v}\n")).unwrap_or_default()).unwrap();
            let args =
                ServeArgs { config: Some(path), log_open_files_max: flag.map(String::from), ..ServeArgs::default() };
            NodeConfig::resolve(&args).map(|c| c.log_open_files_max)
        };
        assert_eq!(resolve(None, None).unwrap(), None);
        assert_eq!(resolve(None, Some("5000")).unwrap(), Some(5000));
        assert_eq!(resolve(None, Some("\"auto\"")).unwrap(), None);
        assert_eq!(resolve(Some("64"), Some("5000")).unwrap(), Some(64));
        assert_eq!(resolve(Some("auto"), Some("5000")).unwrap(), None);
        for bad in ["15", "0", "-1", "many"] {
            assert!(matches!(resolve(Some(bad), None), Err(ConfigFileError::OpenFilesMax(_))), "{bad}");
        }
    }

    #[test]
    fn broker_address_overrides_parse_and_flags_replace_the_files() {
        // Proves ID=HOST:PORT pairs parse (a later one for an id wins), malformed ones are
        // refused, and the flag's list replaces the file's instead of merging with it.
        let args = |pairs: &[&str]| ServeArgs {
            broker_address_override: pairs.iter().map(|p| p.to_string()).collect(),
            ..ServeArgs::default()
        };
        let config = NodeConfig::resolve(&args(&["2=127.0.0.1:19092", " 3 = localhost:1 ", "2=127.0.0.1:19093"]));
        assert_eq!(
            config.unwrap().broker_address_overrides,
            BTreeMap::from([(2, "127.0.0.1:19093".to_string()), (3, "localhost:1".to_string())])
        );
        for bad in ["2", "x=127.0.0.1:1", "2=127.0.0.1", "2=:9092", "2=host:99999"] {
            assert!(
                matches!(NodeConfig::resolve(&args(&[bad])), Err(ConfigFileError::BrokerAddressOverride(_))),
                "{bad}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runnel.toml");
        std::fs::write(&path, "broker_address_override = [\"4=127.0.0.1:4\"]\n").unwrap();
        let from_file = ServeArgs { config: Some(path.clone()), ..ServeArgs::default() };
        assert_eq!(
            NodeConfig::resolve(&from_file).unwrap().broker_address_overrides,
            BTreeMap::from([(4, "127.0.0.1:4".to_string())])
        );
        let both = ServeArgs { config: Some(path), ..args(&["5=127.0.0.1:5"]) };
        assert_eq!(
            NodeConfig::resolve(&both).unwrap().broker_address_overrides,
            BTreeMap::from([(5, "127.0.0.1:5".to_string())])
        );
    }
}
