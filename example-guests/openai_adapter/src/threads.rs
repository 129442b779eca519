//! The POSIX thread calls Rust's std links on WASI preview 1 when a crate can spawn threads (the
//! `tokenizers` crate's rayon), which Debian's single-threaded wasi-libc lacks. Each answers
//! `EAGAIN` ("no resources to make a thread"), so `std::thread::spawn` returns an error rather
//! than the component failing to link. Nothing spawns here: `initialize` turns tokenizers'
//! parallelism off, so rayon is never asked for a thread.

const EAGAIN: i32 = 6;

#[unsafe(no_mangle)]
extern "C" fn pthread_attr_init(_attr: *mut u8) -> i32 {
    0
}

#[unsafe(no_mangle)]
extern "C" fn pthread_attr_setstacksize(_attr: *mut u8, _size: usize) -> i32 {
    0
}

#[unsafe(no_mangle)]
extern "C" fn pthread_attr_destroy(_attr: *mut u8) -> i32 {
    0
}

#[unsafe(no_mangle)]
extern "C" fn pthread_create(_thread: *mut usize, _attr: *const u8, _start: *const u8, _arg: *mut u8) -> i32 {
    EAGAIN
}

#[unsafe(no_mangle)]
extern "C" fn pthread_detach(_thread: usize) -> i32 {
    0
}
