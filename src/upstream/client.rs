//! ringwire as a client of the upstream server: the startup exchange (trust, cleartext, md5,
//! SCRAM-SHA-256), and a buffer of the server's replies framed with `protocol::wire`.

use std::io;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use protocol::backend::{BackendMessage, ErrorFields};
use protocol::frontend;
use protocol::wire::{split_frame, Frame};
use protocol::{PgError, SqlState};
use shards::auth::client::{
    md5_response, md5_response_from_hash, Credential, ScramClient, SCRAM_SHA_256,
};
use shards::connect::Address;

use super::pool::passes_over;
use super::UpstreamConfig;

/// PostgreSQL's own limit on a message (MaxAllocSize): a longer length field means the stream
/// is out of step.
pub const MAX_BACKEND_MESSAGE_BYTES: usize = 1 << 30;
const REPLY_BUF_BYTES: usize = 16 << 10;

/// Replies received from the upstream server, not yet handled: `buf[start..end]`.
pub struct ReplyBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf {
            buf: vec![0; REPLY_BUF_BYTES],
            start: 0,
            end: 0,
        }
    }
}

impl ReplyBuf {
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        debug_assert!(
            self.start + n <= self.end,
            "consumed more than was buffered"
        );
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// The complete message at the front, if there is one, and its length on the wire.
    pub fn frame(&self) -> io::Result<Option<(Frame<'_>, usize)>> {
        split_frame(self.data(), MAX_BACKEND_MESSAGE_BYTES)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.message.to_string()))
    }

    /// Read more. The end of the stream is an error: a server never closes mid-exchange
    /// without reason.
    pub async fn fill<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> io::Result<()> {
        let want = protocol::wire::frame_bytes_needed(self.data()).unwrap_or(5);
        if self.start > 0 && self.end + want > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end + want > self.buf.len() {
            let len = (self.end + want)
                .max(self.buf.len() * 2)
                .max(REPLY_BUF_BYTES);
            self.buf.resize(len, 0);
        }
        let n = stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the upstream server closed the connection",
            ));
        }
        self.end += n;
        Ok(())
    }

    /// Add replies another task read (a pipe's reader hands a unit its replies).
    pub fn append(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.end + bytes.len() > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end + bytes.len() > self.buf.len() {
            self.buf.resize(self.end + bytes.len(), 0);
        }
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// A buffer that owns no memory yet (it grows on first use): for a connection's buffer
    /// that is handed over, where `Default` would allocate and zero 16 KiB only to drop it.
    pub fn empty() -> Self {
        ReplyBuf {
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// Give back a buffer that grew for one large message.
    pub fn shrink_if_idle(&mut self) {
        if self.start == self.end && self.buf.len() > 1 << 20 {
            self.buf = vec![0; REPLY_BUF_BYTES];
        }
    }
}

/// What the server told us at startup.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub parameters: Vec<(String, String)>,
    pub process_id: i32,
    pub secret_key: i32,
}

/// Who ringwire logs in upstream as, and what it answers a password request with.
pub struct Login<'a> {
    pub address: &'a Address,
    pub user: &'a str,
    pub database: &'a str,
    pub credential: &'a Credential,
}

impl<'a> Login<'a> {
    /// As the upstream URL's user, with the URL's password if it has one.
    pub fn url(config: &'a UpstreamConfig, credential: &'a Credential) -> Login<'a> {
        Login {
            address: &config.address,
            user: &config.user,
            database: &config.database,
            credential,
        }
    }
}

/// The URL's password as a [`Credential`] (ringwire's own logins, and `--upstream-login url`).
pub fn url_credential(config: &UpstreamConfig) -> Credential {
    match &config.password {
        Some(p) => Credential::Cleartext(p.clone()),
        None => Credential::None,
    }
}

/// Why a login failed, with the SQLSTATE the client gets: the server's own for a refusal
/// (28P01, 28000, 3D000, 53300...), 28000 when ringwire holds nothing that answers what the
/// server asks, 08006 when the server cannot be reached or the exchange breaks.
#[derive(Clone, Debug)]
pub struct LoginError {
    pub code: SqlState,
    pub message: String,
    /// The server's DETAIL (`List syntax is invalid.`), or ringwire's own on a `local` error.
    pub detail: Option<String>,
    /// An error ringwire made itself while a client waited for a connection (its statement
    /// was cancelled, or the wait timed out): nothing was asked of the server, which says
    /// nothing about that server's health.
    pub local: bool,
}

