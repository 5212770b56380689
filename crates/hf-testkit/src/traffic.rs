//! Traffic with the real tools between namespaces: `ping`, a one-shot TCP exchange with `nc`
//! (OpenBSD's), and `iperf3` with its `--json` report parsed.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::cmd::{self, have_tool, lossy};
use crate::{KitError, Netns, Proc, Result};

/// How long a one-shot exchange may take, from connect to close.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `ping` saw.
#[derive(Debug, Clone, PartialEq)]
pub struct PingStats {
    /// Echo requests sent.
    pub transmitted: u32,
    /// Echo replies received.
    pub received: u32,
    /// Average round trip, when any reply came.
    pub rtt_avg: Option<Duration>,
    /// Longest round trip, when any reply came.
    pub rtt_max: Option<Duration>,
}

impl PingStats {
    /// Lost requests in percent.
    pub fn loss_percent(&self) -> f64 {
        if self.transmitted == 0 {
            return 100.0;
        }
        100.0 * f64::from(self.transmitted - self.received.min(self.transmitted))
            / f64::from(self.transmitted)
    }

    /// Read ping's summary (iputils' or busybox's).
    pub fn parse(text: &str) -> Result<PingStats> {
        let bad = |detail: &str| KitError::Parse {
            what: "ping's summary".into(),
            detail: format!("{detail} in:\n{text}"),
        };
        let line = text
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .ok_or_else(|| bad("no `packets transmitted` line"))?;
        // `3 packets transmitted, 3 received, ...` or `3 packets transmitted, 3 packets
        // received, ...`
        let mut parts = line.split(',');
        let number = |s: Option<&str>| {
            s.and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse::<u32>().ok())
        };
        let transmitted = number(parts.next()).ok_or_else(|| bad("no transmitted count"))?;
        let received = number(parts.next()).ok_or_else(|| bad("no received count"))?;
        // `rtt min/avg/max/mdev = 0.049/0.207/0.366/0.158 ms` or `round-trip min/avg/max = ...`
        let rtts: Vec<Duration> = text
            .lines()
            .find(|l| l.starts_with("rtt ") || l.starts_with("round-trip "))
            .and_then(|l| l.split_once('=').map(|(_, v)| v))
            .map(|v| {
                v.trim()
                    .trim_end_matches("ms")
                    .trim()
                    .split('/')
                    .filter_map(|x| x.parse::<f64>().ok())
                    .map(|ms| Duration::from_secs_f64(ms / 1000.0))
                    .collect()
            })
            .unwrap_or_default();
        Ok(PingStats {
            transmitted,
            received,
            rtt_avg: rtts.get(1).copied(),
            rtt_max: rtts.get(2).copied(),
        })
    }
}

impl Netns {
    /// Send `count` echo requests to `dst` (0.2 s apart, 1 s to answer each) with `ping`
    /// (busybox's when iputils' is missing). Lost replies are not an error: read
    /// [`PingStats::received`]; an unreachable network or a bad address is.
    pub fn ping(&self, dst: &str, count: u32) -> Result<PingStats> {
        let n = count.to_string();
        let args: Vec<&str> = if have_tool("ping") {
            vec!["ping", "-q", "-n", "-c", &n, "-i", "0.2", "-W", "1", dst]
        } else {
            vec!["busybox", "ping", "-q", "-c", &n, "-W", "1", dst]
        };
        let timeout = Duration::from_secs(5 + u64::from(count));
        let out = self.output(&args, timeout)?;
        let text = lossy(&out.stdout);
        // Exit 1: no reply (the summary says so); anything else without a summary is an error.
        match PingStats::parse(&text) {
            Ok(s) => Ok(s),
            Err(_) => Err(KitError::Command {
                cmd: format!("ip netns exec {} {}", self.name(), args.join(" ")),
                status: cmd::status_text(out.status),
                stderr: lossy(&out.stderr).trim_end().to_string(),
                stdout: text,
            }),
        }
    }
}

