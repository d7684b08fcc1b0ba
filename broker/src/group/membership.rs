//! Group membership and rebalances (classic protocol). Placeholder until the group issue lands.

/// The membership state of every group this node coordinates.
pub struct Membership {}

impl Membership {
    pub fn new() -> Membership {
        Membership {}
    }
}

impl Default for Membership {
    fn default() -> Self {
        Membership::new()
    }
}
