//! The storage engine for one partition, in Kafka's on-disk format.
//!
//! Owns: RecordBatch v2 views and codecs (`batch`, `records`), segment files and their sparse
//! indexes (`segment`, `index`), the partition log with recovery, retention and flushing
//! (`log`), key-based compaction (`compaction`), crash-safe file replacement (`durable`), and the
//! node's bounded cache of open segment files (`files`).
//! Invariant: `log/` is the only module that writes or fsyncs partition files. It knows nothing
//! of the network, replication or high watermarks beyond the upper bound a reader passes in.

pub mod batch;
pub mod compaction;
pub mod config;
pub mod durable;
pub mod files;
pub mod index;
#[allow(clippy::module_inception)]
mod log;
pub mod producer_state;
pub mod records;
pub mod segment;
pub mod txn_index;

pub use self::batch::{BatchError, BatchHeader, Compression, RecordBatch, TimestampType};
pub use self::config::{CleanupPolicy, ConfigError, DirtyRatio, LogConfig};
pub use self::files::{OpenFiles, OpenFilesStats};
pub use self::log::now_ms;
pub use self::log::{
    AppendInfo, AppendOrigin, Clock, Log, LogContext, LogError, ManualClock, OpenReport, RecordError, RetentionOutcome,
    SystemClock, TxnVerification, CHECKPOINT_FILE,
};
