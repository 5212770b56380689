//! DHCPv4 and DHCPv6 server replies as ovn-controller's pinctrl builds them for
//! `put_dhcp_opts` and `put_dhcpv6_opts`.
//!
//! # What it does
//!
//! - The option tables OVN 23.03 knows ([`DHCP4_OPTIONS`], [`DHCP6_OPTIONS`], from
//!   `lib/ovn-l7.h`; northd writes the same ones to SB `DHCP_Options`/`DHCPv6_Options`) and
//!   the encoding of an action's typed arguments into option bytes ([`Dhcp4Opts::encode`],
//!   [`Dhcp6Opts::encode`]): unknown names, values of the wrong kind and values that do not fit
//!   are a [`DhcpError`] naming the option.
//! - [`reply4`]: a DISCOVER becomes an OFFER, a REQUEST an ACK (a NAK when the requested
//!   address, option 50 or else `ciaddr`, is not the offered one), an INFORM an ACK without
//!   netmask, lease time, T1 and T2 and with `yiaddr` 0. Like pinctrl, the reply keeps the
//!   request's Ethernet and IP headers except the IP destination (the offered address, or
//!   255.255.255.255 when the request has the broadcast flag), its UDP ports and the DHCP
//!   header (with `op` = 2, `yiaddr`, `siaddr`), then the cookie, option 53, the options, four
//!   pad bytes and END. The UDP checksum is 0 (allowed for IPv4). `ls_in_dhcp_response`'s flow
//!   then sets the Ethernet and IP sources, the ports and the output port.
//! - [`reply6`]: SOLICIT → ADVERTISE; REQUEST, CONFIRM, DECLINE and INFORMATION-REQUEST →
//!   REPLY. The reply keeps the transaction id and the client's Client Identifier, and carries
//!   the server id (DUID-LL of `server_id`), an IA_NA with the client's IAID holding the
//!   `ia_addr` (infinite lifetimes; left out for an INFORMATION-REQUEST), the DNS servers and
//!   the domain search list; the UDP checksum is valid for the request's addresses (the
//!   response flow's rewrites adjust it incrementally).
//!
//! # What it does not do
//!
//! No lease state: OVN's DHCP is stateless (the offered address is in the flow). RELEASE and
//! DECLINE get no reply ([`DhcpError::NoReply`]), as in pinctrl. DHCPv6 RENEW/REBIND are not
//! answered (pinctrl does not either). Differences from pinctrl, deliberately: the IPv4 header
//! checksum covers IP options too, and the DHCPv6 domain search list is encoded as RFC 1035
//! labels (pinctrl writes the whole string as one label).
//!
//! # Invariants
//!
//! No input panics: every read is length-checked; a request that cannot be answered is an
//! error and `out` is left as it was.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{u8_at, u16_at, u32_at};
use crate::checksum::{checksum, fold, pseudo_header_sum, sum_words};
use crate::parse::{Parsed, ip_proto};

/// How an option's value is encoded (OVN's option types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptType {
    /// One or more IPv4 addresses.
    Ipv4,
    /// 0 or 1, one byte.
    Bool,
    /// One byte.
    Uint8,
    /// Two bytes.
    Uint16,
    /// Four bytes.
    Uint32,
    /// A string.
    Str,
    /// A string, or an IPv4 address (`tftp_server`).
    HostId,
    /// RFC 3442 classless static routes: pairs of (destination prefix, gateway).
    StaticRoutes,
    /// A comma-separated domain list, RFC 1035 encoded with compression (option 119).
    Domains,
    /// One or more IPv6 addresses (DHCPv6).
    Ipv6,
    /// An Ethernet address (DHCPv6 `server_id`).
    Mac,
}

/// One option OVN knows: its name in the action, its code and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptDef {
    /// The name in `put_dhcp_opts(name = value, ...)`.
    pub name: &'static str,
    /// The option code (0 for `offerip`, which is not an option).
    pub code: u16,
    /// Its type.
    pub ty: OptType,
}

const fn def(name: &'static str, code: u16, ty: OptType) -> OptDef {
    OptDef { name, code, ty }
}

