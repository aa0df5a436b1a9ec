//! The client side of PostgreSQL's password exchanges, for ringwire's own connections to an
//! upstream server (upstream mode): md5 and SCRAM-SHA-256 (RFC 5802/7677, without channel
//! binding — `n,,`). Sans-IO: bytes of the server's messages in, bytes to send out.
//!
//! [`Credential`] is what a client's own authentication to ringwire leaves behind for logging
//! in upstream as that client's user, without ringwire ever storing a cleartext password:
//! the SCRAM ClientKey recovered from the client's proof (PgBouncer's SCRAM pass-through),
//! the stored md5 hash, or (method `password` only) the password the client just sent.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use std::fmt;

use zeroize::Zeroize;

use super::secret::{
    constant_time_eq, hex, hmac, md5_parts, salted_password, sha256, Key, ScramVerifier,
    SCRAM_KEY_BYTES,
};
use crate::shard::fill_random;

/// What ringwire holds to answer an upstream server's password request as one client's user.
/// Lives in that client's session (and, once it logged in, in the shard's pool for that user,
/// for connections opened later): never written anywhere, never logged (`Debug` names only
/// the kind), and wiped from memory when dropped (each clone wipes its own copy).
#[derive(Clone, Default)]
pub enum Credential {
    /// Nothing: only an upstream that trusts the user lets ringwire in.
    #[default]
    None,
    /// The password itself: the client sent it in cleartext (`--auth password`), or it is the
    /// upstream URL's. Answers every method.
    Cleartext(String),
    /// md5(password ‖ user), as stored in the users file: answers an md5 challenge (and
    /// nothing else: SCRAM needs more than the hash).
    Md5([u8; 16]),
    /// The client proved it knows the password of `verifier` with SCRAM: ClientKey =
    /// ClientProof XOR HMAC(StoredKey, AuthMessage). With the verifier's salt and iterations
    /// it answers the upstream's SCRAM exchange, if the upstream holds the same verifier.
    Scram {
        /// Boxed: a move of the credential copies no key bytes.
        client_key: Box<[u8; SCRAM_KEY_BYTES]>,
        verifier: ScramVerifier,
    },
}

impl Drop for Credential {
    fn drop(&mut self) {
        match self {
            Credential::None => {}
            Credential::Cleartext(password) => password.zeroize(),
            Credential::Md5(hash) => hash.zeroize(),
            Credential::Scram { client_key, .. } => client_key.zeroize(),
        }
    }
}

impl Credential {
    /// Whether this is anything at all.
    pub fn is_some(&self) -> bool {
        !matches!(self, Credential::None)
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Credential::None => "no credential",
            Credential::Cleartext(_) => "a cleartext password",
            Credential::Md5(_) => "an md5 hash",
            Credential::Scram { .. } => "a SCRAM ClientKey",
        })
    }
}

/// The password message for AuthenticationMD5Password: `md5` + md5(md5(password + user) + salt).
pub fn md5_response(user: &str, password: &str, salt: [u8; 4]) -> String {
    md5_response_from_hash(&md5_parts(&[password.as_bytes(), user.as_bytes()]), salt)
}

/// The same from the stored hash md5(password ‖ user): the hash is all the exchange needs.
pub fn md5_response_from_hash(hash: &[u8; 16], salt: [u8; 4]) -> String {
    let inner = hex(hash);
    format!("md5{}", hex(&md5_parts(&[inner.as_bytes(), &salt])))
}

/// What a SCRAM client proves with: the password, or a ClientKey and the verifier it goes with.
/// Wiped when the exchange is dropped.
enum ScramSecret {
    Password(String),
    ClientKey {
        client_key: Box<Key>,
        verifier: ScramVerifier,
    },
}

impl Drop for ScramSecret {
    fn drop(&mut self) {
        match self {
            ScramSecret::Password(password) => password.zeroize(),
            ScramSecret::ClientKey { client_key, .. } => client_key.zeroize(),
        }
    }
}

/// One SCRAM-SHA-256 exchange in progress.
pub struct ScramClient {
    secret: ScramSecret,
    nonce: String,
    client_first_bare: String,
    /// Set by [`ScramClient::server_first`]: what the server's final message must prove.
    expected_server_signature: Option<Key>,
}

/// The mechanism name sent in SASLInitialResponse.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

impl ScramClient {
    pub fn new(password: &str) -> ScramClient {
        ScramClient::with_secret(ScramSecret::Password(password.to_string()))
    }

    /// SCRAM pass-through: answer with a ClientKey recovered from a client's proof against
    /// `verifier`. The server must use the same salt and iteration count (else
    /// [`ScramClient::server_first`] fails saying so); if its keys differ too, it refuses the
    /// proof.
    pub fn with_client_key(
        client_key: Box<[u8; SCRAM_KEY_BYTES]>,
        verifier: ScramVerifier,
    ) -> Self {
        ScramClient::with_secret(ScramSecret::ClientKey {
            client_key,
            verifier,
        })
    }

