//! Last good versions of flows and flow errors by distinct cause (DESIGN "The
//! control-plane/data-plane contract").
//!
//! The datapath compiles the text; its [`FromDatapath::Installed`] reply names the flows that
//! did not compile. Every other flow of the installed program compiled, so its text becomes the
//! flow's last good version, keyed by (datapath, flow identity) — never by SB UUID, so a
//! database rebuilt with new UUIDs keeps them. A program carries each flow's last good text
//! when it differs from the current one, and the datapath runs it instead of a failing text.
//! The store starts from the program the datapath hands a restarted controller.
//!
//! Errors are grouped by cause (the datapath's reason text): a cause is logged once when it
//! first appears, with the number of flows it hits and what runs instead (their last good
//! version, a fail-closed drop, nothing), and once when it is gone — never again per install
//! while it lasts. [`LastGood::report`] gives the `Chassis_Private.external_ids` entries
//! (`holdfast-flow-errors=<flows>`, at most [`MAX_REPORTED`]
//! `holdfast-flow-error-N=<cause> (<n> flows)`, and how many of the flows run their last good
//! version, `holdfast-flow-errors-last-good=<n>`, and how many failed closed,
//! `holdfast-flow-errors-failed-closed=<n>`, and how many datapaths are held at their last
//! good flows, `holdfast-flow-errors-held-datapaths=<n>`, each only when not zero). A held
//! datapath's last good versions are not updated from the program that failed in it.
//!
//! The texts are shared with the programs ([`hf_datapath::proto::FlowMsg`]'s `Arc<str>`): the
//! store takes the installed program's copies, and a program built later takes the store's
//! for every flow whose text did not change, so the controller holds each text once.
//! [`LastGood::take_changed`] names the datapaths whose answers changed (a message built
//! before for them carries stale `last_good` fields and is built again), except those where
//! the installed message itself stays exact, which [`LastGood::take_moved`] names: an install
//! of new or changed flows that all compiled changes their answers to their own texts, which
//! no message carries, so the next build reuses the installed messages (a port add does not
//! build the hub router's 31k flows again).
//!
//! An install costs what changed: a datapath whose message is the previous install's is not
//! walked, and one whose message keeps the previous one's flows (the same text allocations)
//! but for a few is updated for those flows' identities alone ([`LastGood::installed_after`]);
//! a datapath with flow errors in either install, or taken by [`LastGood::seed`], is walked
//! whole.
//!
//! Identities that several flows of one datapath share (flows without `hf-flow-id` that
//! cannot be told apart, see `docs/flow-identity.md`) get no last good version: such an
//! identity is never stored, so neither flow can fall back to the other's text.
//!
//! [`FromDatapath::Installed`]: hf_datapath::proto::FromDatapath::Installed

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use hf_datapath::proto::{FlowErrorMsg, ProgramMsg};

use crate::program_msg::LastGoodLookup;

/// Causes reported one by one in `external_ids` (the rest only in the count).
pub const MAX_REPORTED: usize = 16;

/// A flow error as the controller keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowErrorEntry {
    /// Datapath name.
    pub datapath: String,
    /// Flow identity.
    pub id: String,
    /// Cause.
    pub reason: String,
    /// A last good version runs instead.
    pub kept_last_good: bool,
    /// No version of it runs; it is a security flow and `drop;` runs in its place.
    pub failed_closed: bool,
    /// Its datapath is held at the flows it ran before (see `hf_datapath::program`).
    pub held: bool,
}

impl FlowErrorEntry {
    /// What runs instead, as operators read it.
    pub fn instead(&self) -> &'static str {
        if self.held && !self.kept_last_good {
            "its datapath runs its last good flows (held), but this one no longer compiles: left out"
        } else if self.held {
            "its datapath runs its last good flows (held)"
        } else if self.kept_last_good {
            "running the last good version"
        } else if self.failed_closed {
            "no good version known, failed closed (drop)"
        } else {
            "no good version known, the flow is left out"
        }
    }
}

/// A flow's (match, actions), shared with the programs holding it.
type Text = (Arc<str>, Arc<str>);

