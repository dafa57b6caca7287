//! The controller process: its async runtime and its allocator's settings, set before any thread
//! starts.

use anyhow::Context;

/// The runtime `slipway run` works on: one thread. The controller waits on the API server far
/// more than it computes, and its decisions of one object run one at a time; on a runtime of
/// several workers each watch event and each HTTP answer woke another thread (hyper's connection
/// tasks on a worker, the controllers on the thread that blocks on them), and those wake-ups were
/// a tenth of the CPU. On one thread the 1,000-node rollout took 3.7 CPU s instead of 4.3 to 4.8,
/// in the same wall time (docs/performance.md). Blocking work still goes to tokio's blocking pool.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
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
