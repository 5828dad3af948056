//! `fxmlir`: import, compile and run interchange graph files (`*.fx.json`).

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use fxmlir::graph::{DType, Graph, TensorMeta};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "fxmlir",
    version,
    about = "Compile PyTorch FX graphs through MLIR and LLVM"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the MLIR (linalg on tensors) of a graph file.
    Import {
        file: PathBuf,
        /// The CPU to lower for (see `compile --target`).
        #[arg(long)]
        target: Option<String>,
    },
    /// Compile a graph file and print per-stage timings. For a target this host cannot run,
    /// the machine code is emitted (and dumped) but not loaded.
    Compile {
        file: PathBuf,
        #[command(flatten)]
        options: CompileArgs,
    },
    /// Compile a graph file and run it on random inputs.
    Run {
        file: PathBuf,
        #[command(flatten)]
        options: CompileArgs,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Number of timed calls after the first.
        #[arg(long, default_value_t = 0)]
        repeat: usize,
        /// The value of a size symbol of a graph with symbolic sizes, `s0=16` (repeatable;
        /// default: each symbol's minimum).
        #[arg(long = "size", value_parser = parse_size)]
        sizes: Vec<(String, i64)>,
    },
    /// List the ATen overloads with a registered lowering.
    Ops,
    /// Describe a target: what fxmlir makes of a spec, and whether this host runs its code.
    Target {
        /// `host`, a named CPU or either with changes (see `compile --target`). Default:
        /// `FXMLIR_TARGET`, else the host.
        spec: Option<String>,
    },
}

#[derive(clap::Args)]
struct CompileArgs {
    /// Named pipeline (see `fxmlir-opt --list-pipelines`).
    #[arg(long, default_value = "default")]
    pipeline: String,
    /// Write the interchange file, every stage's MLIR and the LLVM IR here.
    #[arg(long, env = "FXMLIR_DUMP_DIR")]
    dump_dir: Option<PathBuf>,
    /// Load the kernel from, and store it in, the compile cache under this directory (off by
    /// default, so that the timings are a compile's; an empty value turns it off).
    #[arg(long, env = "FXMLIR_CACHE_DIR")]
    cache_dir: Option<std::ffi::OsString>,
    #[command(flatten)]
    target: fxmlir::cli::TargetArgs,
    #[command(flatten)]
    extensions: fxmlir::cli::ExtensionArgs,
}

impl CompileArgs {
    fn options(&self) -> Result<fxmlir::Options> {
        Ok(fxmlir::Options {
            pipeline: self.pipeline.clone(),
            dump_dir: self.dump_dir.clone(),
            cache_dir: self
                .cache_dir
                .clone()
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
            target: self.target.target(None)?,
            stages: self.extensions.stages()?,
            dialects: self.extensions.dialects()?,
            plugins: self.extensions.plugins()?,
            checks: true,
            extensions_key: String::new(),
        })
    }
}

/// The target a spec names, else `FXMLIR_TARGET`'s, else the host.
fn chosen_target(spec: Option<String>) -> Result<fxmlir::Target> {
    let args = fxmlir::cli::TargetArgs {
        target: spec,
        threads: None,
    };
    Ok(args.target(None)?)
}

fn load(file: &PathBuf) -> Result<(Graph, String)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let graph = Graph::from_json(&text).with_context(|| format!("in {}", file.display()))?;
    Ok((graph, text))
}

fn main() -> std::process::ExitCode {
    fxmlir::logging::init();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fxmlir: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Import { file, target } => {
            let (graph, _) = load(&file)?;
            let target = chosen_target(target)?;
            let context = fxmlir::context::new_context()?;
            let _dialects = fxmlir::context::load_dialects(&context, &[])?;
            let module = fxmlir::lower::lower_graph(&context, &graph, &target, true)?;
            fxmlir::pipeline::verify(&context, &module, &graph.name)?;
            print!("{}", fxmlir::pipeline::print_module(&module));
        }
        Command::Compile { file, options } => {
            let (graph, text) = load(&file)?;
            let options = options.options()?;
            println!("target: {}", options.target.summary());
            if let Err(reason) = options.target.check_runs_here() {
                let built = fxmlir::build(&graph, Some(&text), &options)?;
                println!("graph {}", graph.name);
                print_stage_timings(&built.timings, &built.warnings, &built.dumped);
                println!("not loaded: {reason}");
            } else {
                let compiled = fxmlir::compile(&graph, Some(&text), &options)?;
                print_timings(&compiled);
            }
        }
        Command::Run {
            file,
            options,
            seed,
            repeat,
            sizes,
        } => {
            let (graph, text) = load(&file)?;
            let options = options.options()?;
            println!("target: {}", options.target.summary());
            let compiled = fxmlir::compile(&graph, Some(&text), &options)?;
            print_timings(&compiled);
            let mut values = Vec::new();
            for symbol in &graph.symbols {
                let given = sizes.iter().find(|(name, _)| *name == symbol.name);
                values.push(given.map_or(symbol.min, |(_, v)| *v));
            }
            if let Some((name, _)) = sizes
                .iter()
                .find(|(name, _)| !graph.symbols.iter().any(|s| s.name == *name))
            {
                bail!("--size {name}: the graph has no size symbol `{name}`");
            }
            run_random(&compiled, &graph, &values, seed, repeat)?;
        }
        Command::Target { spec } => {
            let target = chosen_target(spec)?;
            println!("target: {}", target.summary());
            println!("spec: {}", target.describe());
            println!(
                "llvm: {} {} {}",
                target.triple, target.cpu, target.llvm_features
            );
            match target.check_runs_here() {
                Ok(()) => println!("runs here: yes"),
                Err(reason) => println!("runs here: no: {reason}"),
            }
        }
        Command::Ops => {
            for (op, family) in fxmlir::supported_ops()? {
                println!("{op}\t{family}");
            }
        }
    }
    Ok(())
}

