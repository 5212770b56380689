//! The state channel's sessions: dials, hellos and their checks, bytes in and out.

use std::time::Duration;

use super::*;
use crate::core::{Datapath, Level};

impl Datapath {
    // ----- state sessions (the shell's side) -----

    /// The next session to open.
    pub fn poll_state_dial(&mut self) -> Option<StateDial> {
        self.mig.dials.pop_front()
    }

    /// A session is up: one this datapath asked for (`dialed`: the chassis it dialed) or one
    /// a peer opened. `authenticated`: the chassis name the shell verified (a TLS
    /// certificate's CN), which the peer's hello must then match.
    pub fn handle_state_connected(
        &mut self,
        peer: PeerId,
        dialed: Option<&str>,
        authenticated: Option<&str>,
        now: Duration,
    ) {
        self.clock = self.clock.max(now);
        if let Some(c) = dialed {
            self.mig.dialing.remove(c);
        }
        self.mig.peers.insert(
            peer,
            Peer {
                dialed: dialed.map(str::to_string),
                authenticated: authenticated.map(str::to_string),
                ..Peer::default()
            },
        );
        let hello = StateMsg::Hello {
            version: STATE_VERSION,
            chassis: self.cfg.chassis.clone(),
        };
        self.state_send(peer, &hello);
    }

    /// A dial asked for by [`Datapath::poll_state_dial`] failed.
    pub fn handle_state_dial_failed(&mut self, chassis: &str, reason: &str, now: Duration) {
        self.clock = self.clock.max(now);
        self.mig.dialing.remove(chassis);
        self.log_once(
            Level::Warn,
            format_args!("state-dial:{chassis}:{reason}"),
            || format!("state channel to chassis {chassis}: {reason}"),
        );
        for inc in self.mig.incoming.values_mut() {
            if inc.source.as_deref() == Some(chassis) {
                inc.next_pull = now + self.cfg.migration.retry;
                inc.lost_since.get_or_insert(now);
            }
        }
    }