/// What a DHCPv4 server offered, as busybox `udhcpc` hands it to its script.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DhcpLease {
    /// The address (`ip`).
    pub ip: String,
    /// Its prefix length (`mask`).
    pub prefix: u8,
    /// The routers offered (`router`), first one used as the default route.
    pub routers: Vec<String>,
    /// DNS servers (`dns`).
    pub dns: Vec<String>,
    /// Lease time in seconds (`lease`).
    pub lease_secs: Option<u64>,
    /// The server's identifier (`serverid`).
    pub server_id: Option<String>,
    /// Every variable the script saw on `bound`, as `name=value` (`domain`, `hostname`, ...).
    pub raw: Vec<(String, String)>,
}

/// The script `udhcpc` runs (`-s`): it writes what it was given to the lease file, and on
/// `bound`/`renew` sets the address and default route with `ip` (inside the client's
/// namespace: nothing outside it changes, no resolv.conf is written).
const UDHCPC_SCRIPT: &str = r#"#!/bin/sh
{
    echo "event=$1"
    for v in interface ip mask subnet router dns lease serverid domain hostname; do
        eval "x=\${$v}"
        [ -n "$x" ] && echo "$v=$x"
    done
    echo "end"
} >> "$HF_LEASE_FILE"
case "$1" in
    deconfig) ip addr flush dev "$interface" ;;
    bound|renew)
        ip addr flush dev "$interface"
        ip addr add "$ip/$mask" dev "$interface"
        if [ -n "$router" ]; then
            ip route replace default via "${router%% *}" dev "$interface"
        fi
        ;;
esac
exit 0
"#;

impl Netns {
    /// Get an address for `ifname` from a DHCPv4 server with busybox `udhcpc` and the
    /// harness's own script: on success the namespace has the address and a default route via
    /// the first router, and the lease's fields are returned. Errors: no lease within
    /// `timeout` (with what udhcpc said).
    pub fn dhcp(&self, ifname: &str, timeout: Duration) -> Result<DhcpLease> {
        let script = self.lab.unique_file("udhcpc-script", "sh");
        let lease_file = script.with_extension("lease");
        std::fs::write(&script, UDHCPC_SCRIPT)
            .map_err(|e| KitError::io(format!("writing {}", script.display()), e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| KitError::io(format!("chmod {}", script.display()), e))?;
        let tries = timeout.as_secs().max(1).to_string();
        let mut c = self.command("busybox");
        c.args([
            "udhcpc", "-f", "-q", "-n", "-i", ifname, "-T", "1", "-A", "1", "-t",
        ])
        .arg(&tries)
        .arg("-s")
        .arg(&script)
        .env("HF_LEASE_FILE", &lease_file);
        let out = cmd::output(&mut c, None, timeout + Duration::from_secs(5))?;
        cmd::check(&c, out)?;
        let text = std::fs::read_to_string(&lease_file).unwrap_or_default();
        DhcpLease::parse_bound(&text).ok_or_else(|| KitError::Parse {
            what: "udhcpc's lease".into(),
            detail: format!("no `bound` event in what the script recorded:\n{text}"),
        })
    }
}

impl DhcpLease {
    /// The last `bound` event the harness's udhcpc script recorded.
    fn parse_bound(text: &str) -> Option<DhcpLease> {
        let mut last = None;
        let mut cur: Option<Vec<(String, String)>> = None;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("event", e)) => cur = (e == "bound" || e == "renew").then(Vec::new),
                Some((k, v)) => {
                    if let Some(c) = cur.as_mut() {
                        c.push((k.to_string(), v.to_string()));
                    }
                }
                None if line == "end" => {
                    if let Some(c) = cur.take() {
                        last = Some(c);
                    }
                }
                None => {}
            }
        }
        let raw = last?;
        let get = |k: &str| raw.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let words = |k: &str| {
            get(k)
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        Some(DhcpLease {
            ip: get("ip")?,
            prefix: get("mask")?.parse().ok()?,
            routers: words("router"),
            dns: words("dns"),
            lease_secs: get("lease").and_then(|l| l.parse().ok()),
            server_id: get("serverid"),
            raw,
        })
    }
}

