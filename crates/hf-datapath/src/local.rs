//! The chassis's local database as the datapath reads and writes it: ovs-vswitchd's part of
//! the `Open_vSwitch` database (OVS's `vswitch.ovsschema`, typed by `hf_model::vswitch`).
//! Sans-I/O: the daemon's shell keeps the replica, opens the interfaces and sends the
//! transactions this module builds.
//!
//! What it does:
//! - [`plan`]: which interfaces of the integration bridge (`Open_vSwitch
//!   external_ids:ovn-bridge`, `br-int` by default) become which datapath ports. An interface
//!   of type `""`/`system` with `external_ids:iface-id=P` is attached to logical port P (its
//!   MAC from `external_ids:attached-mac`, as os-vif and OVN-Kubernetes write it); one without
//!   an `iface-id` is opened by nobody and gets an ofport, as OVS gives one to a port no flow
//!   uses; everything holdfast cannot serve is refused with a reason that goes to the row's
//!   `error` column (other interface types, interfaces on other bridges, a second interface
//!   with the same `iface-id`).
//! - [`Ofports`]: OpenFlow port numbers as ovs-vswitchd hands them out (the number a row
//!   already has when it is free, else `ofport_request`, else the lowest free one; `-1` for an
//!   interface that failed), stable for a name while the datapath runs.
//! - [`write_ops`]: the `update` operations that bring each interface's `ofport`, `ifindex`,
//!   `mac_in_use`, `mtu`, `admin_state`, `link_state` and `error` to what the datapath
//!   observed, and `Open_vSwitch.cur_cfg` to `next_cfg` once every interface of the
//!   configuration was tried (what `ovs-vsctl` without `--no-wait` waits for). Only columns
//!   that differ are written, so a write never causes another.
//!
//! What it does not do: open interfaces (the shell's AF_PACKET ports), create the integration
//! bridge (the controller's job, as ovn-controller's), or serve bridges other than the
//! integration bridge, internal ports (tap devices), patch ports or tunnel ports (refused,
//! each with its reason in `Interface.error`).

use std::collections::{BTreeMap, BTreeSet};

use hf_model::vswitch::{Interface, InterfaceAdminState, InterfaceLinkState};
use hf_model::{RowRef, VswitchSnapshot};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// The integration bridge's name when `Open_vSwitch external_ids:ovn-bridge` is unset.
pub const DEFAULT_BRIDGE: &str = "br-int";

/// OVS's OpenFlow port number of an interface that failed.
pub const OFPORT_FAILED: i64 = -1;

/// The highest OpenFlow port number OVS hands out (`ofport_request`'s range).
const OFPORT_MAX: i64 = 65279;

/// What the datapath does with one interface row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Open it and attach it to the logical port `iface_id`.
    Attach {
        /// The logical port (`external_ids:iface-id`).
        iface_id: String,
        /// `external_ids:attached-mac`, when it is a MAC.
        mac: Option<[u8; 6]>,
    },
    /// On the bridge without an `iface-id`: an ofport and nothing else.
    Unbound,
    /// Not served: the reason, written to `Interface.error`.
    Refused(String),
}

/// One interface row and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The row.
    pub uuid: Uuid,
    /// `Interface.name`: the network device.
    pub name: String,
    /// What to do with it.
    pub role: Role,
}

/// What the local database asks of the datapath.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The `Open_vSwitch` row (none before `ovs-vsctl init` or an empty database).
    pub root: Option<Uuid>,
    /// `Open_vSwitch.next_cfg`.
    pub next_cfg: i64,
    /// The integration bridge's name.
    pub bridge: String,
    /// Whether the integration bridge exists.
    pub bridge_found: bool,
    /// `Open_vSwitch external_ids:system-id`.
    pub system_id: Option<String>,
    /// Every interface row of every bridge, by name (an interface's name is unique).
    pub interfaces: BTreeMap<String, Planned>,
}

impl Plan {
    /// The interfaces to open, with their logical port and MAC, by device name.
    pub fn attached(&self) -> impl Iterator<Item = (&str, &str, Option<[u8; 6]>)> {
        self.interfaces.values().filter_map(|p| match &p.role {
            Role::Attach { iface_id, mac } => Some((p.name.as_str(), iface_id.as_str(), *mac)),
            _ => None,
        })
    }
}

/// Parses a MAC as OVS writes it (`0a:00:00:00:00:01`, or one-digit groups), with the
/// logical-flow lexer's rules.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let b = u64::try_from(hf_expr::lexer::parse_mac(s)?)
        .ok()?
        .to_be_bytes();
    Some([b[2], b[3], b[4], b[5], b[6], b[7]])
}

fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The roles of every interface in `snap`.
pub fn plan(snap: &VswitchSnapshot) -> Plan {
    let root = snap.open_vswitch_row();
    let bridge = root
        .and_then(|r| r.external_ids.get("ovn-bridge"))
        .filter(|b| !b.is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
    let mut out = Plan {
        root: root.map(|r| r.uuid),
        next_cfg: root.map_or(0, |r| r.next_cfg),
        bridge_found: snap.bridge_by_name(&bridge).is_some(),
        system_id: root
            .and_then(|r| r.external_ids.get("system-id"))
            .filter(|s| !s.is_empty())
            .cloned(),
        bridge,
        interfaces: BTreeMap::new(),
    };
    // By name, so that which of two interfaces with one iface-id wins does not depend on
    // UUIDs (a rebuilt database keeps the same winner).
    let mut by_name: Vec<&Interface> = snap.interface().values().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
    for i in by_name {
        let bridge_of = snap
            .port_by_interfaces(RowRef::new(i.uuid))
            .and_then(|p| snap.bridge_by_ports(RowRef::new(p.uuid)));
        let role = role_of(
            i,
            bridge_of.map(|b| b.name.as_str()),
            &out.bridge,
            &mut claimed,
        );
        out.interfaces.insert(
            i.name.clone(),
            Planned {
                uuid: i.uuid,
                name: i.name.clone(),
                role,
            },
        );
    }
    out
}

fn role_of<'a>(
    i: &'a Interface,
    bridge: Option<&str>,
    integration: &str,
    claimed: &mut BTreeMap<&'a str, &'a str>,
) -> Role {
    match bridge {
        None => return Role::Refused("the interface is on no bridge's port".into()),
        Some(b) if b != integration => {
            return Role::Refused(format!(
                "holdfast datapath serves only the integration bridge {integration}, \
                 not bridge {b}"
            ));
        }
        Some(_) => {}
    }
    if !matches!(i.type_.as_str(), "" | "system") {
        return Role::Refused(format!(
            "holdfast datapath does not support interface type \"{}\" (system \
             interfaces only, opened with AF_PACKET)",
            i.type_
        ));
    }
    let Some(iface_id) = i.external_ids.get("iface-id").filter(|s| !s.is_empty()) else {
        return Role::Unbound;
    };
    if let Some(first) = claimed.get(iface_id.as_str()) {
        return Role::Refused(format!(
            "interface {first} is already attached to logical port {iface_id}"
        ));
    }
    claimed.insert(iface_id, &i.name);
    Role::Attach {
        iface_id: iface_id.clone(),
        mac: i
            .external_ids
            .get("attached-mac")
            .and_then(|m| parse_mac(m)),
    }
}

/// OpenFlow port numbers by interface name, as ovs-vswitchd hands them out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ofports {
    by_name: BTreeMap<String, i64>,
}

impl Ofports {
    /// Assigns a number to every interface of `plan` that has none (refused ones get
    /// [`OFPORT_FAILED`]; so does an interface in `failed`, one that could not be opened) and
    /// forgets interfaces that are gone. A number is kept while its interface exists; a new
    /// one takes the number its row holds (a restarted datapath keeps the numbers), else its
    /// `ofport_request`, else the lowest free one.
    pub fn assign(&mut self, snap: &VswitchSnapshot, plan: &Plan, failed: &BTreeSet<String>) {
        self.by_name.retain(|n, _| plan.interfaces.contains_key(n));
        // A failed interface gives its number back.
        for (n, p) in &plan.interfaces {
            if matches!(p.role, Role::Refused(_)) || failed.contains(n) {
                self.by_name.insert(n.clone(), OFPORT_FAILED);
            }
        }
        let mut used: BTreeSet<i64> = self.by_name.values().copied().filter(|&o| o > 0).collect();
        let wanting: Vec<&Planned> = plan
            .interfaces
            .values()
            .filter(|p| self.by_name.get(&p.name).is_none_or(|&o| o <= 0))
            .filter(|p| !matches!(p.role, Role::Refused(_)) && !failed.contains(&p.name))
            .collect();
        let row = |p: &Planned| snap.interface().get(&p.uuid);
        // Rows' own numbers first, then requests, so that a request never takes a number an
        // existing row already holds.
        let mut pending = Vec::new();
        for p in wanting {
            let held = row(p)
                .and_then(|r| r.ofport)
                .filter(|o| (1..=OFPORT_MAX).contains(o));
            match held {
                Some(o) if used.insert(o) => {
                    self.by_name.insert(p.name.clone(), o);
                }
                _ => pending.push(p),
            }
        }
        let mut rest = Vec::new();
        for p in pending {
            match row(p).and_then(|r| r.ofport_request) {
                Some(o) if used.insert(o) => {
                    self.by_name.insert(p.name.clone(), o);
                }
                _ => rest.push(p),
            }
        }
        let mut next = 1;
        for p in rest {
            while used.contains(&next) {
                next += 1;
            }
            if next > OFPORT_MAX {
                self.by_name.insert(p.name.clone(), OFPORT_FAILED);
                continue;
            }
            used.insert(next);
            self.by_name.insert(p.name.clone(), next);
        }
    }