/// DHCPv4 options of OVN 23.03 (`lib/ovn-l7.h`), with `offerip` (code 0).
pub const DHCP4_OPTIONS: &[OptDef] = &[
    def("offerip", 0, OptType::Ipv4),
    def("netmask", 1, OptType::Ipv4),
    def("router", 3, OptType::Ipv4),
    def("dns_server", 6, OptType::Ipv4),
    def("log_server", 7, OptType::Ipv4),
    def("lpr_server", 9, OptType::Ipv4),
    def("hostname", 12, OptType::Str),
    def("domain_name", 15, OptType::Str),
    def("swap_server", 16, OptType::Ipv4),
    def("policy_filter", 21, OptType::Ipv4),
    def("router_solicitation", 32, OptType::Ipv4),
    def("nis_server", 41, OptType::Ipv4),
    def("ntp_server", 42, OptType::Ipv4),
    def("server_id", 54, OptType::Ipv4),
    def("tftp_server", 66, OptType::HostId),
    def("classless_static_route", 121, OptType::StaticRoutes),
    def("ms_classless_static_route", 249, OptType::StaticRoutes),
    def("ip_forward_enable", 19, OptType::Bool),
    def("router_discovery", 31, OptType::Bool),
    def("ethernet_encap", 36, OptType::Bool),
    def("default_ttl", 23, OptType::Uint8),
    def("tcp_ttl", 37, OptType::Uint8),
    def("mtu", 26, OptType::Uint16),
    def("lease_time", 51, OptType::Uint32),
    def("T1", 58, OptType::Uint32),
    def("T2", 59, OptType::Uint32),
    def("bootfile_name", 67, OptType::Str),
    def("wpad", 252, OptType::Str),
    def("path_prefix", 210, OptType::Str),
    def("tftp_server_address", 150, OptType::Ipv4),
    def("domain_search_list", 119, OptType::Domains),
    def("broadcast_address", 28, OptType::Ipv4),
    def("netbios_name_server", 44, OptType::Ipv4),
    def("netbios_node_type", 46, OptType::Uint8),
    def("bootfile_name_alt", 254, OptType::Str),
    def("arp_cache_timeout", 35, OptType::Uint32),
    def("tcp_keepalive_interval", 38, OptType::Uint32),
    def("next_server", 253, OptType::Ipv4),
];

/// DHCPv6 options of OVN 23.03.
pub const DHCP6_OPTIONS: &[OptDef] = &[
    def("server_id", 2, OptType::Mac),
    def("ia_addr", 5, OptType::Ipv6),
    def("dns_server", 23, OptType::Ipv6),
    def("domain_search", 24, OptType::Str),
];

/// The option named `name` in `table`.
pub fn find(table: &[OptDef], name: &str) -> Option<OptDef> {
    table.iter().find(|d| d.name == name).copied()
}

/// One value of an action's option argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// A number or an address; `prefix` when written `a.b.c.d/N`.
    Num {
        /// The value.
        value: u128,
        /// Its prefix length.
        prefix: Option<u8>,
    },
    /// A quoted string.
    Str(String),
}

