//! The controller's replica of the chassis's local OVS database (its positional
//! `OVS-DATABASE`): the chassis settings it starts with, and `ovn-installed` written back
//! ([`hf_controller::daemon::local`] decides; this moves it).

use std::collections::BTreeSet;
use std::sync::Arc;

use hf_controller::daemon::local::{Settings, belongs_to, installed_ops};
use hf_model::VswitchSnapshot;
use hf_ovsdb_net::client::{Client, Config, Event, TableSelect, TxnOutcome};
use tokio::sync::mpsc::UnboundedReceiver;

use std::sync::atomic::{AtomicU8, Ordering};

const IDLE: u8 = 0;
const WRITING: u8 = 1;
/// The last write failed: write again.
const FAILED: u8 = 2;

/// The local database's replica and what was last written to it.
pub struct LocalDb {
    remote: String,
    client: Arc<Client<VswitchSnapshot>>,
    events: UnboundedReceiver<Event<VswitchSnapshot>>,
    synced: bool,
    /// The installed ports last written, and whether the rows changed since.
    written: Option<BTreeSet<String>>,
    dirty: bool,
    /// The write on its way: [`IDLE`], [`WRITING`] or [`FAILED`].
    writing: Arc<AtomicU8>,
    /// Logged once: the database belongs to another chassis.
    foreign_warned: bool,
    /// The settings the controller runs with (to tell the operator what needs a restart).
    running: Option<Settings>,
}

impl LocalDb {
    /// Starts the replica of `remote` (`unix:PATH`, `tcp:IP:PORT`); it keeps reconnecting
    /// while the database is not there.
    pub fn spawn(remote: &str) -> Self {
        let cfg = Config {
            tables: vec![
                TableSelect {
                    name: "Open_vSwitch".into(),
                    columns: Some(vec!["external_ids".into()]),
                    condition: None,
                },
                TableSelect {
                    name: "Interface".into(),
                    columns: Some(vec!["name".into(), "external_ids".into()]),
                    condition: None,
                },
            ],
            backoff_min_ms: 100,
            backoff_max_ms: 2_000,
            ..Config::default()
        };
        let (client, events) = Client::<VswitchSnapshot>::spawn(vec![remote.to_string()], cfg);
        LocalDb {
            remote: remote.to_string(),
            client: Arc::new(client),
            events,
            synced: false,
            written: None,
            dirty: true,
            writing: Arc::default(),
            foreign_warned: false,
            running: None,
        }
    }

    /// The remote's name.
    pub fn remote(&self) -> &str {
        &self.remote
    }

    /// Waits for the replica's next event and takes it in; false when the replica stopped.
    pub async fn next(&mut self) -> bool {
        match self.events.recv().await {
            Some(e) => {
                self.take(e);
                true
            }
            None => false,
        }
    }

    fn take(&mut self, e: Event<VswitchSnapshot>) {
        match e {
            Event::Resynced { .. } => {
                self.synced = true;
                self.dirty = true;
            }
            Event::Changes(_) => self.dirty = true,
            Event::Disconnected { reason, .. } => {
                if self.synced {
                    tracing::warn!("local database {}: {reason}", self.remote);
                } else {
                    tracing::debug!("local database {}: {reason}", self.remote);
                }
                self.synced = false;
            }
            Event::Warning(w) => tracing::warn!("local database {}: {w}", self.remote),
            _ => {}
        }
    }

    /// `flags` completed from the database, once it is in sync (none before).
    pub fn settings(&self, flags: &Settings) -> Option<Settings> {
        self.synced
            .then(|| self.client.with(|r| Settings::read(flags, r.model())))
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

    /// Writes `ovn-installed` for `installed` when it or the rows changed since the last
    /// write (one write at a time; `chassis` must own the database).
    pub fn sync_installed(&mut self, chassis: &str, installed: BTreeSet<String>, flags: &Settings) {
        if !self.synced {
            return;
        }
        if self.dirty {
            self.check_settings(flags);
        }
        if !self.dirty && self.written.as_ref() == Some(&installed) {
            return;
        }
        match self.writing.load(Ordering::Acquire) {
            WRITING => return,
            FAILED => self.written = None,
            _ => {}
        }
        if !self.client.with(|r| belongs_to(r.model(), chassis)) {
            if !self.foreign_warned {
                tracing::warn!(
                    "local database {}: external_ids:system-id names another chassis; \
                     holdfast controller for {chassis} writes nothing to it",
                    self.remote
                );
                self.foreign_warned = true;
            }
            self.dirty = false;
            return;
        }
        self.dirty = false;
        self.written = Some(installed.clone());
        self.writing.store(WRITING, Ordering::Release);
        let (client, writing, remote) = (
            Arc::clone(&self.client),
            Arc::clone(&self.writing),
            self.remote.clone(),
        );
        let chassis = chassis.to_string();
        tokio::spawn(async move {
            let (outcome, _) = client
                .transact(Box::new(move |m: &VswitchSnapshot| {
                    if belongs_to(m, &chassis) {
                        installed_ops(m, &installed, wall_ms())
                    } else {
                        Vec::new()
                    }
                }))
                .await;
            let next = if let TxnOutcome::Failed(e) = outcome {
                tracing::warn!("local database {remote}: writing ovn-installed failed: {e}");
                FAILED
            } else {
                IDLE
            };
            writing.store(next, Ordering::Release);
        });
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
