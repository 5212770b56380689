//! The chassis's local database as the controller reads and writes it (ovn-controller's part
//! of OVS's `Open_vSwitch` database, typed by `hf_model::vswitch`). Sans-I/O: the shell keeps
//! the replica and sends the operations built here.
//!
//! What it does:
//! - [`Settings::read`]: the chassis settings ovn-controller takes from `Open_vSwitch
//!   external_ids` (`system-id`, `ovn-remote`, `ovn-encap-ip`, `ovn-encap-type`, `hostname`,
//!   `ovn-monitor-all`), command-line flags overriding each one; what is still missing is named.
//! - [`installed_ops`]: `Interface external_ids:ovn-installed="true"` (and
//!   `ovn-installed-ts`, the time in ms, as ovn-controller writes it) on every interface whose
//!   logical port's flows the datapath runs, and its removal from one whose port's flows are
//!   gone: what OVN-Kubernetes' CNI waits for before it reports a pod's network ready.
//!
//! What it does not do: apply a changed `ovn-remote` or `ovn-encap-ip` to a running
//! controller (the shell logs that it needs a restart), or create the integration bridge.

use std::collections::BTreeSet;

use hf_model::VswitchSnapshot;
use serde_json::{Value, json};

/// The chassis settings, from flags and the local database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `external_ids:system-id` (`--system-id`).
    pub system_id: Option<String>,
    /// `external_ids:ovn-remote` (`--ovnsb-db`).
    pub remote: Option<String>,
    /// `external_ids:ovn-encap-ip` (`--encap-ip`).
    pub encap_ip: Option<String>,
    /// `external_ids:ovn-encap-type` (`--encap-type`; `geneve` when neither says).
    pub encap_type: Option<String>,
    /// `external_ids:hostname` (`--hostname`).
    pub hostname: Option<String>,
    /// `external_ids:ovn-monitor-all` (`--monitor-all`).
    pub monitor_all: bool,
}

impl Settings {
    /// `flags` completed with what the local database's `Open_vSwitch` row says (a flag wins
    /// over the row; an empty value counts as unset).
    pub fn read(flags: &Settings, snap: &VswitchSnapshot) -> Settings {
        let ext = |k: &str| {
            snap.open_vswitch_row()
                .and_then(|r| r.external_ids.get(k))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let pick = |flag: &Option<String>, k: &str| flag.clone().or_else(|| ext(k));
        Settings {
            system_id: pick(&flags.system_id, "system-id"),
            remote: pick(&flags.remote, "ovn-remote"),
            // ovn-encap-ip may list several addresses; holdfast uses the first.
            encap_ip: pick(&flags.encap_ip, "ovn-encap-ip")
                .map(|s| s.split(',').next().unwrap_or_default().trim().to_string()),
            encap_type: pick(&flags.encap_type, "ovn-encap-type"),
            hostname: pick(&flags.hostname, "hostname"),
            monitor_all: flags.monitor_all || ext("ovn-monitor-all").as_deref() == Some("true"),
        }
    }

    /// The keys (`external_ids:` spelling) of the required settings that are missing.
    pub fn missing(&self) -> Vec<&'static str> {
        [
            ("system-id", self.system_id.is_none()),
            ("ovn-remote", self.remote.is_none()),
            ("ovn-encap-ip", self.encap_ip.is_none()),
        ]
        .into_iter()
        .filter_map(|(k, m)| m.then_some(k))
        .collect()
    }

    /// The settings a running controller cannot take over without a restart that differ
    /// between `self` (what it runs with) and `now`, as `key: old -> new`.
    pub fn needs_restart(&self, now: &Settings) -> Vec<String> {
        let mut out = Vec::new();
        let mut cmp = |k: &str, a: &Option<String>, b: &Option<String>| {
            if b.is_some() && a != b {
                out.push(format!(
                    "{k}: {} -> {}",
                    a.as_deref().unwrap_or("(unset)"),
                    b.as_deref().unwrap_or("(unset)")
                ));
            }
        };
        cmp("system-id", &self.system_id, &now.system_id);
        cmp("ovn-remote", &self.remote, &now.remote);
        cmp("ovn-encap-ip", &self.encap_ip, &now.encap_ip);
        cmp("ovn-encap-type", &self.encap_type, &now.encap_type);
        out
    }
}

