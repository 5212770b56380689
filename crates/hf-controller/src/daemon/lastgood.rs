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
//! first appears, with the number of flows it hits, and once when it is gone; [`LastGood::report`]
//! gives the `Chassis_Private.external_ids` entries (`holdfast-flow-errors=<flows>` and at most
//! [`MAX_REPORTED`] `holdfast-flow-error-N=<cause> (<n> flows)`).
//!
//! [`FromDatapath::Installed`]: hf_datapath::proto::FromDatapath::Installed

use std::collections::{BTreeMap, BTreeSet};

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
}

/// The store.
#[derive(Debug, Clone, Default)]
pub struct LastGood {
    good: BTreeMap<(String, String), (String, String)>,
    errors: BTreeMap<(String, String), FlowErrorEntry>,
    logged: BTreeSet<String>,
}

impl LastGoodLookup for LastGood {
    fn last_good(&self, datapath: &str, id: &str) -> Option<(&str, &str)> {
        self.good
            .get(&(datapath.to_string(), id.to_string()))
            .map(|(m, a)| (m.as_str(), a.as_str()))
    }
}

impl LastGood {
    /// Takes the last good versions a datapath's running program carries (a restarted
    /// controller): a flow's `last_good` when it has one, else its text.
    pub fn seed(&mut self, p: &ProgramMsg) {
        for d in &p.datapaths {
            for f in &d.flows {
                let v = f
                    .last_good
                    .clone()
                    .unwrap_or_else(|| (f.matches.clone(), f.actions.clone()));
                self.good.entry((d.name.clone(), f.id.clone())).or_insert(v);
            }
        }
    }

    /// `p` was installed with `errors`: records last good versions and the errors. Returns the
    /// log lines (new and resolved causes).
    pub fn installed(&mut self, p: &ProgramMsg, errors: &[FlowErrorMsg]) -> Vec<(bool, String)> {
        let failed: BTreeMap<(String, String), &FlowErrorMsg> = errors
            .iter()
            .map(|e| ((e.datapath.clone(), e.id.clone()), e))
            .collect();
        let mut present = BTreeSet::new();
        for d in &p.datapaths {
            for f in &d.flows {
                let key = (d.name.clone(), f.id.clone());
                if !failed.contains_key(&key) {
                    self.good
                        .insert(key.clone(), (f.matches.clone(), f.actions.clone()));
                }
                present.insert(key);
            }
        }
        // Forget flows that left the program.
        self.good.retain(|k, _| present.contains(k));
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
                        "flow error: {cause}: {n} flow(s) (first: flow {} on datapath {}){}",
                        first.id,
                        first.datapath,
                        if first.kept_last_good {
                            "; running the last good version"
                        } else {
                            "; no good version known, the flow is left out"
                        }
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

    /// Flows in error.
    pub fn error_count(&self) -> usize {
        self.errors.len()
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
        m
    }
}
