//! The client side of PostgreSQL's password exchanges, for ringwire's own connections to an
//! upstream server (upstream mode): md5 and SCRAM-SHA-256 (RFC 5802/7677, without channel
//! binding — `n,,`). Sans-IO: bytes of the server's messages in, bytes to send out.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::secret::{constant_time_eq, hex, hmac, md5_parts, salted_password, sha256, Key};
use crate::shard::fill_random;

/// The password message for AuthenticationMD5Password: `md5` + md5(md5(password + user) + salt).
pub fn md5_response(user: &str, password: &str, salt: [u8; 4]) -> String {
    let inner = hex(&md5_parts(&[password.as_bytes(), user.as_bytes()]));
    format!("md5{}", hex(&md5_parts(&[inner.as_bytes(), &salt])))
}

/// One SCRAM-SHA-256 exchange in progress.
pub struct ScramClient {
    password: String,
    nonce: String,
    client_first_bare: String,
    /// Set by [`ScramClient::server_first`]: what the server's final message must prove.
    expected_server_signature: Option<Key>,
}

/// The mechanism name sent in SASLInitialResponse.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

impl ScramClient {
    pub fn new(password: &str) -> ScramClient {
        let mut raw = [0u8; 18];
        fill_random(&mut raw);
        let nonce = BASE64.encode(raw);
        // PostgreSQL takes the user from the startup packet and ignores this one (as libpq
        // sends it: empty).
        let client_first_bare = format!("n=,r={nonce}");
        ScramClient {
            password: password.to_string(),
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
        let salted = salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        // c=biws is base64("n,,"): no channel binding.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature.iter())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac(&salted, b"Server Key");
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
}