    /// A session ended.
    pub fn handle_state_disconnected(&mut self, peer: PeerId, now: Duration) {
        self.clock = self.clock.max(now);
        let Some(p) = self.mig.peers.remove(&peer) else {
            return;
        };
        if let Some(c) = &p.chassis {
            self.log(Level::Info, format!("state channel to chassis {c} closed"));
        }
        // Pulls served on it: the destination went away; nothing changes here.
        let gone: Vec<String> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| o.peer == peer && !o.finished)
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            if let Some(o) = self.mig.outgoing.remove(&n) {
                self.log(
                    Level::Info,
                    format!(
                        "migration of {n} to {}: the destination went away during the pre-copy; \
                         the port stays here with everything",
                        o.stats.peer
                    ),
                );
                self.mig
                    .finish(o.stats, "aborted: destination went away".into(), now);
            }
        }
        // A session dialed to a source that ended before its hello (refused, or cut): dial
        // again after the retry interval, as after a failed dial, not at once.
        if p.chassis.is_none()
            && let Some(c) = &p.dialed
        {
            for inc in self.mig.incoming.values_mut() {
                if inc.source.as_deref() == Some(c.as_str()) && !inc.pulled {
                    inc.next_pull = now + self.cfg.migration.retry;
                    inc.lost_since.get_or_insert(now);
                }
            }
        }
        // Pulls made on it: the source is gone for now.
        let Some(c) = p.chassis else { return };
        let waiting: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.source.as_deref() == Some(c.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        for n in waiting {
            let awaiting_final = self
                .mig
                .incoming
                .get(&n)
                .is_some_and(|i| i.activated.is_some());
            if awaiting_final {
                self.complete(&n, false, now);
            } else if let Some(i) = self.mig.incoming.get_mut(&n) {
                i.pulled = false;
                i.next_pull = now + self.cfg.migration.retry;
                i.lost_since.get_or_insert(now);
            }
        }
    }

    /// The chassis of session `peer` once its hello was accepted (`None` before that, after a
    /// refusal's hello, and for unknown sessions): for the shell's listings and its hello
    /// timeout.
    pub fn state_peer(&self, peer: PeerId) -> Option<&str> {
        self.mig.peers.get(&peer).and_then(|p| p.chassis.as_deref())
    }

    /// Whether the shell should close session `peer` (it was refused) once its transmit queue
    /// is drained.
    pub fn state_wants_close(&self, peer: PeerId) -> bool {
        self.mig.peers.get(&peer).is_some_and(|p| p.closing)
    }

    /// The next bytes to send on a session.
    pub fn poll_state_transmit(&mut self) -> Option<(PeerId, Vec<u8>)> {
        self.mig.tx.pop_front()
    }

    /// Bytes from a session.
    pub fn handle_state_bytes(&mut self, peer: PeerId, data: &[u8], now: Duration) {
        self.clock = self.clock.max(now);
        let Some(p) = self.mig.peers.get_mut(&peer) else {
            return;
        };
        if p.closing {
            return;
        }
        p.dec.push(data);
        loop {
            let Some(p) = self.mig.peers.get_mut(&peer) else {
                return;
            };
            if p.closing {
                return;
            }
            match p.dec.next_msg() {
                Ok(None) => return,
                Ok(Some(m)) => self.handle_state_msg(peer, m, now),
                Err(e) => {
                    self.refuse_peer(peer, format!("bad state frame: {e}"));
                    return;
                }
            }
        }
    }

    pub(super) fn state_send(&mut self, peer: PeerId, msg: &StateMsg) -> usize {
        let mut out = Vec::new();
        match encode_to(msg, &mut out) {
            Ok(()) => {
                let n = out.len();
                self.mig.tx.push_back((peer, out));
                n
            }
            Err(e) => {
                self.log(Level::Error, format!("state message not sent: {e}"));
                0
            }
        }
    }

    pub(super) fn refuse_peer(&mut self, peer: PeerId, why: String) {
        let who = self
            .mig
            .peers
            .get(&peer)
            .and_then(|p| p.chassis.clone().or(p.authenticated.clone()))
            .unwrap_or_else(|| format!("session {peer}"));
        self.log(
            Level::Warn,
            format!("state channel from {who} refused: {why}"),
        );
        if let Some(p) = self.mig.peers.get_mut(&peer) {
            p.closing = true;
        }
    }

    pub(super) fn known_chassis(&self, name: &str) -> bool {
        self.program
            .as_ref()
            .is_some_and(|p| p.chassis_table.iter().any(|c| c.name == name))
    }

    pub(super) fn handle_state_msg(&mut self, peer: PeerId, msg: StateMsg, now: Duration) {
        let hello_done = self
            .mig
            .peers
            .get(&peer)
            .is_some_and(|p| p.chassis.is_some());
        if !hello_done {
            let StateMsg::Hello { version, chassis } = msg else {
                return self.refuse_peer(peer, "expected a hello first".into());
            };
            if version != STATE_VERSION {
                return self.refuse_peer(
                    peer,
                    format!("it speaks state version {version}, this datapath {STATE_VERSION}"),
                );
            }
            let (dialed, auth) = match self.mig.peers.get(&peer) {
                Some(p) => (p.dialed.clone(), p.authenticated.clone()),
                None => return,
            };
            if let Some(a) = auth.as_deref()
                && a != chassis
            {
                return self.refuse_peer(
                    peer,
                    format!("it says it is chassis {chassis} but its certificate names {a}"),
                );
            }
            if let Some(d) = dialed.as_deref()
                && d != chassis
            {
                return self.refuse_peer(
                    peer,
                    format!("dialed chassis {d} but the peer says it is {chassis}"),
                );
            }
            if !self.known_chassis(&chassis) {
                return self.refuse_peer(
                    peer,
                    format!("{chassis} is not a chassis of this datapath's program"),
                );
            }
            if let Some(p) = self.mig.peers.get_mut(&peer) {
                p.chassis = Some(chassis.clone());
            }
            self.log(
                Level::Info,
                format!("state channel to chassis {chassis} up"),
            );
            self.pull_due(now);
            return;
        }
        match msg {
            StateMsg::Hello { .. } => self.refuse_peer(peer, "a second hello".into()),
            StateMsg::Pull { port, epoch } => self.on_pull(peer, port, epoch, now),
            StateMsg::Activated { port, epoch } => self.on_activated_msg(peer, port, epoch, now),
            StateMsg::Conns {
                port,
                epoch,
                phase,
                zones,
                conns,
                delivered,
            } => self.on_conns(port, epoch, phase, zones, conns, delivered, now),
            StateMsg::Abort {
                port,
                epoch,
                reason,
            } => self.on_abort(peer, port, epoch, reason, now),
        }
    }
}
