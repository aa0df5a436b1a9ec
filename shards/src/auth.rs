//! Client authentication, the way PostgreSQL does it: host-based rules pick a method per
//! connection, users' secrets are stored in PostgreSQL's formats, and failures look the same
//! as PostgreSQL's, down to the SQLSTATE and the message.
//!
//! - [`hba`]: the rules file (`--hba-file`, pg_hba.conf syntax) or the one rule `--auth` makes.
//! - [`secret`]: SCRAM-SHA-256 verifiers and md5 hashes: parsing, deriving, checking cleartext.
//! - `scram`: the sans-IO SCRAM-SHA-256 server exchange, with the channel-binding seam for TLS.
//! - `offload`: PBKDF2 (method `password` against a SCRAM verifier) on a small thread pool.
//! - this file: the users file, the [`AuthStore`] the shards read (swapped whole on SIGHUP),
//!   and [`authenticate`], the exchange on a connection.
//!
//! What crosses threads: only the `Arc<AuthTables>` snapshot, loaded once per connection (never
//! per query), and the SIGHUP thread's swap of it. A connection keeps the tables it started
//! with, so a reload never disturbs an exchange in flight or an open session.

pub mod client;
pub mod hba;
mod offload;
mod scram;
pub mod secret;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use arc_swap::ArcSwap;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use protocol::backend;
use protocol::frontend::SaslInitialResponse;
use protocol::wire::{frame_bytes_needed, split_frame};
use protocol::{PgError, Severity, SqlState};
use zeroize::Zeroizing;

use crate::conn::{End, ReadBuf};
use crate::engine::Engine;
use crate::shard::{fill_random, Shard};
use crate::uring::Peer;

use crate::tls::ClientCert;
pub use client::Credential;
use hba::{ClientCertCheck, Origin};
pub use hba::{Hba, Method};
pub(crate) use scram::ChannelBinding;
use scram::{Outcome, ScramServer, SCRAM_SHA_256_PLUS, SERVER_NONCE_BYTES};
pub use secret::{ScramVerifier, Secret};

/// PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH: the largest password or SASL message accepted.
const MAX_AUTH_MESSAGE_BYTES: usize = 65535;

/// Where the auth tables come from; kept so SIGHUP can read the files again.
#[derive(Clone, Debug)]
pub struct AuthSettings {
    /// `--auth`: the method of the one rule used when there is no `--hba-file`.
    pub method: Method,
    pub hba_file: Option<PathBuf>,
    pub users_file: Option<PathBuf>,
    /// `--user NAME:PASSWORD`, turned into verifiers once at startup. They take precedence
    /// over the users file's entry of the same name.
    pub cli_users: Vec<(String, Secret)>,
    /// Users not in the tables are looked up by the engine (`Engine::lookup_secret`, upstream
    /// mode's `--upstream-auth-query`), so password rules need no user here.
    pub lookup: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            method: Method::Trust,
            hba_file: None,
            users_file: None,
            cli_users: Vec::new(),
            lookup: false,
        }
    }
}

/// One consistent snapshot of the rules and the users.
#[derive(Debug)]
pub(crate) struct AuthTables {
    hba: Hba,
    users: HashMap<String, Secret>,
}

/// The live auth tables, shared by every shard. Readers take a snapshot per connection;
/// [`AuthStore::reload`] replaces it whole, atomically.
pub struct AuthStore {
    settings: AuthSettings,
    current: ArcSwap<AuthTables>,
    /// Keys the mock verifiers of unknown users (PostgreSQL keeps its mock nonce in
    /// pg_control). Random per process: a fake salt is stable while the server runs.
    mock_key: secret::Key,
}

impl AuthStore {
    /// Read and check the files. Every error is one sentence naming the file and line.
    pub fn load(settings: AuthSettings) -> Result<AuthStore, String> {
        let tables = read_tables(&settings)?;
        let mut mock_key = [0u8; secret::SCRAM_KEY_BYTES];
        fill_random(&mut mock_key);
        Ok(AuthStore {
            settings,
            current: ArcSwap::from_pointee(tables),
            mock_key,
        })
    }

    /// Everyone is let in: the default configuration.
    pub fn trust() -> AuthStore {
        AuthStore::load(AuthSettings::default()).expect("trust needs no files")
    }

