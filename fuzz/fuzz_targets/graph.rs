//! A document given to fxmlir as an interchange graph: parsed, validated, lowered to MLIR
//! (for a fixed target, no JIT) and verified. Any input may be refused with an error; none
//! may panic, abort or crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static TARGET: LazyLock<fxmlir::Target> =
    LazyLock::new(|| fxmlir::Target::parse("x86-64-v3").expect("a known level"));

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(graph) = fxmlir::Graph::from_json(text) else {
        return;
    };
    let context = fxmlir::context::new_context().expect("a context");
    let _dialects = fxmlir::context::load_dialects(&context, &[]).expect("fxmlir's dialect");
    if let Ok(module) = fxmlir::lower::lower_graph(&context, &graph, &TARGET, true) {
        // IR the verifier refuses is an error naming the node (a shape the graph records
        // wrongly, say), as the compile reports it; it must not crash either.
        let _ = fxmlir::pipeline::verify(&context, &module, &graph.name);
    }
});
