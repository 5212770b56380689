//! Port mirroring, a part of the controller core ([`super::Controller`]): the SB `Mirror`
//! sessions that the local ports' `Port_Binding.mirror_rules` name, sent to a version-7
//! datapath when they change (as ovn-controller 23.03's `mirror.c` keeps OVS `Mirror` rows
//! and their GRE/ERSPAN ports in step with SB).
//!
//! It does not copy or encapsulate frames (the datapath does, `hf_datapath::mirror`). With
//! an older datapath, every mirrored local port is a warning naming it: nothing is mirrored.

use std::collections::{BTreeMap, BTreeSet};

use hf_datapath::proto::{self, MirrorFilter, MirrorKind, MirrorMsg, ToDatapath};
use hf_model::SbSnapshot;
use hf_model::sb::{self as s, Delta};

use super::{Controller, Level};

impl Controller {
    /// Sends the datapath the mirror sessions of the local ports when they changed (or since
    /// its hello).
    pub(super) fn sync_mirrors(&mut self) {
        if !self.dp_hello || !std::mem::take(&mut self.mirrors_due) {
            return;
        }
        let (list, mut bad) = local_mirrors(self.sb.model(), &self.local_set());
        if self.dp_version < proto::MIRROR_VERSION && !list.is_empty() {
            let ports: BTreeSet<&str> = list
                .iter()
                .flat_map(|m| m.ports.iter().map(String::as_str))
                .collect();
            bad.push(format!(
                "the datapath speaks control protocol version {}, port mirroring needs {}: \
                 ports {} are not mirrored",
                self.dp_version,
                proto::MIRROR_VERSION,
                ports.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        let before = std::mem::take(&mut self.mirrors_bad);
        self.mirrors_bad = self.warn_new(&before, bad);
        if self.dp_version < proto::MIRROR_VERSION || self.mirrors_sent.as_ref() == Some(&list) {
            return;
        }
        if !list.is_empty() || self.mirrors_sent.is_some() {
            self.say(
                Level::Info,
                format!("mirrors: {} session(s) to the datapath", list.len()),
            );
        }
        self.send_dp(&ToDatapath::Mirrors(list.clone()));
        self.mirrors_sent = Some(list);
    }
}

/// Whether change set `d` can change [`local_mirrors`]: a `Mirror` row, or a port binding
/// that has (or had) mirror rules.
pub(super) fn touches_mirrors(d: &Delta) -> bool {
    use hf_model::RowDelta;
    let ruled = |p: &s::PortBinding| !p.mirror_rules.is_empty();
    !d.mirror.is_empty()
        || d.port_binding.iter().any(|r| match r {
            RowDelta::Insert(p) | RowDelta::Delete(p) => ruled(p),
            RowDelta::Update { old, new } => ruled(old) || ruled(new),
        })
}

/// The sessions the `local` ports' mirror rules name, each with its local ports, sorted; and
/// what was left out (in words).
pub fn local_mirrors(sb: &SbSnapshot, local: &BTreeSet<String>) -> (Vec<MirrorMsg>, Vec<String>) {
    let mut ports: BTreeMap<uuid::Uuid, BTreeSet<String>> = BTreeMap::new();
    let mut bad = Vec::new();
    for p in local {
        for pb in sb.port_binding_all_by_logical_port(p) {
            for r in &pb.mirror_rules {
                if sb.mirror().contains_key(&r.uuid()) {
                    ports.entry(r.uuid()).or_default().insert(p.clone());
                } else {
                    bad.push(format!(
                        "port {p}: mirror_rules names Mirror {}, which is not in SB: ignored",
                        r.uuid()
                    ));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (u, ports) in ports {
        let Some(m) = sb.mirror().get(&u) else {
            continue;
        };
        let kind = match &m.type_ {
            s::MirrorType::Gre => MirrorKind::Gre,
            s::MirrorType::Erspan => MirrorKind::Erspan,
            t => {
                bad.push(format!(
                    "mirror {}: type {:?} is neither gre nor erspan: not mirrored",
                    m.name,
                    t.as_str()
                ));
                continue;
            }
        };
        let filter = match &m.filter {
            s::MirrorFilter::FromLport => MirrorFilter::FromLport,
            s::MirrorFilter::ToLport => MirrorFilter::ToLport,
            f => {
                bad.push(format!(
                    "mirror {}: filter {:?} is neither from-lport nor to-lport: not mirrored",
                    m.name,
                    f.as_str()
                ));
                continue;
            }
        };
        out.push(MirrorMsg {
            name: m.name.clone(),
            kind,
            filter,
            sink: m.sink.clone(),
            index: m.index,
            ports: ports.into_iter().collect(),
        });
    }
    out.sort();
    (out, bad)
}
