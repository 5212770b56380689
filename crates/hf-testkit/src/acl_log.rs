//! Reading `acl_log` lines (ovn-controller's, and holdfast's written the same way).

use std::collections::BTreeMap;

/// One `acl_log` line as OVN's own test suite reads it (its `tests/check_acl_log.py`): the
/// text after the last `|`, `key=value` pairs before the first `:`, the packet's after it,
/// the first of those being the protocol (keyed `protocol`); values with quotes stripped.
pub fn parse(line: &str) -> BTreeMap<String, String> {
    let strip = |s: &str| {
        s.trim_matches(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .to_string()
    };
    let mut out = BTreeMap::new();
    let details = line.rsplit_once('|').map_or(line, |(_, d)| d);
    let (acl, packet) = details.split_once(':').unwrap_or((details, ""));
    for datum in acl.split(',') {
        let (k, v) = datum.rsplit_once('=').unwrap_or(("", datum));
        out.insert(strip(k), strip(v));
    }
    for datum in packet.split(',') {
        let (k, v) = datum.rsplit_once('=').unwrap_or(("", datum));
        let k = if k.is_empty() {
            "protocol".to_string()
        } else {
            strip(k)
        };
        out.insert(k, strip(v));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_line_as_check_acl_log_py_does() {
        let p = super::parse(
            "2026-12-04T10:00:00.000Z|00012|acl_log(ovn_pinctrl0)|INFO|name=\"a\", verdict=drop, severity=alert, direction=from-lport: udp,vlan_tci=0x0000,nw_src=10.0.0.1,tp_dst=7",
        );
        assert_eq!(p["name"], "a");
        assert_eq!(p["verdict"], "drop");
        assert_eq!(p["direction"], "from-lport");
        assert_eq!(p["protocol"], "udp");
        assert_eq!(p["nw_src"], "10.0.0.1");
        assert_eq!(p["tp_dst"], "7");
    }
}
