//! TLS, the way PostgreSQL offers it: `--tls-cert`/`--tls-key` (PEM) turn it on, an SSLRequest
//! is answered `S` and the handshake runs on the connection's own shard, and a PostgreSQL 17
//! client may skip the SSLRequest (`sslnegotiation=direct`: the ClientHello comes first, with
//! ALPN `postgresql`). `--tls-mode require` refuses plaintext TCP startups with 28000.
//! `--tls-ca` asks clients for a certificate, as PostgreSQL's `ssl_ca_file` does: one that is
//! sent must chain to that CA (else the handshake fails), and `cert`/`clientcert=` rules decide
//! whether one is needed. SIGHUP re-reads the certificate, key and CA ([`Tls::reload`]); a
//! connection keeps the configuration it shook hands with.
//!
//! What the rest of the server sees: a [`Transport`], plain or TLS, behind the same
//! `AsyncRead + AsyncWrite` the connection state machine already speaks, and the
//! [`ChannelBinding`] that authentication offers SCRAM-SHA-256-PLUS with.
//!
//! Unix-domain sockets never get TLS (PostgreSQL answers `N` there too): a local client is
//! already as private as the machine.
//!
//! Memory: a TLS connection holds a rustls `ServerConnection` (its buffers grow to one 16 KiB
//! record each way while data flows), boxed so a plaintext connection pays nothing for it.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use futures_rustls::server::TlsStream;
use futures_rustls::TlsAcceptor;
use protocol::frontend::{self, StartupRequest};
use protocol::{PgError, SqlState};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;

use crate::auth::ChannelBinding;
use crate::conn::{End, ReadBuf};
use crate::uring::Peer;

/// ALPN protocol name PostgreSQL 17 registered for its protocol.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";
/// The first byte of a TLS handshake record: how a direct-TLS client's first packet starts
/// (a startup packet's first byte is the high byte of a length, never 0x16 for a real one).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// `--tls-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// Never offer TLS, even with a certificate: SSLRequest is answered `N`.
    Disable,
    /// Offer TLS when there is a certificate; plaintext is accepted too.
    #[default]
    Allow,
    /// TCP clients must use TLS: a plaintext startup gets FATAL 28000.
    Require,
}

impl FromStr for TlsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<TlsMode, String> {
        match s {
            "disable" => Ok(TlsMode::Disable),
            "allow" => Ok(TlsMode::Allow),
            "require" => Ok(TlsMode::Require),
            _ => Err(format!(
                "unknown TLS mode {s:?}: expected disable, allow or require"
            )),
        }
    }
}

/// The hash of our certificate for `tls-server-end-point` channel binding (RFC 5929): SHA-256
/// unless the certificate is signed with SHA-384 or SHA-512, which are then used (what
/// PostgreSQL's `be_tls_get_certificate_hash` does). Fixed size, so bindings stay `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EndPointHash {
    bytes: [u8; 64],
    len: u8,
}

impl EndPointHash {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub(crate) fn of_certificate(der: &[u8]) -> EndPointHash {
        let mut bytes = [0u8; 64];
        let len = match signature_hash(der) {
            SignatureHash::Sha384 => {
                bytes[..48].copy_from_slice(&sha2::Sha384::digest(der));
                48
            }
            SignatureHash::Sha512 => {
                bytes.copy_from_slice(&sha2::Sha512::digest(der));
                64
            }
            SignatureHash::Sha256OrWeaker => {
                bytes[..32].copy_from_slice(&sha2::Sha256::digest(der));
                32
            }
        };
        EndPointHash { bytes, len }
    }
}

impl std::fmt::Debug for EndPointHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EndPointHash({} bytes)", self.len)
    }
}

enum SignatureHash {
    Sha256OrWeaker,
    Sha384,
    Sha512,
}

