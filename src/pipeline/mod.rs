//! Named MLIR pass pipelines. A pipeline is a list of stages; each stage is one textual
//! pass pipeline that stock `mlir-opt` accepts, runs under a diagnostic handler and a tracing
//! span, and can be dumped. A failing stage writes its input and a ready `mlir-opt` reproducer.
//! The `schedule` stage also has Rust around its passes ([`schedule`]): before them it appends a
//! generated transform script to the module (dumped as `NN-schedule.transform.mlir`, which
//! replays with stock `mlir-opt`), after them it erases the script.

mod chains;
mod destinations;
mod empties;
pub mod external;
pub mod ir;
mod materialized;
pub mod outline;
pub mod pairs;
pub mod parallel;
pub mod patterns;
pub mod polynomials;
pub mod regions;
pub mod reshapes;
pub mod rows;
pub mod schedule;
pub mod transform;
pub mod vmath;
pub mod windows;

pub use crate::context::Diagnostics;
use crate::dumps::Dumps;
use crate::error::{Error, Result};
use crate::target::Target;
use ir::decompositions;
use melior::{
    Context,
    ir::{Module, operation::OperationLike},
    pass::PassManager,
};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// One stage: a name (used in dump file names and timings), a pass pipeline, and the work
/// that runs around it. The built-in stages are constants; the stages a user adds
/// ([`StageEdit`]) own their text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub name: Cow<'static, str>,
    pub pipeline: Cow<'static, str>,
    pub hook: Hook,
}

