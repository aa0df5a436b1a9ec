//! Literal lifting for the simple protocol: `... WHERE aid = 123` and `... WHERE aid = 456`
//! become `... WHERE aid = $1` with 123 or 456 bound, so they share one plan-cache entry and
//! skip sqlparser and planning (which are most of a point select's CPU otherwise).
//!
//! A cheap pass over the text, no parser. It lifts only where the result cannot differ from
//! planning the literal: the statement is a single SELECT, UPDATE or DELETE without comments,
//! dollar signs or prefixed strings (`E'..'`), and a literal is lifted only when it is the
//! whole right operand of a comparison (`=`, `<>`, `!=`, `<`, `>`, `<=`, `>=`) after `WHERE`:
//! right after the operator, and followed by the end, `)`, `AND`, `OR`, `ORDER`, `GROUP`,
//! `HAVING`, `LIMIT`, `OFFSET` or `RETURNING`. Comparisons bind tighter than all of those, so
//! the literal is an operand of the comparison alone, never of arithmetic (where constant
//! folding would report `1/0` at planning) and never part of a cast.
//!
//! Types stay PostgreSQL's: an integer literal that fits int4 is an int4 parameter (what
//! PostgreSQL types it as; larger ones are not lifted), and a quoted string is a parameter of
//! unknown type, resolved by its context exactly as an unknown literal is, and converted with
//! the type's input function at execution. The engine keeps the literal plan's errors: if the
//! lifted statement does not plan (or plans to something other than a table statement), it
//! plans the original text instead.

use std::borrow::Cow;

/// A lifted literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Literal<'a> {
    /// An integer literal that fits int4.
    Int4(i32),
    /// A quoted string (quotes removed, `''` unescaped): unknown-typed.
    Text(Cow<'a, str>),
}

/// Most literals one statement lifts; a statement with more keeps them.
pub const LIFTED_MAX: usize = 16;

/// Lifts `sql`'s liftable literals: writes the text with each replaced by `$n` into
/// `normalized` and pushes the literals, in order, into `literals`. Returns false (leaving
/// both to be ignored) when the statement is not one to lift or has no liftable literal.
pub fn lift<'a>(
    sql: &'a str,
    normalized: &mut impl std::fmt::Write,
    literals: &mut impl Extend<Literal<'a>>,
) -> bool {
    let bytes = sql.as_bytes();
    if bytes.contains(&b'$') || sql.contains("--") || sql.contains("/*") {
        return false;
    }
    let first = first_word(sql);
    if !["select", "update", "delete"]
        .iter()
        .any(|w| first.eq_ignore_ascii_case(w))
    {
        return false;
    }
    // The tokens: (start, end, kind). Decisions need the next significant token, so the
    // statement is tokenized first into a small fixed buffer; a longer one is not lifted.
    let mut tokens = [(0usize, 0usize, Kind::Other); 256];
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        let kind = match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            b'\'' => {
                if start > 0 && is_ident_byte(bytes[start - 1]) {
                    return false; // E'..', B'..', X'..', U&'..': not plain strings
                }
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return false, // unterminated: let the parser report it
                        Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                if bytes.get(i) == Some(&b'\'') {
                    return false;
                }
                Kind::String
            }
            b'"' => {
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return false,
                        Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                Kind::Other
            }
            b'0'..=b'9' => {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                match bytes.get(i) {
                    // 1.5, 1e5, 0x1f, 1_000, 123abc: not plain integers.
                    Some(c) if c.is_ascii_alphanumeric() || *c == b'.' || *c == b'_' => {
                        while i < bytes.len() && (is_ident_byte(bytes[i]) || bytes[i] == b'.') {
                            i += 1;
                        }
                        Kind::Other
                    }
                    _ => Kind::Integer,
                }
            }
            c if is_ident_start(c) => {
                while i < bytes.len() && is_ident_byte(bytes[i]) {
                    i += 1;
                }
                Kind::Word
            }
            c if is_operator_byte(c) => {
                while i < bytes.len() && is_operator_byte(bytes[i]) {
                    i += 1;
                }
                Kind::Operator
            }
            b';' => {
                i += 1;
                // Only a trailing semicolon: several statements are not lifted.
                if !sql[i..].trim().is_empty() {
                    return false;
                }
                Kind::Other
            }
            _ => {
                // Punctuation and anything else (including non-ASCII): one byte or char.
                i += sql[i..].chars().next().map_or(1, char::len_utf8);
                Kind::Other
            }
        };
        if n == tokens.len() {
            return false;
        }
        tokens[n] = (start, i, kind);
        n += 1;
    }
    let tokens = &tokens[..n];
    let text = |t: &(usize, usize, Kind)| &sql[t.0..t.1];
    let mut seen_where = false;
    let mut lifted = 0usize;
    let mut copied_to = 0;
    for (k, token) in tokens.iter().enumerate() {
        if token.2 == Kind::Word && text(token).eq_ignore_ascii_case("where") {
            seen_where = true;
            continue;
        }
        if !seen_where || !matches!(token.2, Kind::Integer | Kind::String) || k == 0 {
            continue;
        }
        let before = &tokens[k - 1];
        if before.2 != Kind::Operator
            || !["=", "<>", "!=", "<", ">", "<=", ">="].contains(&text(before))
        {
            continue;
        }
        let ends_operand = match tokens.get(k + 1) {
            None => true,
            Some(next) => match next.2 {
                Kind::Word => [
                    "and",
                    "or",
                    "order",
                    "group",
                    "having",
                    "limit",
                    "offset",
                    "returning",
                ]
                .iter()
                .any(|w| text(next).eq_ignore_ascii_case(w)),
                _ => matches!(text(next), ")" | ";"),
            },
        };
        if !ends_operand {
            continue;
        }
        let literal = match token.2 {
            Kind::Integer => match text(token).parse::<i32>() {
                Ok(v) => Literal::Int4(v),
                Err(_) => continue, // int8 or numeric: PostgreSQL types it otherwise
            },
            _ => {
                let inner = &sql[token.0 + 1..token.1 - 1];
                Literal::Text(if inner.contains("''") {
                    Cow::Owned(inner.replace("''", "'"))
                } else {
                    Cow::Borrowed(inner)
                })
            }
        };
        if lifted == LIFTED_MAX {
            break;
        }
        lifted += 1;
        if normalized.write_str(&sql[copied_to..token.0]).is_err()
            || write!(normalized, "${lifted}").is_err()
        {
            return false;
        }
        copied_to = token.1;
        literals.extend(std::iter::once(literal));
    }
    if lifted == 0 {
        return false;
    }
    normalized.write_str(&sql[copied_to..]).is_ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Word,
    Integer,
    String,
    Operator,
    Other,
}

