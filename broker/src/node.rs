//! One running node: the composition root. Starts the metadata quorum member, waits until it
//! has caught up, registers the broker, makes the hosted partitions follow the metadata image,
//! serves the Kafka protocol, runs housekeeping, and shuts all of it down cleanly.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::controller::{Controller, ControllerConfig, ControllerError, MetadataImage, MetadataRecord, QuorumRole};
use crate::log::{LogConfig, OpenFiles, SystemClock};
use crate::partition::ReplicaManager;
use crate::replication::fetcher::Fetchers;
use crate::server::{self, Broker, ServerSettings};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{dir} is in use by another process (its .lock is held): two nodes on one directory would \
         corrupt its logs; stop the other process or give this one its own --data-dir"
    )]
    DirInUse { dir: std::path::PathBuf },
    #[error("data directory belongs to node {found}, not {configured}")]
    NodeIdMismatch { found: u64, configured: u64 },
    #[error(
        "{dir} is missing although this data directory has run before (meta.properties): a voter of \
         the metadata quorum that lost its log has forgotten its votes and the cluster's metadata, \
         and would delete every partition here as unknown; restore the directory, or (to give the \
         node a new, empty disk) remove the whole data directory"
    )]
    MetadataLogLost { dir: std::path::PathBuf },
    #[error(transparent)]
    Listeners(#[from] crate::server::listeners::ListenerBindError),
    #[error("binding the HTTP listener {addr}: {source}")]
    BindHttp {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("WebAssembly runtime: {0}")]
    Runtime(#[from] runnel_runtime::RuntimeError),
    #[error("metadata quorum: {0}")]
    Controller(#[from] ControllerError),
}

/// A running node.
pub struct Node {
    kafka_addr: SocketAddr,
    /// Every Kafka listener's name and bound address.
    listener_addrs: Vec<(String, SocketAddr)>,
    http_addr: SocketAddr,
    controller_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    broker: Arc<Broker>,
    broker_epoch: i64,
    /// Set by a controlled shutdown: heartbeats then ask to be fenced.
    shutting_down: Arc<std::sync::atomic::AtomicBool>,
    /// The exclusive lock on the data directory, held while the node runs (see [`lock_dir`]; the
    /// metadata quorum locks its own directory).
    _dir_lock: std::fs::File,
}

/// How long a controlled shutdown waits for this node's leaderships to move away.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// `transaction.timeout.ms` of exactly-once transform workers (Kafka Streams uses 10 s; a
/// replacement worker aborts a vanished one's transaction at once, so this only bounds how long a
/// worker that vanished without a replacement holds back its outputs' last stable offset).
const TRANSFORM_TRANSACTION_TIMEOUT_MS: i32 = 60_000;

impl Node {
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let data_dir = config.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| NodeError::DataDir { path: data_dir.clone(), source })?;
        // Before anything reads or recovers a log here.
        let dir_lock = lock_dir(&data_dir)?;
        let metadata_dir = config.metadata_log_dir.clone();
        check_metadata_log(&data_dir, &metadata_dir, config.process_roles)?;
        let cluster_id = load_or_create_meta(&data_dir, &metadata_dir, config.node_id, config.cluster_id.as_deref())?;

        // Loaded before the quorum starts: its raft listener may use it too.
        let tls = crate::server::listeners::load_tls(&config.security)
            .map_err(crate::server::listeners::ListenerBindError::from)?;
        let controller = Controller::start(ControllerConfig {
            tls: tls.of("CONTROLLER").filter(|_| config.security.controller_protocol.uses_tls()),
            authorizer: Some(config.security.authorizer.clone()),
            node_id: config.node_id,
            role: match config.process_roles {
                crate::config::ProcessRoles::BrokerController => QuorumRole::Voter,
                crate::config::ProcessRoles::Broker => QuorumRole::Observer,
            },
            listen_addr: config.controller_listen,
            voters: config.voters.clone(),
            data_dir: data_dir.clone(),
            metadata_dir: Some(metadata_dir),
            broker_session_timeout_ms: config.broker_session_timeout_ms,
            leader_imbalance_check_interval_ms: config.leader_imbalance_check_interval_ms,
            ..ControllerConfig::default()
        })
        .await?;
        controller.wait_ready(Duration::from_secs(60)).await?;

        add_bootstrap_users(&controller, &config.security.bootstrap_users).await?;
        let listeners = crate::server::listeners::bind(&config.security, &tls).await?;
        let kafka_addr = listeners.addresses[0].1;
        let http_listener = TcpListener::bind(config.http_listen)
            .await
            .map_err(|source| NodeError::BindHttp { addr: config.http_listen, source })?;
        let http_addr =
            http_listener.local_addr().map_err(|source| NodeError::BindHttp { addr: config.http_listen, source })?;
        let advertised_host = listeners.inter_broker.host.clone();
        let security_report = crate::security::SecurityReport::new(
            &config.security,
            &listeners.addresses,
            http_addr,
            config.security.http.tls,
            Some(config.controller_listen),
        );
        for warning in &security_report.warnings {
            tracing::warn!("{warning}");
        }

        let log_defaults = config.log_defaults.clone();
        controller.set_unclean_policy(move |topic| {
            crate::server::topic_log_config(&log_defaults, &topic.configs).unclean_leader_election_enable
        });
        let open_files_max = config.log_open_files_max.unwrap_or_else(OpenFiles::auto_capacity);
        tracing::info!(open_files_max, "segment files open at once (log.open.files.max)");
        let replicas = Arc::new(
            ReplicaManager::with_lag_time(
                config.node_id,
                &data_dir,
                Arc::new(SystemClock),
                config.replica_lag_time_max_ms as i64,
            )
            .with_open_files(OpenFiles::new(open_files_max))
            .with_max_producers(config.max_producers_per_partition),
        );
        let groups = Arc::new(crate::group::GroupCoordinator::new(replicas.clone(), config.groups.clone()));
        let txn = Arc::new(crate::txn::TxnCoordinator::new(
            config.transactions.clone(),
            config.node_id,
            replicas.clone(),
            controller.clone(),
        ));
        let inter_broker = config.security.listeners.inter_broker();
        let addresses = crate::peer::BrokerAddresses::new(
            config.broker_address_overrides.clone(),
            if inter_broker.protocol.uses_tls() { tls.of(&inter_broker.name) } else { None },
            config.security.inter_broker_sasl.clone(),
        );
        let metrics = crate::metrics::Metrics::new();
        let fetchers = Arc::new(Fetchers::new(
            config.node_id,
            replicas.clone(),
            controller.clone(),
            addresses.clone(),
            metrics.replication_bytes_in.clone(),
        ));
        let reconcile: Arc<dyn Fn(&MetadataImage) + Send + Sync> = {
            let partitions = Reconciler::new(replicas.clone(), config.node_id, config.log_defaults.clone());
            let metrics = metrics.clone();
            let groups = groups.clone();
            let txn = txn.clone();
            let fetchers = fetchers.clone();
            // Groups map over the actual partition count of `__consumer_offsets` once it exists.
            Arc::new(move |image: &crate::controller::MetadataImage| {
                // The fetchers follow the partitions' roles, which only a touched partition changes.
                let done = partitions.reconcile(image);
                if done.touched() {
                    fetchers.update();
                }
                // Every node forgets a deleted topic's series (whoever served the delete).
                for topic in &done.removed_topics {
                    metrics.forget_topic(topic);
                }
                if let Some(topic) = image.topics.get(crate::group::OFFSETS_TOPIC) {
                    groups.offsets.set_partition_count(topic.partitions.len() as u32);
                    groups.follow_leadership();
                }
                if let Some(topic) = image.topics.get(crate::txn::TRANSACTION_STATE_TOPIC) {
                    txn.set_partition_count(topic.partitions.len() as u32);
                    txn.follow_leadership();
                }
            })
        };
        // Opens every hosted partition (in parallel, off the async workers).
        let opening = (reconcile.clone(), controller.image());
        let _ = tokio::task::spawn_blocking(move || (opening.0)(&opening.1)).await;
        {
            let image = controller.image();
            replicas.remove_strays(|topic, partition| {
                image.topics.get(topic).is_some_and(|t| {
                    t.partitions.get(partition as usize).is_some_and(|p| p.replicas.contains(&config.node_id))
                })
            });
        }
        // Every start is a new incarnation with a new broker epoch; it starts fenced and is
        // unfenced once the active controller hears its heartbeat.
        // A session of this id still live on the active controller is refused: the previous
        // process's (killed: it ends within a moment; stalled: within a session) or another
        // process's with this node.id, which would never end. Asked again until a session has
        // surely ended, then the start fails.
        let registration = MetadataRecord::RegisterBroker {
            node_id: config.node_id,
            host: advertised_host.clone(),
            port: listeners.inter_broker.port,
            rack: config.rack.clone(),
            listeners: listeners.endpoints.clone(),
        };
        // Two of the active controller's sessions from the first refusal (it names its length).
        let mut give_up: Option<std::time::Instant> = None;
        loop {
            match controller.propose(registration.clone()).await {
                Ok(_) => break,
                Err(e @ ControllerError::DuplicateBrokerRegistration { session_ms, .. })
                    if *give_up
                        .get_or_insert_with(|| std::time::Instant::now() + Duration::from_millis(session_ms) * 2)
                        > std::time::Instant::now() =>
                {
                    tracing::warn!(error = %e, "registration refused; asking again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let broker_epoch = controller.image().brokers.get(&config.node_id).map_or(-1, |b| b.broker_epoch);

        let runtime =
            runnel_runtime::Runtime::new(runnel_runtime::RuntimeConfig::new(data_dir.join("transforms-cache")))?;
        let validators = crate::validator::Validators::new(runtime.clone(), metrics.clone());
        let assignors = crate::group::wasm_assignor::WasmAssignors::new(runtime.clone(), metrics.clone());
        let transforms = crate::transform::TransformManager::new(runtime.clone());
        let broker = Arc::new(Broker {
            settings: ServerSettings {
                node_id: config.node_id,
                cluster_id,
                request_max_bytes: config.socket_request_max_bytes,
                default_partitions: config.num_partitions,
                default_replication_factor: config.default_replication_factor,
                auto_create_topics: config.auto_create_topics_enable,
                log_defaults: config.log_defaults.clone(),
                connection_limits: config.connection_limits.clone(),
                fetch_max_bytes: config.fetch_max_bytes,
                data_dir: data_dir.clone(),
                replica_selector: config.replica_selector,
                metrics_aggregate: config.metrics_aggregate,
                max_broker_partitions: config.max_broker_partitions,
                http_consumer_instances_max: config.http_consumer_instances_max,
                http_consumer_instances_max_per_principal: config.http_consumer_instances_max_per_principal,
                authorizer: config.security.authorizer.clone(),
                security: security_report,
                inter_broker_listener: std::sync::Arc::from(config.security.listeners.inter_broker.as_str()),
                http_address: Some(if http_addr.ip().is_unspecified() {
                    format!("{advertised_host}:{}", http_addr.port())
                } else {
                    http_addr.to_string()
                }),
            },
            controller: controller.clone(),
            replicas: replicas.clone(),
            groups,
            metrics,
            fetchers: fetchers.clone(),
            peers: Arc::new(crate::peer::Peers::new(config.node_id, controller.clone(), addresses)),
            transforms: transforms.clone(),
            validators: validators.clone(),
            assignors: assignors.clone(),
            txn: txn.clone(),
            passwords: Arc::default(),
            reconcile,
        });
        txn.set_marker_sink(Arc::new(crate::server::handlers::write_txn_markers::ServerMarkers::new(&broker)));
        let cached = replicas.clone();
        broker.metrics.set_log_file_cache_stats(Arc::new(move || cached.open_files().stats()));
        transforms.attach(Arc::new(crate::transform::Host {
            node_id: config.node_id,
            replicas: replicas.clone(),
            groups: broker.groups.clone(),
            metrics: broker.metrics.clone(),
            controller: controller.clone(),
            peers: broker.peers.clone(),
            log_defaults: broker.settings.log_defaults.clone(),
            transaction_timeout_ms: TRANSFORM_TRANSACTION_TIMEOUT_MS.min(broker.txn.settings.max_timeout_ms),
            ensure_offsets_topic: ensure_offsets_topic(Arc::downgrade(&broker)),
            ensure_state_topic: ensure_state_topic(Arc::downgrade(&broker)),
            local_produce: local_produce(Arc::downgrade(&broker)),
            validate_output: validate_output(Arc::downgrade(&broker)),
        }));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        // The broker's lease: heartbeats to the active controller until shutdown, which sends
        // the last one asking to be fenced (controlled shutdown).
        let shutting_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (heartbeats, wants_shutdown) = (controller.clone(), shutting_down.clone());
        tasks.push(every(Duration::from_millis(config.broker_heartbeat_interval_ms), shutdown_rx.clone(), move || {
            let (heartbeats, want_shutdown) =
                (heartbeats.clone(), wants_shutdown.load(std::sync::atomic::Ordering::Acquire));
            async move {
                if let Err(e) = heartbeats.heartbeat(broker_epoch, want_shutdown).await {
                    tracing::debug!(error = %e, "broker heartbeat failed");
                }
            }
        }));
        // Serving starts once unfenced: before that this node leads nothing, and a single node
        // would answer every request NOT_LEADER_OR_FOLLOWER.
        let mut images = controller.subscribe();
        let unfenced = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let live = images.borrow_and_update().is_live(config.node_id);
                if live || images.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if unfenced.is_err() {
            tracing::warn!(broker_epoch, "not unfenced by the controller within 30 s; serving anyway");
        }
        // Subscribed before the first reconciles: an image applied while they run (a module
        // compiling can take seconds) is one the follower below still sees as changed.
        let followed = controller.subscribe();
        broker.reconcile_now().await;
        transforms.reconcile(&controller.image()).await;
        validators.reconcile(&controller.image()).await;
        assignors.reconcile(&controller.image()).await;

        // ISR expiration: followers that fell behind leave the ISRs this node leads.
        tasks.push(tokio::spawn(crate::replication::isr::expiration_loop(
            replicas.clone(),
            controller.clone(),
            broker.metrics.clone(),
            config.replica_lag_time_max_ms as i64,
            shutdown_rx.clone(),
        )));

        // Follow the metadata image: open, reconfigure and delete partitions as it changes.
        // WASM deployments follow the partitions in tasks of their own, one per kind, from the
        // last image whose partitions are reconciled (a transform worker starts only on a
        // partition this node has opened): a module compiling or a transform worker finishing
        // a guest call (up to its call deadline) never holds back a leadership change.
        let (reconciled_tx, reconciled_rx) = watch::channel(controller.image());
        let reconciled_tx = Arc::new(reconciled_tx);
        let (follower, publish) = (broker.clone(), reconciled_tx.clone());
        tasks.push(on_each_image(followed, shutdown_rx.clone(), move |image| {
            let (reconcile, publish) = (follower.reconcile.clone(), publish.clone());
            async move {
                let reconciled = image.clone();
                let _ = tokio::task::spawn_blocking(move || reconcile(&reconciled)).await;
                publish_reconciled(&publish, image);
            }
        }));
        tasks.push(tokio::spawn(broker.transforms.clone().follow(reconciled_rx.clone(), shutdown_rx.clone())));
        let validators = broker.validators.clone();
        tasks.push(on_each_image(reconciled_rx.clone(), shutdown_rx.clone(), move |image| {
            let validators = validators.clone();
            async move { validators.reconcile(&image).await }
        }));
        let assignors = broker.assignors.clone();
        tasks.push(on_each_image(reconciled_rx, shutdown_rx.clone(), move |image| {
            let assignors = assignors.clone();
            async move { assignors.reconcile(&image).await }
        }));

        // Transactions past their timeout abort; idle transactional ids expire.
        let expiring = txn.clone();
        tasks.push(every(TXN_EXPIRY_INTERVAL, shutdown_rx.clone(), move || {
            let txn = expiring.clone();
            async move { txn.expire().await }
        }));

        // Housekeeping: retention, compaction, time-based flush, expiry of committed offsets.
        let housekeeping = replicas.clone();
        let groups = broker.groups.clone();
        let deployments = broker.controller.clone();
        let interval = Duration::from_millis(config.housekeeping_interval_ms.max(10));
        let offsets_retention_ms = (config.offsets_retention_minutes as i64).saturating_mul(60_000);
        let producer_id_expiration_ms = i64::try_from(config.producer_id_expiration_ms).unwrap_or(i64::MAX);
        let dedupe_buffer_bytes = usize::try_from(config.log_cleaner_dedupe_buffer_size).unwrap_or(usize::MAX);
        let modules = runtime.clone();
        tasks.push(every(interval, shutdown_rx.clone(), move || {
            let (replicas, groups, deployments) = (housekeeping.clone(), groups.clone(), deployments.clone());
            let modules = modules.clone();
            async move {
                let _ = tokio::task::spawn_blocking(move || {
                    // The compiled artifacts of modules no deployment uses any more (an upload
                    // compiled less than ARTIFACT_GRACE ago may be about to be deployed).
                    let image = deployments.image();
                    let in_use = |sha256: &str| {
                        image.transforms.values().any(|t| t.sha256 == sha256)
                            || image.validators.values().any(|v| v.sha256 == sha256)
                            || image.assignors.values().any(|a| a.sha256 == sha256)
                    };
                    match modules.retain_cached(in_use, ARTIFACT_GRACE) {
                        Ok(0) => {}
                        Ok(deleted) => tracing::info!(deleted, "deleted the compiled artifacts of undeployed modules"),
                        Err(error) => tracing::warn!(%error, "could not clean the compiled-module cache"),
                    }
                    replicas.maintain(producer_id_expiration_ms, dedupe_buffer_bytes);
                    // Offsets of groups without members expire after offsets.retention.minutes,
                    // except the positions of deployed transforms.
                    let deployed = deployments.image().transforms.keys().cloned().collect();
                    let gate =
                        crate::transform::KeepTransformCheckpoints { inner: groups.as_ref(), deployed: &deployed };
                    groups.offsets.expire(crate::log::now_ms(), offsets_retention_ms, &gate);
                })
                .await;
            }
        }));

        // Throughput rates and ISR changes for the dashboard, sampled once a second; the high
        // watermark checkpoint every 5 s (Kafka's replica.high.watermark.checkpoint.interval.ms).
        let sampled = broker.metrics.clone();
        let imaged = broker.controller.clone();
        let checkpointed = replicas.clone();
        let reopened = broker.clone();
        let mut stop = shutdown_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            let mut ticks = 0u64;
            let mut checkpoint_failing = false;
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = ticker.tick() => {
                        sampled.sample_rates();
                        sampled.sample_isr_changes(&imaged.image());
                    }
                }
                ticks += 1;
                if ticks % 5 == 0 {
                    // A partition that could not be opened (disk full, out of descriptors) is
                    // tried again, without waiting for the next metadata change. The same image
                    // again costs nothing but those retries: reconcile works by difference.
                    reopened.reconcile_now().await;
                    // What it opened may be an input partition a transform waits for.
                    publish_reconciled(&reconciled_tx, imaged.image());
                    let replicas = checkpointed.clone();
                    let written = tokio::task::spawn_blocking(move || replicas.checkpoint_high_watermarks()).await;
                    // A full disk fails it every 5 s: logged once per episode. The high
                    // watermarks stay in memory; the next write that succeeds has them all.
                    match written {
                        Ok(Err(e)) if !checkpoint_failing => {
                            checkpoint_failing = true;
                            tracing::warn!(error = %e, "could not write the high watermark checkpoint; retrying every 5 s");
                        }
                        Ok(Ok(())) if checkpoint_failing => {
                            checkpoint_failing = false;
                            tracing::info!("the high watermark checkpoint is written again");
                        }
                        _ => {}
                    }
                }
            }
        }));

        tasks.push(tokio::spawn(crate::http::serve(
            http_listener,
            broker.clone(),
            config.security.http.clone(),
            if config.security.http.tls { tls.node.clone() } else { None },
            shutdown_rx.clone(),
        )));
        for context in tls.all() {
            tasks.push(context.spawn_reloader(shutdown_rx.clone()));
        }
        tasks.push(tokio::spawn(server::serve(listeners.sockets, broker.clone(), shutdown_rx)));
        tracing::info!(node_id = config.node_id, broker_epoch, %kafka_addr, %http_addr, controller = %controller.local_addr(), data_dir = %data_dir.display(), "node started");
        Ok(Node {
            kafka_addr,
            listener_addrs: listeners.addresses,
            http_addr,
            controller_addr: controller.local_addr(),
            shutdown,
            tasks,
            broker,
            broker_epoch,
            shutting_down,
            _dir_lock: dir_lock,
        })
    }

    /// The first Kafka listener's bound address.
    pub fn kafka_addr(&self) -> SocketAddr {
        self.kafka_addr
    }

    /// Every Kafka listener's name and bound address, in `listeners` order.
    pub fn listener_addrs(&self) -> &[(String, SocketAddr)] {
        &self.listener_addrs
    }

    async fn controlled_shutdown(&self) {
        let controller = &self.broker.controller;
        let node_id = self.broker.settings.node_id;
        let deadline = tokio::time::Instant::now() + CONTROLLED_SHUTDOWN_TIMEOUT;
        self.shutting_down.store(true, std::sync::atomic::Ordering::Release);
        let mut images = controller.subscribe();
        loop {
            let image = images.borrow_and_update().clone();
            let fenced = !image.is_live(node_id);
            // With another live replica to take over; a sole replica stays (nothing can move).
            let leads_movable = image
                .topics
                .values()
                .flat_map(|t| t.partitions.iter())
                .any(|p| p.leader == Some(node_id) && p.isr.iter().any(|&r| r != node_id && image.is_live(r)));
            if fenced && !leads_movable {
                tracing::info!("controlled shutdown: leaderships moved");
                return;
            }
            if let Err(e) = controller.heartbeat(self.broker_epoch, true).await {
                tracing::debug!(error = %e, "controlled shutdown heartbeat failed");
            }
            let wait = tokio::time::sleep(Duration::from_millis(100));
            tokio::select! {
                _ = images.changed() => {}
                _ = wait => {}
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("controlled shutdown timed out; stopping anyway");
                return;
            }
        }
    }
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }
    pub fn controller_addr(&self) -> SocketAddr {
        self.controller_addr
    }

    /// Controlled shutdown, then stops serving, closes every log cleanly and stops the quorum
    /// member: first this node asks the controller to fence it and waits (bounded) until it leads
    /// no partition with another live replica, so clients move to the new leaders with at most a
    /// retriable error; followers keep fetching meanwhile.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        self.controlled_shutdown().await;
        let _ = self.shutdown.send(true);
        self.broker.fetchers.stop();
        for task in self.tasks {
            let _ = task.await;
        }
        self.broker.transforms.shutdown().await;
        let replicas = self.broker.replicas.clone();
        let _ = tokio::task::spawn_blocking(move || replicas.shutdown()).await;
        let controller = self.broker.controller.clone();
        drop(self.broker);
        controller.shutdown().await?;
        Ok(())
    }
}

