//! Starting the shards: listening sockets, one pinned glommio executor per shard, the cancel
//! mesh between them.
//!
//! Accepting: every shard has its own listening socket on the same address with SO_REUSEPORT,
//! and the kernel spreads new connections over them by a hash of the 4-tuple. The alternative,
//! one acceptor handing sockets to other shards, costs a cross-core hop per connection and
//! makes one core special; REUSEPORT keeps shards symmetric. Its weakness is balance with few
//! connections (the hash can put 3 of 4 clients on one shard); see docs/ARCHITECTURE.md.
//!
//! The sockets are created and bound here, on the main thread, before any executor starts, so
//! "address in use" is a startup error, and `--listen 127.0.0.1:0` resolves to one port that
//! every shard shares.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use glommio::{LocalExecutorBuilder, Placement as GlommioPlacement};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{Placement, ServerConfig};
use crate::conn::{serve, End};
use crate::engine::Engine;
use crate::shard::{CancelMessage, Shard, MAX_SHARDS};

/// Bound listening sockets, ready to hand to shards.
pub struct Listeners {
    sockets: Vec<StdListener>,
    pub local_addr: SocketAddr,
}

/// Bind one SO_REUSEPORT socket per shard on `config.listen`.
pub fn bind(config: &ServerConfig) -> Result<Listeners, String> {
    let shards = config.placement.shard_count();
    if shards > MAX_SHARDS {
        return Err(format!(
            "at most {MAX_SHARDS} shards are supported, {shards} were asked for"
        ));
    }
    let mut addr = config.listen;
    let mut sockets = Vec::with_capacity(shards);
    for _ in 0..shards {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| format!("cannot create a TCP socket: {e}"))?;
        let setup = || -> std::io::Result<()> {
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            socket.bind(&addr.into())?;
            // PostgreSQL's default backlog is MaxBackends * 2; 1024 covers bursts of connects.
            socket.listen(1024)
        };
        setup().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        if addr.port() == 0 {
            addr = socket
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .ok_or_else(|| "cannot read the bound address".to_string())?;
        }
        sockets.push(socket.into());
    }
    Ok(Listeners {
        sockets,
        local_addr: addr,
    })
}

/// The engine's cross-shard messaging: one unbounded channel into each shard. Engines batch
/// what they send (one message carries many peeks or replies), so a channel operation is paid
/// per batch, not per query.
pub struct Mesh<M> {
    pub shard_id: usize,
    senders: Vec<flume::Sender<M>>,
}

impl<M> Mesh<M> {
    pub fn shards(&self) -> usize {
        self.senders.len()
    }

    /// Send to shard `to` (which may be this shard). False if that shard has stopped.
    pub fn send(&self, to: usize, msg: M) -> bool {
        self.senders[to].send(msg).is_ok()
    }
}

/// Start every shard and block until they all stop. `make_engine` runs on each shard's own
/// thread, so the engine it builds never crosses threads; it gets the shard's [`Mesh`].
pub fn run<E, F>(config: ServerConfig, listeners: Listeners, make_engine: F) -> Result<(), String>
where
    E: Engine,
    F: Fn(Mesh<E::Message>) -> E + Send + Sync + 'static,
{
    let config = Arc::new(config);
    let make_engine = Arc::new(make_engine);
    let shards = config.placement.shard_count();
    let open_connections = Arc::new(AtomicUsize::new(0));
    // Cancel requests are rare; a small bounded queue per shard is plenty, and a full one
    // drops the request (best-effort, like PostgreSQL's signal).
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| flume::bounded::<CancelMessage>(256))
        .unzip();
    let (mesh_senders, mesh_receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| flume::unbounded::<E::Message>())
        .unzip();
    let mut handles = Vec::with_capacity(shards);
    for (id, ((listener, cancel_rx), mesh_rx)) in listeners
        .sockets
        .into_iter()
        .zip(receivers)
        .zip(mesh_receivers)
        .enumerate()
    {
        let placement = match &config.placement {
            Placement::Pinned(cores) => GlommioPlacement::Fixed(cores[id]),
            Placement::Unpinned(_) => GlommioPlacement::Unbound,
        };
        let config = config.clone();
        let make_engine = make_engine.clone();
        let senders = senders.clone();
        let open_connections = open_connections.clone();
        let mesh = Mesh {
            shard_id: id,
            senders: mesh_senders.clone(),
        };
        let fd = listener.into_raw_fd();
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(config.io_memory_bytes)
            .spawn(move || async move {
                let engine = make_engine(mesh);
                let shard = Rc::new(Shard::new(id, engine, config, senders, open_connections));
                // SAFETY: `fd` is a listening socket we own; ownership moves into the listener.
                let listener = unsafe { glommio::net::TcpListener::from_raw_fd(fd) };
                shard_main(shard, listener, cancel_rx, mesh_rx).await
            })
            .map_err(|e| format!("cannot start shard {id}: {e}"))?;
        handles.push(handle);
    }
    drop(senders);
    drop(mesh_senders);
    for (id, h) in handles.into_iter().enumerate() {
        h.join().map_err(|e| format!("shard {id} stopped: {e}"))?;
    }
    Ok(())
}

async fn shard_main<E: Engine>(
    shard: Rc<Shard<E>>,
    listener: glommio::net::TcpListener,
    cancels: flume::Receiver<CancelMessage>,
    mesh: flume::Receiver<E::Message>,
) {
    let mesh_task = {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Ok(msg) = mesh.recv_async().await {
                shard.engine.on_message(msg);
            }
        })
    };
    mesh_task.detach();
    let cancel_task = {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Ok(msg) = cancels.recv_async().await {
                shard.apply_cancel(msg);
            }
        })
    };
    cancel_task.detach();
    log::debug!(
        "shard {} accepting on {:?}",
        shard.id,
        listener.local_addr()
    );
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: log, back off briefly, keep serving the others.
                log::warn!("shard {}: accept failed: {e}", shard.id);
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr().ok();
        let within_limit = shard.connection_opened();
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let end = serve(shard.clone(), stream, !within_limit).await;
            shard.connection_closed();
            match end {
                End::ClientClosed | End::Terminated | End::CancelRequest => {
                    log::debug!(
                        "shard {}: connection from {peer:?} closed ({end:?})",
                        shard.id
                    )
                }
                End::Fatal(e) => log::info!(
                    "shard {}: connection from {peer:?} ended: {} {}",
                    shard.id,
                    e.code,
                    e.message
                ),
                End::Io(e) => log::info!("shard {}: connection from {peer:?} ended: {e}", shard.id),
            }
        })
        .detach();
    }
}
