//! Learned neighbours → SB `MAC_Binding` (what ovn-controller's `pinctrl` writes for
//! `put_arp`/`put_nd`): one row per (logical port, IP) with the datapath, the MAC and a
//! timestamp (23.03's `mac-binding-timestamp`, wall-clock milliseconds). An existing row with
//! another MAC is updated; one with the same MAC is left alone. A neighbour stays pending until
//! the view shows its row, so a failed transaction is retried with the next write round.
//!
//! Learned FDB entries (`put_fdb`) go to SB `FDB` the same way: one row per (MAC, datapath
//! key) with the port's key.
//!
//! Not done: rows for datapaths this chassis does not monitor (their `MAC_Binding` rows are not
//! in the view, and inserting blindly could break the `(logical_port, ip)` index): such
//! neighbours are dropped with a log line by the core.

use std::collections::BTreeMap;
use std::time::Duration;

use hf_model::{RowDelta, SbDelta, SbSnapshot};
use serde_json::{Value, json};
use uuid::Uuid;

/// A pending neighbour: (datapath name, logical port, IP) → MAC text.
pub type Pending = BTreeMap<(String, String, String), String>;

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The datapath named `name` (`external_ids:name`).
pub fn datapath_by_name(sb: &SbSnapshot, name: &str) -> Option<Uuid> {
    sb.datapath_binding()
        .values()
        .find(|d| crate::translate::datapath_name(d) == name)
        .map(|d| d.uuid)
}

/// Whether the view already has `(port, ip) → mac` on `datapath`.
pub fn written(sb: &SbSnapshot, dp: Uuid, port: &str, ip: &str, mac: &str) -> bool {
    sb.mac_binding()
        .values()
        .any(|m| m.logical_port == port && m.ip == ip && m.datapath.uuid() == dp && m.mac == mac)
}

/// The operations writing the pending neighbours.
pub fn neighbour_ops(sb: &SbSnapshot, pending: &Pending, wall_ms: i64) -> Vec<Value> {
    let mut ops = Vec::new();
    for ((dp_name, port, ip), mac) in pending {
        let Some(dp) = datapath_by_name(sb, dp_name) else {
            continue;
        };
        if written(sb, dp, port, ip, mac) {
            continue;
        }
        let row = json!({"datapath": ["uuid", dp.to_string()], "logical_port": port,
                         "ip": ip, "mac": mac, "timestamp": wall_ms});
        match sb
            .mac_binding()
            .values()
            .find(|m| m.logical_port == *port && m.ip == *ip)
        {
            Some(m) => ops.push(json!({"op": "update", "table": "MAC_Binding",
                "where": [["_uuid", "==", ["uuid", m.uuid.to_string()]]], "row": row})),
            None => ops.push(json!({"op": "insert", "table": "MAC_Binding", "row": row})),
        }
    }
    ops
}

/// The `MAC_Binding` rows a change deleted together with their datapath (its
/// `Datapath_Binding` row deleted in the same change): what
/// a rebuilt SB (every row deleted, then written again with new UUIDs) takes away from a
/// datapath that comes back under the same name. Keyed as [`Pending`] (by datapath name, not
/// UUID), so that they can be written again on the new datapath.
pub fn orphaned(d: &SbDelta) -> Vec<((String, String, String), String)> {
    let mut out = Vec::new();
    let gone_dp = |u: Uuid| {
        d.datapath_binding.iter().find_map(|r| match r {
            RowDelta::Delete(old) if old.uuid == u => Some(crate::translate::datapath_name(old)),
            _ => None,
        })
    };
    for r in &d.mac_binding {
        if let RowDelta::Delete(m) = r
            && let Some(name) = gone_dp(m.datapath.uuid())
        {
            out.push(((name, m.logical_port.clone(), m.ip.clone()), m.mac.clone()));
        }
    }
    out
}

/// Neighbours of a rebuilt SB (incident D). A rebuild deletes every `MAC_Binding` row with
/// its datapath; the datapath of the same name comes back with a new UUID and no neighbours,
/// and a program translated from it would make its routers ask again (the first packet to
/// each neighbour turned into an ARP or ND request: lost). So the rows deleted with their
/// datapath ([`orphaned`]) are kept by name for a grace; when a datapath of that name is in
/// the view again they are to be written to `MAC_Binding` again (as learned neighbours are),
/// and programs wait for them ([`Restore::waiting`]) until they are in the view or the grace
/// is over. A datapath deleted for good does not come back: its rows are forgotten after the
/// grace and hold nothing back. Rows are written again with a new timestamp.
///
/// Not done: `FDB` rows (a lost entry floods instead of dropping), and neighbours of
/// datapaths this chassis does not monitor (another chassis writes those).
#[derive(Debug, Default, Clone)]
pub struct Restore {
    /// Deleted with their datapath: MAC and when.
    orphans: Pending2,
    /// Being written again: MAC and until when programs wait for them.
    restoring: Pending2,
}

