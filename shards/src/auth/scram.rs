//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL runs it inside its SASL
//! messages, sans-IO: bytes of the client's messages in, bytes of the server's out.
//!
//! PostgreSQL's departures from the RFCs, kept here: the user name in the exchange (`n=`) is
//! ignored (the startup packet's user counts); an unknown user still gets a full exchange
//! against a mock verifier, and fails only at the proof; errors are PostgreSQL's, word for
//! word, with its SQLSTATEs.
//!
//! Channel binding, as PostgreSQL's `auth-scram.c` does it: without TLS only `SCRAM-SHA-256` is
//! offered, and the GS2 headers `n,,` ("client does not support binding") and `y,,` ("client
//! supports it, thinks the server does not") are accepted, `p=` is refused. Over TLS
//! `SCRAM-SHA-256-PLUS` is offered first, with `tls-server-end-point` (RFC 5929: the hash of
//! the server's certificate, which the client checks against the certificate it saw, so a
//! man in the middle with another certificate fails). Then `p=tls-server-end-point` must come
//! with PLUS and the client-final-message must carry the hash; `n,,` with plain SCRAM-SHA-256
//! is accepted; `y,,` is refused with 28000 (the client was made to believe there is no
//! binding: a downgrade).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use protocol::{PgError, SqlState};

use super::secret::{constant_time_eq, hmac, sha256, Key, ScramVerifier, SCRAM_KEY_BYTES};

pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
pub const SCRAM_SHA_256_PLUS: &str = "SCRAM-SHA-256-PLUS";
/// The GS2 header of a client binding to the certificate; the client-final-message's `c=`
/// is the base64 of this header followed by the certificate hash.
const END_POINT_GS2_HEADER: &[u8] = b"p=tls-server-end-point,,";
/// PostgreSQL's SCRAM_RAW_NONCE_LEN: random bytes in the server's part of the nonce.
pub const SERVER_NONCE_BYTES: usize = 18;

/// What the transport can bind the exchange to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelBinding {
    /// No TLS: nothing to bind to.
    Unavailable,
    /// TLS: `tls-server-end-point`, the hash of our certificate (see `crate::tls`).
    TlsServerEndPoint(crate::tls::EndPointHash),
}

impl ChannelBinding {
    /// The mechanisms to list in AuthenticationSASL, best first.
    pub fn mechanisms(self) -> &'static [&'static str] {
        match self {
            ChannelBinding::Unavailable => &[SCRAM_SHA_256],
            ChannelBinding::TlsServerEndPoint(_) => &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256],
        }
    }

    /// Whether the client's chosen mechanism is one we offered. `SCRAM-SHA-256-PLUS` is not
    /// without TLS.
    fn accepts(self, mechanism: &str) -> bool {
        self.mechanisms().contains(&mechanism)
    }
}

/// The exchange after the server-first-message was sent.
pub struct ScramServer {
    verifier: ScramVerifier,
    /// The exchange must fail whatever the proof (unknown user, or no SCRAM verifier).
    doomed: bool,
    /// The GS2 channel-binding flag the client sent: `n`, `y` or `p`.
    cbind_flag: u8,
    /// The certificate hash the client must repeat, when it chose SCRAM-SHA-256-PLUS.
    bound_to: Option<crate::tls::EndPointHash>,
    /// client-first-message-bare ‖ "," ‖ server-first-message ‖ "," : the start of
    /// AuthMessage.
    auth_message_prefix: Vec<u8>,
    /// Client nonce ‖ server nonce, which the client-final-message must repeat.
    nonce: Vec<u8>,
}

/// How the exchange ended when it was well-formed.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The proof is right: send this server-final-message (`v=...`) in AuthenticationSASLFinal.
    Authenticated(Vec<u8>),
    /// Wrong password, unknown user or a user without a SCRAM verifier: FATAL 28P01.
    Failed,
}

impl ScramServer {
    /// Check the mechanism a SASLInitialResponse named.
    pub fn check_mechanism(binding: ChannelBinding, mechanism: &str) -> Result<(), PgError> {
        if binding.accepts(mechanism) {
            Ok(())
        } else {
            Err(PgError::fatal(
                SqlState::PROTOCOL_VIOLATION,
                "client selected an invalid SASL authentication mechanism",
            ))
        }
    }

