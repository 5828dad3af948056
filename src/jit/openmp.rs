//! The OpenMP entry points compiled code calls, served by the GNU OpenMP runtime (libgomp).
//!
//! MLIR's OpenMP translation emits calls into LLVM's runtime ABI (`__kmpc_fork_call`,
//! `__kmpc_for_static_init_8u`, …). PyTorch runs its own parallel work on libgomp, whose
//! worker threads spin for a while after each region. Two runtimes in one process means two
//! teams of spinning workers competing for the same cores: on two cores, an fxmlir kernel
//! called right after an eager `torch.mm` ran several times slower than alone. So fxmlir
//! implements the handful of `__kmpc_*` functions its kernels use on top of libgomp, the
//! instance PyTorch already loaded when there is one (`dlopen` by soname finds it): every
//! parallel region of torch and fxmlir alike runs on one team, whose size follows
//! `torch.set_num_threads` (libgomp's `nthreads-var`).
//!
//! The subset: parallel regions with their captures in one aggregate argument, statically
//! scheduled loops without a chunk size (OpenMP schedule type 34), barriers. [`check`] rejects
//! a module that needs anything else before it is compiled, with the offending call named.

use crate::error::{Error, Result};
use inkwell::module::Module;
use inkwell::values::{AnyValueEnum, BasicValue, FunctionValue, InstructionValue};
use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

/// The outlined body of a parallel region: `(global thread id*, bound thread id*, captures)`.
type Microtask = unsafe extern "C" fn(*mut i32, *mut i32, *mut c_void);

/// `GOMP_parallel(body, data, threads, flags)`.
type ParallelFn = unsafe extern "C" fn(unsafe extern "C" fn(*mut c_void), *mut c_void, u32, u32);
/// `GOMP_barrier()`.
type BarrierFn = unsafe extern "C" fn();
/// `omp_get_thread_num()`, `omp_get_num_threads()`.
type QueryFn = unsafe extern "C" fn() -> i32;

/// The libgomp functions the shim calls.
struct Gomp {
    parallel: ParallelFn,
    barrier: BarrierFn,
    thread_num: QueryFn,
    num_threads: QueryFn,
}

/// libgomp's soname: the copy PyTorch ships when PyTorch is loaded, the system's otherwise.
const LIBGOMP: &CStr = c"libgomp.so.1";

/// libgomp, loaded once; `None` when the process cannot load it.
fn gomp() -> Option<&'static Gomp> {
    static GOMP: OnceLock<Option<Gomp>> = OnceLock::new();
    GOMP.get_or_init(|| {
        // SAFETY: dlopen/dlsym with valid C strings; the handle is never closed, so the
        // function pointers stay valid. Each symbol has the C signature declared in `Gomp`
        // (libgomp's public ABI).
        unsafe {
            let handle = libc::dlopen(LIBGOMP.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if handle.is_null() {
                return None;
            }
            let symbol = |name: &CStr| {
                let address = libc::dlsym(handle, name.as_ptr());
                (!address.is_null()).then_some(address)
            };
            Some(Gomp {
                parallel: std::mem::transmute::<*mut c_void, ParallelFn>(symbol(c"GOMP_parallel")?),
                barrier: std::mem::transmute::<*mut c_void, BarrierFn>(symbol(c"GOMP_barrier")?),
                thread_num: std::mem::transmute::<*mut c_void, QueryFn>(symbol(
                    c"omp_get_thread_num",
                )?),
                num_threads: std::mem::transmute::<*mut c_void, QueryFn>(symbol(
                    c"omp_get_num_threads",
                )?),
            })
        }
    })
    .as_ref()
}

/// Whether the OpenMP runtime is available (compiled code with parallel loops needs it).
pub fn available() -> bool {
    gomp().is_some()
}

/// A parallel region on its way to every thread of the team.
struct Region {
    task: Microtask,
    captures: *mut c_void,
}