/// What both sides of [`nc_exchange`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// What the server read: the client's request.
    pub server_got: Vec<u8>,
    /// What the client read: the server's reply.
    pub client_got: Vec<u8>,
}

/// One TCP connection with OpenBSD `nc`: a server in `server` listening on `addr:port` sends
/// `reply`; a client in `client` connects to `addr:port` and sends `request`; each side closes
/// its sending half after its message (`-N`). Returns what each side read. Errors: the
/// connection failed (refused, reset, timed out: the client's stderr says which).
pub fn nc_exchange(
    server: &Netns,
    client: &Netns,
    addr: &str,
    port: u16,
    request: &[u8],
    reply: &[u8],
) -> Result<Exchange> {
    let reply_file = server.lab.unique_file("nc-reply", "in");
    std::fs::write(&reply_file, reply)
        .map_err(|e| KitError::io(format!("writing {}", reply_file.display()), e))?;
    let stdin = std::fs::File::open(&reply_file)
        .map_err(|e| KitError::io(format!("opening {}", reply_file.display()), e))?;
    let mut c = server.command("nc");
    c.args(["-l", "-N", "-n", addr, &port.to_string()])
        .stdin(Stdio::from(stdin));
    let mut srv = server.spawn_command(&format!("nc-server-{port}"), c)?;
    server.wait_listening(port, EXCHANGE_TIMEOUT)?;
    let mut c = client.command("nc");
    c.args(["-N", "-n", "-w", "5", addr, &port.to_string()]);
    let out = cmd::output(&mut c, Some(request), EXCHANGE_TIMEOUT)?;
    let out = cmd::check(&c, out)?;
    srv.wait_ok(EXCHANGE_TIMEOUT)?;
    let server_got = std::fs::read(srv.stdout_path())
        .map_err(|e| KitError::io(format!("reading {}", srv.stdout_path().display()), e))?;
    Ok(Exchange {
        server_got,
        client_got: out.stdout,
    })
}

/// An `iperf3 -s` inside a namespace, stopped on drop.
#[derive(Debug)]
pub struct Iperf3Server {
    /// The server process.
    pub proc: Proc,
    /// The address it is bound to.
    pub addr: String,
    /// Its port.
    pub port: u16,
}

impl Netns {
    /// Start `iperf3 -s` bound to `addr:port` and wait until it listens. It serves one test
    /// after another until dropped.
    pub fn iperf3_server(&self, addr: &str, port: u16) -> Result<Iperf3Server> {
        let p = port.to_string();
        let proc = self.spawn(
            &format!("iperf3-server-{port}"),
            &["iperf3", "-s", "-B", addr, "-p", &p],
        )?;
        self.wait_listening(port, Duration::from_secs(10))?;
        Ok(Iperf3Server {
            proc,
            addr: addr.to_string(),
            port,
        })
    }

    /// Run an `iperf3 --json` client to completion: the report, or an error if iperf3 failed
    /// ([`KitError::Iperf3`] carries what it transferred before).
    pub fn iperf3(&self, o: &Iperf3Opts) -> Result<Iperf3Report> {
        self.iperf3_spawn(o)?.finish()
    }

