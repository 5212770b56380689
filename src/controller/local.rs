//! The controller's replica of the chassis's local OVS database (its positional
//! `OVS-DATABASE`): the chassis settings it starts with, and `ovn-installed` written back
//! ([`hf_controller::daemon::local`] decides; [`crate::localdb`] moves it).

use std::collections::BTreeSet;

use hf_controller::daemon::local::{Settings, belongs_to, installed_ops};
use hf_model::VswitchSnapshot;

use crate::localdb::Replica;

/// The local database's replica and what was last written to it.
pub struct LocalDb {
    db: Replica,
    /// The installed ports last written, their version, and whether the rows changed since.
    written: Option<BTreeSet<String>>,
    written_version: Option<u64>,
    dirty: bool,
    /// Logged once: the database belongs to another chassis.
    foreign_warned: bool,
    /// The settings the controller runs with (to tell the operator what needs a restart).
    running: Option<Settings>,
}

impl LocalDb {
    /// Starts the replica of `remote` (`unix:PATH`, `tcp:IP:PORT`); it keeps reconnecting
    /// while the database is not there.
    pub fn spawn(remote: &str) -> Self {
        LocalDb {
            db: Replica::spawn(
                remote,
                &[
                    ("Open_vSwitch", &["external_ids"]),
                    ("Interface", &["name", "external_ids"]),
                ],
            ),
            written: None,
            written_version: None,
            dirty: true,
            foreign_warned: false,
            running: None,
        }
    }

    /// The remote's name.
    pub fn remote(&self) -> &str {
        &self.db.remote
    }

    /// Waits for the replica's next event and takes it in; false when the replica stopped.
    pub async fn next(&mut self) -> bool {
        match self.db.next().await {
            Some(changed) => {
                self.dirty |= changed;
                true
            }
            None => false,
        }
    }

    /// `flags` completed from the database, once it is in sync (none before).
    pub fn settings(&self, flags: &Settings) -> Option<Settings> {
        self.db
            .synced
            .then(|| self.db.with(|m| Settings::read(flags, m)))
    }

    /// Remembers the settings the controller runs with.
    pub fn set_running(&mut self, s: Settings) {
        self.running = Some(s);
    }

    /// Logs settings that changed in the database since the start and need a restart.
    fn check_settings(&mut self, flags: &Settings) {
        let (Some(running), Some(now)) = (self.running.as_ref(), self.settings(flags)) else {
            return;
        };
        let changed = running.needs_restart(&now);
        if !changed.is_empty() {
            tracing::warn!(
                "local database: {} changed; holdfast controller takes it on restart",
                changed.join(", ")
            );
            self.running = Some(now);
        }
    }

    /// Writes `ovn-installed` for the installed ports (`installed`, copied only when their
    /// `version` moved or the rows changed) when they or the rows changed since the last
    /// write (one write at a time; `chassis` must own the database).
    pub fn sync_installed(
        &mut self,
        chassis: &str,
        version: u64,
        installed: impl FnOnce() -> BTreeSet<String>,
        flags: &Settings,
    ) {
        if !self.db.synced {
            return;
        }
        if !self.dirty && self.written_version == Some(version) && !self.db.last_write_failed() {
            return;
        }
        if self.dirty {
            self.check_settings(flags);
        }
        if self.db.writing() {
            return;
        }
        if self.db.last_write_failed() {
            self.written = None;
        }
        let installed = installed();
        self.written_version = Some(version);
        if !self.dirty && self.written.as_ref() == Some(&installed) {
            return;
        }
        if !self.db.with(|m| belongs_to(m, chassis)) {
            if !self.foreign_warned {
                tracing::warn!(
                    "local database {}: external_ids:system-id names another chassis; \
                     holdfast controller for {chassis} writes nothing to it",
                    self.db.remote
                );
                self.foreign_warned = true;
            }
            self.dirty = false;
            return;
        }
        self.dirty = false;
        self.written = Some(installed.clone());
        let chassis = chassis.to_string();
        self.db.write(
            "ovn-installed",
            Box::new(move |m: &VswitchSnapshot| {
                if belongs_to(m, &chassis) {
                    installed_ops(m, &installed, wall_ms())
                } else {
                    Vec::new()
                }
            }),
        );
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
