//! Side listeners: a TCP socket served by a task on one shard, beside the pgwire listeners,
//! with its own handler (the `--metrics-listen` HTTP endpoint).
//!
//! On the io_uring path the shard's driver owns the thread's sleep, so a glommio listener
//! would only notice a connection when glommio's own loop next runs; the socket is handed to
//! the driver instead ([`crate::uring::Driver::add_listener`]: one multishot ACCEPT with its
//! own handler). On the glommio path it is a glommio listener in a task. Either way the
//! handler gets a [`SideStream`] and runs on the shard that serves the listener.

use std::net::TcpListener as StdListener;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;

use crate::connect::ShardStream;
use crate::uring;

/// A connection accepted on a side listener, whichever socket path the shard uses (the same
/// stream type outbound connections use).
pub type SideStream = ShardStream;

/// Serve `listener` on the current shard: every accepted connection goes to `handler`, which
/// is expected to spawn a task for it. Must be called on a shard's thread, inside its
/// executor.
pub fn serve(listener: StdListener, handler: Rc<dyn Fn(SideStream)>) {
    match uring::current() {
        Some(driver) => {
            let fd: OwnedFd = listener.into();
            driver.add_listener(fd, Rc::new(move |s, _| handler(ShardStream::Uring(s))));
        }
        None => {
            // SAFETY: `listener` is a listening socket we own; ownership moves into glommio's.
            let listener =
                unsafe { glommio::net::TcpListener::from_raw_fd(listener.into_raw_fd()) };
            glommio::spawn_local(async move {
                loop {
                    match listener.accept().await {
                        Ok(s) => handler(ShardStream::GlommioTcp(s)),
                        Err(e) => {
                            log::warn!("side listener: accept failed: {e}");
                            crate::time::sleep(std::time::Duration::from_millis(10)).await;
                        }
                    }
                }
            })
            .detach();
        }
    }
}