    /// Start an `iperf3 --json` client and return at once (a transfer that runs while the
    /// test restarts things); [`Iperf3Client::finish`] waits for its report.
    pub fn iperf3_spawn(&self, o: &Iperf3Opts) -> Result<Iperf3Client> {
        let mut args: Vec<String> = vec![
            "iperf3".into(),
            "--json".into(),
            "-c".into(),
            o.server.clone(),
            "-p".into(),
            o.port.to_string(),
            "-t".into(),
            format!("{}", o.duration.as_secs_f64()),
            "-i".into(),
            format!("{}", o.interval.as_secs_f64()),
            // A connection that stalls this long is reported as an error, not a hang.
            "--connect-timeout".into(),
            "5000".into(),
        ];
        if o.reverse {
            args.push("-R".into());
        }
        if o.udp {
            args.push("-u".into());
        }
        if let Some(b) = &o.bitrate {
            args.extend(["-b".into(), b.clone()]);
        }
        if let Some(l) = o.length {
            args.extend(["-l".into(), l.to_string()]);
        }
        if let Some(p) = o.parallel {
            args.extend(["-P".into(), p.to_string()]);
        }
        if let Some(b) = &o.bind {
            args.extend(["-B".into(), b.clone()]);
        }
        args.extend(o.extra.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let proc = self.spawn(&format!("iperf3-client-{}", o.port), &argv)?;
        Ok(Iperf3Client {
            proc,
            // Setup and the final exchange of results take a few seconds on a loaded machine.
            timeout: o.duration + Duration::from_secs(30),
        })
    }
}

/// What an `iperf3` client does.
#[derive(Debug, Clone)]
pub struct Iperf3Opts {
    /// The server's address.
    pub server: String,
    /// The server's port.
    pub port: u16,
    /// How long to send (`-t`; default 1 s).
    pub duration: Duration,
    /// Report interval (`-i`; default 1 s): [`Iperf3Report::intervals`] has one entry each.
    pub interval: Duration,
    /// The server sends, the client receives (`-R`).
    pub reverse: bool,
    /// UDP instead of TCP (`-u`).
    pub udp: bool,
    /// Target rate (`-b`, e.g. `100M`); unlimited TCP otherwise.
    pub bitrate: Option<String>,
    /// Write size (`-l`): for UDP, the datagram payload.
    pub length: Option<u32>,
    /// Parallel streams (`-P`).
    pub parallel: Option<u32>,
    /// Client address to bind (`-B`).
    pub bind: Option<String>,
    /// More arguments, as they are.
    pub extra: Vec<String>,
}

impl Iperf3Opts {
    /// One second of TCP to `server:port`, reported every second.
    pub fn new(server: &str, port: u16) -> Iperf3Opts {
        Iperf3Opts {
            server: server.to_string(),
            port,
            duration: Duration::from_secs(1),
            interval: Duration::from_secs(1),
            reverse: false,
            udp: false,
            bitrate: None,
            length: None,
            parallel: None,
            bind: None,
            extra: Vec::new(),
        }
    }

    /// The same with `duration` (`-t`).
    pub fn duration(mut self, d: Duration) -> Self {
        self.duration = d;
        self
    }

    /// The same with report interval `i` (`-i`).
    pub fn interval(mut self, i: Duration) -> Self {
        self.interval = i;
        self
    }

    /// The same in reverse (`-R`).
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }
}

/// A running `iperf3` client ([`Netns::iperf3_spawn`]).
#[derive(Debug)]
pub struct Iperf3Client {
    /// The client process.
    pub proc: Proc,
    timeout: Duration,
}

impl Iperf3Client {
    /// Wait for it to end and read its report; an error if iperf3 reported a failure (a reset,
    /// a closed control connection: [`KitError::Iperf3`] with what was transferred), printed
    /// no report, or ran past its duration by 30 s.
    pub fn finish(mut self) -> Result<Iperf3Report> {
        let status = self.proc.wait(self.timeout)?;
        let out = self.proc.stdout();
        let report = Iperf3Report::parse(&out).map_err(|e| KitError::Command {
            cmd: format!("iperf3 client {}", self.proc.name()),
            status: cmd::status_text(status),
            stderr: format!("{}\n(and {e})", self.proc.stderr().trim_end()),
            stdout: out.clone(),
        })?;
        if let Some(error) = &report.error {
            return Err(KitError::Iperf3 {
                error: error.clone(),
                report: Box::new(report),
            });
        }
        if !status.success() {
            return Err(KitError::Iperf3 {
                error: format!("iperf3 ended with {}", cmd::status_text(status)),
                report: Box::new(report),
            });
        }
        Ok(report)
    }
}