/// Publishes `image` as reconciled unless a newer one already is (a handler's or the tick's
/// reconcile can finish after the follower's of a newer image). The same image again is
/// published too: the partitions it reconciled may differ (a failed open retried).
fn publish_reconciled(reconciled: &watch::Sender<Arc<MetadataImage>>, image: Arc<MetadataImage>) {
    reconciled.send_if_modified(|current| {
        let newer_or_same = image.applied_index >= current.applied_index;
        if newer_or_same {
            *current = image;
        }
        newer_or_same
    });
}

/// Runs `apply` on the latest image each time `images` changes (images published meanwhile are
/// skipped: each apply reconciles to the whole image) until `stop` turns true.
fn on_each_image<F, Fut>(
    mut images: watch::Receiver<Arc<MetadataImage>>,
    mut stop: watch::Receiver<bool>,
    mut apply: F,
) -> JoinHandle<()>
where
    F: FnMut(Arc<MetadataImage>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                changed = images.changed() => if changed.is_err() { return },
            }
            let image = images.borrow_and_update().clone();
            apply(image).await;
        }
    })
}

/// Runs `tick` every `interval` (a late tick is delayed, not bunched) until `stop` turns true.
/// How often the transaction coordinator looks for timed-out transactions (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s; a shorter check costs
/// a scan of the coordinated ids, which is small, and aborts closer to the timeout).
const TXN_EXPIRY_INTERVAL: Duration = Duration::from_secs(1);
/// How long a compiled module artifact no deployment uses stays cached: an upload is compiled
/// (and cached) when the HTTP API checks it, before its deployment record is applied.
const ARTIFACT_GRACE: Duration = Duration::from_secs(600);