fn first_word(sql: &str) -> &str {
    let s = sql.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
    let end = s
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .unwrap_or(s.len());
    &s[..end]
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_byte(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

/// PostgreSQL's operator characters.
fn is_operator_byte(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b'*'
            | b'/'
            | b'<'
            | b'>'
            | b'='
            | b'~'
            | b'!'
            | b'@'
            | b'#'
            | b'%'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifted(sql: &str) -> Option<(String, Vec<Literal<'_>>)> {
        let mut text = String::new();
        let mut literals = Vec::new();
        lift(sql, &mut text, &mut literals).then_some((text, literals))
    }

    #[test]
    fn point_selects_share_one_text() {
        let a = lifted("SELECT abalance FROM pgbench_accounts WHERE aid = 123;").unwrap();
        let b = lifted("SELECT abalance FROM pgbench_accounts WHERE aid = 456;").unwrap();
        assert_eq!(a.0, "SELECT abalance FROM pgbench_accounts WHERE aid = $1;");
        assert_eq!(a.0, b.0);
        assert_eq!(a.1, vec![Literal::Int4(123)]);
        assert_eq!(b.1, vec![Literal::Int4(456)]);
    }

    #[test]
    fn strings_and_several_comparisons() {
        let (text, literals) =
            lifted("select * from t where name = 'it''s' and (n >= 5) order by n").unwrap();
        assert_eq!(
            text,
            "select * from t where name = $1 and (n >= $2) order by n"
        );
        assert_eq!(
            literals,
            vec![Literal::Text(Cow::Owned("it's".into())), Literal::Int4(5)]
        );
        let (text, _) = lifted("update t set v = 'x' where id = 7 returning v").unwrap();
        assert_eq!(text, "update t set v = 'x' where id = $1 returning v");
    }

    #[test]
    fn what_could_change_typing_or_errors_stays() {
        for sql in [
            "select 1 = 1",                                // no WHERE
            "select * from t where a = 1 + 2",             // an arithmetic operand
            "select * from t where a = 1/0",               // folding reports 1/0 at planning
            "select * from t where a = -1",                // unary minus
            "select * from t where a = 3000000000",        // int8
            "select * from t where a = 1.5",               // numeric
            "select * from t where a = 1e5",               // numeric
            "select * from t where a = '1'::int4",         // a cast
            "select * from t where a = E'x'",              // an escape string
            "select * from t where a = $1",                // parameters already
            "select * from t where a = 1; select 2",       // two statements
            "select * from t where a = 1 -- c",            // a comment
            "select * from t where a in (1, 2)",           // not a comparison
            "select * from t where a between 1 and 2",     // not a comparison
            "select * from t where a = 1 is true",         // IS binds looser
            "select * from t where a = 'x' collate \"C\"", // COLLATE
            "insert into t values (1)",                    // not SELECT/UPDATE/DELETE
            "select * from t where 1 = a",                 // left operands stay
            "select * from t where a = 'unterminated",     // the parser's to report
            "select * from t where a=-1",                  // `=-` is not `=`
        ] {
            assert_eq!(lifted(sql), None, "{sql}");
        }
    }

    #[test]
    fn quoted_identifiers_and_where_inside_strings() {
        let (text, _) = lifted(r#"select "where" from t where "a b" = 1"#).unwrap();
        assert_eq!(text, r#"select "where" from t where "a b" = $1"#);
        assert_eq!(lifted("select 'where x = 1' from t"), None);
    }
}
