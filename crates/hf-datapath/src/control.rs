//! The datapath's end of the control session (one controller at a time).
//!
//! # What it does
//!
//! The first message must be [`ToDatapath::Hello`] with [`PROTOCOL_VERSION`] and this
//! datapath's chassis name; it is answered with [`FromDatapath::Hello`] carrying the local
//! ports, the zone map and the last installed program, followed by whatever events waited
//! while no controller was connected. Another version, another chassis, a message before the
//! hello, or bytes that do not decode are answered with [`FromDatapath::Error`] and the session
//! is closed ([`Datapath::control_wants_close`]); the datapath itself carries on unchanged.
//! Requests after the hello are answered one by one (see [`crate::proto`]).
//!
//! # What it does not do
//!
//! No I/O: bytes in, frames out ([`Datapath::poll_control_transmit`]). A disconnect changes
//! nothing but the session: program, zones and conntrack stay.

use std::time::Duration;

use crate::core::{Datapath, DeltaRefusal, Level};
use crate::proto::{Decoder, FromDatapath, PROTOCOL_VERSION, ToDatapath, encode_to, speaks};

/// One controller session.
#[derive(Debug, Default)]
pub(crate) struct Control {
    dec: Decoder<ToDatapath>,
    hello: bool,
    closing: bool,
    /// The peer's protocol version (from its hello).
    pub(crate) version: u32,
}

impl Control {
    pub(crate) fn ready(&self) -> bool {
        self.hello && !self.closing
    }

    /// The peer's protocol version (0 before its hello).
    pub(crate) fn version(&self) -> u32 {
        self.version
    }
}

impl Datapath {
    pub(crate) fn send(&mut self, msg: &FromDatapath) {
        let mut out = Vec::new();
        match encode_to(msg, &mut out) {
            Ok(()) => self.ctl_tx.push_back(out),
            Err(e) => self.log(Level::Error, format!("control message not sent: {e}")),
        }
    }

    fn refuse(&mut self, message: String) {
        self.log(
            Level::Warn,
            format!("control session: {message}; closing it"),
        );
        self.send(&FromDatapath::Error { message });
        if let Some(c) = self.control.as_mut() {
            c.closing = true;
        }
    }

    /// A controller connected (a previous session, if any, is forgotten).
    pub fn handle_control_connected(&mut self, _now: Duration) {
        self.control = Some(Control::default());
        self.ctl_tx.clear();
        self.log(Level::Info, "controller connected".into());
    }

    /// The controller went away. Nothing else changes: forwarding continues with the last
    /// program, and nothing is flushed.
    pub fn handle_control_disconnected(&mut self, _now: Duration) {
        if self.control.take().is_some() {
            self.log(
                Level::Info,
                format!(
                    "controller disconnected; forwarding continues with program {}",
                    self.generation()
                ),
            );
        }
        self.ctl_tx.clear();
    }

    /// The session should be closed by the shell once [`Datapath::poll_control_transmit`] is
    /// drained (the peer was refused).
    pub fn control_wants_close(&self) -> bool {
        self.control.as_ref().is_some_and(|c| c.closing)
    }

    /// Whether a controller session has completed its hello.
    pub fn control_ready(&self) -> bool {
        self.control.as_ref().is_some_and(|c| c.ready())
    }

    /// The next frame to send to the controller.
    pub fn poll_control_transmit(&mut self) -> Option<Vec<u8>> {
        self.ctl_tx.pop_front()
    }

    /// Bytes from the controller.
    pub fn handle_control_bytes(&mut self, data: &[u8], now: Duration) {
        let Some(c) = self.control.as_mut() else {
            self.log(
                Level::Warn,
                "control bytes without a session: ignored".into(),
            );
            return;
        };
        if c.closing {
            return;
        }
        c.dec.push(data);
        loop {
            let t0 = self.tick();
            let Some(c) = self.control.as_mut() else {
                return;
            };
            if c.closing {
                return;
            }
            match c.dec.next_msg() {
                Ok(None) => return,
                Ok(Some(msg)) => {
                    if matches!(msg, ToDatapath::Program(_) | ToDatapath::ProgramDelta(_)) {
                        let t1 = self.tick();
                        self.stopwatch
                            .record("program-decode", t1.saturating_sub(t0));
                        self.handle_msg(msg, now);
                        let t2 = self.tick();
                        self.stopwatch
                            .record("program-install", t2.saturating_sub(t1));
                    } else {
                        self.handle_msg(msg, now);
                    }
                }
                Err(e) => {
                    self.refuse(format!("bad control frame: {e}"));
                    return;
                }
            }
        }
    }