fn every<F, Fut>(interval: Duration, mut stop: watch::Receiver<bool>, mut tick: F) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = ticker.tick() => {}
            }
            tick().await;
        }
    })
}

/// What one reconcile did (tests observe which partitions it touched).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// The partitions `ReplicaManager::ensure` was called for, in no particular order.
    pub ensured: Vec<(String, u32)>,
    /// Topics whose hosted partitions were deleted (deleted or recreated topics).
    pub removed_topics: Vec<String>,
    /// Partitions deleted because the image no longer assigns them here.
    pub removed_partitions: Vec<(String, u32)>,
}

impl Reconciled {
    fn touched(&self) -> bool {
        !self.ensured.is_empty() || !self.removed_topics.is_empty() || !self.removed_partitions.is_empty()
    }
}

/// Makes the hosted partitions match an image, by difference with the image it reconciled last:
/// only the topics whose value changed (shared topics of two images are skipped without being
/// visited, `OrdMap::diff`), the partitions whose replicas include a broker whose liveness changed
/// (their `LeaderAndIsr.fenced`), and the topics a previous reconcile failed on are looked at; the
/// first reconcile looks at everything. Partitions to open or apply run in parallel on blocking
/// threads (`partition::parallel`); the caller must be a blocking thread too, never an async
/// worker. Serialized by a mutex: handlers and the image follower both call it, and a partition
/// must be opened once.
pub(crate) struct Reconciler {
    replicas: Arc<ReplicaManager>,
    node_id: u64,
    log_defaults: LogConfig,
    state: Mutex<ReconcileState>,
}

