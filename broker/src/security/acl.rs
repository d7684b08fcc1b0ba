//! Kafka's ACLs and its standard authorizer's rules (KIP-11, KIP-290 prefixed patterns, the
//! `StandardAuthorizer` of KRaft): a binding is a resource pattern (type, name, literal or
//! prefixed) and an entry (principal, host, operation, allow or deny). A request is allowed
//! when its principal is a super user; else denied by any matching DENY; else allowed by a
//! matching ALLOW (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
//! DESCRIBE_CONFIGS; ALL implies everything); else, when no ACL at all matches the resource,
//! allowed only with `allow.everyone.if.no.acl.found`.
//!
//! Besides Kafka's resource types, Runnel has its own for what only it runs: `Transform`,
//! `Assignor` and `Validator` (uploading code is the most powerful thing a client can do, so it
//! needs its own permission). Their codes (100-102) are outside Kafka's range, which Kafka
//! clients show as UNKNOWN.

use std::collections::BTreeSet;
use std::fmt;

use super::Principal;

/// The name of the one cluster resource (Kafka's `Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

macro_rules! coded_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:expr, $text:expr;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant),*];

            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            /// Kafka's name (as `kafka-acls.sh` prints it).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            pub fn parse(text: &str) -> Option<$name> {
                let wanted: String = text.chars().filter(|c| *c != '_' && *c != '-').collect();
                $name::ALL_VALUES.iter().copied().find(|v| {
                    let name: String = v.name().chars().filter(|c| *c != '_').collect();
                    name.eq_ignore_ascii_case(&wanted)
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

coded_enum!(
    /// What an ACL protects.
    ResourceType {
        Topic = 2, "Topic";
        Group = 3, "Group";
        Cluster = 4, "Cluster";
        TransactionalId = 5, "TransactionalId";
        DelegationToken = 6, "DelegationToken";
        User = 7, "User";
        Transform = 100, "Transform";
        Assignor = 101, "Assignor";
        Validator = 102, "Validator";
    }
);

coded_enum!(
    /// How an ACL's resource name matches.
    PatternType {
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

coded_enum!(
    /// Kafka's operations.
    Operation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
);

coded_enum!(
    Permission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// Filter codes shared by every enum: ANY (1); for patterns also MATCH (2).
pub const ANY: i8 = 1;
pub const MATCH: i8 = 2;

impl Operation {
    /// Whether an ALLOW of `self` allows `wanted` (Kafka's implied operations).
    fn implies(self, wanted: Operation) -> bool {
        self == Operation::All
            || self == wanted
            || (wanted == Operation::Describe
                && matches!(self, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
            || (wanted == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }
}

/// One ACL: a resource pattern and an access control entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern: PatternType,
    /// `User:<name>`, or `User:*` for everyone.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Kafka's checks on a new ACL (CreateAcls answers INVALID_REQUEST with the message).
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_name.is_empty() {
            return Err("Resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Err(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Err(format!("Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)", self.principal)),
        }
        if self.host.is_empty() {
            return Err("Host must not be empty (use * for every host)".into());
        }
        Ok(())
    }

    /// Whether this binding's pattern covers resource `name` of its type.
    fn covers(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.resource_name == name || self.resource_name == "*",
            PatternType::Prefixed => name.starts_with(&self.resource_name),
        }
    }

    fn applies_to(&self, principal: &Principal, host: &str) -> bool {
        (self.principal == "User:*" || principal.is(&self.principal)) && (self.host == host || self.host == "*")
    }
}

/// A DescribeAcls/DeleteAcls filter; `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    /// `Err(ANY)` or `Err(MATCH)` for the filter-only pattern codes.
    pub pattern: Result<PatternType, i8>,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let name_ok = match (&self.pattern, &self.resource_name) {
            (_, None) => true,
            (Ok(pattern), Some(name)) => acl.pattern == *pattern && acl.resource_name == *name,
            (Err(MATCH), Some(name)) => acl.covers(name),
            (Err(_), Some(name)) => acl.resource_name == *name,
        };
        let pattern_ok = match &self.pattern {
            Ok(pattern) => acl.pattern == *pattern,
            Err(_) => true,
        };
        self.resource_type.is_none_or(|t| t == acl.resource_type)
            && name_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }
}

/// Up to this many ACLs a check scans them all; above, it looks the resource up by name.
const SCAN_ACLS_MAX: usize = 32;

/// The ACLs of `kind` whose pattern covers resource `name`. A large set is not scanned: it is
/// ordered by type and then name, so the candidates are found by name, as Kafka's authorizer
/// finds them: `name` itself (either pattern), each shorter prefix of it (prefixed patterns)
/// and `*` (literal). One probe key is cut shorter prefix by prefix (no string per prefix: a
/// client's resource name may be megabytes long), so that is O(len(name) · log #ACLs) string
/// comparisons, each bounded by the ACL's name, plus the matches.
fn covering<'a>(
    acls: &'a BTreeSet<AclBinding>,
    kind: ResourceType,
    name: &'a str,
) -> Box<dyn Iterator<Item = &'a AclBinding> + 'a> {
    if acls.len() <= SCAN_ACLS_MAX {
        return Box::new(acls.iter().filter(move |a| a.resource_type == kind && a.covers(name)));
    }
    let mut probe = AclBinding {
        resource_type: kind,
        resource_name: name.to_string(),
        // The smallest of every remaining field: the range starts at the name's first ACL.
        pattern: PatternType::Literal,
        principal: String::new(),
        host: String::new(),
        operation: Operation::All,
        permission: Permission::Deny,
    };
    let mut found = Vec::new();
    let mut take = |probe: &AclBinding, pattern: Option<PatternType>| {
        let named = acls
            .range(probe..)
            .take_while(|a| a.resource_type == kind && a.resource_name == probe.resource_name)
            .filter(|a| pattern.is_none_or(|p| a.pattern == p));
        found.extend(named);
    };
    take(&probe, None);
    for (end, _) in name.char_indices().rev().filter(|(end, _)| *end > 0) {
        probe.resource_name.truncate(end);
        take(&probe, Some(PatternType::Prefixed));
    }
    if name != "*" {
        probe.resource_name.clear();
        probe.resource_name.push('*');
        take(&probe, Some(PatternType::Literal));
    }
    Box::new(found.into_iter())
}

/// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// Whether requests are authorized at all (Kafka: an authorizer class is configured).
    pub enabled: bool,
    /// `User:<name>` principals allowed everything.
    pub super_users: BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerSettings {
    /// Parses Kafka's `super.users` (`User:a;User:b`).
    pub fn parse_super_users(text: &str) -> BTreeSet<String> {
        text.split(';').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    }

    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.super_users.iter().any(|s| principal.is(s))
    }

    /// The decision for `principal` at `host` doing `operation` on resource `name` of `kind`,
    /// given the cluster's `acls`.
    pub fn authorize(
        &self,
        acls: &BTreeSet<AclBinding>,
        principal: &Principal,
        host: &str,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if !self.enabled {
            return true;
        }
        if self.is_super_user(principal) {
            return true;
        }
        let mut any_matching = false;
        let mut allowed = false;
        for acl in covering(acls, kind, name) {
            any_matching = true;
            if !acl.applies_to(principal, host) {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation == operation || acl.operation == Operation::All => return false,
                Permission::Allow if acl.operation.implies(operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_matching && self.allow_everyone_if_no_acl_found)
    }

    /// Whether `principal` may do `operation` on some resource of `kind` (Kafka's
    /// `authorizeByResourceType`, used for idempotent producers: WRITE on any topic): an ALLOW
    /// for it that no DENY of every resource (`*` or prefix "") cancels.
    pub fn authorize_any(
        &self,
        acls: &BTreeSet<AclBinding>,
        principal: &Principal,
        host: &str,
        operation: Operation,
        kind: ResourceType,
    ) -> bool {
        if !self.enabled {
            return true;
        }
        if self.is_super_user(principal) {
            return true;
        }
        let of_kind: Vec<&AclBinding> =
            acls.iter().filter(|a| a.resource_type == kind && a.applies_to(principal, host)).collect();
        let denied_everywhere = of_kind.iter().any(|a| {
            a.permission == Permission::Deny
                && (a.operation == operation || a.operation == Operation::All)
                && ((a.pattern == PatternType::Literal && a.resource_name == "*")
                    || (a.pattern == PatternType::Prefixed && a.resource_name.is_empty()))
        });
        if denied_everywhere {
            return false;
        }
        of_kind.iter().any(|a| a.permission == Permission::Allow && a.operation.implies(operation))
            || (self.allow_everyone_if_no_acl_found && !acls.iter().any(|a| a.resource_type == kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: kind,
            resource_name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission,
        }
    }

    fn enabled() -> AuthorizerSettings {
        AuthorizerSettings { enabled: true, ..AuthorizerSettings::default() }
    }

    #[test]
    fn allow_deny_prefixes_wildcards_and_implied_operations_follow_kafka() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let acls: BTreeSet<AclBinding> = [
            acl(Topic, "orders-", Prefixed, "User:alice", Read, Allow),
            acl(Topic, "orders-secret", Literal, "User:alice", All, Deny),
            acl(Topic, "*", Literal, "User:*", Describe, Allow),
            acl(Group, "g", Literal, "User:alice", Read, Allow),
            acl(Cluster, CLUSTER_NAME, Literal, "User:ops", AlterConfigs, Allow),
        ]
        .into();
        let settings = enabled();
        let alice = Principal::user("alice");
        let bob = Principal::user("bob");
        let can = |p: &Principal, op, kind, name: &str| settings.authorize(&acls, p, "127.0.0.1", op, kind, name);
        assert!(can(&alice, Read, Topic, "orders-eu"));
        assert!(can(&alice, Describe, Topic, "orders-eu"), "READ implies DESCRIBE");
        assert!(!can(&alice, Write, Topic, "orders-eu"));
        assert!(!can(&alice, Read, Topic, "orders-secret"), "DENY wins");
        assert!(!can(&alice, Describe, Topic, "orders-secret"), "DENY ALL denies DESCRIBE too");
        assert!(can(&bob, Describe, Topic, "anything"), "User:* and the * resource");
        assert!(!can(&bob, Read, Topic, "orders-eu"));
        assert!(can(&alice, Read, Group, "g"));
        assert!(!can(&alice, Read, Group, "h"), "no ACL and allow.everyone.if.no.acl.found is false");
        assert!(
            can(&Principal::user("ops"), DescribeConfigs, Cluster, CLUSTER_NAME),
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
        );

        let open = AuthorizerSettings { allow_everyone_if_no_acl_found: true, ..enabled() };
        assert!(open.authorize(&acls, &bob, "h", Read, Group, "h"), "no ACL on the resource: everyone");
        assert!(!open.authorize(&acls, &bob, "h", Read, Group, "g"), "an ACL exists for the resource");
        let supers =
            AuthorizerSettings { super_users: AuthorizerSettings::parse_super_users("User:bob; User:x"), ..enabled() };
        assert!(supers.authorize(&acls, &bob, "h", Delete, Topic, "orders-secret"));
        assert!(AuthorizerSettings::default().authorize(&acls, &bob, "h", Delete, Topic, "t"), "disabled: everything");

        assert!(settings.authorize_any(&acls, &alice, "h", Read, Topic));
        assert!(!settings.authorize_any(&acls, &alice, "h", Write, Topic));
    }

    #[test]
    fn a_large_acl_set_is_looked_up_by_name_with_the_same_decisions_as_a_scan() {
        // Seeded random ACL sets over a small alphabet (so literals, prefixes and `*` collide),
        // each decision of the indexed lookup checked against the scan of every ACL.
        use Operation::*;
        let names = ["a", "ab", "abc", "abd", "b", "ba", "*", "*a", "é", "éa", "x-1", "x-12"];
        let principals = ["User:alice", "User:bob", "User:*"];
        let operations = [All, Read, Write, Describe];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for round in 0..50 {
            let mut acls = BTreeSet::new();
            while acls.len() < SCAN_ACLS_MAX + 1 + next(100) {
                acls.insert(AclBinding {
                    resource_type: [ResourceType::Topic, ResourceType::Group][next(2)],
                    resource_name: names[next(names.len())].to_string(),
                    pattern: [PatternType::Literal, PatternType::Prefixed][next(2)],
                    principal: principals[next(principals.len())].to_string(),
                    host: ["*", "10.0.0.1"][next(2)].to_string(),
                    operation: operations[next(operations.len())],
                    permission: [Permission::Allow, Permission::Deny][next(2)],
                });
            }
            // A long name (a client may send megabytes) is looked up prefix by prefix too.
            let long = format!("abc{}", "é".repeat(2_500));
            for kind in [ResourceType::Topic, ResourceType::Group] {
                for name in names.iter().chain(&["abcd", "c", "**", "éab", long.as_str()]) {
                    let mut found: Vec<&AclBinding> = covering(&acls, kind, name).collect();
                    let mut scanned: Vec<&AclBinding> =
                        acls.iter().filter(|a| a.resource_type == kind && a.covers(name)).collect();
                    found.sort();
                    scanned.sort();
                    assert_eq!(found, scanned, "round {round}: {kind:?} {name:?}");
                }
            }
        }
    }

    #[test]
    fn filters_match_like_kafkas_acl_binding_filter_and_bad_acls_are_refused() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let prefixed = acl(Topic, "orders-", Prefixed, "User:alice", Read, Allow);
        let literal = acl(Topic, "orders-eu", Literal, "User:alice", Write, Allow);
        let any = AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: Err(ANY),
            principal: None,
            host: None,
            operation: None,
            permission: None,
        };
        assert!(any.matches(&prefixed) && any.matches(&literal));
        let matching = AclFilter { resource_name: Some("orders-eu".into()), pattern: Err(MATCH), ..any.clone() };
        assert!(matching.matches(&prefixed) && matching.matches(&literal));
        let exact = AclFilter { resource_name: Some("orders-eu".into()), pattern: Ok(Literal), ..any.clone() };
        assert!(!exact.matches(&prefixed) && exact.matches(&literal));
        let by_op = AclFilter { operation: Some(Read), ..any };
        assert!(by_op.matches(&prefixed) && !by_op.matches(&literal));

        assert!(acl(Cluster, "other", Literal, "User:a", Alter, Allow).validate().is_err());
        assert!(acl(Topic, "t", Literal, "alice", Read, Allow).validate().is_err());
        assert!(acl(Topic, "", Literal, "User:a", Read, Allow).validate().is_err());
        assert!(literal.validate().is_ok());
        assert_eq!(Operation::parse("describe-configs"), Some(DescribeConfigs));
        assert_eq!(ResourceType::parse("transactional_id"), Some(TransactionalId));
        assert_eq!(ResourceType::from_code(100), Some(Transform));
    }
}
