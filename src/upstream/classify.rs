//! What a statement does to session state, read from its text without a full parse (the relay
//! must not pay for sqlparser per statement): SETs to replay on another upstream connection,
//! and everything a pooler cannot move between connections — which pins the client's session
//! to its upstream connection until it disconnects (as PgBouncer's session mode would).
//!
//! The scan is deliberately conservative: a false "pins" costs pooling for one client, a
//! missed one would leak state between clients.

/// A session setting change, in effect once its transaction commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetChange {
    /// `SET name ...`: the lower-cased name and the statement that sets it.
    Set(String, String),
    Reset(String),
    ResetAll,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub sets: Vec<SetChange>,
    /// The session now holds state only its own upstream connection has.
    pub pins: bool,
    /// SAVEPOINT / ROLLBACK TO / RELEASE: SETs in the block may be partly undone.
    pub savepoint: bool,
}

/// Split `sql` into statements at semicolons outside quotes, dollar quotes and comments.
fn statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'$' => {
                // $tag$ ... $tag$
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map(|p| i + 1 + p);
                if let Some(e) = tag_end.filter(|e| b.get(*e) == Some(&b'$')) {
                    let tag = &sql[i..=e];
                    match sql[e + 1..].find(tag) {
                        Some(p) => i = e + 1 + p + tag.len() - 1,
                        None => i = b.len(),
                    }
                }
            }
            b';' => {
                out.push(&sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&sql[start.min(sql.len())..]);
    out.retain(|s| !s.trim().is_empty());
    out
}

/// Leading words of a statement, lower-cased, comments skipped.
fn words(stmt: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = stmt;
    while out.len() < n {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.split_once('\n').map_or("", |(_, r)| r);
            continue;
        }
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, r)| r);
            continue;
        }
        if let Some(r) = rest.strip_prefix('"') {
            let (w, r) = r.split_once('"').unwrap_or((r, ""));
            out.push(w.to_string());
            rest = r;
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_ascii_lowercase());
        rest = &rest[end..];
    }
    out
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The common case without allocating: one statement whose first word cannot change session
/// state, and no function call that could.
fn plainly_stateless(sql: &str) -> bool {
    let t = sql.trim_start();
    let first_end = t
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(t.len());
    let first = &t[..first_end];
    let stateless = [
        "select", "insert", "update", "delete", "begin", "commit", "end", "values", "table",
        "with", "explain", "copy", "vacuum", "analyze", "truncate", "show",
    ]
    .iter()
    .any(|w| first.eq_ignore_ascii_case(w));
    let one_statement = match sql.find(';') {
        None => true,
        Some(i) => sql[i + 1..].trim().is_empty(),
    };
    let b = sql.as_bytes();
    stateless
        && one_statement
        && !contains_ignore_case(b, b"advisory")
        && !contains_ignore_case(b, b"set_config")
}

/// The statement a Query that is only `DEALLOCATE [PREPARE] name` deallocates (lower-cased
/// unless double-quoted). None for anything else, `DEALLOCATE ALL` included, and for text this
/// cheap scan cannot vouch for (the server then sees it).
pub fn deallocated(sql: &str) -> Option<String> {
    let parts: Vec<&str> = statements(sql)
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect();
    let [stmt] = parts.as_slice() else {
        return None;
    };
    let plain = stmt
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '"' || c.is_whitespace());
    if !plain {
        return None;
    }
    let w = words(stmt, 4);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["deallocate", "prepare", name] | ["deallocate", name]
            if (stmt.contains('"') || *name != "all") && *name != "prepare" =>
        {
            Some(name.to_string())
        }
        _ => None,
    }
}

