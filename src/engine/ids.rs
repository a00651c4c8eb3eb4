//! Ids as map keys: the engine's maps of projects, sessions and voters, and the project key
//! they share with the journal.

use std::collections::{HashMap, HashSet};

/// The hash map for ids that arrive from outside (projects, sessions, fingerprints of them):
/// foldhash is several times faster than std's SipHash on short keys and still seeded per
/// process, so crafted ids cannot force collisions. Nothing may depend on its iteration order.
pub type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The set of [`IdMap`]'s keys.
pub type IdSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// A project id as a map key. Ids of up to 24 bytes are stored in the key itself, so finding a
/// project compares bytes already in the table instead of following a pointer to them: with
/// 10,000 busy projects that pointer was a cache miss and half the time of finding a project.
pub type ProjectKey = compact_str::CompactString;

/// A state's projects, by id: the one map every part of a project is found through (the
/// session book and judge quality are handed it, generic over what holds their part).
pub type Projects<P> = IdMap<ProjectKey, P>;
