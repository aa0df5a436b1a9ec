//! Hand-built frontend messages and a backend-message reader, for tests that must control
//! every byte (timeouts, direct TLS, protocol abuse) over any tokio stream.

use tokio::io::{AsyncRead, AsyncReadExt};

/// A StartupMessage (protocol 3.0) with these parameters.
pub fn startup_message(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    msg.extend_from_slice(&body);
    msg
}

/// A message with this tag and body.
pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut msg = vec![tag];
    msg.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    msg.extend_from_slice(body);
    msg
}

pub fn simple_query(sql: &str) -> Vec<u8> {
    frame(b'Q', &[sql.as_bytes(), b"\0"].concat())
}

/// A raw TCP session on `addr` logged in as postgres with no other startup parameter, read
/// up to its first ReadyForQuery.
pub async fn logged_in(addr: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw.write_all(&startup_message(&[("user", "postgres")]))
        .await
        .unwrap();
    let login = read_messages(&mut raw).await;
    assert_eq!(login.last().map(|m| m.0), Some(b'Z'), "{login:?}");
    raw
}

/// Read backend messages until ReadyForQuery, an ErrorResponse, or the end of the stream:
/// (tag, body) pairs.
pub async fn read_messages<R: AsyncRead + Unpin>(stream: &mut R) -> Vec<(u8, Vec<u8>)> {
    let mut messages = Vec::new();
    loop {
        let mut head = [0u8; 5];
        if stream.read_exact(&mut head).await.is_err() {
            return messages;
        }
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if stream.read_exact(&mut body).await.is_err() {
            return messages;
        }
        let tag = head[0];
        messages.push((tag, body));
        if tag == b'Z' || tag == b'E' {
            return messages;
        }
    }
}

/// A field of an ErrorResponse body: `S` severity, `C` SQLSTATE, `M` message.
pub fn error_field(body: &[u8], field: u8) -> String {
    body.split(|&b| b == 0)
        .find_map(|f| f.strip_prefix(&[field]))
        .map(|c| String::from_utf8_lossy(c).to_string())
        .unwrap_or_default()
}

/// Whether the peer has closed: the next read returns end of stream (or a reset).
pub async fn is_closed<R: AsyncRead + Unpin>(stream: &mut R) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte).await, Ok(0) | Err(_))
}

/// A blocking `read`, again when a signal interrupts it: a socket with a read timeout is not
/// restarted after a signal handler even with `SA_RESTART` (signal(7)), and CI saw such an
/// EINTR fail a test that was only waiting for its reply.
pub fn read_blocking(stream: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Make close() send a reset instead of a FIN (SO_LINGER with a zero timeout).
pub fn reset_on_close(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: passes a valid linger struct of the size given.
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt SO_LINGER");
}
