//! Prometheus metrics of the Kafka service, named with their units as Prometheus recommends.
//! What moves them is in [`super::events`].
//!
//! One [`Metrics`] value owns a private registry, so tests and several services in one process
//! never collide; `/metrics` renders it in the text exposition format.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric of the service.
pub struct Metrics {
    registry: Registry,
    /// Input records by topic and result: applied, late, dead_lettered, duplicate, replayed,
    /// revoked.
    pub records: IntCounterVec,
    /// Input records forwarded to the repartition topic, by input topic.
    pub forwarded: IntCounterVec,
    /// Dead letters by input topic and error code.
    pub dead_letters: IntCounterVec,
    /// Output records acknowledged by the broker, by output topic.
    pub outputs: IntCounterVec,
    /// Time to apply one input record on the processing thread (vote batches are parsed and
    /// validated before, on the polling thread).
    pub processing: Histogram,
    /// Event time of a published score or consensus to the broker's acknowledgement.
    /// From the input record's timestamp to its output's acknowledgement, by topic.
    pub publish_latency: HistogramVec,
    /// From a score's event time to its acknowledgement.
    pub event_time_lag: Histogram,
    pub consumer_lag: IntGaugeVec,
    /// The next input offset to process per partition, as of the last sealed epoch.
    pub input_position: IntGaugeVec,
    /// Commit cycles (flush outputs, write changelog, commit offsets).
    pub cycles: IntCounter,
    pub cycle_duration: Histogram,
    pub commits: IntCounterVec,
    pub producer_errors: IntCounter,
    pub outputs_refused: IntCounterVec,
    pub producer_retries: IntGauge,
    pub open_sessions: IntGauge,
    pub projects: IntGauge,
    /// Projects in the interactive queries' view.
    pub query_projects: IntGauge,
    /// Interactive queries answered, by endpoint and status code.
    pub queries: IntCounterVec,
    pub projects_limit: IntGauge,
    pub partitions_owned: IntGauge,
    pub restore_duration: Histogram,
    pub restore_records: IntCounter,
    pub restore_bytes: IntCounter,
    pub changelog_records: IntCounter,
    pub alerts: IntCounterVec,
    /// Consensus records that fell back to the configured judge weights.
    pub weights_fallbacks: IntCounter,
    /// Announcements of this instance's URL by another instance.
    pub advertised_url_conflicts: IntCounter,
    /// Steps of the wall clock seen between two of the service's ticks.
    pub clock_steps: IntCounter,
    /// Forwards seen from a clock ahead of this instance's, said once a minute at most.
    pub clock_disagreements: IntCounter,
    /// HTTP connections open, and those closed at once for want of a free one.
    pub http_connections: IntGauge,
    pub http_connections_refused: IntCounter,
    pub reputations: IntGauge,
    pub project_score: GaugeVec,
    /// Each judge's kappa with the humans, in the projects `jurystream_project_score` shows.
    pub judge_kappa: GaugeVec,
    /// Judge-quality items held: with votes, and with judge scores waiting for votes.
    pub judge_items: IntGaugeVec,
    /// Judge-quality items (or waiting scores) forgotten to stay within their bounds.
    pub judge_items_forgotten: IntGauge,
    /// `judge_quality.max_items`: the most `judge_items` of each kind an instance holds.
    pub judge_items_limit: IntGauge,
    /// Reviewers with figures in the owned partitions' projects, and the most in one project.
    pub reviewers: IntGauge,
    pub reviewers_in_largest_project: IntGauge,
    /// `reviewers.max_reviewers`: the most reviewers one project holds.
    pub reviewers_limit: IntGauge,
    /// Verdicts the reviewer model left out to stay within its bounds.
    pub reviewer_verdicts_left_out: IntGauge,
    /// Projects fitted to publish their reviewers' records, the time of each pass of a release,
    /// and the projects the release under way has yet to fit.
    pub reviewer_fits: IntCounter,
    pub reviewer_release_pass: Histogram,
    pub reviewer_fits_pending: IntGauge,
    /// Judges a project's bias audit follows, in the project with the most; the most it follows
    /// (`bias.project_max_judges`); and those it forgot beyond, over the owned projects.
    pub audit_judges_in_largest_project: IntGauge,
    pub audit_judges_limit: IntGauge,
    pub audit_judges_forgotten: IntGauge,
    /// The reliability of the least reliable reviewers (with `reviewers.min_items` shared
    /// items) of the projects `jurystream_project_score` shows.
    pub reviewer_reliability: GaugeVec,
    pub ready: IntGauge,
    pub up: Gauge,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    r.register(Box::new(c.clone())).expect("unique metric name");
    c
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric definition");
    r.register(Box::new(c.clone())).expect("unique metric name");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric definition");
    r.register(Box::new(g.clone())).expect("unique metric name");
    g
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .expect("valid metric definition");
    r.register(Box::new(h.clone())).expect("unique metric name");
    h
}

