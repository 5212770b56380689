//! holdfast northd inside the world: [`hf_northd::daemon::Northd`] between an NB replica
//! ([`hf_model::NbSnapshot`]) and the lean SB view ([`hf_northd::daemon::SbView`]), driven the
//! way `src/northd` drives it (events in, `poll`, log drained), on the virtual clock.
//!
//! What it does not do: unixctl, TLS, several northds (one active instance; a restart drops it
//! and makes a new one, which must find SB already right and write nothing).

use std::time::Duration;

use hf_model::NbSnapshot;
use hf_northd::daemon::core::Level;
use hf_northd::daemon::{Config as CoreConfig, Northd, SbView};
use hf_ovsdb_net::client::{Config, Replica};

use super::db::{Db, DbLink, WALL_EPOCH_MS};

fn ms(now: Duration) -> u64 {
    now.as_millis() as u64
}

/// A northd and its two replicas.
pub struct NorthdNode {
    core: Northd,
    nb: Replica<NbSnapshot>,
    sb: Replica<SbView>,
    nb_link: DbLink,
    sb_link: DbLink,
    log: Vec<String>,
}

impl std::fmt::Debug for NorthdNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NorthdNode")
            .field("role", &self.core.role())
            .finish()
    }
}

impl NorthdNode {
    /// A northd that will connect on the next step.
    pub fn new(seed: u64, now: Duration) -> NorthdNode {
        let nb = Replica::new(
            Config {
                initial_changes: false,
                probe_interval_ms: None,
                ..Config::default()
            },
            ms(now),
        );
        let mut sb = Replica::new(
            Config {
                tables: SbView::tables(),
                probe_interval_ms: None,
                ..Config::default()
            },
            ms(now),
        );
        let mut core = Northd::new(CoreConfig {
            paused: false,
            seed,
            ..CoreConfig::default()
        });
        core.start(&mut sb);
        NorthdNode {
            core,
            nb,
            sb,
            nb_link: DbLink::new(),
            sb_link: DbLink::new(),
            log: Vec::new(),
        }
    }

    /// The core (stats, status, role).
    pub fn core(&self) -> &Northd {
        &self.core
    }

    /// Both replicas are in sync.
    pub fn is_synced(&self) -> bool {
        self.nb.is_synced() && self.sb.is_synced()
    }

    /// Moves messages and runs the core once; true when something moved.
    pub fn step(&mut self, db: &mut Db, now: Duration) -> bool {
        let mut moved = db.pump(&mut self.nb, &mut self.nb_link, now);
        moved |= db.pump(&mut self.sb, &mut self.sb_link, now);
        while let Some(e) = self.nb.poll_event() {
            moved = true;
            self.core.handle_nb_event(e);
        }
        while let Some(e) = self.sb.poll_event() {
            moved = true;
            self.core.handle_sb_event(e);
        }
        self.core.poll(
            &mut self.nb,
            &mut self.sb,
            ms(now),
            (WALL_EPOCH_MS + ms(now)) as i64,
        );
        while let Some((l, line)) = self.core.poll_log() {
            let l = match l {
                Level::Info => "info",
                Level::Warn => "warn",
                Level::Err => "err",
            };
            self.log.push(format!("northd|{l}|{line}"));
        }
        moved |= db.pump(&mut self.nb, &mut self.nb_link, now);
        moved |= db.pump(&mut self.sb, &mut self.sb_link, now);
        moved
    }

    /// When the replicas' or the core's timers are due.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let wall = self
            .core
            .poll_wall_timeout()
            .map(|w| Duration::from_millis((w.max(WALL_EPOCH_MS as i64) as u64) - WALL_EPOCH_MS));
        [
            self.nb.poll_timeout().map(Duration::from_millis),
            self.sb.poll_timeout().map(Duration::from_millis),
            wall,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the replicas' timers.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.nb.handle_timeout(ms(now));
        self.sb.handle_timeout(ms(now));
    }

    /// Log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Drops the sessions (the process goes away).
    pub fn shutdown(mut self, db: &mut Db) {
        db.drop_link(&mut self.nb_link);
        db.drop_link(&mut self.sb_link);
    }
}