#[derive(Default)]
struct ReconcileState {
    /// The newest image reconciled so far. Handlers and the image follower race to reconcile; an
    /// older image reconciled after a newer one would delete the partitions of a topic recreated
    /// since (and reopen them empty once the newer image comes back round), losing acknowledged
    /// records, so older images are skipped.
    last: Option<MetadataImage>,
    /// Topics some partition of which could not be opened or deleted: looked at again next time.
    retry: std::collections::BTreeSet<String>,
}

/// One partition to ensure: its topic (shared with the image) and index.
type Work = (Arc<crate::controller::TopicImage>, u32);

impl Reconciler {
    pub(crate) fn new(replicas: Arc<ReplicaManager>, node_id: u64, log_defaults: LogConfig) -> Reconciler {
        Reconciler { replicas, node_id, log_defaults, state: Mutex::new(ReconcileState::default()) }
    }

    pub(crate) fn reconcile(&self, image: &MetadataImage) -> Reconciled {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.last.as_ref().is_some_and(|last| image.applied_index < last.applied_index) {
            return Reconciled::default();
        }
        let mut done = Reconciled::default();
        let mut failed = std::collections::BTreeSet::new();
        let retry = std::mem::take(&mut state.retry);
        let work = match state.last.take() {
            None => self.remove_everything_unknown(image, &mut done, &mut failed),
            Some(last) => self.remove_what_changed(&last, image, retry, &mut done, &mut failed),
        };
        self.ensure_all(work, image, &mut done, &mut failed);
        state.retry = failed;
        state.last = Some(image.clone());
        done
    }