/// 50 µs .. ~3 s.
fn fast_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.000_05, 2.0, 17).unwrap_or_default()
}

/// 1 ms .. ~65 s.
fn slow_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 17).unwrap_or_default()
}

/// 100 ms .. ~78 days, by fours: live data and a backfill of months both fall in a bucket.
fn lag_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.1, 4.0, 14).unwrap_or_default()
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let publish_latency = HistogramVec::new(
            HistogramOpts::new(
                "jurystream_publish_latency_seconds",
                "From the timestamp of the input record that caused an output to the broker \
                 acknowledging the output",
            )
            .buckets(slow_buckets()),
            &["topic"],
        )
        .expect("valid metric definition");
        r.register(Box::new(publish_latency.clone()))
            .expect("unique metric name");
        let event_time_lag = histogram(
            &r,
            "jurystream_event_time_lag_seconds",
            "From a published score's event time to the broker acknowledging it: the data's \
             age, large while a backfill or a replayed topic is read",
            lag_buckets(),
        );
        let build_info = IntGaugeVec::new(
            Opts::new(
                "jurystream_build_info",
                "Always 1; the version of the running build is its label",
            ),
            &["version"],
        )
        .expect("valid metric definition");
        r.register(Box::new(build_info.clone()))
            .expect("unique metric name");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let consumer_lag = IntGaugeVec::new(
            Opts::new(
                "jurystream_consumer_lag_records",
                "Records behind the partition's high watermark (never negative)",
            ),
            &["topic", "partition"],
        )
        .expect("valid metric definition");
        r.register(Box::new(consumer_lag.clone()))
            .expect("unique metric name");
        let input_position = IntGaugeVec::new(
            Opts::new(
                "jurystream_input_position",
                "Next input offset to process, per partition (as of the last epoch)",
            ),
            &["topic", "partition"],
        )
        .expect("valid metric definition");
        r.register(Box::new(input_position.clone()))
            .expect("unique metric name");
        let project_score = GaugeVec::new(
            Opts::new(
                "jurystream_project_score",
                "Current HumanJudge score of allow-listed or top-N projects",
            ),
            &["project"],
        )
        .expect("valid metric definition");
        r.register(Box::new(project_score.clone()))
            .expect("unique metric name");
        let judge_kappa = GaugeVec::new(
            Opts::new(
                "jurystream_judge_kappa",
                "Each judge's Cohen's kappa with the humans over its window, in the projects \
                 jurystream_project_score shows",
            ),
            &["project", "judge"],
        )
        .expect("valid metric definition");
        r.register(Box::new(judge_kappa.clone()))
            .expect("unique metric name");
        let judge_items = IntGaugeVec::new(
            Opts::new(
                "jurystream_judge_items",
                "Judge-quality items held in owned partitions: with votes (votes) and with \
                 judge scores waiting for votes (waiting)",
            ),
            &["kind"],
        )
        .expect("valid metric definition");
        r.register(Box::new(judge_items.clone()))
            .expect("unique metric name");
        let reviewer_reliability = GaugeVec::new(
            Opts::new(
                "jurystream_reviewer_reliability",
                "The reliability of the least reliable reviewers (at most 5 per project, each \
                 with reviewers.min_items shared items) of the projects \
                 jurystream_project_score shows",
            ),
            &["project", "reviewer"],
        )
        .expect("valid metric definition");
        r.register(Box::new(reviewer_reliability.clone()))
            .expect("unique metric name");
        let up = Gauge::new("jurystream_up", "1 while the service runs")
            .expect("valid metric definition");
        r.register(Box::new(up.clone()))
            .expect("unique metric name");
        Metrics {
            records: counter_vec(
                &r,
                "jurystream_records_total",
                "Input records by topic and result",
                &["topic", "result"],
            ),
            forwarded: counter_vec(
                &r,
                "jurystream_records_forwarded_total",
                "Input records forwarded to the repartition topic by their project, by input topic",
                &["topic"],
            ),
            dead_letters: counter_vec(
                &r,
                "jurystream_dead_letters_total",
                "Dead letters by input topic and error code",
                &["topic", "error"],
            ),
            outputs: counter_vec(
                &r,
                "jurystream_output_records_total",
                "Output records acknowledged, by topic",
                &["topic"],
            ),
            processing: histogram(
                &r,
                "jurystream_processing_seconds",
                "Time to apply one input record on the processing thread (sampled)",
                fast_buckets(),
            ),
            publish_latency,
            event_time_lag,
            consumer_lag,
            input_position,
            cycles: counter(
                &r,
                "jurystream_commit_cycles_total",
                "Commit cycles (flush, changelog, commit)",
            ),
            cycle_duration: histogram(
                &r,
                "jurystream_commit_cycle_seconds",
                "Time to flush outputs and changelog and commit",
                slow_buckets(),
            ),
            commits: counter_vec(
                &r,
                "jurystream_commits_total",
                "Offset commits by result",
                &["result"],
            ),
            producer_errors: counter(
                &r,
                "jurystream_producer_errors_total",
                "Records the producer failed to deliver",
            ),
            outputs_refused: counter_vec(
                &r,
                "jurystream_outputs_refused_total",
                "Output records the client or broker refused for good (too large, invalid), dropped",
                &["topic"],
            ),
            producer_retries: gauge(
                &r,
                "jurystream_producer_retries",
                "Produce requests retried by librdkafka since start",
            ),
            open_sessions: gauge(
                &r,
                "jurystream_open_sessions",
                "Open judge sessions in owned partitions",
            ),
            projects: gauge(
                &r,
                "jurystream_projects",
                "Projects held in owned partitions, as limits.max_projects counts them",
            ),
            query_projects: gauge(
                &r,
                "jurystream_query_view_projects",
                "Projects in the interactive queries' view (at most those held)",
            ),
            queries: counter_vec(
                &r,
                "jurystream_queries_total",
                "Interactive queries answered, by endpoint and HTTP status",
                &["endpoint", "status"],
            ),
            projects_limit: gauge(
                &r,
                "jurystream_projects_limit",
                "limits.max_projects: beyond it new projects are dead-lettered (project_limit)",
            ),
            partitions_owned: gauge(
                &r,
                "jurystream_partitions_owned",
                "Stateful tasks (partitions of the project log, with by_key input partitions) this instance holds",
            ),
            restore_duration: histogram(
                &r,
                "jurystream_state_restore_seconds",
                "Time to restore one partition's state from the changelog",
                slow_buckets(),
            ),
            restore_records: counter(
                &r,
                "jurystream_state_restore_records_total",
                "Changelog records read while restoring",
            ),
            restore_bytes: counter(
                &r,
                "jurystream_state_restore_bytes_total",
                "Changelog bytes read while restoring",
            ),
            changelog_records: counter(
                &r,
                "jurystream_changelog_records_total",
                "State changelog records written",
            ),
            alerts: counter_vec(
                &r,
                "jurystream_bias_alerts_total",
                "Bias alerts by scope and kind",
                &["scope", "kind"],
            ),
            weights_fallbacks: counter(
                &r,
                "jurystream_consensus_weight_fallbacks_total",
                "Consensus records published with the configured judge weights because the \
                 learned weights of all their judges were zero",
            ),
            http_connections: gauge(
                &r,
                "jurystream_http_connections",
                "HTTP connections open (at most http.max_connections plus the reserve for \
                 /metrics, /healthz and /readyz)",
            ),
            http_connections_refused: counter(
                &r,
                "jurystream_http_connections_refused_total",
                "HTTP connections closed at once because every connection was taken",
            ),
            advertised_url_conflicts: counter(
                &r,
                "jurystream_advertised_url_conflicts_total",
                "Announcements by another instance of this instance's advertised URL",
            ),
            clock_steps: counter(
                &r,
                "jurystream_clock_steps_total",
                "Steps of the wall clock (a second or more against the monotonic clock) seen \
                 between two of the service's ticks",
            ),
            clock_disagreements: counter(
                &r,
                "jurystream_clock_disagreements_total",
                "Times (once a minute at most) a record was forwarded by an instance whose clock \
                 is a second or more ahead of this one's",
            ),
            reputations: gauge(
                &r,
                "jurystream_reputations",
                "Entries in the reputation table",
            ),
            project_score,
            judge_kappa,
            judge_items,
            judge_items_limit: gauge(
                &r,
                "jurystream_judge_items_limit",
                "judge_quality.max_items: the most judge-quality items of each kind an instance \
                 holds (split over its kafka.partitions tasks, each forgetting its oldest first)",
            ),
            judge_items_forgotten: gauge(
                &r,
                "jurystream_judge_items_forgotten",
                "Judge-quality items (or an item's waiting scores) forgotten so far to stay within \
                 judge_quality.max_pending_items and max_judges, over the owned partitions' projects",
            ),
            reviewers: gauge(
                &r,
                "jurystream_reviewers",
                "Reviewers fitted (reviewer reliability) in the owned partitions' projects, as of \
                 each project's last fit",
            ),
            reviewers_in_largest_project: gauge(
                &r,
                "jurystream_reviewers_in_largest_project",
                "Reviewers fitted in the owned project that has the most, as of its last fit",
            ),
            reviewers_limit: gauge(
                &r,
                "jurystream_reviewers_limit",
                "reviewers.max_reviewers: the most reviewers one project's fit reads (those with \
                 the most verdicts held; the others' verdicts are left out of it)",
            ),
            reviewer_verdicts_left_out: gauge(
                &r,
                "jurystream_reviewer_verdicts_left_out",
                "Verdicts left out at the vote so far (reviewers.max_verdicts) and by each \
                 project's last fit (max_reviewers), over the owned partitions' projects",
            ),
            reviewer_fits: counter(
                &r,
                "jurystream_reviewer_fits_total",
                "Projects fitted on their verdicts to publish their reviewers' records",
            ),
            reviewer_release_pass: histogram(
                &r,
                "jurystream_reviewer_release_seconds",
                "Time of one pass of a release of reviewer records on the processing thread (at \
                 most 256 projects fitted; records wait behind it)",
                fast_buckets(),
            ),
            reviewer_fits_pending: gauge(
                &r,
                "jurystream_reviewer_fits_pending",
                "Projects the release of reviewer records under way has yet to fit (a release \
                 starts every output.reviewers_coalesce_ms)",
            ),
            audit_judges_in_largest_project: gauge(
                &r,
                "jurystream_audit_judges_in_largest_project",
                "Judges the bias audit follows in the owned project that has the most",
            ),
            audit_judges_limit: gauge(
                &r,
                "jurystream_audit_judges_limit",
                "bias.project_max_judges: the most judges a project's bias audit follows (beyond, \
                 the one last seen longest ago is forgotten)",
            ),
            audit_judges_forgotten: gauge(
                &r,
                "jurystream_audit_judges_forgotten",
                "Judges the bias audit forgot so far beyond bias.project_max_judges, over the \
                 owned partitions' projects",
            ),
            reviewer_reliability,
            ready: gauge(
                &r,
                "jurystream_ready",
                "1 when the service is ready (bootstrapped, broker reachable)",
            ),
            up,
            registry: r,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_exported_with_its_version() {
        let text = Metrics::new().render();
        let line = format!(
            "jurystream_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&line), "{text}");
    }

    #[test]
    fn the_event_time_lag_has_buckets_for_a_backfill() {
        let m = Metrics::new();
        m.event_time_lag.observe(90.0 * 86_400.0);
        m.event_time_lag.observe(0.05);
        let text = m.render();
        // A lag of 90 days is above the largest finite bucket (about 78 days), a live one in the
        // smallest (100 ms).
        assert!(
            text.contains(r#"jurystream_event_time_lag_seconds_bucket{le="0.1"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jurystream_event_time_lag_seconds_bucket{le="+Inf"} 2"#),
            "{text}"
        );
    }
}
