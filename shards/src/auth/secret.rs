//! Stored secrets in PostgreSQL's own formats (what `pg_authid.rolpassword` holds), so a
//! verifier taken from a PostgreSQL server works here unchanged:
//!
//! - `SCRAM-SHA-256$<iterations>:<salt base64>$<StoredKey base64>:<ServerKey base64>`
//! - `md5<32 lowercase hex>`: md5(password ‖ user name), tied to the user name.
//!
//! Plaintext is never stored. The only PBKDF2 on a connection's behalf is
//! [`Secret::verify_cleartext`] (method `password` against a SCRAM verifier), which the
//! connection runs off its executor.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use md5::Md5;
use sha2::{Digest, Sha256};

/// PostgreSQL's `scram_iterations` default.
pub const SCRAM_ITERATIONS_DEFAULT: u32 = 4096;
/// PostgreSQL's SCRAM_DEFAULT_SALT_LEN.
pub const SCRAM_SALT_BYTES: usize = 16;
/// SHA-256 output: the length of StoredKey, ServerKey, proofs and signatures.
pub const SCRAM_KEY_BYTES: usize = 32;

pub(crate) type Key = [u8; SCRAM_KEY_BYTES];

/// A parsed SCRAM-SHA-256 verifier.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    /// The salt exactly as written in the verifier: it is sent to clients as is.
    pub salt_base64: String,
    pub salt: Vec<u8>,
    pub stored_key: Key,
    pub server_key: Key,
}

/// The keys are wiped when a verifier is dropped (a reload replaces the users file's): with a
/// client's proof, StoredKey gives its ClientKey, and ServerKey lets a server pass as this one.
impl Drop for ScramVerifier {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.stored_key);
        zeroize::Zeroize::zeroize(&mut self.server_key);
    }
}

/// A user's stored secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    Scram(ScramVerifier),
    /// md5(password ‖ user name): the 16 raw bytes of the digest.
    Md5([u8; 16]),
}

/// An md5 hash is all an md5 login needs: wiped when dropped.
impl Drop for Secret {
    fn drop(&mut self) {
        if let Secret::Md5(hash) = self {
            zeroize::Zeroize::zeroize(hash);
        }
    }
}

impl Secret {
    /// Parse PostgreSQL's text form. Anything else (in particular a plaintext password) is
    /// refused: the error says what was expected.
    pub fn parse(text: &str) -> Result<Secret, String> {
        if let Some(hex) = text.strip_prefix("md5") {
            if hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                let mut digest = [0u8; 16];
                for (i, byte) in digest.iter_mut().enumerate() {
                    *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                        .expect("checked to be lowercase hex");
                }
                return Ok(Secret::Md5(digest));
            }
        }
        if text.starts_with("SCRAM-SHA-256$") {
            return ScramVerifier::parse(text)
                .map(Secret::Scram)
                .ok_or_else(|| "malformed SCRAM-SHA-256 verifier: expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> with base64 salt and 32-byte keys".to_string());
        }
        Err("not a SCRAM-SHA-256 verifier (SCRAM-SHA-256$...) or an md5 hash (md5 and 32 hex digits); plaintext passwords are not accepted".into())
    }

    /// A SCRAM-SHA-256 verifier for `password` with a fresh random salt and PostgreSQL's
    /// default iteration count, as `CREATE ROLE ... PASSWORD` makes with
    /// password_encryption = scram-sha-256. Costs one PBKDF2 (milliseconds).
    pub fn scram_from_password(password: &str) -> Secret {
        let mut salt = [0u8; SCRAM_SALT_BYTES];
        crate::shard::fill_random(&mut salt);
        Secret::Scram(ScramVerifier::from_password(
            password,
            &salt,
            SCRAM_ITERATIONS_DEFAULT,
        ))
    }

    /// PostgreSQL's md5 secret for `user` with `password`.
    pub fn md5_from_password(user: &str, password: &str) -> Secret {
        Secret::Md5(md5_parts(&[password.as_bytes(), user.as_bytes()]))
    }

    /// Method `password`: does this cleartext password (bytes as the client sent them)
    /// match? Against a SCRAM verifier this is a PBKDF2 (see
    /// [`ScramVerifier::verify_cleartext`]); against an md5 hash, one MD5.
    pub fn verify_cleartext(&self, user: &str, password: &[u8]) -> bool {
        match self {
            Secret::Scram(v) => v.verify_cleartext(password),
            Secret::Md5(stored) => {
                constant_time_eq(&md5_parts(&[password, user.as_bytes()]), stored)
            }
        }
    }
}