/// The store.
#[derive(Debug, Clone, Default)]
pub struct LastGood {
    /// Datapath name -> flow identity -> (match, actions). Nested so a lookup borrows its
    /// `&str` keys and an install of unchanged flows allocates nothing; hashed, so a lookup
    /// (one per flow of a message built, of a datapath installed) does not compare long
    /// identities a dozen times.
    good: HashMap<String, HashMap<Arc<str>, Text>>,
    /// Datapaths whose answers changed since [`LastGood::take_changed`] so that the installed
    /// program's own message for them carries a stale `last_good` field (or conservatively:
    /// seeded, gone).
    changed: BTreeSet<String>,
    /// Datapaths whose answers changed since [`LastGood::take_moved`] while the installed
    /// program's own message for them stays exact: only the answers of its newly installed
    /// flows changed, from none to their own texts, which a message does not carry (a flow's
    /// `last_good` is set only when it differs from its text). A message built before for
    /// them other than the installed one may be stale.
    moved: BTreeSet<String>,
    errors: BTreeMap<(String, String), FlowErrorEntry>,
    logged: BTreeSet<String>,
    /// (datapath, identity) pairs several flows of the last program share.
    ambiguous: BTreeSet<(String, String)>,
    /// Datapaths taken by [`LastGood::seed`] and not walked by an install since: their
    /// answers are the seeded program's `last_good` fields, not its texts, so an install
    /// against that program walks them whole.
    seeded: HashSet<String>,
    /// Flows walked by installs (hashed, looked up): see [`LastGood::flows_walked`].
    walked: u64,
}

/// A datapath message's flows.
type Flows = [Arc<hf_datapath::proto::FlowMsg>];

/// Flows of a datapath an install edits one by one (the rest of its message is the previous
/// install's, shared); above this it walks the datapath whole.
const EDIT_LIMIT: usize = 64;

/// Whether `a` and `b` are the same flow as far as the store goes: its identity and the very
/// texts (the same allocations) the store took from `b`.
fn same_flow(a: &hf_datapath::proto::FlowMsg, b: &hf_datapath::proto::FlowMsg) -> bool {
    std::ptr::eq(a, b)
        || (Arc::ptr_eq(&a.matches, &b.matches)
            && Arc::ptr_eq(&a.actions, &b.actions)
            && (Arc::ptr_eq(&a.id, &b.id) || a.id == b.id))
}

/// The flows `new` has where `old` had others: `new`'s flows after the common first flows and
/// before the common last ones (by [`same_flow`]), and `old`'s between the same. `None` when
/// these are more than [`EDIT_LIMIT`] (the caller walks `new` whole). A datapath message built
/// from the previous one by per-flow edits keeps every other flow as it was, so for one added
/// or removed flow this is that flow.
fn edited_flows<'a>(old: &'a Flows, new: &'a Flows) -> Option<(&'a Flows, &'a Flows)> {
    let head = old
        .iter()
        .zip(new)
        .take_while(|(a, b)| same_flow(a, b))
        .count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| same_flow(a, b))
        .count();
    let gone = &old[head..old.len() - tail];
    let came = &new[head..new.len() - tail];
    (gone.len() + came.len() <= EDIT_LIMIT).then_some((gone, came))
}

/// The identities of a datapath's flows, and those of them several flows share (one pass).
fn ids_and_shared(flows: &Flows) -> (HashSet<&str>, HashSet<&str>) {
    let mut ids = HashSet::with_capacity(flows.len());
    let mut shared = HashSet::new();
    for f in flows {
        if !ids.insert(&*f.id) {
            shared.insert(&*f.id);
        }
    }
    (ids, shared)
}

impl LastGoodLookup for LastGood {
    fn last_good(&self, datapath: &str, id: &str) -> Option<(&Arc<str>, &Arc<str>)> {
        self.good
            .get(datapath)
            .and_then(|flows| flows.get(id))
            .map(|(m, a)| (m, a))
    }
}

impl LastGood {
    /// Takes the last good versions a datapath's running program carries (a restarted
    /// controller): a flow's `last_good` when it has one, else its text.
    pub fn seed(&mut self, p: &ProgramMsg) {
        for d in &p.datapaths {
            self.changed.insert(d.name.clone());
            self.seeded.insert(d.name.clone());
            let (_, shared) = ids_and_shared(&d.flows);
            let good = self.good.entry(d.name.clone()).or_default();
            for f in d.flows.iter().filter(|f| !shared.contains(&*f.id)) {
                good.entry(f.id.clone()).or_insert_with(|| {
                    f.last_good
                        .clone()
                        .unwrap_or_else(|| (f.matches.clone(), f.actions.clone()))
                });
            }
        }
    }

    /// `p` was installed with `errors`: records last good versions and the errors. Returns the
    /// log lines (new and resolved causes).
    pub fn installed(&mut self, p: &ProgramMsg, errors: &[FlowErrorMsg]) -> Vec<(bool, String)> {
        self.installed_after(p, errors, None)
    }

