//! Stages that rewrite with PDL patterns: a module of `pdl.pattern`s, parsed in the compile's
//! context and applied greedily to the whole module, with no C++ (`mlir-c/Rewrite.h`).

use super::Diagnostics;
use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{BlockLike, Module, operation::OperationLike},
};
use mlir_sys::{
    mlirApplyPatternsAndFoldGreedily, mlirFreezeRewritePattern, mlirFrozenRewritePatternSetDestroy,
    mlirGreedyRewriteDriverConfigCreate, mlirGreedyRewriteDriverConfigDestroy,
    mlirPDLPatternModuleDestroy, mlirPDLPatternModuleFromModule,
    mlirRewritePatternSetFromPDLPatternModule,
};

/// The pattern module `pdl` holds: it parses, verifies, and holds `pdl.pattern`s only (the
/// C API takes any module, and crashes on others). Errors name `stage`.
pub fn parse<'c>(context: &'c Context, pdl: &str, stage: &str) -> Result<Module<'c>> {
    let diagnostics = Diagnostics::capture(context);
    let invalid = |what: &str| {
        Error::stage(
            stage,
            format!("the stage's PDL patterns {what}:\n{}", diagnostics.take()),
        )
    };
    let patterns = Module::parse(context, pdl).ok_or_else(|| invalid("do not parse"))?;
    if !patterns.as_operation().verify() {
        return Err(invalid("do not verify"));
    }
    let ops: Vec<_> =
        std::iter::successors(patterns.body().first_operation(), |op| op.next_in_block()).collect();
    if ops.is_empty()
        || ops
            .iter()
            .any(|op| op.name().as_string_ref().as_str() != Ok("pdl.pattern"))
    {
        return Err(invalid("are not a module of `pdl.pattern`s"));
    }
    Ok(patterns)
}

/// Applies the PDL patterns of `pdl` (module text) to `module` until none matches; returns 0
/// (the driver does not count its rewrites). A pattern module that does not parse, or a
/// rewrite that does not converge, is an error naming `stage`.
pub fn apply(context: &Context, module: &mut Module, pdl: &str, stage: &str) -> Result<usize> {
    let diagnostics = Diagnostics::capture(context);
    let patterns = parse(context, pdl, stage)?;
    // SAFETY: the PDL pattern module takes ownership of the parsed module (so it is not
    // dropped here); the pattern set moves the patterns out of it, after which the emptied
    // pattern module is destroyed; freezing consumes the set; the frozen set and the driver's
    // configuration are destroyed after the one application to a live module.
    let applied = unsafe {
        let raw = patterns.to_raw();
        std::mem::forget(patterns);
        let pattern_module = mlirPDLPatternModuleFromModule(raw);
        let set = mlirRewritePatternSetFromPDLPatternModule(pattern_module);
        mlirPDLPatternModuleDestroy(pattern_module);
        let frozen = mlirFreezeRewritePattern(set);
        let config = mlirGreedyRewriteDriverConfigCreate();
        let result = mlirApplyPatternsAndFoldGreedily(module.to_raw(), frozen, config);
        mlirGreedyRewriteDriverConfigDestroy(config);
        mlirFrozenRewritePatternSetDestroy(frozen);
        result.value != 0
    };
    if applied {
        Ok(0)
    } else {
        Err(Error::stage(
            stage,
            format!(
                "the stage's PDL patterns did not converge:\n{}",
                diagnostics.take()
            ),
        ))
    }
}
