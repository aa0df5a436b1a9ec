//! What each connection sends next: scripts of statements with `:variables`, prebuilt into
//! protocol messages once so that the per-query work is copying bytes and formatting integers.
//!
//! A [`Workload`] is a weighted set of [`Script`]s. A script is one `--sql` statement, or the
//! statements of one `--file` run in order (like a pgbench script); its variables are drawn
//! afresh each time it starts. Which script runs next is a fixed weighted round-robin
//! schedule, each connection starting at a different place in it.

use std::fmt::Write as _;
use std::ops::Range;

use protocol::frontend::{encode_bind, encode_empty, encode_execute, encode_parse, encode_query};
use protocol::wire::{begin_message, finish_message};

/// Variables per workload. Values live in a fixed array per connection, so this is a limit.
pub const MAX_VARIABLES: usize = 16;
/// `$n` parameters per statement (the Bind values are staged in a fixed array).
pub const MAX_PARAMS: usize = MAX_VARIABLES;
/// Length of the weighted round-robin schedule (the sum of the reduced weights).
pub const MAX_SCHEDULE_LEN: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Query message with the values substituted into the text.
    Simple,
    /// Parse (unnamed) / Bind / Execute / Sync per query, values as `$n` text parameters.
    Extended,
    /// Parse a named statement once per connection, then Bind / Execute / Sync per query.
    Prepared,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Extended => "extended",
            Mode::Prepared => "prepared",
        }
    }
}

/// How a variable gets its value each time its script starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generator {
    Constant(i64),
    /// Uniform over `lo..=hi`.
    Uniform {
        lo: i64,
        hi: i64,
    },
}

impl Generator {
    /// `N`, `LO..HI` (inclusive, as `--param aid=1..100000`) or `random(LO, HI)` (pgbench).
    pub fn parse(s: &str) -> Result<Generator, String> {
        let s = s.trim();
        let int = |t: &str| -> Result<i64, String> {
            t.trim()
                .parse::<i64>()
                .map_err(|_| format!("{t:?} is not an integer"))
        };
        let uniform = |lo: i64, hi: i64| {
            if lo > hi {
                Err(format!("empty range {lo}..{hi}"))
            } else {
                Ok(Generator::Uniform { lo, hi })
            }
        };
        if let Some(args) = s.strip_prefix("random(").and_then(|r| r.strip_suffix(')')) {
            let (lo, hi) = args
                .split_once(',')
                .ok_or_else(|| format!("random() needs two arguments: {s:?}"))?;
            return uniform(int(lo)?, int(hi)?);
        }
        if let Some((lo, hi)) = s.split_once("..") {
            return uniform(int(lo)?, int(hi)?);
        }
        match int(s) {
            Ok(v) => Ok(Generator::Constant(v)),
            Err(_) => Err(format!(
                "unsupported value expression {s:?}: use an integer N, a range LO..HI, or random(LO, HI)"
            )),
        }
    }

    #[inline]
    fn draw(self, rng: &mut u64) -> i64 {
        match self {
            Generator::Constant(v) => v,
            Generator::Uniform { lo, hi } => {
                let span = (hi as i128 - lo as i128 + 1) as u128;
                // Lemire's multiply-shift: an unbiased-enough draw without a division.
                let r = wyrand(rng) as u128;
                (lo as i128 + ((r * span) >> 64) as i128) as i64
            }
        }
    }
}

/// wyrand: a tiny, fast, well-distributed generator; one per connection, no shared state.
#[inline]
pub fn wyrand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0xa076_1d64_78bd_642f);
    let t = (*state as u128).wrapping_mul((*state ^ 0xe703_7ed1_a0b4_28db) as u128);
    ((t >> 64) ^ t) as u64
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Bytes of the statement text.
    Text(Range<usize>),
    /// A variable, by index into [`Workload::variables`].
    Variable(usize),
}

