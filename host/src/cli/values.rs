//! How flag values are read (with Triton's words where Triton checks them) and the defaults that
//! depend on the machine.

/// Triton parses booleans from these words; so do we (`--exit-on-error=false`, `--strict-model-config 0`).
pub(super) fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(format!("'{value}' is not a boolean (use true or false)")),
    }
}

/// One connection thread per CPU; on one CPU none, since the shared runtime's one worker is
/// already that thread (a second would add a hand-off between it and the batcher's).
pub(super) fn default_connection_threads() -> usize {
    match std::thread::available_parallelism().map_or(1, usize::from) {
        1 => 0,
        cpus => cpus,
    }
}

/// Each door's default connection cap: 1024, or a third of the open-file limit when that is
/// lower, so that both doors full still leave a third of the descriptors for model files,
/// compiler pipes, shared memory and the like (with half each, stalling both ports at once used
/// every descriptor and real clients of both doors hung).
pub(super) fn default_max_connections() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    #[allow(unsafe_code)]
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let third = if known { usize::try_from(limit.rlim_cur / 3).unwrap_or(usize::MAX) } else { usize::MAX };
    third.clamp(16, 1024)
}

pub(super) fn parse_byte_size(value: &str) -> Result<usize, String> {
    value.trim().parse::<usize>().map_err(|_| format!("'{value}' is not a byte count"))
}

/// `--http-max-input-size`, refused at 0 as Triton 2.7x refuses it.
pub(super) fn parse_max_input_size(value: &str) -> Result<usize, String> {
    match parse_byte_size(value)? {
        0 => Err("Error: --http-max-input-size must be greater than 0.".into()),
        n => Ok(n),
    }
}

pub(super) fn parse_grpc_infer_threads(value: &str) -> Result<u32, String> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (2..=128).contains(n))
        .ok_or_else(|| "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.".into())
}

pub(super) fn parse_response_pool(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "Error: --grpc-max-response-pool-size must be greater than 0.".into())
}