    /// [`LastGood::installed`] for `p` following `prev`, the program the store last recorded:
    /// a datapath of `p` that is `prev`'s very message (shared, the same [`Arc`]) and has flow
    /// errors in neither install changes nothing here, so it is not walked again (an install
    /// costs the datapaths that changed, not every flow of the program). A datapath of `p`
    /// whose message differs from `prev`'s in a few flows only, the others the same flows with
    /// the same text allocations (a message built by per-flow edits), with flow errors in
    /// neither install, is updated for the identities of those flows alone (an ACL added to
    /// every datapath costs one identity per datapath, not every flow of each).
    pub fn installed_after(
        &mut self,
        p: &ProgramMsg,
        errors: &[FlowErrorMsg],
        prev: Option<&ProgramMsg>,
    ) -> Vec<(bool, String)> {
        let with_errors: BTreeSet<&str> = errors
            .iter()
            .map(|e| e.datapath.as_str())
            .chain(self.errors.keys().map(|(d, _)| d.as_str()))
            .collect();
        let prev_dps: std::collections::HashMap<&str, &Arc<hf_datapath::proto::DatapathMsg>> = prev
            .map_or_else(Default::default, |q| {
                q.datapaths.iter().map(|d| (d.name.as_str(), d)).collect()
            });
        let unchanged: HashSet<&str> = p
            .datapaths
            .iter()
            .filter(|d| {
                !with_errors.contains(d.name.as_str())
                    && prev_dps
                        .get(d.name.as_str())
                        .is_some_and(|q| Arc::ptr_eq(q, d))
            })
            .map(|d| d.name.as_str())
            .collect();
        // Datapaths edited flow by flow: (the flows `prev` had, the flows `p` has in their
        // place). Not for datapaths `seed` took and no install walked since.
        let edited: std::collections::HashMap<&str, (&Flows, &Flows)> = p
            .datapaths
            .iter()
            .filter(|d| {
                !unchanged.contains(d.name.as_str())
                    && !with_errors.contains(d.name.as_str())
                    && !self.seeded.contains(&d.name)
            })
            .filter_map(|d| {
                let q = prev_dps.get(d.name.as_str())?;
                Some((d.name.as_str(), edited_flows(&q.flows, &d.flows)?))
            })
            .collect();
        drop(with_errors);
        let failed: BTreeMap<(String, String), &FlowErrorMsg> = errors
            .iter()
            .map(|e| ((e.datapath.clone(), e.id.clone()), e))
            .collect();
        let failed_ids: BTreeSet<(&str, &str)> = errors
            .iter()
            .map(|e| (e.datapath.as_str(), e.id.as_str()))
            .collect();
        // Forget datapaths that left the program.
        let datapaths: BTreeSet<&str> = p.datapaths.iter().map(|d| d.name.as_str()).collect();
        let changed = &mut self.changed;
        self.good.retain(|name, _| {
            let keep = datapaths.contains(name.as_str());
            if !keep {
                changed.insert(name.clone());
            }
            keep
        });
        self.ambiguous
            .retain(|(d, _)| unchanged.contains(d.as_str()) || edited.contains_key(d.as_str()));
        // Held datapaths run what they ran: their last good versions stay as they are.
        let held: BTreeSet<&str> = errors
            .iter()
            .filter(|e| e.held)
            .map(|e| e.datapath.as_str())
            .collect();
        for d in &p.datapaths {
            if unchanged.contains(d.name.as_str()) {
                continue;
            }
            if let Some(&(gone, came)) = edited.get(d.name.as_str()) {
                let (answers_changed, stale) = self.edit(&d.name, &d.flows, gone, came);
                self.note_change(&d.name, answers_changed, stale);
                continue;
            }
            self.seeded.remove(&d.name);
            self.walked += d.flows.len() as u64;
            let (ids, shared) = ids_and_shared(&d.flows);
            self.ambiguous
                .extend(shared.iter().map(|id| (d.name.clone(), id.to_string())));
            if held.contains(d.name.as_str()) {
                continue;
            }
            // Every flow that compiled now answers its own text (or nothing, when its identity
            // is shared): the message is stale where it carried another answer.
            let stale = d
                .flows
                .iter()
                .any(|f| f.last_good.is_some() && !failed_ids.contains(&(d.name.as_str(), &*f.id)));
            let good = self.good.entry(d.name.clone()).or_default();
            // Forget flows that left the datapath, and identities several flows share.
            let before = good.len();
            good.retain(|id, _| ids.contains(&**id) && !shared.contains(&**id));
            let mut answers_changed = good.len() != before;
            for f in &d.flows {
                if failed_ids.contains(&(d.name.as_str(), &*f.id)) || shared.contains(&*f.id) {
                    continue;
                }
                // The program's copies are taken (shared, not copied): one copy of each text.
                match good.get_mut(&*f.id) {
                    Some((m, a)) if Arc::ptr_eq(m, &f.matches) && Arc::ptr_eq(a, &f.actions) => {}
                    Some((m, a)) => {
                        answers_changed |= **m != *f.matches || **a != *f.actions;
                        *m = Arc::clone(&f.matches);
                        *a = Arc::clone(&f.actions);
                    }
                    None => {
                        answers_changed = true;
                        good.insert(
                            f.id.clone(),
                            (Arc::clone(&f.matches), Arc::clone(&f.actions)),
                        );
                    }
                }
            }
            self.note_change(&d.name, answers_changed, stale);
        }
        self.errors = failed
            .into_iter()
            .map(|(k, e)| {
                (
                    k,
                    FlowErrorEntry {
                        datapath: e.datapath.clone(),
                        id: e.id.clone(),
                        reason: e.reason.clone(),
                        kept_last_good: e.kept_last_good,
                        failed_closed: e.failed_closed,
                        held: e.held,
                    },
                )
            })
            .collect();
        let causes = self.causes();
        let mut logs = Vec::new();
        for (cause, (n, first)) in &causes {
            if self.logged.insert(cause.clone()) {
                logs.push((
                    true,
                    format!(
                        "flow error: {cause}: {n} flow(s) (first: flow {} on datapath {}); {}",
                        first.id,
                        first.datapath,
                        self.instead_summary(cause)
                    ),
                ));
            }
        }
        let gone: Vec<String> = self
            .logged
            .iter()
            .filter(|c| !causes.contains_key(*c))
            .cloned()
            .collect();
        for c in gone {
            self.logged.remove(&c);
            logs.push((false, format!("flow error resolved: {c}")));
        }
        logs
    }