    /// Read the client-first-message and build the server-first-message. `doomed` exchanges
    /// run the same steps and fail at the end. `plus`: the client chose SCRAM-SHA-256-PLUS
    /// (already checked against `binding` by [`ScramServer::check_mechanism`]).
    pub fn start(
        binding: ChannelBinding,
        plus: bool,
        verifier: ScramVerifier,
        doomed: bool,
        client_first: &[u8],
        server_nonce_raw: [u8; SERVER_NONCE_BYTES],
    ) -> Result<(ScramServer, Vec<u8>), PgError> {
        check_message(client_first)?;
        let mut p = Parser(client_first);
        let cbind_flag = p.peek();
        let bound_to = match (binding, plus) {
            (ChannelBinding::TlsServerEndPoint(hash), true) => Some(hash),
            _ => None,
        };
        match cbind_flag {
            b'n' | b'y' => {
                if bound_to.is_some() {
                    return Err(malformed("The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data."));
                }
                if cbind_flag == b'y' && binding != ChannelBinding::Unavailable {
                    return Err(PgError::fatal(
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                        "SCRAM channel binding negotiation error",
                    )
                    .with_detail("The client supports SCRAM channel binding but thinks the server does not.  However, this server does support channel binding."));
                }
                p.advance(1);
                if p.peek() != b',' {
                    return Err(malformed(format!(
                        "Comma expected, but found character \"{}\".",
                        sanitize_char(p.peek())
                    )));
                }
                p.advance(1);
            }
            b'p' => {
                if bound_to.is_none() {
                    return Err(malformed(
                        "The client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data.",
                    ));
                }
                let kind = p.attr_value(b'p')?;
                if kind != b"tls-server-end-point" {
                    return Err(PgError::fatal(
                        SqlState::PROTOCOL_VIOLATION,
                        format!(
                            "unsupported SCRAM channel-binding type \"{}\"",
                            String::from_utf8_lossy(kind)
                        ),
                    ));
                }
            }
            other => {
                return Err(malformed(format!(
                    "Unexpected channel-binding flag \"{}\".",
                    sanitize_char(other)
                )))
            }
        }
        if p.peek() == b'a' {
            return Err(PgError::fatal(
                SqlState::FEATURE_NOT_SUPPORTED,
                "client uses authorization identity, but it is not supported",
            ));
        }
        if p.peek() != b',' {
            return Err(malformed(format!(
                "Unexpected attribute \"{}\" in client-first-message.",
                sanitize_char(p.peek())
            )));
        }
        p.advance(1);
        let bare = p.0;
        if p.peek() == b'm' {
            return Err(PgError::fatal(
                SqlState::FEATURE_NOT_SUPPORTED,
                "client requires an unsupported SCRAM extension",
            ));
        }
        let _user_name_ignored = p.attr_value(b'n')?;
        let client_nonce = p.attr_value(b'r')?;
        if !client_nonce.iter().all(|&c| is_scram_printable(c)) {
            return Err(PgError::fatal(
                SqlState::PROTOCOL_VIOLATION,
                "non-printable characters in SCRAM nonce",
            ));
        }
        while !p.0.is_empty() {
            p.any_attr()?; // optional extensions, ignored
        }

        let server_nonce = BASE64.encode(server_nonce_raw);
        let mut nonce = client_nonce.to_vec();
        nonce.extend_from_slice(server_nonce.as_bytes());
        let mut server_first = b"r=".to_vec();
        server_first.extend_from_slice(&nonce);
        server_first.extend_from_slice(
            format!(",s={},i={}", verifier.salt_base64, verifier.iterations).as_bytes(),
        );
        let mut auth_message_prefix = Vec::with_capacity(bare.len() + server_first.len() + 2);
        auth_message_prefix.extend_from_slice(bare);
        auth_message_prefix.push(b',');
        auth_message_prefix.extend_from_slice(&server_first);
        auth_message_prefix.push(b',');
        let server = ScramServer {
            verifier,
            doomed,
            cbind_flag,
            bound_to,
            auth_message_prefix,
            nonce,
        };
        Ok((server, server_first))
    }

    /// Read the client-final-message and check its proof (the unit tests' form; connections
    /// use [`ScramServer::finish_with_key`]).
    #[cfg(test)]
    pub fn finish(self, client_final: &[u8]) -> Result<Outcome, PgError> {
        self.finish_with_key(client_final)
            .map(|(outcome, _)| outcome)
    }

