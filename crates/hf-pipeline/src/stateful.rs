//! The actions that read or write the pipeline's learned state or its counters (port security,
//! FDB, ECMP next hops, LB affinity, `bind_vport`, counted actions), as one more method of the
//! interpreter's `Runner`. Their dependency tracking for the flow cache is in `interp`: results
//! of learned-state lookups are opaque to the cache, port security derives from the header
//! fields it reads.

use std::time::Duration;

use hf_wire::ip_proto;

use crate::Event;
use crate::interp::{Mode, Runner};
use crate::learn::{AffKey, AffVal, EcmpKey};
use crate::packet::{Bits, Ctx, slot};
use crate::program::CAct;

impl Runner<'_> {
    /// Actions that read or write learned state or counters.
    pub(crate) fn exec_stateful(&mut self, act: &CAct) {
        self.exec_stateful_inner(act);
        if self.trace.is_some() {
            let s = self.explain(act);
            self.note(s);
        }
    }

    /// What a trace says after one of these actions ran (values as they now are).
    fn explain(&self, act: &CAct) -> String {
        let ctx = &self.scr.ctx;
        match act {
            CAct::Count { name, counter } => format!(
                "  {name}: no effect on forwarding (counted, {} so far)",
                self.counters.get(*counter as usize).copied().unwrap_or(0)
            ),
            CAct::PortSec { dst, out, .. } => format!(
                "  {}: {}",
                if *out {
                    "check_out_port_sec"
                } else {
                    "check_in_port_sec"
                },
                if ctx.read(*dst) != 0 {
                    "port security FAILED (1)"
                } else {
                    "allowed (0)"
                }
            ),
            CAct::LookupFdb { dst, .. } => format!(
                "  lookup_fdb: {}",
                if ctx.read(*dst) != 0 {
                    "MAC learned on this port (1)"
                } else {
                    "not learned here (0)"
                }
            ),
            CAct::GetFdb { dst, .. } => format!("  get_fdb: port key {}", ctx.read(*dst)),
            CAct::PutFdb { .. } => "  put_fdb: learned (not in a trace)".into(),
            CAct::ChkEcmpNh { dst, mac, .. } => format!(
                "  {}: {}",
                if *mac {
                    "chk_ecmp_nh_mac"
                } else {
                    "chk_ecmp_nh"
                },
                ctx.read(*dst)
            ),
            CAct::CommitEcmpNh { .. } => "  commit_ecmp_nh: learned (not in a trace)".into(),
            CAct::ChkLbAff { dst, .. } => format!("  chk_lb_aff: {}", ctx.read(*dst)),
            CAct::CommitLbAff { .. } => "  commit_lb_aff: learned (not in a trace)".into(),
            CAct::BindVport { .. } => "  bind_vport: reported (not in a trace)".into(),
            CAct::Log { meter, .. } => format!(
                "  log: an acl_log line{} (not in a trace)",
                meter
                    .as_ref()
                    .map_or(String::new(), |m| format!(" when meter {m} allows"))
            ),
            CAct::SetMeter { rate, burst, .. } => format!(
                "  set_meter: within {rate} kbps (burst {burst} kbit) passes, more is dropped (a trace assumes within)"
            ),
            CAct::SvcCheck { .. } => {
                "  handle_svc_check: punted to the service monitor (not in a trace)".into()
            }
            CAct::Igmp { .. } => "  igmp: punted to multicast snooping (not in a trace)".into(),
            CAct::Bfd { .. } => {
                "  handle_bfd_msg: punted to the BFD sessions (not in a trace)".into()
            }
            _ => String::new(),
        }
    }

    /// A frame punted to the chassis from port key `port` of datapath `dp`: (datapath name,
    /// port name, the frame); none in a trace.
    fn punted(&self, dp: u32, port: u32) -> Option<(String, String, Vec<u8>)> {
        if self.mode == Mode::Trace {
            return None;
        }
        let d = self.prog.dp_by_key(dp)?;
        let name = d
            .ports
            .get(&port)
            .map_or_else(String::new, |p| p.name.clone());
        Some((d.name.clone(), name, self.scr.ctx.frame.to_vec()))
    }

    fn exec_stateful_inner(&mut self, act: &CAct) {
        match act {
            CAct::Count { counter, .. } => self.count(*counter),
            CAct::CtrlPunt { .. } => {}
            CAct::Log {
                counter,
                name,
                severity,
                verdict,
                meter,
                egress,
            } => {
                self.count(*counter);
                let meter = meter.clone().or_else(|| self.log_meter.take());
                if self.mode == Mode::Trace || meter.is_some_and(|m| !self.charge(&m)) {
                    return;
                }
                let frame = if self.scr.ctx.owned {
                    self.scr.ctx.frame.clone()
                } else {
                    self.input.to_vec()
                };
                self.events.push(Event::AclLog {
                    name: name.as_deref().map(str::to_string),
                    severity,
                    verdict,
                    direction: if *egress { "to-lport" } else { "from-lport" },
                    frame,
                });
            }
            CAct::SetMeter {
                counter,
                rate,
                burst,
            } => {
                self.count(*counter);
                if self.mode == Mode::Trace {
                    return;
                }
                let len = if self.scr.ctx.owned {
                    self.scr.ctx.frame.len()
                } else {
                    self.input.len()
                };
                let key = crate::meter::MeterKey::Rate(*rate, *burst);
                if !self.meters.allow(&key, len, self.now) {
                    self.halted = true;
                }
            }
            CAct::PortSec { dst, out, dp } => {
                let s = if *out { slot::OUTPORT } else { slot::INPORT };
                let key = self.scr.ctx.f[s] as u32;
                let prog = self.prog;
                let ps = prog
                    .dp_by_key(*dp)
                    .and_then(|d| d.ports.get(&key))
                    .map_or(&[][..], |p| &p.ps[..]);
                let fail = if *out {
                    crate::port_sec::check_out(ps, &self.scr.ctx)
                } else {
                    crate::port_sec::check_in(ps, &self.scr.ctx)
                };
                self.scr.ctx.write(*dst, u128::from(fail));
            }
            CAct::PutFdb { dp, port, mac } => {
                let (port, mac) = (self.scr.ctx.read(*port) as u32, self.scr.ctx.read(*mac));
                if self.mode != Mode::Trace {
                    let key = *dp;
                    if self.state.put_fdb(key, mac, port)
                        && let Some(d) = self.prog.dp_by_key(*dp)
                    {
                        self.events.push(Event::Fdb {
                            datapath: d.name.clone(),
                            port: d
                                .ports
                                .get(&port)
                                .map_or_else(String::new, |p| p.name.clone()),
                            mac: crate::learn::mac_bytes(mac),
                        });
                    }
                }
            }
            CAct::LookupFdb { dp, dst, port, mac } => {
                let (port, mac) = (self.scr.ctx.read(*port) as u32, self.scr.ctx.read(*mac));
                let key = *dp;
                let hit = self.state.fdb.get(&(key, mac)) == Some(&port);
                self.scr.ctx.write(*dst, u128::from(hit));
            }
            CAct::GetFdb { dp, dst, mac } => {
                let mac = self.scr.ctx.read(*mac);
                let key = *dp;
                let port = self.state.fdb.get(&(key, mac)).copied().unwrap_or(0);
                self.scr.ctx.write(*dst, u128::from(port));
            }
            CAct::CommitEcmpNh { dp, v6, proto } if self.mode != Mode::Trace => {
                let key = *dp;
                let (fwd, rev) = ecmp_keys(&self.scr.ctx, key, *v6, *proto);
                self.state.ecmp_commit(fwd, self.now);
                self.state.ecmp_commit(rev, self.now);
            }
            CAct::ChkEcmpNh { dp, dst, mac } => {
                let key = *dp;
                let v6 = self.scr.ctx.f[slot::ETH_TYPE] == 0x86dd;
                let proto = self.scr.ctx.f[slot::IP_PROTO] as u8;
                let (fwd, _) = ecmp_keys(&self.scr.ctx, key, v6, proto);
                let k = if *mac {
                    fwd
                } else {
                    EcmpKey { mac: None, ..fwd }
                };
                let touch = self.mode != Mode::Trace;
                let hit = self.state.ecmp_check(&k, self.now, touch);
                self.scr.ctx.write(*dst, u128::from(hit));
            }
            CAct::CommitLbAff {
                dp,
                vip,
                vip_port,
                backend,
                backend_port,
                proto,
                timeout,
            } if self.mode != Mode::Trace => {
                let (vip, v6) = crate::program::ip_u128(*vip);
                let client = self.scr.ctx.f[if v6 { slot::IP6_SRC } else { slot::IP4_SRC }];
                let k = AffKey {
                    dp: *dp,
                    v6,
                    client,
                    vip,
                    proto: if *vip_port == 0 { 0 } else { *proto },
                    vip_port: *vip_port,
                };
                let v = AffVal {
                    backend: crate::program::ip_u128(*backend).0,
                    port: *backend_port,
                    timeout: Duration::from_secs(u64::from(*timeout)),
                    used: self.now,
                };
                self.state.aff_commit(k, v);
            }
            CAct::ChkLbAff { dp, dst, switch } => {
                let v6 = self.scr.ctx.f[slot::ETH_TYPE] == 0x86dd;
                let proto = self.scr.ctx.f[slot::IP_PROTO] as u8;
                let mut k = AffKey {
                    dp: *dp,
                    v6,
                    client: self.scr.ctx.f[if v6 { slot::IP6_SRC } else { slot::IP4_SRC }],
                    vip: self.scr.ctx.f[if v6 { slot::IP6_DST } else { slot::IP4_DST }],
                    proto,
                    vip_port: l4_ports(&self.scr.ctx, proto).1,
                };
                let touch = self.mode != Mode::Trace;
                let mut hit = self.state.aff_check(&k, self.now, touch);
                if hit.is_none() {
                    k.proto = 0;
                    k.vip_port = 0;
                    hit = self.state.aff_check(&k, self.now, touch);
                }
                self.scr.ctx.write(*dst, u128::from(hit.is_some()));
                if let Some(v) = hit {
                    let reg = match (v6, *switch) {
                        (false, _) => AFF_REG4,
                        (true, true) => AFF_XXREG0,
                        (true, false) => AFF_XXREG1,
                    };
                    self.scr.ctx.write(reg, v.backend);
                    self.scr.ctx.write(AFF_PORT, u128::from(v.port));
                }
            }
            CAct::SvcCheck { dp, port, counter } => {
                let port = self.scr.ctx.read(*port) as u32;
                self.count(*counter);
                if let Some((datapath, port, frame)) = self.punted(*dp, port) {
                    self.events.push(Event::SvcCheck {
                        datapath,
                        port,
                        frame,
                    });
                }
            }
            CAct::Igmp { dp, counter } => {
                let port = self.scr.ctx.f[slot::INPORT] as u32;
                self.count(*counter);
                if let Some((datapath, name, frame)) = self.punted(*dp, port) {
                    self.events.push(Event::Igmp {
                        datapath,
                        port: name,
                        keys: (*dp, port),
                        frame,
                    });
                }
            }
            CAct::Bfd { dp, counter } => {
                let port = self.scr.ctx.f[slot::INPORT] as u32;
                self.count(*counter);
                if let Some((datapath, port, frame)) = self.punted(*dp, port) {
                    self.events.push(Event::Bfd {
                        datapath,
                        port,
                        frame,
                    });
                }
            }
            CAct::BindVport {
                dp,
                vport,
                parent,
                counter,
            } => {
                let parent = self.scr.ctx.read(*parent) as u32;
                self.count(*counter);
                if self.mode != Mode::Trace {
                    let key = *dp;
                    if self.state.vports.get(&(key, *vport)) != Some(&parent) {
                        self.state.vports.insert((key, *vport), parent);
                        if let Some(d) = self.prog.dp_by_key(*dp) {
                            let name = |k: u32| {
                                d.ports.get(&k).map_or_else(String::new, |p| p.name.clone())
                            };
                            self.events.push(Event::BindVport {
                                datapath: d.name.clone(),
                                vport: name(*vport),
                                parent: name(parent),
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Where `chk_lb_aff()` loads a session's backend: `reg4` (IPv4), `xxreg0` (IPv6 on a switch),
/// `xxreg1` (IPv6 on a router), and its port into `reg8[0..15]` (OVN's
/// `MFF_LOG_LB_AFF_MATCH_*`).
pub(crate) const AFF_REG4: Bits = Bits {
    field: slot::XXREG1 as u8,
    lo: 96,
    width: 32,
};
pub(crate) const AFF_XXREG0: Bits = Bits {
    field: slot::XXREG0 as u8,
    lo: 0,
    width: 128,
};
pub(crate) const AFF_XXREG1: Bits = Bits {
    field: slot::XXREG1 as u8,
    lo: 0,
    width: 128,
};
pub(crate) const AFF_PORT: Bits = Bits {
    field: slot::XREG4 as u8,
    lo: 32,
    width: 16,
};

/// (source, destination) ports of the packet's L4 protocol `proto`.
fn l4_ports(ctx: &Ctx, proto: u8) -> (u16, u16) {
    let (s, d) = match proto {
        ip_proto::TCP => (slot::TCP_SRC, slot::TCP_DST),
        ip_proto::UDP => (slot::UDP_SRC, slot::UDP_DST),
        132 => (slot::SCTP_SRC, slot::SCTP_DST),
        _ => return (0, 0),
    };
    (ctx.f[s] as u16, ctx.f[d] as u16)
}

/// The two entries `commit_ecmp_nh` learns: this direction with `eth.src` (what
/// `chk_ecmp_nh_mac()` finds) and the reply direction without it (what `chk_ecmp_nh()` finds).
fn ecmp_keys(ctx: &Ctx, dp: u32, v6: bool, proto: u8) -> (EcmpKey, EcmpKey) {
    let (s, d) = if v6 {
        (ctx.f[slot::IP6_SRC], ctx.f[slot::IP6_DST])
    } else {
        (ctx.f[slot::IP4_SRC], ctx.f[slot::IP4_DST])
    };
    let (sp, dpt) = l4_ports(ctx, proto);
    let fwd = EcmpKey {
        dp,
        mac: Some(ctx.f[slot::ETH_SRC]),
        v6,
        src: s,
        dst: d,
        proto,
        sport: sp,
        dport: dpt,
    };
    let rev = EcmpKey {
        dp,
        mac: None,
        v6,
        src: d,
        dst: s,
        proto,
        sport: dpt,
        dport: sp,
    };
    (fwd, rev)
}
