//! The stages of the service's topology, each with a consumer of its own in a consumer group of
//! its own, so the broker balances each stage's partitions over the instances on its own: with
//! `repartition` the forwarding stage reads the inputs in the group `kafka.group_id`, and the
//! stateful tasks, the repartition topic's partitions, are shared in the group
//! `<group_id>-tasks` (with `by_key` there is one stage, the tasks, reading the inputs in
//! `kafka.group_id`). One consumer for both would balance partition counts over the union, so
//! that one instance could own every task and another only inputs to forward.

use crate::config::Config;
use crate::telemetry::http::Part;
use crate::topics::TopicTable;

/// A stage of the service's topology, with a consumer of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Input records forwarded to the repartition topic by their project (stateless).
    Forward,
    /// Records applied to the state of their partition, the tasks: the repartition topic's, or
    /// with `by_key` the inputs' own.
    Apply,
}

impl Stage {
    /// The stage's part of the service's health (see [`crate::telemetry::http::Health`]).
    pub fn part(self) -> Part {
        match self {
            Stage::Forward => Part::Forwarding,
            Stage::Apply => Part::Applying,
        }
    }

    /// The stages `config` runs.
    pub fn all(config: &Config) -> &'static [Stage] {
        if config.input.repartitions() {
            &[Stage::Forward, Stage::Apply]
        } else {
            &[Stage::Apply]
        }
    }

    /// The stage's consumer group.
    pub fn group<'t>(self, config: &'t Config, topics: &'t TopicTable) -> &'t str {
        match self {
            Stage::Apply if config.input.repartitions() => topics.tasks_group(),
            _ => &config.kafka.group_id,
        }
    }

    /// The topics the stage's consumer subscribes to.
    pub fn topics<'t>(self, config: &'t Config, topics: &'t TopicTable) -> Vec<&'t str> {
        match self {
            Stage::Apply if config.input.repartitions() => vec![topics.repartition()],
            _ => vec![&config.topics.votes, &config.topics.judge_scores],
        }
    }

    /// The stage whose consumer reads `topic`, one of the service's.
    pub fn of(topic: &str, config: &Config, topics: &TopicTable) -> Stage {
        if config.input.repartitions() && topic != topics.repartition() {
            Stage::Forward
        } else {
            Stage::Apply
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Partitioning;

    /// Each stage's group and topics: with `repartition` the inputs are forwarded in the
    /// group `kafka.group_id` and the repartition topic's tasks shared in `<group_id>-tasks`;
    /// with `by_key` one stage applies the inputs in `kafka.group_id`.
    #[test]
    fn each_stage_has_a_group_and_topics_of_its_own() {
        let mut config = Config::default();
        let topics = TopicTable::new(&config.topics, &config.kafka.group_id);
        assert_eq!(Stage::all(&config), [Stage::Forward, Stage::Apply]);
        assert_eq!(Stage::Forward.group(&config, &topics), "jurystream");
        assert_eq!(Stage::Apply.group(&config, &topics), "jurystream-tasks");
        assert_eq!(
            Stage::Forward.topics(&config, &topics),
            ["jury.votes", "jury.judge-scores"]
        );
        assert_eq!(
            Stage::Apply.topics(&config, &topics),
            ["jurystream-repartition"]
        );
        assert_eq!(Stage::of("jury.votes", &config, &topics), Stage::Forward);
        assert_eq!(
            Stage::of("jurystream-repartition", &config, &topics),
            Stage::Apply
        );

        config.input.partitioning = Partitioning::ByKey;
        assert_eq!(Stage::all(&config), [Stage::Apply]);
        assert_eq!(Stage::Apply.group(&config, &topics), "jurystream");
        assert_eq!(
            Stage::Apply.topics(&config, &topics),
            ["jury.votes", "jury.judge-scores"]
        );
        assert_eq!(Stage::of("jury.votes", &config, &topics), Stage::Apply);
    }
}