/// Why an option could not be encoded or a request not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DhcpError {
    /// The action names an option OVN does not know.
    #[error("unknown {family} option \"{name}\"")]
    UnknownOption {
        /// `DHCPv4` or `DHCPv6`.
        family: &'static str,
        /// The name.
        name: String,
    },
    /// The option's value is not what its type needs.
    #[error("{family} option {name}: {reason}")]
    BadValue {
        /// `DHCPv4` or `DHCPv6`.
        family: &'static str,
        /// The option.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// `put_dhcp_opts` without `offerip`.
    #[error("put_dhcp_opts requires offerip to be specified")]
    NoOfferIp,
    /// The packet is not a request this server answers.
    #[error("not a DHCP request that can be answered: {0}")]
    BadRequest(&'static str),
    /// A valid request that gets no reply (RELEASE, DECLINE).
    #[error("DHCP {0} gets no reply")]
    NoReply(&'static str),
}

fn bad(family: &'static str, name: &str, reason: impl Into<String>) -> DhcpError {
    DhcpError::BadValue {
        family,
        name: name.to_string(),
        reason: reason.into(),
    }
}

fn one<'a>(family: &'static str, name: &str, v: &'a [Arg]) -> Result<&'a Arg, DhcpError> {
    match v {
        [a] => Ok(a),
        [] => Err(bad(family, name, "no value")),
        _ => Err(bad(family, name, "takes one value, not a set")),
    }
}

fn num(family: &'static str, name: &str, v: &[Arg], max: u128) -> Result<u128, DhcpError> {
    match one(family, name, v)? {
        Arg::Num {
            value,
            prefix: None,
        } if *value <= max => Ok(*value),
        Arg::Num { prefix: None, .. } => Err(bad(
            family,
            name,
            format!("value does not fit (largest is {max})"),
        )),
        Arg::Num { .. } => Err(bad(family, name, "requires a value without a prefix")),
        Arg::Str(_) => Err(bad(family, name, "requires numeric value")),
    }
}

fn string<'a>(family: &'static str, name: &str, v: &'a [Arg]) -> Result<&'a str, DhcpError> {
    match one(family, name, v)? {
        Arg::Str(s) => Ok(s),
        Arg::Num { .. } => Err(bad(family, name, "requires string value")),
    }
}

fn ipv4s(name: &str, v: &[Arg]) -> Result<Vec<Ipv4Addr>, DhcpError> {
    if v.is_empty() {
        return Err(bad("DHCPv4", name, "no value"));
    }
    v.iter()
        .map(|a| match a {
            Arg::Num {
                value,
                prefix: None,
            } if *value <= u128::from(u32::MAX) => Ok(Ipv4Addr::from(*value as u32)),
            _ => Err(bad("DHCPv4", name, "requires IPv4 addresses")),
        })
        .collect()
}

/// RFC 1035 encoding of comma-separated `list`, with suffix compression (pointers relative to
/// the start of the encoding, as RFC 3397 asks). `Err` names what is wrong.
pub(crate) fn encode_domains(list: &str, compress: bool) -> Result<Vec<u8>, String> {
    let mut out: Vec<u8> = Vec::new();
    let mut seen: Vec<(String, u16)> = Vec::new();
    for domain in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let domain = domain.trim_end_matches('.');
        if domain.len() > 253 {
            return Err(format!(
                "domain name \"{domain}\" is longer than 253 characters"
            ));
        }
        let labels: Vec<&str> = domain.split('.').collect();
        let mut terminated = false;
        for i in 0..labels.len() {
            let suffix = labels[i..].join(".");
            if compress && let Some((_, off)) = seen.iter().find(|(s, _)| *s == suffix) {
                out.extend_from_slice(&(0xc000 | off).to_be_bytes());
                terminated = true;
                break;
            }
            let label = labels[i];
            if label.is_empty() || label.len() > 63 {
                return Err(format!(
                    "domain name \"{domain}\" has an empty or over-long label"
                ));
            }
            if out.len() < 0x3fff {
                seen.push((suffix, out.len() as u16));
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        if !terminated {
            out.push(0);
        }
    }
    Ok(out)
}

fn tlv4(out: &mut Vec<u8>, code: u16, name: &str, data: &[u8]) -> Result<(), DhcpError> {
    let len = u8::try_from(data.len())
        .map_err(|_| bad("DHCPv4", name, "encodes to more than 255 bytes"))?;
    out.push(code as u8);
    out.push(len);
    out.extend_from_slice(data);
    Ok(())
}

fn encode4(d: OptDef, v: &[Arg]) -> Result<Vec<u8>, DhcpError> {
    let f = "DHCPv4";
    let n = d.name;
    let data: Vec<u8> = match d.ty {
        OptType::Ipv4 => ipv4s(n, v)?.iter().flat_map(|a| a.octets()).collect(),
        OptType::Bool => vec![num(f, n, v, 1)? as u8],
        OptType::Uint8 => vec![num(f, n, v, 0xff)? as u8],
        OptType::Uint16 => (num(f, n, v, 0xffff)? as u16).to_be_bytes().to_vec(),
        OptType::Uint32 => (num(f, n, v, u128::from(u32::MAX))? as u32)
            .to_be_bytes()
            .to_vec(),
        OptType::Str => string(f, n, v)?.as_bytes().to_vec(),
        OptType::HostId => match one(f, n, v)? {
            Arg::Str(s) => s.as_bytes().to_vec(),
            Arg::Num { .. } => ipv4s(n, v)?[0].octets().to_vec(),
        },
        OptType::StaticRoutes => {
            if !v.len().is_multiple_of(2) {
                return Err(bad(f, n, "requires pairs of destination and gateway"));
            }
            let mut out = Vec::new();
            for pair in v.chunks_exact(2) {
                let (dst, plen) = match &pair[0] {
                    Arg::Num { value, prefix } if *value <= u128::from(u32::MAX) => {
                        (*value as u32, prefix.unwrap_or(32))
                    }
                    _ => return Err(bad(f, n, "destinations must be IPv4 prefixes")),
                };
                if plen > 32 {
                    return Err(bad(f, n, format!("prefix length {plen} is over 32")));
                }
                let gw = ipv4s(n, std::slice::from_ref(&pair[1]))?[0];
                out.push(plen);
                let bytes = usize::from(plen).div_ceil(8);
                out.extend_from_slice(&dst.to_be_bytes()[..bytes]);
                out.extend_from_slice(&gw.octets());
            }
            out
        }
        OptType::Domains => encode_domains(string(f, n, v)?, true).map_err(|e| bad(f, n, e))?,
        OptType::Ipv6 | OptType::Mac => return Err(bad(f, n, "not a DHCPv4 option type")),
    };
    let mut out = Vec::with_capacity(data.len() + 2);
    tlv4(&mut out, d.code, n, &data)?;
    Ok(out)
}

/// The encoded arguments of one `put_dhcp_opts`, in the order pinctrl uses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcp4Opts {
    /// `offerip`.
    pub offer_ip: Ipv4Addr,
    /// Option 67 (`bootfile_name`), encoded.
    pub bootfile: Option<Vec<u8>>,
    /// Option 254 (`bootfile_name_alt`), encoded.
    pub bootfile_alt: Option<Vec<u8>>,
    /// Option 253 (`next_server`), encoded: also loaded into `siaddr`.
    pub next_server: Option<(Ipv4Addr, Vec<u8>)>,
    /// Every other option, encoded, in the action's order.
    pub rest: Vec<u8>,
}

impl Dhcp4Opts {
    /// Encodes `put_dhcp_opts`'s arguments (name → values). Needs `offerip`.
    pub fn encode(args: &[(String, Vec<Arg>)]) -> Result<Dhcp4Opts, DhcpError> {
        let mut o = Dhcp4Opts {
            offer_ip: Ipv4Addr::UNSPECIFIED,
            bootfile: None,
            bootfile_alt: None,
            next_server: None,
            rest: Vec::new(),
        };
        let mut offer = None;
        for (name, v) in args {
            let d = find(DHCP4_OPTIONS, name).ok_or_else(|| DhcpError::UnknownOption {
                family: "DHCPv4",
                name: name.clone(),
            })?;
            match d.code {
                0 => {
                    let a = ipv4s(name, v)?;
                    if a.len() != 1 {
                        return Err(bad("DHCPv4", name, "takes one address"));
                    }
                    offer = Some(a[0]);
                }
                67 => o.bootfile = Some(encode4(d, v)?),
                254 => o.bootfile_alt = Some(encode4(d, v)?),
                253 => {
                    let a = ipv4s(name, v)?;
                    o.next_server = Some((a[0], encode4(d, &v[..1])?));
                }
                _ => o.rest.extend_from_slice(&encode4(d, v)?),
            }
        }
        o.offer_ip = offer.ok_or(DhcpError::NoOfferIp)?;
        Ok(o)
    }

    /// The options of a reply to a request with (`ipxe`) or without option 175, as pinctrl
    /// orders them: boot file (67, or 254 renamed 67), next server, the rest.
    fn options(&self, ipxe: bool) -> Vec<u8> {
        let mut out = Vec::new();
        match (&self.bootfile, &self.bootfile_alt) {
            (Some(b), Some(_)) if ipxe => out.extend_from_slice(b),
            (Some(_), Some(alt)) | (None, Some(alt)) => {
                out.push(67);
                out.extend_from_slice(alt.get(1..).unwrap_or(&[]));
            }
            (Some(b), None) => out.extend_from_slice(b),
            (None, None) => {}
        }
        if let Some((_, ns)) = &self.next_server {
            out.extend_from_slice(ns);
        }
        out.extend_from_slice(&self.rest);
        out
    }
}

/// DHCP message types.
pub mod msg {
    /// DHCPDISCOVER.
    pub const DISCOVER: u8 = 1;
    /// DHCPOFFER.
    pub const OFFER: u8 = 2;
    /// DHCPREQUEST.
    pub const REQUEST: u8 = 3;
    /// DHCPDECLINE.
    pub const DECLINE: u8 = 4;
    /// DHCPACK.
    pub const ACK: u8 = 5;
    /// DHCPNAK.
    pub const NAK: u8 = 6;
    /// DHCPRELEASE.
    pub const RELEASE: u8 = 7;
    /// DHCPINFORM.
    pub const INFORM: u8 = 8;
}

/// Fixed DHCP header (op .. file).
const DHCP_HEADER_LEN: usize = 236;
const MAGIC: u32 = 0x6382_5363;

/// What a DHCPv4 request asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request4 {
    /// Option 53.
    pub msg_type: u8,
    /// Option 50, else `ciaddr`.
    pub requested_ip: Ipv4Addr,
    /// Option 175 (iPXE) was present.
    pub ipxe: bool,
    /// The broadcast flag.
    pub broadcast: bool,
}

/// Parses the DHCP message in a UDP payload.
pub fn parse_request4(dhcp: &[u8]) -> Result<Request4, DhcpError> {
    if dhcp.len() < DHCP_HEADER_LEN + 4 {
        return Err(DhcpError::BadRequest("truncated DHCP header"));
    }
    if dhcp[0] != 1 {
        return Err(DhcpError::BadRequest("op is not BOOTREQUEST"));
    }
    if u32_at(dhcp, DHCP_HEADER_LEN) != Some(MAGIC) {
        return Err(DhcpError::BadRequest("no DHCP magic cookie"));
    }
    let ciaddr = u32_at(dhcp, 12).unwrap_or(0);
    let flags = u16_at(dhcp, 10).unwrap_or(0);
    let mut r = Request4 {
        msg_type: 0,
        requested_ip: Ipv4Addr::from(ciaddr),
        ipxe: false,
        broadcast: flags & 0x8000 != 0,
    };
    let mut at = DHCP_HEADER_LEN + 4;
    let mut have_type = false;
    while let Some(code) = u8_at(dhcp, at) {
        if code == 255 {
            break;
        }
        if code == 0 {
            at += 1;
            continue;
        }
        let Some(len) = u8_at(dhcp, at + 1) else {
            break;
        };
        let body = at + 2;
        let end = body + usize::from(len);
        if end > dhcp.len() {
            break;
        }
        match (code, len) {
            (53, 1) => {
                r.msg_type = dhcp[body];
                have_type = true;
            }
            (50, 4) => r.requested_ip = Ipv4Addr::from(u32_at(dhcp, body).unwrap_or(0)),
            (175, _) => r.ipxe = true,
            _ => {}
        }
        at = end;
    }
    if !have_type {
        return Err(DhcpError::BadRequest("missing DHCP message type"));
    }
    Ok(r)
}

/// The UDP payload of `frame` (by `p`'s layout), checked to be UDP over IP.
fn udp_payload<'a>(frame: &'a [u8], p: &Parsed) -> Result<(usize, &'a [u8]), &'static str> {
    if !p.has_l4() || p.key.ip_proto != ip_proto::UDP {
        return Err("not a UDP packet");
    }
    check_layout(frame, p)?;
    let l4 = usize::from(p.layout.l4);
    let end = usize::from(p.layout.end).min(frame.len());
    let udp_len = usize::from(u16_at(frame, l4 + 4).ok_or("truncated UDP header")?);
    let end = end.min(l4.saturating_add(udp_len));
    let payload = frame.get(l4 + 8..end).ok_or("truncated UDP header")?;
    Ok((l4, payload))
}

/// Checks that `p`'s layout fits `frame` (an IPv4/IPv6 header between L3 and L4, L4 inside
/// the frame), so the builders can index without panicking.
pub(crate) fn check_layout(frame: &[u8], p: &Parsed) -> Result<(), &'static str> {
    let l3 = usize::from(p.layout.l3);
    let l4 = usize::from(p.layout.l4);
    let min = if p.key.is_ipv4() { 20 } else { 40 };
    if l4 == 0 || l4 < l3 + min || l4 + 8 > frame.len() || !(p.key.is_ipv4() || p.key.is_ipv6()) {
        return Err("the frame does not match its parsed layout");
    }
    Ok(())
}

