//! Starting the shards: listening sockets, one pinned glommio executor per shard, the cancel
//! mesh between them.
//!
//! Accepting: every shard has its own listening socket on the same address with SO_REUSEPORT,
//! and the kernel spreads new connections over them by a hash of the 4-tuple, so no core is
//! special and most connections stay where they were accepted. The hash balances badly with
//! few connections (4 clients land 3/1 or 4/0 on two shards 5 times in 8), so on the
//! io_uring path a shard that serves more connections than another hands a new one over
//! (`Dealer`, `Load::place`): one cross-core message per connection moved, never per query.
//! See docs/ARCHITECTURE.md ("Placing connections").
//!
//! The sockets are created and bound here, on the main thread, before any executor starts, so
//! "address in use" is a startup error, and `--listen 127.0.0.1:0` resolves to one port that
//! every shard shares.
//!
//! The Unix-domain socket (`--unix-socket-dir`) is one socket: AF_UNIX has no SO_REUSEPORT.
//! On the io_uring path every shard keeps a multishot accept on it, the kernel hands each
//! connection to one of them, and the same dealing balances them. On the glommio path (whose
//! Unix listener cannot adopt a bound socket) one plain thread accepts and deals connections
//! to the least loaded shard; glommio's TCP streams cannot give up their descriptor, so there
//! TCP placement is SO_REUSEPORT's alone.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::{LocalExecutorBuilder, Placement as GlommioPlacement};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{IoMode, Placement, ServerConfig};
use crate::conn::{serve, End};
use crate::engine::Engine;
use crate::shard::{CancelMessage, Load, Shard, MAX_SHARDS};
use crate::uring::{Doorbell, Driver, Peer};

/// Bound listening sockets, ready to hand to shards.
pub struct Listeners {
    sockets: Vec<StdListener>,
    unix: Option<StdUnixListener>,
    pub local_addr: SocketAddr,
    /// The Unix-domain socket's path, with `--unix-socket-dir`.
    pub unix_path: Option<PathBuf>,
}

/// Bind one SO_REUSEPORT socket per shard on `config.listen`, and the Unix-domain socket.
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
    let (unix, unix_path) = match &config.unix_socket_dir {
        Some(dir) => {
            let path = dir.join(format!(".s.PGSQL.{}", addr.port()));
            (Some(bind_unix(&path)?), Some(path))
        }
        None => (None, None),
    };
    Ok(Listeners {
        sockets,
        unix,
        local_addr: addr,
        unix_path,
    })
}

/// Bind PostgreSQL's socket file, replacing a stale one (no server answers on it) but never a
/// live one.
fn bind_unix(path: &std::path::Path) -> Result<StdUnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!(
                "cannot listen on {shown}: another server is accepting connections there"
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove the stale socket file {shown}: {e}"))?;
    }
    let listener =
        StdUnixListener::bind(path).map_err(|e| format!("cannot listen on {shown}: {e}"))?;
    // PostgreSQL's default unix_socket_permissions: anyone on the host may connect (access
    // control is authentication's job).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| format!("cannot set permissions of {shown}: {e}"))?;
    Ok(listener)
}

/// The engine's cross-shard messaging: one unbounded channel into each shard. Engines batch
/// what they send (one message carries many peeks or replies), so a channel operation is paid
/// per batch, not per query.
pub struct Mesh<M> {
    pub shard_id: usize,
    senders: Vec<flume::Sender<M>>,
    bells: Arc<Vec<Arc<Doorbell>>>,
}

impl<M> Mesh<M> {
    pub fn shards(&self) -> usize {
        self.senders.len()
    }