impl LoginError {
    pub fn new(code: SqlState, message: String) -> LoginError {
        LoginError {
            code,
            message,
            detail: None,
            local: false,
        }
    }

    /// See [`LoginError::local`].
    pub fn local(code: SqlState, message: String, detail: String) -> LoginError {
        LoginError {
            code,
            message,
            detail: Some(detail),
            local: true,
        }
    }

    /// The server's refusal, in its own words (and DETAIL) and with its SQLSTATE, so a
    /// client sees what PostgreSQL would have told it.
    fn refused(fields: &ErrorFields<'_>) -> LoginError {
        let code = <[u8; 5]>::try_from(fields.code().as_bytes())
            .map(SqlState)
            .unwrap_or(SqlState::CONNECTION_FAILURE);
        LoginError {
            detail: fields.get(b'D').map(str::to_string),
            ..LoginError::new(code, fields.message().to_string())
        }
    }

    fn broken(message: String) -> LoginError {
        LoginError::new(SqlState::CONNECTION_FAILURE, message)
    }

    /// As the ERROR a statement that could not get a connection ends with.
    pub fn to_error(&self) -> PgError {
        let error = PgError::new(self.code, self.message.clone());
        match &self.detail {
            Some(detail) => error.with_detail(detail.clone()),
            None => error,
        }
    }

    /// As the FATAL a client gets at its own login.
    pub fn to_fatal(&self) -> PgError {
        let fatal = PgError::fatal(self.code, self.message.clone());
        match &self.detail {
            Some(detail) => fatal.with_detail(detail.clone()),
            None => fatal,
        }
    }
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<LoginError> for String {
    fn from(e: LoginError) -> String {
        e.message
    }
}

/// Run the startup exchange as the URL's user (ringwire's own connections: the startup
/// check, replica pollers).
pub async fn startup<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    config: &UpstreamConfig,
) -> Result<Handshake, String> {
    let credential = url_credential(config);
    login(stream, buf, &Login::url(config, &credential))
        .await
        .map_err(|e| refused(config, &e))
}

fn refused(config: &UpstreamConfig, e: &LoginError) -> String {
    format!(
        "{} refused the connection: {} ({})",
        config.address,
        e.message,
        String::from_utf8_lossy(&e.code.0)
    )
}

