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
    #[command(flatten)]
    target: fxmlir::cli::TargetArgs,
    #[command(flatten)]
    extensions: fxmlir::cli::ExtensionArgs,
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
    if !cli.extensions.add_stage.is_empty() && cli.pipeline.is_none() {
        anyhow::bail!("--add-stage edits a named pipeline: give it with --pipeline");
    }
    // A bad `--target` is one error, not one per chunk.
    if let Some(spec) = &cli.target.target {
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

/// The target of a chunk: `--target`, else the one `module` records, else `FXMLIR_TARGET`,
/// else the host.
fn target(cli: &Cli, module: Option<&Module>) -> Result<Target> {
    let recorded = module.and_then(fxmlir::lower::recorded_target);
    Ok(cli.target.target(recorded.as_deref())?)
}

fn process(cli: &Cli, chunk: &str) -> Result<String> {
    let context = fxmlir::context::new_context()?;
    let dialects = cli.extensions.dialects()?;
    let _loaded = fxmlir::context::load_dialects(&context, &dialects)?;
    for plugin in cli.extensions.plugins()? {
        plugin.register_dialects(&context);
    }
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
        let module = fxmlir::lower::lower_graph(&context, &graph, &target(cli, None)?, true)?;
        pipeline::verify(&context, &module, &graph.name)?;
        module
    } else {
        let diagnostics = pipeline::Diagnostics::capture(&context);
        Module::parse(&context, chunk)
            .ok_or_else(|| anyhow!("cannot parse the input:\n{}", diagnostics.take()))?
    };
    if let Some(name) = &cli.pipeline {
        let target = target(cli, Some(&module))?;
        let edits = cli.extensions.stages()?;
        let ran = pipeline::run_stages(
            &context,
            &mut module,
            &pipeline::edited(name, &edits)?,
            None,
            1,
            &target,
            &fxmlir::context::irdl_of(&dialects),
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