/// One report interval of an `iperf3` run (all streams summed).
#[derive(Debug, Clone, PartialEq)]
pub struct Iperf3Interval {
    /// Seconds since the test began, start of the interval.
    pub start: f64,
    /// End of the interval.
    pub end: f64,
    /// Bytes in the interval.
    pub bytes: u64,
    /// Rate in the interval.
    pub bits_per_second: f64,
    /// TCP retransmits in the interval (the sender's side only).
    pub retransmits: Option<u64>,
}

/// An `iperf3 --json` report, from the client's side.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Iperf3Report {
    /// Bytes the sender sent.
    pub sent_bytes: u64,
    /// Bytes the receiver received (UDP: the sum's bytes).
    pub received_bytes: u64,
    /// The receiver's rate.
    pub bits_per_second: f64,
    /// TCP retransmits of the sender (when the sender is this client or `-R` reports them).
    pub retransmits: Option<u64>,
    /// UDP datagrams lost.
    pub lost_packets: Option<u64>,
    /// UDP datagrams the receiver accounted for (received plus lost), when iperf3 says.
    pub packets: Option<u64>,
    /// The seconds the receiver measured.
    pub seconds: f64,
    /// The intervals, in order.
    pub intervals: Vec<Iperf3Interval>,
    /// iperf3's error, when it reported one: a failure is never a report without it.
    pub error: Option<String>,
}

impl std::fmt::Display for Iperf3Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "iperf3: sent {} B, received {} B in {:.2} s ({:.3} Gb/s), retransmits {:?}, {} \
             intervals",
            self.sent_bytes,
            self.received_bytes,
            self.seconds,
            self.bits_per_second / 1e9,
            self.retransmits,
            self.intervals.len()
        )?;
        if let Some(e) = &self.error {
            write!(f, ", error: {e}")?;
        }
        Ok(())
    }
}

impl Iperf3Report {
    /// Read the JSON `iperf3 --json` printed.
    pub fn parse(json: &str) -> Result<Iperf3Report> {
        let v: Value = serde_json::from_str(json).map_err(|e| KitError::Parse {
            what: "iperf3's JSON report".into(),
            detail: format!("{e}: {}", json.chars().take(2000).collect::<String>()),
        })?;
        let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
        let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let end = v.get("end").cloned().unwrap_or(Value::Null);
        let mut r = Iperf3Report {
            error: v.get("error").and_then(Value::as_str).map(str::to_string),
            ..Iperf3Report::default()
        };
        if let Some(sum) = end.get("sum_sent") {
            r.sent_bytes = u(sum, "bytes").unwrap_or(0);
            r.retransmits = u(sum, "retransmits");
        }
        if let Some(sum) = end.get("sum_received") {
            r.received_bytes = u(sum, "bytes").unwrap_or(0);
            r.bits_per_second = f(sum, "bits_per_second");
            r.seconds = f(sum, "seconds");
            // UDP (iperf3 3.11 and later also sum the receiver's side): its loss count.
            r.lost_packets = u(sum, "lost_packets");
            r.packets = u(sum, "packets");
        } else if let Some(sum) = end.get("sum") {
            // UDP: one sum, from the receiver's report.
            r.sent_bytes = r.sent_bytes.max(u(sum, "bytes").unwrap_or(0));
            r.received_bytes = u(sum, "bytes").unwrap_or(0);
            r.bits_per_second = f(sum, "bits_per_second");
            r.seconds = f(sum, "seconds");
            r.lost_packets = u(sum, "lost_packets");
            r.packets = u(sum, "packets");
        }
        if let Some(list) = v.get("intervals").and_then(Value::as_array) {
            r.intervals = list
                .iter()
                .filter_map(|i| i.get("sum"))
                .map(|s| Iperf3Interval {
                    start: f(s, "start"),
                    end: f(s, "end"),
                    bytes: u(s, "bytes").unwrap_or(0),
                    bits_per_second: f(s, "bits_per_second"),
                    retransmits: u(s, "retransmits"),
                })
                .collect();
        }
        Ok(r)
    }

