//! PII redaction transform: replaces email addresses, payment card numbers (Luhn-checked) and
//! phone numbers inside the string values of JSON records with `[EMAIL]`, `[CARD]`, `[PHONE]`.
//!
//! Keys, numbers and structure pass through byte for byte, and a string nested anywhere (or a
//! JSON document escaped inside a string) is scanned too. A value that is not JSON is scanned
//! as plain text. The scanner is hand-written (no regex engine in the component) and makes one
//! pass over the value; records with nothing to redact are forwarded without copying.
//!
//! Parameters: `kinds` = comma-separated subset of `email,card,phone` (default: all three).

use runnel_sdk::{Config, Error, Output, Record, Transform};

/// Which kinds of PII to redact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub email: bool,
    pub card: bool,
    pub phone: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds { email: true, card: true, phone: true };

    /// Parses `email,card,phone` (any subset, any order).
    pub fn parse(text: &str) -> Result<Kinds, Error> {
        let mut kinds = Kinds { email: false, card: false, phone: false };
        for kind in text.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            match kind {
                "email" => kinds.email = true,
                "card" => kinds.card = true,
                "phone" => kinds.phone = true,
                other => {
                    return Err(Error::new(format_args!(
                        "parameter `kinds`: unknown kind `{other}` (expected email, card, phone)"
                    )))
                }
            }
        }
        Ok(kinds)
    }
}

/// Redacts PII in a JSON (or plain text) value; see the crate docs.
///
/// ```
/// let out = runnel_example_redact::redact_json(br#"{"email":"a.b+c@ex-ample.co.uk","n":1}"#);
/// assert_eq!(out, br#"{"email":"[EMAIL]","n":1}"#);
/// ```
pub fn redact_json(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if redact_into(value, Kinds::ALL, &mut out) {
        out
    } else {
        value.to_vec()
    }
}

/// Redacts `value` into `out` (cleared first) and returns true, or returns false and leaves
/// `out` empty when there is nothing to redact.
pub fn redact_into(value: &[u8], kinds: Kinds, out: &mut Vec<u8>) -> bool {
    out.clear();
    let mut w = Writer { input: value, out, copied: 0 };
    let first = value.iter().position(|b| !b.is_ascii_whitespace());
    match first.map(|i| value[i]) {
        Some(b'{' | b'[' | b'"') => redact_json_strings(&mut w, kinds),
        _ => scan(&mut w, 0, value.len(), kinds, false),
    }
    if w.copied == 0 {
        return false;
    }
    w.out.extend_from_slice(&value[w.copied..]);
    true
}

/// Builds the output lazily: nothing is copied until the first match.
struct Writer<'a, 'o> {
    input: &'a [u8],
    out: &'o mut Vec<u8>,
    /// Input before this index is already in `out` (0 = nothing replaced yet).
    copied: usize,
}

impl Writer<'_, '_> {
    fn replace(&mut self, start: usize, end: usize, token: &[u8]) {
        self.out.extend_from_slice(&self.input[self.copied..start]);
        self.out.extend_from_slice(token);
        self.copied = end;
    }
}