/// Run the startup exchange on a fresh stream as `who`, up to the first ReadyForQuery.
pub async fn login<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    who: &Login<'_>,
) -> Result<Handshake, LoginError> {
    let address = who.address;
    let io_err = |e: io::Error| LoginError::broken(format!("{address}: {e}"));
    let broken = |e: String| LoginError::broken(format!("{address}: {e}"));
    let mut out = Vec::new();
    frontend::encode_startup(
        &mut out,
        frontend::PROTOCOL_3_0,
        // No application_name: RESET ALL returns a pooled connection to its startup values,
        // and a client that set none must see PostgreSQL's default (''), not ours.
        &[("user", who.user), ("database", who.database)],
    );
    stream.write_all(&out).await.map_err(io_err)?;
    let mut handshake = Handshake::default();
    let mut scram: Option<ScramClient> = None;
    let user = who.user;
    let cannot = |asked: &str| {
        LoginError::new(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            format!(
                "the upstream server {address} asks for {asked} for user \"{user}\", and ringwire \
             holds {:?} for this login",
                who.credential
            ),
        )
    };
    loop {
        let len = loop {
            if let Some((_, len)) = buf.frame().map_err(io_err)? {
                break len;
            }
            buf.fill(stream).await.map_err(io_err)?;
        };
        let (frame, _) = buf
            .frame()
            .map_err(io_err)?
            .expect("a whole frame is buffered");
        let msg = BackendMessage::parse(frame)
            .map_err(|e| broken(format!("malformed message at startup: {}", e.message)))?;
        out.clear();
        match msg {
            BackendMessage::AuthenticationOk => {}
            BackendMessage::AuthenticationCleartextPassword => match who.credential {
                Credential::Cleartext(p) => frontend::encode_password(&mut out, p),
                _ => return Err(cannot("a cleartext password")),
            },
            BackendMessage::AuthenticationMd5Password { salt } => {
                let answer = match who.credential {
                    Credential::Cleartext(p) => md5_response(user, p, salt),
                    Credential::Md5(hash) => md5_response_from_hash(hash, salt),
                    _ => return Err(cannot("an md5 password")),
                };
                frontend::encode_password(&mut out, &answer);
            }
            BackendMessage::AuthenticationSasl { mechanisms } => {
                if !mechanisms.contains(&SCRAM_SHA_256) {
                    return Err(broken(format!(
                        "offers SASL mechanisms {mechanisms:?}, ringwire speaks {SCRAM_SHA_256}"
                    )));
                }
                let client = match who.credential {
                    Credential::Cleartext(p) => ScramClient::new(p),
                    Credential::Scram {
                        client_key,
                        verifier,
                    } => ScramClient::with_client_key(client_key.clone(), verifier.clone()),
                    _ => return Err(cannot("a SCRAM-SHA-256 proof")),
                };
                frontend::encode_sasl_initial_response(
                    &mut out,
                    SCRAM_SHA_256,
                    &client.client_first(),
                );
                scram = Some(client);
            }
            BackendMessage::AuthenticationSaslContinue { data } => {
                let client = scram
                    .as_mut()
                    .ok_or_else(|| broken("SASLContinue before SASL".into()))?;
                let reply = client.server_first(data).map_err(|e| {
                    LoginError::new(
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                        format!("{address}, user \"{user}\": {e}"),
                    )
                })?;
                frontend::encode_sasl_response(&mut out, &reply);
            }
            BackendMessage::AuthenticationSaslFinal { data } => {
                let client = scram
                    .as_ref()
                    .ok_or_else(|| broken("SASLFinal before SASL".into()))?;
                client.server_final(data).map_err(broken)?;
            }
            BackendMessage::ParameterStatus { name, value } => {
                handshake
                    .parameters
                    .push((name.to_string(), value.to_string()));
            }
            BackendMessage::BackendKeyData {
                process_id,
                secret_key,
            } => {
                handshake.process_id = process_id;
                handshake.secret_key = secret_key;
            }
            BackendMessage::ReadyForQuery { .. } => {
                buf.consume(len);
                return Ok(handshake);
            }
            BackendMessage::ErrorResponse(fields) => {
                // The server's own words and SQLSTATE, so a client refused upstream sees what
                // PostgreSQL would have told it.
                return Err(LoginError::refused(&fields));
            }
            BackendMessage::NoticeResponse(_) | BackendMessage::NegotiateProtocolVersion { .. } => {
            }
            other => return Err(broken(format!("unexpected message at startup: {other:?}"))),
        }
        buf.consume(len);
        if !out.is_empty() {
            stream.write_all(&out).await.map_err(io_err)?;
        }
    }
}

/// Run `sql` as a simple Query and return the first column of its first row (`None` for no
/// row or NULL); an ErrorResponse is the error, with the server's SQLSTATE.
pub async fn simple_value<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    sql: &str,
) -> Result<Option<String>, LoginError> {
    let mut out = Vec::with_capacity(sql.len() + 6);
    frontend::encode_query(&mut out, sql);
    first_row(stream, buf, &out, false).await
}

/// Run `sql` with one text parameter (`$1`) over the extended protocol, unnamed statement and
/// portal, and return the last column of its first row (`None` for no row or NULL).
pub async fn value_for<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    sql: &str,
    param: &str,
) -> Result<Option<String>, String> {
    let mut out = Vec::with_capacity(sql.len() + param.len() + 64);
    frontend::encode_parse(&mut out, "", sql, &[]);
    frontend::encode_bind(&mut out, "", "", &[], &[Some(param.as_bytes())], &[]);
    frontend::encode_execute(&mut out, "", 0);
    frontend::encode_empty(&mut out, b'S');
    first_row(stream, buf, &out, true)
        .await
        .map_err(String::from)
}

