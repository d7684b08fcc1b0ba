//! Replication between the replicas of a partition, Kafka's ISR model (`../shared/DESIGN.md` §4).
//!
//! Today this holds the pure cores, not yet wired into the node: `leader` (follower progress,
//! high watermark, ISR shrink/expand proposals, acks=all completion) and `truncation` (where a
//! follower cuts its log after OffsetForLeaderEpoch). The controller's side (leader election,
//! fencing, AlterPartition checks) is `controller::election`. `tests/replication_model.rs` drives
//! all three through seeded schedules of produce, fetch, crash, pause and election and checks
//! that no acknowledged record is lost. The runtime around them (follower fetcher sessions over
//! the Kafka Fetch API, a delayed-produce purgatory) is the next step of the replication issue.
//!
//! Invariant: nothing here does I/O, reads a clock or takes a lock; time comes in as `now_ms`.

pub mod leader;
pub mod truncation;
