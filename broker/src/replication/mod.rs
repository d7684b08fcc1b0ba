//! Replication between the replicas of a partition, Kafka's ISR model (`../shared/DESIGN.md` §4).
//!
//! Two pure cores: `leader` (follower progress, high watermark, ISR shrink/expand proposals,
//! acks=all completion) and `truncation` (where a follower cuts a divergent log). The
//! controller's side (leader election, fencing, AlterPartition checks) is
//! `controller::election`. `tests/replication_model.rs` drives all three through seeded
//! schedules of produce, fetch, crash, pause and election and checks that no acknowledged record
//! is lost. Around them the runtime: `fetcher` (one follower fetch session per leader over the
//! Kafka Fetch API) and `isr` (AlterPartition proposals, the ISR expiration loop); the partition
//! layer holds a `LeaderState` while it leads and waits on it for acks=all.
//!
//! Invariant: `leader` and `truncation` do no I/O, read no clock and take no lock (time comes in
//! as `now_ms`); only `fetcher` and `isr` talk to other nodes.

pub mod fetcher;
pub mod isr;
pub mod leader;
pub mod truncation;
