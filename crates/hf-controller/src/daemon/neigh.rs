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

use hf_model::SbSnapshot;
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
