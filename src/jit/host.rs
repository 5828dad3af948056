//! Calls from compiled code back into its host: a kernel whose graph has collectives calls
//! `fxmlir_host_call` ([`crate::lower::HOST_CALL`]) for each, and the host (the Python call
//! path) runs it in PyTorch's c10d. The handler is set for the duration of one kernel call on
//! the calling thread ([`scoped`]); the calls are made by that thread, outside the kernel's
//! parallel regions. A failed call is remembered and the kernel's later host calls are
//! skipped, so that the collectives after a failure are not entered on this rank alone; the
//! caller reports the failure when the kernel returns.

use std::cell::{Cell, RefCell};

/// What runs a kernel's host calls.
pub trait HostCalls: Sync {
    /// Runs host call `number` on the buffers at the addresses `source` and `target`.
    fn call(&self, number: usize, source: usize, target: usize) -> Result<(), String>;
}

/// A failed host call: its number and message.
pub type Failure = (usize, String);

type Active = *const (dyn HostCalls + 'static);

thread_local! {
    static ACTIVE: Cell<Option<Active>> = const { Cell::new(None) };
    static FAILED: RefCell<Option<Failure>> = const { RefCell::new(None) };
}

/// Restores the previous handler and failure when a scope ends, on unwinding too.
struct Restore {
    active: Option<Active>,
    failed: Option<Failure>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.active));
        FAILED.with(|f| *f.borrow_mut() = self.failed.take());
    }
}

/// Runs `run` (a kernel call) with `host` handling its host calls on this thread, or with
/// none (each host call then fails); returns its result and the first failed host call.
pub fn scoped<R>(host: Option<&dyn HostCalls>, run: impl FnOnce() -> R) -> (R, Option<Failure>) {
    // SAFETY: the pointer is only dereferenced by host calls made while `run` runs, and the
    // guard takes it out of the thread-local before `host`'s borrow ends.
    let erased: Option<Active> = host.map(|h| unsafe {
        std::mem::transmute::<*const (dyn HostCalls + '_), Active>(h as *const dyn HostCalls)
    });
    let _restore = Restore {
        active: ACTIVE.with(|a| a.replace(erased)),
        failed: FAILED.with(|f| f.borrow_mut().take()),
    };
    let result = run();
    let failure = FAILED.with(|f| f.borrow_mut().take());
    (result, failure)
}

/// `fxmlir_host_call(number, source, target)`, called by compiled code.
pub extern "C" fn host_call(number: i64, source: i64, target: i64) {
    if FAILED.with(|f| f.borrow().is_some()) {
        return;
    }
    let number = usize::try_from(number).unwrap_or(usize::MAX);
    let outcome = match ACTIVE.with(Cell::get) {
        // SAFETY: set by `scoped`, whose caller's borrow outlives this call.
        Some(host) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            (*host).call(number, source as usize, target as usize)
        }))
        .unwrap_or_else(|_| Err("the host call panicked".to_string())),
        None => Err(
            "the kernel calls back into its host (collectives run in PyTorch's c10d), \
                     and only the Python call path has one"
                .to_string(),
        ),
    };
    if let Err(message) = outcome {
        FAILED.with(|f| *f.borrow_mut() = Some((number, message)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Record(Mutex<Vec<(usize, usize, usize)>>);

    impl HostCalls for Record {
        fn call(&self, number: usize, source: usize, target: usize) -> Result<(), String> {
            self.0.lock().unwrap().push((number, source, target));
            match number {
                1 => Err("broken".to_string()),
                _ => Ok(()),
            }
        }
    }

    #[test]
    fn calls_reach_the_scoped_handler_and_stop_after_a_failure() {
        let record = Record(Mutex::new(Vec::new()));
        let ((), failure) = scoped(Some(&record), || {
            host_call(0, 16, 32);
            host_call(1, 48, 48);
            host_call(2, 64, 64);
        });
        assert_eq!(*record.0.lock().unwrap(), vec![(0, 16, 32), (1, 48, 48)]);
        assert_eq!(failure, Some((1, "broken".to_string())));
        let ((), outside) = scoped(None, || host_call(0, 0, 0));
        assert!(outside.unwrap().1.contains("only the Python call path"));
    }
}
