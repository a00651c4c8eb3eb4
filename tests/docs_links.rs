//! Every relative link in README.md and docs/ leads somewhere: the file or directory exists,
//! and an anchor (`file.md#section`, `#section`) names a heading of that file, by the anchors
//! GitHub gives headings. Links to other sites are not followed (the tests run offline).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// The Markdown files a reader follows links through.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir("docs")
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// GitHub's anchor for a heading: lower case, everything but letters, digits, spaces, `-` and
/// `_` dropped, spaces made `-`; a repeated one gets `-1`, `-2`, ...
fn anchor(heading: &str, seen: &mut BTreeMap<String, usize>) -> String {
    let slug: String = heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect();
    let n = seen.entry(slug.clone()).or_insert(0);
    let anchor = if *n == 0 { slug } else { format!("{slug}-{n}") };
    *n += 1;
    anchor
}

/// A Markdown file's links (destination, as written) and its headings' anchors.
fn read(path: &Path) -> (Vec<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (mut links, mut anchors) = (Vec::new(), BTreeSet::new());
    let mut seen = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string());
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    anchors.insert(anchor(&h, &mut seen));
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            _ => {}
        }
    }
    (links, anchors)
}

#[test]
fn github_anchors_are_made_as_github_makes_them() {
    let mut seen = BTreeMap::new();
    assert_eq!(
        anchor("Restart after `kill -9`", &mut seen),
        "restart-after-kill--9"
    );
    assert_eq!(
        anchor(
            "Judge quality: on by default (2026-11-26, night)",
            &mut seen
        ),
        "judge-quality-on-by-default-2026-11-26-night"
    );
    assert_eq!(anchor("Usage", &mut seen), "usage");
    assert_eq!(anchor("Usage", &mut seen), "usage-1");
    let (_, anchors) = read(Path::new("README.md"));
    assert!(!anchors.is_empty());
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_leads_somewhere() {
    // Each file read once: its links, and the anchors the others' links may name.
    let read: BTreeMap<PathBuf, (Vec<String>, BTreeSet<String>)> = documents()
        .into_iter()
        .map(|f| (f.clone(), read(&f)))
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (file, (links, _)) in &read {
        let dir = file.parent().unwrap_or(Path::new(""));
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (target, fragment) = match link.split_once('#') {
                Some((t, f)) => (t, Some(f)),
                None => (link.as_str(), None),
            };
            let target = if target.is_empty() {
                file.clone()
            } else {
                normalise(&dir.join(target))
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", file.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let known = read.get(&target).map(|(_, anchors)| anchors);
                if known.is_none_or(|a| !a.contains(fragment)) {
                    broken.push(format!("{}: {link}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} links");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `a/../b` as `b`: the docs' keys are paths without `..`.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