/// What libgomp runs on every thread: the region's body with the thread's number as both ids
/// (the shim's other functions ask libgomp, not the ids, which thread they run on).
unsafe extern "C" fn run_region(data: *mut c_void) {
    // SAFETY: `data` is the `Region` that `fork_call` keeps alive until every thread returns.
    unsafe {
        let region = &*data.cast::<Region>();
        let Some(gomp) = gomp() else { return };
        let mut id = (gomp.thread_num)();
        let mut bound = id;
        (region.task)(&mut id, &mut bound, region.captures);
    }
}

/// `__kmpc_fork_call(location, argc, microtask, ...)`: runs `task` on every thread of the team
/// and returns when all are done. [`check`] has made sure `argc` ≤ 1, so the one variadic
/// argument (if any) arrives where a fourth fixed argument would.
unsafe extern "C" fn fork_call(
    _location: *const c_void,
    _argc: i32,
    task: Microtask,
    captures: *mut c_void,
) {
    let Some(gomp) = gomp() else { return };
    let mut region = Region { task, captures };
    // SAFETY: `region` outlives the call, which returns after every thread has run it; 0
    // threads asks for the current team size, flags 0 for the default binding.
    unsafe { (gomp.parallel)(run_region, std::ptr::from_mut(&mut region).cast(), 0, 0) };
}

/// `__kmpc_global_thread_num(location)`: the calling thread's number in its team.
unsafe extern "C" fn global_thread_num(_location: *const c_void) -> i32 {
    // SAFETY: a libgomp query without preconditions.
    gomp().map_or(0, |g| unsafe { (g.thread_num)() })
}

/// `__kmpc_barrier(location, thread)`: waits for the whole team.
unsafe extern "C" fn barrier(_location: *const c_void, _thread: i32) {
    if let Some(g) = gomp() {
        // SAFETY: called by compiled code inside (or outside) a parallel region, where
        // GOMP_barrier synchronises the current team (a team of one returns at once).
        unsafe { (g.barrier)() }
    }
}

/// `__kmpc_for_static_fini(location, thread)`: nothing to release.
unsafe extern "C" fn static_fini(_location: *const c_void, _thread: i32) {}

/// The part of the iterations `lower..=upper` (step `step` > 0) that thread `thread` of
/// `threads` runs under a static schedule without chunk size: consecutive, as equal as
/// possible, the first `trip % threads` threads one iteration more. `None`: no iterations.
/// The third value says whether the part holds the last iteration.
fn static_part(
    lower: i128,
    upper: i128,
    step: i128,
    thread: i128,
    threads: i128,
) -> Option<(i128, i128, bool)> {
    if upper < lower || step <= 0 {
        return None;
    }
    let trip = (upper - lower) / step + 1;
    let threads = threads.max(1);
    let (small, extra) = (trip / threads, trip % threads);
    let first = thread * small + thread.min(extra);
    let count = small + i128::from(thread < extra);
    (count > 0).then(|| {
        let start = lower + first * step;
        (start, start + (count - 1) * step, first + count == trip)
    })
}

/// `__kmpc_for_static_init_8u`: narrows `*lower..=*upper` (64-bit unsigned) to the calling
/// thread's part; a thread without iterations gets `*lower = *upper + step` (an empty range
/// in the compiled loop's test).
unsafe extern "C" fn static_init_8u(
    _location: *const c_void,
    _thread: i32,
    _schedule: i32,
    last: *mut i32,
    lower: *mut u64,
    upper: *mut u64,
    stride: *mut i64,
    step: i64,
    _chunk: i64,
) {
    // SAFETY: compiled code passes pointers to its own live loop bounds.
    unsafe {
        let (thread, threads) = gomp().map_or((0, 1), |g| ((g.thread_num)(), (g.num_threads)()));
        let (lo, hi) = (i128::from(*lower), i128::from(*upper));
        let step_wide = i128::from(step);
        match static_part(lo, hi, step_wide, thread.into(), threads.into()) {
            Some((first, final_, is_last)) => {
                *lower = first as u64;
                *upper = final_ as u64;
                *last = i32::from(is_last);
                // The whole range's span, as LLVM's runtime reports it (unused by the loop).
                *stride = (hi - lo + step_wide) as i64;
            }
            None => {
                *lower = (hi + step_wide) as u64;
                *last = 0;
                *stride = step;
            }
        }
    }
}

