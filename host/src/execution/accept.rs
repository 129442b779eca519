//! Accepting connections when the process runs out of file descriptors (`EMFILE`, `ENFILE`).
//!
//! Without care, a listener whose `accept` fails for lack of descriptors leaves the waiting
//! client in the backlog, where it hangs until its own timeout, and the accept loop retries in a
//! tight loop. Each door's accept loop therefore keeps one descriptor in reserve (`/dev/null`):
//! when descriptors run out it gives the reserve up, accepts the waiting connection with it,
//! hands it back for the door to refuse at once (HTTP: 503 with a message; gRPC: closed, which
//! its client sees as UNAVAILABLE) and takes the reserve again. The connections already open
//! keep being served, and the server takes new ones as soon as descriptors free up.

use std::io;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

/// The refusals between two warnings in the log.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// One door's accept loop's reserve descriptor and its warnings.
pub struct Acceptor {
    door: &'static str,
    reserve: Option<std::fs::File>,
    last_warning: Option<Instant>,
    refused: u64,
}

fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

impl Acceptor {
    pub fn new(door: &'static str) -> Self {
        Self { door, reserve: std::fs::File::open("/dev/null").ok(), last_warning: None, refused: 0 }
    }

    /// After `accept` failed with `error`: for lack of descriptors, the waiting connection, taken
    /// with the reserve for the door to refuse (`None` if there was none to take); for anything
    /// else, nothing, after a short pause (the error is logged).
    pub async fn recover(&mut self, listener: &TcpListener, error: io::Error) -> Option<TcpStream> {
        if !out_of_descriptors(&error) {
            tracing::warn!("{} accept failed: {error}", self.door);
            tokio::time::sleep(Duration::from_millis(50)).await;
            return None;
        }
        self.reserve = None;
        let taken = match tokio::time::timeout(Duration::from_millis(10), listener.accept()).await {
            Ok(Ok((stream, _))) => Some(stream),
            _ => None,
        };
        self.reserve = std::fs::File::open("/dev/null").ok();
        self.refused += 1;
        if self.last_warning.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            tracing::warn!(
                "{}: out of file descriptors ({error}); refusing new connections until some close \
                 ({} refused so far; raise the open-file limit or lower the connection caps)",
                self.door,
                self.refused
            );
            self.last_warning = Some(Instant::now());
        }
        if taken.is_none() {
            // Nothing to take even with the reserve: the whole system is out. Wait a little.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        taken
    }
}