    /// The longest run of consecutive intervals that moved no byte, in seconds (0 when every
    /// interval moved data): the stall a restart or a migration caused, to the interval's
    /// resolution.
    pub fn longest_stall(&self) -> f64 {
        let mut best: f64 = 0.0;
        let mut run_start: Option<f64> = None;
        for i in &self.intervals {
            if i.bytes == 0 {
                let s = *run_start.get_or_insert(i.start);
                best = best.max(i.end - s);
            } else {
                run_start = None;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iputils_and_busybox_summaries() {
        let iputils = "--- 192.0.2.2 ping statistics ---\n\
                       3 packets transmitted, 2 received, 33.3333% packet loss, time 401ms\n\
                       rtt min/avg/max/mdev = 0.049/0.207/0.366/0.158 ms\n";
        let s = PingStats::parse(iputils).unwrap();
        assert_eq!((s.transmitted, s.received), (3, 2));
        assert_eq!(s.rtt_avg, Some(Duration::from_micros(207)));
        assert_eq!(s.rtt_max, Some(Duration::from_micros(366)));
        let busybox = "3 packets transmitted, 0 packets received, 100% packet loss\n";
        let s = PingStats::parse(busybox).unwrap();
        assert_eq!((s.transmitted, s.received, s.rtt_avg), (3, 0, None));
        assert_eq!(s.loss_percent(), 100.0);
        let busybox = "2 packets transmitted, 2 packets received, 0% packet loss\n\
                       round-trip min/avg/max = 0.100/0.200/0.300 ms\n";
        assert_eq!(
            PingStats::parse(busybox).unwrap().rtt_avg,
            Some(Duration::from_micros(200))
        );
        assert!(PingStats::parse("connect: Network is unreachable").is_err());
    }

    #[test]
    fn iperf3_reports_and_errors() {
        let ok = r#"{"start":{},"intervals":[
            {"sum":{"start":0,"end":1,"bytes":100,"bits_per_second":800,"retransmits":1}},
            {"sum":{"start":1,"end":2,"bytes":0,"bits_per_second":0,"retransmits":0}},
            {"sum":{"start":2,"end":3,"bytes":0,"bits_per_second":0,"retransmits":0}},
            {"sum":{"start":3,"end":4,"bytes":5,"bits_per_second":40,"retransmits":0}}],
            "end":{"sum_sent":{"bytes":105,"retransmits":1,"bits_per_second":210},
                   "sum_received":{"bytes":104,"seconds":4.0,"bits_per_second":208}}}"#;
        let r = Iperf3Report::parse(ok).unwrap();
        assert_eq!((r.sent_bytes, r.received_bytes), (105, 104));
        assert_eq!(r.retransmits, Some(1));
        assert_eq!(r.intervals.len(), 4);
        assert_eq!(r.longest_stall(), 2.0);
        assert_eq!(r.error, None);
        // UDP as iperf3 3.12 reports it: the receiver's sum counts the datagrams lost.
        let udp = r#"{"start":{},"intervals":[],"end":{
            "sum_sent":{"bytes":6000,"seconds":1.0,"bits_per_second":48000,"packets":100,
                        "lost_packets":0},
            "sum_received":{"bytes":4800,"seconds":1.0,"bits_per_second":38400,
                            "packets":100,"lost_packets":20}}}"#;
        let r = Iperf3Report::parse(udp).unwrap();
        assert_eq!(r.received_bytes, 4800);
        assert_eq!((r.packets, r.lost_packets), (Some(100), Some(20)));
        assert_eq!(r.retransmits, None);
        let failed = r#"{"start":{},"intervals":[],"end":{},
            "error":"error - control socket has closed unexpectedly"}"#;
        let r = Iperf3Report::parse(failed).unwrap();
        assert_eq!(
            r.error.as_deref(),
            Some("error - control socket has closed unexpectedly")
        );
        assert!(Iperf3Report::parse("iperf3: error - unable to connect").is_err());
    }
}