/// The hash in the certificate's outer `signatureAlgorithm`. Certificate ::= SEQUENCE {
/// tbsCertificate SEQUENCE, signatureAlgorithm SEQUENCE { OID, ... }, signature }: three DER
/// headers to skip, written out here rather than pulling an X.509 parser in for one OID.
/// Anything unexpected counts as SHA-256, RFC 5929's rule for MD5/SHA-1 and the common case.
fn signature_hash(der: &[u8]) -> SignatureHash {
    // (tag, header length, content length) of the DER element at the front of `b`.
    fn header(b: &[u8]) -> Option<(u8, usize, usize)> {
        let tag = *b.first()?;
        let first = *b.get(1)? as usize;
        if first < 0x80 {
            return Some((tag, 2, first));
        }
        let n = first & 0x7f;
        if n == 0 || n > 4 || b.len() < 2 + n {
            return None;
        }
        let len = b[2..2 + n]
            .iter()
            .fold(0usize, |acc, &x| acc << 8 | x as usize);
        Some((tag, 2 + n, len))
    }
    let oid = (|| {
        let (_, h, _) = header(der)?; // Certificate
        let rest = der.get(h..)?;
        let (_, h, len) = header(rest)?; // tbsCertificate
        let rest = rest.get(h + len..)?;
        let (_, h, _) = header(rest)?; // signatureAlgorithm
        let rest = rest.get(h..)?;
        let (tag, h, len) = header(rest)?;
        (tag == 0x06).then(|| rest.get(h..h + len)).flatten()
    })();
    const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
    const ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
    const RSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
    const RSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
    match oid {
        Some(ECDSA_SHA384 | RSA_SHA384) => SignatureHash::Sha384,
        Some(ECDSA_SHA512 | RSA_SHA512) => SignatureHash::Sha512,
        _ => SignatureHash::Sha256OrWeaker,
    }
}

/// The TLS side of the configuration, loaded and checked before any shard starts.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    pub mode: TlsMode,
    /// None: TLS is not offered (no certificate, or `--tls-mode disable`). Swapped whole by
    /// [`Tls::reload`]; each handshake takes the one in force when it starts.
    server: Option<Arc<ArcSwap<TlsServer>>>,
    files: Option<Arc<TlsFiles>>,
}

#[derive(Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
}

#[derive(Debug)]
struct TlsServer {
    config: Arc<rustls::ServerConfig>,
    end_point: EndPointHash,
    /// Whether client certificates are asked for and verified (`--tls-ca`).
    verifies_clients: bool,
}

/// What the client's certificate showed, for `cert` and `clientcert=` rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClientCert {
    /// No `--tls-ca`: certificates are not asked for, so none can be checked.
    NoRootStore,
    /// Plaintext, or TLS without a certificate from the client.
    Absent,
    /// Sent and verified against `--tls-ca` in the handshake. The subject's first common name
    /// (what PostgreSQL compares with the user name); `None` if there is none, or it is not a
    /// UTF-8 string without NUL bytes.
    Verified { common_name: Option<String> },
}

/// What TLS negotiation leaves for authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Negotiated {
    pub binding: ChannelBinding,
    pub client_cert: ClientCert,
}

impl Negotiated {
    fn plaintext(tls: &Tls) -> Negotiated {
        Negotiated {
            binding: ChannelBinding::Unavailable,
            client_cert: match tls.current() {
                Some(server) if server.verifies_clients => ClientCert::Absent,
                _ => ClientCert::NoRootStore,
            },
        }
    }
}

impl Tls {
    /// Read the certificate chain, key and client CA. Every error is one sentence naming the
    /// file.
    pub fn load(
        mode: TlsMode,
        cert: Option<&Path>,
        key: Option<&Path>,
        ca: Option<&Path>,
    ) -> Result<Tls, String> {
        let (cert, key) = match (cert, key) {
            (Some(c), Some(k)) => (c, k),
            (None, None) if mode == TlsMode::Require => {
                return Err("--tls-mode require needs --tls-cert and --tls-key".into())
            }
            (None, None) if ca.is_some() => {
                return Err("--tls-ca needs --tls-cert and --tls-key".into())
            }
            (None, None) => return Ok(Tls::default_with(mode)),
            (Some(_), None) => return Err("--tls-cert needs --tls-key".into()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".into()),
        };
        let files = TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            ca: ca.map(Path::to_path_buf),
        };
        let server = files.read()?;
        Ok(Tls {
            mode,
            server: (mode != TlsMode::Disable).then(|| Arc::new(ArcSwap::from_pointee(server))),
            files: Some(Arc::new(files)),
        })
    }

    fn default_with(mode: TlsMode) -> Tls {
        Tls {
            mode,
            ..Tls::default()
        }
    }

    /// Read the files again and swap the new configuration in for the next handshakes; on any
    /// error the old one stays. `Ok(None)`: TLS is off, nothing to read. Returns a summary for
    /// the log.
    pub fn reload(&self) -> Result<Option<String>, String> {
        let (Some(server), Some(files)) = (&self.server, &self.files) else {
            return Ok(None);
        };
        server.store(Arc::new(files.read()?));
        Ok(Some(files.summary()))
    }

    /// Whether SSLRequest is answered `S`.
    pub fn enabled(&self) -> bool {
        self.server.is_some()
    }

