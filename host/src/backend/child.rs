//! A helper process's pipes, read to their ends within a time limit: the Wasm backend's compiler
//! process and the Python backend's guest builder both run one.

use std::io::{Read, Write};
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Feeds `input` to the child's stdin and reads its stdout and stderr to their ends, each on a
/// thread of its own (so no pipe waits on another), calling `stop` on the child if that takes
/// longer than `timeout`: its pipes then close and the reads end. `stop` must end every process
/// that holds the pipes (the child, or its whole process group when it starts others). Returns
/// how the feeding went, stdout, stderr, and whether `stop` was called.
pub(crate) fn drain_within(
    child: &mut Child,
    input: &[u8],
    timeout: Duration,
    stop: impl FnOnce(&mut Child),
) -> (std::io::Result<()>, Vec<u8>, Vec<u8>, bool) {
    fn read_all(pipe: Option<impl Read>) -> Vec<u8> {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
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
