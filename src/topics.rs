//! The one table between the engine's topics ([`InputTopic`], [`OutputTopic`]) and the names
//! the configuration gives them. The runtimes use it to tell which input a record comes from and
//! where an output goes; the engine never sees a name but in the records it is handed.

use crate::config;
use crate::engine::InputTopic;
use crate::engine::output::OutputTopic;

/// The configured topic names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicTable {
    names: config::Topics,
}

impl TopicTable {
    pub fn new(names: &config::Topics) -> TopicTable {
        TopicTable {
            names: names.clone(),
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
        &self.names.state
    }
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
        assert_eq!(table.state(), "jury.state");
    }
}
