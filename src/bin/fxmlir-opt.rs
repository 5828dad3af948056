//! `fxmlir-opt`: the lit driver. Runs a named fxmlir pipeline or a textual pass pipeline over
//! an `.mlir` file, or imports interchange graphs (`--import`). With `--split-input-file`,
//! chunks separated by `// -----` are processed independently, as `mlir-opt` does.

use anyhow::{Context as _, Result, anyhow};
use clap::Parser;
use fxmlir::{Target, pipeline};
use melior::ir::Module;
use std::io::Read;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "fxmlir-opt",
    version,
    about = "Run fxmlir pipelines over MLIR or graph files"
)]
struct Cli {
    /// Input file (`-` for stdin).
    #[arg(default_value = "-")]
    input: PathBuf,
    /// Run a named fxmlir pipeline.
    #[arg(long)]
    pipeline: Option<String>,
    /// Run a textual pass pipeline, e.g. `builtin.module(canonicalize)`.
    #[arg(long)]
    pass_pipeline: Option<String>,
    /// The input holds interchange graphs (JSON); print their lowering.
    #[arg(long)]
    import: bool,
    /// Process `// -----`-separated chunks independently.
    #[arg(long)]
    split_input_file: bool,
    /// List the named pipelines and exit.
    #[arg(long)]
    list_pipelines: bool,
    /// The CPU to compile for: `host`, a named CPU (`znver4`, `skylake-avx512`, `x86-64-v3`)
    /// or either with changes (`host,-avx512bf16`, `x86-64-v4,+avx512bf16,l2=1M`). Default:
    /// the target a module records (`fxmlir.target`, as every dump does), else
    /// `FXMLIR_TARGET`, else the host.
    #[arg(long)]
    target: Option<String>,
    /// Threads the `parallel` stage splits large ops across (unless the target says
    /// `threads=`).
    #[arg(long)]
    threads: Option<usize>,
    /// Add a stage to the named pipeline: `PLACEMENT:ANCHOR:NAME:KIND=VALUE`, e.g.
    /// `after:fusion:cse:passes=builtin.module(cse)`, `before:llvm:mine:pdl=patterns.mlir`,
    /// `replace:parallel:tile:transform=script.mlir`. Repeatable; applied in order.
    #[arg(long = "add-stage")]
    add_stage: Vec<String>,
    /// Load a dialect defined in IRDL before parsing the input. Repeatable.
    #[arg(long = "irdl-file")]
    irdl_file: Vec<PathBuf>,
}

fn main() -> std::process::ExitCode {
    fxmlir::logging::init();
    match run(Cli::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fxmlir-opt: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<bool> {
    if cli.list_pipelines {
        for (name, stages) in pipeline::PIPELINES {
            println!("{name}");
            for stage in *stages {
                println!("  {}: {}", stage.name, stage.pipeline);
            }
        }
        return Ok(true);
    }
    if !cli.add_stage.is_empty() && cli.pipeline.is_none() {
        anyhow::bail!("--add-stage edits a named pipeline: give it with --pipeline");
    }
    // A bad `--target` is one error, not one per chunk.
    if let Some(spec) = &cli.target {
        Target::parse(spec)?;
    }
    let mut text = String::new();
    if cli.input.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(&cli.input)
            .with_context(|| format!("cannot read {}", cli.input.display()))?;
    }
    let chunks: Vec<&str> = if cli.split_input_file {
        text.split("\n// -----").collect()
    } else {
        vec![text.as_str()]
    };
    let mut ok = true;
    let mut outputs = Vec::new();
    for chunk in chunks {
        match process(&cli, chunk) {
            Ok(out) => outputs.push(out),
            Err(e) => {
                eprintln!("fxmlir-opt: error: {e:#}");
                ok = false;
            }
        }
    }
    print!("{}", outputs.join("// -----\n"));
    Ok(ok)
}

/// The target `--target` names, else the one `module` records, else `FXMLIR_TARGET`, else
/// the host; with `--threads`.
fn target(cli: &Cli, module: Option<&Module>) -> Result<Target> {
    let recorded = module.and_then(fxmlir::lower::recorded_target);
    let target = match cli.target.as_deref().or(recorded.as_deref()) {
        Some(spec) => Target::parse(spec)?,
        None => Target::from_env()?,
    };
    Ok(match cli.threads {
        Some(n) => target.with_threads(n),
        None => target,
    })
}

fn process(cli: &Cli, chunk: &str) -> Result<String> {
    let context = fxmlir::context::new_context()?;
    let dialects = cli
        .irdl_file
        .iter()
        .map(|path| fxmlir::context::Dialect::from_file(path))
        .collect::<fxmlir::Result<Vec<_>>>()?;
    let _dialects = fxmlir::context::load_dialects(&context, &dialects)?;
    let mut module = if cli.import {
        // Comment lines (RUN/CHECK lines of a lit test) are not part of the JSON; they are
        // blanked rather than dropped so that parse errors report the file's own lines.
        let json: String = chunk
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("//") {
                    ""
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let graph = fxmlir::Graph::from_json(&json)?;
        let module = fxmlir::lower::lower_graph(&context, &graph, &target(cli, None)?)?;
        pipeline::verify(&context, &module, &graph.name)?;
        module
    } else {
        let diagnostics = pipeline::Diagnostics::capture(&context);
        Module::parse(&context, chunk)
            .ok_or_else(|| anyhow!("cannot parse the input:\n{}", diagnostics.take()))?
    };
    if let Some(name) = &cli.pipeline {
        let target = target(cli, Some(&module))?;
        let edits = cli
            .add_stage
            .iter()
            .map(|spec| pipeline::StageEdit::parse(spec))
            .collect::<fxmlir::Result<Vec<_>>>()?;
        let ran = pipeline::run_stages(
            &context,
            &mut module,
            &pipeline::edited(name, &edits)?,
            None,
            1,
            &target,
        )?;
        for message in &ran.skipped {
            eprintln!("fxmlir-opt: warning: {message}");
        }
    }
    if let Some(p) = &cli.pass_pipeline {
        pipeline::run_pipeline_text(&context, &mut module, p)?;
    }
    Ok(pipeline::print_module(&module))
}
