//! Client side of password authentication: cleartext, md5, SCRAM-SHA-256 (RFC 5802/7677,
//! without channel binding). Runs once per connection, before timing starts.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use md5::{Digest as _, Md5};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// PostgreSQL's md5 answer: `"md5" + md5(md5(password + user) + salt)`, in hex.
pub fn md5_password(user: &str, password: &str, salt: [u8; 4]) -> String {
    let inner = hex(&Md5::new()
        .chain_update(password)
        .chain_update(user)
        .finalize());
    let outer = Md5::new()
        .chain_update(inner.as_bytes())
        .chain_update(salt)
        .finalize();
    format!("md5{}", hex(&outer))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One SCRAM-SHA-256 exchange.
pub struct Scram {
    password: String,
    client_nonce: String,
    client_first_bare: String,
    server_signature: Option<[u8; 32]>,
}

impl Scram {
    /// The client-first-message. The user name is sent empty, as libpq does: PostgreSQL takes
    /// it from the startup packet.
    pub fn start(password: &str) -> Result<(Scram, Vec<u8>), String> {
        let mut raw = [0u8; 18];
        fill_random(&mut raw)?;
        let client_nonce = BASE64.encode(raw);
        let client_first_bare = format!("n=,r={client_nonce}");
        let message = format!("n,,{client_first_bare}").into_bytes();
        Ok((
            Scram {
                password: password.to_string(),
                client_nonce,
                client_first_bare,
                server_signature: None,
            },
            message,
        ))
    }

    /// Answer the server-first-message with the client-final-message.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "SCRAM: server-first-message is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attr in server_first.split(',') {
            match attr.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = Some(BASE64.decode(v).map_err(|_| "SCRAM: bad salt")?),
                Some(("i=", v)) => {
                    iterations = Some(v.parse::<u32>().map_err(|_| "SCRAM: bad iteration count")?)
                }
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!(
                "SCRAM: incomplete server-first-message {server_first:?}"
            ));
        };
        if !nonce.starts_with(&self.client_nonce) || iterations == 0 {
            return Err("SCRAM: the server's nonce does not extend ours".into());
        }
        let salted = pbkdf2_sha256(self.password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac(&salted, b"Server Key");
        self.server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Check the server-final-message: the server must prove it knows the password too.
    pub fn finish(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "SCRAM: server-final-message is not UTF-8")?;
        let verifier = text
            .strip_prefix("v=")
            .ok_or_else(|| format!("SCRAM: server error {text:?}"))?;
        let got = BASE64
            .decode(verifier)
            .map_err(|_| "SCRAM: bad server signature")?;
        match self.server_signature {
            Some(want) if got == want => Ok(()),
            _ => Err("SCRAM: the server's signature does not match".into()),
        }
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn pbkdf2_sha256(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut first = salt.to_vec();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(password, &first);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &u);
        for (o, x) in out.iter_mut().zip(u) {
            *o ^= x;
        }
    }
    out
}

fn fill_random(buf: &mut [u8]) -> Result<(), String> {
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n as usize != buf.len() {
        return Err(format!(
            "getrandom failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_postgresql() {
        // SELECT 'md5' || md5('md5' ... ) computed with PostgreSQL's algorithm for user "postgres",
        // password "secret", salt 01020304.
        let inner = hex(&Md5::digest(b"secretpostgres"));
        let mut outer_input = inner.into_bytes();
        outer_input.extend_from_slice(&[1, 2, 3, 4]);
        let want = format!("md5{}", hex(&Md5::digest(&outer_input)));
        assert_eq!(md5_password("postgres", "secret", [1, 2, 3, 4]), want);
        assert_eq!(want.len(), 35);
    }

    #[test]
    fn scram_rfc7677_example() {
        // RFC 7677 section 3, with the client nonce fixed to the RFC's.
        let mut s = Scram {
            password: "pencil".into(),
            client_nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            server_signature: None,
        };
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = s.respond(server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        s.finish(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(s.finish(b"v=AAAA").is_err());
        assert!(s.finish(b"e=invalid-proof").is_err());
    }
}
