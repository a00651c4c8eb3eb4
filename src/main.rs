//! The `jurystream` command: `replay` a file of records, or `run` the Kafka service.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use jurystream::config::Config;
use jurystream::engine::Engine;
use jurystream::replay;

#[derive(Parser)]
#[command(
    version,
    about = "Live human votes and LLM-judge scores into trustworthy numbers"
)]
struct Cli {
    /// Configuration file (TOML); `JURYSTREAM_SECTION__KEY` variables override it.
    #[arg(long, global = true, env = "JURYSTREAM_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replays JSON lines of Kafka records through the engine, deterministically.
    Replay {
        /// Input file of records, or `-` for standard input.
        #[arg(long, default_value = "-")]
        input: String,
        /// Output file of records, or `-` for standard output.
        #[arg(long, default_value = "-")]
        output: String,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Replay { input, output } => run_replay(config, &input, &output),
    }
}

fn run_replay(config: Config, input: &str, output: &str) -> Result<()> {
    let reader: Box<dyn Read> = if input == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(input).with_context(|| format!("opening input {input}"))?)
    };
    let writer: Box<dyn Write> = if output == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(File::create(output).with_context(|| format!("creating output {output}"))?)
    };
    let engine = Engine::new(config);
    let started = Instant::now();
    let summary = replay::replay(
        &engine,
        BufReader::with_capacity(1 << 16, reader),
        BufWriter::with_capacity(1 << 16, writer),
    )?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "replay: {} records, {} applied ({} late), {} dead-lettered, {} outputs in {:.3} s ({:.0} records/s)",
        summary.records,
        summary.applied,
        summary.late,
        summary.dead_lettered,
        summary.outputs,
        secs,
        summary.records as f64 / secs.max(1e-9)
    );
    Ok(())
}