/// Whether the local database belongs to `chassis`: its `system-id` is `chassis` or unset. A
/// controller given another chassis's database writes nothing to it.
pub fn belongs_to(snap: &VswitchSnapshot, chassis: &str) -> bool {
    snap.open_vswitch_row()
        .and_then(|r| r.external_ids.get("system-id"))
        .is_none_or(|s| s.is_empty() || s == chassis)
}

/// The operations that make `external_ids:ovn-installed` say which interfaces' logical ports
/// (`external_ids:iface-id`) are in `installed`; `now_ms` is written as `ovn-installed-ts`.
/// Empty when every interface already says so.
pub fn installed_ops(
    snap: &VswitchSnapshot,
    installed: &BTreeSet<String>,
    now_ms: i64,
) -> Vec<Value> {
    let mut ops = Vec::new();
    for i in snap.interface().values() {
        let Some(port) = i.external_ids.get("iface-id") else {
            continue;
        };
        let marked = i.external_ids.get("ovn-installed").map(String::as_str) == Some("true");
        let want = installed.contains(port.as_str());
        let where_ = json!([["_uuid", "==", ["uuid", i.uuid.to_string()]]]);
        if want && !marked {
            ops.push(json!({
                "op": "mutate", "table": "Interface", "where": where_,
                "mutations": [
                    ["external_ids", "delete", ["set", ["ovn-installed", "ovn-installed-ts"]]],
                    ["external_ids", "insert", ["map", [
                        ["ovn-installed", "true"],
                        ["ovn-installed-ts", now_ms.to_string()],
                    ]]],
                ],
            }));
        } else if !want && i.external_ids.get("ovn-installed").is_some() {
            ops.push(json!({
                "op": "mutate", "table": "Interface", "where": where_,
                "mutations": [
                    ["external_ids", "delete", ["set", ["ovn-installed", "ovn-installed-ts"]]],
                ],
            }));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hf_ovsdb::db::Database;
    use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};

    use super::*;

    fn run(db: &mut Database, ops: Vec<Value>) {
        match execute(db, &ops, &NoLocks) {
            TxnOutcome::Commit { delta, .. } => db.apply(&delta),
            other => panic!("transaction failed: {other:?}"),
        }
    }

    fn db(ext: Value, ifaces: &[(&str, Value)]) -> Database {
        let mut db = Database::new(Arc::clone(hf_model::vswitch::schema()), 3);
        // Ports and interfaces are not root tables: a bridge the root row holds keeps them.
        let ports: Vec<Value> = (0..ifaces.len())
            .map(|n| json!(["named-uuid", format!("p{n}")]))
            .collect();
        let mut ops = vec![
            json!({"op": "insert", "table": "Open_vSwitch",
                "row": {"external_ids": ext, "bridges": ["named-uuid", "br"]}}),
            json!({"op": "insert", "table": "Bridge", "uuid-name": "br",
                "row": {"name": "br-int", "ports": ["set", ports]}}),
        ];
        for (n, (name, ext)) in ifaces.iter().enumerate() {
            ops.push(
                json!({"op": "insert", "table": "Interface", "uuid-name": format!("i{n}"),
                "row": {"name": name, "external_ids": ext}}),
            );
            ops.push(
                json!({"op": "insert", "table": "Port", "uuid-name": format!("p{n}"),
                "row": {"name": name, "interfaces": ["named-uuid", format!("i{n}")]}}),
            );
        }
        run(&mut db, ops);
        db
    }

    fn snap(db: &Database) -> VswitchSnapshot {
        VswitchSnapshot::from_db(db).expect("snapshot")
    }

    #[test]
    fn settings_come_from_external_ids_and_flags_override_them() {
        let d = db(
            json!([
                "map",
                [
                    ["system-id", "hv1"],
                    ["ovn-remote", "tcp:10.0.0.1:6642"],
                    ["ovn-encap-ip", "192.0.2.1,192.0.2.9"],
                    ["ovn-encap-type", "geneve"],
                    ["ovn-monitor-all", "true"],
                    ["hostname", " "]
                ]
            ]),
            &[],
        );
        let s = Settings::read(&Settings::default(), &snap(&d));
        assert_eq!(s.system_id.as_deref(), Some("hv1"));
        assert_eq!(s.remote.as_deref(), Some("tcp:10.0.0.1:6642"));
        assert_eq!(s.encap_ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(s.encap_type.as_deref(), Some("geneve"));
        assert_eq!(s.hostname, None);
        assert!(s.monitor_all);
        assert!(s.missing().is_empty());
        let flags = Settings {
            system_id: Some("hv9".into()),
            encap_ip: Some("198.51.100.1".into()),
            ..Settings::default()
        };
        let s2 = Settings::read(&flags, &snap(&d));
        assert_eq!(s2.system_id.as_deref(), Some("hv9"));
        assert_eq!(s2.encap_ip.as_deref(), Some("198.51.100.1"));
        assert_eq!(s2.remote.as_deref(), Some("tcp:10.0.0.1:6642"));
        assert_eq!(
            s.needs_restart(&s2),
            [
                "system-id: hv1 -> hv9",
                "ovn-encap-ip: 192.0.2.1 -> 198.51.100.1"
            ]
        );
        let empty = Settings::read(&Settings::default(), &snap(&db(json!(["map", []]), &[])));
        assert_eq!(empty.missing(), ["system-id", "ovn-remote", "ovn-encap-ip"]);
        assert!(belongs_to(&snap(&d), "hv1"));
        assert!(!belongs_to(&snap(&d), "hv2"));
        assert!(belongs_to(&snap(&db(json!(["map", []]), &[])), "hv2"));
    }

    #[test]
    fn ovn_installed_follows_the_installed_ports_and_is_written_once() {
        let mut d = db(
            json!(["map", []]),
            &[
                ("tap0", json!(["map", [["iface-id", "vm1"]]])),
                (
                    "tap1",
                    json!([
                        "map",
                        [
                            ["iface-id", "vm2"],
                            ["ovn-installed", "true"],
                            ["ovn-installed-ts", "5"],
                            ["attached-mac", "0a:00:00:00:00:02"]
                        ]
                    ]),
                ),
                (
                    "tap2",
                    json!(["map", [["attached-mac", "0a:00:00:00:00:03"]]]),
                ),
            ],
        );
        let installed = BTreeSet::from(["vm1".to_string()]);
        let ops = installed_ops(&snap(&d), &installed, 1234);
        assert_eq!(ops.len(), 2, "{ops:#?}");
        run(&mut d, ops);
        let s = snap(&d);
        let ext = |n: &str| {
            s.interface_by_name(n)
                .unwrap()
                .external_ids
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ext("tap0"),
            [
                "iface-id=vm1",
                "ovn-installed=true",
                "ovn-installed-ts=1234"
            ]
        );
        assert_eq!(
            ext("tap1"),
            ["attached-mac=0a:00:00:00:00:02", "iface-id=vm2"]
        );
        assert_eq!(ext("tap2"), ["attached-mac=0a:00:00:00:00:03"]);
        assert!(installed_ops(&s, &installed, 9999).is_empty());
        // The port's flows go: the mark goes.
        let ops = installed_ops(&s, &BTreeSet::new(), 9999);
        run(&mut d, ops);
        assert_eq!(ext_of(&snap(&d), "tap0"), ["iface-id=vm1"]);
    }

    fn ext_of(s: &VswitchSnapshot, n: &str) -> Vec<String> {
        s.interface_by_name(n)
            .unwrap()
            .external_ids
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }
}
