//! `json` validation and `jsonb` canonical text.
//!
//! `json` keeps its input text verbatim once it parses. `jsonb` is stored by PostgreSQL as a
//! tree and printed back canonically (`JsonbToCString`): object keys sorted by length and then
//! bytes with the last duplicate winning, numbers as `numeric` prints them, strings re-escaped,
//! `", "` and `": "` separators. [`normalize_jsonb`] produces exactly that text, which is what
//! ringwire stores in `Value::Text` for a jsonb column.

use super::numeric::Numeric;
use crate::error::{PgError, SqlState};

/// Nesting deeper than this is refused rather than recursed into.
const MAX_DEPTH: usize = 6400;

enum Node {
    Null,
    Bool(bool),
    Number(Numeric),
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    /// jsonb refuses `\u0000`; json only validates.
    jsonb: bool,
    /// Build a tree (jsonb) or only validate (json).
    build: bool,
}

fn syntax(detail: String) -> PgError {
    PgError::new(
        SqlState::INVALID_TEXT_REPRESENTATION,
        "invalid input syntax for type json",
    )
    .with_detail(detail)
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn token_at(&self, start: usize) -> String {
        let mut end = start;
        while end < self.s.len()
            && !matches!(
                self.s[end],
                b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}' | b':'
            )
        {
            end += 1;
        }
        if end == start && end < self.s.len() {
            end += 1;
        }
        String::from_utf8_lossy(&self.s[start..end]).into_owned()
    }

    fn value(&mut self, depth: usize) -> Result<Node, PgError> {
        if depth > MAX_DEPTH {
            return Err(PgError::new(
                SqlState(*b"54001"),
                "stack depth limit exceeded",
            ));
        }
        self.skip_ws();
        let Some(&c) = self.s.get(self.pos) else {
            return Err(syntax("The input string ended unexpectedly.".into()));
        };
        match c {
            b'{' => {
                self.pos += 1;
                let mut fields = Vec::new();
                self.skip_ws();
                if self.s.get(self.pos) == Some(&b'}') {
                    self.pos += 1;
                    return Ok(Node::Object(fields));
                }
                loop {
                    self.skip_ws();
                    if self.s.get(self.pos) != Some(&b'"') {
                        return Err(self.expected("string"));
                    }
                    let key = self.string()?;
                    self.skip_ws();
                    if self.s.get(self.pos) != Some(&b':') {
                        return Err(self.expected("\":\""));
                    }
                    self.pos += 1;
                    let v = self.value(depth + 1)?;
                    if self.build {
                        fields.push((key, v));
                    }
                    self.skip_ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Node::Object(fields));
                        }
                        _ => return Err(self.expected("\",\" or \"}\"")),
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.s.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                loop {
                    let v = self.value(depth + 1)?;
                    if self.build {
                        items.push(v);
                    }
                    self.skip_ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Node::Array(items));
                        }
                        _ => return Err(self.expected("\",\" or \"]\"")),
                    }
                }
            }
            b'"' => Ok(Node::String(self.string()?)),
            b'-' | b'0'..=b'9' => self.number(),
            _ => {
                for (word, node) in [("true", 1), ("false", 2), ("null", 3)] {
                    if self.s[self.pos..].starts_with(word.as_bytes()) {
                        let end = self.pos + word.len();
                        let boundary = self.s.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
                        if boundary {
                            self.pos = end;
                            return Ok(match node {
                                1 => Node::Bool(true),
                                2 => Node::Bool(false),
                                _ => Node::Null,
                            });
                        }
                    }
                }
                Err(syntax(format!(
                    "Token \"{}\" is invalid.",
                    self.token_at(self.pos)
                )))
            }
        }
    }

    fn expected(&self, what: &str) -> PgError {
        if self.pos >= self.s.len() {
            return syntax("The input string ended unexpectedly.".into());
        }
        syntax(format!(
            "Expected {what}, but found \"{}\".",
            self.token_at(self.pos)
        ))
    }

    fn number(&mut self) -> Result<Node, PgError> {
        let start = self.pos;
        let s = self.s;
        let mut i = self.pos;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        let bad = |p: &Parser| syntax(format!("Token \"{}\" is invalid.", p.token_at(start)));
        match s.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while s.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return Err(bad(self)),
        }
        if s.get(i) == Some(&b'.') {
            i += 1;
            if !s.get(i).is_some_and(u8::is_ascii_digit) {
                return Err(bad(self));
            }
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(s.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !s.get(i).is_some_and(u8::is_ascii_digit) {
                return Err(bad(self));
            }
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        if s.get(i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'.')
        {
            return Err(bad(self));
        }
        self.pos = i;
        if !self.build {
            return Ok(Node::Null);
        }
        let n = Numeric::parse_bytes(&s[start..i]).map_err(|_| {
            PgError::new(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "value overflows numeric format",
            )
        })?;
        Ok(Node::Number(n))
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.s.get(at..at + 4)?;
        let mut v = 0;
        for &b in h {
            v = v * 16 + (b as char).to_digit(16)?;
        }
        Some(v)
    }

    fn string(&mut self) -> Result<String, PgError> {
        debug_assert_eq!(self.s[self.pos], b'"');
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Err(syntax("The input string ended unexpectedly.".into()));
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    break;
                }
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos + 1) else {
                        return Err(syntax("The input string ended unexpectedly.".into()));
                    };
                    self.pos += 2;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let Some(mut cp) = self.hex4(self.pos) else {
                                return Err(syntax(
                                    "\"\\u\" must be followed by four hexadecimal digits.".into(),
                                ));
                            };
                            self.pos += 4;
                            if (0xD800..0xDC00).contains(&cp) {
                                let low = if self.s.get(self.pos..self.pos + 2) == Some(b"\\u") {
                                    self.hex4(self.pos + 2)
                                } else {
                                    None
                                };
                                match low {
                                    Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                                        self.pos += 6;
                                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                    }
                                    _ => return Err(syntax(
                                        "Unicode high surrogate must not follow a high surrogate."
                                            .into(),
                                    )),
                                }
                            } else if (0xDC00..0xE000).contains(&cp) {
                                return Err(syntax(
                                    "Unicode low surrogate must follow a high surrogate.".into(),
                                ));
                            }
                            if cp == 0 && self.jsonb {
                                return Err(PgError::new(
                                    SqlState(*b"22P05"),
                                    "unsupported Unicode escape sequence",
                                )
                                .with_detail("\\u0000 cannot be converted to text."));
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => {
                            return Err(syntax(format!(
                                "Escape sequence \"\\{}\" is invalid.",
                                e as char
                            )))
                        }
                    }
                }
                0..=0x1f => {
                    return Err(syntax(format!(
                        "Character with value 0x{c:02x} must be escaped."
                    )))
                }
                _ => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
        // Input was valid UTF-8 and escapes produce valid UTF-8.
        String::from_utf8(out).map_err(|_| syntax("invalid UTF-8".into()))
    }
}