/// The shim's functions by symbol name, for the JIT's symbol resolution.
pub fn lookup(symbol: &str) -> Option<usize> {
    Some(match symbol {
        "__kmpc_fork_call" => fork_call as *const c_void as usize,
        "__kmpc_global_thread_num" => global_thread_num as *const c_void as usize,
        "__kmpc_barrier" => barrier as *const c_void as usize,
        "__kmpc_for_static_init_8u" => static_init_8u as *const c_void as usize,
        "__kmpc_for_static_fini" => static_fini as *const c_void as usize,
        _ => return None,
    })
}

/// OpenMP schedule type of a static schedule without chunk size (`kmp_sch_static`).
const STATIC_SCHEDULE: u64 = 34;

/// The functions of `module` that start a parallel region (call `__kmpc_fork_call`).
pub fn forking_functions<'ctx>(module: &Module<'ctx>) -> Vec<FunctionValue<'ctx>> {
    let mut functions = Vec::new();
    let Some(fork) = module.get_function("__kmpc_fork_call") else {
        return functions;
    };
    let mut next = fork.as_global_value().as_pointer_value().get_first_use();
    while let Some(use_) = next {
        if let AnyValueEnum::InstructionValue(call) = use_.get_user()
            && let Some(function) = call.get_parent().and_then(|b| b.get_parent())
            && !functions.contains(&function)
        {
            functions.push(function);
        }
        next = use_.get_next_use();
    }
    functions
}

/// Makes sure every OpenMP runtime call in `module` is one the shim implements as called:
/// a known `__kmpc_*` function, parallel regions with at most one (aggregate) argument, loops
/// with a static schedule without chunk size; and that libgomp can be loaded when any is.
pub fn check(module: &Module) -> Result<()> {
    let unsupported = |what: String| {
        Error::Llvm(format!(
            "the kernel needs {what}, which fxmlir's OpenMP runtime shim does not implement"
        ))
    };
    let mut uses_openmp = false;
    for function in module.get_functions() {
        let name = function.get_name().to_string_lossy().into_owned();
        if !name.starts_with("__kmpc_") {
            continue;
        }
        if lookup(&name).is_none() {
            return Err(unsupported(format!("the OpenMP runtime function `{name}`")));
        }
        uses_openmp = true;
        // (operand, allowed values, what it is) of each call to check.
        let limit = match name.as_str() {
            "__kmpc_fork_call" => Some((1, 0..=1, "parallel region arguments")),
            "__kmpc_for_static_init_8u" => {
                Some((2, STATIC_SCHEDULE..=STATIC_SCHEDULE, "loop schedule type"))
            }
            _ => None,
        };
        let Some((operand, allowed, what)) = limit else {
            continue;
        };
        let mut next = function
            .as_global_value()
            .as_pointer_value()
            .get_first_use();
        while let Some(use_) = next {
            if let AnyValueEnum::InstructionValue(call) = use_.get_user() {
                let value = constant_operand(call, operand);
                if !value.is_some_and(|v| allowed.contains(&v)) {
                    return Err(unsupported(format!(
                        "`{name}` with {what} {}",
                        value.map_or("not a constant".to_string(), |v| v.to_string())
                    )));
                }
            }
            next = use_.get_next_use();
        }
    }
    if uses_openmp && !available() {
        return Err(Error::Llvm(format!(
            "the kernel has parallel loops, which run on the GNU OpenMP runtime, and {} cannot \
             be loaded (install libgomp1)",
            LIBGOMP.to_string_lossy()
        )));
    }
    Ok(())
}