    /// [`ScramServer::finish`], and on success the client's ClientKey, recovered from its
    /// proof (the key upstream mode logs in with; see `client::Credential::Scram`).
    /// The key is boxed where it is computed, so moving it moves a pointer and leaves no
    /// copies of the key behind.
    pub fn finish_with_key(
        self,
        client_final: &[u8],
    ) -> Result<(Outcome, Option<Box<Key>>), PgError> {
        check_message(client_final)?;
        let mut p = Parser(client_final);
        let binding = p.attr_value(b'c')?;
        if let Some(hash) = &self.bound_to {
            // base64(GS2 header ‖ certificate hash): the client saw our certificate.
            let mut input = END_POINT_GS2_HEADER.to_vec();
            input.extend_from_slice(hash.as_bytes());
            if !constant_time_eq(binding, BASE64.encode(input).as_bytes()) {
                return Err(PgError::fatal(
                    SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                    "SCRAM channel binding check failed",
                ));
            }
        } else {
            // Without channel binding the attribute is the base64 of the GS2 header itself:
            // "biws" = "n,,", "eSws" = "y,,", and it must repeat the flag of the first message.
            let expected: &[u8] = if self.cbind_flag == b'n' {
                b"biws"
            } else {
                b"eSws"
            };
            if binding != expected {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    "unexpected SCRAM channel-binding attribute in client-final-message",
                ));
            }
        }
        let final_nonce = p.attr_value(b'r')?;
        // Everything before ",p=" is the AuthMessage's client-final-message-without-proof.
        let (proof_b64, without_proof_len) = loop {
            let attr_start = client_final.len() - p.0.len();
            let (attr, value) = p.any_attr()?;
            if attr == b'p' {
                break (value, attr_start - 1);
            }
        };
        let proof: Key = BASE64
            .decode(proof_b64)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| malformed("Malformed proof in client-final-message."))?;
        if !p.0.is_empty() {
            return Err(malformed(
                "Garbage found at the end of client-final-message.",
            ));
        }
        if final_nonce != self.nonce.as_slice() {
            return Err(
                PgError::fatal(SqlState::PROTOCOL_VIOLATION, "invalid SCRAM response")
                    .with_detail("Nonce does not match."),
            );
        }
        let mut auth_message = self.auth_message_prefix;
        auth_message.extend_from_slice(&client_final[..without_proof_len]);
        // ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); valid if H(ClientKey) is
        // StoredKey. Computed for doomed exchanges too, so they take the same time.
        let signature = hmac(&self.verifier.stored_key, &auth_message);
        let mut client_key = Box::new([0u8; SCRAM_KEY_BYTES]);
        for (k, (p, s)) in client_key.iter_mut().zip(proof.iter().zip(signature)) {
            *k = p ^ s;
        }
        let proof_ok = constant_time_eq(&sha256(&client_key[..]), &self.verifier.stored_key);
        if !proof_ok || self.doomed {
            zeroize::Zeroize::zeroize(&mut client_key[..]);
            return Ok((Outcome::Failed, None));
        }
        let server_signature = hmac(&self.verifier.server_key, &auth_message);
        let mut reply = b"v=".to_vec();
        reply.extend_from_slice(BASE64.encode(server_signature).as_bytes());
        Ok((Outcome::Authenticated(reply), Some(client_key)))
    }
}

/// PostgreSQL's checks before parsing: not empty, no NUL inside.
fn check_message(input: &[u8]) -> Result<(), PgError> {
    if input.is_empty() {
        return Err(malformed("The message is empty."));
    }
    if input.contains(&0) {
        return Err(malformed("Message length does not match input length."));
    }
    Ok(())
}

fn malformed(detail: impl Into<String>) -> PgError {
    PgError::fatal(SqlState::PROTOCOL_VIOLATION, "malformed SCRAM message").with_detail(detail)
}

/// A printable character other than `,` (RFC 5802's `printable`).
fn is_scram_printable(c: u8) -> bool {
    (0x21..=0x7e).contains(&c) && c != b','
}