fn parse(text: &str, jsonb: bool) -> Result<Node, PgError> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        jsonb,
        build: jsonb,
    };
    let v = p.value(0)?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(syntax(format!(
            "Expected end of input, but found \"{}\".",
            p.token_at(p.pos)
        )));
    }
    Ok(v)
}

/// Checks `json` input; the text itself is kept as given.
pub fn validate_json(text: &str) -> Result<(), PgError> {
    parse(text, false).map(|_| ())
}

/// Parses `jsonb` input and returns PostgreSQL's canonical text for it.
pub fn normalize_jsonb(text: &str) -> Result<String, PgError> {
    let node = parse(text, true)?;
    let mut out = String::with_capacity(text.len());
    write_node(node, &mut out);
    Ok(out)
}

/// `escape_json`.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_node(node: Node, out: &mut String) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(true) => out.push_str("true"),
        Node::Bool(false) => out.push_str("false"),
        Node::Number(n) => out.push_str(&n.to_string()),
        Node::String(s) => write_string(&s, out),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_node(item, out);
            }
            out.push(']');
        }
        Node::Object(mut fields) => {
            // Stable sort by (length, bytes), then keep the last of equal keys.
            fields.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
            let mut deduped: Vec<(String, Node)> = Vec::with_capacity(fields.len());
            for (k, v) in fields {
                match deduped.last_mut() {
                    Some(last) if last.0 == k => *last = (k, v),
                    _ => deduped.push((k, v)),
                }
            }
            out.push('{');
            for (i, (k, v)) in deduped.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(&k, out);
                out.push_str(": ");
                write_node(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonb_canonical_text_matches_postgres() {
        let cases = [
            (
                r#"{"b":1,"a":[1,2.50,{"c":null}],"aa":true, "b":"x\u0041\n"}"#,
                r#"{"a": [1, 2.50, {"c": null}], "b": "xA\n", "aa": true}"#,
            ),
            ("1e2", "100"),
            (r#""\u00e9\t\u0001""#, r#""é\t\u0001""#),
            ("[]", "[]"),
            ("{}", "{}"),
            ("-0", "0"),
            ("1.0E-2", "0.010"),
            (" [1,[ ],{ }] ", "[1, [], {}]"),
            (r#""\ud83d\ude00""#, "\"😀\""),
            (r#""/\/""#, r#""//""#),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_jsonb(input).unwrap(), want, "{input}");
        }
        for bad in [
            r#"{"a":1,}"#,
            "01",
            r#"{"a"}"#,
            "",
            "[1",
            "tru",
            "1.",
            "\"\\x\"",
            "nul l",
        ] {
            let e = normalize_jsonb(bad).unwrap_err();
            assert_eq!(e.message, "invalid input syntax for type json", "{bad:?}");
            assert!(validate_json(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            normalize_jsonb(r#""\u0000""#).unwrap_err().message,
            "unsupported Unicode escape sequence"
        );
        assert!(validate_json(r#""\u0000""#).is_ok());
        assert_eq!(
            normalize_jsonb(r#"{"a":1,}"#)
                .unwrap_err()
                .detail
                .as_deref(),
            Some("Expected string, but found \"}\".")
        );
    }
}