    /// The first reconcile: hosted partitions of topics the image lacks (or has under another
    /// id) or no longer assigns here are deleted; every partition assigned here is to ensure.
    fn remove_everything_unknown(
        &self,
        image: &MetadataImage,
        done: &mut Reconciled,
        failed: &mut std::collections::BTreeSet<String>,
    ) -> Vec<Work> {
        for partition in self.replicas.all() {
            let topic = partition.topic().to_string();
            match image.topics.get(&topic) {
                Some(t) if t.topic_id == partition.topic_id() => {
                    let assigned = t.partitions.get(partition.index() as usize);
                    if assigned.is_none_or(|p| !p.replicas.contains(&self.node_id)) {
                        self.remove_partition(&topic, partition.index(), done, failed);
                    }
                }
                _ if done.removed_topics.contains(&topic) => {}
                _ => self.remove_topic(&topic, done, failed),
            }
        }
        image.topics.values().flat_map(|t| self.hosted_here(t)).collect()
    }

    /// Later reconciles: what differs from `last`.
    fn remove_what_changed(
        &self,
        last: &MetadataImage,
        image: &MetadataImage,
        retry: std::collections::BTreeSet<String>,
        done: &mut Reconciled,
        failed: &mut std::collections::BTreeSet<String>,
    ) -> Vec<Work> {
        use imbl::ordmap::DiffItem;
        let mut changed: Vec<Arc<crate::controller::TopicImage>> = Vec::new();
        for item in last.topics.diff(&image.topics) {
            match item {
                DiffItem::Add(_, topic) => changed.push(topic.clone()),
                DiffItem::Update { old: (name, old), new: (_, topic) } => {
                    if old.topic_id != topic.topic_id {
                        self.remove_topic(name, done, failed);
                    }
                    changed.push(topic.clone());
                }
                DiffItem::Remove(name, _) => self.remove_topic(name, done, failed),
            }
        }
        // Topics some hosted partition of which belongs to another incarnation than the image's
        // (a removal that failed before), found in one pass over the hosted partitions.
        let stale: std::collections::BTreeSet<Arc<str>> = if retry.is_empty() {
            Default::default()
        } else {
            let hosted = self.replicas.all();
            hosted
                .iter()
                .filter(|p| retry.contains(&**p.topic()))
                .filter(|p| image.topics.get(&**p.topic()).is_some_and(|t| t.topic_id != p.topic_id()))
                .map(|p| p.topic().clone())
                .collect()
        };
        for name in retry {
            let Some(topic) = image.topics.get(&name) else { continue };
            if !changed.iter().any(|t| t.name == name) {
                if stale.contains(name.as_str()) {
                    self.remove_topic(&name, done, failed);
                }
                changed.push(topic.clone());
            }
        }
        let mut work = Vec::new();
        for topic in &changed {
            // A reassignment may have moved partitions of a changed topic off this node.
            for p in topic.partitions.iter().filter(|p| !p.replicas.contains(&self.node_id)) {
                if self.replicas.get(&topic.name, p.partition).is_some() {
                    self.remove_partition(&topic.name, p.partition, done, failed);
                }
            }
            work.extend(self.hosted_here(topic));
        }
        // A broker fenced or unfenced changes `LeaderAndIsr.fenced` of every partition it is a
        // replica of, in topics that did not change otherwise.
        let flipped: Vec<u64> = last
            .brokers
            .keys()
            .chain(image.brokers.keys())
            .copied()
            .filter(|&b| last.is_live(b) != image.is_live(b))
            .collect();
        if !flipped.is_empty() {
            for topic in image.topics.values().filter(|t| !changed.iter().any(|c| Arc::ptr_eq(c, t))) {
                work.extend(
                    self.hosted_here(topic)
                        .filter(|(t, p)| t.partitions[*p as usize].replicas.iter().any(|r| flipped.contains(r))),
                );
            }
        }
        work
    }

