//! The Linux kernel's own conntrack table, read with `conntrack -L` (Debian's `conntrack`):
//! for checking that holdfast never touches it (zone 0 included).
//!
//! A namespace's kernel conntrack only tracks once something in it uses conntrack:
//! [`Netns::track_connections`] adds an nftables rule that does (and changes no verdict).

use std::net::IpAddr;
use std::process::Command;

use crate::cmd::{self, DEFAULT_TIMEOUT};
use crate::{KitError, Netns, Result};

/// One direction of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (TCP, UDP, SCTP).
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
}

/// One entry of the kernel's conntrack table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `tcp`, `udp`, `icmp`, ...
    pub proto: String,
    /// Seconds until it expires.
    pub timeout: Option<u64>,
    /// The TCP state (`ESTABLISHED`, `TIME_WAIT`, ...).
    pub state: Option<String>,
    /// The original direction.
    pub orig: Tuple,
    /// The reply direction (NAT shows here).
    pub reply: Tuple,
    /// Its zone (0 when the entry names none).
    pub zone: u16,
    /// Its mark.
    pub mark: u32,
    /// `[ASSURED]`.
    pub assured: bool,
}

impl Entry {
    /// Whether `port` is either port of the original direction.
    pub fn has_port(&self, port: u16) -> bool {
        self.orig.sport == Some(port) || self.orig.dport == Some(port)
    }
}

/// Read `conntrack -L` output (`-o extended` lines, with their leading `ipv4 2`, too).
pub fn parse(text: &str) -> Result<Vec<Entry>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("conntrack v"))
        .map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Result<Entry> {
    let bad = |detail: &str| KitError::Parse {
        what: "a conntrack entry".into(),
        detail: format!("{detail}: {line}"),
    };
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if matches!(words.first(), Some(&"ipv4" | &"ipv6")) {
        words.drain(..2);
    }
    let proto = words.first().ok_or_else(|| bad("empty"))?.to_string();
    // `tcp 6 431999 ESTABLISHED src=...`: the protocol number, the timeout, maybe a state.
    let timeout = words.get(2).and_then(|w| w.parse().ok());
    let state = words
        .get(3)
        .filter(|w| !w.contains('=') && !w.starts_with('['))
        .map(|w| w.to_string());
    let mut tuples: Vec<[Option<&str>; 4]> = Vec::new();
    let (mut zone, mut mark, mut assured) = (0, 0, false);
    for w in &words {
        if *w == "[ASSURED]" {
            assured = true;
            continue;
        }
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        let slot = match k {
            "src" => {
                tuples.push([None; 4]);
                0
            }
            "dst" => 1,
            "sport" => 2,
            "dport" => 3,
            "zone" => {
                zone = v.parse().map_err(|_| bad("bad zone"))?;
                continue;
            }
            "mark" => {
                mark = v.parse().map_err(|_| bad("bad mark"))?;
                continue;
            }
            _ => continue,
        };
        if let Some(t) = tuples.last_mut() {
            t[slot] = Some(v);
        }
    }
    let tuple = |t: Option<&[Option<&str>; 4]>| -> Result<Tuple> {
        let t = t.ok_or_else(|| bad("fewer than two tuples"))?;
        let ip = |s: Option<&str>| {
            s.and_then(|s| s.parse::<IpAddr>().ok())
                .ok_or_else(|| bad("bad address"))
        };
        let port = |s: Option<&str>| s.and_then(|s| s.parse::<u16>().ok());
        Ok(Tuple {
            src: ip(t[0])?,
            dst: ip(t[1])?,
            sport: port(t[2]),
            dport: port(t[3]),
        })
    };
    Ok(Entry {
        proto,
        timeout,
        state,
        orig: tuple(tuples.first())?,
        reply: tuple(tuples.get(1))?,
        zone,
        mark,
        assured,
    })
}

/// The host's own conntrack table (the namespace the test process runs in). Only reads.
pub fn host() -> Result<Vec<Entry>> {
    let out = cmd::run(Command::new("conntrack").arg("-L"), DEFAULT_TIMEOUT)?;
    parse(&out)
}

impl Netns {
    /// This namespace's kernel conntrack table (`conntrack -L`), every zone.
    pub fn conntrack(&self) -> Result<Vec<Entry>> {
        parse(&self.run(&["conntrack", "-L"])?)
    }

    /// Make the kernel track connections in this namespace: an nftables table
    /// `inet hf_testkit` whose only rule counts new connections (every packet is still
    /// accepted). Without a rule that uses conntrack, a namespace's table stays empty.
    pub fn track_connections(&self) -> Result<()> {
        let script = "table inet hf_testkit {\n\
                      \tchain track_in {\n\
                      \t\ttype filter hook prerouting priority -150; policy accept;\n\
                      \t\tct state new counter\n\
                      \t}\n\
                      \tchain track_out {\n\
                      \t\ttype filter hook output priority -150; policy accept;\n\
                      \t\tct state new counter\n\
                      \t}\n\
                      }\n";
        let mut c = self.command("nft");
        c.args(["-f", "-"]);
        cmd::run_input(&mut c, Some(script.as_bytes()), DEFAULT_TIMEOUT).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conntrack_lines() {
        let text = "tcp      6 119 TIME_WAIT src=192.0.2.1 dst=192.0.2.2 sport=47254 dport=5000 \
                    src=192.0.2.2 dst=192.0.2.1 sport=5000 dport=47254 [ASSURED] mark=0 use=1\n\
                    ipv4     2 udp      17 29 src=10.0.0.1 dst=10.0.0.2 sport=53 dport=53 \
                    [UNREPLIED] src=10.0.0.2 dst=172.16.0.1 sport=53 dport=53 mark=7 zone=3 \
                    use=2\n\
                    icmp     1 29 src=2001:db8::1 dst=2001:db8::2 type=8 code=0 id=1 \
                    src=2001:db8::2 dst=2001:db8::1 type=0 code=0 id=1 mark=0 use=1\n\
                    conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.\n";
        let e = parse(text).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].proto, "tcp");
        assert_eq!(e[0].state.as_deref(), Some("TIME_WAIT"));
        assert_eq!(e[0].timeout, Some(119));
        assert!(e[0].assured && e[0].has_port(5000));
        assert_eq!(e[0].reply.sport, Some(5000));
        assert_eq!(e[0].zone, 0);
        assert_eq!((e[1].proto.as_str(), e[1].zone, e[1].mark), ("udp", 3, 7));
        assert_eq!(e[1].state, None);
        assert_eq!(e[1].reply.dst.to_string(), "172.16.0.1");
        assert_eq!(e[2].orig.sport, None);
        assert!(parse("tcp 6 1 src=bogus").is_err());
    }
}