/// Whether a reply with `l4_len` bytes of L4 after `p`'s headers fits a frame (lengths are
/// 16-bit).
pub(crate) fn fits(p: &Parsed, l4_len: usize) -> bool {
    usize::from(p.layout.l4) + l4_len <= crate::parse::MAX_FRAME
}

/// Appends `frame`'s headers up to L4, then `l4` (a UDP header and payload or an ICMPv6
/// message), and fixes the IP lengths and the IPv4 header checksum (after setting the IPv4
/// destination to `ip4_dst` when given). Returns the start of L4 in `out`.
pub(crate) fn copy_l2_l3(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    l4: &[u8],
    ip4_dst: Option<Ipv4Addr>,
) -> usize {
    let start = out.len();
    let l3 = usize::from(p.layout.l3);
    let l4_at = usize::from(p.layout.l4);
    out.extend_from_slice(&frame[..l4_at]);
    out.extend_from_slice(l4);
    if p.key.is_ipv4() {
        let ihl = (usize::from(frame[l3] & 0x0f) * 4).min(l4_at - l3);
        let total = (l4_at - l3 + l4.len()) as u16;
        let h = start + l3;
        out[h + 2..h + 4].copy_from_slice(&total.to_be_bytes());
        if let Some(dst) = ip4_dst {
            out[h + 16..h + 20].copy_from_slice(&dst.octets());
        }
        out[h + 10..h + 12].copy_from_slice(&[0, 0]);
        let cs = checksum(&out[h..h + ihl]);
        out[h + 10..h + 12].copy_from_slice(&cs.to_be_bytes());
    } else {
        let plen = (l4_at.saturating_sub(l3 + 40) + l4.len()) as u16;
        let h = start + l3;
        out[h + 4..h + 6].copy_from_slice(&plen.to_be_bytes());
    }
    start + l4_at
}

