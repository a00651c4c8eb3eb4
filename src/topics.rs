//! The one table between the engine's topics ([`InputTopic`], [`OutputTopic`]) and the names
//! the configuration gives them. The runtimes use it to tell which input a record comes from and
//! where an output goes; the engine never sees a name but in the records it is handed.

use crate::config;
use crate::engine::InputTopic;
use crate::engine::output::OutputTopic;

/// The configured topic names, and the internal topics named after the consumer group.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicTable {
    names: config::Topics,
    /// `<group_id>-state` unless `topics.state` names the changelog.
    state: String,
    /// `<group_id>-repartition`.
    repartition: String,
    /// `<group_id>-instances`.
    instances: String,
    /// `<group_id>-tasks`.
    tasks_group: String,
}

impl Default for TopicTable {
    fn default() -> Self {
        TopicTable::new(
            &config::Topics::default(),
            &config::Kafka::default().group_id,
        )
    }
}

impl TopicTable {
    /// The names of `names`, and the internal topics of consumer group `group_id`: like Kafka
    /// Streams', they are named after the group (its application id), so two deployments with
    /// different groups never share state.
    pub fn new(names: &config::Topics, group_id: &str) -> TopicTable {
        TopicTable {
            names: names.clone(),
            state: config::changelog_name(&names.state, group_id),
            repartition: config::repartition_name(group_id),
            instances: config::instances_name(group_id),
            tasks_group: format!("{group_id}-tasks"),
        }
    }

    /// The configured name of an input topic.
    pub fn input_name(&self, topic: InputTopic) -> &str {
        let t = &self.names;
        match topic {
            InputTopic::Votes => &t.votes,
            InputTopic::JudgeScores => &t.judge_scores,
            InputTopic::Reputations => &t.reputations,
        }
    }

    /// The configured name of an output topic.
    pub fn output_name(&self, topic: OutputTopic) -> &str {
        let t = &self.names;
        match topic {
            OutputTopic::Scores => &t.scores,
            OutputTopic::Consensus => &t.consensus,
            OutputTopic::BiasAlerts => &t.bias_alerts,
            OutputTopic::Leaderboard => &t.leaderboard,
            OutputTopic::DeadLetters => &t.dead_letters,
            OutputTopic::JudgeQuality => &t.judge_quality,
            OutputTopic::ReviewRequests => &t.review_requests,
            OutputTopic::ReviewerQuality => &t.reviewer_quality,
        }
    }

    /// Which input topic `name` is, if any.
    pub fn input(&self, name: &str) -> Option<InputTopic> {
        InputTopic::ALL
            .into_iter()
            .find(|t| self.input_name(*t) == name)
    }

    /// The state changelog's name.
    pub fn state(&self) -> &str {
        &self.state
    }

    /// The repartition topic's name: the inputs' records keyed by project (see
    /// `crate::kafka`).
    pub fn repartition(&self) -> &str {
        &self.repartition
    }

    /// The instance directory's topic (compacted): which instance's HTTP address serves the
    /// projects of each repartition-topic partition (see `crate::queries`).
    pub fn instances(&self) -> &str {
        &self.instances
    }

    /// The consumer group of the repartition topic's partitions, the stateful tasks (see
    /// `crate::kafka`): a group of its own, so that the tasks are balanced over the instances on
    /// their own, whatever the instances own of the inputs, which the group `<group_id>` forwards.
    pub fn tasks_group(&self) -> &str {
        &self.tasks_group
    }
}

/// The repartition-topic partition of `project`, among `partitions`: the forwarding stage
/// produces a project's records there, and a query for the project is sent to the instance
/// that owns it. The service chooses it (rather than the producer's partitioner) so both
/// places compute it alike.
pub fn partition_of(project: &str, partitions: i32) -> i32 {
    let n = u64::try_from(partitions.max(1)).unwrap_or(1);
    (xxhash_rust::xxh3::xxh3_64(project.as_bytes()) % n) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        let table = TopicTable::default();
        for t in InputTopic::ALL {
            assert_eq!(table.input(table.input_name(t)), Some(t));
        }
        assert_eq!(table.input("jury.votes"), Some(InputTopic::Votes));
        assert_eq!(table.input("jury.scores"), None);
        assert_eq!(
            table.output_name(OutputTopic::DeadLetters),
            "jury.dead-letters"
        );
        assert_eq!(table.state(), "jurystream-state");
        assert_eq!(table.repartition(), "jurystream-repartition");
        assert_eq!(table.instances(), "jurystream-instances");
        let named = config::Topics {
            state: "jury.state".into(),
            ..config::Topics::default()
        };
        let other = TopicTable::new(&named, "g2");
        assert_eq!(
            (other.state(), other.repartition()),
            ("jury.state", "g2-repartition")
        );
    }

    #[test]
    fn a_project_has_one_partition_and_projects_spread() {
        assert_eq!(partition_of("proj-42", 6), partition_of("proj-42", 6));
        assert_eq!(partition_of("anything", 1), 0);
        assert_eq!(partition_of("anything", 0), 0);
        let mut counts = [0; 6];
        for i in 0..6000 {
            counts[partition_of(&format!("proj-{i}"), 6) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