/// The work around a stage's passes: fxmlir's own (Rust), or what an added stage brings as
/// IR: a transform script or a set of PDL patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// Passes only.
    None,
    /// `destinations::hoist` before the passes: a destination a computed tensor is placed in
    /// is built before the empty tensor that tensor is computed into, so that
    /// `eliminate-empty-tensors` computes it in place.
    Fusion,
    /// [`decompositions::expand`] before the passes: each op of fxmlir's dialect becomes its
    /// decomposition's body.
    Expand,
    /// [`schedule::attach`] before the passes, [`transform::detach`] and
    /// [`pairs::flatten_reads`] after them. Should the
    /// passes fail, the stage is skipped (the module goes on as it was before the hook, with
    /// the scalar path) with a warning and a reproducer, rather than failing the compile.
    Schedule,
    /// [`parallel::attach`] before the passes, [`transform::detach`] after them; skipped on
    /// failure like [`Hook::Schedule`] (the module stays single-threaded).
    Parallel,
    /// [`outline::outline`] before the passes; should they fail, the stage is skipped.
    Outline,
    /// `empties::split` (one empty tensor per use) and `materialized::reroute` (reads of a
    /// tensor after its placement in a padded one read the padded one) before the passes;
    /// [`reshapes::split_dynamic_expansions`] after them: expansions that split a size into
    /// several dynamic ones become the views they are, which MLIR's memref lowering takes.
    Bufferize,
    /// After the passes to the LLVM dialect: [`outline::mark_noalias`] (the passes drop the
    /// argument attributes of memrefs; the outlined functions' disjoint pointers become LLVM
    /// `noalias`), then [`regions::narrow`] (parallel regions capture the descriptor fields
    /// they read, not whole descriptors) and [`regions::scope`] (the `noalias` of those
    /// pointers as alias scopes on the regions' loads and stores).
    Llvm,
    /// [`windows::mark`] after the passes: the loops over convolution and pooling windows are
    /// marked for LLVM's full unrolling; then [`polynomials::inline`] (`f32` exp and erf as
    /// inline polynomials) and [`vmath::call_libmvec`]: math on vectors calls libmvec's vector
    /// functions.
    Windows,
    /// A transform script (a module whose `transform.named_sequence @__transform_main` the
    /// stage's `transform-interpreter` runs), appended before the passes and erased after
    /// them; dumped with the module as `NN-<stage>.transform.mlir`.
    Transform(Cow<'static, str>),
    /// A PDL pattern module, applied greedily to the whole module before the passes
    /// ([`patterns::apply`]).
    Patterns(Cow<'static, str>),
    /// A pass written in C against MLIR's C API, run before the passes
    /// ([`external::run`]).
    External(std::sync::Arc<external::ExternalPass>),
}

impl Hook {
    /// Whether the hook appends a transform script (dumped as the stage's
    /// `NN-<stage>.transform.mlir`).
    pub fn has_script(&self) -> bool {
        matches!(self, Hook::Schedule | Hook::Parallel | Hook::Transform(_))
    }

    /// Whether the stage is one of fxmlir's optimisations that change the module before the
    /// passes, skipped rather than failed when the hook or its passes fail. An added stage's
    /// failure is an error naming it.
    fn optional(&self) -> bool {
        matches!(self, Hook::Schedule | Hook::Parallel | Hook::Outline)
    }

    /// The work before the passes: appends a transform script (fxmlir's or the stage's own),
    /// outlines, splits empty tensors or applies PDL patterns; returns how many ops it
    /// transforms.
    fn attach(
        &self,
        context: &Context,
        module: &mut Module,
        target: &Target,
        stage: &str,
    ) -> Result<usize> {
        match self {
            Hook::None | Hook::Llvm | Hook::Windows => Ok(0),
            Hook::Bufferize => {
                Ok(empties::split(module)? + materialized::reroute(context, module)?)
            }
            Hook::Expand => decompositions::expand(module),
            Hook::Fusion => destinations::hoist(module),
            Hook::Schedule => schedule::attach(context, module, target),
            Hook::Parallel => parallel::attach(context, module, target),
            Hook::Outline => outline::outline(context, module),
            Hook::Transform(script) => {
                transform::append_script(context, module, script, stage)?;
                Ok(0)
            }
            Hook::Patterns(pdl) => patterns::apply(context, module, pdl, stage),
            Hook::External(pass) => external::run(context, module, pass),
        }
    }

    /// The hook's work after the passes succeeded: erases what [`Hook::attach`] added for them
    /// (the transform script and its tags), or marks `noalias` or window loops.
    fn finish(&self, context: &Context, module: &mut Module, target: &Target) -> Result<()> {
        match self {
            Hook::Schedule => {
                transform::detach(
                    module,
                    &[
                        schedule::CONTRACTION_TAG,
                        schedule::EPILOGUE_TAG,
                        schedule::SCALAR_PRODUCT_TAG,
                    ],
                );
                let flattened = pairs::flatten_reads(context, module)?;
                tracing::debug!(reads = flattened, "reads of bf16 pairs flattened");
            }
            Hook::Parallel => transform::detach(module, &[parallel::TAG]),
            Hook::Bufferize => {
                let views = reshapes::split_dynamic_expansions(context, module)?;
                tracing::debug!(views, "expansions into several dynamic sizes made views");
            }
            Hook::Transform(_) => transform::detach(module, &[]),
            Hook::Llvm => {
                let marked = outline::mark_noalias(context, module)?;
                let narrowed = regions::narrow(module)?;
                let scoped = regions::scope(context, module)?;
                tracing::debug!(
                    pointers = marked,
                    reads = narrowed,
                    accesses = scoped,
                    "noalias marked, parallel captures narrowed and accesses scoped"
                );
            }
            Hook::Windows => {
                let marked = windows::mark(context, module)?;
                let inlined = polynomials::inline(context, module, target)?;
                let called = vmath::call_libmvec(context, module, target)?;
                tracing::debug!(
                    loops = marked,
                    inlined,
                    math = called,
                    "window loops marked for full unrolling, exp and erf inlined, vector math made libmvec calls"
                );
            }
            Hook::None
            | Hook::Expand
            | Hook::Fusion
            | Hook::Outline
            | Hook::Patterns(_)
            | Hook::External(_) => {}
        }
        Ok(())
    }
}

/// The ops of fxmlir's dialect (a node lowered whole: a bf16 pair product, a node a plugin
/// lowered) become their decompositions' bodies, which `symbol-dce` then drops. First, so that
/// a stage placed before it sees them whole.
const EXPAND: Stage = Stage {
    name: Cow::Borrowed("expand"),
    pipeline: Cow::Borrowed("builtin.module(symbol-dce)"),
    hook: Hook::Expand,
};

/// Fuse elementwise producers into consumers on tensors, then make each graph output's producer
/// write straight into the output buffer, and each tensor placed into part of a larger one
/// (a padded canvas, a concatenation) write straight into that part ([`Hook::Fusion`] first
/// builds those destinations early enough), then clean up. `eliminate-empty-tensors` runs after
/// fusion (which gives elementwise ops fresh `tensor.empty` inits) and before any CSE: once
/// CSE has merged the `tensor.empty`/`linalg.fill` inits of two reductions, both would write
/// the one output buffer and one-shot analysis misses the conflict, so one reduction would
/// start from the other's result.
const FUSION: Stage = Stage {
    name: Cow::Borrowed("fusion"),
    pipeline: Cow::Borrowed(
        "builtin.module(func.func(linalg-fuse-elementwise-ops),eliminate-empty-tensors,canonicalize,cse)",
    ),
    hook: Hook::Fusion,
};

/// Tile and vectorise matrix products with the transform schedule [`schedule::attach`]
/// generates; canonicalize drops the untiled originals. No CSE here: see [`FUSION`].
const SCHEDULE: Stage = Stage {
    name: Cow::Borrowed("schedule"),
    pipeline: Cow::Borrowed(
        "builtin.module(transform-interpreter,inline{default-pipeline=},canonicalize)",
    ),
    hook: Hook::Schedule,
};

/// Split each large top-level structured op into one chunk per thread with the transform
/// script [`parallel::attach`] generates (`scf.forall` loops, which `loops` hands to OpenMP).
const PARALLEL: Stage = Stage {
    name: Cow::Borrowed("parallel"),
    pipeline: Cow::Borrowed("builtin.module(transform-interpreter,canonicalize,cse)"),
    hook: Hook::Parallel,
};

/// Tensors to buffers, each empty tensor first split into one per use ([`empties`]: CSE
/// merged them, and a shared one made bufferisation's analysis superlinear) and the reads of a
/// tensor after its placement in a padded one pointed at the padded one ([`materialized`]:
/// else the tensor is computed out of place and copied twice). Outputs whose producer the
/// fusion stage pointed at the output buffer are computed in place; the others are copied
/// into the caller's memrefs. A function that writes its result into an argument (a pairs
/// product the schedule left a call) stops returning it (`drop-equivalent-buffer-results`),
/// so the caller owns that buffer. Buffers
/// allocated in a sequential loop (a row group's per-row values, one set per block of rows)
/// are allocated once before it (`buffer-loop-hoisting`; it leaves them inside a thread's
/// `scf.forall` chunk). After the passes, expansions MLIR's memref lowering cannot take become
/// views ([`Hook::Bufferize`]).
const BUFFERIZE: Stage = Stage {
    name: Cow::Borrowed("bufferize"),
    pipeline: Cow::Borrowed(
        "builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},drop-equivalent-buffer-results,canonicalize,cse,func.func(buffer-loop-hoisting),buffer-deallocation-pipeline,canonicalize)",
    ),
    hook: Hook::Bufferize,
};

/// Structured ops to loop nests over memrefs, in each function (the outlined ones, after
/// [`OUTLINE`]). Vector transfers are unrolled to 1-D (the LLVM lowering handles no more). The
/// thread chunks of the `parallel` stage become OpenMP worksharing loops (canonicalize then
/// inlines the `memref.alloca_scope` that conversion wraps their bodies in).
const LOOPS: Stage = Stage {
    name: Cow::Borrowed("loops"),
    pipeline: Cow::Borrowed(
        "builtin.module(func.func(scf-forall-to-parallel,convert-vector-to-scf{full-unroll=1},convert-linalg-to-loops),convert-scf-to-openmp,canonicalize)",
    ),
    hook: Hook::Windows,
};

/// Each top-level computation on buffers (a structured op, a thread chunk loop, a copy) into a
/// function of its own, one function per set of identical ones (see [`outline`]). It runs
/// before [`LOOPS`], so that a model's repeated layers are lowered to loops once: on BERT that
/// halved the `loops` stage, for the same LLVM IR.
const OUTLINE: Stage = Stage {
    name: Cow::Borrowed("outline"),
    pipeline: Cow::Borrowed("builtin.module(duplicate-function-elimination)"),
    hook: Hook::Outline,
};

/// Everything to the LLVM dialect: strided metadata and affine maps to arithmetic, loops to
/// branches, then the dialect conversions. `approximate-log1p=false` keeps log1p exact (libm).
/// Vector ops go after the math lowerings (libm calls on vectors are scalarised with vector
/// ops); `vector.contract` becomes outer products (broadcast-FMA), and the schedule's
/// `x86vector` dot products their AVX512-BF16 intrinsics (`enable-x86vector`). The dialects converted
/// with their default options go in one `convert-to-llvm` walk: as six passes (memref, arith,
/// index, cf, func, ub) they took 2.5 times as long, for the same output. OpenMP joined that
/// walk later: the same output, 15-25% less time in the conversions and the cast
/// reconciliation than with `convert-openmp-to-llvm` after it, 0.4% fewer instructions for the
/// whole compile (mobilenet, resnet18, transformer block, MLP).
const LLVM: Stage = Stage {
    name: Cow::Borrowed("llvm"),
    pipeline: Cow::Borrowed(
        "builtin.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,canonicalize,cse,convert-math-to-funcs,convert-math-to-llvm{approximate-log1p=false},convert-math-to-libm,convert-vector-to-llvm{vector-contract-lowering=outerproduct enable-x86vector},convert-to-llvm{filter-dialects=memref,arith,index,cf,func,ub,omp},reconcile-unrealized-casts)",
    ),
    hook: Hook::Llvm,
};

/// The pipelines by name; `default` is what the backend uses. The schedule runs before fusion:
/// elementwise fusion would otherwise generalise matrix products (propagating reshapes through
/// them) and fuse elementwise producers into their k loops, recomputing them per k step, and
/// the schedule would no longer recognise the products.
pub const PIPELINES: &[(&str, &[Stage])] = &[
    ("default", BUILTIN_STAGES),
    ("expand", &[EXPAND]),
    ("fusion", &[FUSION]),
    ("schedule", &[SCHEDULE]),
    ("parallel", &[PARALLEL]),
    ("bufferize", &[BUFFERIZE]),
    ("loops", &[LOOPS]),
    ("outline", &[OUTLINE]),
    ("llvm", &[LLVM]),
    ("to-llvm", &[BUFFERIZE, OUTLINE, LOOPS, LLVM]),
];

pub fn named(name: &str) -> Result<Vec<Stage>> {
    PIPELINES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, stages)| stages.to_vec())
        .ok_or_else(|| Error::PassPipeline {
            pipeline: name.to_string(),
            message: format!(
                "no such named pipeline; known: {}",
                PIPELINES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// Where an added stage goes, relative to its anchor stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Before,
    After,
    Replace,
    /// The anchor stage leaves the pipeline (the edit's stage is not used).
    Remove,
}

impl Placement {
    /// `before`, `after` or `replace` (`remove` has a spelling of its own).
    pub fn parse(text: &str) -> Option<Placement> {
        match text {
            "before" => Some(Placement::Before),
            "after" => Some(Placement::After),
            "replace" => Some(Placement::Replace),
            _ => None,
        }
    }
}

/// A change to a pipeline's stages: `stage` before, after or instead of the stage named
/// `anchor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageEdit {
    pub placement: Placement,
    pub anchor: String,
    pub stage: Stage,
}

/// What a stage of one's own runs (see [`Stage::added`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct StageParts<'s> {
    /// A textual pass pipeline.
    pub passes: Option<&'s str>,
    /// A transform script, run by `transform-interpreter`.
    pub transform: Option<&'s str>,
    /// PDL patterns, applied before the passes.
    pub pdl: Option<&'s str>,
    /// The name of one of fxmlir's stages whose Rust work (its [`Hook`]) runs around the
    /// passes: `schedule` appends fxmlir's transform schedule, `parallel` its thread split,
    /// and so on (see [`BUILTIN_STAGES`]).
    pub work: Option<&'s str>,
}