/// The L4 checksum over IPv6 pseudo-header for the message at `out[l4..]` whose checksum field
/// is at `l4 + at` (and zero).
pub(crate) fn fix_l4_checksum6(out: &mut [u8], p: &Parsed, l4: usize, proto: u8, at: usize) {
    let src = p.key.ip6_src;
    let dst = p.key.ip6_dst;
    let len = out.len() - l4;
    let acc = pseudo_header_sum(src.into(), dst.into(), proto, len as u32);
    let mut cs = !fold(sum_words(acc, &out[l4..]));
    if cs == 0 && proto == ip_proto::UDP {
        cs = 0xffff;
    }
    out[l4 + at..l4 + at + 2].copy_from_slice(&cs.to_be_bytes());
}

/// Builds pinctrl's reply to the DHCPv4 request in `frame` (parsed as `p`) with `opts`,
/// appending the frame to `out`. Returns the reply's message type.
pub fn reply4(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    opts: &Dhcp4Opts,
) -> Result<u8, DhcpError> {
    if !p.key.is_ipv4() {
        return Err(DhcpError::BadRequest("not IPv4"));
    }
    let (l4, dhcp) = udp_payload(frame, p).map_err(DhcpError::BadRequest)?;
    let req = parse_request4(dhcp)?;
    let reply = match req.msg_type {
        msg::DISCOVER => msg::OFFER,
        msg::REQUEST if req.requested_ip == opts.offer_ip => msg::ACK,
        msg::REQUEST => msg::NAK,
        msg::INFORM => msg::ACK,
        msg::RELEASE => return Err(DhcpError::NoReply("RELEASE")),
        msg::DECLINE => return Err(DhcpError::NoReply("DECLINE")),
        _ => return Err(DhcpError::BadRequest("unsupported DHCP message type")),
    };
    let mut options = opts.options(req.ipxe);
    if req.msg_type == msg::INFORM {
        options = strip_options(&options, &[1, 51, 58, 59]);
    }
    let mut l4b = Vec::with_capacity(8 + DHCP_HEADER_LEN + 16 + options.len());
    l4b.extend_from_slice(&frame[l4..l4 + 8]);
    l4b.extend_from_slice(&dhcp[..DHCP_HEADER_LEN]);
    l4b[8] = 2;
    let (yiaddr, siaddr) = match (req.msg_type, reply) {
        (msg::INFORM, _) => (
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::from(u32_at(dhcp, 20).unwrap_or(0)),
        ),
        (_, msg::NAK) => (Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED),
        _ => (
            opts.offer_ip,
            opts.next_server
                .as_ref()
                .map_or(Ipv4Addr::from(u32_at(dhcp, 20).unwrap_or(0)), |n| n.0),
        ),
    };
    l4b[8 + 16..8 + 20].copy_from_slice(&yiaddr.octets());
    l4b[8 + 20..8 + 24].copy_from_slice(&siaddr.octets());
    l4b.extend_from_slice(&MAGIC.to_be_bytes());
    l4b.extend_from_slice(&[53, 1, reply]);
    if reply != msg::NAK {
        l4b.extend_from_slice(&options);
    }
    l4b.extend_from_slice(&[0, 0, 0, 0, 255, 0, 0, 0, 0]);
    if !fits(p, l4b.len()) {
        return Err(DhcpError::BadRequest("the reply would not fit a frame"));
    }
    let udp_len = l4b.len() as u16;
    l4b[4..6].copy_from_slice(&udp_len.to_be_bytes());
    l4b[6..8].copy_from_slice(&[0, 0]);
    let dst = if req.broadcast {
        Ipv4Addr::BROADCAST
    } else {
        opts.offer_ip
    };
    copy_l2_l3(out, frame, p, &l4b, Some(dst));
    Ok(reply)
}

