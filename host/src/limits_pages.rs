//! Memory for large request bytes (an inflated message or body, a large plain gRPC message) that
//! goes back to the kernel the moment it is released.
//!
//! Why not the allocator: memory freed to mimalloc stays resident a while (its purge delay, and
//! longer on a thread that goes idle), where the budget of request bytes no longer counts it, and
//! another thread's next large request takes fresh pages beside it. Under a burst of compression
//! bombs that is how the resident set passed the budget by most of the budget again: each bomb
//! refused gave its budget back at once but its pages only later. Pages mapped for one buffer
//! alone cost memory only once written (the budget is charged before each write) and are unmapped
//! when the buffer goes, so what is resident stays what is charged.
//!
//! A buffer handed on in frames ([`Pages::into_frames`]) gives each frame's pages back as soon as
//! that frame is dropped: tonic copies a message frame by frame into its own buffer, so the
//! message is never held twice.

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// A buffer of mapped pages: `len` bytes written out of `capacity` mapped (the rest reads as
/// zeros and costs nothing until written).
pub struct Pages {
    base: NonNull<u8>,
    capacity: usize,
    len: usize,
}

// SAFETY: `Pages` owns its mapping alone (like a `Vec<u8>`): nothing else points into it, and
// shared access only reads.
unsafe impl Send for Pages {}
// SAFETY: as above; `&Pages` only reads.
unsafe impl Sync for Pages {}

impl Pages {
    /// Maps `capacity` bytes (at least one page), none of them resident yet.
    pub fn new(capacity: usize) -> std::io::Result<Self> {
        let capacity = capacity.max(1);
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks: no existing
        // memory is affected. MAP_NORESERVE: unwritten pages take no swap reservation.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                capacity,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Self { base, capacity, len: 0 })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes written.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `base` maps `capacity >= len` readable bytes, owned by `self` for the borrow.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    /// The room after the bytes written (mapped, zeros until written): write, then [`Self::advance`].
    pub fn spare(&mut self) -> &mut [u8] {
        // SAFETY: `base + len .. base + capacity` is mapped writable, initialised (anonymous pages
        // read as zeros) and borrowed mutably through `self` alone.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(self.len), self.capacity - self.len) }
    }

    /// Counts `n` more bytes of [`Self::spare`] as written.
    pub fn advance(&mut self, n: usize) {
        self.len = (self.len + n).min(self.capacity);
    }

    /// Appends `data`, which must fit in [`Self::spare`] (what does not is left out).
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.capacity - self.len);
        self.spare()[..n].copy_from_slice(&data[..n]);
        self.advance(n);
        n
    }

    /// Grows the mapping to `capacity` bytes, moving it if it must (the kernel moves the pages:
    /// nothing is copied, nothing is held twice).
    pub fn grow(&mut self, capacity: usize) -> std::io::Result<()> {
        if capacity <= self.capacity {
            return Ok(());
        }
        // SAFETY: `base` / `self.capacity` is this buffer's own mapping; MREMAP_MAYMOVE gives a
        // new address (the old one is then unmapped), and no reference into the old one is alive
        // (`&mut self`).
        let moved = unsafe { libc::mremap(self.base.as_ptr().cast(), self.capacity, capacity, libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        self.base = NonNull::new(moved.cast::<u8>()).ok_or_else(|| std::io::Error::other("mremap returned null"))?;
        self.capacity = capacity;
        Ok(())
    }

    /// The bytes written as one `Bytes` (no copy); the pages go back when the last clone does.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }

    /// The bytes written as frames of `chunk` bytes (a multiple of the page size, so that frames
    /// share no page), no copy; each frame's pages go back to the kernel as soon as the frame (and
    /// every clone of it) is dropped.
    pub fn into_frames(self, chunk: usize) -> Vec<Bytes> {
        let len = self.len;
        let chunk = chunk.max(page_size()).next_multiple_of(page_size());
        let pages = Arc::new(self);
        (0..len)
            .step_by(chunk)
            .map(|start| Bytes::from_owner(Frame { pages: Arc::clone(&pages), start, end: (start + chunk).min(len) }))
            .collect()
    }
}

impl AsRef<[u8]> for Pages {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the buffer's own mapping, unmapped once; nothing refers to it any more.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.capacity);
        }
    }
}

/// One frame of a [`Pages`] buffer (see [`Pages::into_frames`]).
struct Frame {
    pages: Arc<Pages>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        // Only this frame's bytes: other frames' pages may be given back meanwhile.
        // SAFETY: `start..end` lies within the bytes written, in the mapping `self.pages` keeps
        // alive; nothing writes them any more.
        unsafe { std::slice::from_raw_parts(self.pages.base.as_ptr().add(self.start), self.end - self.start) }
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        // The frame's bytes are no longer read by anyone: give their pages back now rather than
        // when the last frame goes. `start` is page-aligned (frames are whole pages, the mapping
        // starts on one); the kernel rounds the length up to the frame's last page, which holds
        // nothing of the next frame.
        // SAFETY: the range lies inside the mapping, which `self.pages` keeps alive; no reference
        // into it is alive (this frame was its only reader, and frames do not overlap). The pages
        // read as zeros afterwards, and nobody reads them.
        unsafe {
            libc::madvise(self.pages.base.as_ptr().add(self.start).cast(), self.end - self.start, libc::MADV_DONTNEED);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}

/// Resident memory of this process, in KiB (for the tests: what a buffer costs).
#[cfg(test)]
pub fn resident_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn written_bytes_read_back_and_growth_keeps_them() {
        let mut pages = Pages::new(4096).unwrap();
        assert_eq!(pages.extend_from_slice(b"hello"), 5);
        pages.grow(3 * MIB).unwrap();
        assert_eq!(pages.as_slice(), b"hello");
        assert_eq!(pages.spare().len(), 3 * MIB - 5);
        assert!(pages.spare().iter().take(1000).all(|b| *b == 0));
        let bytes = pages.into_bytes();
        assert_eq!(&bytes[..], b"hello");
    }

    #[test]
    fn frames_cover_the_bytes_in_order() {
        let mut pages = Pages::new(3 * MIB).unwrap();
        let data: Vec<u8> = (0..(2 * MIB + 100)).map(|i| (i % 251) as u8).collect();
        pages.extend_from_slice(&data);
        let frames = pages.into_frames(MIB);
        assert_eq!(frames.iter().map(Bytes::len).collect::<Vec<_>>(), vec![MIB, MIB, 100]);
        assert_eq!(frames.concat(), data);
    }

    // Resident memory is the process's: other tests running at once move it too, so the bound
    // is loose; what it catches is the 64 MiB staying resident.
    #[test]
    fn pages_go_back_to_the_kernel_when_released() {
        let mut pages = Pages::new(64 * MIB).unwrap();
        pages.spare().fill(1);
        pages.advance(64 * MIB);
        let frames = pages.into_frames(MIB);
        let written = resident_kib();
        drop(frames);
        let released = resident_kib();
        assert!(written.saturating_sub(released) > 48 * 1024, "{written} KiB, then {released} KiB");
    }
}
