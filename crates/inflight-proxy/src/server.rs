//! The accept loop of one listener: at most `max_connections` clients at once (one more closes
//! the connection idle longest, or waits), each connection served by `conn` until the proxy
//! stops; then it stops accepting, lets each connection finish the request it is serving, and
//! ends when all have closed. Aborting its task aborts every connection's.

use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::body::ProxyBody;
use crate::config::ClientLimits;
use crate::conn::{self, Accounted, Conn, Open};
use crate::metrics::{Closed, ConnMetrics, LogPace};
use crate::Log;

/// When a full listener's closing connection has not made room yet, how long until another
/// idle one is asked to.
const MAKE_ROOM_AGAIN: Duration = Duration::from_millis(100);

/// How long a connection must have been idle to make room for a new one: a client that has
/// just connected, or just had its answer, is not taken for a leaked one.
const IDLE_ENOUGH_MS: u64 = 1000;

/// After an accept error (out of file descriptors), how long to wait before accepting again;
/// the errors are logged at most once a second, with how many were left out.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `listener` with `handle` until `stop` turns true, within `limits`; see the module
/// docs. Malformed requests are answered by hyper itself: 400, or 431 for headers too large.
pub(crate) fn spawn<F, Fut>(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    log: Log,
    limits: ClientLimits,
    metrics: Arc<ConnMetrics>,
    handle: F,
) -> JoinHandle<()>
where
    F: Fn(Request<Incoming>, crate::headers::Peer) -> Fut + Clone + Send + Sync + Unpin + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let open: Open = Arc::default();
        let epoch = Instant::now();
        let mut next_id = 0u64;
        let accept_errors = LogPace::new();
        let mut connections = JoinSet::new();
        let mut sweep = tokio::time::interval(sweep_every(limits.idle_timeout));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|stop| *stop) => break,
                Some(_) = connections.join_next() => continue,
                _ = sweep.tick() => {
                    close_idle(&open, limits.idle_timeout);
                    continue;
                }
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    if let Some(left_out) = accept_errors.may_log(std::time::Instant::now()) {
                        let line = format!(
                            "cannot accept a connection: {e}; trying again every {} ms",
                            ACCEPT_BACKOFF.as_millis()
                        );
                        log(&LogPace::with_left_out(&line, left_out));
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        _ = stop.wait_for(|stop| *stop) => break,
                    }
                    continue;
                }
            };
            let slot = match slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    // Full: the connection idle longest makes room, or the new one waits. A
                    // close that takes long (an HTTP/2 client slow to answer its GOAWAY, or one
                    // that turned busy) does not hold the listener: another idle one is asked.
                    let slot = loop {
                        if let Some(idlest) = idle_longest(&open) {
                            idlest.close(Some(Closed::MaxConnections));
                        }
                        tokio::select! {
                            slot = slots.clone().acquire_owned() => break Some(slot.expect("never closed")),
                            () = tokio::time::sleep(MAKE_ROOM_AGAIN) => {}
                            _ = stop.wait_for(|stop| *stop) => break None,
                        }
                    };
                    match slot {
                        Some(slot) => slot,
                        None => break,
                    }
                }
            };
            let _ = stream.set_nodelay(true);
            let id = next_id;
            next_id += 1;
            let conn = Arc::new(Conn::new(epoch));
            open.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, conn.clone());
            metrics.opened();
            let accounted = Accounted::new(open.clone(), id, metrics.clone(), slot);
            // The connection's future alone: its task holds nothing else while it idles.
            connections.spawn(conn::serve(
                stream,
                peer,
                conn,
                limits,
                stop.clone(),
                accounted,
                handle.clone(),
            ));
        }
        drop(listener);
        // Parked connections wait for no signal but their own: each is told.
        let open: Vec<Arc<Conn>> = open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for conn in open {
            conn.close(None);
        }
        while connections.join_next().await.is_some() {}
    })
}

/// How often a listener looks for connections idle past `idle_timeout`: an eighth of it,
/// between 10 ms and 1 s. A parked HTTP/1.1 connection is closed by this sweep, up to that
/// late, instead of by a timer of its own.
fn sweep_every(idle_timeout: Duration) -> Duration {
    (idle_timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Asks every connection idle for `idle_timeout` or longer to close (one still to send its
/// first bytes is `first_byte_timeout`'s).
fn close_idle(open: &Open, idle_timeout: Duration) {
    let limit = idle_timeout.as_millis() as u64;
    let open = open.lock().unwrap_or_else(PoisonError::into_inner);
    for conn in open.values() {
        if conn
            .idle_after_first_bytes()
            .is_some_and(|idle| idle >= limit)
        {
            conn.close(Some(Closed::IdleTimeout));
        }
    }
}

/// The open connection that has had no request in progress for longest, if one has been idle
/// for [`IDLE_ENOUGH_MS`] at least and is not closing already.
fn idle_longest(open: &Open) -> Option<Arc<Conn>> {
    let open = open.lock().unwrap_or_else(PoisonError::into_inner);
    // In reverse, so that of several idle as long, the one accepted first is taken.
    open.values()
        .rev()
        .filter_map(|c| Some((c.idle_for()?, c)))
        .filter(|(idle, _)| *idle >= IDLE_ENOUGH_MS)
        .max_by_key(|(idle, _)| *idle)
        .map(|(_, c)| c.clone())
}
