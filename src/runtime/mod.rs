//! Compiled graphs and their call path: one entry point, one memref descriptor per input and
//! output, data pointers patched in per call (zero copy; the caller owns every buffer).

use crate::error::{Error, Result};
use crate::graph::{Graph, TensorMeta};
use crate::jit::{self, Descriptors, Kernel};
use crate::pipeline::{self, Dumps};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to compile.
#[derive(Debug, Clone)]
pub struct Options {
    /// A named pipeline from [`pipeline::PIPELINES`].
    pub pipeline: String,
    /// Write the interchange file, every stage's MLIR and the LLVM IR here.
    pub dump_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pipeline: "default".to_string(),
            dump_dir: None,
        }
    }
}

/// One stage's name and duration, in the order they ran.
pub type Timings = Vec<(String, Duration)>;

pub struct CompiledGraph {
    pub name: String,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
    pub timings: Timings,
    pub dumped: Vec<PathBuf>,
    kernel: Kernel,
    descriptors: Descriptors,
}

/// Lowers, optimises and JIT-compiles a validated graph.
pub fn compile(graph: &Graph, json: Option<&str>, options: &Options) -> Result<CompiledGraph> {
    let span = tracing::info_span!("compile", graph = graph.name.as_str());
    let _guard = span.enter();
    let total = Instant::now();
    let dumps = options.dump_dir.as_ref().map(|dir| Dumps {
        dir: dir.clone(),
        graph: graph.name.clone(),
    });
    let mut dumped = Vec::new();
    if let (Some(d), Some(text)) = (&dumps, json) {
        dumped.push(d.write("fx.json", text)?);
    }
    let stages = pipeline::named(&options.pipeline)?;
    let mut timings = Timings::new();

    let start = Instant::now();
    let context = crate::context::new_context();
    timings.push(("context".to_string(), start.elapsed()));

    let start = Instant::now();
    let mut module = {
        let _s = tracing::debug_span!("lower").entered();
        crate::lower::lower_graph(&context, graph)?
    };
    pipeline::verify(&context, &module, &graph.name)?;
    timings.push(("lower".to_string(), start.elapsed()));
    if let Some(d) = &dumps {
        dumped.push(d.write("00-input.mlir", &pipeline::print_module(&module))?);
    }

    timings.extend(pipeline::run_stages(
        &context,
        &mut module,
        stages,
        dumps.as_ref(),
        1,
    )?);
    if let Some(d) = &dumps {
        for (i, stage) in stages.iter().enumerate() {
            // Written unless the schedule could not be built.
            let transform = d.path(&pipeline::transform_dump_suffix(i + 1, stage));
            if stage.hook == pipeline::Hook::Schedule && transform.exists() {
                dumped.push(transform);
            }
            dumped.push(d.path(&format!("{:02}-{}.mlir", i + 1, stage.name)));
        }
    }

    let arg_count = graph.inputs.len() + graph.outputs.len();
    let (kernel, jt) = {
        let _s = tracing::debug_span!("jit").entered();
        jit::compile(&module, &graph.name, arg_count, dumps.as_ref())?
    };
    if let Some(d) = &dumps {
        dumped.push(d.path("ll"));
    }
    timings.push(("translate".to_string(), jt.translate));
    timings.push(("llvm-opt".to_string(), jt.optimize));
    timings.push(("codegen".to_string(), jt.codegen));
    timings.push(("total".to_string(), total.elapsed()));
    for (stage, t) in &timings {
        tracing::debug!(stage = stage.as_str(), ms = t.as_secs_f64() * 1e3, "timing");
    }

    let inputs: Vec<TensorMeta> = graph.inputs.iter().map(|i| i.meta.clone()).collect();
    let outputs: Vec<TensorMeta> = graph
        .outputs
        .iter()
        .map(|r| graph.meta(r).cloned())
        .collect::<Option<_>>()
        .ok_or_else(|| Error::InvalidGraph("an output has no metadata".to_string()))?;
    let descriptors = Descriptors::new(
        inputs
            .iter()
            .chain(&outputs)
            .map(|m| (m.shape.as_slice(), m.strides.as_slice())),
    );
    tracing::info!(
        graph = graph.name.as_str(),
        ms = total.elapsed().as_secs_f64() * 1e3,
        "compiled"
    );
    Ok(CompiledGraph {
        name: graph.name.clone(),
        inputs,
        outputs,
        timings,
        dumped,
        kernel,
        descriptors,
    })
}

impl CompiledGraph {
    /// Runs the kernel on data pointers: the inputs, then the outputs, in graph order.
    ///
    /// # Safety
    /// Each pointer must address a buffer laid out as the matching entry of `inputs`/`outputs`
    /// records (shape, strides, dtype), valid for the duration of the call; output buffers
    /// must not overlap inputs or each other.
    pub unsafe fn call(&self, pointers: &[usize]) -> Result<()> {
        if pointers.len() != self.descriptors.len() {
            return Err(Error::Call(format!(
                "graph `{}` takes {} buffers ({} inputs, {} outputs), got {}",
                self.name,
                self.descriptors.len(),
                self.inputs.len(),
                self.outputs.len(),
                pointers.len()
            )));
        }
        let (_words, mut argv) = self.descriptors.bind(pointers);
        // SAFETY: the caller guarantees the buffers; `argv` points to one live descriptor (in
        // `_words`, alive until the end of the call) per memref argument, in order.
        unsafe { (self.kernel.entry())(argv.as_mut_ptr()) };
        Ok(())
    }
}
