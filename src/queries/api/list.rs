//! The pages of `GET /v1/projects`: the projects the group holds, a page at a time, in the
//! byte order of their ids. A page starts after a cursor (`after`, the last id of the page
//! before), so a listing is stable while projects come and go: each id is listed once, in
//! order, and a project created behind the cursor is not seen by that listing. Each instance
//! pages its own projects (`View::page`); pages of several instances merge into one
//! ([`merge`]), as Kafka Streams' interactive queries combine every instance's metadata.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The page size without `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest `limit`: a page is a bounded answer, however many projects there are.
pub const MAX_LIMIT: usize = 1000;

/// `?after=&limit=`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ListQuery {
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// One project in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub project_id: String,
    pub partition: i32,
    /// Its score as last published, if it has one.
    pub score: Option<f64>,
    /// The votes its score counts.
    pub votes: u64,
    pub open_sessions: usize,
    /// When its instance last changed it (wall clock).
    pub updated_at: Option<String>,
}

/// Instances whose projects an answer does not include, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Elsewhere {
    /// Its advertised URL: ask it `GET /v1/projects` with the same `after` and `limit`.
    pub url: String,
    /// The partitions it announced.
    pub partitions: Vec<i32>,
    /// Why its projects are missing although it was asked (`http.proxy_queries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The answer of `GET /v1/projects`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListAnswer {
    /// At most `limit` projects, in the byte order of their ids, each after `after`.
    pub projects: Vec<Listed>,
    /// The cursor of the next page (`after=<next>`), while there may be more.
    pub next: Option<String>,
    /// Every partition's projects are in this listing: none is held by an instance not asked,
    /// unannounced or restoring.
    pub complete: bool,
    /// A partition listed here is still being read from the changelog.
    pub restoring: bool,
    /// The instances holding the partitions this answer does not include.
    pub elsewhere: Vec<Elsewhere>,
    /// The partitions no instance has announced yet (known only with `repartition`).
    pub unannounced: Vec<i32>,
}

/// Merges pages of the same listing (each sorted, each after the same cursor, each with
/// whether its source has more) into one page of at most `limit`: a project held by two
/// sources (during a handover) once, as the first source gives it.
pub(super) fn merge(
    pages: Vec<(Vec<Listed>, bool)>,
    limit: usize,
) -> (Vec<Listed>, Option<String>) {
    let any_more = pages.iter().any(|(_, more)| *more);
    let mut merged: BTreeMap<String, Listed> = BTreeMap::new();
    for (page, _) in pages {
        for listed in page {
            merged.entry(listed.project_id.clone()).or_insert(listed);
        }
    }
    let more = any_more || merged.len() > limit;
    let page: Vec<Listed> = merged.into_values().take(limit).collect();
    let next = page
        .last()
        .filter(|_| more)
        .map(|last| last.project_id.clone());
    (page, next)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::queries::view::{ProjectView, View};

    fn listed(id: &str) -> Listed {
        Listed {
            project_id: id.to_owned(),
            partition: 0,
            score: None,
            votes: 0,
            open_sessions: 0,
            updated_at: None,
        }
    }

    #[test]
    fn merged_pages_keep_the_order_and_say_when_there_is_more() {
        let page = |ids: &[&str], more| (ids.iter().map(|i| listed(i)).collect(), more);
        let ids = |l: &[Listed]| {
            l.iter()
                .map(|l| l.project_id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        // Three projects over two sources, a page of two: the cursor is the second.
        let (got, next) = merge(vec![page(&["a", "c"], false), page(&["b"], false)], 2);
        assert_eq!((ids(&got).as_str(), next.as_deref()), ("a,b", Some("b")));
        // A source with more, though the merged page is not full, leaves a cursor.
        let (got, next) = merge(vec![page(&["a"], true), page(&[], false)], 2);
        assert_eq!((ids(&got).as_str(), next.as_deref()), ("a", Some("a")));
        // The last page has none; a project in two sources (a handover) is listed once.
        let (got, next) = merge(vec![page(&["a", "b"], false), page(&["b"], false)], 5);
        assert_eq!((ids(&got).as_str(), next), ("a,b", None));
    }

    proptest! {
        /// Paging through any split of a set of ids over sources, a page of any size, lists
        /// every id once, in order.
        #[test]
        fn paging_through_the_sources_lists_every_project_once_in_order(
            ids in proptest::collection::btree_set("[a-d]{1,3}", 0..40),
            sources in 1usize..4,
            limit in 1usize..7,
        ) {
            // Each source an instance's view, its ids held in reverse order.
            let held: Vec<View> = (0..sources)
                .map(|s| {
                    let view = View::default();
                    for (_, id) in ids.iter().enumerate().rev().filter(|(i, _)| i % sources == s) {
                        view.hold(id, ProjectView::default());
                    }
                    view
                })
                .collect();
            let mut seen = Vec::new();
            let mut after: Option<String> = None;
            for _ in 0..=ids.len() {
                let pages = held
                    .iter()
                    .map(|view| view.page(after.as_deref(), limit, |id, _| Some(listed(id))))
                    .collect();
                let (page, next) = merge(pages, limit);
                prop_assert!(page.len() <= limit);
                seen.extend(page.into_iter().map(|l| l.project_id));
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            prop_assert_eq!(seen, ids.into_iter().collect::<Vec<_>>());
        }
    }
}