fn print_timings(compiled: &fxmlir::CompiledGraph) {
    match compiled.source {
        fxmlir::runtime::Source::Compiled => println!("graph {}", compiled.name),
        source => println!("graph {} (kernel from {})", compiled.name, source.as_str()),
    }
    print_stage_timings(&compiled.timings, &compiled.warnings, &compiled.dumped);
}

/// Each stage's time, then the dump files; warnings go to stderr.
fn print_stage_timings(
    timings: &fxmlir::runtime::Timings,
    warnings: &[String],
    dumped: &[PathBuf],
) {
    for warning in warnings {
        eprintln!("fxmlir: warning: {warning}");
    }
    for (stage, t) in timings {
        println!("  {stage:<12} {:>9.3} ms", t.as_secs_f64() * 1e3);
    }
    for path in dumped {
        println!("  dump {}", path.display());
    }
}

/// A 64-bit-aligned buffer big enough for `meta`'s strided extent.
/// A cache line of a buffer: buffers start on a 64-byte boundary, as PyTorch's do (a kernel's
/// vector loads from a buffer that malloc aligns to 16 bytes straddle cache lines, and a
/// matrix product ran 40% slower on it).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

struct Buffer {
    lines: Vec<Line>,
    meta: TensorMeta,
}

impl Buffer {
    fn new(meta: &TensorMeta) -> Self {
        let extent: i64 = if meta.shape.contains(&0) {
            0
        } else {
            1 + meta
                .shape
                .iter()
                .zip(&meta.strides)
                .map(|(d, s)| (d - 1) * s)
                .sum::<i64>()
        };
        let bytes = extent as usize * meta.dtype.byte_size();
        Buffer {
            lines: vec![Line([0; 64]); bytes.div_ceil(64).max(1)],
            meta: meta.clone(),
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the lines viewed as bytes, 64 per line.
        unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.lines.len() * 64)
        }
    }

    fn element(&self, i: usize) -> f64 {
        // SAFETY: reads within the buffer; `i` is below the element count by construction.
        let b: &[u8] = unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.lines.len() * 64)
        };
        let n = self.meta.dtype.byte_size();
        let raw = &b[i * n..(i + 1) * n];
        match self.meta.dtype {
            DType::Float32 => f32::from_le_bytes(raw.try_into().unwrap_or_default()) as f64,
            DType::Float64 => f64::from_le_bytes(raw.try_into().unwrap_or_default()),
            DType::Float16 => half_to_f64(
                u16::from_le_bytes(raw.try_into().unwrap_or_default()),
                false,
            ),
            DType::Bfloat16 => {
                half_to_f64(u16::from_le_bytes(raw.try_into().unwrap_or_default()), true)
            }
            DType::Int64 => i64::from_le_bytes(raw.try_into().unwrap_or_default()) as f64,
            DType::Int32 => i32::from_le_bytes(raw.try_into().unwrap_or_default()) as f64,
            DType::Int16 => i16::from_le_bytes(raw.try_into().unwrap_or_default()) as f64,
            DType::Int8 => raw[0] as i8 as f64,
            DType::Uint8 | DType::Bool => raw[0] as f64,
        }
    }
}

/// The storage offset of the `linear`-th element in row-major order.
fn strided_offset(linear: usize, meta: &TensorMeta) -> usize {
    let mut rest = linear as i64;
    let mut offset = 0;
    for (size, stride) in meta.shape.iter().zip(&meta.strides).rev() {
        offset += (rest % size) * stride;
        rest /= size;
    }
    offset as usize
}