/// One SQL statement with its messages prebuilt.
#[derive(Debug)]
pub struct Statement {
    pub sql: String,
    /// Simple mode: `sql` cut at the variable references.
    pieces: Vec<Piece>,
    /// Simple mode without variables: the whole Query message.
    query_message: Vec<u8>,
    /// Extended / prepared: the variable behind each `$n`, in order.
    params: Vec<usize>,
    /// The text with `$n` placeholders (what Parse carries).
    pub placeholder_sql: String,
    /// Extended mode: Parse of the unnamed statement.
    parse_unnamed: Vec<u8>,
    /// Prepared mode: the statement's name on every connection.
    pub prepared_name: String,
}

/// Statements run in order, with the variables they use drawn at the start.
#[derive(Debug)]
pub struct Script {
    pub weight: u32,
    pub statements: Vec<Statement>,
    /// Drawn in this order each time the script starts.
    sets: Vec<(usize, Generator)>,
}

#[derive(Debug)]
pub struct Workload {
    pub mode: Mode,
    /// Variable names; a statement refers to them by index.
    pub variables: Vec<String>,
    pub scripts: Vec<Script>,
    /// Script indices in weighted round-robin order.
    schedule: Vec<u16>,
    /// Execute (unnamed portal, all rows) then Sync: the same bytes after every Bind.
    execute_sync: Vec<u8>,
}

/// Where one connection is in the workload, plus its random state. Plain data, no allocation.
#[derive(Clone, Debug)]
pub struct Cursor {
    script: usize,
    step: usize,
    schedule_at: usize,
    values: [i64; MAX_VARIABLES],
    rng: u64,
}

/// A workload definition before it is compiled: `--sql`/`--weight`/`--param` and `--file`.
#[derive(Clone, Debug, Default)]
pub struct WorkloadSpec {
    /// `(sql, weight)`.
    pub sql: Vec<(String, u32)>,
    /// `name=generator` applied to every script (for files: before their own `\set` lines).
    pub params: Vec<(String, Generator)>,
    /// `(file text, file name for messages, weight)`.
    pub files: Vec<(String, String, u32)>,
}

impl WorkloadSpec {
    pub fn parse_param(s: &str) -> Result<(String, Generator), String> {
        let (name, value) = s
            .split_once('=')
            .ok_or_else(|| format!("--param {s:?}: expected NAME=VALUE, e.g. aid=1..100000"))?;
        let name = name.trim();
        if !valid_name(name) {
            return Err(format!("--param {s:?}: {name:?} is not a variable name"));
        }
        Ok((
            name.to_string(),
            Generator::parse(value).map_err(|e| format!("--param {s:?}: {e}"))?,
        ))
    }

