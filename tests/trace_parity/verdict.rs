//! A trace's verdict, as both tracers are compared: the logical ports a copy of the packet
//! reaches (sorted, with repeats), the NAT rewrites applied (`ct_snat`/`ct_dnat` and their
//! `_in_czone` forms: action, field, canonical address), and whether nothing was output.
//!
//! ovn-trace's `--minimal` output lists every final `output("PORT")` (patch ports are followed,
//! so only ports where the packet leaves the logical network appear) and every NAT
//! transformation as `ct_snat(ip4.src=ADDR)` (spelt `ct_snatin_czone(...)` for the `_in_czone`
//! forms: OVN 23.03's formatting). A `ct_dnat`/`ct_snat` that changes nothing (no argument:
//! "assuming no un-dnat entry") is not a rewrite.
//!
//! Not compared: the NAT of a dropped packet (ovn-trace lists the transformations of the
//! branch that dropped; holdfast reports what reached a port); load-balancer rewrites (`ct_lb`, `ct_lb_mark`): ovn-trace does not print the
//! backend it chose, so they are compared through where the packet goes (the backend's port);
//! the drop's stage and reason (ovn-trace's minimal output has none).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub outputs: Vec<String>,
    /// (action, field, value)
    pub nat: Vec<(String, String, String)>,
    pub drop: bool,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.drop {
            write!(f, "drop")?;
        } else {
            write!(f, "outputs [{}]", self.outputs.join(", "))?;
        }
        for (a, fld, v) in &self.nat {
            write!(f, " {a}({fld}={v})")?;
        }
        Ok(())
    }
}

/// `10.0.0.1`, `fd00::1`, `[fd00::1]:80`, `10.0.0.1:80` → canonical text.
fn canon_addr(v: &str) -> String {
    let v = v.trim();
    if let Ok(ip) = v.parse::<std::net::IpAddr>() {
        return ip.to_string();
    }
    if let Ok(sa) = v.parse::<std::net::SocketAddr>() {
        return sa.to_string();
    }
    v.to_string()
}

fn canon_action(a: &str) -> String {
    match a {
        "ct_snatin_czone" => "ct_snat_in_czone".into(),
        "ct_dnatin_czone" => "ct_dnat_in_czone".into(),
        _ => a.into(),
    }
}

fn is_compared_nat(action: &str) -> bool {
    matches!(
        action,
        "ct_snat" | "ct_dnat" | "ct_snat_in_czone" | "ct_dnat_in_czone"
    )
}

impl Verdict {
    fn finish(mut outputs: Vec<String>, mut nat: Vec<(String, String, String)>) -> Verdict {
        outputs.sort();
        nat.sort();
        nat.dedup();
        let drop = outputs.is_empty();
        // A dropped packet's rewrites reach nobody (ovn-trace still lists the NAT nodes of
        // the branch that dropped).
        if drop {
            nat.clear();
        }
        Verdict { outputs, nat, drop }
    }