    fn with_secret(secret: ScramSecret) -> ScramClient {
        let mut raw = [0u8; 18];
        fill_random(&mut raw);
        let nonce = BASE64.encode(raw);
        // PostgreSQL takes the user from the startup packet and ignores this one (as libpq
        // sends it: empty).
        let client_first_bare = format!("n=,r={nonce}");
        ScramClient {
            secret,
            nonce,
            client_first_bare,
            expected_server_signature: None,
        }
    }

    /// The SASLInitialResponse data.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Answer the server-first-message (AuthenticationSASLContinue) with the client-final one.
    pub fn server_first(&mut self, data: &[u8]) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(data).map_err(|_| "server-first-message is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for part in text.split(',') {
            match part.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = Some(v),
                Some(("i=", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("malformed server-first-message {text:?}"));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend ours".into());
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| "the server's salt is not base64")?;
        if iterations == 0 {
            return Err("the server asked for 0 iterations".into());
        }
        let (mut client_key, stored_key, server_key) = match &self.secret {
            ScramSecret::Password(password) => {
                let mut salted = salted_password(password.as_bytes(), &salt, iterations);
                let client_key = hmac(&salted, b"Client Key");
                let server_key = hmac(&salted, b"Server Key");
                salted.zeroize();
                (client_key, sha256(&client_key), server_key)
            }
            ScramSecret::ClientKey {
                client_key,
                verifier,
            } => {
                if salt != verifier.salt || iterations != verifier.iterations {
                    return Err(format!(
                        "the server's SCRAM verifier for this user (salt and {iterations} \
                         iterations) is not the one ringwire holds ({} iterations{}): copy the \
                         user's line for the users file from the server's pg_authid",
                        verifier.iterations,
                        if salt != verifier.salt {
                            ", another salt"
                        } else {
                            ""
                        }
                    ));
                }
                (**client_key, verifier.stored_key, verifier.server_key)
            }
        };
        // c=biws is base64("n,,"): no channel binding.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature.iter())
            .map(|(k, s)| k ^ s)
            .collect();
        client_key.zeroize();
        self.expected_server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Check the server-final-message (AuthenticationSASLFinal): the server proves it knows
    /// the verifier too, so a server that does not is refused even if it then says "ok".
    pub fn server_final(&self, data: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(data).map_err(|_| "server-final-message is not UTF-8")?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("the server refused the SCRAM exchange: {e}"));
        }
        let Some(v) = text.strip_prefix("v=") else {
            return Err(format!("malformed server-final-message {text:?}"));
        };
        let v = BASE64
            .decode(v.split(',').next().unwrap_or(""))
            .map_err(|_| "the server signature is not base64")?;
        match &self.expected_server_signature {
            Some(expected) if constant_time_eq(expected, &v) => Ok(()),
            Some(_) => Err("the server's SCRAM signature is wrong".into()),
            None => Err("server-final-message before server-first-message".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact value is checked against a real server (md5 auth) in tests/upstream.rs; here,
    /// its shape and that the salt is mixed in.
    #[test]
    fn md5_response_shape() {
        let a = md5_response("u", "p", [1, 2, 3, 4]);
        let b = md5_response("u", "p", [1, 2, 3, 5]);
        assert!(a.starts_with("md5") && a.len() == 35);
        assert_ne!(a, b);
    }

    /// The RFC 7677 test vector (user "user", password "pencil"), with our client nonce fixed.
    #[test]
    fn scram_rfc7677_vector() {
        let mut c = ScramClient::new("pencil");
        c.nonce = "rOprNGfwEbeRWgbNEkqO".into();
        c.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO".into();
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = c.server_first(server_first).unwrap();
        assert_eq!(
            std::str::from_utf8(&client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(c
            .server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .is_err());
    }

    /// Pass-through: a ClientKey (as the server side recovers it from a proof) and the
    /// verifier answer the RFC 7677 exchange exactly as the password does; a verifier with
    /// another salt or iteration count is refused before any proof is sent.
    #[test]
    fn scram_with_a_client_key_matches_the_password() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let verifier = ScramVerifier::from_password("pencil", &salt, 4096);
        let client_key = hmac(&salted_password(b"pencil", &salt, 4096), b"Client Key");
        let mut c = ScramClient::with_client_key(Box::new(client_key), verifier.clone());
        c.nonce = "rOprNGfwEbeRWgbNEkqO".into();
        c.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO".into();
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = c.server_first(server_first).unwrap();
        assert_eq!(
            std::str::from_utf8(&client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        let mut other = ScramClient::with_client_key(Box::new(client_key), verifier.clone());
        other.nonce = "rOprNGfwEbeRWgbNEkqO".into();
        let e = other
            .server_first(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=8192")
            .unwrap_err();
        assert!(e.contains("pg_authid"), "{e}");
        let mut other = ScramClient::with_client_key(Box::new(client_key), verifier);
        other.nonce = "rOprNGfwEbeRWgbNEkqO".into();
        assert!(other
            .server_first(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=AAAAAAAAAAAAAAAAAAAAAA==,i=4096")
            .is_err());
    }

    #[test]
    fn md5_from_the_stored_hash_is_the_password_answer() {
        let hash = md5_parts(&[b"mpw", b"m"]);
        assert_eq!(
            md5_response_from_hash(&hash, [9, 8, 7, 6]),
            md5_response("m", "mpw", [9, 8, 7, 6])
        );
    }
}
