//! Password checks against the SCRAM user store, shared by SASL/PLAIN (Kafka listeners) and
//! HTTP Basic. A check derives the salted password (PBKDF2, thousands of HMACs: milliseconds
//! of CPU), so a verified password is remembered until the user's credential changes: a
//! client that reconnects, or a script that sends Basic credentials with every request, pays
//! for PBKDF2 once, not per connection or request.
//!
//! What is remembered is a keyed hash of the password (HMAC-SHA-256 under a key drawn when
//! the node starts, never stored), with the stored key of the credential it verified against:
//! a changed or deleted credential no longer matches, and a memory dump holds nothing a
//! dictionary could be run against faster than against the credentials themselves.

use std::collections::HashMap;
use std::sync::Mutex;

use ring::hmac;

use super::constant_time_eq;
use super::scram::{random_bytes, ScramCredential, ScramMechanism};

/// Verified passwords remembered at most (the map is emptied when it is full).
const REMEMBERED_MAX: usize = 4096;

/// The node's verified passwords.
pub struct PasswordChecks {
    key: hmac::Key,
    /// (user, keyed hash of a password) → the stored key of the credential it verified against.
    verified: Mutex<HashMap<(String, [u8; 32]), Vec<u8>>>,
}

impl Default for PasswordChecks {
    fn default() -> Self {
        PasswordChecks::new()
    }
}

impl PasswordChecks {
    pub fn new() -> PasswordChecks {
        PasswordChecks { key: hmac::Key::new(hmac::HMAC_SHA256, &random_bytes(32)), verified: Mutex::default() }
    }

    /// The map key of `user`'s `password`.
    fn key(&self, user: &str, password: &str) -> (String, [u8; 32]) {
        let tag = hmac::sign(&self.key, password.as_bytes());
        (user.to_string(), tag.as_ref().try_into().expect("HMAC-SHA-256 is 32 bytes"))
    }

    /// Whether `password` was verified against one of `credentials` (the user's current ones).
    pub fn remembered(&self, user: &str, password: &str, credentials: &[ScramCredential]) -> bool {
        self.remembered_at(&self.key(user, password), credentials)
    }

    fn remembered_at(&self, key: &(String, [u8; 32]), credentials: &[ScramCredential]) -> bool {
        self.lock().get(key).is_some_and(|stored| credentials.iter().any(|c| constant_time_eq(stored, &c.stored_key)))
    }

    /// Checks `password` against `credentials` (blocking: PBKDF2 unless remembered) and
    /// remembers a match. A refusal runs as many checks for an unknown user as for one with
    /// every mechanism's credential, so its time does not tell which users exist.
    pub fn verify(&self, user: &str, password: &str, credentials: &[ScramCredential]) -> bool {
        let key = self.key(user, password);
        if self.remembered_at(&key, credentials) {
            return true;
        }
        let Some(matched) = credentials.iter().find(|c| c.matches_password(password)) else {
            // A refusal costs as many checks whatever the user has (one credential per SCRAM
            // mechanism at most), so its timing does not tell whether the user exists.
            for _ in credentials.len()..ScramMechanism::ALL.len() {
                ScramCredential::decoy_check(password);
            }
            return false;
        };
        let mut verified = self.lock();
        if verified.len() >= REMEMBERED_MAX {
            verified.clear();
        }
        verified.insert(key, matched.stored_key.clone());
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, [u8; 32]), Vec<u8>>> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::MIN_ITERATIONS;

    #[test]
    fn a_verified_password_is_remembered_only_while_its_credential_stays() {
        let checks = PasswordChecks::new();
        let old = ScramCredential::from_password(ScramMechanism::Sha256, "s3cret", b"salt".to_vec(), MIN_ITERATIONS);
        assert!(!checks.remembered("alice", "s3cret", std::slice::from_ref(&old)));
        assert!(!checks.verify("alice", "wrong", std::slice::from_ref(&old)));
        assert!(!checks.remembered("alice", "wrong", std::slice::from_ref(&old)), "a refusal is not remembered");
        assert!(checks.verify("alice", "s3cret", std::slice::from_ref(&old)));
        assert!(checks.remembered("alice", "s3cret", std::slice::from_ref(&old)));
        assert!(!checks.remembered("bob", "s3cret", std::slice::from_ref(&old)), "per user");
        // The password changed: the remembered check no longer counts, and the old password fails.
        let new = ScramCredential::from_password(ScramMechanism::Sha256, "n3w", b"pepper".to_vec(), MIN_ITERATIONS);
        assert!(!checks.remembered("alice", "s3cret", std::slice::from_ref(&new)));
        assert!(!checks.verify("alice", "s3cret", std::slice::from_ref(&new)));
        assert!(!checks.verify("alice", "s3cret", &[]), "a deleted user");
    }
}
