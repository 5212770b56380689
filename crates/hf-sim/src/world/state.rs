//! The datapaths' state channel in the world (live migration's conntrack transfer): the
//! sessions a datapath dials ([`hf_datapath::Datapath::poll_state_dial`]) are joined to the
//! peer chassis's datapath, and their bytes travel inside the same simulated links as the
//! Geneve tunnels between the two chassis, so they pay the cluster's bandwidth and latency
//! and share them with the traffic (DESIGN "The simulator's clock and costs").
//!
//! A datapath that is replaced (a handoff or a crash) loses its sessions: the peer sees them
//! end ([`StateNet::drop_chassis`]).

use std::time::Duration;

use hf_datapath::PeerId;

use super::chassis::Chassis;

/// What a tunnel link between two chassis carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// A Geneve payload.
    Geneve(Vec<u8>),
    /// State channel bytes of session `id`, towards the link's far end.
    State(u64, Vec<u8>),
}

#[derive(Debug)]
struct Session {
    id: u64,
    /// The dialing chassis, and its peer id for the session.
    a: usize,
    a_peer: PeerId,
    /// The accepting chassis.
    b: usize,
    b_peer: PeerId,
}

/// Every state session of the world.
#[derive(Debug, Default)]
pub struct StateNet {
    sessions: Vec<Session>,
    next: u64,
    /// State channel bytes put on the links, all sessions.
    pub bytes: u64,
    /// Sessions opened.
    pub opened: u64,
}

/// A tunnel link's far end and what to send on it.
pub type Outbound = ((usize, usize), Carried, usize);

impl StateNet {
    /// Opens the sessions the datapaths asked for and collects what they send: each item goes
    /// on the tunnel link `(from, to)`. True when anything moved.
    pub fn step(
        &mut self,
        chassis: &mut [Chassis],
        now: Duration,
        out: &mut Vec<Outbound>,
    ) -> bool {
        let mut moved = false;
        for i in 0..chassis.len() {
            while let Some(d) = chassis[i].datapath_mut().poll_state_dial() {
                moved = true;
                let j = chassis.iter().position(|c| c.name() == d.chassis);
                match j {
                    Some(j) if j != i && chassis[j].encap_ip() == d.ip => {
                        self.next += 1;
                        let id = self.next;
                        let (a_peer, b_peer) = (id * 2, id * 2 + 1);
                        self.sessions.push(Session {
                            id,
                            a: i,
                            a_peer,
                            b: j,
                            b_peer,
                        });
                        self.opened += 1;
                        chassis[i].datapath_mut().handle_state_connected(
                            a_peer,
                            Some(&d.chassis),
                            None,
                            now,
                        );
                        chassis[j]
                            .datapath_mut()
                            .handle_state_connected(b_peer, None, None, now);
                    }
                    _ => chassis[i].datapath_mut().handle_state_dial_failed(
                        &d.chassis,
                        &format!("nothing listens at {}", d.ip),
                        now,
                    ),
                }
            }
        }
        for (i, c) in chassis.iter_mut().enumerate() {
            while let Some((peer, bytes)) = c.datapath_mut().poll_state_transmit() {
                moved = true;
                let Some(s) = self
                    .sessions
                    .iter()
                    .find(|s| (s.a == i && s.a_peer == peer) || (s.b == i && s.b_peer == peer))
                else {
                    continue;
                };
                let to = if s.a == i { s.b } else { s.a };
                self.bytes += bytes.len() as u64;
                let len = bytes.len();
                out.push(((i, to), Carried::State(s.id, bytes), len));
            }
        }
        // Sessions a side refused: closed once nothing of theirs is queued.
        let closing: Vec<u64> = self
            .sessions
            .iter()
            .filter(|s| {
                chassis[s.a].datapath().state_wants_close(s.a_peer)
                    || chassis[s.b].datapath().state_wants_close(s.b_peer)
            })
            .map(|s| s.id)
            .collect();
        for id in closing {
            moved = true;
            self.close(id, chassis, now);
        }
        moved
    }

    /// Bytes of session `id` arrived at chassis `at`.
    pub fn deliver(
        &mut self,
        chassis: &mut [Chassis],
        at: usize,
        id: u64,
        bytes: &[u8],
        now: Duration,
    ) {
        let Some(s) = self.sessions.iter().find(|s| s.id == id) else {
            return;
        };
        let peer = if s.a == at {
            s.a_peer
        } else if s.b == at {
            s.b_peer
        } else {
            return;
        };
        chassis[at]
            .datapath_mut()
            .handle_state_bytes(peer, bytes, now);
    }

    fn close(&mut self, id: u64, chassis: &mut [Chassis], now: Duration) {
        let Some(k) = self.sessions.iter().position(|s| s.id == id) else {
            return;
        };
        let s = self.sessions.remove(k);
        chassis[s.a]
            .datapath_mut()
            .handle_state_disconnected(s.a_peer, now);
        chassis[s.b]
            .datapath_mut()
            .handle_state_disconnected(s.b_peer, now);
    }

    /// Chassis `i`'s datapath was replaced: its sessions end (the peers see them close; the new
    /// datapath starts without any).
    pub fn drop_chassis(&mut self, i: usize, chassis: &mut [Chassis], now: Duration) {
        let gone: Vec<Session> = {
            let (gone, keep) = std::mem::take(&mut self.sessions)
                .into_iter()
                .partition(|s| s.a == i || s.b == i);
            self.sessions = keep;
            gone
        };
        for s in gone {
            let (other, peer) = if s.a == i {
                (s.b, s.b_peer)
            } else {
                (s.a, s.a_peer)
            };
            chassis[other]
                .datapath_mut()
                .handle_state_disconnected(peer, now);
        }
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.sessions.len()
    }
}
