//! `SB_Global.options`, as 23.03 writes them: every `NB_Global.options` entry, plus
//! `mac_prefix`, `svc_monitor_mac`, `max_tunid`, `northd_internal_version`, and
//! `lb_hairpin_use_ct_mark=false` when some chassis lacks `ct-no-masked-label`.
//!
//! Stability: ovn-northd draws `mac_prefix` and `svc_monitor_mac` at random when NB does not
//! set them and writes them back to NB. Compile is pure, so each is taken from, in order:
//! NB_Global.options (when it parses), what SB_Global.options already holds
//! ([`crate::Keys::sb_options`], so a restarted northd keeps them), and else a value derived
//! from a hash of the NB_Global row's UUID (deterministic for a given NB; locally
//! administered, unicast, as OVN's random ones are). The daemon writes the `mac_prefix` so
//! chosen back to NB, as ovn-northd does ([`mac_prefix`]; dynamic MACs are assigned under it).

use crate::Options;
use crate::addr::Mac;
use crate::output::SbDesired;
use crate::topo::Topo;

/// What 23.03.1's `ovn_get_internal_version()` returns (`<package>-<SB schema>-<number of
/// OVN actions>.<internal minor>`): ovn-controllers configured with
/// `ovn-match-northd-version=true` compare theirs with it.
pub const NORTHD_INTERNAL_VERSION: &str = "23.03.1-20.27.0-70.6";

/// The largest datapath tunnel key northd allocates (`OVN_MAX_DP_KEY - OVN_MAX_DP_GLOBAL_NUM`;
/// VXLAN mode's 4095 is not served).
pub const MAX_TUNID: u32 = (1 << 24) - 1 - ((1 << 16) - 1);

/// `SB_Global.options` keys northd writes only sometimes: a sync removes them when the
/// desired options lack them (`lb_hairpin_use_ct_mark=false` goes once every chassis has
/// `ct-no-masked-label`, as 23.03 removes it).
pub const REMOVABLE: &[&str] = &["lb_hairpin_use_ct_mark"];

/// `xx:xx:xx` as OVN's `set_mac_prefix` scans it (hex bytes), printed back zero-padded;
/// `None` when it does not scan or is all zero.
fn parse_prefix(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() < 3 {
        return None;
    }
    let mut b = [0u8; 3];
    for (i, p) in parts.iter().take(3).enumerate() {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        b[i] = u8::from_str_radix(p, 16).ok()?;
    }
    (b != [0, 0, 0]).then(|| format!("{:02x}:{:02x}:{:02x}", b[0], b[1], b[2]))
}

fn parse_mac(s: &str) -> Option<String> {
    Mac::parse(s.trim()).map(|m| m.to_string())
}

/// splitmix64 over `seed`.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Six bytes from a hash of the NB_Global UUID and `salt`, locally administered and unicast
/// (what OVN's `eth_addr_random` makes).
fn derived(nb: &hf_model::NbSnapshot, salt: u64) -> [u8; 6] {
    let uuid = nb
        .nb_global()
        .keys()
        .next()
        .map(|u| u.as_u128())
        .unwrap_or_default();
    let h = mix((uuid as u64) ^ mix((uuid >> 64) as u64) ^ salt);
    let mut b = [0u8; 6];
    b.copy_from_slice(&h.to_be_bytes()[..6]);
    b[0] = (b[0] & !1) | 2;
    b
}

/// An address option northd chooses: `NB_Global.options:KEY` when `parse` takes it, else the
/// one SB holds (`sb_options`), else the first `len` bytes of one derived from the NB_Global
/// row with `salt` (where ovn-northd draws a random one).
fn chosen(
    nb: &hf_model::NbSnapshot,
    sb_options: &std::collections::BTreeMap<String, String>,
    key: &str,
    parse: impl Fn(&str) -> Option<String>,
    salt: u64,
    len: usize,
) -> String {
    nb.nb_global()
        .values()
        .next()
        .and_then(|g| g.options.get(key))
        .and_then(|v| parse(v))
        .or_else(|| sb_options.get(key).and_then(|v| parse(v)))
        .unwrap_or_else(|| {
            derived(nb, salt)[..len]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
}

/// The MAC prefix in force (`xx:xx:xx`): `NB_Global.options:mac_prefix` when it parses,
/// else the one SB holds, else one derived from the NB_Global row ([`chosen`]). The daemon
/// writes it to NB when NB lacks it (as ovn-northd writes its random one), and
/// [`crate::ipam`] assigns MACs under it.
pub fn mac_prefix(
    nb: &hf_model::NbSnapshot,
    sb_options: &std::collections::BTreeMap<String, String>,
) -> String {
    chosen(nb, sb_options, "mac_prefix", parse_prefix, 1, 3)
}

/// The service monitor MAC in force: `NB_Global.options:svc_monitor_mac` when it parses,
/// else the one SB holds, else one derived from the NB_Global row ([`chosen`]). Flows read
/// it too (the monitor source's ARP/ND responder).
pub fn svc_monitor_mac(
    nb: &hf_model::NbSnapshot,
    sb_options: &std::collections::BTreeMap<String, String>,
) -> String {
    chosen(nb, sb_options, "svc_monitor_mac", parse_mac, 2, 6)
}

/// `xx:xx:xx` (as [`mac_prefix`] prints it) as three bytes.
pub fn prefix_bytes(p: &str) -> [u8; 3] {
    let mut b = [0u8; 3];
    for (i, part) in p.split(':').take(3).enumerate() {
        b[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    b
}

/// Fills `sb.sb_options`.
pub fn build(topo: &Topo<'_>, opts: &Options, sb: &mut SbDesired) {
    let nb = &topo.global_options;
    let have = &opts.keys.sb_options;
    let mut o = nb.clone();
    let prefix = match nb.get("mac_prefix").and_then(|p| parse_prefix(p)) {
        Some(p) => p,
        None => mac_prefix(topo.nb, have),
    };
    o.insert("mac_prefix".into(), prefix);
    o.insert("svc_monitor_mac".into(), svc_monitor_mac(topo.nb, have));
    o.insert("max_tunid".into(), MAX_TUNID.to_string());
    o.insert(
        "northd_internal_version".into(),
        NORTHD_INTERNAL_VERSION.into(),
    );
    if opts.render.features.contains("ct-no-masked-label") {
        o.remove("lb_hairpin_use_ct_mark");
    } else {
        o.insert("lb_hairpin_use_ct_mark".into(), "false".into());
    }
    sb.sb_options = o;
}
