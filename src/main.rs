//! The `jurystream` command: `replay` a file of records, or `run` the Kafka service.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
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
use jurystream::telemetry::http::Health;
use jurystream::telemetry::metrics::Metrics;
use jurystream::topics::TopicTable;

/// The service allocates and frees many small, short-lived buffers per record (rendered outputs,
/// changelog records, librdkafka messages); glibc's allocator was ~20% of the processing thread's
/// CPU in the load benchmark (perf), mimalloc a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process, as `MIMALLOC_ALLOW_THP=0` would (which
/// is read before `main`, so it cannot be set from here), unless that variable is set.
///
/// Why: mimalloc's fresh pages then fault in 2 MiB at a time, each zeroed in full by the kernel,
/// and they kept coming while the service ran (memory it had returned after a second unused).
/// `perf` put the zeroing at 7-11% of both service threads' samples with 10,000 projects; off,
/// the load benchmark's service used 10% less CPU (six runs interleaved with one and 10,000
/// projects, lower in each pair). Nothing here needs huge pages.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and changes nothing but the
        // process's huge-page policy; a failure (an old kernel) leaves it as it was.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/// Keeps what glibc's heap has grown to rather than handing freed memory back to the kernel,
/// unless `MALLOC_TRIM_THRESHOLD_`, `MALLOC_TOP_PAD_` or `GLIBC_TUNABLES` says otherwise.
/// librdkafka allocates from glibc (mimalloc serves Rust's allocations only): every produced
/// record is a glibc allocation, made and freed on the processing thread.
///
/// Why: at the end of each epoch the changelog is produced in one burst (megabytes with 10,000
/// busy projects), its memory freed as the broker acknowledges it, and glibc trimmed the heap's
/// top back to the kernel each time (default threshold 128 KiB), so the next burst faulted
/// every page in again, zeroed. With a 1 GiB trim threshold and 64 MiB of top padding the load
/// benchmark's service (10,000 projects) took about 17% fewer page faults, and less CPU in 19
/// of 20 runs interleaved with the default, 10% less on average (docs/performance-history.md).
/// The cost is memory: what librdkafka's buffers peaked at stays mapped, bounded by its own
/// queue limits.
fn keep_glibc_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if [
        "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_TOP_PAD_",
        "GLIBC_TUNABLES",
    ]
    .iter()
    .all(|v| std::env::var_os(v).is_none())
    {
        // SAFETY: mallopt only sets two tuning parameters of glibc's allocator; it runs at the
        // start of `main`, before any other thread exists. A rejected value changes nothing.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
            libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        }
    }
}

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
}

fn main() -> Result<()> {
    disable_transparent_huge_pages();
    keep_glibc_heap();
    let cli = Cli::parse();
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Replay { input, output } => run_replay(config, &input, &output),
        Command::Run => run_service(config),
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    if config.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The service: the HTTP endpoints and signal handling on a small tokio runtime, the processing
/// loop on this thread.
fn run_service(mut config: Config) -> Result<()> {
    init_logging(&config);
    config.http.advertised_url = advertise::advertised_url(
        &config.http.bind,
        &config.http.advertised_url,
        &advertise::host_name(),
        advertise::resolve,
    )?;
    tracing::info!(url = %config.http.advertised_url, "advertising queries");
    let tokens = api::tokens(
        &config.http.tokens_file,
        std::env::var("JURYSTREAM_API_TOKENS").ok().as_deref(),
    )
    .context("http.tokens_file")?;
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let stop = Arc::new(AtomicBool::new(false));
    let bind: SocketAddr = config.http.bind.parse().context("http.bind")?;
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
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(bind))
        .with_context(|| format!("http.bind {bind}"))?;
    let server = runtime.spawn(jurystream::telemetry::http::serve(
        listener,
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
    let engine = Engine::new(config.engine_settings().one_task());
    let started = Instant::now();
    let summary = replay::replay(
        &engine,
        &TopicTable::new(&config.topics, &config.kafka.group_id),
        BufReader::with_capacity(1 << 16, reader),
        BufWriter::with_capacity(1 << 16, writer),
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