    fn handle_msg(&mut self, msg: ToDatapath, now: Duration) {
        let hello = self.control.as_ref().is_some_and(|c| c.hello);
        if !hello {
            match msg {
                ToDatapath::Hello { version, chassis } => {
                    if !speaks(version) {
                        return self.refuse(format!(
                            "controller speaks protocol version {version}, this datapath speaks {}..={PROTOCOL_VERSION}",
                            crate::proto::MIN_PROTOCOL_VERSION
                        ));
                    }
                    if chassis != self.cfg.chassis {
                        return self.refuse(format!(
                            "controller is for chassis \"{chassis}\", this datapath is \"{}\"",
                            self.cfg.chassis
                        ));
                    }
                    if let Some(c) = self.control.as_mut() {
                        c.hello = true;
                        c.version = version;
                    }
                    let answer = FromDatapath::Hello {
                        version: PROTOCOL_VERSION,
                        chassis: self.cfg.chassis.clone(),
                        ports: self.ports(),
                        zones: self.zones.clone(),
                        program: self.program.clone().map(Box::new),
                    };
                    self.send(&answer);
                    while let Some(m) = self.pending.pop_front() {
                        self.send(&m);
                    }
                    // Activations a previous controller may not have written to SB yet.
                    for port in self.activated_ports() {
                        self.send(&FromDatapath::PortActivated { port });
                    }
                }
                other => self.refuse(format!("expected a hello first, got {}", name_of(&other))),
            }
            return;
        }
        match msg {
            ToDatapath::Hello { .. } => self.refuse("a second hello on one session".into()),
            ToDatapath::Program(p) => {
                let generation = p.generation;
                match self.install(*p) {
                    Ok(flow_errors) => self.send(&FromDatapath::Installed {
                        generation,
                        flow_errors,
                    }),
                    Err(reason) => {
                        self.log(
                            Level::Warn,
                            format!("program {generation} rejected: {reason}"),
                        );
                        self.send(&FromDatapath::Rejected { generation, reason })
                    }
                }
            }
            ToDatapath::FlushZones { names } => match self.flush_zones(&names) {
                Ok(entries) => {
                    self.log(
                        Level::Info,
                        format!("flushed zones {}: {entries} entries", names.join(", ")),
                    );
                    self.send(&FromDatapath::Flushed { names, entries })
                }
                Err(message) => self.send(&FromDatapath::Error {
                    message: format!("flush refused: {message}"),
                }),
            },
            ToDatapath::DumpConntrack { zone } => match self.dump_conntrack(zone.as_deref(), now) {
                Ok(lines) => self.send(&FromDatapath::Conntrack(lines)),
                Err(message) => self.send(&FromDatapath::Error { message }),
            },
            ToDatapath::SetPortActive { port } => match self.set_port_active(&port) {
                Ok(()) => {
                    self.on_port_activated(&port, now);
                    self.send(&FromDatapath::PortActivated { port })
                }
                Err(message) => self.send(&FromDatapath::Error { message }),
            },
            ToDatapath::GetCounters => {
                let c = self.counters();
                self.send(&FromDatapath::Counters(c))
            }
            ToDatapath::ExportState => {
                let s = self.export_state(now);
                self.send(&FromDatapath::Exported(Box::new(s)))
            }
            ToDatapath::Ping { seq } => self.send(&FromDatapath::Pong { seq }),
            ToDatapath::SvcMonitors(list) => self.set_svc_monitors(list, now),
            ToDatapath::Mirrors(list) => self.set_mirrors(list),
            ToDatapath::Bfd(m) => self.set_bfd(m, now),
            ToDatapath::Garps(list) => self.send_garps(list, now),
            ToDatapath::Mcast(list) => self.set_mcast(list, now),
            ToDatapath::PeriodicRas(list) => self.set_periodic_ras(list, now),
            ToDatapath::HopBfd(list) => self.set_hop_bfd(list, now),
            ToDatapath::TakeOver | ToDatapath::TakeOverSessions => {
                let with_sessions = matches!(msg, ToDatapath::TakeOverSessions);
                let version = self.control.as_ref().map_or(0, |c| c.version);
                if version < 5 {
                    return self.refuse(format!(
                        "a takeover needs protocol version 5, the peer said {version}"
                    ));
                }
                if with_sessions {
                    let e = self.export_sessions(now);
                    self.log(
                        Level::Info,
                        format!(
                            "takeover: handing over {} BFD session(s) with chassis and {} to next hops",
                            e.tunnel.len(),
                            e.hop.len()
                        ),
                    );
                    self.send(&FromDatapath::ExportedSessions(Box::new(e)));
                }
                let s = self.export_state(now);
                self.log(
                    Level::Info,
                    format!(
                        "taken over by a new datapath process: state exported (program {}, {} zones, {} bytes of conntrack); forwarding stops here",
                        self.generation(),
                        s.zones.len(),
                        s.conntrack.len()
                    ),
                );
                self.send(&FromDatapath::Exported(Box::new(s)));
                self.handed_over = true;
            }
            ToDatapath::Meters(m) => self.set_meters(m),
            ToDatapath::ProgramDelta(d) => {
                let generation = d.generation;
                match self.install_delta(&d) {
                    Ok(flow_errors) => self.send(&FromDatapath::Installed {
                        generation,
                        flow_errors,
                    }),
                    Err(DeltaRefusal::Base(reason)) => {
                        self.log(
                            Level::Info,
                            format!("program delta {generation} not applied: {reason}"),
                        );
                        self.send(&FromDatapath::BaseMismatch {
                            generation,
                            base: d.base,
                            running: self.generation(),
                            reason,
                        })
                    }
                    Err(DeltaRefusal::Rejected(reason)) => {
                        self.log(
                            Level::Warn,
                            format!("program {generation} (a delta) rejected: {reason}"),
                        );
                        self.send(&FromDatapath::Rejected { generation, reason })
                    }
                }
            }
        }
    }