    /// The partitions of `topic` assigned to this node.
    fn hosted_here<'a>(&self, topic: &'a Arc<crate::controller::TopicImage>) -> impl Iterator<Item = Work> + 'a {
        let node_id = self.node_id;
        topic.partitions.iter().filter(move |p| p.replicas.contains(&node_id)).map(|p| (topic.clone(), p.partition))
    }

    /// Opens (or creates) and applies the leadership of every partition in `work`, in parallel:
    /// a new partition costs a few fsyncs, and a new leadership one (the epoch checkpoint).
    fn ensure_all(
        &self,
        work: Vec<Work>,
        image: &MetadataImage,
        done: &mut Reconciled,
        failed: &mut std::collections::BTreeSet<String>,
    ) {
        let configs: Mutex<BTreeMap<String, LogConfig>> = Mutex::new(BTreeMap::new());
        let errors = Mutex::new(std::collections::BTreeSet::new());
        done.ensured.extend(work.iter().map(|(t, p)| (t.name.clone(), *p)));
        let ensure = |(topic, partition): Work| {
            let config = {
                let mut configs = configs.lock().unwrap_or_else(|p| p.into_inner());
                configs
                    .entry(topic.name.clone())
                    .or_insert_with(|| crate::server::topic_log_config(&self.log_defaults, &topic.configs))
                    .clone()
            };
            let p = &topic.partitions[partition as usize];
            let leadership = crate::partition::LeaderAndIsr {
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                fenced: p.replicas.iter().copied().filter(|&r| !image.is_live(r)).collect(),
            };
            if let Err(e) = self.replicas.ensure(&topic.name, partition, topic.topic_id, config, leadership) {
                tracing::error!(topic = %topic.name, partition, error = %e, "could not open partition");
                errors.lock().unwrap_or_else(|p| p.into_inner()).insert(topic.name.clone());
            }
        };
        crate::partition::parallel::for_each_parallel(work, crate::partition::parallel::PARTITION_IO_THREADS, ensure);
        failed.append(&mut errors.into_inner().unwrap_or_else(|p| p.into_inner()));
    }

    fn remove_topic(&self, topic: &str, done: &mut Reconciled, failed: &mut std::collections::BTreeSet<String>) {
        done.removed_topics.push(topic.to_string());
        if let Err(e) = self.replicas.remove_topic(topic) {
            tracing::error!(%topic, error = %e, "could not delete a deleted topic's partitions");
            failed.insert(topic.to_string());
        }
    }

    /// A partition this node hosts that the image no longer assigns to it (a reassignment moved
    /// it away) is deleted the way a deleted topic's are (renamed to `-delete`, removed off the
    /// reconcile path); the fetchers drop it with the next update.
    fn remove_partition(
        &self,
        topic: &str,
        partition: u32,
        done: &mut Reconciled,
        failed: &mut std::collections::BTreeSet<String>,
    ) {
        tracing::info!(%topic, partition, "deleting the replica a reassignment moved off this node");
        done.removed_partitions.push((topic.to_string(), partition));
        if let Err(e) = self.replicas.remove_partition(topic, partition) {
            tracing::error!(%topic, partition, error = %e, "could not delete the replica moved off this node");
            failed.insert(topic.to_string());
        }
    }
}

/// A voter refuses to start when its data dir ran before (`meta.properties`) but the quorum's
/// log directory is gone (Kafka refuses a metadata.log.dir that is not formatted): it would
/// vote again in terms it already voted in, and its empty image would make the stray sweep
/// delete every partition. A broker-only node holds no vote: it fetches the log again. The
/// invariant this relies on: `meta.properties` is only ever written once the quorum's directory
/// (`metadata_dir`: `metadata/` or the configured `metadata.log.dir`) exists.
fn check_metadata_log(
    data_dir: &Path,
    metadata_dir: &Path,
    roles: crate::config::ProcessRoles,
) -> Result<(), NodeError> {
    let dir = metadata_dir.to_path_buf();
    let voter = roles == crate::config::ProcessRoles::BrokerController;
    if voter && data_dir.join("meta.properties").exists() && !dir.exists() {
        return Err(NodeError::MetadataLogLost { dir });
    }
    Ok(())
}

/// Takes the exclusive lock on `dir/.lock` (Kafka's log dir `.lock`): a second process on the
/// same directory (a second `runnel serve` with other ports, a copy of a service unit) would
/// recover, truncate and append to the same segments as the first and corrupt them. The lock
/// (`flock`) goes with the process, also on kill -9.
fn lock_dir(dir: &Path) -> Result<std::fs::File, NodeError> {
    let path = dir.join(".lock");
    match crate::log::durable::lock_exclusive(&path) {
        Ok(Some(file)) => Ok(file),
        Ok(None) => Err(NodeError::DirInUse { dir: dir.to_path_buf() }),
        Err(source) => Err(NodeError::DataDir { path, source }),
    }
}

/// `meta.properties` as Kafka keeps it: the cluster id and node id this directory belongs to.
fn load_or_create_meta(
    data_dir: &Path,
    metadata_dir: &Path,
    node_id: u64,
    cluster_id: Option<&str>,
) -> Result<String, NodeError> {
    let path = data_dir.join("meta.properties");
    let io = |source| NodeError::DataDir { path: path.clone(), source };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let props: BTreeMap<&str, &str> =
            text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once('=')).collect();
        if let Some(found) = props.get("node.id").and_then(|v| v.trim().parse::<u64>().ok()) {
            if found != node_id {
                return Err(NodeError::NodeIdMismatch { found, configured: node_id });
            }
        }
        if let Some(id) = props.get("cluster.id") {
            return Ok(id.trim().to_string());
        }
    }
    let cluster_id = cluster_id.map(str::to_string).unwrap_or_else(new_cluster_id);
    // `check_metadata_log`'s invariant: the quorum's directory exists before this file does.
    let metadata = metadata_dir.to_path_buf();
    std::fs::create_dir_all(&metadata).map_err(|source| NodeError::DataDir { path: metadata, source })?;
    let text = format!("version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n");
    // fsynced and renamed durably: after a power loss a half-written or vanished file would
    // give this directory a new cluster id.
    crate::log::durable::write_atomically(&path, text.as_bytes()).map_err(io)?;
    Ok(cluster_id)
}

/// A Kafka-style cluster id: a random UUID in URL-safe base64 without padding (22 chars).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut bits = u128::from_be_bytes(bytes);
    let mut out = Vec::with_capacity(22);
    for _ in 0..22 {
        out.push(ALPHABET[(bits >> 122) as usize & 63]);
        bits <<= 6;
    }
    String::from_utf8(out).expect("ASCII alphabet")
}

/// FindCoordinator creates `__consumer_offsets` on first use; transforms commit positions there.
fn ensure_offsets_topic(
    broker: std::sync::Weak<Broker>,
) -> Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync> {
    Box::new(move || {
        let broker = broker.clone();
        Box::pin(async move {
            let Some(broker) = broker.upgrade() else { return };
            let header = kafka_protocol::messages::RequestHeader::default()
                .with_request_api_key(kafka_protocol::messages::ApiKey::FindCoordinator as i16)
                .with_request_api_version(3);
            let request = kafka_protocol::messages::FindCoordinatorRequest::default()
                .with_key(server::handlers::str_bytes(crate::transform::OFFSETS_KEY))
                .with_key_type(0);
            let _ = server::handlers::find_coordinator::handle(&broker, &header, request).await;
        })
    })
}

/// Stateful transforms' changelog topics, created on first use like the internal topics.
fn ensure_state_topic(broker: std::sync::Weak<Broker>) -> crate::transform::EnsureTopic {
    Box::new(move |name, partitions| {
        let broker = broker.clone();
        Box::pin(async move {
            let broker = broker.upgrade().ok_or_else(|| "the node is stopping".to_string())?;
            server::handlers::find_coordinator::ensure_state_topic(&broker, &name, partitions)
                .await
                .map_err(|code| format!("creating the state topic '{name}': {code:?}"))
        })
    })
}

