//! The controller process: its async runtime and its allocator's settings, set before any thread
//! starts.

use anyhow::Context;

/// The runtime `slipway run` works on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The controller waits on the API server far more than it computes, and its decisions of one
/// object run one at a time: more threads than this bring only memory (stacks, allocator state).
const MAX_WORKER_THREADS: usize = 4;

fn worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKER_THREADS))
}

/// glibc's malloc gives each thread that allocates at once an arena of its own and keeps what is
/// freed in each: 4 MiB of the controller's resident memory at 1,000 nodes, for no measurable
/// speed (docs/performance.md). Called before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_malloc_arena() {
    const M_ARENA_MAX: std::ffi::c_int = -8;
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    // SAFETY: mallopt only sets an allocator parameter; it takes plain integers and is called
    // while the process has a single thread.
    let set = unsafe { mallopt(M_ARENA_MAX, 1) };
    if set != 1 {
        eprintln!("slipway: mallopt(M_ARENA_MAX) refused; malloc keeps its arenas");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_malloc_arena() {}
