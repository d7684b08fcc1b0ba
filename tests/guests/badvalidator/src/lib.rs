//! Hostile test validator: misbehaves on a batch that holds a record whose value is a command.
//! `trap` executes `unreachable`, `spin` loops past its deadline, `membomb` allocates until the
//! memory cap, `reject` refuses the batch naming that record; other records pass. With the
//! parameter `fail_init` = `true` its `init` fails instead.

use runnel_sdk::{log, Config, Error, Record, Validator};

pub struct BadValidator;

impl Validator for BadValidator {
    fn init(config: &Config) -> Result<Self, Error> {
        if config.parse_or("fail_init", false)? {
            return Err(Error::new("init refused by request"));
        }
        Ok(BadValidator)
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

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap");
}

runnel_sdk::export_validator!(BadValidator);