    /// Compile into prebuilt messages. Every error names what to fix.
    pub fn build(&self, mode: Mode) -> Result<Workload, String> {
        let mut w = Workload {
            mode,
            variables: Vec::new(),
            scripts: Vec::new(),
            schedule: Vec::new(),
            execute_sync: Vec::new(),
        };
        encode_execute(&mut w.execute_sync, "", 0);
        encode_empty(&mut w.execute_sync, b'S');
        let mut statement_count = 0usize;
        let mut params = Vec::new();
        for (name, generator) in &self.params {
            params.push((w.variable(name)?, *generator));
        }
        for (sql, weight) in &self.sql {
            let statement = w.statement(sql, statement_count)?;
            statement_count += 1;
            w.scripts.push(Script {
                weight: *weight,
                statements: vec![statement],
                sets: params.clone(),
            });
        }
        for (text, file_name, weight) in &self.files {
            let ScriptFile {
                sets,
                statements: sqls,
            } = parse_script_file(text).map_err(|e| format!("{file_name}: {e}"))?;
            let mut script = Script {
                weight: *weight,
                statements: Vec::new(),
                sets: params.clone(),
            };
            for (name, generator) in sets {
                script.sets.push((
                    w.variable(&name).map_err(|e| format!("{file_name}: {e}"))?,
                    generator,
                ));
            }
            for sql in sqls {
                let statement = w
                    .statement(&sql, statement_count)
                    .map_err(|e| format!("{file_name}: {e}"))?;
                statement_count += 1;
                script.statements.push(statement);
            }
            if script.statements.is_empty() {
                return Err(format!("{file_name}: the script has no SQL statement"));
            }
            w.scripts.push(script);
        }
        if w.scripts.is_empty() {
            return Err("no workload: give --sql or --file".into());
        }
        for script in &w.scripts {
            for statement in &script.statements {
                for piece in &statement.pieces {
                    if let Piece::Variable(v) = piece {
                        if !script.sets.iter().any(|(set, _)| set == v) {
                            return Err(format!(
                                "statement {:?} uses :{} but nothing sets it (add --param {}=LO..HI or a \\set line)",
                                statement.sql, w.variables[*v], w.variables[*v]
                            ));
                        }
                    }
                }
            }
        }
        w.schedule = weighted_schedule(&w.scripts.iter().map(|s| s.weight).collect::<Vec<_>>())?;
        Ok(w)
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A script file, parsed: its `\set` lines in order, and its statements.
struct ScriptFile {
    sets: Vec<(String, Generator)>,
    statements: Vec<String>,
}

/// pgbench-style script: `\set NAME EXPR` lines and SQL statements ending in `;` (a statement
/// may span lines; the last one may omit the `;`). `--` comment lines are skipped.
fn parse_script_file(text: &str) -> Result<ScriptFile, String> {
    let mut sets = Vec::new();
    let mut statements = Vec::new();
    let mut current = String::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        if let Some(meta) = trimmed.strip_prefix('\\') {
            if !current.trim().is_empty() {
                return Err(format!(
                    "line {}: a \\ command inside an unfinished SQL statement",
                    number + 1
                ));
            }
            let mut words = meta.splitn(3, char::is_whitespace);
            match (words.next(), words.next(), words.next()) {
                (Some("set"), Some(name), Some(expr)) if valid_name(name) => {
                    let generator =
                        Generator::parse(expr).map_err(|e| format!("line {}: {e}", number + 1))?;
                    sets.push((name.to_string(), generator));
                }
                _ => {
                    return Err(format!(
                        "line {}: unsupported command {trimmed:?} (only \\set NAME EXPR)",
                        number + 1
                    ))
                }
            }
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(trimmed);
        if let Some(done) = current.strip_suffix(';') {
            statements.push(done.trim().to_string());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        statements.push(current.trim().to_string());
    }
    Ok(ScriptFile { sets, statements })
}

/// Smooth weighted round-robin (as in nginx): weights 3,1 give 0,0,1,0 rather than 0,0,0,1,
/// so a mix is a mix at every time scale.
fn weighted_schedule(weights: &[u32]) -> Result<Vec<u16>, String> {
    if weights.contains(&0) {
        return Err("--weight must be at least 1".into());
    }
    if weights.len() > u16::MAX as usize {
        return Err("too many scripts".into());
    }
    let g = weights.iter().fold(0u64, |g, &w| gcd(g, w as u64));
    let reduced: Vec<i64> = weights.iter().map(|&w| (w as u64 / g) as i64).collect();
    let total: i64 = reduced.iter().sum();
    if total as usize > MAX_SCHEDULE_LEN {
        return Err(format!(
            "weights {weights:?} need a schedule of {total} entries; use smaller weights (at most {MAX_SCHEDULE_LEN} after reduction)"
        ));
    }
    let mut current = vec![0i64; reduced.len()];
    let mut schedule = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(&reduced) {
            *c += w;
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i)))
            .unwrap_or((0, &0));
        current[best] -= total;
        schedule.push(best as u16);
    }
    Ok(schedule)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Workload {
    fn variable(&mut self, name: &str) -> Result<usize, String> {
        if let Some(i) = self.variables.iter().position(|v| v == name) {
            return Ok(i);
        }
        if self.variables.len() == MAX_VARIABLES {
            return Err(format!(
                "at most {MAX_VARIABLES} distinct variables are supported"
            ));
        }
        self.variables.push(name.to_string());
        Ok(self.variables.len() - 1)
    }

    /// Cut `sql` at `:name` references (not `::` casts) and prebuild its messages.
    fn statement(&mut self, sql: &str, index: usize) -> Result<Statement, String> {
        let bytes = sql.as_bytes();
        let mut pieces = Vec::new();
        let mut params: Vec<usize> = Vec::new();
        let mut placeholder_sql = String::with_capacity(sql.len());
        let mut text_start = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b':' && bytes.get(i + 1) == Some(&b':') {
                i += 2;
                continue;
            }
            let starts_name =
                |b: Option<&u8>| matches!(b, Some(c) if c.is_ascii_alphabetic() || *c == b'_');
            if bytes[i] == b':' && starts_name(bytes.get(i + 1)) {
                let end = (i + 1..bytes.len())
                    .find(|&j| !(bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_'))
                    .unwrap_or(bytes.len());
                let name = &sql[i + 1..end];
                let v = self.variable(name)?;
                if text_start < i {
                    pieces.push(Piece::Text(text_start..i));
                }
                pieces.push(Piece::Variable(v));
                placeholder_sql.push_str(&sql[text_start..i]);
                // The same variable twice is the same parameter, as a reader of the SQL expects.
                let n = match params.iter().position(|&p| p == v) {
                    Some(n) => n,
                    None => {
                        params.push(v);
                        params.len() - 1
                    }
                };
                let _ = write!(placeholder_sql, "${}", n + 1);
                text_start = end;
                i = end;
                continue;
            }
            i += 1;
        }
        if text_start < bytes.len() {
            pieces.push(Piece::Text(text_start..bytes.len()));
        }
        placeholder_sql.push_str(&sql[text_start..]);
        if params.len() > MAX_PARAMS {
            return Err(format!(
                "statement {sql:?} has more than {MAX_PARAMS} parameters"
            ));
        }
        if sql.as_bytes().contains(&0) {
            return Err(format!("statement {sql:?} contains a NUL byte"));
        }
        let mut query_message = Vec::new();
        if params.is_empty() {
            encode_query(&mut query_message, sql);
        }
        let mut parse_unnamed = Vec::new();
        encode_parse(&mut parse_unnamed, "", &placeholder_sql, &[]);
        Ok(Statement {
            sql: sql.to_string(),
            pieces,
            query_message,
            params,
            placeholder_sql,
            parse_unnamed,
            prepared_name: format!("rwb{index}"),
        })
    }

    /// Every statement, for prepared mode's once-per-connection Parse.
    pub fn statements(&self) -> impl Iterator<Item = &Statement> {
        self.scripts.iter().flat_map(|s| s.statements.iter())
    }

    /// A cursor for connection number `connection`; seeds differ per connection and run.
    pub fn cursor(&self, connection: usize, seed: u64) -> Cursor {
        let mut rng = seed ^ (connection as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        wyrand(&mut rng);
        Cursor {
            script: 0,
            step: 0,
            schedule_at: connection % self.schedule.len(),
            values: [0; MAX_VARIABLES],
            rng,
        }
    }

    /// Append the next query's messages to `out`. Allocation-free once `out` has capacity.
    pub fn encode_next(&self, cursor: &mut Cursor, out: &mut Vec<u8>) {
        if cursor.step == 0 {
            cursor.script = self.schedule[cursor.schedule_at] as usize;
            cursor.schedule_at += 1;
            if cursor.schedule_at == self.schedule.len() {
                cursor.schedule_at = 0;
            }
            for &(v, generator) in &self.scripts[cursor.script].sets {
                cursor.values[v] = generator.draw(&mut cursor.rng);
            }
        }
        let script = &self.scripts[cursor.script];
        let statement = &script.statements[cursor.step];
        cursor.step += 1;
        if cursor.step == script.statements.len() {
            cursor.step = 0;
        }
        match self.mode {
            Mode::Simple => statement.encode_simple(&cursor.values, out),
            Mode::Extended => {
                out.extend_from_slice(&statement.parse_unnamed);
                statement.encode_bind(&cursor.values, "", out);
                out.extend_from_slice(&self.execute_sync);
            }
            Mode::Prepared => {
                statement.encode_bind(&cursor.values, &statement.prepared_name, out);
                out.extend_from_slice(&self.execute_sync);
            }
        }
    }
}

impl Statement {
    fn encode_simple(&self, values: &[i64; MAX_VARIABLES], out: &mut Vec<u8>) {
        if self.params.is_empty() {
            out.extend_from_slice(&self.query_message);
            return;
        }
        let start = begin_message(out, b'Q');
        for piece in &self.pieces {
            match piece {
                Piece::Text(range) => out.extend_from_slice(&self.sql.as_bytes()[range.clone()]),
                Piece::Variable(v) => out.extend_from_slice(Decimal::new(values[*v]).as_bytes()),
            }
        }
        out.push(0);
        finish_message(out, start);
    }

    fn encode_bind(&self, values: &[i64; MAX_VARIABLES], statement: &str, out: &mut Vec<u8>) {
        let mut digits = [Decimal::default(); MAX_PARAMS];
        for (d, &v) in digits.iter_mut().zip(&self.params) {
            *d = Decimal::new(values[v]);
        }
        let mut params: [Option<&[u8]>; MAX_PARAMS] = [None; MAX_PARAMS];
        for (p, d) in params.iter_mut().zip(&digits[..self.params.len()]) {
            *p = Some(d.as_bytes());
        }
        // All parameters and results in text format: no format codes needed.
        encode_bind(out, "", statement, &[], &params[..self.params.len()], &[]);
    }
}

/// An integer's decimal text on the stack.
#[derive(Clone, Copy, Default)]
struct Decimal {
    buf: [u8; 20],
    start: u8,
}

impl Decimal {
    fn new(v: i64) -> Decimal {
        let mut d = Decimal {
            buf: [0; 20],
            start: 20,
        };
        let mut n = v.unsigned_abs();
        loop {
            d.start -= 1;
            d.buf[d.start as usize] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if v < 0 {
            d.start -= 1;
            d.buf[d.start as usize] = b'-';
        }
        d
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start as usize..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::frontend::FrontendMessage;
    use protocol::wire::split_frame;

    fn messages(bytes: &[u8]) -> Vec<FrontendMessage<'_>> {
        let mut at = 0;
        let mut out = Vec::new();
        while let Some((frame, n)) = split_frame(&bytes[at..], 1 << 20).unwrap() {
            out.push(FrontendMessage::parse(frame).unwrap());
            at += n;
        }
        assert_eq!(at, bytes.len());
        out
    }

    fn spec(sql: &[(&str, u32)], params: &[&str]) -> WorkloadSpec {
        WorkloadSpec {
            sql: sql.iter().map(|(s, w)| (s.to_string(), *w)).collect(),
            params: params
                .iter()
                .map(|p| WorkloadSpec::parse_param(p).unwrap())
                .collect(),
            files: vec![],
        }
    }

    #[test]
    fn decimals() {
        for v in [0, 7, -7, 100000, i64::MAX, i64::MIN] {
            assert_eq!(
                std::str::from_utf8(Decimal::new(v).as_bytes()).unwrap(),
                v.to_string()
            );
        }
    }

    #[test]
    fn generators_stay_in_range() {
        let g = Generator::parse("random(-5, 5)").unwrap();
        assert_eq!(g, Generator::parse("-5..5").unwrap());
        let mut rng = 1;
        let mut seen = [false; 11];
        for _ in 0..10_000 {
            let v = g.draw(&mut rng);
            assert!((-5..=5).contains(&v), "{v}");
            seen[(v + 5) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every value drawn: {seen:?}");
        assert_eq!(Generator::parse("42").unwrap().draw(&mut rng), 42);
        assert!(Generator::parse("5..1").is_err());
        assert!(Generator::parse("random(1)").is_err());
        assert!(Generator::parse("1 + 2")
            .unwrap_err()
            .contains("unsupported"));
    }

    #[test]
    fn simple_mode_substitutes_values_into_the_text() {
        let w = spec(
            &[(
                "SELECT abalance FROM a WHERE aid = :aid AND x::int = :aid",
                1,
            )],
            &["aid=7"],
        )
        .build(Mode::Simple)
        .unwrap();
        let mut out = Vec::new();
        w.encode_next(&mut w.cursor(0, 1), &mut out);
        assert_eq!(
            messages(&out),
            vec![FrontendMessage::Query {
                sql: "SELECT abalance FROM a WHERE aid = 7 AND x::int = 7"
            }]
        );
    }

    #[test]
    fn extended_and_prepared_modes_send_placeholders_and_text_parameters() {
        let s = spec(
            &[("UPDATE a SET b = b + :delta WHERE aid = :aid", 1)],
            &["aid=3", "delta=-9"],
        );
        let w = s.build(Mode::Extended).unwrap();
        let mut out = Vec::new();
        w.encode_next(&mut w.cursor(0, 1), &mut out);
        let msgs = messages(&out);
        assert_eq!(msgs.len(), 4);
        let FrontendMessage::Parse { name: "", sql, .. } = msgs[0] else {
            panic!("{msgs:?}")
        };
        assert_eq!(sql, "UPDATE a SET b = b + $1 WHERE aid = $2");
        let FrontendMessage::Bind(bind) = msgs[1] else {
            panic!()
        };
        assert_eq!(bind.statement, "");
        assert_eq!(
            bind.params().collect::<Vec<_>>(),
            vec![Some(&b"-9"[..]), Some(&b"3"[..])]
        );
        assert_eq!(
            msgs[2],
            FrontendMessage::Execute {
                portal: "",
                max_rows: 0
            }
        );
        assert_eq!(msgs[3], FrontendMessage::Sync);

        let w = s.build(Mode::Prepared).unwrap();
        out.clear();
        w.encode_next(&mut w.cursor(0, 1), &mut out);
        let msgs = messages(&out);
        assert_eq!(msgs.len(), 3);
        let FrontendMessage::Bind(bind) = msgs[0] else {
            panic!()
        };
        assert_eq!(bind.statement, "rwb0");
    }

    #[test]
    fn weights_interleave() {
        assert_eq!(weighted_schedule(&[3, 1]).unwrap(), vec![0, 0, 1, 0]);
        assert_eq!(weighted_schedule(&[2, 2]).unwrap(), vec![0, 1]);
        assert!(weighted_schedule(&[0]).is_err());
        let w = spec(&[("SELECT 1", 3), ("SELECT 2", 1)], &[])
            .build(Mode::Simple)
            .unwrap();
        let mut cursor = w.cursor(0, 9);
        let mut counts = [0; 2];
        for _ in 0..400 {
            let mut out = Vec::new();
            w.encode_next(&mut cursor, &mut out);
            match messages(&out)[0] {
                FrontendMessage::Query { sql: "SELECT 1" } => counts[0] += 1,
                _ => counts[1] += 1,
            }
        }
        assert_eq!(counts, [300, 100]);
    }

    #[test]
    fn script_files_run_in_order_and_draw_per_run() {
        let text = "-- tpcb-ish\n\\set aid random(1, 10)\n\\set delta 5\nBEGIN;\nUPDATE a SET b = b + :delta\n  WHERE aid = :aid;\nEND\n";
        let s = WorkloadSpec {
            files: vec![(text.into(), "f.sql".into(), 1)],
            ..Default::default()
        };
        let w = s.build(Mode::Simple).unwrap();
        let mut cursor = w.cursor(0, 3);
        let mut sqls = Vec::new();
        for _ in 0..3 {
            let mut out = Vec::new();
            w.encode_next(&mut cursor, &mut out);
            let FrontendMessage::Query { sql } = messages(&out)[0] else {
                panic!()
            };
            sqls.push(sql.to_string());
        }
        assert_eq!(sqls[0], "BEGIN");
        assert!(
            sqls[1].starts_with("UPDATE a SET b = b + 5 WHERE aid = "),
            "{}",
            sqls[1]
        );
        assert_eq!(sqls[2], "END");
    }

    #[test]
    fn mistakes_are_named() {
        let e = spec(&[("SELECT :nope", 1)], &[])
            .build(Mode::Simple)
            .unwrap_err();
        assert!(e.contains(":nope"), "{e}");
        assert!(WorkloadSpec::parse_param("aid").is_err());
        assert!(WorkloadSpec::parse_param("1x=3").is_err());
        let bad = WorkloadSpec {
            files: vec![("\\sleep 1\nSELECT 1".into(), "f".into(), 1)],
            ..Default::default()
        };
        assert!(bad.build(Mode::Simple).unwrap_err().contains("line 1"));
        assert!(spec(&[], &[]).build(Mode::Simple).is_err());
    }
}