impl fmt::Display for Secret {
    /// PostgreSQL's text form, which [`Secret::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Scram(v) => write!(
                f,
                "SCRAM-SHA-256${}:{}${}:{}",
                v.iterations,
                v.salt_base64,
                BASE64.encode(v.stored_key),
                BASE64.encode(v.server_key)
            ),
            Secret::Md5(digest) => write!(f, "md5{}", hex(digest)),
        }
    }
}

impl fmt::Debug for Secret {
    /// Never prints key material (configs are logged with `{:?}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Scram(v) => write!(f, "SCRAM-SHA-256 verifier ({} iterations)", v.iterations),
            Secret::Md5(_) => f.write_str("md5 hash"),
        }
    }
}

impl ScramVerifier {
    /// PostgreSQL's `parse_scram_secret`: `None` if any field is malformed.
    fn parse(text: &str) -> Option<ScramVerifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (iterations, rest) = rest.split_once(':')?;
        let (salt_base64, rest) = rest.split_once('$')?;
        let (stored, server) = rest.split_once(':')?;
        let iterations: u32 = iterations.parse().ok().filter(|&i| i > 0)?;
        let salt = BASE64.decode(salt_base64).ok()?;
        Some(ScramVerifier {
            iterations,
            salt_base64: salt_base64.to_string(),
            salt,
            stored_key: BASE64.decode(stored).ok()?.try_into().ok()?,
            server_key: BASE64.decode(server).ok()?.try_into().ok()?,
        })
    }

    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        let salted = salted_password(password.as_bytes(), salt, iterations);
        ScramVerifier {
            iterations,
            salt_base64: BASE64.encode(salt),
            salt: salt.to_vec(),
            stored_key: sha256(&hmac(&salted, b"Client Key")),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Whether a cleartext password matches: PostgreSQL's `scram_verify_plain_password`. Runs
    /// PBKDF2 with the verifier's iteration count (~0.7 ms at 4096 in a release build), so
    /// connections run it off their shard (`auth::offload`).
    pub fn verify_cleartext(&self, password: &[u8]) -> bool {
        let salted = salted_password(password, &self.salt, self.iterations);
        constant_time_eq(&hmac(&salted, b"Server Key"), &self.server_key)
    }

    /// The stand-in for a user without a SCRAM verifier (unknown, or md5 only), as
    /// PostgreSQL's `mock_scram_secret`: the salt is a keyed hash of the user name, so it is
    /// the same on every attempt and looks like any real user's; the exchange is run in full
    /// and then fails.
    pub(crate) fn mock(user: &str, server_secret: &Key) -> ScramVerifier {
        let salt =
            &hmac_parts(server_secret, &[b"mock salt\0", user.as_bytes()])[..SCRAM_SALT_BYTES];
        ScramVerifier {
            iterations: SCRAM_ITERATIONS_DEFAULT,
            salt_base64: BASE64.encode(salt),
            salt: salt.to_vec(),
            stored_key: hmac_parts(server_secret, &[b"mock stored key\0", user.as_bytes()]),
            server_key: hmac_parts(server_secret, &[b"mock server key\0", user.as_bytes()]),
        }
    }
}

/// Hi(Normalize(password), salt, i) of RFC 5802, with PostgreSQL's leniency: a password that
/// is not valid UTF-8 or that SASLprep refuses is used as raw bytes.
pub(crate) fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> Key {
    let prepared = std::str::from_utf8(password)
        .ok()
        .and_then(|p| stringprep::saslprep(p).ok());
    let bytes = prepared.as_deref().map_or(password, str::as_bytes);
    pbkdf2::pbkdf2_hmac_array::<Sha256, SCRAM_KEY_BYTES>(bytes, salt, iterations)
}

/// md5 over the concatenated parts.
pub(crate) fn md5_parts(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for part in parts {
        h.update(part);
    }
    h.finalize().into()
}

/// Lowercase hex, as PostgreSQL writes md5 digests.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn hmac(key: &[u8], data: &[u8]) -> Key {
    hmac_parts(key, &[data])
}