type Pending2 = BTreeMap<(String, String, String), (String, Duration)>;

impl Restore {
    /// Take in a change: the rows it deleted with their datapath; returns the neighbours to
    /// write again now (their datapath is back under its name and `watched`).
    pub fn note(
        &mut self,
        sb: &SbSnapshot,
        d: &SbDelta,
        now: Duration,
        grace: Duration,
        watched: impl Fn(Uuid) -> bool,
    ) -> Vec<((String, String, String), String)> {
        for (k, mac) in orphaned(d) {
            self.orphans.insert(k, (mac, now));
        }
        self.orphans.retain(|_, (_, since)| now < *since + grace);
        let back: Vec<_> = self
            .orphans
            .keys()
            .filter(|(dp, _, _)| datapath_by_name(sb, dp).is_some_and(&watched))
            .cloned()
            .collect();
        let mut add = Vec::new();
        for k in back {
            if let Some((mac, _)) = self.orphans.remove(&k) {
                self.restoring.insert(k.clone(), (mac.clone(), now + grace));
                add.push((k, mac));
            }
        }
        add
    }

    /// Whether programs wait for neighbours being written again; forgets the ones in the view
    /// or past their time.
    pub fn waiting(&mut self, sb: &SbSnapshot, now: Duration) -> bool {
        self.restoring.retain(|(dp, port, ip), (mac, until)| {
            now < *until && !datapath_by_name(sb, dp).is_some_and(|u| written(sb, u, port, ip, mac))
        });
        !self.restoring.is_empty()
    }

    /// When the earliest wait ends.
    pub fn deadline(&self) -> Option<Duration> {
        self.restoring.values().map(|(_, until)| *until).min()
    }
}

/// A pending FDB entry: (datapath name, MAC text) → logical port.
pub type PendingFdb = BTreeMap<(String, String), String>;

fn fdb_keys(sb: &SbSnapshot, dp_name: &str, port: &str) -> Option<(i64, i64)> {
    let dp = datapath_by_name(sb, dp_name)?;
    let dk = sb.datapath_binding().get(&dp)?.tunnel_key;
    let pk = sb
        .port_binding_all_by_logical_port(port)
        .find(|p| p.datapath.uuid() == dp)?
        .tunnel_key;
    Some((dk, pk))
}

/// Whether the view has the FDB entry (or it cannot be written: unknown datapath or port).
pub fn fdb_written(sb: &SbSnapshot, dp_name: &str, mac: &str, port: &str) -> bool {
    let Some((dk, pk)) = fdb_keys(sb, dp_name, port) else {
        return true;
    };
    sb.fdb()
        .values()
        .any(|f| f.dp_key == dk && f.port_key == pk && f.mac == mac)
}