    /// Datapath `name`'s answers after an install of `flows` that differs from the previous
    /// install of the datapath (recorded here, without flow errors in either) in `gone`'s
    /// place taking `came`: only the identities of those flows can change their answers or
    /// become (or stop being) shared. Returns whether answers changed, and whether `flows`
    /// (the installed message) carries a stale answer for one of them. As the whole walk.
    fn edit(&mut self, name: &str, flows: &Flows, gone: &Flows, came: &Flows) -> (bool, bool) {
        let mut ids: Vec<&Arc<str>> = gone.iter().chain(came).map(|f| &f.id).collect();
        ids.sort();
        ids.dedup();
        self.walked += ids.len() as u64;
        if !self.good.contains_key(name) {
            self.good.insert(name.to_string(), HashMap::new());
        }
        let Some(good) = self.good.get_mut(name) else {
            return (false, false);
        };
        let (mut answers_changed, mut stale) = (false, false);
        for id in ids {
            // The flows of the datapath with this identity (compared by length first: one
            // pass over the datapath's flows per edited identity, no hashing).
            let mut with = flows
                .iter()
                .filter(|f| f.id.len() == id.len() && f.id == *id);
            let first = with.next();
            let second = with.next();
            let shared = second.is_some();
            // Each of them answers its own text (or nothing, shared) from now on.
            stale |= first
                .into_iter()
                .chain(second)
                .chain(with)
                .any(|f| f.last_good.is_some());
            let key = (name.to_string(), id.to_string());
            match first {
                Some(f) if !shared => {
                    self.ambiguous.remove(&key);
                    match good.get_mut(&**id) {
                        Some((m, a))
                            if Arc::ptr_eq(m, &f.matches) && Arc::ptr_eq(a, &f.actions) => {}
                        Some((m, a)) => {
                            answers_changed |= **m != *f.matches || **a != *f.actions;
                            *m = Arc::clone(&f.matches);
                            *a = Arc::clone(&f.actions);
                        }
                        None => {
                            answers_changed = true;
                            good.insert(
                                Arc::clone(&f.id),
                                (Arc::clone(&f.matches), Arc::clone(&f.actions)),
                            );
                        }
                    }
                }
                _ => {
                    if shared {
                        self.ambiguous.insert(key);
                    } else {
                        self.ambiguous.remove(&key);
                    }
                    answers_changed |= good.remove(&**id).is_some();
                }
            }
        }
        (answers_changed, stale)
    }

    /// Records how datapath `name`'s answers changed in an install.
    fn note_change(&mut self, name: &str, answers_changed: bool, stale: bool) {
        if stale {
            self.changed.insert(name.to_string());
        } else if answers_changed {
            self.moved.insert(name.to_string());
        }
    }

    /// Flows the installs so far walked: every flow of a datapath walked whole, one per
    /// identity of a datapath edited flow by flow (what an install costs, for tests).
    pub fn flows_walked(&self) -> u64 {
        self.walked
    }

    /// The datapaths whose answers ([`LastGoodLookup::last_good`]) changed since the last
    /// call so that a program message built before for them, the installed one included, is
    /// stale. Where only the installed message stays exact, [`LastGood::take_moved`] names
    /// them.
    pub fn take_changed(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    /// The datapaths whose answers changed since the last call while the installed program's
    /// messages for them stayed exact (see [`LastGood::take_changed`] for the others): a
    /// message built for them that is not the installed one may be stale.
    pub fn take_moved(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.moved)
    }