    /// Read the files again and swap the new tables in; on any error the old ones stay.
    /// Returns a summary for the log.
    pub fn reload(&self) -> Result<String, String> {
        let tables = read_tables(&self.settings)?;
        self.current.store(Arc::new(tables));
        Ok(self.summary())
    }

    /// e.g. "rules from /etc/ringwire/hba (3 rules), 2 users".
    pub fn summary(&self) -> String {
        let tables = self.current.load();
        let rules = match &self.settings.hba_file {
            Some(path) => format!(
                "rules from {} ({} rules)",
                path.display(),
                tables.hba.rules.len()
            ),
            None => format!("--auth {}", self.settings.method),
        };
        format!("{rules}, {} users", tables.users.len())
    }

    /// The snapshot one connection authenticates against.
    pub(crate) fn tables(&self) -> Arc<AuthTables> {
        self.current.load_full()
    }
}

impl fmt::Debug for AuthStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

fn read_tables(settings: &AuthSettings) -> Result<AuthTables, String> {
    let hba = match &settings.hba_file {
        Some(path) => Hba::parse(&read_file(path, "--hba-file")?)
            .map_err(|e| format!("{} {e}", path.display()))?,
        None => Hba::single(settings.method),
    };
    let mut users = match &settings.users_file {
        Some(path) => parse_users(&read_file(path, "--users-file")?)
            .map_err(|e| format!("{} {e}", path.display()))?,
        None => HashMap::new(),
    };
    for (name, secret) in &settings.cli_users {
        users.insert(name.clone(), secret.clone());
    }
    if users.is_empty() && !settings.lookup {
        if let Some(rule) = hba.rules.iter().find(|r| r.method.needs_password()) {
            let whose = match &settings.hba_file {
                Some(path) => format!(
                    "{} line {} uses {}, which",
                    path.display(),
                    rule.line,
                    rule.method
                ),
                None => format!("--auth {}", rule.method),
            };
            return Err(format!(
                "{whose} needs at least one user (--user NAME:PASSWORD or --users-file)"
            ));
        }
    }
    Ok(AuthTables { hba, users })
}

fn read_file(path: &Path, flag: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))
}

/// The users file: one `NAME:SECRET` per line, SECRET a PostgreSQL SCRAM-SHA-256 verifier or
/// md5 hash (`ringwire passwd NAME` prints such a line; so does `SELECT rolname || ':' ||
/// rolpassword FROM pg_authid` on PostgreSQL). The name is everything before the `:` that
/// starts the secret, so it may itself contain `:`. Blank lines and `#` lines are skipped.
pub fn parse_users(text: &str) -> Result<HashMap<String, Secret>, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let split = line
            .rfind(":SCRAM-SHA-256$")
            .or_else(|| line.rfind(":md5"))
            .or_else(|| line.find(':'));
        let Some((name, secret)) = split.map(|at| (&line[..at], &line[at + 1..])) else {
            return Err(format!("line {}: expected NAME:SECRET", i + 1));
        };
        if name.is_empty() {
            return Err(format!("line {}: the user name is empty", i + 1));
        }
        // The error never echoes the secret: it may be a plaintext password.
        let secret = Secret::parse(secret).map_err(|e| {
            format!(
                "line {}: the secret of user \"{name}\" is {e} (`ringwire passwd {name}` makes one)",
                i + 1
            )
        })?;
        if users.insert(name.to_string(), secret).is_some() {
            return Err(format!("line {}: user \"{name}\" is listed twice", i + 1));
        }
    }
    Ok(users)
}

/// Reload the auth tables and the TLS files on every SIGHUP, on a thread of its own
/// (PostgreSQL reloads pg_hba.conf and its SSL files the same way). A file that does not load
/// leaves what was in force and logs one line saying why. Connections are never dropped: each
/// keeps the snapshot (and TLS session) it started with.
pub fn reload_on_sighup(store: Arc<AuthStore>, tls: crate::tls::Tls) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    std::thread::Builder::new()
        .name("auth-reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                match store.reload() {
                    Ok(summary) => log::info!("SIGHUP: authentication reloaded: {summary}"),
                    Err(e) => log::error!(
                        "SIGHUP: authentication NOT reloaded, the previous rules and users stay in force: {e}"
                    ),
                }
                match tls.reload() {
                    Ok(Some(summary)) => log::info!("SIGHUP: TLS reloaded: {summary}"),
                    Ok(None) => {}
                    Err(e) => log::error!(
                        "SIGHUP: TLS NOT reloaded, the previous certificate stays in force: {e}"
                    ),
                }
            }
        })
        .map_err(|e| format!("cannot start the SIGHUP thread: {e}"))?;
    Ok(())
}

