//! A position-free text of a compiled program ([`Program::canonical_text`]), for tests that
//! compare a program changed in place with a fresh compile.

use crate::program::{CAct, Program};

/// One action, with nested bodies and counters resolved (counter numbers depend on what a
/// recompile reused; the counter's name, liveness and flow do not).
fn act_text(p: &Program, i: u32) -> String {
    let Some(a) = p.acts.get(i as usize) else {
        return format!("missing act {i}");
    };
    let counter = |c: u32| match p.counters.get(c as usize) {
        Some(k) => format!(
            "counter {} live {} dp {} flow {:?}",
            k.name,
            k.live,
            k.dp,
            p.flows.get(k.flow as usize).map(|f| &f.matches)
        ),
        None => format!("missing counter {c}"),
    };
    match a {
        CAct::Nested { kind, body } => format!(
            "Nested {kind:?} [{}]",
            body.clone()
                .map(|j| act_text(p, j))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        CAct::PacketIn { counter: c, .. }
        | CAct::BindVport { counter: c, .. }
        | CAct::Log { counter: c, .. }
        | CAct::SetMeter { counter: c, .. }
        | CAct::SvcCheck { counter: c, .. }
        | CAct::Igmp { counter: c, .. }
        | CAct::Bfd { counter: c, .. }
        | CAct::Count { counter: c, .. } => {
            let mut z = a.clone();
            if let CAct::PacketIn { counter, .. }
            | CAct::BindVport { counter, .. }
            | CAct::Log { counter, .. }
            | CAct::SetMeter { counter, .. }
            | CAct::SvcCheck { counter, .. }
            | CAct::Igmp { counter, .. }
            | CAct::Bfd { counter, .. }
            | CAct::Count { counter, .. } = &mut z
            {
                *counter = 0;
            }
            format!("{z:?} {}", counter(*c))
        }
        _ => format!("{a:?}"),
    }
}

pub(crate) fn flow_text(p: &Program, f: u32) -> String {
    match p.flows.get(f as usize) {
        Some(fi) => format!(
            "{} {} {} | {} | {}",
            fi.id,
            fi.priority,
            fi.matches,
            fi.actions,
            fi.acts
                .clone()
                .map(|i| act_text(p, i))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        None => format!("missing flow {f}"),
    }
}

impl Program {
    /// The program as text that does not depend on where entries sit in the arenas: every
    /// datapath's port and group maps, tables (subtables in visiting order, hash lists in
    /// order), actions, counters, errors and references. Equal texts: programs that behave
    /// alike. For tests comparing a program changed in place with a fresh compile.
    #[doc(hidden)]
    pub fn canonical_text(&self) -> Vec<String> {
        canonical(self)
    }
}

fn canonical(p: &Program) -> Vec<String> {
    let mut out = Vec::new();
    for (i, d) in p.dps.iter().enumerate() {
        out.push(format!("dp {i} {} key {} {:?}", d.name, d.key, d.kind));
        let mut ports: Vec<_> = d.ports.iter().collect();
        ports.sort_by_key(|(k, _)| **k);
        out.push(format!("ports {ports:?}"));
        let mut groups: Vec<_> = d.groups.iter().collect();
        groups.sort();
        out.push(format!(
            "groups {groups:?} vips {:?} snat {:?}",
            d.vips, d.snat_zone
        ));
        let c = &d.tables;
        out.push(format!(
            "errors {:?} resident {:?} sets {:?} names {:?} flows {}",
            c.errors, c.resident_refs, c.set_refs, c.names, c.flow_count
        ));
        for (pi, tables) in c.tables.iter().enumerate() {
            for (ti, t) in tables.iter().enumerate() {
                out.push(format!("table {pi}/{ti}"));
                out.extend(t.describe(&|f| flow_text(p, f)));
            }
        }
    }
    let live = p.counters.iter().filter(|c| c.live).count();
    let mut local: Vec<_> = p.local.iter().collect();
    local.sort();
    let mut dns: Vec<_> = p.dns.iter().collect();
    dns.sort();
    out.push(format!(
        "live counters {live} local {local:?} neighbours {:?} fdb {:?} inactive {:?} dns {dns:?}",
        p.neighbours, p.fdb, p.inactive
    ));
    out
}