    /// The number of `name`.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.by_name.get(name).copied()
    }
}

/// What the datapath saw of one network device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The kernel's interface index (none when the device does not exist).
    pub ifindex: Option<u32>,
    /// The device's MAC.
    pub mac: Option<[u8; 6]>,
    /// The device's MTU.
    pub mtu: Option<u32>,
    /// Administratively up (IFF_UP).
    pub admin_up: bool,
    /// Carrier (IFF_RUNNING / operstate up).
    pub link_up: bool,
    /// Why it could not be opened, in OVS's words (`could not open network device tap0 (No
    /// such device)`).
    pub error: Option<String>,
}

/// The `update` operations that make the rows say what `observed` and `ofports` say (only
/// columns that differ), and `cur_cfg = next_cfg` when every interface the plan attaches or
/// leaves unbound has an observation. Empty when nothing differs.
pub fn write_ops(
    snap: &VswitchSnapshot,
    plan: &Plan,
    ofports: &Ofports,
    observed: &BTreeMap<String, Observed>,
) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut complete = true;
    for p in plan.interfaces.values() {
        let Some(row) = snap.interface().get(&p.uuid) else {
            continue;
        };
        let mut set = Map::new();
        let want_ofport = ofports.get(&p.name);
        let (error, seen) = match &p.role {
            Role::Refused(why) => (Some(why.clone()), None),
            Role::Attach { .. } | Role::Unbound => match observed.get(&p.name) {
                Some(o) => (o.error.clone(), Some(o)),
                None => {
                    complete = false;
                    continue;
                }
            },
        };
        if let Some(o) = want_ofport
            && row.ofport != Some(o)
        {
            set.insert("ofport".into(), json!(o));
        }
        if row.error != error {
            set.insert("error".into(), opt(error.map(Value::from)));
        }
        let ok = seen.filter(|o| o.error.is_none());
        let ifindex = ok.and_then(|o| o.ifindex).map(i64::from);
        if row.ifindex != ifindex {
            set.insert("ifindex".into(), opt(ifindex.map(Value::from)));
        }
        let mac = ok.and_then(|o| o.mac).map(format_mac);
        if row.mac_in_use != mac {
            set.insert("mac_in_use".into(), opt(mac.map(Value::from)));
        }
        let mtu = ok.and_then(|o| o.mtu).map(i64::from);
        if row.mtu != mtu {
            set.insert("mtu".into(), opt(mtu.map(Value::from)));
        }
        let updown = |up: bool| {
            if up {
                InterfaceAdminState::Up
            } else {
                InterfaceAdminState::Down
            }
        };
        let admin = ok.map(|o| updown(o.admin_up));
        if row.admin_state != admin {
            set.insert(
                "admin_state".into(),
                opt(admin.map(|a| Value::from(a.as_str()))),
            );
        }
        let link = ok.map(|o| {
            if o.link_up {
                InterfaceLinkState::Up
            } else {
                InterfaceLinkState::Down
            }
        });
        if row.link_state != link {
            set.insert(
                "link_state".into(),
                opt(link.map(|l| Value::from(l.as_str()))),
            );
        }
        if !set.is_empty() {
            ops.push(json!({
                "op": "update",
                "table": "Interface",
                "where": [["_uuid", "==", ["uuid", p.uuid.to_string()]]],
                "row": set,
            }));
        }
    }
    if let Some(root) = plan.root
        && complete
        && snap
            .open_vswitch()
            .get(&root)
            .is_some_and(|r| r.cur_cfg != plan.next_cfg)
    {
        ops.push(json!({
            "op": "update",
            "table": "Open_vSwitch",
            "where": [["_uuid", "==", ["uuid", root.to_string()]]],
            "row": {"cur_cfg": plan.next_cfg},
        }));
    }
    ops
}

/// An optional column's value: the value, or the empty set.
fn opt(v: Option<Value>) -> Value {
    v.unwrap_or_else(|| json!(["set", []]))
}

#[cfg(test)]
mod tests;