    fn current(&self) -> Option<Arc<TlsServer>> {
        self.server.as_ref().map(|s| s.load_full())
    }
}

impl TlsFiles {
    fn summary(&self) -> String {
        match &self.ca {
            Some(ca) => format!(
                "certificate {}, client CA {}",
                self.cert.display(),
                ca.display()
            ),
            None => format!("certificate {}", self.cert.display()),
        }
    }

    fn read(&self) -> Result<TlsServer, String> {
        let (cert, key) = (&self.cert, &self.key);
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect())
            .map_err(|e| format!("cannot read --tls-cert {}: {e}", cert.display()))?;
        let Some(leaf) = chain.first() else {
            return Err(format!(
                "--tls-cert {} holds no PEM certificate",
                cert.display()
            ));
        };
        let end_point = EndPointHash::of_certificate(leaf);
        let private = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("cannot read --tls-key {}: {e}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        let builder = match &self.ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for der in CertificateDer::pem_file_iter(ca)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("cannot read --tls-ca {}: {e}", ca.display()))?
                {
                    roots.add(der).map_err(|e| {
                        format!(
                            "--tls-ca {} holds an unusable certificate: {e}",
                            ca.display()
                        )
                    })?;
                }
                if roots.is_empty() {
                    return Err(format!(
                        "--tls-ca {} holds no PEM certificate",
                        ca.display()
                    ));
                }
                // Asked for, not required: the rules say who needs one (PostgreSQL's
                // ssl_ca_file behaves the same). One that is sent must verify.
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, private).map_err(|e| {
            format!(
                "--tls-cert {} and --tls-key {} do not make a usable pair: {e}",
                cert.display(),
                key.display()
            )
        })?;
        // Clients that offer ALPN must offer `postgresql` (rustls then refuses the others with
        // no_application_protocol, as PostgreSQL 17 does); libpq before 17 offers none.
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        Ok(TlsServer {
            config: Arc::new(config),
            end_point,
            verifies_clients: self.ca.is_some(),
        })
    }
}

/// The first common name of a certificate's subject, as PostgreSQL reads it for `cert`.
/// A well-kept DER parser (RustCrypto's x509-cert) rather than our own: this is input from
/// the network.
fn common_name(der: &[u8]) -> Option<String> {
    use x509_cert::der::{Decode, Tag, Tagged};
    const COMMON_NAME: x509_cert::der::oid::ObjectIdentifier =
        x509_cert::der::oid::ObjectIdentifier::new_unwrap("2.5.4.3");
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let value = cert
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|atv| atv.oid == COMMON_NAME)?
        .value
        .clone();
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::TeletexString => {
            let name = std::str::from_utf8(value.value()).ok()?;
            (!name.contains('\0')).then(|| name.to_string())
        }
        _ => None,
    }
}

/// A connection's byte stream: plaintext, or TLS over it. The state machine is generic over
/// its stream, so this one enum is the only place that knows TLS exists.
pub(crate) enum Transport<S> {
    Plain(S),
    Tls(Box<TlsStream<Rewind<S>>>),
    /// The handshake failed or was abandoned (timeout) midway: the socket is gone.
    Closed,
}

/// The bytes of a direct-TLS ClientHello already read while looking for a startup packet,
/// replayed to rustls before the socket's own.
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.len().min(this.prefix.len() - this.at);
            buf[..n].copy_from_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the TLS handshake did not finish",
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Transport<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Transport::Closed => Poll::Ready(Err(closed())),
        }
    }
}

/// # Flushing
/// Over TLS a write may leave ciphertext inside rustls when the socket is full; it goes out on
/// the next write or flush. The state machine flushes after every batch of replies.
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Transport<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Transport::Closed => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Transport::Closed => Poll::Ready(Err(closed())),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_close(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
            Transport::Closed => Poll::Ready(Ok(())),
        }
    }
}

