//! A helper process's pipes, read to their ends within a time limit: the Wasm backend's compiler
//! process and the Python backend's guest builder both run one.

use std::io::{Read, Write};
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// At most this much of each of a helper's pipes is kept (the end of it): a model's build prints
/// what its module-level code prints, which must not grow the server.
pub(crate) const KEPT_OUTPUT: usize = 64 << 10;

/// Feeds `input` to the child's stdin and reads its stdout and stderr to their ends, each on a
/// thread of its own (so no pipe waits on another), calling `stop` on the child if that takes
/// longer than `timeout`: its pipes then close and the reads end. `stop` must end every process
/// that holds the pipes (the child, or its whole process group when it starts others). Returns
/// how the feeding went, the last [`KEPT_OUTPUT`] bytes of stdout and of stderr, and whether
/// `stop` was called.
pub(crate) fn drain_within(
    child: &mut Child,
    input: &[u8],
    timeout: Duration,
    stop: impl FnOnce(&mut Child),
) -> (std::io::Result<()>, Vec<u8>, Vec<u8>, bool) {
    fn read_all(pipe: Option<impl Read>) -> Vec<u8> {
        let mut kept = Vec::new();
        let Some(mut pipe) = pipe else { return kept };
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    kept.extend_from_slice(&chunk[..n]);
                    if kept.len() > 2 * KEPT_OUTPUT {
                        kept.drain(..kept.len() - KEPT_OUTPUT);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if kept.len() > KEPT_OUTPUT {
            kept.drain(..kept.len() - KEPT_OUTPUT);
        }
        kept
    }
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (done, ended) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        // Dropping stdin when written tells the child its input is complete.
        let fed = scope.spawn(move || stdin.map_or(Ok(()), |mut stdin| stdin.write_all(input)));
        let out = scope.spawn(move || read_all(stdout));
        let err = scope.spawn(move || {
            let read = read_all(stderr);
            drop(done);
            read
        });
        // The stderr reader's sender drops at the end of the child's stderr: when it exits.
        let timed_out = ended.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout);
        if timed_out {
            stop(child);
        }
        let fed = fed.join().unwrap_or_else(|_| Err(std::io::Error::other("the feeding thread panicked")));
        (fed, out.join().unwrap_or_default(), err.join().unwrap_or_default(), timed_out)
    })
}
