//! Provider networks: what OVN's `localnet` ports reach. One learning Ethernet switch per
//! network name (`Logical_Switch_Port options:network_name`), with every chassis's `localnet`
//! port of that network plugged in (a datapath port named like the logical port, as
//! `ovn-bridge-mappings` would bridge it), and the external hosts on it
//! ([`super::World::add_net_host`]).
//!
//! # What it does
//!
//! - Learns source MACs per port; a unicast frame to a known MAC goes to that port alone,
//!   anything else floods to every other port (as a physical switch does). A gratuitous ARP
//!   from a new place moves a MAC, which is how a migrated VM's distributed NAT address follows
//!   it.
//! - Each port has a link each way: the chassis's at the cluster's figures (10 Gb/s, 50 µs),
//!   an external host's 1 ms away.
//!
//! # What it does not do
//!
//! No VLANs (`tag` on a localnet port), no STP, no MAC ageing, no flood limits.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::net::{Link, LinkConfig, Rng};

/// A port of a provider network.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetPort {
    /// Chassis `index`'s `localnet` port named `port`.
    Chassis(usize, String),
    /// The external host named so.
    Host(String),
}

#[derive(Debug)]
struct Attached {
    /// Port → switch.
    up: Link,
    /// Switch → port.
    down: Link,
}

/// One provider network.
#[derive(Debug)]
pub struct PhysNet {
    name: String,
    ports: BTreeMap<NetPort, Attached>,
    fdb: BTreeMap<[u8; 6], NetPort>,
    rng: Rng,
    /// Frames flooded (unknown or broadcast destination).
    pub flooded: u64,
    /// Times a MAC was learned on a different port than before.
    pub moves: u64,
}

impl PhysNet {
    /// An empty network.
    pub fn new(name: &str, rng: Rng) -> PhysNet {
        PhysNet {
            name: name.to_string(),
            ports: BTreeMap::new(),
            fdb: BTreeMap::new(),
            rng,
            flooded: 0,
            moves: 0,
        }
    }

    /// Its name (`network_name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Plugs a port in (a no-op when it is there).
    pub fn attach(&mut self, port: NetPort) {
        if self.ports.contains_key(&port) {
            return;
        }
        let cfg = match port {
            NetPort::Chassis(..) => LinkConfig::cluster(),
            NetPort::Host(_) => LinkConfig::external(),
        };
        let label = format!("{} {port:?}", self.name);
        let up = Link::new(cfg.clone(), self.rng.fork(&format!("{label} up")));
        let down = Link::new(cfg, self.rng.fork(&format!("{label} down")));
        self.ports.insert(port, Attached { up, down });
    }

    /// Unplugs a port; what it had in flight is lost, and MACs learned there are forgotten.
    pub fn detach(&mut self, port: &NetPort) {
        self.ports.remove(port);
        self.fdb.retain(|_, p| p != port);
    }

    /// Whether `port` is plugged in.
    pub fn has(&self, port: &NetPort) -> bool {
        self.ports.contains_key(port)
    }

    /// The ports, in order.
    pub fn ports(&self) -> impl Iterator<Item = &NetPort> {
        self.ports.keys()
    }

    /// A frame leaves `from` towards the switch.
    pub fn send(&mut self, from: &NetPort, frame: Vec<u8>, now: Duration) {
        if let Some(a) = self.ports.get_mut(from) {
            a.up.send(frame, now);
        }
    }

    /// Moves what is due: frames reaching the switch are forwarded; frames reaching a port
    /// are returned for delivery. True when anything moved.
    pub fn step(&mut self, now: Duration, deliver: &mut Vec<(NetPort, Vec<u8>)>) -> bool {
        let mut moved = false;
        let mut arrived: Vec<(NetPort, Vec<u8>)> = Vec::new();
        for (p, a) in &mut self.ports {
            while let Some(f) = a.up.poll_deliver(now) {
                arrived.push((p.clone(), f));
            }
        }
        for (from, f) in arrived {
            moved = true;
            self.forward(&from, f, now);
        }
        for (p, a) in &mut self.ports {
            while let Some(f) = a.down.poll_deliver(now) {
                moved = true;
                deliver.push((p.clone(), f));
            }
        }
        moved
    }

    fn forward(&mut self, from: &NetPort, f: Vec<u8>, now: Duration) {
        if f.len() < 14 {
            return;
        }
        let mut src = [0u8; 6];
        src.copy_from_slice(&f[6..12]);
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&f[0..6]);
        if src[0] & 1 == 0 {
            match self.fdb.insert(src, from.clone()) {
                Some(old) if old != *from => self.moves += 1,
                _ => {}
            }
        }
        let known = (dst[0] & 1 == 0)
            .then(|| self.fdb.get(&dst).cloned())
            .flatten();
        match known {
            Some(to) if to == *from => {}
            Some(to) => {
                if let Some(a) = self.ports.get_mut(&to) {
                    a.down.send(f, now);
                }
            }
            None => {
                self.flooded += 1;
                for (p, a) in &mut self.ports {
                    if p != from {
                        a.down.send(f.clone(), now);
                    }
                }
            }
        }
    }

    /// The earliest time a frame is due.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.ports
            .values()
            .flat_map(|a| [a.up.next_deadline(), a.down.next_deadline()])
            .flatten()
            .min()
    }

    /// Where the switch last saw `mac`.
    pub fn location(&self, mac: [u8; 6]) -> Option<&NetPort> {
        self.fdb.get(&mac)
    }
}

impl super::World {
    /// Plugs every chassis's `localnet` ports into their provider networks (and unplugs those
    /// NB no longer has); true when something changed.
    pub(crate) fn sync_localnets(&mut self, nb: &hf_model::NbSnapshot) -> bool {
        let mut wanted: BTreeMap<String, String> = BTreeMap::new();
        for p in nb.logical_switch_port().values() {
            if p.type_ == "localnet" {
                let net = p
                    .options
                    .get("network_name")
                    .cloned()
                    .unwrap_or_else(|| p.name.clone());
                wanted.insert(p.name.clone(), net);
            }
        }
        if wanted == self.localnets {
            return false;
        }
        let old = std::mem::take(&mut self.localnets);
        for (port, net) in &old {
            if wanted.get(port) != Some(net) {
                for (i, c) in self.chassis.iter_mut().enumerate() {
                    c.remove_port(port);
                    if let Some(p) = self.physnets.get_mut(net) {
                        p.detach(&NetPort::Chassis(i, port.clone()));
                    }
                }
            }
        }
        for (port, net) in &wanted {
            let rng = self.rng.fork(&format!("physnet {net}"));
            let p = self
                .physnets
                .entry(net.clone())
                .or_insert_with(|| PhysNet::new(net, rng));
            for (i, c) in self.chassis.iter_mut().enumerate() {
                let np = NetPort::Chassis(i, port.clone());
                if !p.has(&np) {
                    p.attach(np);
                    c.add_port(port, None);
                }
            }
        }
        self.localnets = wanted;
        true
    }
}