/// PostgreSQL's `sanitize_char`: a client byte as it may appear in an error message.
fn sanitize_char(c: u8) -> String {
    if (0x21..=0x7e).contains(&c) {
        format!("'{}'", c as char)
    } else {
        format!("0x{c:02x}")
    }
}

/// A cursor over `attr=value,attr=value`. Past the end it reads NUL, as PostgreSQL's C strings
/// do, so the error messages match.
struct Parser<'a>(&'a [u8]);

impl<'a> Parser<'a> {
    fn peek(&self) -> u8 {
        self.0.first().copied().unwrap_or(0)
    }

    fn advance(&mut self, n: usize) {
        self.0 = &self.0[n.min(self.0.len())..];
    }

    /// The value up to the next `,` (which is consumed) or the end.
    fn value(&mut self) -> &'a [u8] {
        let end = self.0.iter().position(|&c| c == b',');
        let value = &self.0[..end.unwrap_or(self.0.len())];
        self.advance(end.map_or(self.0.len(), |e| e + 1));
        value
    }

    /// `attr=value` where `attr` must be the given one.
    fn attr_value(&mut self, attr: u8) -> Result<&'a [u8], PgError> {
        if self.peek() != attr {
            return Err(malformed(format!(
                "Expected attribute \"{}\" but found \"{}\".",
                attr as char,
                sanitize_char(self.peek())
            )));
        }
        self.advance(1);
        if self.peek() != b'=' {
            return Err(malformed(format!(
                "Expected character \"=\" for attribute \"{}\".",
                attr as char
            )));
        }
        self.advance(1);
        Ok(self.value())
    }

    /// Any `attr=value`, `attr` a letter.
    fn any_attr(&mut self) -> Result<(u8, &'a [u8]), PgError> {
        let attr = self.peek();
        if attr == 0 {
            return Err(malformed("Attribute expected, but found end of string."));
        }
        if !attr.is_ascii_alphabetic() {
            return Err(malformed(format!(
                "Attribute expected, but found invalid character \"{}\".",
                sanitize_char(attr)
            )));
        }
        self.advance(1);
        if self.peek() != b'=' {
            return Err(malformed(format!(
                "Expected character \"=\" for attribute \"{}\".",
                attr as char
            )));
        }
        self.advance(1);
        Ok((attr, self.value()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNBOUND: ChannelBinding = ChannelBinding::Unavailable;

    /// RFC 7677 section 3: user "user", password "pencil". The server nonce there is
    /// "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", which is not base64 of anything; the exchange is rebuilt
    /// with our nonce encoding, and the client side computed independently below.
    fn rfc7677_verifier() -> ScramVerifier {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        ScramVerifier::from_password("pencil", &salt, 4096)
    }

    /// A client's proof and expected server signature, computed from the password the way a
    /// client does (the server never sees SaltedPassword).
    fn client_final(password: &str, auth_prefix: &[u8], without_proof: &str) -> (String, String) {
        let v = rfc7677_verifier();
        let salted =
            crate::auth::secret::salted_password(password.as_bytes(), &v.salt, v.iterations);
        let client_key = hmac(&salted, b"Client Key");
        let mut auth_message = auth_prefix.to_vec();
        auth_message.extend_from_slice(without_proof.as_bytes());
        let signature = hmac(&sha256(&client_key), &auth_message);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_sig = hmac(&hmac(&salted, b"Server Key"), &auth_message);
        (
            format!("{without_proof},p={}", BASE64.encode(proof)),
            format!("v={}", BASE64.encode(server_sig)),
        )
    }

    fn start(first: &[u8]) -> Result<(ScramServer, Vec<u8>), PgError> {
        ScramServer::start(UNBOUND, false, rfc7677_verifier(), false, first, [9; 18])
    }

    #[test]
    fn rfc7677_exchange_with_the_rfc_nonce_and_proof() {
        // The RFC's own messages, byte for byte: only the server nonce is injected.
        let v = rfc7677_verifier();
        let client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let server = ScramServer {
            verifier: v,
            doomed: false,
            cbind_flag: b'n',
            bound_to: None,
            auth_message_prefix: format!("{client_first_bare},{server_first},").into_bytes(),
            nonce: b"rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_vec(),
        };
        let outcome = server
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(
            outcome,
            Outcome::Authenticated(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec())
        );
    }

    #[test]
    fn full_exchange_right_and_wrong_password_and_doomed() {
        for (password, doomed, ok) in [
            ("pencil", false, true),
            ("pencil2", false, false),
            ("pencil", true, false),
        ] {
            for flag in ["n", "y"] {
                let first = format!("{flag},,n=,r=abcdefgh");
                let (server, server_first) = ScramServer::start(
                    UNBOUND,
                    false,
                    rfc7677_verifier(),
                    doomed,
                    first.as_bytes(),
                    [9; 18],
                )
                .unwrap();
                let server_first = String::from_utf8(server_first).unwrap();
                let nonce = server_first
                    .strip_prefix("r=")
                    .unwrap()
                    .split(',')
                    .next()
                    .unwrap();
                assert!(nonce.starts_with("abcdefgh") && nonce.len() > 8 + 18);
                assert!(server_first.ends_with(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"));
                let cbind = BASE64.encode(format!("{flag},,"));
                let prefix = format!("n=,r=abcdefgh,{server_first},");
                let (message, signature) =
                    client_final(password, prefix.as_bytes(), &format!("c={cbind},r={nonce}"));
                let outcome = server.finish(message.as_bytes()).unwrap();
                if ok {
                    assert_eq!(outcome, Outcome::Authenticated(signature.into_bytes()));
                } else {
                    assert_eq!(outcome, Outcome::Failed);
                }
            }
        }
    }

    fn detail(e: PgError) -> String {
        format!("{} / {}", e.message, e.detail.unwrap_or_default())
    }

    #[test]
    fn malformed_client_first_messages_get_postgres_errors() {
        for (input, want) in [
            (&b""[..], "malformed SCRAM message / The message is empty."),
            (b"n,,n=,r=a\0b", "malformed SCRAM message / Message length does not match input length."),
            (b"x,,n=,r=a", "malformed SCRAM message / Unexpected channel-binding flag \"'x'\"."),
            (b"n;,n=,r=a", "malformed SCRAM message / Comma expected, but found character \"';'\"."),
            (b"p=tls-server-end-point,,n=,r=a", "malformed SCRAM message / The client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data."),
            (b"n,a=bob,n=,r=a", "client uses authorization identity, but it is not supported / "),
            (b"n,x,n=,r=a", "malformed SCRAM message / Unexpected attribute \"'x'\" in client-first-message."),
            (b"n,,m=ext,n=,r=a", "client requires an unsupported SCRAM extension / "),
            (b"n,,r=a", "malformed SCRAM message / Expected attribute \"n\" but found \"'r'\"."),
            (b"n,,n=", "malformed SCRAM message / Expected attribute \"r\" but found \"0x00\"."),
            (b"n,,n=,r", "malformed SCRAM message / Expected character \"=\" for attribute \"r\"."),
            (b"n,,n=,r=a b", "non-printable characters in SCRAM nonce / "),
            (b"n,,n=,r=ab,1=x", "malformed SCRAM message / Attribute expected, but found invalid character \"'1'\"."),
        ] {
            let err = start(input).err().unwrap_or_else(|| panic!("{input:?} accepted"));
            assert_eq!(err.severity, protocol::Severity::Fatal);
            assert_eq!(detail(err), want, "{:?}", String::from_utf8_lossy(input));
        }
        // Extensions after the nonce are ignored.
        start(b"n,,n=someone,r=ab,x=ext").unwrap();
        assert_eq!(
            ScramServer::check_mechanism(UNBOUND, "SCRAM-SHA-256-PLUS")
                .unwrap_err()
                .message,
            "client selected an invalid SASL authentication mechanism"
        );
        ScramServer::check_mechanism(UNBOUND, "SCRAM-SHA-256").unwrap();
    }

    #[test]
    fn malformed_client_final_messages_get_postgres_errors() {
        let (_, server_first) = start(b"n,,n=,r=abc").unwrap();
        let nonce = String::from_utf8(
            server_first[2..]
                .split(|&c| c == b',')
                .next()
                .unwrap()
                .to_vec(),
        )
        .unwrap();
        let proof = BASE64.encode([0u8; 32]);
        for (input, want) in [
            (
                format!("c=eSws,r={nonce},p={proof}"),
                "unexpected SCRAM channel-binding attribute in client-final-message / ",
            ),
            (
                format!("r={nonce},p={proof}"),
                "malformed SCRAM message / Expected attribute \"c\" but found \"'r'\".",
            ),
            (
                format!("c=biws,r={nonce}"),
                "malformed SCRAM message / Attribute expected, but found end of string.",
            ),
            (
                format!("c=biws,r={nonce},p=AAAA"),
                "malformed SCRAM message / Malformed proof in client-final-message.",
            ),
            (
                format!("c=biws,r={nonce},p={proof},x=1"),
                "malformed SCRAM message / Garbage found at the end of client-final-message.",
            ),
            (
                format!("c=biws,r={nonce}x,p={proof}"),
                "invalid SCRAM response / Nonce does not match.",
            ),
            (
                format!("c=biws,r=abc,p={proof}"),
                "invalid SCRAM response / Nonce does not match.",
            ),
        ] {
            let (server, _) = start(b"n,,n=,r=abc").unwrap();
            // Same server nonce each time ([9; 18]), so `nonce` is this exchange's.
            let err = server
                .finish(input.as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{input} accepted"));
            assert_eq!(detail(err), want, "{input}");
        }
        // Extensions between the nonce and the proof are allowed; a zero proof just fails.
        let (server, _) = start(b"n,,n=,r=abc").unwrap();
        let outcome = server
            .finish(format!("c=biws,r={nonce},x=1,p={proof}").as_bytes())
            .unwrap();
        assert_eq!(outcome, Outcome::Failed);
    }

    #[test]
    fn channel_binding_over_tls_as_postgres_checks_it() {
        let hash = crate::tls::EndPointHash::of_certificate(b"not really DER, hashed with SHA-256");
        assert_eq!(hash.as_bytes().len(), 32);
        let bound = ChannelBinding::TlsServerEndPoint(hash);
        assert_eq!(bound.mechanisms(), &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
        ScramServer::check_mechanism(bound, SCRAM_SHA_256_PLUS).unwrap();
        ScramServer::check_mechanism(bound, SCRAM_SHA_256).unwrap();
        let begin = |plus: bool, first: &[u8]| {
            ScramServer::start(bound, plus, rfc7677_verifier(), false, first, [9; 18])
        };
        // PLUS with the right hash authenticates; with another hash it is 28000.
        let gs2 = "p=tls-server-end-point,,";
        for (cbind_data, ok) in [(hash.as_bytes().to_vec(), true), (vec![0u8; 32], false)] {
            let first = format!("{gs2}n=,r=abcdefgh");
            let (server, server_first) = begin(true, first.as_bytes()).unwrap();
            let server_first = String::from_utf8(server_first).unwrap();
            let nonce = server_first[2..].split(',').next().unwrap();
            let mut input = gs2.as_bytes().to_vec();
            input.extend_from_slice(&cbind_data);
            let prefix = format!("n=,r=abcdefgh,{server_first},");
            let (message, signature) = client_final(
                "pencil",
                prefix.as_bytes(),
                &format!("c={},r={nonce}", BASE64.encode(input)),
            );
            match server.finish(message.as_bytes()) {
                Ok(outcome) => {
                    assert!(ok);
                    assert_eq!(outcome, Outcome::Authenticated(signature.into_bytes()));
                }
                Err(e) => {
                    assert!(!ok);
                    assert_eq!(e.code, SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
                    assert_eq!(e.message, "SCRAM channel binding check failed");
                }
            }
        }
        // `y` while the server offered PLUS: the client was told there is no binding.
        let e = begin(false, b"y,,n=,r=a").err().unwrap();
        assert_eq!(e.code, SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
        assert_eq!(e.message, "SCRAM channel binding negotiation error");
        // `n` without PLUS is fine over TLS; with PLUS it is malformed.
        begin(false, b"n,,n=,r=a").unwrap();
        assert_eq!(
            detail(begin(true, b"n,,n=,r=a").err().unwrap()),
            "malformed SCRAM message / The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data."
        );
        assert_eq!(
            detail(begin(true, b"p=tls-unique,,n=,r=a").err().unwrap()),
            "unsupported SCRAM channel-binding type \"tls-unique\" / "
        );
        assert_eq!(
            detail(begin(false, b"p=tls-server-end-point,,n=,r=a").err().unwrap()),
            "malformed SCRAM message / The client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data."
        );
    }
}