/// `opts` (encoded TLVs) without the options whose codes are in `drop`.
fn strip_options(opts: &[u8], drop: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(opts.len());
    let mut at = 0;
    while at + 2 <= opts.len() {
        let end = (at + 2 + usize::from(opts[at + 1])).min(opts.len());
        if !drop.contains(&opts[at]) {
            out.extend_from_slice(&opts[at..end]);
        }
        at = end;
    }
    out
}

/// One encoded DHCPv6 option of `put_dhcpv6_opts`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dhcp6Opt {
    /// `server_id`: the server's MAC (sent as a DUID-LL).
    ServerId([u8; 6]),
    /// `ia_addr`: the address offered in an IA_NA.
    IaAddr(Ipv6Addr),
    /// `dns_server`.
    DnsServer(Vec<Ipv6Addr>),
    /// `domain_search`, RFC 1035 encoded (once, when the action is encoded).
    DomainSearch(Vec<u8>),
}

/// The arguments of one `put_dhcpv6_opts`, in the action's order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dhcp6Opts {
    /// The options.
    pub opts: Vec<Dhcp6Opt>,
}

impl Dhcp6Opts {
    /// Encodes `put_dhcpv6_opts`'s arguments.
    pub fn encode(args: &[(String, Vec<Arg>)]) -> Result<Dhcp6Opts, DhcpError> {
        let f = "DHCPv6";
        let mut o = Dhcp6Opts::default();
        for (name, v) in args {
            let d = find(DHCP6_OPTIONS, name).ok_or_else(|| DhcpError::UnknownOption {
                family: f,
                name: name.clone(),
            })?;
            let ipv6s = || -> Result<Vec<Ipv6Addr>, DhcpError> {
                if v.is_empty() {
                    return Err(bad(f, name, "no value"));
                }
                v.iter()
                    .map(|a| match a {
                        Arg::Num {
                            value,
                            prefix: None,
                        } => Ok(Ipv6Addr::from(*value)),
                        _ => Err(bad(f, name, "requires IPv6 addresses")),
                    })
                    .collect()
            };
            o.opts.push(match d.ty {
                OptType::Mac => {
                    let m = num(f, name, v, (1 << 48) - 1)? as u64;
                    let b = m.to_be_bytes();
                    Dhcp6Opt::ServerId([b[2], b[3], b[4], b[5], b[6], b[7]])
                }
                OptType::Ipv6 if d.code == 5 => {
                    let a = ipv6s()?;
                    if a.len() != 1 {
                        return Err(bad(f, name, "takes one address"));
                    }
                    Dhcp6Opt::IaAddr(a[0])
                }
                OptType::Ipv6 => Dhcp6Opt::DnsServer(ipv6s()?),
                _ => {
                    let s = string(f, name, v)?;
                    Dhcp6Opt::DomainSearch(encode_domains(s, false).map_err(|e| bad(f, name, e))?)
                }
            });
        }
        Ok(o)
    }
}

