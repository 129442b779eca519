//! A helper process's pipes, read to their ends within a time limit: the Wasm backend's compiler
//! process and the Python backend's guest builder both run one.

use std::io::{Read, Write};
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// What a helper's stderr keeps (the end of it), and the guest builder's stdout: a model's build
/// prints what its module-level code prints, which must not grow the server.
pub(crate) const BUILD_OUTPUT: usize = 64 << 10;

/// Feeds `input` to the child's stdin and reads its stdout and stderr to their ends, each on a
/// thread of its own (so no pipe waits on another), calling `stop` on the child if that takes
/// longer than `timeout`: its pipes then close and the reads end. `stop` must end every process
/// that holds the pipes (the child, or its whole process group when it starts others). Returns
/// how the feeding went, stdout (only its last `keep_stdout` bytes when given: the compiler's
/// stdout is its artifact, kept whole), the last [`BUILD_OUTPUT`] bytes of stderr, and whether
/// `stop` was called.
pub(crate) fn drain_within(
    child: &mut Child,
    input: &[u8],
    timeout: Duration,
    stop: impl FnOnce(&mut Child),
    keep_stdout: Option<usize>,
) -> (std::io::Result<()>, Vec<u8>, Vec<u8>, bool) {
    fn read_all(pipe: Option<impl Read>, limit: usize) -> Vec<u8> {
        let mut kept = Vec::new();
        let Some(mut pipe) = pipe else { return kept };
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    kept.extend_from_slice(&chunk[..n]);
                    if kept.len() > limit.saturating_mul(2) {
                        kept.drain(..kept.len() - limit);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if kept.len() > limit {
            kept.drain(..kept.len() - limit);
        }
        kept
    }
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (done, ended) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        // Dropping stdin when written tells the child its input is complete.
        let fed = scope.spawn(move || stdin.map_or(Ok(()), |mut stdin| stdin.write_all(input)));
        let out = scope.spawn(move || read_all(stdout, keep_stdout.unwrap_or(usize::MAX)));
        let err = scope.spawn(move || {
            let read = read_all(stderr, BUILD_OUTPUT);
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
