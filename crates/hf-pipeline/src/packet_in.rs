//! Packet-in actions done in the datapath: `put_dhcp_opts`, `put_dhcpv6_opts`, `dns_lookup`
//! and `put_nd_ra_opts`.
//!
//! # What it does
//!
//! OVN sends these packets to ovn-controller (pinctrl), which builds the reply and resumes the
//! pipeline with it as a continuation. holdfast does the same work in the pipeline, without a
//! round trip, when [`crate::Pipeline::set_packet_in`] is on:
//!
//! - At compile time the action's options are typed and encoded with OVN 23.03's option
//!   tables (`hf_wire::dhcp`, `hf_wire::ra`): an unknown option, a value of the wrong kind or
//!   one that does not fit is a flow compile error naming the option, in either mode.
//! - At run time the packet becomes the reply, built as pinctrl builds it (`hf_wire::dhcp`,
//!   `hf_wire::dns`, `hf_wire::ra`): it keeps the request's addresses except what pinctrl
//!   changes (the DHCPv4 IP destination), so the next stage's flow (`ls_in_dhcp_response`,
//!   `ls_in_dns_response`, `lr_in_nd_ra_response`) sets or swaps them; the result bit is 1.
//!   A request that cannot be answered (malformed, unsupported type, DNS name without a
//!   record in [`crate::ProgramSpec::dns`] for this datapath, RELEASE/DECLINE) leaves the
//!   packet alone and stores 0, as pinctrl does, and the pipeline continues either way.
//! - [`PacketInStats`] counts replies by kind and failures ([`crate::Pipeline::packet_in_stats`]).
//!
//! With packet-in off (the default, `holdfast trace`), `put_*` store 1 and `dns_lookup` 0
//! and the packet is untouched, as ovn-trace models them.
//!
//! # The flow cache
//!
//! A reply depends on the payload (DHCP message type, transaction id, DNS name), which no
//! classifier field describes, so a segment whose walk ran a packet-in action in packet-in mode
//! is marked uncacheable: every such packet takes the full walk, and the cached path and the
//! full walk give the same outputs by construction (`tests/packet_in.rs` checks it). With
//! packet-in off the action is a constant store and caches like any other.

use hf_expr::actions::{OptValue, ResultFn};
use hf_wire::dhcp::{self, Arg, Dhcp4Opts, Dhcp6Opts};
use hf_wire::ra::RaOpts;

use crate::interp::Runner;
use crate::program::CAct;

/// What one packet-in action answers with, encoded at compile time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// `put_dhcp_opts`.
    Dhcp4(Dhcp4Opts),
    /// `put_dhcpv6_opts`.
    Dhcp6(Dhcp6Opts),
    /// `dns_lookup()` in the datapath with this tunnel key.
    Dns {
        /// The datapath's tunnel key.
        dp: u32,
    },
    /// `put_nd_ra_opts`.
    Ra(RaOpts),
}

/// Counts of packet-in work: replies built and requests that could not be answered (the result
/// bit was set to 0), per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketInStats {
    /// DHCPv4 OFFER/ACK/NAK built.
    pub dhcp4_replies: u64,
    /// DHCPv6 ADVERTISE/REPLY built.
    pub dhcp6_replies: u64,
    /// DNS answers built.
    pub dns_replies: u64,
    /// Router advertisements built.
    pub ra_replies: u64,
    /// Requests that got no reply (bad or unsupported request, no record, nothing to answer).
    pub failures: u64,
}

impl PacketInStats {
    /// Replies of every kind.
    pub fn replies(&self) -> u64 {
        self.dhcp4_replies + self.dhcp6_replies + self.dns_replies + self.ra_replies
    }
}

/// One option value as `hf_wire` takes it.
fn args(opts: &[(String, OptValue)], what: &str) -> Result<Vec<(String, Vec<Arg>)>, String> {
    fn one(name: &str, v: &OptValue, out: &mut Vec<Arg>, what: &str) -> Result<(), String> {
        match v {
            OptValue::Const(c) => {
                let prefix = match c.mask {
                    None => None,
                    Some(_) => {
                        let v4 = c.format == hf_expr::Format::Ipv4;
                        let m = c.mask_bits(if v4 { 32 } else { 128 });
                        let m = if v4 { m << 96 } else { m };
                        let ones = m.leading_ones();
                        if m.checked_shl(ones).unwrap_or(0) != 0 {
                            return Err(format!("{what} option {name}: the mask is not a prefix"));
                        }
                        Some(ones as u8)
                    }
                };
                out.push(Arg::Num {
                    value: c.value,
                    prefix,
                });
            }
            OptValue::Str(s) => out.push(Arg::Str(s.clone())),
            OptValue::Set(vs) => {
                for v in vs {
                    one(name, v, out, what)?;
                }
            }
            OptValue::Field(f) => {
                return Err(format!(
                    "{what} option {name}: a field ({}) is not a constant",
                    f
                ));
            }
            _ => return Err(format!("{what} option {name}: unsupported value")),
        }
        Ok(())
    }
    opts.iter()
        .map(|(n, v)| {
            let mut a = Vec::new();
            one(n, v, &mut a, what)?;
            Ok((n.clone(), a))
        })
        .collect()
}

