//! Confinement of the Python guest builder with Landlock (Linux 5.13+): the builder and every
//! process it starts may read and execute only what a build needs (the system's libraries, the
//! checkout's toolchain, the shared caches), write only their own build directory, reach no TCP
//! port unless the phase fetches packages, and signal no process outside the build.
//!
//! The ruleset is made in the server before the fork ([`Confinement::ruleset`]); the child only
//! makes the system calls that enforce it ([`Ruleset::enforce`]), which allocate nothing, so
//! they are safe between fork and exec in a multi-threaded server. A kernel without Landlock
//! builds unconfined, with a warning logged once (docs/wasm.md, "Threat model").

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// Every filesystem right of ABI 1 (execute through make-symlink).
const ABI1_FS: u64 = (1 << 13) - 1;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// Rights on a file (as opposed to a directory) that Landlock accepts in a rule.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// What one builder run may touch.
#[derive(Debug, Default, Clone)]
pub(super) struct Confinement {
    /// Read and execute (the system, the toolchain).
    pub read_exec: Vec<PathBuf>,
    /// Read only (shared caches, inputs).
    pub read: Vec<PathBuf>,
    /// Read and write, create and remove (the build directory; a fetch's cache).
    pub write: Vec<PathBuf>,
    /// Whether TCP connections are allowed (only a phase that fetches packages).
    pub network: bool,
}

/// A Landlock ruleset ready to enforce in a child process; `None` inside when the kernel has no
/// Landlock.
pub(super) struct Ruleset(Option<OwnedFd>);

impl Confinement {
    /// The system directories every build reads: libraries, interpreters, the dynamic loader's
    /// configuration, certificates and name resolution (for a fetch), and a few devices.
    pub(super) fn system() -> Self {
        let mut c = Self::default();
        for dir in ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin"] {
            c.read_exec.push(dir.into());
        }
        for etc in [
            "/etc/ld.so.cache",
            "/etc/ld.so.conf",
            "/etc/ld.so.conf.d",
            "/etc/alternatives",
            "/etc/ssl",
            "/etc/ca-certificates",
            "/etc/pki",
            "/etc/pip.conf",
            "/etc/xdg/pip",
            "/etc/resolv.conf",
            "/etc/hosts",
            "/etc/nsswitch.conf",
            "/etc/host.conf",
            "/etc/gai.conf",
            "/etc/localtime",
            "/etc/passwd",
            "/etc/group",
            "/etc/mime.types",
            // pip names the distribution in its user agent
            "/etc/os-release",
            "/etc/debian_version",
            "/etc/lsb-release",
            "/etc/system-release",
            "/dev/urandom",
            "/dev/random",
            "/dev/zero",
        ] {
            c.read.push(etc.into());
        }
        c.write.push("/dev/null".into());
        c
    }

    /// Builds the ruleset (in the server, before the fork). Paths that do not exist are
    /// skipped. `Err` for a kernel that refuses a rule it should accept.
    pub(super) fn ruleset(&self) -> std::io::Result<Ruleset> {
        let abi = landlock_abi();
        if abi < 1 {
            warn_unconfined_once();
            return Ok(Ruleset(None));
        }
        let mut fs = ABI1_FS;
        if abi >= 2 {
            fs |= REFER;
        }
        if abi >= 3 {
            fs |= TRUNCATE;
        }
        if abi >= 5 {
            fs |= IOCTL_DEV;
        }
        if abi < 4 && !self.network {
            warn_once_no_network_rules();
        }
        let net = if abi >= 4 && !self.network { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 };
        let scoped = if abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 };
        let attr = RulesetAttr { handled_access_fs: fs, handled_access_net: net, scoped };
        // SAFETY: the attribute is a live, initialised struct of the size passed.
        #[allow(unsafe_code)]
        let fd = unsafe {
            libc::syscall(libc::SYS_landlock_create_ruleset, &raw const attr, std::mem::size_of::<RulesetAttr>(), 0u32)
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        #[allow(unsafe_code)]
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let read_exec = EXECUTE | READ_FILE | READ_DIR;
        let read = READ_FILE | READ_DIR;
        for (paths, rights) in [(&self.read_exec, read_exec), (&self.read, read), (&self.write, fs)] {
            for path in paths {
                add_rule(&ruleset, path, rights & fs)?;
            }
        }
        Ok(Ruleset(Some(ruleset)))
    }
}

/// Adds one path-beneath rule; a missing path is skipped.
fn add_rule(ruleset: &OwnedFd, path: &Path, rights: u64) -> std::io::Result<()> {
    let Ok(name) = CString::new(path.as_os_str().as_bytes()) else { return Ok(()) };
    // SAFETY: a NUL-terminated path; O_PATH opens nothing for reading.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::open(name.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: a descriptor we just opened and own.
    #[allow(unsafe_code)]
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    let rights = if is_dir { rights } else { rights & FILE_RIGHTS };
    let attr = PathBeneathAttr { allowed_access: rights, parent_fd: fd.as_raw_fd() };
    // SAFETY: both descriptors are open; the attribute is live for the call.
    #[allow(unsafe_code)]
    let done = unsafe {
        libc::syscall(libc::SYS_landlock_add_rule, ruleset.as_raw_fd(), RULE_PATH_BENEATH, &raw const attr, 0u32)
    };
    if done < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::other(format!("landlock rule for {}: {e}", path.display())));
    }
    Ok(())
}

impl Ruleset {
    /// In the child, between fork and exec: no new privileges, SIGTERM when the server's thread
    /// that started it dies (the builder then kills its process group), then the ruleset. Only
    /// system calls: nothing here allocates.
    /// `parent` is the server's pid, read before the fork.
    pub(super) fn enforce(&self, parent: libc::pid_t) -> std::io::Result<()> {
        // SAFETY: prctl and the Landlock calls take plain integers and a descriptor we own.
        #[allow(unsafe_code)]
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The server may have died between the fork and the call above.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = &self.0
                && libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The Landlock ABI version of this kernel, 0 when it has none (or it is disabled).
pub(super) fn landlock_abi() -> i64 {
    // SAFETY: the version query takes no memory (a null attribute and size 0).
    #[allow(unsafe_code)]
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    abi.max(0)
}

fn warn_once_no_network_rules() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "this kernel's Landlock has no network rules (ABI 4, Linux 6.7): Python guest builds are confined \
             to their files but may open TCP connections; see docs/wasm.md"
        );
    });
}

fn warn_unconfined_once() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "this kernel has no Landlock: Python guest builds run without filesystem and network confinement \
             (model code still runs only inside componentize-py's WebAssembly sandbox); see docs/wasm.md"
        );
    });
}