    /// Activates local port `port` (as its RARP would).
    pub fn set_port_active(&mut self, port: &str) -> Result<(), String> {
        let Some(p) = self.ports.get(port) else {
            return Err(format!("no local port \"{port}\""));
        };
        let id = p.id;
        self.pipeline.set_port_active(id, true);
        Ok(())
    }
}

fn name_of(m: &ToDatapath) -> &'static str {
    match m {
        ToDatapath::Hello { .. } => "Hello",
        ToDatapath::Program(_) => "Program",
        ToDatapath::FlushZones { .. } => "FlushZones",
        ToDatapath::DumpConntrack { .. } => "DumpConntrack",
        ToDatapath::SetPortActive { .. } => "SetPortActive",
        ToDatapath::GetCounters => "GetCounters",
        ToDatapath::ExportState => "ExportState",
        ToDatapath::Ping { .. } => "Ping",
        ToDatapath::ProgramDelta(_) => "ProgramDelta",
        ToDatapath::TakeOver => "TakeOver",
        ToDatapath::Meters(_) => "Meters",
        ToDatapath::SvcMonitors(_) => "SvcMonitors",
        ToDatapath::Mirrors(_) => "Mirrors",
        ToDatapath::Bfd(_) => "Bfd",
        ToDatapath::Garps(_) => "Garps",
        ToDatapath::Mcast(_) => "Mcast",
        ToDatapath::PeriodicRas(_) => "PeriodicRas",
        ToDatapath::HopBfd(_) => "HopBfd",
        ToDatapath::TakeOverSessions => "TakeOverSessions",
    }
}
