#!/usr/bin/env bash
# The whole test suite (README: "Run the tests"). Installs what it needs, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets --locked