impl Request {
    /// Types and encodes the options of `func` (a packet-in function) in datapath `dp`.
    pub(crate) fn compile(func: &ResultFn, dp: u32) -> Result<Request, String> {
        let name = func.name();
        match func {
            ResultFn::PutDhcpOpts { v6: false, opts } => Dhcp4Opts::encode(&args(opts, "DHCPv4")?)
                .map(Request::Dhcp4)
                .map_err(|e| format!("{name}: {e}")),
            ResultFn::PutDhcpOpts { v6: true, opts } => Dhcp6Opts::encode(&args(opts, "DHCPv6")?)
                .map(Request::Dhcp6)
                .map_err(|e| format!("{name}: {e}")),
            ResultFn::PutNdRaOpts { opts } => RaOpts::encode(&args(opts, "IPv6 ND RA")?)
                .map(Request::Ra)
                .map_err(|e| format!("{name}: {e}")),
            ResultFn::DnsLookup => Ok(Request::Dns { dp }),
            other => Err(format!("{} is not a packet-in action", other.name())),
        }
    }
}

/// Which counter a reply goes to.
#[derive(Clone, Copy)]
enum Kind {
    Dhcp4,
    Dhcp6,
    Dns,
    Ra,
}

impl Runner<'_> {
    /// Runs a [`CAct::PacketIn`]: counts it, then builds the reply (packet-in mode) or stores
    /// the ovn-trace constant.
    pub(crate) fn exec_packet_in(&mut self, act: &CAct) {
        let CAct::PacketIn {
            dst,
            req,
            fallback,
            name,
            counter,
        } = act
        else {
            return;
        };
        self.count(*counter);
        if !self.packet_in {
            self.scr.ctx.write(*dst, u128::from(*fallback));
            if self.trace.is_some() {
                let how = if *fallback == 1 {
                    "the packet is assumed to be a request; the reply is built by the chassis"
                } else {
                    "not implemented"
                };
                self.note(format!("  {name}: result {fallback} (as ovn-trace: {how})"));
            }
            return;
        }
        let result = self.build_reply(req);
        let ok = result.is_ok();
        if self.mode != crate::interp::Mode::Trace {
            let s = &mut *self.pin_stats;
            match result {
                Ok(Kind::Dhcp4) => s.dhcp4_replies += 1,
                Ok(Kind::Dhcp6) => s.dhcp6_replies += 1,
                Ok(Kind::Dns) => s.dns_replies += 1,
                Ok(Kind::Ra) => s.ra_replies += 1,
                Err(_) => s.failures += 1,
            }
        }
        self.scr.ctx.write(*dst, u128::from(ok));
        if self.trace.is_some() {
            match &result {
                Ok(_) => self.note(format!("  {name}: reply built, result 1")),
                Err(e) => self.note(format!("  {name}: no reply ({e}), result 0")),
            }
        }
    }

    /// Replaces the packet by the reply to it, or says why there is none.
    fn build_reply(&mut self, req: &Request) -> Result<Kind, String> {
        let scr = &mut *self.scr;
        let ctx = &scr.ctx;
        let out = &mut scr.build;
        out.clear();
        let kind = match req {
            Request::Dhcp4(o) => dhcp::reply4(out, &ctx.frame, &ctx.parsed, o)
                .map(|_| Kind::Dhcp4)
                .map_err(|e| e.to_string())?,
            Request::Dhcp6(o) => dhcp::reply6(out, &ctx.frame, &ctx.parsed, o)
                .map(|_| Kind::Dhcp6)
                .map_err(|e| e.to_string())?,
            Request::Ra(o) => hf_wire::ra::reply(out, &ctx.frame, &ctx.parsed, o)
                .map(|_| Kind::Ra)
                .map_err(|e| e.to_string())?,
            Request::Dns { dp } => {
                let q =
                    hf_wire::dns::query_of(&ctx.frame, &ctx.parsed).map_err(|e| e.to_string())?;
                let rec = self
                    .prog
                    .dns
                    .get(dp)
                    .and_then(|r| r.get(&q.name))
                    .ok_or_else(|| hf_wire::dns::DnsError::NoRecord(q.name.clone()).to_string())?;
                hf_wire::dns::answer_query(out, &ctx.frame, &ctx.parsed, &q, rec)
                    .map(|_| Kind::Dns)
                    .map_err(|e| e.to_string())?
            }
        };
        let k = ctx.parsed.key;
        let p = hf_wire::parse(out, k.in_port, k.metadata).map_err(|e| e.to_string())?;
        std::mem::swap(&mut scr.ctx.frame, &mut scr.build);
        scr.ctx.parsed = p;
        scr.ctx.load_headers();
        Ok(kind)
    }
}