/// The operations writing the pending FDB entries.
pub fn fdb_ops(sb: &SbSnapshot, pending: &PendingFdb) -> Vec<Value> {
    let mut ops = Vec::new();
    for ((dp_name, mac), port) in pending {
        let Some((dk, pk)) = fdb_keys(sb, dp_name, port) else {
            continue;
        };
        if fdb_written(sb, dp_name, mac, port) {
            continue;
        }
        let row = json!({"mac": mac, "dp_key": dk, "port_key": pk});
        match sb.fdb().values().find(|f| f.dp_key == dk && f.mac == *mac) {
            Some(f) => ops.push(json!({"op": "update", "table": "FDB",
                "where": [["_uuid", "==", ["uuid", f.uuid.to_string()]]], "row": row})),
            None => ops.push(json!({"op": "insert", "table": "FDB", "row": row})),
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_model::{RowRef, sb};

    fn dp(n: u128, name: &str) -> sb::DatapathBinding {
        sb::DatapathBinding {
            uuid: Uuid::from_u128(n),
            external_ids: [("name".to_string(), name.to_string())].into(),
            tunnel_key: 1,
            ..Default::default()
        }
    }

    fn mb(n: u128, dp: u128, ip: &str, mac: &str) -> sb::MacBinding {
        sb::MacBinding {
            uuid: Uuid::from_u128(n),
            datapath: RowRef::new(Uuid::from_u128(dp)),
            logical_port: "lr0-ext".into(),
            ip: ip.into(),
            mac: mac.into(),
            ..Default::default()
        }
    }

    fn apply(sb: &mut SbSnapshot, d: &SbDelta) {
        sb.apply(d);
    }

    /// lr0 (UUID 1) and ls9 (UUID 2) with one neighbour each, inserted or deleted.
    fn lr0_and_ls9(insert: bool) -> SbDelta {
        fn op<T: hf_model::Table>(insert: bool, r: T) -> RowDelta<T> {
            if insert {
                RowDelta::Insert(r)
            } else {
                RowDelta::Delete(r)
            }
        }
        SbDelta {
            datapath_binding: vec![op(insert, dp(1, "lr0")), op(insert, dp(2, "ls9"))],
            mac_binding: vec![
                op(insert, mb(10, 1, "172.16.0.10", "00:00:00:00:10:0a")),
                op(insert, mb(11, 2, "10.9.0.5", "00:00:00:00:09:05")),
            ],
            ..SbDelta::default()
        }
    }

    const GRACE: Duration = Duration::from_secs(5);

    /// lr0 (UUID 1) with a neighbour, and ls9 (UUID 2) with one; SB rebuilt: both deleted with
    /// their neighbours, lr0 back as UUID 3, ls9 gone for good.
    #[test]
    fn neighbours_of_a_datapath_back_under_its_name_are_written_again_and_waited_for() {
        let mut view = SbSnapshot::default();
        let d = lr0_and_ls9(true);
        apply(&mut view, &d);
        let mut r = Restore::default();
        let t0 = Duration::from_secs(100);
        assert!(r.note(&view, &d, t0, GRACE, |_| true).is_empty());

        // The rebuild: every row deleted (one change), then lr0 written again (another).
        let del = lr0_and_ls9(false);
        apply(&mut view, &del);
        assert!(r.note(&view, &del, t0, GRACE, |_| true).is_empty());
        assert!(
            !r.waiting(&view, t0),
            "nothing is back yet: nothing to wait for"
        );

        let mut back = SbDelta::default();
        back.datapath_binding.push(RowDelta::Insert(dp(3, "lr0")));
        apply(&mut view, &back);
        let t1 = t0 + Duration::from_millis(3);
        // Not watched by this chassis: not written (another chassis does).
        assert!(
            r.clone()
                .note(&view, &back, t1, GRACE, |_| false)
                .is_empty()
        );
        let add = r.note(&view, &back, t1, GRACE, |_| true);
        assert_eq!(
            add,
            vec![(
                (
                    "lr0".to_string(),
                    "lr0-ext".to_string(),
                    "172.16.0.10".to_string()
                ),
                "00:00:00:00:10:0a".to_string()
            )]
        );
        assert!(r.waiting(&view, t1), "programs wait for lr0's neighbour");
        assert_eq!(r.deadline(), Some(t1 + GRACE));
        // Written on the new datapath: no more waiting.
        let mut w = SbDelta::default();
        w.mac_binding.push(RowDelta::Insert(mb(
            12,
            3,
            "172.16.0.10",
            "00:00:00:00:10:0a",
        )));
        apply(&mut view, &w);
        assert!(!r.waiting(&view, t1 + Duration::from_millis(1)));
        // ls9 never came back: forgotten after the grace, never waited for.
        let later = t0 + GRACE + Duration::from_millis(1);
        let mut ls9 = SbDelta::default();
        ls9.datapath_binding.push(RowDelta::Insert(dp(4, "ls9")));
        apply(&mut view, &ls9);
        assert!(r.note(&view, &ls9, later, GRACE, |_| true).is_empty());
        assert!(!r.waiting(&view, later));
    }

    #[test]
    fn a_wait_ends_with_its_grace_even_if_the_write_never_lands() {
        let mut view = SbDelta::default();
        view.datapath_binding.push(RowDelta::Delete(dp(1, "lr0")));
        view.mac_binding.push(RowDelta::Delete(mb(
            10,
            1,
            "172.16.0.10",
            "00:00:00:00:10:0a",
        )));
        let mut sb = SbSnapshot::default();
        let mut back = SbDelta::default();
        back.datapath_binding.push(RowDelta::Insert(dp(3, "lr0")));
        apply(&mut sb, &back);
        let mut r = Restore::default();
        let t0 = Duration::from_secs(1);
        // Deleted and back in one change (the old UUID gone, the name present).
        assert_eq!(r.note(&sb, &view, t0, GRACE, |_| true).len(), 1);
        assert!(r.waiting(&sb, t0 + GRACE - Duration::from_millis(1)));
        assert!(!r.waiting(&sb, t0 + GRACE));
    }

    /// A neighbour deleted while its datapath stays (aged out, or its port deleted) is not
    /// written again.
    #[test]
    fn a_neighbour_deleted_alone_stays_deleted() {
        let mut sb = SbSnapshot::default();
        let mut d = SbDelta::default();
        d.datapath_binding.push(RowDelta::Insert(dp(1, "lr0")));
        apply(&mut sb, &d);
        let mut del = SbDelta::default();
        del.mac_binding.push(RowDelta::Delete(mb(
            10,
            1,
            "172.16.0.10",
            "00:00:00:00:10:0a",
        )));
        let mut r = Restore::default();
        assert!(
            r.note(&sb, &del, Duration::ZERO, GRACE, |_| true)
                .is_empty()
        );
        assert!(!r.waiting(&sb, Duration::ZERO));
    }
}