/// Every stage fxmlir defines, in the default pipeline's order: the names a stage of one's
/// own takes its [`StageParts::work`] from.
pub const BUILTIN_STAGES: &[Stage] = &[
    EXPAND, SCHEDULE, FUSION, PARALLEL, BUFFERIZE, OUTLINE, LOOPS, LLVM,
];

impl Stage {
    /// A stage of one's own: its passes, after a transform script, PDL patterns or the work
    /// of one of fxmlir's stages, if one is given. Without passes, a transform stage runs
    /// `transform-interpreter`, a pattern stage nothing more, and a stage with fxmlir's work
    /// that stage's passes.
    pub fn added(name: &str, parts: StageParts) -> Result<Stage> {
        let invalid = |message: String| Error::PassPipeline {
            pipeline: name.to_string(),
            message,
        };
        let (hook, default) = match (parts.transform, parts.pdl, parts.work) {
            (Some(script), None, None) => (
                Hook::Transform(Cow::Owned(script.to_string())),
                Some("builtin.module(transform-interpreter)"),
            ),
            (None, Some(patterns), None) => (
                Hook::Patterns(Cow::Owned(patterns.to_string())),
                Some("builtin.module()"),
            ),
            (None, None, Some(work)) => {
                let with_work = || BUILTIN_STAGES.iter().filter(|s| s.hook != Hook::None);
                let builtin = with_work().find(|s| s.name == work).ok_or_else(|| {
                    invalid(format!(
                        "no work `{work}`: fxmlir's stages with work of their own are {}",
                        with_work()
                            .map(|s| s.name.as_ref())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                (builtin.hook.clone(), Some(builtin.pipeline.as_ref()))
            }
            (None, None, None) => (Hook::None, None),
            _ => {
                return Err(invalid(
                    "a stage runs one of a transform script, PDL patterns or fxmlir's work"
                        .to_string(),
                ));
            }
        };
        let pipeline = parts.passes.or(default).ok_or_else(|| {
            invalid("a stage needs passes, a transform script, PDL patterns or a work".to_string())
        })?;
        Ok(Stage {
            name: Cow::Owned(name.to_string()),
            pipeline: Cow::Owned(pipeline.to_string()),
            hook,
        })
    }
}

impl StageEdit {
    /// The edit that places a stage running `pass` (a C pass, see [`external`]) and no passes
    /// `placement` the stage named `anchor`.
    pub fn external(
        placement: Placement,
        anchor: &str,
        pass: std::sync::Arc<external::ExternalPass>,
    ) -> StageEdit {
        StageEdit {
            placement,
            anchor: anchor.to_string(),
            stage: Stage {
                name: Cow::Owned(pass.name.clone()),
                pipeline: Cow::Borrowed("builtin.module()"),
                hook: Hook::External(pass),
            },
        }
    }

    /// The edit that takes the stage named `anchor` out of the pipeline.
    pub fn removing(anchor: &str) -> StageEdit {
        StageEdit {
            placement: Placement::Remove,
            anchor: anchor.to_string(),
            stage: Stage {
                name: Cow::Owned(anchor.to_string()),
                pipeline: Cow::Borrowed("builtin.module()"),
                hook: Hook::None,
            },
        }
    }

    /// The edit a command line spells `PLACEMENT:ANCHOR:NAME:KIND=VALUE`, with `before`,
    /// `after` or `replace`, and `passes=<pipeline>`, `transform=<file>`, `pdl=<file>` or
    /// `work=<fxmlir stage>[:passes=<pipeline>]`: `after:fusion:cse:passes=builtin.module(cse)`.
    pub fn parse(spec: &str) -> Result<StageEdit> {
        let invalid = |message: String| Error::PassPipeline {
            pipeline: spec.to_string(),
            message,
        };
        if let Some(anchor) = spec.strip_prefix("remove:") {
            return Ok(StageEdit::removing(anchor));
        }
        let mut parts = spec.splitn(4, ':');
        let (Some(placement), Some(anchor), Some(name), Some(body)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid(
                "expected PLACEMENT:ANCHOR:NAME:KIND=VALUE".to_string(),
            ));
        };
        let placement = Placement::parse(placement).ok_or_else(|| {
            invalid(format!(
                "placement `{placement}`: expected before, after, replace or remove"
            ))
        })?;
        let read =
            |path: &str| std::fs::read_to_string(path).map_err(|e| Error::io(path.to_string(), e));
        let text;
        let parts = match body.split_once('=') {
            Some(("passes", passes)) => StageParts {
                passes: Some(passes),
                ..StageParts::default()
            },
            Some(("transform", path)) => {
                text = read(path)?;
                StageParts {
                    transform: Some(&text),
                    ..StageParts::default()
                }
            }
            Some(("pdl", path)) => {
                text = read(path)?;
                StageParts {
                    pdl: Some(&text),
                    ..StageParts::default()
                }
            }
            Some(("work", rest)) => {
                let (work, passes) = match rest.split_once(":passes=") {
                    Some((work, passes)) => (work, Some(passes)),
                    None => (rest, None),
                };
                StageParts {
                    passes,
                    work: Some(work),
                    ..StageParts::default()
                }
            }
            _ => {
                return Err(invalid(format!(
                    "`{body}`: expected passes=<pipeline>, transform=<file>, pdl=<file> or work=<stage>"
                )));
            }
        };
        let stage = Stage::added(name, parts)?;
        Ok(StageEdit {
            placement,
            anchor: anchor.to_string(),
            stage,
        })
    }
}

/// Checks a stage without running it: its passes parse, and its transform script or PDL
/// patterns parse in `context`. Errors name the stage.
pub fn check_stage(context: &Context, stage: &Stage) -> Result<()> {
    crate::context::register_passes();
    let pm = PassManager::new(context);
    melior::utility::parse_pass_pipeline(pm.as_operation_pass_manager(), &stage.pipeline)
        .map_err(|e| Error::stage(stage.name.as_ref(), format!("its passes: {e}")))?;
    match &stage.hook {
        Hook::Patterns(pdl) => patterns::parse(context, pdl, &stage.name).map(|_| ()),
        Hook::Transform(script) => {
            let diagnostics = Diagnostics::capture(context);
            Module::parse(context, script)
                .filter(|m| m.as_operation().verify())
                .map(|_| ())
                .ok_or_else(|| {
                    Error::stage(
                        stage.name.as_ref(),
                        format!(
                            "its transform script does not parse or verify:\n{}",
                            diagnostics.take()
                        ),
                    )
                })
        }
        _ => Ok(()),
    }
}

/// Whether `name` can name a stage: letters, digits, `-` and `_` (it names dump files).
fn valid_stage_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The stages of the pipeline `name` with `edits` applied in order. An anchor no stage has,
/// a name that is not a file name, or a name two stages share is an error naming it.
pub fn edited(name: &str, edits: &[StageEdit]) -> Result<Vec<Stage>> {
    let mut stages = named(name)?;
    let invalid = |message: String| Error::PassPipeline {
        pipeline: name.to_string(),
        message,
    };
    for edit in edits {
        if edit.placement != Placement::Remove && !valid_stage_name(&edit.stage.name) {
            return Err(invalid(format!(
                "stage name `{}`: use letters, digits, `-` and `_`",
                edit.stage.name
            )));
        }
        let at = stages
            .iter()
            .position(|s| s.name == edit.anchor)
            .ok_or_else(|| {
                let what = match edit.placement {
                    Placement::Before => format!("to put `{}` before", edit.stage.name),
                    Placement::After => format!("to put `{}` after", edit.stage.name),
                    Placement::Replace => format!("to put `{}` in place of", edit.stage.name),
                    Placement::Remove => "to remove".to_string(),
                };
                invalid(format!(
                    "no stage `{}` {what}; stages: {}",
                    edit.anchor,
                    stages
                        .iter()
                        .map(|s| s.name.as_ref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        match edit.placement {
            Placement::Before => stages.insert(at, edit.stage.clone()),
            Placement::After => stages.insert(at + 1, edit.stage.clone()),
            Placement::Replace => stages[at] = edit.stage.clone(),
            Placement::Remove => {
                stages.remove(at);
            }
        }
        let mut names: Vec<&str> = stages.iter().map(|s| s.name.as_ref()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(invalid(format!("two stages are named `{}`", pair[0])));
        }
    }
    Ok(stages)
}

/// Prints a module with debug locations, so that stock `mlir-opt` reads back the node names.
pub fn print_module(module: &Module) -> String {
    print_operation(&module.as_operation())
}

/// Prints an operation (a module) as [`print_module`] does.
fn print_operation(operation: &melior::ir::Operation) -> String {
    use melior::ir::operation::OperationPrintingFlags;
    operation
        .to_string_with_flags(OperationPrintingFlags::new().enable_debug_info(true, false))
        .unwrap_or_else(|_| operation.to_string())
}

/// Verifies a module, returning the diagnostics on failure.
pub fn verify(context: &Context, module: &Module, graph: &str) -> Result<()> {
    let diagnostics = Diagnostics::capture(context);
    if module.as_operation().verify() {
        Ok(())
    } else {
        Err(Error::Verification {
            graph: graph.to_string(),
            diagnostics: diagnostics.take(),
        })
    }
}

/// Runs one textual pass pipeline over `module`, then verifies it once. The pass manager does
/// not verify between passes: upstream passes turn valid IR into valid IR, and verifying after
/// each of them was a third of the time of the longer stages (`llvm`: 0.13 of 0.41 s on
/// resnet18).
pub fn run_pipeline_text(context: &Context, module: &mut Module, pipeline: &str) -> Result<()> {
    crate::context::register_passes();
    let pm = PassManager::new(context);
    pm.enable_verifier(false);
    melior::utility::parse_pass_pipeline(pm.as_operation_pass_manager(), pipeline).map_err(
        |e| Error::PassPipeline {
            pipeline: pipeline.to_string(),
            message: e.to_string(),
        },
    )?;
    let diagnostics = Diagnostics::capture(context);
    pm.run(module)
        .map_err(|_| Error::stage(pipeline, diagnostics.take()))?;
    if module.as_operation().verify() {
        Ok(())
    } else {
        Err(Error::stage(
            pipeline,
            format!("the passes produced invalid IR:\n{}", diagnostics.take()),
        ))
    }
}

/// What [`run_stages`] did: the time spent in each stage, and a message for each optimisation
/// stage it skipped (its hook or passes failed; the code is correct but slower).
#[derive(Debug, Default)]
pub struct Ran {
    pub timings: Vec<(String, Duration)>,
    pub skipped: Vec<String>,
}

/// Runs `stages` in order for `target`, dumping after each as `NN-<stage>.mlir` (numbered from
/// `first`).
pub fn run_stages<'c>(
    context: &'c Context,
    module: &mut Module<'c>,
    stages: &[Stage],
    dumps: Option<&Dumps>,
    first: usize,
    target: &Target,
    irdl: &str,
) -> Result<Ran> {
    let mut ran = Ran::default();
    for (i, stage) in stages.iter().enumerate() {
        let span = tracing::debug_span!("stage", name = stage.name.as_ref());
        let _guard = span.enter();
        let number = first + i;
        let start = Instant::now();
        // A hook that fails, or leaves invalid IR (which the passes, run without verification,
        // and the printer, told to assume it verified, must never see), is undone and its stage
        // skipped, like a stage whose passes fail (see below).
        let mut skip = false;
        // The stage's input before the hook, to fall back on should the hook or the passes
        // fail.
        let mut original = None;
        if !stage.hook.optional() {
            stage
                .hook
                .attach(context, module, target, &stage.name)
                .map_err(|e| e.in_stage(stage.name.as_ref()))?;
        } else {
            let copy = melior::ir::Operation::clone(&module.as_operation());
            let diagnostics = Diagnostics::capture(context);
            let attached = stage
                .hook
                .attach(context, module, target, &stage.name)
                .and_then(|count| {
                    if module.as_operation().verify() {
                        Ok(count)
                    } else {
                        Err(Error::stage(
                            stage.name.as_ref(),
                            format!("the hook left invalid IR:\n{}", diagnostics.take()),
                        ))
                    }
                });
            drop(diagnostics);
            match attached {
                Ok(count) => {
                    tracing::debug!(stage = stage.name.as_ref(), ops = count, "hook ran");
                    original = Some(copy);
                }
                Err(e) => {
                    let message = format!(
                        "the {} stage was skipped (the kernel is correct but slower): its transform script or outlining failed: {e}",
                        stage.name
                    );
                    tracing::warn!(stage = stage.name.as_ref(), "{message}");
                    ran.skipped.push(message);
                    *module = restore(copy, stage)?;
                    skip = true;
                }
            }
        }
        // A copy of the stage's input, printed only for a dump or a reproducer (cloning is
        // several times cheaper than printing).
        let before = melior::ir::Operation::clone(&module.as_operation());
        if let (Some(d), true, false) = (dumps, stage.hook.has_script(), skip) {
            d.write(
                &transform_dump_suffix(number, stage),
                &print_operation(&before),
            )?;
        }
        let result = if skip {
            Ok(())
        } else {
            run_pipeline_text(context, module, &stage.pipeline)
        };
        match (result, &stage.hook) {
            (Ok(()), hook) => hook.finish(context, module, target)?,
            (Err(Error::Pipeline { diagnostics, .. }), hook) if !hook.optional() => {
                let reproducer = write_reproducer(&print_operation(&before), stage, dumps, irdl)?;
                return Err(Error::Pipeline {
                    stage: stage.name.to_string(),
                    diagnostics,
                    reproducer,
                });
            }
            (Err(Error::Pipeline { diagnostics, .. }), _) => {
                // Hook stages (transform scripts, outlining) are optimisations: go on with the
                // stage's input as it was before the hook rather than fail.
                let reproducer = write_reproducer(&print_operation(&before), stage, dumps, irdl)?;
                let message = format!(
                    "the {} stage was skipped (the kernel is correct but slower): its passes failed:\n{diagnostics}{reproducer}",
                    stage.name
                );
                tracing::warn!(stage = stage.name.as_ref(), "{message}");
                ran.skipped.push(message);
                *module = restore(original.unwrap_or(before), stage)?;
            }
            (Err(e), _) => return Err(e),
        }
        let elapsed = start.elapsed();
        tracing::debug!(
            stage = stage.name.as_ref(),
            ms = elapsed.as_secs_f64() * 1e3,
            "stage done"
        );
        if let Some(d) = dumps {
            d.write(
                &format!("{:02}-{}.mlir", number, stage.name),
                &print_module(module),
            )?;
        }
        ran.timings.push((stage.name.to_string(), elapsed));
    }
    Ok(ran)
}

/// The dump of a transform stage's input, transform script included:
/// `NN-<stage>.transform.mlir`.
pub fn transform_dump_suffix(number: usize, stage: &Stage) -> String {
    format!("{number:02}-{}.transform.mlir", stage.name)
}

/// A module from a copy kept to fall back on after `stage` failed.
fn restore<'c>(copy: melior::ir::Operation<'c>, stage: &Stage) -> Result<Module<'c>> {
    Module::from_operation(copy).ok_or_else(|| {
        Error::stage(
            stage.name.as_ref(),
            "cannot restore the stage input after a failure",
        )
    })
}

/// Writes the failing stage's input and returns the `mlir-opt` command that replays it.
/// `irdl` defines the dialects the module may use (see [`crate::context::irdl_of`]).
fn write_reproducer(
    text: &str,
    stage: &Stage,
    dumps: Option<&Dumps>,
    irdl: &str,
) -> Result<String> {
    let fallback = Dumps {
        dir: std::env::temp_dir().join("fxmlir-repro"),
        graph: format!("pid{}", std::process::id()),
        irdl: irdl.to_string(),
    };
    let d = dumps.unwrap_or(&fallback);
    let path = d.write(&format!("{}.repro.mlir", stage.name), text)?;
    Ok(format!(
        "\nreproduce with:\n  mlir-opt --irdl-file={} --pass-pipeline='{}' {}",
        d.path(crate::dumps::IRDL_SUFFIX).display(),
        stage.pipeline,
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hook stage whose passes fail goes on with its input as it was before the hook (here:
    /// not outlined), and the compile goes on.
    #[test]
    fn a_failing_hook_stage_restores_its_input() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let mut module = Module::parse(
            &context,
            r#"
            func.func @g(%arg0: memref<4xf32>) {
              %c0 = arith.constant 0 : index
              %c1 = arith.constant 1 : index
              %c4 = arith.constant 4 : index
              %cst = arith.constant 1.0 : f32
              scf.for %i = %c0 to %c4 step %c1 {
                memref.store %cst, %arg0[%i] : memref<4xf32>
              }
              return
            }"#,
        )
        .expect("parses");
        let input = print_module(&module);
        // The interpreter fails: the module has no such entry point.
        let failing = Stage {
            name: Cow::Borrowed("failing"),
            pipeline: Cow::Borrowed("builtin.module(transform-interpreter{entry-point=missing})"),
            hook: Hook::Outline,
        };
        let target = Target::parse("x86-64-v3").unwrap();
        let ran =
            run_stages(&context, &mut module, &[failing], None, 1, &target, "").expect("goes on");
        assert_eq!(ran.timings.len(), 1);
        let [skipped] = ran.skipped.as_slice() else {
            panic!("one skipped stage expected, got {:?}", ran.skipped);
        };
        assert!(
            skipped.starts_with("the failing stage was skipped (the kernel is correct but slower): its passes failed:"),
            "{skipped}"
        );
        assert!(module.as_operation().verify());
        assert_eq!(print_module(&module), input);
    }

    /// Edits apply in order, relative to the stages as they stand; their mistakes name them.
    #[test]
    fn edits_place_stages_by_name() {
        let stage = |name: &str| {
            Stage::added(
                name,
                StageParts {
                    passes: Some("builtin.module(cse)"),
                    ..StageParts::default()
                },
            )
            .unwrap()
        };
        let edit = |placement, anchor: &str, name: &str| StageEdit {
            placement,
            anchor: anchor.to_string(),
            stage: stage(name),
        };
        let names = |edits: &[StageEdit]| -> Vec<String> {
            edited("to-llvm", edits)
                .unwrap()
                .iter()
                .map(|s| s.name.to_string())
                .collect()
        };
        assert_eq!(
            names(&[
                edit(Placement::Before, "bufferize", "a"),
                edit(Placement::After, "a", "b"),
                edit(Placement::Replace, "outline", "c"),
            ]),
            ["a", "b", "bufferize", "c", "loops", "llvm"]
        );
        let error = |edits: &[StageEdit]| edited("to-llvm", edits).unwrap_err().to_string();
        assert!(error(&[edit(Placement::After, "fusion", "a")]).contains("no stage `fusion`"));
        assert!(
            error(&[edit(Placement::After, "llvm", "loops")])
                .contains("two stages are named `loops`")
        );
        let parsed = StageEdit::parse("replace:llvm:mine:passes=builtin.module(a:b)").unwrap();
        assert_eq!(parsed.placement, Placement::Replace);
        assert_eq!(parsed.stage.pipeline, "builtin.module(a:b)");
        assert!(StageEdit::parse("after:llvm").is_err());
        assert!(Stage::added("x", StageParts::default()).is_err());
    }
}