    /// Errors by cause: (count, first entry).
    pub fn causes(&self) -> BTreeMap<String, (usize, FlowErrorEntry)> {
        let mut m: BTreeMap<String, (usize, FlowErrorEntry)> = BTreeMap::new();
        for e in self.errors.values() {
            m.entry(e.reason.clone())
                .and_modify(|(n, _)| *n += 1)
                .or_insert((1, e.clone()));
        }
        m
    }

    /// What runs instead of the flows of `cause`: one kind, or the count of each.
    pub fn instead_summary(&self, cause: &str) -> String {
        let mut by: BTreeMap<&'static str, usize> = BTreeMap::new();
        for e in self.errors.values().filter(|e| e.reason == cause) {
            *by.entry(e.instead()).or_default() += 1;
        }
        if by.len() == 1 {
            return by.keys().next().map_or_else(String::new, |k| k.to_string());
        }
        by.iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Flows in error.
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// Flows in error that run their last good version.
    pub fn kept_count(&self) -> usize {
        self.errors.values().filter(|e| e.kept_last_good).count()
    }

    /// Flows in error that failed closed.
    pub fn failed_closed_count(&self) -> usize {
        self.errors.values().filter(|e| e.failed_closed).count()
    }

    /// Datapaths held at their last good flows.
    pub fn held_datapaths(&self) -> BTreeSet<&str> {
        self.errors
            .values()
            .filter(|e| e.held)
            .map(|e| e.datapath.as_str())
            .collect()
    }

    /// Identities several flows of one datapath share in the last program (no last good
    /// version is kept for them): (datapath, identity).
    pub fn ambiguous(&self) -> &BTreeSet<(String, String)> {
        &self.ambiguous
    }

    /// The current errors.
    pub fn errors(&self) -> impl Iterator<Item = &FlowErrorEntry> {
        self.errors.values()
    }

    /// The `Chassis_Private.external_ids` entries.
    pub fn report(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        if self.errors.is_empty() {
            return m;
        }
        m.insert(
            "holdfast-flow-errors".to_string(),
            self.errors.len().to_string(),
        );
        for (i, (cause, (n, _))) in self.causes().iter().take(MAX_REPORTED).enumerate() {
            m.insert(
                format!("holdfast-flow-error-{}", i + 1),
                format!("{cause} ({n} flows)"),
            );
        }
        for (key, n) in [
            ("holdfast-flow-errors-last-good", self.kept_count()),
            (
                "holdfast-flow-errors-failed-closed",
                self.failed_closed_count(),
            ),
            (
                "holdfast-flow-errors-held-datapaths",
                self.held_datapaths().len(),
            ),
        ] {
            if n > 0 {
                m.insert(key.to_string(), n.to_string());
            }
        }
        m
    }
}

/// Whether `text` names set `name` with `sigil` (`@pg`, `$as`), as a whole name.
fn names_set(text: &str, sigil: char, name: &str) -> bool {
    let pat = format!("{sigil}{name}");
    text.match_indices(&pat).any(|(i, _)| {
        text[i + pat.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
    })
}

/// Port groups and address sets the running program has, the new one lacks, and a last good
/// text of the new one names: copied into `next` (a last good version runs with the sets it
/// ran with; without them it would not compile). Returns their names (`@pg`, `$as`).
pub fn keep_sets(running: &ProgramMsg, next: &mut ProgramMsg) -> Vec<String> {
    let needs = |sigil: char, name: &str| {
        next.datapaths.iter().any(|d| {
            d.flows.iter().any(|f| {
                f.last_good
                    .as_ref()
                    .is_some_and(|(m, a)| names_set(m, sigil, name) || names_set(a, sigil, name))
            })
        })
    };
    let pgs: Vec<(String, Vec<String>)> = running
        .port_groups
        .iter()
        .filter(|(n, _)| !next.port_groups.contains_key(*n) && needs('@', n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let sets: Vec<(String, Vec<String>)> = running
        .address_sets
        .iter()
        .filter(|(n, _)| !next.address_sets.contains_key(*n) && needs('$', n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let mut kept = Vec::new();
    for (n, v) in pgs {
        kept.push(format!("@{n}"));
        next.port_groups.insert(n, v);
    }
    for (n, v) in sets {
        kept.push(format!("${n}"));
        next.address_sets.insert(n, v);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_datapath::proto::{DatapathMsg, FlowMsg};

    /// [`LastGoodLookup::last_good`] as text.
    fn lgt<'a>(l: &'a LastGood, datapath: &str, id: &str) -> Option<(&'a str, &'a str)> {
        l.last_good(datapath, id).map(|(m, a)| (&**m, &**a))
    }

    fn program(dps: &[(&str, &[(&str, &str)])]) -> ProgramMsg {
        ProgramMsg {
            datapaths: dps
                .iter()
                .map(|(name, flows)| {
                    Arc::new(DatapathMsg {
                        name: (*name).to_string(),
                        flows: flows
                            .iter()
                            .map(|(id, actions)| {
                                Arc::new(FlowMsg {
                                    id: (*id).into(),
                                    matches: "1".into(),
                                    actions: (*actions).into(),
                                    ..FlowMsg::default()
                                })
                            })
                            .collect(),
                        ..DatapathMsg::default()
                    })
                })
                .collect(),
            ..ProgramMsg::default()
        }
    }

    /// The store's whole state, comparable.
    fn state(l: &LastGood) -> String {
        format!(
            "{:?} {:?} {:?} {:?}",
            l.good
                .iter()
                .map(|(d, g)| (d, g.iter().collect::<BTreeMap<_, _>>()))
                .collect::<BTreeMap<_, _>>(),
            l.errors,
            l.ambiguous,
            l.report()
        )
    }

    /// An install that shares unchanged datapaths with the previous program walks only the
    /// others, and ends in the state a full walk gives: over a sequence where a shared datapath
    /// had an error before (so it must be walked again), one gains an ambiguous identity, and
    /// one changes text. A walk that skipped a shared datapath with an earlier error (or
    /// forgot its ambiguous identities) differs.
    #[test]
    fn installing_after_a_shared_program_equals_a_full_walk() {
        let p1 = program(&[
            ("ls1", &[("a", "next;"), ("b", "drop;")]),
            ("ls2", &[("c", "bad")]),
            ("ls3", &[("d", "next;"), ("d", "drop;")]),
        ]);
        // ls2 and ls3 shared (the same Arc); ls1 changes text.
        let mut p2 = program(&[("ls1", &[("a", "output;"), ("b", "drop;")])]);
        p2.datapaths.push(Arc::clone(&p1.datapaths[1]));
        p2.datapaths.push(Arc::clone(&p1.datapaths[2]));
        let e1 = [error("ls2", "c")];
        let (mut full, mut fast) = (LastGood::default(), LastGood::default());
        full.installed(&p1, &e1);
        fast.installed_after(&p1, &e1, None);
        assert_eq!(state(&full), state(&fast));
        full.installed(&p2, &[]);
        fast.installed_after(&p2, &[], Some(&p1));
        assert_eq!(state(&full), state(&fast));
        // ls2's flow compiled this time: its text is now its last good version.
        assert_eq!(lgt(&fast, "ls2", "c"), Some(("1", "bad")));
        assert_eq!(lgt(&fast, "ls1", "a"), Some(("1", "output;")));
        assert!(
            fast.ambiguous
                .contains(&("ls3".to_string(), "d".to_string()))
        );
    }

    /// Installs of messages edited flow by flow (some datapaths shared, some edited a few
    /// flows at a time: added, removed, text changed, an identity becoming shared or no
    /// longer shared, equal text in a new allocation; sometimes a flow error, sometimes a
    /// datapath rewritten whole) leave the store as a full walk of every install does, with
    /// the same changed datapaths; and an install adding one flow to each of many large
    /// datapaths walks one identity per datapath. A store that kept a removed identity, missed
    /// one becoming shared, or walked the edited datapaths whole differs.
    #[test]
    fn installing_per_flow_edits_equals_a_full_walk() {
        use crate::translate::test_rng::Rng;
        const IDS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
        const ACTIONS: [&str; 4] = ["next;", "drop;", "output;", "reg0 = 1; next;"];
        let flow = |rng: &mut Rng, id: &str| {
            Arc::new(FlowMsg {
                id: id.into(),
                matches: "1".into(),
                actions: rng.pick(&ACTIONS).into(),
                ..FlowMsg::default()
            })
        };
        let mut walked_by_adds = 0;
        for seed in 1..=20u64 {
            let mut rng = Rng(seed);
            let mut prev = program(&[]);
            for n in 0..6 {
                let flows: Vec<Arc<FlowMsg>> = (0..10 + rng.below(20))
                    .map(|i| flow(&mut rng, &format!("f{i}")))
                    .collect();
                prev.datapaths.push(Arc::new(DatapathMsg {
                    name: format!("ls{n}"),
                    flows,
                    ..DatapathMsg::default()
                }));
            }
            let (mut full, mut fast) = (LastGood::default(), LastGood::default());
            full.installed(&prev, &[]);
            fast.installed_after(&prev, &[], None);
            for step in 0..40 {
                let mut next = prev.clone();
                let mut errors = Vec::new();
                for d in next.datapaths.iter_mut() {
                    if rng.chance(3) {
                        continue;
                    }
                    let m = Arc::make_mut(d);
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(m.flows.len() + 1);
                        match rng.below(6) {
                            0 | 1 => {
                                let id = rng.pick(&IDS);
                                m.flows.insert(at, flow(&mut rng, id));
                            }
                            2 if at < m.flows.len() => {
                                m.flows.remove(at);
                            }
                            3 if at < m.flows.len() => {
                                Arc::make_mut(&mut m.flows[at]).actions = rng.pick(&ACTIONS).into();
                            }
                            4 if at < m.flows.len() => {
                                // The same text in a new allocation.
                                let f = Arc::make_mut(&mut m.flows[at]);
                                f.matches = (*f.matches).into();
                            }
                            _ if !m.flows.is_empty() => {
                                let id = m.flows[rng.below(m.flows.len())].id.clone();
                                m.flows.insert(
                                    at,
                                    Arc::new(FlowMsg {
                                        id,
                                        ..(*flow(&mut rng, "")).clone()
                                    }),
                                );
                            }
                            _ => {}
                        }
                    }
                    if rng.chance(8) {
                        // Rewritten whole: every text a new allocation.
                        for f in &mut m.flows {
                            let f = Arc::make_mut(f);
                            f.actions = (*f.actions).into();
                        }
                    }
                    if rng.chance(10) && !m.flows.is_empty() {
                        errors.push(error(&m.name, &m.flows[rng.below(m.flows.len())].id));
                    }
                }
                let lf = full.installed(&next, &errors);
                let lq = fast.installed_after(&next, &errors, Some(&prev));
                let what = format!("seed {seed}, step {step}");
                assert_eq!(state(&full), state(&fast), "{what}");
                assert_eq!(lf, lq, "{what}");
                assert_eq!(full.take_changed(), fast.take_changed(), "{what}");
                prev = next;
            }
            // One flow added to each of 6 datapaths of 100 flows: 6 identities walked.
            let mut big = prev.clone();
            for d in big.datapaths.iter_mut() {
                let m = Arc::make_mut(d);
                m.flows = (0..100).map(|i| flow(&mut rng, &format!("f{i}"))).collect();
            }
            full.installed(&big, &[]);
            fast.installed_after(&big, &[], Some(&prev));
            let mut next = big.clone();
            for d in next.datapaths.iter_mut() {
                Arc::make_mut(d).flows.insert(50, flow(&mut rng, "acl"));
            }
            let before = fast.flows_walked();
            full.installed(&next, &[]);
            fast.installed_after(&next, &[], Some(&big));
            walked_by_adds += fast.flows_walked() - before;
            assert_eq!(state(&full), state(&fast), "seed {seed}, the adds");
            assert_eq!(full.take_changed(), fast.take_changed());
        }
        assert_eq!(walked_by_adds, 20 * 6, "each add walks one identity");
    }

    /// A restarted controller's store takes the datapath's program (`seed`): a flow there that
    /// carries a last good version has that version as its answer, not its text. An install
    /// that shares that flow's texts with the seeded program and edits another flow of its
    /// datapath must still record the shared flow's text (it compiled now), as a full walk does:
    /// an edited datapath that `seed` took is walked whole.
    #[test]
    fn an_edit_after_a_seed_records_the_shared_flows_that_now_compiled() {
        let mut seeded = program(&[("ls1", &[("a", "frob;"), ("b", "drop;")])]);
        Arc::make_mut(&mut Arc::make_mut(&mut seeded.datapaths[0]).flows[0]).last_good =
            Some(("1".into(), "next;".into()));
        let mut next = seeded.clone();
        let m = Arc::make_mut(&mut next.datapaths[0]);
        Arc::make_mut(&mut m.flows[0]).last_good = None;
        Arc::make_mut(&mut m.flows[1]).actions = "output;".into();
        let (mut full, mut fast) = (LastGood::default(), LastGood::default());
        full.seed(&seeded);
        fast.seed(&seeded);
        assert_eq!(lgt(&fast, "ls1", "a"), Some(("1", "next;")));
        full.installed(&next, &[]);
        fast.installed_after(&next, &[], Some(&seeded));
        assert_eq!(state(&full), state(&fast));
        assert_eq!(lgt(&fast, "ls1", "a"), Some(("1", "frob;")));
    }

    fn error(datapath: &str, id: &str) -> FlowErrorMsg {
        FlowErrorMsg {
            id: id.to_string(),
            datapath: datapath.to_string(),
            reason: "bad action".to_string(),
            kept_last_good: true,
            failed_closed: false,
            held: false,
        }
    }

    #[test]
    fn keeps_good_text_of_failed_flows_and_forgets_departed_ones() {
        let mut lg = LastGood::default();
        lg.installed(
            &program(&[
                ("ls1", &[("a", "next;"), ("b", "drop;")]),
                ("ls2", &[("c", "next;")]),
            ]),
            &[],
        );
        assert_eq!(lgt(&lg, "ls1", "a"), Some(("1", "next;")));
        assert_eq!(lgt(&lg, "ls2", "c"), Some(("1", "next;")));

        // `a` fails in its new text, `b` changes, `ls2` and its flow leave.
        let logs = lg.installed(
            &program(&[("ls1", &[("a", "bogus;"), ("b", "next;")])]),
            &[error("ls1", "a")],
        );
        assert_eq!(lgt(&lg, "ls1", "a"), Some(("1", "next;")));
        assert_eq!(lgt(&lg, "ls1", "b"), Some(("1", "next;")));
        assert_eq!(lgt(&lg, "ls2", "c"), None);
        assert_eq!(lg.error_count(), 1);
        assert_eq!(logs.len(), 1);
        assert!(logs[0].0, "{logs:?}");

        // `b` leaves the datapath; `a` is fixed and the cause is resolved.
        let logs = lg.installed(&program(&[("ls1", &[("a", "drop;")])]), &[]);
        assert_eq!(lgt(&lg, "ls1", "a"), Some(("1", "drop;")));
        assert_eq!(lgt(&lg, "ls1", "b"), None);
        assert_eq!(lg.error_count(), 0);
        assert_eq!(
            logs,
            vec![(false, "flow error resolved: bad action".to_string())]
        );
    }

    #[test]
    fn a_cause_is_logged_once_while_it_lasts_and_reported_with_counts() {
        let mut lg = LastGood::default();
        lg.installed(&program(&[("ls1", &[("a", "next;"), ("b", "next;")])]), &[]);
        let mut closed = error("ls1", "b");
        closed.kept_last_good = false;
        closed.failed_closed = true;
        let p = program(&[("ls1", &[("a", "x;"), ("b", "x;")])]);
        let logs = lg.installed(&p, &[error("ls1", "a"), closed.clone()]);
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert!(logs[0].1.contains("2 flow(s)"), "{logs:?}");
        assert!(
            logs[0].1.contains("1 running the last good version")
                && logs[0].1.contains("1 no good version known, failed closed"),
            "{logs:?}"
        );
        // The same errors on the next installs: nothing logged again.
        for _ in 0..3 {
            assert!(
                lg.installed(&p, &[error("ls1", "a"), closed.clone()])
                    .is_empty()
            );
        }
        let r = lg.report();
        assert_eq!(r["holdfast-flow-errors"], "2");
        assert_eq!(r["holdfast-flow-error-1"], "bad action (2 flows)");
        assert_eq!(r["holdfast-flow-errors-last-good"], "1");
        assert_eq!(r["holdfast-flow-errors-failed-closed"], "1");
        assert_eq!(r.len(), 4, "{r:?}");
    }

    #[test]
    fn flows_that_share_an_identity_get_no_last_good_version() {
        let mut lg = LastGood::default();
        // Two flows of ls1 share identity `x` (different actions); `y` is distinct.
        let p = program(&[("ls1", &[("x", "next;"), ("x", "drop;"), ("y", "next;")])]);
        lg.installed(&p, &[]);
        assert_eq!(lgt(&lg, "ls1", "x"), None);
        assert_eq!(lgt(&lg, "ls1", "y"), Some(("1", "next;")));
        assert!(
            lg.ambiguous()
                .contains(&("ls1".to_string(), "x".to_string()))
        );
        // Seeding from a datapath's program skips them too.
        let mut seeded = LastGood::default();
        seeded.seed(&p);
        assert_eq!(lgt(&seeded, "ls1", "x"), None);
        assert_eq!(lgt(&seeded, "ls1", "y"), Some(("1", "next;")));
    }

    #[test]
    fn sets_a_last_good_text_names_are_kept() {
        let mut running = program(&[("ls1", &[("a", "next;")])]);
        running
            .port_groups
            .insert("pg_web".into(), vec!["web1".into()]);
        running
            .port_groups
            .insert("pg_other".into(), vec!["x".into()]);
        running
            .port_groups
            .insert("pg_web2".into(), vec!["y".into()]);
        let mut next = program(&[("ls1", &[("a", "next;")])]);
        Arc::make_mut(&mut Arc::make_mut(&mut next.datapaths[0]).flows[0]).last_good =
            Some(("outport == @pg_web && ip4".into(), "next;".into()));
        next.port_groups
            .insert("1_pg_web".into(), vec!["web1".into()]);
        let kept = keep_sets(&running, &mut next);
        // `@pg_web` is named (whole name: not `pg_web2`); `pg_other` is named by nothing.
        assert_eq!(kept, vec!["@pg_web".to_string()]);
        assert_eq!(next.port_groups["pg_web"], vec!["web1".to_string()]);
        assert!(!next.port_groups.contains_key("pg_other"));
        assert!(!next.port_groups.contains_key("pg_web2"));
    }
}