/// Walks JSON structure and scans the contents of string values (not object keys).
fn redact_json_strings(w: &mut Writer<'_, '_>, kinds: Kinds) {
    let input = w.input;
    let mut i = 0;
    while i < input.len() {
        if input[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        while j < input.len() && input[j] != b'"' {
            j += if input[j] == b'\\' { 2 } else { 1 };
        }
        let end = j.min(input.len());
        let next = input[(end + 1).min(input.len())..].iter().find(|b| !b.is_ascii_whitespace());
        if next != Some(&b':') {
            scan(w, start, end, kinds, true);
        }
        i = end + 1;
    }
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn is_local(b: u8) -> bool {
    is_alnum(b) || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-')
}

fn is_domain(b: u8) -> bool {
    is_alnum(b) || matches!(b, b'.' | b'-')
}

/// Scans `input[start..end]` for PII. `json` = the range is the raw content of a JSON string,
/// whose escape sequences (`\n`, `\"`, `\u00e9`) are boundaries and are never cut.
fn scan(w: &mut Writer<'_, '_>, start: usize, end: usize, kinds: Kinds, json: bool) {
    let input = w.input;
    // Index after the last escape sequence: a match may not start before it.
    let mut floor = start;
    let mut i = start;
    while i < end {
        let b = input[i];
        if json && b == b'\\' {
            let len = if input.get(i + 1) == Some(&b'u') { 6 } else { 2 };
            i = (i + len).min(end);
            floor = i;
            continue;
        }
        if b == b'@' && kinds.email {
            if let Some((s, e)) = email_at(input, floor.max(w.copied), i, end) {
                w.replace(s, e, b"[EMAIL]");
                i = e;
                floor = e;
                continue;
            }
        }
        let at_boundary = i == floor || !is_alnum(input[i - 1]) && !matches!(input[i - 1], b'.' | b'_' | b'-' | b'+');
        if at_boundary && (b.is_ascii_digit() || b == b'+' || b == b'(') {
            let run = NumberRun::parse(input, i, end);
            if run.end > i {
                let token: Option<&[u8]> = if kinds.card && run.is_card() {
                    Some(b"[CARD]")
                } else if kinds.phone && run.is_phone() {
                    Some(b"[PHONE]")
                } else {
                    None
                };
                if let Some(token) = token.filter(|_| run.boundary_after(input, end)) {
                    w.replace(i, run.end, token);
                }
                // A number that is not PII is skipped whole: a suffix of it is never PII.
                i = run.end;
                continue;
            }
        }
        i += 1;
    }
}

/// The email around the `@` at `at`: `local@domain.tld`, local part not before `floor`.
fn email_at(input: &[u8], floor: usize, at: usize, end: usize) -> Option<(usize, usize)> {
    let mut s = at;
    while s > floor && is_local(input[s - 1]) {
        s -= 1;
    }
    while s < at && input[s] == b'.' {
        s += 1;
    }
    if s == at {
        return None;
    }
    let mut e = at + 1;
    while e < end && is_domain(input[e]) {
        e += 1;
    }
    // A sentence's full stop or a dash after the address is not part of it.
    while e > at + 1 && matches!(input[e - 1], b'.' | b'-') {
        e -= 1;
    }
    let domain = &input[at + 1..e];
    let mut labels = domain.split(|&b| b == b'.');
    let valid_labels = domain.split(|&b| b == b'.').all(|l| !l.is_empty() && l[0] != b'-' && l[l.len() - 1] != b'-');
    let tld = labels.next_back()?;
    let dotted = domain.contains(&b'.');
    (valid_labels && dotted && tld.len() >= 2 && tld.iter().all(u8::is_ascii_alphabetic)).then_some((s, e))
}

/// A run of digits with single separators (`' '`, `-`, `.`), an optional leading `+` and an
/// optional parenthesised group: the shape of card and phone numbers.
struct NumberRun {
    end: usize,
    digits: [u8; 20],
    digit_count: usize,
    /// Lengths of the digit groups (up to 8; more groups is neither a card nor a phone).
    groups: [u8; 8],
    group_count: usize,
    plus: bool,
    paren: bool,
    dots: bool,
    /// Too many digits or groups for either kind.
    overflow: bool,
}

impl NumberRun {
    fn parse(input: &[u8], start: usize, end: usize) -> NumberRun {
        let mut run = NumberRun {
            end: start,
            digits: [0; 20],
            digit_count: 0,
            groups: [0; 8],
            group_count: 0,
            plus: false,
            paren: false,
            dots: false,
            overflow: false,
        };
        let mut i = start;
        if input[i] == b'+' {
            run.plus = true;
            i += 1;
        }
        loop {
            // One group: digits, or `(digits)` once.
            let open = i < end && input[i] == b'(' && !run.paren;
            if open {
                i += 1;
            }
            let group_start = i;
            while i < end && input[i].is_ascii_digit() {
                if run.digit_count < run.digits.len() {
                    run.digits[run.digit_count] = input[i] - b'0';
                } else {
                    run.overflow = true;
                }
                run.digit_count += 1;
                i += 1;
            }
            let len = i - group_start;
            if len == 0 || (open && (i >= end || input[i] != b')')) {
                break; // `end` stays after the last complete group
            }
            if open {
                i += 1;
                run.paren = true;
            }
            if run.group_count < run.groups.len() {
                run.groups[run.group_count] = len.min(255) as u8;
            } else {
                run.overflow = true;
            }
            run.group_count += 1;
            run.end = i;
            // A single separator, then the next group must follow.
            match input.get(i) {
                Some(b' ' | b'-') if i + 1 < end => i += 1,
                Some(b'.') if i + 1 < end && !open => {
                    run.dots = true;
                    i += 1
                }
                _ => {}
            }
            if i == run.end && !(i < end && input[i] == b'(') {
                break;
            }
        }
        run
    }

    fn groups(&self) -> &[u8] {
        &self.groups[..self.group_count.min(self.groups.len())]
    }

    fn is_card(&self) -> bool {
        !self.plus && !self.paren && !self.dots && !self.overflow && (13..=19).contains(&self.digit_count) && {
            let digits = &self.digits[..self.digit_count];
            luhn(digits)
        }
    }

    fn is_phone(&self) -> bool {
        if self.overflow || !(7..=15).contains(&self.digit_count) {
            return false;
        }
        let groups = self.groups();
        if self.dots {
            // Dotted numbers are mostly IP addresses and versions: only `555.123.4567`.
            return !self.plus && !self.paren && groups == [3, 3, 4];
        }
        if self.plus {
            return self.digit_count >= 8;
        }
        if self.digit_count < 10 {
            return false;
        }
        if self.paren {
            return true;
        }
        // No `+` or parentheses: grouped like a phone number (`555-123-4567`, `020 7946 0958`),
        // which dates and times (`2024-01-15 10`) are not.
        let last = groups.last().copied().unwrap_or(0);
        groups.len() >= 2 && last >= 3 && groups[1..].iter().all(|&g| g >= 2)
    }

    /// Whether the number ends at a word boundary (not `555-123-4567x` or `...@host`).
    fn boundary_after(&self, input: &[u8], end: usize) -> bool {
        match input[self.end..end] {
            [] => true,
            [b, ..] if is_alnum(b) || b == b'@' || b == b'_' => false,
            [b'.' | b'-', next, ..] if is_alnum(next) => false,
            _ => true,
        }
    }
}

/// The Luhn checksum of card numbers.
fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The transform: values with PII are rewritten (same key, headers and timestamp), others
/// forwarded as they are.
pub struct Redact {
    kinds: Kinds,
    /// Reused output buffer: no allocation per record once it has grown.
    buffer: Vec<u8>,
}

impl Transform for Redact {
    fn init(config: &Config) -> Result<Self, Error> {
        let kinds = match config.get("kinds") {
            Some(text) => Kinds::parse(text)?,
            None => Kinds::ALL,
        };
        Ok(Redact { kinds, buffer: Vec::new() })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        match record.value() {
            Some(value) if redact_into(value, self.kinds, &mut self.buffer) => {
                out.record().key(record.key()).value(&self.buffer).headers_from(record).send()
            }
            _ => {
                out.forward(record);
                Ok(())
            }
        }
    }
}

runnel_sdk::export_transform!(Redact);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    fn text(input: &str) -> String {
        String::from_utf8(redact_json(input.as_bytes())).unwrap()
    }

    /// Every JSON string value is checked against the plain-text redaction of its content.
    fn json(input: &str) -> String {
        let out = text(input);
        serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("invalid JSON {out}: {e}"));
        out
    }

    /// Emails of the usual shapes are replaced, surrounding text and punctuation kept.
    #[test]
    fn emails() {
        assert_eq!(text("a.b+c@ex-ample.co.uk"), "[EMAIL]");
        assert_eq!(text("mail john.doe@example.com."), "mail [EMAIL].");
        assert_eq!(text("<x_y%z@sub.domain.io>, then"), "<[EMAIL]>, then");
        assert_eq!(text("two: a@b.cd b@c.de"), "two: [EMAIL] [EMAIL]");
        assert_eq!(text("user@localhost"), "user@localhost");
        assert_eq!(text("@handle and a@ and @b.com"), "@handle and a@ and @b.com");
        assert_eq!(text("x@-bad.com y@bad-.com z@a..com"), "x@-bad.com y@bad-.com z@a..com");
        assert_eq!(text("v1.2@3.4"), "v1.2@3.4");
    }

    /// Card numbers are redacted only when 13–19 digits pass the Luhn check, with any spacing.
    #[test]
    fn cards() {
        assert_eq!(text("4111111111111111"), "[CARD]");
        assert_eq!(text("card 4111 1111 1111 1111 exp"), "card [CARD] exp");
        assert_eq!(text("4111-1111-1111-1111"), "[CARD]");
        assert_eq!(text("amex 3782 822463 10005"), "amex [CARD]");
        assert_eq!(text("5500 0000 0000 0004."), "[CARD].");
        // Luhn fails: left alone (16 digits is too long for a phone number).
        assert_eq!(text("4111 1111 1111 1112"), "4111 1111 1111 1112");
        assert_eq!(text("id 4111111111111111x"), "id 4111111111111111x");
        assert_eq!(text("id x4111111111111111"), "id x4111111111111111");
        assert!(luhn(&[7, 9, 9, 2, 7, 3, 9, 8, 7, 1, 3]));
        assert!(!luhn(&[7, 9, 9, 2, 7, 3, 9, 8, 7, 1, 4]));
    }

    /// International, parenthesised, dashed and dotted phone numbers are redacted.
    #[test]
    fn phones() {
        assert_eq!(text("call +44 20 7946 0958 now"), "call [PHONE] now");
        assert_eq!(text("(555) 123-4567"), "[PHONE]");
        assert_eq!(text("+1 (555) 123-4567"), "[PHONE]");
        assert_eq!(text("555-123-4567."), "[PHONE].");
        assert_eq!(text("555.123.4567"), "[PHONE]");
        assert_eq!(text("020 7946 0958"), "[PHONE]");
        assert_eq!(text("+14155552671"), "[PHONE]");
        assert_eq!(text("tel:1-800-555-1234"), "tel:[PHONE]");
    }

    /// Dates, times, IP addresses, versions and plain ids are not phone numbers.
    #[test]
    fn not_phones() {
        for s in [
            "2024-01-15",
            "2024-01-15 10:30",
            "192.168.100.200",
            "version 1.2.3",
            "order 12345",
            "5551234567",
            "555-123-4567-abc",
            "abc555-123-4567",
            "ref 12.50 EUR",
        ] {
            assert_eq!(text(s), s);
        }
    }

    /// Only string values are scanned, at any depth; keys, numbers and structure are unchanged.
    #[test]
    fn nested_json() {
        let input = r#"{"user": {"contact": {"email": "x@y.io", "phones": ["+44 20 7946 0958", "(555) 123-4567"]}},
            "a@b.com": 4111111111111111, "note": "paid with 4111-1111-1111-1111, ok", "n": [1, true, null]}"#;
        let expected = r#"{"user": {"contact": {"email": "[EMAIL]", "phones": ["[PHONE]", "[PHONE]"]}},
            "a@b.com": 4111111111111111, "note": "paid with [CARD], ok", "n": [1, true, null]}"#;
        assert_eq!(json(input), expected);
    }

    /// Escapes stay intact, including a JSON document escaped inside a string.
    #[test]
    fn escapes() {
        assert_eq!(json(r#"{"m":"line\nx@y.com"}"#), r#"{"m":"line\n[EMAIL]"}"#);
        assert_eq!(json(r#"{"m":"\u0041a@b.com"}"#), r#"{"m":"\u0041[EMAIL]"}"#);
        assert_eq!(json(r#"{"m":"tab\t555-123-4567"}"#), r#"{"m":"tab\t[PHONE]"}"#);
        assert_eq!(
            json(r#"{"payload":"{\"email\":\"a@b.com\",\"tel\":\"+44 20 7946 0958\"}"}"#),
            r#"{"payload":"{\"email\":\"[EMAIL]\",\"tel\":\"[PHONE]\"}"}"#
        );
        assert_eq!(json(r#"["q\"a@b.com\""]"#), r#"["q\"[EMAIL]\""]"#);
    }

    /// Values without PII come back identical; malformed input does not panic.
    #[test]
    fn untouched_and_malformed() {
        let clean = r#"{"id": 42, "name": "Ada", "tags": ["x", "y"]}"#;
        assert_eq!(json(clean), clean);
        assert_eq!(text(r#"{"unterminated": "a@b.com"#), r#"{"unterminated": "[EMAIL]"#);
        assert_eq!(redact_json(b"\xff\xfe a@b.com \xff"), b"\xff\xfe [EMAIL] \xff");
        assert_eq!(text(r#"{"x":"\"#), r#"{"x":"\"#);
        assert_eq!(text("+"), "+");
        assert_eq!(text("(555"), "(555");
        assert_eq!(redact_json(b""), b"");
    }

    /// The transform rewrites only records with PII, keeping key, headers and timestamp.
    #[test]
    fn transform_rewrites_and_forwards() {
        let mut harness = Harness::<Redact>::new(&[], &["clean"]).unwrap();
        let written = harness
            .process(&[
                TestRecord::new().key("k1").value(r#"{"email":"a@b.com"}"#).header("h", "1").timestamp(9),
                TestRecord::new().key("k2").value(r#"{"ok":true}"#),
                TestRecord::new().key("k3"),
            ])
            .unwrap();
        assert_eq!(written.len(), 3);
        assert_eq!(written[0].value_str(), Some(r#"{"email":"[EMAIL]"}"#));
        assert_eq!(
            (written[0].key_str(), written[0].header("h"), written[0].timestamp),
            (Some("k1"), Some(&b"1"[..]), Some(9))
        );
        assert_eq!(written[1].value_str(), Some(r#"{"ok":true}"#));
        assert_eq!(written[2].value, None);
    }

    /// `kinds` selects what is redacted; an unknown kind fails init.
    #[test]
    fn kinds_parameter() {
        let mut harness = Harness::<Redact>::new(&[("kinds", "email")], &["out"]).unwrap();
        let written = harness.process(&[TestRecord::new().value("a@b.com 555-123-4567")]).unwrap();
        assert_eq!(written[0].value_str(), Some("[EMAIL] 555-123-4567"));
        let err = Harness::<Redact>::new(&[("kinds", "email,ssn")], &["out"]).err().unwrap();
        assert!(err.message().contains("ssn"));
    }
}