pub fn classify(sql: &str) -> Effects {
    let mut fx = Effects::default();
    if plainly_stateless(sql) {
        return fx;
    }
    let lower = sql.to_ascii_lowercase();
    // Session-level advisory locks and set_config(..., false) live past the transaction.
    if lower.contains("pg_advisory_lock")
        || lower.contains("pg_try_advisory_lock")
        || lower.contains("set_config")
    {
        fx.pins = true;
    }
    for stmt in statements(sql) {
        let w = words(stmt, 4);
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["set", "local" | "transaction" | "constraints", ..] => {}
            ["set", "session", "characteristics" | "authorization", ..]
            | ["set", "role", ..]
            | ["reset", "role" | "session", ..] => fx.pins = true,
            ["set", "session", name, ..] | ["set", name, ..] => fx
                .sets
                .push(SetChange::Set(name.to_string(), stmt.trim().to_string())),
            ["reset", "all", ..] => fx.sets.push(SetChange::ResetAll),
            ["reset", name, ..] => fx.sets.push(SetChange::Reset(name.to_string())),
            ["discard", "all", ..] => {
                // DISCARD ALL is RESET ALL too (and drops the statements: see the relay).
                fx.pins = true;
                fx.sets.push(SetChange::ResetAll);
            }
            ["prepare" | "deallocate" | "listen" | "load" | "discard", ..] => fx.pins = true,
            ["create", "temp" | "temporary", ..]
            | ["create", "global" | "local", "temp" | "temporary", ..]
            | ["create", "or", "replace", "temp" | "temporary", ..] => fx.pins = true,
            ["declare", ..] if stmt.to_ascii_lowercase().contains("with hold") => fx.pins = true,
            ["savepoint", ..] | ["release", ..] => fx.savepoint = true,
            ["rollback", "to", ..] | ["rollback", "transaction" | "work", "to", ..] => {
                fx.savepoint = true
            }
            _ => {}
        }
    }
    fx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deallocate_of_one_statement() {
        assert_eq!(deallocated("DEALLOCATE s1"), Some("s1".into()));
        assert_eq!(deallocated(" deallocate prepare S1 ;"), Some("s1".into()));
        assert_eq!(deallocated("DEALLOCATE \"Mixed\""), Some("Mixed".into()));
        assert_eq!(deallocated("DEALLOCATE \"all\""), Some("all".into()));
        assert_eq!(deallocated("DEALLOCATE ALL"), None);
        assert_eq!(deallocated("DEALLOCATE PREPARE ALL"), None);
        assert_eq!(deallocated("DEALLOCATE a; select 1"), None);
        assert_eq!(deallocated("DEALLOCATE a + 1"), None);
        assert_eq!(deallocated("DEALLOCATE a b"), None);
        assert_eq!(deallocated("select 1"), None);
    }

    #[test]
    fn sets_and_pins() {
        let fx = classify("SET search_path = a, b; select 1; SET LOCAL x = 1");
        assert_eq!(
            fx.sets,
            vec![SetChange::Set(
                "search_path".into(),
                "SET search_path = a, b".into()
            )]
        );
        assert!(!fx.pins);
        assert_eq!(
            classify("/* c */ reset ALL").sets,
            vec![SetChange::ResetAll]
        );
        assert_eq!(
            classify("set session statement_timeout to 5").sets,
            vec![SetChange::Set(
                "statement_timeout".into(),
                "set session statement_timeout to 5".into()
            )]
        );
        assert!(classify("SET ROLE bob").pins);
        assert!(classify("select pg_advisory_lock(1)").pins);
        assert!(!classify("select pg_advisory_xact_lock(1)").pins);
        assert!(classify("CREATE TEMP TABLE t (a int)").pins);
        assert!(classify("prepare p as select 1").pins);
        assert!(classify("LISTEN c").pins);
        assert!(!classify("select ';SET x=1'").pins);
        assert!(classify("select ';SET x=1'").sets.is_empty());
        assert!(classify("select $$;set x=1;$$").sets.is_empty());
        assert!(classify("ROLLBACK TO SAVEPOINT a").savepoint);
        assert!(!classify("ROLLBACK").savepoint);
        assert!(classify("SELECT pg_advisory_lock(1);").pins);
        assert!(classify("select 1; prepare p as select 1").pins);
        assert_eq!(classify("SELECT 1 ;  ").sets, vec![]);
    }
}
