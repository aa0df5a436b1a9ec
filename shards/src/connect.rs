//! ShardStream connections from a shard (upstream mode): to a TCP address or a Unix-domain socket,
//! over the shard's own socket path — the shard's io_uring when it runs one, glommio's sockets
//! otherwise — so an upstream connection is served by the same loop, on the same core, as the
//! client connections it carries.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

use crate::uring::{self, UringStream};

/// Where an upstream server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    /// The socket file itself (`DIR/.s.PGSQL.PORT`).
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{a}"),
            Address::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A connected stream on whichever socket path this shard uses: an outbound connection, or
/// one accepted on a side listener (`crate::side`).
pub enum ShardStream {
    Uring(UringStream),
    GlommioTcp(glommio::net::TcpStream),
    GlommioUnix(glommio::net::UnixStream),
}

/// Connect to `addr` from the current shard.
pub async fn connect(addr: &Address) -> io::Result<ShardStream> {
    if let Some(driver) = uring::current() {
        let sockaddr = match addr {
            Address::Tcp(a) => socket2::SockAddr::from(*a),
            Address::Unix(p) => socket2::SockAddr::unix(p)?,
        };
        return Ok(ShardStream::Uring(driver.connect(sockaddr)?.await?));
    }
    match addr {
        Address::Tcp(a) => {
            let s = glommio::net::TcpStream::connect(*a)
                .await
                .map_err(io::Error::from)?;
            s.set_nodelay(true).map_err(io::Error::from)?;
            Ok(ShardStream::GlommioTcp(s))
        }
        Address::Unix(p) => Ok(ShardStream::GlommioUnix(
            glommio::net::UnixStream::connect(p)
                .await
                .map_err(io::Error::from)?,
        )),
    }
}

impl AsyncRead for ShardStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ShardStream::Uring(s) => Pin::new(s).poll_read(cx, buf),
            ShardStream::GlommioTcp(s) => Pin::new(s).poll_read(cx, buf),
            ShardStream::GlommioUnix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ShardStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ShardStream::Uring(s) => Pin::new(s).poll_write(cx, buf),
            ShardStream::GlommioTcp(s) => Pin::new(s).poll_write(cx, buf),
            ShardStream::GlommioUnix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ShardStream::Uring(s) => Pin::new(s).poll_flush(cx),
            ShardStream::GlommioTcp(s) => Pin::new(s).poll_flush(cx),
            ShardStream::GlommioUnix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ShardStream::Uring(s) => Pin::new(s).poll_close(cx),
            ShardStream::GlommioTcp(s) => Pin::new(s).poll_close(cx),
            ShardStream::GlommioUnix(s) => Pin::new(s).poll_close(cx),
        }
    }
}