/// DHCPv6 message types.
pub mod msg6 {
    /// SOLICIT.
    pub const SOLICIT: u8 = 1;
    /// ADVERTISE.
    pub const ADVERTISE: u8 = 2;
    /// REQUEST.
    pub const REQUEST: u8 = 3;
    /// CONFIRM.
    pub const CONFIRM: u8 = 4;
    /// REPLY.
    pub const REPLY: u8 = 7;
    /// DECLINE.
    pub const DECLINE: u8 = 9;
    /// INFORMATION-REQUEST.
    pub const INFO_REQ: u8 = 11;
}

fn opt6(out: &mut Vec<u8>, code: u16, body: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
}

/// Builds pinctrl's reply to the DHCPv6 request in `frame` with `opts`, appending the frame to
/// `out`. Returns the reply's message type.
pub fn reply6(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    opts: &Dhcp6Opts,
) -> Result<u8, DhcpError> {
    if !p.key.is_ipv6() {
        return Err(DhcpError::BadRequest("not IPv6"));
    }
    let (l4, m) = udp_payload(frame, p).map_err(DhcpError::BadRequest)?;
    let ty = *m
        .first()
        .ok_or(DhcpError::BadRequest("empty DHCPv6 message"))?;
    let reply = match ty {
        msg6::SOLICIT => msg6::ADVERTISE,
        msg6::REQUEST | msg6::CONFIRM | msg6::DECLINE | msg6::INFO_REQ => msg6::REPLY,
        _ => return Err(DhcpError::BadRequest("unsupported DHCPv6 message type")),
    };
    if m.len() < 4 {
        return Err(DhcpError::BadRequest("truncated DHCPv6 header"));
    }
    let mut iaid = None;
    let mut client_id: Option<&[u8]> = None;
    let mut at = 4;
    while at + 4 <= m.len() {
        let code = u16_at(m, at).unwrap_or(0);
        let len = usize::from(u16_at(m, at + 2).unwrap_or(0));
        let end = at + 4 + len;
        if end > m.len() {
            return Err(DhcpError::BadRequest("DHCPv6 option overruns the message"));
        }
        match code {
            3 if len >= 12 => iaid = u32_at(m, at + 4),
            1 => client_id = Some(&m[at..end]),
            _ => {}
        }
        at = end;
    }
    let client_id = client_id.ok_or(DhcpError::BadRequest("no Client Identifier"))?;
    if iaid.is_none() && ty != msg6::INFO_REQ {
        return Err(DhcpError::BadRequest("no IA_NA"));
    }
    let mut l4b = Vec::with_capacity(128);
    l4b.extend_from_slice(&frame[l4..l4 + 8]);
    l4b.push(reply);
    l4b.extend_from_slice(&m[1..4]);
    l4b.extend_from_slice(client_id);
    for o in &opts.opts {
        match o {
            Dhcp6Opt::ServerId(mac) => {
                let mut b = vec![0, 3, 0, 1];
                b.extend_from_slice(mac);
                opt6(&mut l4b, 2, &b);
            }
            Dhcp6Opt::IaAddr(a) => {
                let Some(iaid) = iaid else {
                    continue;
                };
                let mut ia = Vec::with_capacity(40);
                ia.extend_from_slice(&iaid.to_be_bytes());
                ia.extend_from_slice(&u32::MAX.to_be_bytes());
                ia.extend_from_slice(&u32::MAX.to_be_bytes());
                let mut addr = a.octets().to_vec();
                addr.extend_from_slice(&u32::MAX.to_be_bytes());
                addr.extend_from_slice(&u32::MAX.to_be_bytes());
                opt6(&mut ia, 5, &addr);
                opt6(&mut l4b, 3, &ia);
            }
            Dhcp6Opt::DnsServer(v) => {
                let b: Vec<u8> = v.iter().flat_map(|a| a.octets()).collect();
                opt6(&mut l4b, 23, &b);
            }
            Dhcp6Opt::DomainSearch(b) => opt6(&mut l4b, 24, b),
        }
    }
    if !fits(p, l4b.len()) {
        return Err(DhcpError::BadRequest("the reply would not fit a frame"));
    }
    let udp_len = l4b.len() as u16;
    l4b[4..6].copy_from_slice(&udp_len.to_be_bytes());
    l4b[6..8].copy_from_slice(&[0, 0]);
    let l4_out = copy_l2_l3(out, frame, p, &l4b, None);
    fix_l4_checksum6(out, p, l4_out, ip_proto::UDP, 6);
    Ok(reply)
}