/// Who is connecting, from the startup packet and the socket.
pub(crate) struct Client<'a> {
    pub user: &'a str,
    pub database: &'a str,
    /// None only if the socket could not tell (it was already closed).
    pub peer: Option<Peer>,
    /// What TLS the connection runs over: `Unavailable` for plaintext.
    pub binding: ChannelBinding,
    /// The certificate the client showed in the TLS handshake, if any.
    pub client_cert: &'a ClientCert,
}

/// Run the authentication the rules ask for. `startup_len` bytes at the front of `rbuf` are the
/// StartupMessage, kept in place; authentication messages are read behind it and dropped one
/// by one. On success, anything still to send (SASLFinal) is left in `out` for the caller to
/// flush with AuthenticationOk.
///
/// Returns what the exchange leaves to log in upstream as this user (upstream mode; see
/// [`client::Credential`]): the ClientKey of a SCRAM exchange, the md5 hash of an md5 user
/// (whatever the method: the hash alone answers an md5 challenge), or the password sent for
/// method `password`. Nothing for trust/cert users with a SCRAM verifier or no secret.
pub(crate) async fn authenticate<E: Engine, S: AsyncRead + AsyncWrite + Unpin>(
    shard: &Rc<Shard<E>>,
    stream: &mut S,
    rbuf: &mut ReadBuf,
    out: &mut Vec<u8>,
    client: &Client<'_>,
    startup_len: usize,
) -> Result<Credential, End> {
    let store = &shard.config.auth;
    let tables = store.tables();
    let tls = client.binding != ChannelBinding::Unavailable;
    let origin = match client.peer {
        Some(Peer::Tcp(addr)) if tls => Origin::Tls(Some(hba::canonical(addr.ip()))),
        Some(Peer::Tcp(addr)) => Origin::Tcp(Some(hba::canonical(addr.ip()))),
        Some(Peer::Unix) => Origin::Unix,
        None if tls => Origin::Tls(None),
        None => Origin::Tcp(None),
    };
    let who = || {
        format!(
            "host \"{}\", user \"{}\", database \"{}\", {}",
            origin.host(),
            client.user,
            client.database,
            if tls {
                "SSL encryption"
            } else {
                "no encryption"
            }
        )
    };
    let Some(rule) = tables.hba.find(origin, client.database, client.user) else {
        return Err(End::Fatal(PgError::fatal(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            format!("no pg_hba.conf entry for {}", who()),
        )));
    };
    log::debug!(
        "shard {}: {} matched rule line {}: \"{}\"",
        shard.id,
        who(),
        rule.line,
        rule.text
    );
    // PostgreSQL's order: the certificate is required before the method runs, and its name is
    // compared with the user's after the method passed (so a wrong password still costs the
    // full exchange).
    if rule.clientcert != ClientCertCheck::Off {
        match client.client_cert {
            ClientCert::NoRootStore => return Err(End::Fatal(PgError::fatal(
                SqlState::CONFIG_FILE_ERROR,
                "client certificates can only be checked if a root certificate store is available",
            ))),
            ClientCert::Absent => {
                return Err(End::Fatal(PgError::fatal(
                    SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                    "connection requires a valid client certificate",
                )))
            }
            ClientCert::Verified { .. } => {}
        }
    }
    let mut io = AuthIo {
        stream,
        rbuf,
        out,
        startup_len,
    };
    let user = client.user;
    let looked_up;
    let secret = match tables.users.get(user) {
        Some(secret) => Some(secret),
        None if !matches!(rule.method, Method::Trust | Method::Cert | Method::Reject) => {
            looked_up = shard.engine.lookup_secret(user).await.map_err(End::Fatal)?;
            looked_up.as_ref()
        }
        None => None,
    };
    let mut credential = match secret {
        Some(Secret::Md5(hash)) => Credential::Md5(*hash),
        _ => Credential::None,
    };
    let passed = match (rule.method, secret) {
        (Method::Trust | Method::Cert, _) => true,
        (Method::Reject, _) => {
            return Err(End::Fatal(PgError::fatal(
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                format!("pg_hba.conf rejects connection for {}", who()),
            )))
        }
        (Method::Password, _) => {
            let password = io.cleartext_password(backend::write_auth_cleartext).await?;
            if let Ok(text) = std::str::from_utf8(&password) {
                credential = Credential::Cleartext(text.to_string());
            }
            match secret {
                Some(md5 @ Secret::Md5(_)) => md5.verify_cleartext(user, &password),
                Some(Secret::Scram(v)) => verify_off_executor(v.clone(), password).await,
                None => {
                    // An unknown user costs the same PBKDF2 as a known one.
                    let mock = ScramVerifier::mock(user, &store.mock_key);
                    let _ = verify_off_executor(mock, password).await;
                    false
                }
            }
        }
        // PostgreSQL's rule: md5 only when the stored secret is an md5 hash; a SCRAM verifier
        // (or an unknown user) gets SCRAM instead, which every current client speaks.
        (Method::Md5, Some(Secret::Md5(stored))) => {
            let mut salt = [0u8; 4];
            fill_random(&mut salt);
            let sent = io
                .cleartext_password(|out| backend::write_auth_md5(out, salt))
                .await?;
            // The client sends "md5" ‖ hex(md5(hex(md5(password ‖ user)) ‖ salt)).
            let expected = format!(
                "md5{}",
                secret::hex(&secret::md5_parts(&[secret::hex(stored).as_bytes(), &salt]))
            );
            secret::constant_time_eq(expected.as_bytes(), &sent)
        }
        (Method::Md5 | Method::ScramSha256, _) => {
            let (verifier, doomed) = match secret {
                Some(Secret::Scram(v)) => (v.clone(), false),
                // Unknown user, or an md5 secret SCRAM cannot use: a full exchange, then 28P01.
                _ => (ScramVerifier::mock(user, &store.mock_key), true),
            };
            match io.scram(client.binding, verifier.clone(), doomed).await? {
                Some(client_key) => {
                    credential = Credential::Scram {
                        client_key,
                        verifier,
                    };
                    true
                }
                None => false,
            }
        }
    };
    // `cert`, and `clientcert=verify-full` on any method: the certificate names the user.
    let passed = passed
        && (rule.clientcert != ClientCertCheck::VerifyFull
            || matches!(client.client_cert,
                ClientCert::Verified { common_name: Some(cn) } if cn == user));
    if passed {
        return Ok(credential);
    }
    // PostgreSQL words the failure by the rule's method, and only password methods get 28P01.
    let (code, what) = match rule.method {
        Method::Trust => (
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "\"trust\" authentication",
        ),
        Method::Cert => (
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "certificate authentication",
        ),
        _ => (SqlState::INVALID_PASSWORD, "password authentication"),
    };
    Err(End::Fatal(PgError::fatal(
        code,
        format!("{what} failed for user \"{user}\""),
    )))
}

