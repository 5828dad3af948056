//! Vectorised math through glibc's libmvec. MLIR lowers `math.exp`, `math.tanh`, `math.erf`
//! and their kin to scalar libm calls or LLVM intrinsics that codegen turns into libm calls, so
//! LLVM's loop vectoriser would leave every loop holding one scalar. Each such call site gets a
//! `vector-function-abi-variant` attribute naming libmvec's vector versions for the target's
//! vector unit (the AVX2 and SSE ones as well, for loops LLVM vectorises narrower); the
//! vectoriser then calls, say, `_ZGVeN16v_expf` on sixteen lanes at once. The variants are
//! declared in the module and kept alive in `llvm.compiler.used`, so that no pass drops them
//! before the vectoriser runs; [`super::abi::resolve`] finds them in libmvec.

use crate::error::{Error, Result};
use crate::libmvec::{FUNCTIONS, target_isas};
use crate::target::Target;
use inkwell::{
    AddressSpace,
    attributes::AttributeLoc,
    context::Context,
    module::{Linkage, Module},
    types::{BasicMetadataTypeEnum, BasicTypeEnum},
    values::{CallSiteValue, FunctionValue, InstructionOpcode, PointerValue},
};
use std::collections::BTreeMap;

/// The libm base name, element width and arity a callee stands for: `expf` → (`exp`, 32, 1),
/// `llvm.tanh.f64` → (`tanh`, 64, 1).
fn classify(callee: &str) -> Option<(&'static str, u32, usize)> {
    let (base, bits) = match callee.strip_prefix("llvm.") {
        Some(intrinsic) => {
            let (base, ty) = intrinsic.rsplit_once('.')?;
            let bits = match ty {
                "f32" => 32,
                "f64" => 64,
                _ => return None,
            };
            (base, bits)
        }
        None => match callee.strip_suffix('f') {
            Some(base) if FUNCTIONS.iter().any(|(n, _)| *n == base) => (base, 32),
            _ => (callee, 64),
        },
    };
    FUNCTIONS
        .iter()
        .find(|(n, _)| *n == base)
        .map(|(n, arity)| (*n, bits, *arity))
}

/// Annotates every call to a function libmvec vectorises; returns how many calls it marked.
/// On AVX-512 targets the functions holding such calls also get `prefer-vector-width=512`:
/// LLVM's x86 cost model otherwise keeps to 256-bit vectors, while a loop bound by its math
/// runs twice as fast on libmvec's 16-lane variants. (Other loops keep the default: on
/// convolutions' short copy loops 512-bit vectors were slower.)
pub fn annotate<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>, target: &Target) -> Result<usize> {
    let isas = target_isas(target);
    if isas.is_empty() {
        return Ok(0);
    }
    let mut calls: Vec<(CallSiteValue<'ctx>, &'static str, u32, usize, String)> = Vec::new();
    let mut math_bound: Vec<FunctionValue<'ctx>> = Vec::new();
    for function in module.get_functions() {
        for block in function.get_basic_blocks() {
            for instruction in block.get_instructions() {
                if instruction.get_opcode() != InstructionOpcode::Call {
                    continue;
                }
                let Ok(call) = CallSiteValue::try_from(instruction) else {
                    continue;
                };
                let Some(callee) = call.get_called_fn_value() else {
                    continue;
                };
                let name = callee.get_name().to_string_lossy().into_owned();
                if let Some((base, bits, arity)) = classify(&name) {
                    calls.push((call, base, bits, arity, name));
                    if math_bound.last() != Some(&function) {
                        math_bound.push(function);
                    }
                }
            }
        }
    }
    let mut declared: BTreeMap<String, FunctionValue<'ctx>> = BTreeMap::new();
    for (call, base, bits, arity, scalar) in &calls {
        let params = "v".repeat(*arity);
        let mut variants = Vec::new();
        for isa in &isas {
            let lanes = isa.bits / bits;
            let vector = isa.variant(base, *bits, *arity);
            if !declared.contains_key(&vector) {
                let element: BasicTypeEnum = if *bits == 32 {
                    ctx.f32_type().into()
                } else {
                    ctx.f64_type().into()
                };
                let vector_type = match element {
                    BasicTypeEnum::FloatType(t) => t.vec_type(lanes),
                    _ => return Err(Error::Llvm("libmvec element is not a float".into())),
                };
                let args: Vec<BasicMetadataTypeEnum> = vec![vector_type.into(); *arity];
                let f = module.get_function(&vector).unwrap_or_else(|| {
                    module.add_function(&vector, vector_type.fn_type(&args, false), None)
                });
                declared.insert(vector.clone(), f);
            }
            variants.push(format!("_ZGV_LLVM_N{lanes}{params}_{scalar}({vector})"));
        }
        let attribute =
            ctx.create_string_attribute("vector-function-abi-variant", &variants.join(","));
        call.add_attribute(AttributeLoc::Function, attribute);
    }
    if isas.iter().any(|isa| isa.bits == 512) {
        let wide = ctx.create_string_attribute("prefer-vector-width", "512");
        for function in math_bound {
            function.add_attribute(AttributeLoc::Function, wide);
        }
    }
    keep_alive(ctx, module, declared.values().copied())?;
    Ok(calls.len())
}

/// Appends functions to `llvm.compiler.used`, so that declarations with no use yet survive
/// until the loop vectoriser calls them.
fn keep_alive<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    functions: impl Iterator<Item = FunctionValue<'ctx>>,
) -> Result<()> {
    let pointers: Vec<PointerValue<'ctx>> = functions
        .map(|f| f.as_global_value().as_pointer_value())
        .collect();
    if pointers.is_empty() {
        return Ok(());
    }
    if module.get_global("llvm.compiler.used").is_some() {
        return Err(Error::Llvm(
            "the module already has an llvm.compiler.used list".to_string(),
        ));
    }
    let ptr = ctx.ptr_type(AddressSpace::default());
    let array = ptr.const_array(&pointers);
    let global = module.add_global(
        ptr.array_type(pointers.len() as u32),
        None,
        "llvm.compiler.used",
    );
    global.set_linkage(Linkage::Appending);
    global.set_section(Some("llvm.metadata"));
    global.set_initializer(&array);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_libm_names_and_intrinsics() {
        assert_eq!(classify("expf"), Some(("exp", 32, 1)));
        assert_eq!(classify("exp"), Some(("exp", 64, 1)));
        assert_eq!(classify("erff"), Some(("erf", 32, 1)));
        assert_eq!(classify("llvm.tanh.f32"), Some(("tanh", 32, 1)));
        assert_eq!(classify("llvm.pow.f64"), Some(("pow", 64, 2)));
        assert_eq!(classify("llvm.exp.v8f32"), None);
        assert_eq!(classify("llvm.fma.f32"), None);
        assert_eq!(classify("malloc"), None);
        assert_eq!(classify("memrefCopy"), None);
    }
}
