//! Hostile test validator: misbehaves on a batch that holds a record whose value is a command.
//! `trap` executes `unreachable`, `spin` loops past its deadline, `membomb` allocates until the
//! memory cap, `reject` refuses the batch naming that record, `alias` refuses it with 20 record
//! errors whose messages are one 4 MiB string (the host's lifting would copy it 20 times); other
//! records pass. With the parameter `fail_init` = `true` its `init` fails instead.

use runnel_sdk::validate::RecordError;
use runnel_sdk::{log, Batch, Config, Error, Record, Rejection, Validator};

pub struct BadValidator;

impl Validator for BadValidator {
    fn init(config: &Config) -> Result<Self, Error> {
        if config.parse_or("fail_init", false)? {
            return Err(Error::new("init refused by request"));
        }
        Ok(BadValidator)
    }

    /// The SDK's default (every record through `validate`, each fault named), except for an
    /// `alias` record.
    fn validate_batch(&mut self, batch: &Batch<'_>) -> Result<(), Rejection> {
        if batch.records().any(|r| r.value() == Some(&b"alias"[..])) {
            return Err(aliased_rejection());
        }
        runnel_sdk::validate::each_record(self, batch)
    }

    fn validate(&mut self, record: &Record<'_>) -> Result<(), Error> {
        match record.value().unwrap_or_default() {
            b"trap" => trap(),
            b"spin" => {
                let mut counter = 0u64;
                loop {
                    counter = core::hint::black_box(counter).wrapping_add(1);
                }
            }
            b"membomb" => {
                let mut hoard = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 1 << 20];
                    for page in chunk.chunks_mut(4096) {
                        page[0] = core::hint::black_box(1);
                    }
                    hoard.push(core::hint::black_box(chunk));
                }
            }
            b"reject" => {
                log::warn("rejecting a record");
                Err(Error::new("rejected by request"))
            }
            _ => Ok(()),
        }
    }
}

/// 20 record errors whose messages all name one 4 MiB buffer. The strings alias (never dropped
/// here: they go straight to the canonical ABI, which hands the host their pointers).
fn aliased_rejection() -> Rejection {
    let shared: &'static mut str = Box::leak("x".repeat(4 << 20).into_boxed_str());
    let (ptr, len) = (shared.as_mut_ptr(), shared.len());
    let records = (0..20)
        .map(|_| RecordError {
            index: 0,
            // SAFETY: not sound as Rust (20 owners of one buffer); this guest exists to hand the
            // host exactly that. Nothing in the guest reads or frees them before the host does.
            message: unsafe { String::from_raw_parts(ptr, len, len) },
        })
        .collect();
    Rejection { message: "aliased record errors".to_string(), records }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap");
}

runnel_sdk::export_validator!(BadValidator);