    /// Send to shard `to` (which may be this shard). False if that shard has stopped.
    pub fn send(&self, to: usize, msg: M) -> bool {
        let ok = self.senders[to].send(msg).is_ok();
        // A shard parked in its io_uring only learns of the message through its doorbell.
        self.bells[to].ring();
        ok
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
    let load = Arc::new(Load::new(shards));
    let bells: Arc<Vec<Arc<Doorbell>>> = Arc::new(
        (0..shards)
            .map(|_| Doorbell::new().map(Arc::new))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot create an eventfd: {e}"))?,
    );
    // Cancel requests are rare; a small bounded queue per shard is plenty, and a full one
    // drops the request (best-effort, like PostgreSQL's signal).
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| flume::bounded::<CancelMessage>(256))
        .unzip();
    let (mesh_senders, mesh_receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| flume::unbounded::<E::Message>())
        .unzip();
    // Unix-domain connections: on the io_uring path every shard accepts on its own duplicate
    // of the socket; on the glommio path one thread accepts and deals them out.
    let mut unix_fds: Vec<Option<OwnedFd>> = (0..shards).map(|_| None).collect();
    // io_uring path: accepted connections a shard hands to a less loaded one (see
    // `Driver::set_deal`), each sent over the receiving shard's channel.
    let (deal_senders, deal_receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| flume::unbounded::<(OwnedFd, Peer)>())
        .unzip();
    let dealer = Arc::new(Dealer {
        tcp: config.balance_connections,
        shards: deal_senders,
        bells: bells.clone(),
        load: load.clone(),
    });
    let mut unix_receivers: Vec<Option<flume::Receiver<std::os::unix::net::UnixStream>>> =
        (0..shards).map(|_| None).collect();
    if let Some(unix) = listeners.unix {
        match config.io {
            IoMode::Uring => {
                for slot in unix_fds.iter_mut() {
                    let fd = unix
                        .try_clone()
                        .map_err(|e| format!("cannot duplicate the Unix socket: {e}"))?;
                    *slot = Some(fd.into());
                }
            }
            IoMode::Glommio => {
                let (txs, rxs): (Vec<_>, Vec<_>) = (0..shards).map(|_| flume::unbounded()).unzip();
                for (slot, rx) in unix_receivers.iter_mut().zip(rxs) {
                    *slot = Some(rx);
                }
                let load = load.clone();
                std::thread::Builder::new()
                    .name("unix-accept".into())
                    .spawn(move || {
                        for conn in unix.incoming() {
                            match conn {
                                Ok(conn) => {
                                    let to = load.place(None);
                                    if txs[to].send(conn).is_err() {
                                        load.adopted(to);
                                    }
                                }
                                Err(e) => {
                                    log::warn!("unix socket accept failed: {e}");
                                    std::thread::sleep(std::time::Duration::from_millis(10));
                                }
                            }
                        }
                    })
                    .map_err(|e| format!("cannot start the Unix socket thread: {e}"))?;
            }
        }
    }
    let mut handles = Vec::with_capacity(shards);
    for (id, ((((listener, cancel_rx), mesh_rx), (unix_fd, unix_rx)), dealt_rx)) in listeners
        .sockets
        .into_iter()
        .zip(receivers)
        .zip(mesh_receivers)
        .zip(unix_fds.into_iter().zip(unix_receivers))
        .zip(deal_receivers)
        .enumerate()
    {
        let dealer = dealer.clone();
        let placement = match &config.placement {
            Placement::Pinned(cores) => GlommioPlacement::Fixed(cores[id]),
            Placement::Unpinned(_) => GlommioPlacement::Unbound,
        };
        let config = config.clone();
        let make_engine = make_engine.clone();
        let senders = senders.clone();
        let load = load.clone();
        let bells = bells.clone();
        let mesh = Mesh {
            shard_id: id,
            senders: mesh_senders.clone(),
            bells: bells.clone(),
        };
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(config.io_memory_bytes)
            .spawn(move || async move {
                if config.sched_batch {
                    batch_policy(id);
                }
                crate::metrics::install(Rc::new(crate::metrics::ShardMetrics::new(
                    id,
                    config.metrics_enabled,
                )));
                // On the io_uring path the driver comes first: the engine may start tasks that
                // use timers, and `shards::time` finds the driver when a timer is created.
                let mut glommio_listener = None;
                let driver = match config.io {
                    IoMode::Uring => {
                        let mut fds = vec![(OwnedFd::from(listener), false)];
                        fds.extend(unix_fd.map(|fd| (fd, true)));
                        match Driver::new(fds, bells[id].clone()) {
                            Ok(d) => Some(d),
                            Err(e) => {
                                // probe() passed at startup: this is resource exhaustion.
                                eprintln!("ringwire: shard {id} cannot set up its io_uring: {e}");
                                std::process::exit(1);
                            }
                        }
                    }
                    IoMode::Glommio => {
                        glommio_listener = Some(listener);
                        None
                    }
                };
                let engine = make_engine(mesh);
                let shard = Rc::new(Shard::new(
                    id,
                    engine,
                    config.clone(),
                    senders,
                    bells.clone(),
                    load,
                ));
                let inputs = ShardInputs {
                    cancels: cancel_rx,
                    mesh: mesh_rx,
                    dealt: dealt_rx,
                };
                match (driver, glommio_listener) {
                    (Some(driver), _) => uring_main(shard, driver, inputs, dealer).await,
                    (None, Some(listener)) => glommio_main(shard, listener, unix_rx, inputs).await,
                    (None, None) => unreachable!("one socket path is set up"),
                }
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

/// Make the calling thread SCHED_BATCH (`--sched-batch`). Linux does not let a woken
/// SCHED_BATCH thread preempt the one running (`check_preempt_wakeup_fair` returns early for
/// any policy but SCHED_NORMAL), so a shard woken by one client's bytes waits until that core's
/// thread sleeps or its slice ends, and by then more clients' bytes (or an upstream's replies)
/// are there for the same turn. Off by default: it costs latency wherever other CPU-bound
/// work shares the cores (docs/PERF.md, "Session 11"). A failure only loses the batching, so
/// it is a warning.
fn batch_policy(shard: usize) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
        log::warn!(
            "shard {shard}: cannot set SCHED_BATCH ({}); it runs with the default policy",
            std::io::Error::last_os_error()
        );
    }
}

/// What other shards send to this one.
struct ShardInputs<M> {
    cancels: flume::Receiver<CancelMessage>,
    mesh: flume::Receiver<M>,
    /// Connections another shard accepted and dealt to this one (io_uring path).
    dealt: flume::Receiver<(OwnedFd, Peer)>,
}

/// Hands an accepted connection to the least loaded shard (io_uring path, see `Load::place`).
struct Dealer {
    /// Deal TCP connections too (`--balance-connections`), not only Unix-domain ones.
    tcp: bool,
    shards: Vec<flume::Sender<(OwnedFd, Peer)>>,
    bells: Arc<Vec<Arc<Doorbell>>>,
    load: Arc<Load>,
}

impl Dealer {
    /// `Some` if shard `me` keeps the connection.
    fn deal(&self, me: usize, fd: OwnedFd, peer: Peer) -> Option<(OwnedFd, Peer)> {
        if !self.tcp && matches!(peer, Peer::Tcp(_)) {
            return Some((fd, peer));
        }
        let to = self.load.place(Some(me));
        if to == me {
            return Some((fd, peer));
        }
        match self.shards[to].send((fd, peer)) {
            Ok(()) => {
                self.bells[to].ring();
                None
            }
            // That shard has stopped: serve the client here.
            Err(flume::SendError(conn)) => {
                self.load.adopted(to);
                Some(conn)
            }
        }
    }
}

/// A shard on the io_uring path: the driver owns the sockets and the thread's sleep, and
/// drains the cross-shard channels itself (see `uring`).
async fn uring_main<E: Engine>(
    shard: Rc<Shard<E>>,
    driver: Rc<Driver>,
    inputs: ShardInputs<E::Message>,
    dealer: Arc<Dealer>,
) {
    let me = shard.id;
    driver.set_deal(Box::new(move |fd, peer| dealer.deal(me, fd, peer)));
    let inputs = Rc::new(inputs);
    let on_accept = {
        let shard = shard.clone();
        Box::new(move |stream, peer| spawn_connection(shard.clone(), stream, Some(peer)))
    };
    let drain = {
        let (shard, inputs) = (shard.clone(), inputs.clone());
        Box::new(move || {
            let mut n = 0;
            while let Ok(msg) = inputs.mesh.try_recv() {
                shard.engine.on_message(msg);
                n += 1;
            }
            while let Ok(msg) = inputs.cancels.try_recv() {
                shard.apply_cancel(msg);
                n += 1;
            }
            while let Ok((fd, peer)) = inputs.dealt.try_recv() {
                if let Some(driver) = crate::uring::current() {
                    driver.adopt(fd, peer);
                }
                shard.load.adopted(shard.id);
                n += 1;
            }
            n
        })
    };
    driver.set_handlers(on_accept, drain);
    driver.set_spin(shard.config.idle_spin);
    log::debug!("shard {} serving on its io_uring", shard.id);
    driver.run().await
}

/// A shard on glommio's sockets.
async fn glommio_main<E: Engine>(
    shard: Rc<Shard<E>>,
    listener: StdListener,
    unix: Option<flume::Receiver<std::os::unix::net::UnixStream>>,
    inputs: ShardInputs<E::Message>,
) {
    // Unix connections come dealt by the accept thread here (`unix`), not through `dealt`.
    let ShardInputs { cancels, mesh, .. } = inputs;
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
    if let Some(unix) = unix {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Ok(conn) = unix.recv_async().await {
                // SAFETY: the accepted socket's fd moves into the glommio stream.
                let stream = unsafe { glommio::net::UnixStream::from_raw_fd(conn.into_raw_fd()) };
                spawn_connection(shard.clone(), stream, Some(Peer::Unix));
                shard.load.adopted(shard.id);
            }
        })
        .detach();
    }
    // SAFETY: `listener` is a listening socket we own; ownership moves into glommio's.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(listener.into_raw_fd()) };
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
        let peer = stream.peer_addr().ok().map(Peer::Tcp);
        spawn_connection(shard.clone(), stream, peer);
    }
}

/// Serve one accepted connection on its own task.
fn spawn_connection<E, S>(shard: Rc<Shard<E>>, stream: S, peer: Option<Peer>)
where
    E: Engine,
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let within_limit = shard.connection_opened();
    shard.metrics.connection_opened();
    if !within_limit {
        shard.metrics.connection_rejected();
    }
    log::info!("shard {}: connection from {peer:?} opened", shard.id);
    glommio::spawn_local(async move {
        let end = serve(shard.clone(), stream, peer, !within_limit).await;
        shard.connection_closed();
        shard.metrics.connection_closed();
        if let End::Fatal(e) = &end {
            shard.metrics.record_error(e.code.0);
        }
        match end {
            End::ClientClosed | End::Terminated | End::CancelRequest => {
                log::info!(
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