/// Method `password` against a SCRAM verifier: PBKDF2 with the verifier's iterations runs on
/// the [`offload`] pool, so the shard's other connections keep being served meanwhile.
/// Measured cost: see the README's Authentication section.
async fn verify_off_executor(verifier: ScramVerifier, password: Zeroizing<Vec<u8>>) -> bool {
    let started = std::time::Instant::now();
    let result = offload::run(move || {
        let cpu_started = std::time::Instant::now();
        (verifier.verify_cleartext(&password), cpu_started.elapsed())
    })
    .await;
    match result {
        Some((ok, cpu)) => {
            log::debug!(
                "password check against a SCRAM verifier: PBKDF2 {cpu:?}, login waited {:?}",
                started.elapsed()
            );
            ok
        }
        None => {
            log::error!("a password check could not run: no authentication worker thread");
            false
        }
    }
}

fn fatal(e: PgError) -> End {
    End::Fatal(PgError {
        severity: Severity::Fatal,
        ..e
    })
}

/// The connection's I/O during authentication.
struct AuthIo<'a, S> {
    stream: &'a mut S,
    rbuf: &'a mut ReadBuf,
    out: &'a mut Vec<u8>,
    startup_len: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AuthIo<'_, S> {
    async fn send(&mut self) -> Result<(), End> {
        self.stream.write_all(self.out).await?;
        self.stream.flush().await?;
        self.out.clear();
        Ok(())
    }

    /// Read the next message behind the startup packet, hand its tag and body to `f`, and
    /// drop it from the buffer (the startup packet stays at the front).
    async fn next_message<R>(
        &mut self,
        f: impl FnOnce(u8, &[u8]) -> Result<R, PgError>,
    ) -> Result<R, End> {
        loop {
            let pending = &self.rbuf.data()[self.startup_len..];
            match split_frame(pending, MAX_AUTH_MESSAGE_BYTES).map_err(fatal)? {
                Some((frame, n)) => {
                    let result = f(frame.tag, frame.body).map_err(fatal);
                    self.rbuf.remove_after(self.startup_len, n);
                    return result;
                }
                None => {
                    let want = frame_bytes_needed(pending).unwrap_or(5);
                    if !self.rbuf.fill(self.stream, want).await? {
                        return Err(End::ClientClosed);
                    }
                }
            }
        }
    }

    /// Send the request `write_request` writes and read the PasswordMessage that answers it:
    /// PostgreSQL's `recv_password_packet`, errors included.
    async fn cleartext_password(
        &mut self,
        write_request: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Zeroizing<Vec<u8>>, End> {
        write_request(self.out);
        self.send().await?;
        self.next_message(|tag, body| {
            if tag != b'p' {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("expected password response, got message type {tag}"),
                ));
            }
            match body.iter().position(|&b| b == 0) {
                Some(nul) if nul + 1 == body.len() => {}
                _ => {
                    return Err(PgError::fatal(
                        SqlState::PROTOCOL_VIOLATION,
                        "invalid password packet size",
                    ))
                }
            }
            if body.len() == 1 {
                return Err(PgError::fatal(
                    SqlState::INVALID_PASSWORD,
                    "empty password returned by client",
                ));
            }
            Ok(Zeroizing::new(body[..body.len() - 1].to_vec()))
        })
        .await
    }

    /// The SASL exchange with SCRAM-SHA-256: the client's ClientKey when its proof is right,
    /// `None` for a wrong proof (or a doomed exchange); a malformed message is an error.
    async fn scram(
        &mut self,
        binding: ChannelBinding,
        verifier: ScramVerifier,
        doomed: bool,
    ) -> Result<Option<Box<secret::Key>>, End> {
        backend::write_auth_sasl(self.out, binding.mechanisms());
        self.send().await?;
        let mut nonce = [0u8; SERVER_NONCE_BYTES];
        fill_random(&mut nonce);
        let expect_sasl = |tag: u8| {
            if tag == b'p' {
                Ok(())
            } else {
                Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("expected SASL response, got message type {tag}"),
                ))
            }
        };
        let started = self
            .next_message(|tag, body| {
                expect_sasl(tag)?;
                let initial = SaslInitialResponse::parse(body)?;
                ScramServer::check_mechanism(binding, initial.mechanism)?;
                let plus = initial.mechanism == SCRAM_SHA_256_PLUS;
                initial
                    .data
                    .map(|first| {
                        ScramServer::start(binding, plus, verifier.clone(), doomed, first, nonce)
                    })
                    .transpose()
                    .map(|started| started.ok_or(plus))
            })
            .await?;
        let (server, server_first) = match started {
            Ok(started) => started,
            Err(plus) => {
                // No initial response in SASLInitialResponse: ask for it with an empty
                // challenge, as PostgreSQL does.
                backend::write_auth_sasl_continue(self.out, b"");
                self.send().await?;
                self.next_message(|tag, body| {
                    expect_sasl(tag)?;
                    ScramServer::start(binding, plus, verifier, doomed, body, nonce)
                })
                .await?
            }
        };
        backend::write_auth_sasl_continue(self.out, &server_first);
        self.send().await?;
        let outcome = self
            .next_message(|tag, body| {
                expect_sasl(tag)?;
                server.finish_with_key(body)
            })
            .await?;
        match outcome {
            (Outcome::Authenticated(server_final), Some(client_key)) => {
                backend::write_auth_sasl_final(self.out, &server_final);
                Ok(Some(client_key))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG_SCRAM: &str = "SCRAM-SHA-256$4096:E9TMyBl4v8UHmDwB13wEfA==$JhKEz2Z2CvvEk9dBX9TIci3vELBAcJR7wBTkKVeCkW8=:hMj34Vj6TTfmzWpcGHvPgWXbArxwxQYNKZPe/Ng3KV8=";

    #[test]
    fn users_file_lines() {
        let users = parse_users(&format!(
            "# comment\n\n  s:{PG_SCRAM}  \nm:md585f16fa8ca9ff46bbb20e3ebd7b1efb1\nodd:name:md585f16fa8ca9ff46bbb20e3ebd7b1efb1\n"
        ))
        .unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users["s"].to_string(), PG_SCRAM);
        assert!(users.contains_key("odd:name"));
        for (text, want) in [
            (
                "bob:hunter2",
                "line 1: the secret of user \"bob\" is not a SCRAM-SHA-256 verifier",
            ),
            ("bob", "line 1: expected NAME:SECRET"),
            (
                ":md585f16fa8ca9ff46bbb20e3ebd7b1efb1",
                "line 1: the user name is empty",
            ),
            (
                "a:md585f16fa8ca9ff46bbb20e3ebd7b1efb1\na:md585f16fa8ca9ff46bbb20e3ebd7b1efb1",
                "line 2: user \"a\" is listed twice",
            ),
            (
                "a:SCRAM-SHA-256$4096:xx",
                "line 1: the secret of user \"a\" is malformed SCRAM-SHA-256 verifier",
            ),
        ] {
            let e = parse_users(text).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains("hunter2"), "the error echoes the secret: {e}");
        }
    }

    #[test]
    fn load_checks_and_reload_keeps_old_tables_on_error() {
        let e = AuthStore::load(AuthSettings {
            method: Method::Password,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            e,
            "--auth password needs at least one user (--user NAME:PASSWORD or --users-file)"
        );
        // Unless the engine looks users up (`--upstream-auth-query`).
        assert!(AuthStore::load(AuthSettings {
            method: Method::Password,
            lookup: true,
            ..Default::default()
        })
        .is_ok());
        let dir = std::env::temp_dir().join(format!("ringwire-auth-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hba = dir.join("hba");
        let users = dir.join("users");
        std::fs::write(&hba, "host all all 127.0.0.1/32 scram-sha-256\n").unwrap();
        std::fs::write(&users, format!("s:{PG_SCRAM}\n")).unwrap();
        let store = AuthStore::load(AuthSettings {
            method: Method::Trust,
            hba_file: Some(hba.clone()),
            users_file: Some(users.clone()),
            cli_users: vec![("cli".into(), Secret::md5_from_password("cli", "x"))],
            lookup: false,
        })
        .unwrap();
        assert!(
            store.summary().ends_with("(1 rules), 2 users"),
            "{}",
            store.summary()
        );
        let before = store.tables();
        std::fs::write(
            &hba,
            "host all all 127.0.0.1/32 md5\nhost all all all reject\n",
        )
        .unwrap();
        std::fs::write(&users, "s:plaintext\n").unwrap();
        let e = store.reload().unwrap_err();
        assert!(e.contains("line 1: the secret of user \"s\""), "{e}");
        assert!(
            Arc::ptr_eq(&before, &store.tables()),
            "a bad file replaced the tables"
        );
        std::fs::write(&users, format!("s:{PG_SCRAM}\nt:{PG_SCRAM}\n")).unwrap();
        store.reload().unwrap();
        let after = store.tables();
        assert_eq!(after.users.len(), 3);
        assert_eq!(after.hba.rules.len(), 2);
        // The old snapshot is untouched for connections still holding it.
        assert_eq!(before.hba.rules.len(), 1);
        std::fs::write(&hba, "host all all all md5\n").unwrap();
        std::fs::write(&users, "").unwrap();
        let store = AuthStore::load(AuthSettings {
            hba_file: Some(hba.clone()),
            users_file: Some(users.clone()),
            ..Default::default()
        });
        assert!(store
            .unwrap_err()
            .contains("line 1 uses md5, which needs at least one user"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