pub(crate) fn hmac_parts(key: &[u8], parts: &[&[u8]]) -> Key {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn sha256(data: &[u8]) -> Key {
    Sha256::digest(data).into()
}

/// Equality whose time does not depend on where the inputs differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Produced by PostgreSQL 15: `SET password_encryption = 'scram-sha-256'; CREATE ROLE s
    /// PASSWORD 'spw'` and `SET password_encryption = 'md5'; CREATE ROLE m PASSWORD 'mpw'`.
    const PG_SCRAM: &str = "SCRAM-SHA-256$4096:E9TMyBl4v8UHmDwB13wEfA==$JhKEz2Z2CvvEk9dBX9TIci3vELBAcJR7wBTkKVeCkW8=:hMj34Vj6TTfmzWpcGHvPgWXbArxwxQYNKZPe/Ng3KV8=";
    const PG_MD5: &str = "md585f16fa8ca9ff46bbb20e3ebd7b1efb1";

    #[test]
    fn postgres_secrets_parse_verify_and_print_back() {
        let scram = Secret::parse(PG_SCRAM).unwrap();
        assert_eq!(scram.to_string(), PG_SCRAM);
        assert!(scram.verify_cleartext("s", b"spw"));
        assert!(!scram.verify_cleartext("s", b"spw "));
        let Secret::Scram(v) = &scram else { panic!() };
        // Rebuilding from the password with the same salt gives PostgreSQL's verifier.
        assert_eq!(
            ScramVerifier::from_password("spw", &v.salt, 4096).stored_key,
            v.stored_key
        );
        let md5 = Secret::parse(PG_MD5).unwrap();
        assert_eq!(md5.to_string(), PG_MD5);
        assert_eq!(Secret::md5_from_password("m", "mpw"), md5);
        assert!(md5.verify_cleartext("m", b"mpw"));
        assert!(
            !md5.verify_cleartext("other", b"mpw"),
            "md5 secrets are salted by the user name"
        );
        assert!(!md5.verify_cleartext("m", b"mpx"));
    }

    #[test]
    fn malformed_and_plaintext_secrets_are_refused() {
        for bad in [
            "hunter2",
            "",
            "md5",
            "md585F16FA8CA9FF46BBB20E3EBD7B1EFB1", // PostgreSQL's md5 hex is lowercase
            "md585f16fa8ca9ff46bbb20e3ebd7b1efb",
            "SCRAM-SHA-256$0:E9TMyBl4v8UHmDwB13wEfA==$JhKEz2Z2CvvEk9dBX9TIci3vELBAcJR7wBTkKVeCkW8=:hMj34Vj6TTfmzWpcGHvPgWXbArxwxQYNKZPe/Ng3KV8=",
            "SCRAM-SHA-256$4096:E9TMyBl4v8UHmDwB13wEfA==$JhKEz2Z2CvvEk9dBX9TIci3vELBAcJR7wBTkKVeCkW8=",
            "SCRAM-SHA-256$4096:!!$JhKEz2Z2CvvEk9dBX9TIci3vELBAcJR7wBTkKVeCkW8=:hMj34Vj6TTfmzWpcGHvPgWXbArxwxQYNKZPe/Ng3KV8=",
            "SCRAM-SHA-256$4096:E9TMyBl4v8UHmDwB13wEfA==$JhKE:hMj34Vj6TTfmzWpcGHvPgWXbArxwxQYNKZPe/Ng3KV8=",
        ] {
            assert!(Secret::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Secret::parse("hunter2").unwrap_err().contains("plaintext"));
    }

    #[test]
    fn fresh_verifiers_round_trip_and_are_salted() {
        let a = Secret::scram_from_password("pässword");
        let b = Secret::scram_from_password("pässword");
        assert_ne!(a, b, "two verifiers of one password share a salt");
        assert_eq!(Secret::parse(&a.to_string()).unwrap(), a);
        assert!(a.verify_cleartext("u", "pässword".as_bytes()));
        // SASLprep: U+00A0 (no-break space) maps to a space, so both spellings are one password,
        // as in PostgreSQL.
        let c = Secret::scram_from_password("a\u{a0}b");
        assert!(c.verify_cleartext("u", b"a b"));
        assert!(format!("{a:?}").contains("4096") && !format!("{a:?}").contains('$'));
    }

    #[test]
    fn mock_verifiers_are_stable_per_user() {
        let key = [7u8; 32];
        let a = ScramVerifier::mock("nobody", &key);
        assert!(a == ScramVerifier::mock("nobody", &key));
        assert!(a.salt != ScramVerifier::mock("nobody2", &key).salt);
        assert!(a.salt != ScramVerifier::mock("nobody", &[8u8; 32]).salt);
        assert_eq!(a.salt.len(), SCRAM_SALT_BYTES);
        assert_eq!(a.iterations, SCRAM_ITERATIONS_DEFAULT);
    }
}
