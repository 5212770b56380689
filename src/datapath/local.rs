//! The datapath's replica of the chassis's local OVS database (its positional `DATABASE`, as
//! ovs-vswitchd takes it): which interfaces to open for which logical ports, and what it saw
//! of them written back ([`hf_datapath::local`] decides; this moves it).

use std::collections::{BTreeMap, BTreeSet};

use hf_controller::daemon::local::Settings;
use hf_datapath::local::{Observed, Ofports, Plan, plan, write_ops};
use hf_model::VswitchSnapshot;

use crate::localdb::Replica;

/// The local database's replica and the write-back state.
pub struct LocalDb {
    db: Replica,
    chassis: String,
    /// The rows changed since the last plan.
    changed: bool,
    /// The observations changed since the last write (or the rows did).
    dirty: bool,
    ofports: Ofports,
    foreign: Option<bool>,
}

/// The columns the datapath reads and writes, per table.
const TABLES: &[(&str, &[&str])] = &[
    (
        "Open_vSwitch",
        &["bridges", "external_ids", "next_cfg", "cur_cfg"],
    ),
    ("Bridge", &["name", "ports"]),
    ("Port", &["name", "interfaces"]),
    (
        "Interface",
        &[
            "name",
            "type",
            "external_ids",
            "ofport",
            "ofport_request",
            "ifindex",
            "mac_in_use",
            "mtu",
            "admin_state",
            "link_state",
            "error",
        ],
    ),
];

impl LocalDb {
    /// Starts the replica of `remote` for the datapath of `chassis`; it keeps reconnecting
    /// while the database is not there.
    pub fn spawn(remote: &str, chassis: &str) -> Self {
        LocalDb {
            db: Replica::spawn(remote, TABLES),
            chassis: chassis.to_string(),
            changed: false,
            dirty: false,
            ofports: Ofports::default(),
            foreign: None,
        }
    }

    /// The next event of the replica, taken in; false when the replica stopped.
    pub async fn next(&mut self) -> bool {
        match self.db.next().await {
            Some(changed) => {
                self.changed |= changed;
                true
            }
            None => false,
        }
    }

    /// The plan, when the rows changed since the last one (none for a database that belongs
    /// to another chassis: its `system-id` names another one).
    pub fn plan_if_changed(&mut self) -> Option<Plan> {
        if !self.db.synced || !std::mem::take(&mut self.changed) {
            return None;
        }
        self.dirty = true;
        let p = self.db.with(plan);
        let foreign = p.system_id.as_deref().is_some_and(|s| s != self.chassis);
        if self.foreign != Some(foreign) {
            if foreign {
                tracing::warn!(
                    "local database {}: external_ids:system-id={} is not this datapath's \
                     chassis {}: its interfaces are left alone",
                    self.db.remote,
                    p.system_id.as_deref().unwrap_or_default(),
                    self.chassis
                );
            }
            self.foreign = Some(foreign);
        }
        if foreign {
            return Some(Plan::default());
        }
        if p.root.is_some() && !p.bridge_found {
            tracing::warn!(
                "local database {}: no integration bridge {} (ovs-vsctl add-br {})",
                self.db.remote,
                p.bridge,
                p.bridge
            );
        }
        Some(p)
    }

    /// Whether [`LocalDb::write`] would write now (the shell then gathers the observations).
    pub fn wants_write(&self) -> bool {
        self.db.synced
            && (self.dirty || self.db.last_write_failed())
            && self.foreign != Some(true)
            && !self.db.writing()
    }

    /// Something observed changed: write at the next [`LocalDb::write`].
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Writes what the datapath saw (`observed`; `failed`: interfaces that could not be
    /// opened) to the rows of `plan`, when anything changed since the last write and no write
    /// is on its way.
    pub fn write(
        &mut self,
        plan: &Plan,
        observed: &BTreeMap<String, Observed>,
        failed: &BTreeSet<String>,
    ) {
        if !self.wants_write() || plan.root.is_none() {
            return;
        }
        self.dirty = false;
        self.db.with(|m| self.ofports.assign(m, plan, failed));
        let (plan, ofports, observed) = (plan.clone(), self.ofports.clone(), observed.clone());
        if self
            .db
            .with(|m| write_ops(m, &plan, &ofports, &observed))
            .is_empty()
        {
            return;
        }
        self.db.write(
            "the interfaces",
            Box::new(move |m: &VswitchSnapshot| write_ops(m, &plan, &ofports, &observed)),
        );
    }
}

/// The chassis name and encap IP from the local database, for a datapath whose command line
/// lacks them: reads `remote` until its `Open_vSwitch external_ids` has `system-id` and
/// `ovn-encap-ip` (saying once what it waits for), as the controller reads them
/// ([`Settings::read`]).
pub fn read_settings(
    remote: &str,
    chassis: Option<&str>,
    encap_ip: Option<std::net::IpAddr>,
) -> anyhow::Result<(String, std::net::IpAddr)> {
    let flags = Settings {
        system_id: chassis.map(str::to_string),
        encap_ip: encap_ip.map(|i| i.to_string()),
        ..Settings::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut db = Replica::spawn(remote, &[("Open_vSwitch", &["external_ids"])]);
        let mut said = false;
        loop {
            let got = db.with(|m| Settings::read(&flags, m));
            if let (Some(name), Some(ip)) = (got.system_id, got.encap_ip) {
                let ip = ip.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "local database {remote}: external_ids:ovn-encap-ip={ip} is not an IP \
                         address"
                    )
                })?;
                return Ok((name, ip));
            }
            if !said {
                tracing::info!(
                    "waiting for the local database {remote} to name the chassis \
                     (external_ids:system-id) and its encap IP (external_ids:ovn-encap-ip), \
                     or give --chassis and --encap-ip"
                );
                said = true;
            }
            if db.next().await.is_none() {
                anyhow::bail!("local database {remote}: the replica stopped");
            }
        }
    })
}
