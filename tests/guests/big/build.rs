//! Writes `blob.bin` into OUT_DIR: 2 MiB of xorshift64 output from a fixed seed, so the guest
//! is the same bytes on every build and the blob does not compress.

use std::path::PathBuf;

const BLOB_BYTES: usize = 2 * 1024 * 1024;

fn main() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut blob = Vec::with_capacity(BLOB_BYTES);
    while blob.len() < BLOB_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        blob.extend_from_slice(&state.to_le_bytes());
    }
    blob.truncate(BLOB_BYTES);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("blob.bin");
    std::fs::write(&out, &blob).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
    println!("cargo::rerun-if-changed=build.rs");
}