/// Before the startup packet: run the TLS negotiation if TLS is on. Answers SSLRequest `S` and
/// shakes hands (GSSENCRequest `N`), accepts a direct-TLS ClientHello, and enforces `--tls-mode
/// require`. Leaves the first packet that is not a negotiation (StartupMessage, CancelRequest)
/// unconsumed in `rbuf` for the state machine. Returns what authentication can bind to.
///
/// With TLS off, or on a Unix-domain socket, nothing is read here: the state machine answers
/// negotiation requests `N` itself, exactly as before TLS existed.
pub(crate) async fn negotiate<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &Tls,
    stream: &mut Transport<S>,
    rbuf: &mut ReadBuf,
    peer: Option<Peer>,
) -> Result<Negotiated, End> {
    if peer == Some(Peer::Unix) {
        return Ok(Negotiated::plaintext(tls));
    }
    let Some(server) = tls.current() else {
        return Ok(Negotiated::plaintext(tls));
    };
    while rbuf.data().is_empty() {
        if !rbuf.fill(stream, 8).await? {
            return Err(End::ClientClosed);
        }
    }
    if rbuf.data()[0] == TLS_HANDSHAKE_RECORD {
        // Direct TLS (PostgreSQL 17's sslnegotiation=direct): what was read is the start of the
        // ClientHello; rustls gets it first.
        let prefix = rbuf.data().to_vec();
        rbuf.consume(prefix.len());
        handshake(&server, stream, prefix).await?;
        if alpn(stream) != Some(ALPN_POSTGRESQL) {
            return Err(End::Fatal(PgError::fatal(
                SqlState::PROTOCOL_VIOLATION,
                "received direct SSL connection request without ALPN protocol negotiation extension",
            )));
        }
        return Ok(negotiated(&server, stream));
    }
    loop {
        let (body_len, n) = loop {
            match frontend::split_startup(rbuf.data()).map_err(End::Fatal)? {
                Some((body, n)) => break (body.len(), n),
                None => {
                    if !rbuf.fill(stream, 8).await? {
                        return Err(End::ClientClosed);
                    }
                }
            }
        };
        match StartupRequest::parse(&rbuf.data()[4..4 + body_len]).map_err(End::Fatal)? {
            StartupRequest::SslRequest => {
                // Bytes pipelined after the request, before our answer, would be read as if
                // they came over TLS (CVE-2021-23214): refuse them.
                if rbuf.data().len() > n {
                    return Err(End::Fatal(PgError::fatal(
                        SqlState::PROTOCOL_VIOLATION,
                        "received unencrypted data after SSL request",
                    )));
                }
                rbuf.consume(n);
                stream.write_all(b"S").await?;
                handshake(&server, stream, Vec::new()).await?;
                return Ok(negotiated(&server, stream));
            }
            StartupRequest::GssEncRequest => {
                if rbuf.data().len() > n {
                    return Err(End::Fatal(PgError::fatal(
                        SqlState::PROTOCOL_VIOLATION,
                        "received unencrypted data after GSSAPI encryption request",
                    )));
                }
                rbuf.consume(n);
                stream.write_all(b"N").await?;
            }
            StartupRequest::Startup { .. } if tls.mode == TlsMode::Require => {
                return Err(End::Fatal(PgError::fatal(
                    SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                    "this server accepts TCP connections only over TLS (--tls-mode require): connect with sslmode=require",
                )));
            }
            // CancelRequests need no TLS, as in PostgreSQL: the key is the secret.
            StartupRequest::Startup { .. } | StartupRequest::Cancel { .. } => {
                return Ok(Negotiated::plaintext(tls))
            }
        }
    }
}

async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    server: &TlsServer,
    stream: &mut Transport<S>,
    prefix: Vec<u8>,
) -> Result<(), End> {
    let Transport::Plain(inner) = std::mem::replace(stream, Transport::Closed) else {
        unreachable!("TLS is negotiated once, on a plaintext stream");
    };
    let rewind = Rewind {
        prefix,
        at: 0,
        inner,
    };
    // A failed handshake leaves `Closed`: rustls has sent its alert, nothing more can be said.
    let tls = TlsAcceptor::from(server.config.clone())
        .accept(rewind)
        .await?;
    *stream = Transport::Tls(Box::new(tls));
    Ok(())
}

/// After a handshake with `server`: the channel binding and the client's certificate.
fn negotiated<S>(server: &TlsServer, stream: &Transport<S>) -> Negotiated {
    let client_cert = if !server.verifies_clients {
        ClientCert::NoRootStore
    } else {
        match stream {
            // rustls verified the chain in the handshake (or failed it); the leaf is first.
            Transport::Tls(s) => match s.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => ClientCert::Verified {
                    common_name: common_name(leaf),
                },
                _ => ClientCert::Absent,
            },
            _ => ClientCert::Absent,
        }
    };
    Negotiated {
        binding: ChannelBinding::TlsServerEndPoint(server.end_point),
        client_cert,
    }
}

fn alpn<S>(stream: &Transport<S>) -> Option<&[u8]> {
    match stream {
        Transport::Tls(s) => s.get_ref().1.alpn_protocol(),
        _ => None,
    }
}