/// The value of a call's integer-constant operand.
fn constant_operand(call: InstructionValue, index: u32) -> Option<u64> {
    call.get_operand(index)?
        .value()
        .filter(|v| v.is_int_value())
        .and_then(|v| v.into_int_value().get_zero_extended_constant())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every iteration exactly once, in consecutive parts, the longer parts first.
    #[test]
    fn static_parts_cover_the_range() {
        for (lower, upper, step, threads) in
            [(0, 9, 1, 3), (0, 1, 1, 4), (5, 17, 3, 2), (0, 0, 1, 1)]
        {
            let mut seen = Vec::new();
            let mut lasts = 0;
            for thread in 0..threads {
                if let Some((first, last, is_last)) =
                    static_part(lower, upper, step, thread, threads)
                {
                    seen.extend((first..=last).step_by(step as usize));
                    lasts += i32::from(is_last);
                }
            }
            let all: Vec<i128> = (lower..=upper).step_by(step as usize).collect();
            assert_eq!(seen, all, "{lower}..={upper} step {step} on {threads}");
            assert_eq!(lasts, 1);
        }
        assert_eq!(static_part(0, 9, 1, 0, 3), Some((0, 3, false)));
        assert_eq!(static_part(0, 9, 1, 2, 3), Some((7, 9, true)));
        assert_eq!(static_part(0, 1, 1, 3, 4), None);
        assert_eq!(static_part(3, 2, 1, 0, 2), None);
    }

    /// A region runs on every thread of libgomp's team; each thread's static part is its own.
    #[test]
    fn regions_run_on_the_gomp_team() {
        use std::sync::atomic::{AtomicU64, Ordering};
        unsafe extern "C" fn body(_id: *mut i32, _bound: *mut i32, sum: *mut c_void) {
            let (mut lower, mut upper, mut stride, mut last) = (0u64, 999u64, 1i64, 0i32);
            // SAFETY: pointers to the locals above and to the test's atomic.
            unsafe {
                static_init_8u(
                    std::ptr::null(),
                    0,
                    34,
                    &mut last,
                    &mut lower,
                    &mut upper,
                    &mut stride,
                    1,
                    0,
                );
                let sum = &*sum.cast::<AtomicU64>();
                for i in lower..=upper {
                    sum.fetch_add(i, Ordering::Relaxed);
                }
                barrier(std::ptr::null(), 0);
            }
        }
        assert!(available(), "libgomp.so.1 must be installed (make setup)");
        let sum = AtomicU64::new(0);
        // SAFETY: `body` has the microtask signature; `sum` outlives the region.
        unsafe {
            fork_call(
                std::ptr::null(),
                1,
                body,
                std::ptr::from_ref(&sum).cast_mut().cast(),
            )
        };
        assert_eq!(sum.load(Ordering::Relaxed), 999 * 1000 / 2);
    }

    /// A module calling the runtime in a way the shim does not implement is an error naming
    /// the call, before any code runs.
    #[test]
    fn unsupported_calls_are_rejected() {
        use inkwell::context::Context;
        let context = Context::create();
        let reject = |callee: &str, arguments: u64| {
            let module = context.create_module("m");
            let (i32t, ptr) = (
                context.i32_type(),
                context.ptr_type(inkwell::AddressSpace::default()),
            );
            let fork = module.add_function(
                callee,
                context
                    .void_type()
                    .fn_type(&[ptr.into(), i32t.into(), ptr.into()], true),
                None,
            );
            let caller = module.add_function("f", context.void_type().fn_type(&[], false), None);
            let builder = context.create_builder();
            builder.position_at_end(context.append_basic_block(caller, "entry"));
            let null = ptr.const_null();
            builder
                .build_call(
                    fork,
                    &[
                        null.into(),
                        i32t.const_int(arguments, false).into(),
                        null.into(),
                        null.into(),
                    ],
                    "",
                )
                .map_err(|e| e.to_string())?;
            builder.build_return(None).map_err(|e| e.to_string())?;
            check(&module).map_err(|e| e.to_string())
        };
        assert_eq!(reject("__kmpc_fork_call", 1), Ok(()));
        let two = reject("__kmpc_fork_call", 2).unwrap_err();
        assert!(
            two.contains("`__kmpc_fork_call` with parallel region arguments 2"),
            "{two}"
        );
        let other = reject("__kmpc_fork_teams", 1).unwrap_err();
        assert!(
            other.contains("the OpenMP runtime function `__kmpc_fork_teams`"),
            "{other}"
        );
    }
}