/// The topic's validator on a transform's output batch, in process: the refusal's message.
fn validate_output(broker: std::sync::Weak<Broker>) -> crate::transform::ValidateOutput {
    Box::new(move |topic, partition, records| {
        let broker = broker.clone();
        Box::pin(async move {
            let broker = broker.upgrade()?;
            let image = broker.controller.image();
            match broker.validators.check(&image, &topic, partition, &records).await {
                crate::validator::Verdict::Accept => None,
                crate::validator::Verdict::Reject { message, .. } => Some(message),
            }
        })
    })
}

/// The Produce handler in process, for transform workers' outputs to partitions led here.
fn local_produce(broker: std::sync::Weak<Broker>) -> crate::transform::LocalProduce {
    Box::new(move |request| {
        let broker = broker.clone();
        Box::pin(async move {
            let broker = broker.upgrade()?;
            let header = kafka_protocol::messages::RequestHeader::default()
                .with_request_api_key(kafka_protocol::messages::ApiKey::Produce as i16)
                .with_request_api_version(crate::transform::PRODUCE_VERSION);
            server::handlers::produce::handle(&broker, &header, request).await
        })
    })
}

/// `--add-scram`: creates each user whose credential for its mechanism does not exist yet
/// (an existing one is never replaced: its password may have been changed since).
async fn add_bootstrap_users(
    controller: &crate::controller::Controller,
    users: &[crate::security::scram::BootstrapUser],
) -> Result<(), NodeError> {
    for user in users {
        if controller.image().scram_credentials.contains_key(&(user.name.clone(), user.mechanism)) {
            continue;
        }
        let credential = user.credential();
        controller
            .propose(MetadataRecord::UpsertScramCredential {
                user: user.name.clone(),
                mechanism: user.mechanism.name().to_string(),
                salt: credential.salt,
                stored_key: credential.stored_key,
                server_key: credential.server_key,
                iterations: credential.iterations,
            })
            .await?;
        tracing::info!(user = %user.name, mechanism = user.mechanism.name(), "created SCRAM user (--add-scram)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{PartitionImage, TopicImage};
    use crate::log::records::BatchBuilder;
    use crate::log::{AppendOrigin, Compression};
    use crate::partition::{Acks, FirstBatch};

    fn image_with(applied_index: u64, topic_id: Option<[u8; 16]>) -> MetadataImage {
        let mut image = MetadataImage::default();
        image.applied_index = applied_index;
        if let Some(topic_id) = topic_id {
            let partition = PartitionImage {
                partition: 0,
                leader: Some(1),
                leader_epoch: 0,
                partition_epoch: 0,
                replicas: vec![1],
                isr: vec![1],
                adding_replicas: vec![],
                removing_replicas: vec![],
            };
            let topic =
                TopicImage { name: "t".into(), topic_id, partitions: vec![partition], configs: Default::default() };
            image.insert_topic(topic);
        }
        image
    }

    #[test]
    fn an_older_image_reconciled_after_a_newer_one_does_not_delete_a_recreated_topic() {
        // Proves the topic re-creation race is closed: the image follower reconciling the image
        // "t deleted" after a handler reconciled "t recreated" used to delete the new incarnation
        // (and reopen it empty later), losing records it had acknowledged.
        let dir = tempfile::tempdir().unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, dir.path(), Arc::new(SystemClock)));
        let reconciler = Reconciler::new(replicas.clone(), 1, LogConfig::default());
        let reconcile = |image: &MetadataImage| reconciler.reconcile(image);
        reconcile(&image_with(5, Some([1; 16])));
        reconcile(&image_with(7, Some([2; 16])));
        let mut builder = BatchBuilder::new(Compression::None);
        builder.push(1_700_000_000_000, None, Some(b"acknowledged"), &[]);
        let batch = builder.build().unwrap().into_bytes();
        let hosted = replicas.get("t", 0).unwrap();
        hosted.append_as_leader(&batch, Acks::All, AppendOrigin::Client).unwrap();

        reconcile(&image_with(6, None));
        let hosted = replicas.get("t", 0).expect("still hosted");
        assert_eq!(hosted.topic_id(), [2; 16]);
        let records =
            hosted.read(0, 1 << 20, FirstBatch::Whole, crate::partition::Isolation::ReadUncommitted).unwrap().records;
        let mut values = Vec::new();
        crate::log::records::for_each_record(records, 0, usize::MAX, |r| values.push(r.value));
        assert_eq!(values, vec![Some(bytes::Bytes::from_static(b"acknowledged"))]);
        // The first incarnation's directory was renamed away, then removed in the background.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let names = || -> Vec<String> {
            std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        };
        while names().iter().any(|n| n.ends_with("-delete")) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(
            names().contains(&"t-0".to_string()) && !names().iter().any(|n| n.ends_with("-delete")),
            "{:?}",
            names()
        );
    }

    /// Applies `records` to `image`, one raft index each.
    fn applied(image: &MetadataImage, records: Vec<MetadataRecord>) -> MetadataImage {
        let mut image = image.clone();
        for record in records {
            image.applied_index += 1;
            image.apply(&record);
        }
        image
    }

    fn create(name: &str, id: u8, partitions: Vec<Vec<u64>>) -> MetadataRecord {
        MetadataRecord::CreateTopic {
            name: name.into(),
            topic_id: [id; 16],
            partitions,
            configs: BTreeMap::new(),
            max_broker_partitions: None,
        }
    }

    fn brokers(ids: &[u64]) -> Vec<MetadataRecord> {
        ids.iter()
            .map(|&node_id| MetadataRecord::RegisterBroker {
                node_id,
                host: "h".into(),
                port: 1,
                rack: None,
                listeners: vec![],
            })
            .collect()
    }

    /// What a reconciled node hosts, as the handlers and fetchers see it.
    fn hosted(replicas: &ReplicaManager) -> BTreeMap<(String, u32), String> {
        replicas
            .all()
            .iter()
            .map(|p| ((p.topic().to_string(), p.index()), format!("{:?} {:?}", p.topic_id(), p.leader_and_isr())))
            .collect()
    }

    #[test]
    fn a_change_to_one_topic_ensures_only_its_partitions() {
        // Proves reconcile works by difference: after the first (full) reconcile, a leadership
        // change of one topic ensures that topic's partitions on this node and no other, an
        // unrelated image change ensures nothing, and a liveness change ensures exactly the
        // partitions that have the broker among their replicas.
        let dir = tempfile::tempdir().unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, dir.path(), Arc::new(SystemClock)));
        let reconciler = Reconciler::new(replicas.clone(), 1, LogConfig::default());
        let mut image = applied(&MetadataImage::default(), brokers(&[1, 2, 3]));
        let epoch = |image: &MetadataImage, b: u64| image.brokers[&b].broker_epoch;
        let unfence: Vec<_> = [1, 2, 3]
            .iter()
            .map(|&node_id| MetadataRecord::UnfenceBroker { node_id, broker_epoch: epoch(&image, node_id) })
            .collect();
        image = applied(&image, unfence);
        image = applied(
            &image,
            vec![
                create("a", 1, vec![vec![1, 2], vec![2, 1], vec![3, 2]]),
                create("b", 2, vec![vec![1, 3], vec![3, 1]]),
                create("c", 3, vec![vec![1]]),
            ],
        );
        let first = reconciler.reconcile(&image);
        assert_eq!(first.ensured.len(), 5, "{first:?}");

        let change = MetadataRecord::PartitionChange {
            topic: "a".into(),
            partition: 1,
            expected_partition_epoch: 0,
            leader: Some(1),
            isr: vec![1, 2],
            assignment: None,
        };
        image = applied(&image, vec![change]);
        let mut ensured = reconciler.reconcile(&image).ensured;
        ensured.sort();
        assert_eq!(ensured, vec![("a".to_string(), 0), ("a".to_string(), 1)]);
        assert!(replicas.get("a", 1).unwrap().is_leader());

        image = applied(&image, vec![MetadataRecord::DeleteTransform { name: "none".into() }]);
        assert_eq!(reconciler.reconcile(&image), Reconciled::default());

        let fence = MetadataRecord::FenceBroker { node_id: 3, broker_epoch: epoch(&image, 3) };
        image = applied(&image, vec![fence]);
        let mut ensured = reconciler.reconcile(&image).ensured;
        ensured.sort();
        // a changed (3 led a-2, hosted elsewhere: a topic is the unit of change) and b has 3
        // among the replicas of both its partitions; c is untouched.
        let expected = [("a", 0), ("a", 1), ("b", 0), ("b", 1)].map(|(t, p)| (t.to_string(), p));
        assert_eq!(ensured, expected.to_vec());
        assert_eq!(replicas.get("b", 0).unwrap().leader_and_isr().fenced, vec![3]);
        assert_eq!(hosted(&replicas).len(), 5);
    }

    #[test]
    fn reconciling_by_difference_ends_where_a_full_reconcile_does() {
        // Proves that over a sequence of images (creations, deletions, a recreation under a new
        // id, leadership and ISR changes, fencing and unfencing, added partitions, a partition
        // moved off this node and back) a node reconciling each image by difference hosts
        // exactly what a node reconciling each image from scratch hosts, roles included.
        let (diff_dir, full_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let by_difference = Arc::new(ReplicaManager::new(1, diff_dir.path(), Arc::new(SystemClock)));
        let from_scratch = Arc::new(ReplicaManager::new(1, full_dir.path(), Arc::new(SystemClock)));
        let reconciler = Reconciler::new(by_difference.clone(), 1, LogConfig::default());
        let mut image = applied(&MetadataImage::default(), brokers(&[1, 2]));
        fn epoch(image: &MetadataImage, b: u64) -> i64 {
            image.brokers[&b].broker_epoch
        }
        fn unfence(image: &MetadataImage, b: u64) -> MetadataRecord {
            MetadataRecord::UnfenceBroker { node_id: b, broker_epoch: epoch(image, b) }
        }
        fn fence(image: &MetadataImage, b: u64) -> MetadataRecord {
            MetadataRecord::FenceBroker { node_id: b, broker_epoch: epoch(image, b) }
        }
        fn change(
            image: &MetadataImage,
            topic: &str,
            partition: u32,
            leader: Option<u64>,
            isr: Vec<u64>,
            assignment: Option<crate::controller::ReplicaAssignment>,
        ) -> MetadataRecord {
            MetadataRecord::PartitionChange {
                topic: topic.into(),
                partition,
                expected_partition_epoch: image.partition(topic, partition).unwrap().partition_epoch,
                leader,
                isr,
                assignment,
            }
        }
        fn moved(replicas: Vec<u64>) -> Option<crate::controller::ReplicaAssignment> {
            Some(crate::controller::ReplicaAssignment { replicas, adding_replicas: vec![], removing_replicas: vec![] })
        }
        type Step = Box<dyn Fn(&MetadataImage) -> Vec<MetadataRecord>>;
        let steps: Vec<Step> = vec![
            Box::new(|i| vec![unfence(i, 1), unfence(i, 2)]),
            Box::new(|_| vec![create("a", 1, vec![vec![1, 2], vec![2, 1]]), create("b", 2, vec![vec![2, 1]])]),
            Box::new(|i| vec![change(i, "a", 0, Some(2), vec![2], None)]),
            Box::new(|i| vec![fence(i, 2)]),
            Box::new(|_| {
                vec![MetadataRecord::CreatePartitions {
                    topic: "a".into(),
                    new_partitions: vec![vec![1]],
                    max_broker_partitions: None,
                }]
            }),
            Box::new(|_| vec![MetadataRecord::DeleteTopic { name: "b".into() }, create("c", 3, vec![vec![2]])]),
            Box::new(|i| vec![unfence(i, 2)]),
            Box::new(|i| vec![change(i, "a", 2, Some(2), vec![2], moved(vec![2]))]),
            Box::new(|_| vec![MetadataRecord::DeleteTopic { name: "a".into() }, create("a", 4, vec![vec![1]])]),
            Box::new(|i| vec![change(i, "c", 0, Some(2), vec![2], moved(vec![2, 1]))]),
            Box::new(|_| {
                let configs = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
                vec![MetadataRecord::SetTopicConfigs { topic: "a".into(), configs }]
            }),
            Box::new(|i| vec![fence(i, 1)]),
            Box::new(|i| vec![unfence(i, 1)]),
        ];
        for (n, step) in steps.iter().enumerate() {
            image = applied(&image, step(&image));
            reconciler.reconcile(&image);
            Reconciler::new(from_scratch.clone(), 1, LogConfig::default()).reconcile(&image);
            assert_eq!(hosted(&by_difference), hosted(&from_scratch), "after step {n}");
            for p in by_difference.all() {
                let config = by_difference.get(p.topic(), p.index()).unwrap().config().unwrap();
                assert_eq!(config, from_scratch.get(p.topic(), p.index()).unwrap().config().unwrap());
            }
        }
        assert_eq!(hosted(&by_difference).len(), 2, "a-0 of the new a, c-0 moved back");
    }
}
