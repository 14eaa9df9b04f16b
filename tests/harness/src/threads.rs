//! Waiting in a test: for a condition, and for one of this process's own
//! threads to block in a call.

use std::thread;
use std::time::{Duration, Instant};

/// Waits until `thread` (found by its name, which must be its own) is
/// asleep in the kernel (state `S` in `/proc/self/task/*/stat`) at five
/// reads in a row, 20 ms apart: blocked in a call, not running on its way
/// to one. A test that must act while a thread waits (a fork, a close)
/// waits for this, never for a guessed time. False once `finished` says
/// the thread returned; panics after `within`.
pub fn wait_until_asleep(
    thread: &thread::Thread,
    finished: impl Fn() -> bool,
    within: Duration,
) -> bool {
    let name = thread.name().expect("a named thread");
    let deadline = Instant::now() + within;
    let mut asleep = 0;
    while asleep < 5 {
        assert!(
            Instant::now() < deadline,
            "thread {name:?} never waited within {within:?}"
        );
        let state = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| {
                let dir = task.ok()?.path();
                let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
                if comm.trim_end() != name {
                    return None;
                }
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // `PID (COMM) STATE ...`: the state follows the last `)`.
                stat.rsplit_once(") ")?.1.chars().next()
            })
            .next();
        if finished() {
            return false;
        }
        // Not found: started, but not named yet.
        let state = state.unwrap_or('R');
        asleep = if state == 'S' { asleep + 1 } else { 0 };
        thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Waits until `f` holds, checking every 10 ms, or panics after `within`
/// naming `what`.
pub fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Sets its flag when dropped. Helper threads in a `thread::scope` that
/// run until a flag is set stop when the test panics too, not only when
/// it reaches the end: the scope waits for every thread before it passes
/// a panic on, so a flag set only at the end turns a failure into a hang.
pub struct SetOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