    /// Parse ovn-trace's `--minimal` output.
    pub fn from_ovn_trace_minimal(text: &str) -> Verdict {
        let mut outputs = Vec::new();
        let mut nat = Vec::new();
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('#') {
                continue;
            }
            let mut rest = l;
            while let Some(i) = rest.find("output(\"") {
                let after = &rest[i + 8..];
                match after.find("\")") {
                    Some(j) => {
                        outputs.push(after[..j].to_string());
                        rest = &after[j + 2..];
                    }
                    None => break,
                }
            }
            for prefix in ["ct_snat", "ct_dnat"] {
                if let Some(after) = l.strip_prefix(prefix) {
                    let (czone, after) = match after.strip_prefix("in_czone") {
                        Some(a) => (true, a),
                        None => (false, after),
                    };
                    if let Some(inner) = after.strip_prefix('(')
                        && let Some(end) = inner.find(')')
                        && let Some((field, value)) = inner[..end].split_once('=')
                    {
                        let action = if czone {
                            format!("{prefix}_in_czone")
                        } else {
                            prefix.to_string()
                        };
                        nat.push((action, field.to_string(), canon_addr(value)));
                    }
                }
            }
        }
        Verdict::finish(outputs, nat)
    }

    /// Parse `holdfast trace --format json`'s object (issue 9's fixed shape).
    pub fn from_holdfast_json(text: &str) -> Result<Verdict, String> {
        let v: serde_json::Value = serde_json::from_str(text.trim())
            .map_err(|e| format!("holdfast trace printed no JSON object ({e}): {text}"))?;
        let verdict = v
            .get("verdict")
            .ok_or_else(|| format!("no \"verdict\" in {text}"))?;
        if v.get("stages").and_then(|s| s.as_array()).is_none() {
            return Err(format!("no \"stages\" array in {text}"));
        }
        let outputs: Vec<String> = verdict
            .get("outputs")
            .and_then(|o| o.as_array())
            .ok_or_else(|| format!("no verdict.outputs array in {text}"))?
            .iter()
            .map(|o| o.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("verdict.outputs has a non-string in {text}"))?;
        let mut nat = Vec::new();
        for n in verdict
            .get("nat")
            .and_then(|o| o.as_array())
            .ok_or_else(|| format!("no verdict.nat array in {text}"))?
        {
            let s = |k: &str| {
                n.get(k)
                    .and_then(|x| x.as_str())
                    .map(str::to_string)
                    .ok_or_else(|| format!("verdict.nat entry without \"{k}\": {n}"))
            };
            let action = canon_action(&s("action")?);
            if is_compared_nat(&action) {
                nat.push((action, s("field")?, canon_addr(&s("value")?)));
            }
        }
        let drop = verdict
            .get("drop")
            .ok_or_else(|| format!("no verdict.drop in {text}"))?;
        if outputs.is_empty() == drop.is_null() {
            return Err(format!(
                "verdict.drop must be null exactly when outputs is not empty: {verdict}"
            ));
        }
        Ok(Verdict::finish(outputs, nat))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ovn_trace_minimal() {
        // Real ovn-trace 23.03 output (SNAT through a distributed gateway port).
        let t = "# udp,reg14=0x1,vlan_tci=0x0000,dl_src=00:00:00:00:00:01\n\
                 ct_lb /* default (use --ct to customize) */ {\n    ip.ttl--;\n    \
                 ct_snatin_czone(ip4.src=192.0.2.1) /* default (use --ct to customize) */ {\n        \
                 output(\"ln\");\n    };\n};\n";
        let v = Verdict::from_ovn_trace_minimal(t);
        assert_eq!(v.outputs, vec!["ln"]);
        assert_eq!(
            v.nat,
            vec![(
                "ct_snat_in_czone".into(),
                "ip4.src".into(),
                "192.0.2.1".into()
            )]
        );
        assert!(!v.drop);
        let d = Verdict::from_ovn_trace_minimal(
            "# udp,reg14=0x1\nct_dnat /* assuming no un-dnat entry, so no change */;\n",
        );
        assert!(d.drop && d.nat.is_empty());
    }

    #[test]
    fn parses_holdfast_json() {
        let v = Verdict::from_holdfast_json(
            r#"{"verdict":{"outputs":["b","a"],"nat":[{"action":"ct_dnat","field":"ip6.dst","value":"fd00:0::1"},{"action":"ct_lb_mark","field":"ip4.dst","value":"10.0.0.1:80"}],"drop":null},"stages":[]}"#,
        )
        .expect("valid");
        assert_eq!(v.outputs, vec!["a", "b"]);
        assert_eq!(
            v.nat,
            vec![("ct_dnat".into(), "ip6.dst".into(), "fd00::1".into())]
        );
        assert!(
            Verdict::from_holdfast_json(
                r#"{"verdict":{"outputs":[],"nat":[],"drop":null},"stages":[]}"#
            )
            .is_err()
        );
    }
}
