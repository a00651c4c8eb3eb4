//! The `jurystream` command: `replay` a file of records, or `run` the Kafka service.
//!
//! Two allocator settings that the service is measured with are environment variables, set by
//! the deploy files (`deploy/`) rather than by code: `MIMALLOC_ALLOW_THP=0` (mimalloc's fresh
//! pages otherwise fault in 2 MiB at a time, each zeroed by the kernel) and
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=131072`
//! (librdkafka allocates from glibc, whose dynamic thresholds otherwise keep the heap its
//! buffers peaked at); docs/architecture.md says why, docs/performance.md gives the
//! measurements.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use jurystream::config::Config;
use jurystream::engine::Engine;
use jurystream::queries::advertise;
use jurystream::queries::api::{self, Queries};
use jurystream::queries::view::View;
use jurystream::replay;
use jurystream::telemetry::http::{Health, Listeners};
use jurystream::telemetry::metrics::Metrics;
use jurystream::topics::TopicTable;

/// The service allocates and frees many small, short-lived buffers per record (rendered outputs,
/// changelog records, librdkafka messages); glibc's allocator was ~20% of the processing thread's
/// CPU in the load benchmark (perf), mimalloc a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Runs the Kafka service until SIGTERM or SIGINT.
    Run,
    /// Checks the configuration as `run` would load it (the file, every `JURYSTREAM_` variable,
    /// `RUST_LOG`) and prints the effective one, each value with where it came from and
    /// secrets redacted; exits non-zero on any error.
    CheckConfig,
}

/// Runs the command. An error ends it with exit status 1 and its message on stderr, printed here
/// rather than returned from `main`, whose report adds a stack backtrace whenever
/// `RUST_BACKTRACE` is set: a trace of this function under every mistyped setting, which tells
/// the user nothing and buries what to fix.
fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {}", message(&error));
            ExitCode::FAILURE
        }
    }
}

/// `error` and each of its causes that its words do not already say (most of the library's
/// errors say their cause), on one line.
fn message(error: &anyhow::Error) -> String {
    let mut said = error.to_string();
    for cause in error.chain().skip(1).map(ToString::to_string) {
        if !said.contains(&cause) {
            said = format!("{said}: {cause}");
        }
    }
    said
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    if let Command::CheckConfig = cli.command {
        let (config, shown) = Config::load_shown(cli.config.as_deref())?;
        log_filter(&config)?;
        jurystream::kafka::clients::check_properties(&config)?;
        advertise::check_advertised_url(&config.http.advertised_url)?;
        tokens(&config)?;
        for (_, said) in config.without_effect(true) {
            eprintln!("warning: {said}");
        }
        print!("{shown}");
        return Ok(());
    }
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Replay { input, output } => run_replay(config, &input, &output),
        Command::Run => run_service(config),
        Command::CheckConfig => Ok(()),
    }
}

/// The bearer tokens `/v1` accepts, from `http.tokens_file` and `JURYSTREAM_API_TOKENS`.
fn tokens(config: &Config) -> Result<Vec<String>> {
    let variable = std::env::var("JURYSTREAM_API_TOKENS").ok();
    let file = &config.http.tokens_file;
    api::tokens(file, variable.as_deref()).with_context(|| format!("http.tokens_file = {file:?}"))
}

/// The log filter: `RUST_LOG` when set (checked as `log.level` is: a filter that would log
/// nothing of what was meant fails the start), else `log.level`.
fn log_filter(config: &Config) -> Result<String> {
    match std::env::var("RUST_LOG") {
        Ok(filter) => match jurystream::config::log_filter_error(&filter) {
            Some(error) => anyhow::bail!("environment variable RUST_LOG: {error}"),
            None => Ok(filter),
        },
        Err(_) => Ok(config.log.level.clone()),
    }
}

fn init_logging(config: &Config) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(config)?)?;
    // Colours only for a person at a terminal: escape codes in a log file or a collector are
    // noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal())
        .with_writer(io::stderr);
    if config.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

/// The service: the HTTP endpoints and signal handling on a small tokio runtime, the processing
/// loop on this thread.
fn run_service(mut config: Config) -> Result<()> {
    jurystream::kafka::clients::check_properties(&config)?;
    init_logging(&config)?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "jurystream starting");
    for (_, said) in config.without_effect(true) {
        tracing::warn!("{said}");
    }
    config.http.advertised_url = advertise::advertised_url(
        &config.http.bind,
        &config.http.advertised_url,
        &advertise::host_name(),
        advertise::resolve,
    )?;
    tracing::info!(url = %config.http.advertised_url, "advertising queries");
    let tokens = tokens(&config)?;
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    {
        let stop = Arc::clone(&stop);
        runtime.spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot listen for SIGTERM");
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    let view = Arc::new(View::default());
    let queries = api::routes(Queries::of(&config, Arc::clone(&view), tokens));
    match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, hard)) => tracing::info!(
            soft,
            hard,
            max_connections = config.http.max_connections,
            "file descriptor limit (HTTP connections and the brokers' connections share it)"
        ),
        Err(e) => tracing::warn!(error = %e, "file descriptor limit unknown"),
    }
    let limits = jurystream::telemetry::http::Limits {
        max_connections: config.http.max_connections,
        header_timeout: Duration::from_millis(config.http.header_timeout_ms),
    };
    // An address or a host name and port (resolved here; the first address that binds is used).
    let listen = |setting: &str, at: &str| -> Result<tokio::net::TcpListener> {
        runtime
            .block_on(tokio::net::TcpListener::bind(at))
            .with_context(|| format!("{setting} = {at:?}"))
    };
    let listeners = Listeners {
        main: listen("http.bind", &config.http.bind)?,
        admin: match config.http.admin_bind.as_str() {
            "" => None,
            at => Some(listen("http.admin_bind", at)?),
        },
    };
    let server = runtime.spawn(jurystream::telemetry::http::serve(
        listeners,
        (Arc::clone(&metrics), Arc::clone(&health)),
        queries,
        limits,
        async {
            let _ = done_rx.await;
        },
    ));
    let result = jurystream::kafka::run(config, (metrics, health), view, stop);
    let _ = done_tx.send(());
    let _ = runtime.block_on(server);
    runtime.shutdown_timeout(Duration::from_secs(2));
    match &result {
        Ok(()) => tracing::info!("stopped cleanly"),
        Err(e) => tracing::error!(error = %e, "stopped with an error"),
    }
    result.map_err(Into::into)
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
    for (_, said) in config.without_effect(false) {
        eprintln!("warning: {said}");
    }
    let engine = Engine::new(config.engine_settings().one_task());
    let started = Instant::now();
    // A long replay says how far it is, at most once a second, on stderr beside the summary.
    let mut reported = started;
    let report = |p: replay::Progress<'_>| {
        let now = Instant::now();
        if now.duration_since(reported) < Duration::from_secs(1) {
            return;
        }
        reported = now;
        let secs = now.duration_since(started).as_secs_f64();
        eprintln!(
            "replay: line {}, {} records ({} dead-lettered), {:.0} records/s",
            p.lines,
            p.summary.records,
            p.summary.dead_lettered,
            p.summary.records as f64 / secs.max(1e-9)
        );
    };
    let summary = replay::replay_reporting(
        &engine,
        &TopicTable::new(&config.topics, &config.kafka.group_id),
        (
            BufReader::with_capacity(1 << 16, reader),
            BufWriter::with_capacity(1 << 16, writer),
        ),
        report,
    )?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "replay: {} records, {} applied ({} late), {} replayed, {} dead-lettered, {} outputs in {:.3} s ({:.0} records/s)",
        summary.records,
        summary.applied,
        summary.late,
        summary.replayed,
        summary.dead_lettered,
        summary.outputs,
        secs,
        summary.records as f64 / secs.max(1e-9)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says its cause in its own words, as most of the library's do.
    #[derive(Debug, thiserror::Error)]
    #[error("restoring: {0}")]
    struct SaysItsCause(#[source] io::Error);

    /// A cause is added once: after a context that does not say it, not after an error that
    /// already does.
    #[test]
    fn a_message_says_each_cause_once() {
        let missing = || io::Error::new(io::ErrorKind::NotFound, "no such file");
        let context = anyhow::Error::new(missing()).context("opening input votes.jsonl");
        assert_eq!(message(&context), "opening input votes.jsonl: no such file");
        let said = anyhow::Error::new(SaysItsCause(missing()));
        assert_eq!(message(&said), "restoring: no such file");
        let both = anyhow::Error::new(SaysItsCause(missing())).context("starting");
        assert_eq!(message(&both), "starting: restoring: no such file");
    }
}