fn half_to_f64(bits: u16, bfloat: bool) -> f64 {
    if bfloat {
        return f32::from_bits((bits as u32) << 16) as f64;
    }
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let frac = (bits & 0x3ff) as f64;
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Operands only positive values make sense for (a batch norm's running variance, the operand
/// of a square root or logarithm), as (op, argument position): a graph input used there gets
/// random values in [1, 2), so that a model's output is neither NaN nor, after many batch
/// norms dividing by tiny variances, huge.
const POSITIVE_OPERANDS: &[(&str, usize)] = &[
    ("aten._native_batch_norm_legit_no_training.default", 4),
    ("aten._native_batch_norm_legit.default", 4),
    ("aten.native_batch_norm.default", 4),
    ("aten.sqrt.default", 0),
    ("aten.rsqrt.default", 0),
    ("aten.log.default", 0),
];

/// Whether each input of `graph` is used as one of the [`POSITIVE_OPERANDS`].
fn positive_inputs(graph: &Graph) -> Vec<bool> {
    let mut positive = std::collections::HashSet::new();
    for node in &graph.nodes {
        for (op, position) in POSITIVE_OPERANDS {
            if node.target == *op
                && let Some(fxmlir::graph::Arg::Ref(r)) = node.args.get(*position)
            {
                positive.insert(r.node.as_str());
            }
        }
    }
    graph
        .inputs
        .iter()
        .map(|i| positive.contains(i.name.as_str()))
        .collect()
}

/// Fills a buffer with values in [-1, 1), or [1, 2) if `positive` (floats), or small integers,
/// from a xorshift stream.
fn fill_random(buffer: &mut Buffer, state: &mut u64, positive: bool) {
    let dtype = buffer.meta.dtype;
    let n = dtype.byte_size();
    let bytes = buffer.bytes();
    for chunk in bytes.chunks_exact_mut(n) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let raw = (*state >> 11) as f64 / (1u64 << 53) as f64;
        let unit = if positive { 1.0 + raw } else { raw * 2.0 - 1.0 };
        let small = ((*state >> 33) % 7) as i64 - 3;
        match dtype {
            DType::Float32 => chunk.copy_from_slice(&(unit as f32).to_le_bytes()),
            DType::Float64 => chunk.copy_from_slice(&unit.to_le_bytes()),
            DType::Bfloat16 => {
                chunk.copy_from_slice(&(((unit as f32).to_bits() >> 16) as u16).to_le_bytes())
            }
            // 0x3C00 is 1.0 in f16; a random mantissa keeps values in [1, 2).
            DType::Float16 => {
                chunk.copy_from_slice(&(0x3C00u16 | ((*state >> 20) as u16 & 0x3ff)).to_le_bytes())
            }
            DType::Int64 => chunk.copy_from_slice(&small.to_le_bytes()),
            DType::Int32 => chunk.copy_from_slice(&(small as i32).to_le_bytes()),
            DType::Int16 => chunk.copy_from_slice(&(small as i16).to_le_bytes()),
            DType::Int8 => chunk[0] = small as i8 as u8,
            DType::Uint8 => chunk[0] = small.unsigned_abs() as u8,
            DType::Bool => chunk[0] = (small > 0) as u8,
        }
    }
}

/// `s0=16` as a symbol and its value.
fn parse_size(text: &str) -> std::result::Result<(String, i64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let value = value
        .parse()
        .map_err(|_| format!("`{value}` is not an integer"))?;
    Ok((name.to_string(), value))
}

fn run_random(
    compiled: &fxmlir::CompiledGraph,
    graph: &Graph,
    sizes: &[i64],
    seed: u64,
    repeat: usize,
) -> Result<()> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let (inputs, outputs) = compiled.sized(sizes)?;
    let mut buffers: Vec<Buffer> = inputs.iter().map(Buffer::new).collect();
    for (b, positive) in buffers.iter_mut().zip(positive_inputs(graph)) {
        fill_random(b, &mut state, positive);
    }
    buffers.extend(outputs.iter().map(Buffer::new));
    let pointers: Vec<usize> = buffers
        .iter_mut()
        .map(|b| b.lines.as_mut_ptr() as usize)
        .collect();
    if pointers.len() != compiled.inputs.len() + compiled.outputs.len() {
        bail!("internal: buffer count mismatch");
    }
    let start = Instant::now();
    // SAFETY: every buffer was sized from the compiled graph's own metadata for `sizes`.
    unsafe { compiled.call_with_sizes(&pointers, sizes, None)? };
    let first = start.elapsed();
    let start = Instant::now();
    for _ in 0..repeat {
        // SAFETY: as above.
        unsafe { compiled.call_with_sizes(&pointers, sizes, None)? };
    }
    println!("first call {:.3} ms", first.as_secs_f64() * 1e3);
    if repeat > 0 {
        println!(
            "mean of {repeat} calls {:.3} ms",
            start.elapsed().as_secs_f64() * 1e3 / repeat as f64
        );
    }
    for (i, b) in buffers[compiled.inputs.len()..].iter().enumerate() {
        let count = b.meta.numel() as usize;
        let (mut sum, mut shown) = (0.0, Vec::new());
        for j in 0..count {
            let v = b.element(strided_offset(j, &b.meta));
            sum += v;
            if j < 4 {
                shown.push(format!("{v:.6}"));
            }
        }
        println!(
            "output {i}: {} {:?} first [{}] sum {sum:.6}",
            b.meta.dtype.name(),
            b.meta.shape,
            shown.join(", ")
        );
    }
    Ok(())
}