/// Run each of `sqls` as a simple Query of its own, all sent in one write (one round trip):
/// for each, what [`simple_value`] returns for it. Each is its own implicit transaction, so
/// an error in one leaves the others alone. Ends early, with that error last, once the
/// connection broke or the server is going away ([`passes_over`]).
pub async fn simple_values<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    sqls: &[&str],
) -> Vec<Result<Option<String>, LoginError>> {
    let mut out = Vec::with_capacity(sqls.iter().map(|s| s.len() + 6).sum());
    for sql in sqls {
        frontend::encode_query(&mut out, sql);
    }
    if let Err(e) = stream.write_all(&out).await {
        return vec![Err(LoginError::broken(e.to_string()))];
    }
    let mut answers = Vec::with_capacity(sqls.len());
    for _ in sqls {
        let answer = read_first_row(stream, buf, false).await;
        let broken = answer.as_ref().is_err_and(passes_over);
        answers.push(answer);
        if broken {
            break;
        }
    }
    answers
}

/// Send `request` (ending in a Query or Sync) and read up to its ReadyForQuery: the first (or
/// `last`) column of the first row. An ErrorResponse is an `Err` with its SQLSTATE, and the
/// connection is idle again (only an I/O error or a FATAL leaves it unusable).
async fn first_row<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    request: &[u8],
    last: bool,
) -> Result<Option<String>, LoginError> {
    stream
        .write_all(request)
        .await
        .map_err(|e| LoginError::broken(e.to_string()))?;
    read_first_row(stream, buf, last).await
}

/// [`first_row`]'s reading half.
async fn read_first_row<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    last: bool,
) -> Result<Option<String>, LoginError> {
    let broken = |e: &dyn std::fmt::Display| LoginError::broken(e.to_string());
    let mut value = None;
    let mut error = None;
    loop {
        let len = loop {
            if let Some((_, len)) = buf.frame().map_err(|e| broken(&e))? {
                break len;
            }
            buf.fill(stream).await.map_err(|e| broken(&e))?;
        };
        let (frame, _) = buf
            .frame()
            .map_err(|e| broken(&e))?
            .expect("a whole frame is buffered");
        match BackendMessage::parse(frame).map_err(|e| broken(&e.message))? {
            BackendMessage::DataRow { values } if value.is_none() => {
                let column = if last { values.last() } else { values.first() };
                value = Some(
                    column
                        .copied()
                        .flatten()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                );
            }
            BackendMessage::ErrorResponse(fields) => {
                if fields.severity() == "FATAL" || fields.severity() == "PANIC" {
                    return Err(LoginError::refused(&fields));
                }
                error = Some(LoginError::refused(&fields));
            }
            BackendMessage::ReadyForQuery { .. } => {
                buf.consume(len);
                return match error {
                    Some(e) => Err(e),
                    None => Ok(value.flatten()),
                };
            }
            _ => {}
        }
        buf.consume(len);
    }
}

/// A WAL position as PostgreSQL prints it (`16/B374D848`), as one number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    Some(
        u64::from(u32::from_str_radix(hi, 16).ok()?) << 32
            | u64::from(u32::from_str_radix(lo, 16).ok()?),
    )
}

/// A blocking socket seen as `AsyncRead + AsyncWrite` (every poll completes at once), so the
/// startup exchange can be run once from `main` before any shard starts, to check the upstream
/// URL and learn the server's parameters.
pub struct Blocking<T>(pub T);

impl<T: io::Read + Unpin> AsyncRead for Blocking<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::task::Poll::Ready(self.get_mut().0.read(buf))
    }
}

impl<T: io::Write + Unpin> AsyncWrite for Blocking<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::task::Poll::Ready(self.get_mut().0.write(buf))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(self.get_mut().0.flush())
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Connect once with a blocking socket and run the startup exchange: checks the URL and
/// credentials before the shards start, and returns the server's parameters and the value
/// of `query` if one is given. Of several hosts, the first that will do, as
/// `Pool::open_on_some_host` picks them (a host that cannot be reached or takes no writes when
/// writes are wanted is passed over; a refused login is the answer).
///
/// `auth_query` (`--upstream-auth-query`), if given, is run once with the URL's user as `$1`,
/// so a query the server rejects is a startup error rather than every client's FATAL.
pub fn probe(
    config: &UpstreamConfig,
    query: Option<&str>,
    auth_query: Option<&str>,
) -> Result<(Handshake, Option<String>), String> {
    if config.more_hosts.is_empty() && !config.read_write {
        return probe_host(config, query, auth_query).map_err(|(_, e)| e);
    }
    let mut passed_over = Vec::new();
    for address in config.hosts() {
        let one = UpstreamConfig {
            address: address.clone(),
            more_hosts: Vec::new(),
            ..config.clone()
        };
        match probe_host(&one, query, auth_query) {
            Ok((hs, value)) => match super::pool::read_only_why(&hs.parameters) {
                Some(why) if config.read_write => passed_over.push(format!("{address}: {why}")),
                _ => return Ok((hs, value)),
            },
            Err((true, e)) => passed_over.push(e),
            Err((false, e)) => return Err(e),
        }
    }
    Err(super::pool::no_host(config.read_write, &passed_over))
}

/// [`probe`] on `config.address` alone. The error says whether the next of several hosts
/// should be tried: it could not be reached, or is starting up or shutting down
/// (`Pool::open_on_some_host` decides the same way).
fn probe_host(
    config: &UpstreamConfig,
    query: Option<&str>,
    auth_query: Option<&str>,
) -> Result<(Handshake, Option<String>), (bool, String)> {
    use shards::connect::Address;
    let timeout = std::time::Duration::from_secs(10);
    let mut buf = ReplyBuf::default();
    let unreachable = |e: io::Error| {
        (
            true,
            format!(
                "cannot connect to the upstream server {}: {e}",
                config.address
            ),
        )
    };
    match &config.address {
        Address::Tcp(addr) => {
            let s = std::net::TcpStream::connect_timeout(addr, timeout).map_err(unreachable)?;
            s.set_read_timeout(Some(timeout)).map_err(unreachable)?;
            let mut s = Blocking(s);
            futures_lite::future::block_on(probe_on(&mut s, &mut buf, config, query, auth_query))
        }
        Address::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path).map_err(unreachable)?;
            s.set_read_timeout(Some(timeout)).map_err(unreachable)?;
            let mut s = Blocking(s);
            futures_lite::future::block_on(probe_on(&mut s, &mut buf, config, query, auth_query))
        }
    }
}

async fn probe_on<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut ReplyBuf,
    config: &UpstreamConfig,
    query: Option<&str>,
    auth_query: Option<&str>,
) -> Result<(Handshake, Option<String>), (bool, String)> {
    let credential = url_credential(config);
    let handshake = login(stream, buf, &Login::url(config, &credential))
        .await
        .map_err(|e| (super::pool::passes_over(&e), refused(config, &e)))?;
    let value = match query {
        Some(sql) => simple_value(stream, buf, sql)
            .await
            .map_err(|e| (true, format!("{}: {sql}: {e}", config.address)))?,
        None => None,
    };
    if let Some(sql) = auth_query {
        let found = value_for(stream, buf, sql, &config.user)
            .await
            .map_err(|e| {
                (
                    false,
                    format!("--upstream-auth-query failed on {}: {e}", config.address),
                )
            })?;
        if let Some(text) = found {
            shards::auth::Secret::parse(&text).map_err(|e| {
                (
                    false,
                    format!(
                        "--upstream-auth-query for user {:?} returned a value that is not a \
                         SCRAM-SHA-256 verifier or md5 hash: {e}",
                        config.user
                    ),
                )
            })?;
        }
    }
    Ok((handshake, value))
}

/// Ask the server to cancel what backend `process_id` runs (a CancelRequest on a new
/// connection, as libpq does). Best effort: the server never answers it.
pub async fn send_cancel(address: &Address, process_id: i32, secret_key: i32) {
    let mut out = Vec::with_capacity(16);
    frontend::encode_cancel(&mut out, process_id, &secret_key.to_be_bytes());
    match shards::connect::connect(address).await {
        Ok(mut s) => {
            let _ = s.write_all(&out).await;
            // Wait for the server to close it, so the request is read before we drop it.
            let mut b = [0u8; 1];
            let _ = s.read(&mut b).await;
        }
        Err(e) => log::warn!("cannot send a cancel request to {address}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lsn() {
        assert_eq!(super::parse_lsn("0/0"), Some(0));
        assert_eq!(super::parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(super::parse_lsn("16B374D848"), None);
        assert!(super::parse_lsn("1/0") > super::parse_lsn("0/FFFFFFFF"));
    }
}
