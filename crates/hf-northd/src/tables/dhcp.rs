//! `DHCP_Options` and `DHCPv6_Options`: the code tables (option name → code and value type)
//! that real ovn-controller reads to parse `put_dhcp_opts` / `put_dhcpv6_opts` and to encode
//! the options in its replies. Real ovn-northd 23.03 writes the same fixed rows whatever NB
//! holds; so does holdfast, from [`DHCPV4`] and [`DHCPV6`] (holdfast's own table of the
//! options 23.03 supports, checked row by row against real ovn-northd's SB by the root
//! package's `northd_tables_match_real_northd`). The sync keys the rows by name, corrects a
//! row whose code or type differs and deletes rows of names northd does not know, as
//! ovn-northd does.
//!
//! What it does not do: options newer than 23.03, or per-deployment extra options (OVN has
//! none: the tables are not configurable).

use crate::output::{DhcpOptRow, SbDesired};

/// One supported option: (name, code, type).
pub type Opt = (&'static str, u8, &'static str);

/// The DHCPv4 options of OVN 23.03. Codes 253 (`next_server`) and 254
/// (`bootfile_name_alt`) are OVN's private codes: ovn-controller turns the first into the
/// reply's `siaddr` and sends the second as option 67.
pub const DHCPV4: &[Opt] = &[
    ("offerip", 0, "ipv4"),
    ("netmask", 1, "ipv4"),
    ("router", 3, "ipv4"),
    ("dns_server", 6, "ipv4"),
    ("log_server", 7, "ipv4"),
    ("lpr_server", 9, "ipv4"),
    ("hostname", 12, "str"),
    ("domain_name", 15, "str"),
    ("swap_server", 16, "ipv4"),
    ("ip_forward_enable", 19, "bool"),
    ("policy_filter", 21, "ipv4"),
    ("default_ttl", 23, "uint8"),
    ("mtu", 26, "uint16"),
    ("broadcast_address", 28, "ipv4"),
    ("router_discovery", 31, "bool"),
    ("router_solicitation", 32, "ipv4"),
    ("arp_cache_timeout", 35, "uint32"),
    ("ethernet_encap", 36, "bool"),
    ("tcp_ttl", 37, "uint8"),
    ("tcp_keepalive_interval", 38, "uint32"),
    ("nis_server", 41, "ipv4"),
    ("ntp_server", 42, "ipv4"),
    ("netbios_name_server", 44, "ipv4"),
    ("netbios_node_type", 46, "uint8"),
    ("lease_time", 51, "uint32"),
    ("server_id", 54, "ipv4"),
    ("T1", 58, "uint32"),
    ("T2", 59, "uint32"),
    ("tftp_server", 66, "host_id"),
    ("bootfile_name", 67, "str"),
    ("domain_search_list", 119, "domains"),
    ("classless_static_route", 121, "static_routes"),
    ("tftp_server_address", 150, "ipv4"),
    ("path_prefix", 210, "str"),
    ("ms_classless_static_route", 249, "static_routes"),
    ("wpad", 252, "str"),
    ("next_server", 253, "ipv4"),
    ("bootfile_name_alt", 254, "str"),
];

/// The DHCPv6 options of OVN 23.03.
pub const DHCPV6: &[Opt] = &[
    ("server_id", 2, "mac"),
    ("ia_addr", 5, "ipv6"),
    ("dns_server", 23, "ipv6"),
    ("domain_search", 24, "str"),
];

/// The type of the DHCPv4 (`v6 = false`) or DHCPv6 option `name`, if ovn-controller knows
/// it.
pub fn type_of(v6: bool, name: &str) -> Option<&'static str> {
    let t = if v6 { DHCPV6 } else { DHCPV4 };
    t.iter().find(|(n, _, _)| *n == name).map(|o| o.2)
}

/// Whether `name` is a DHCPv4 (`v6 = false`) or DHCPv6 option ovn-controller knows.
pub fn known(v6: bool, name: &str) -> bool {
    type_of(v6, name).is_some()
}

/// Fills `sb.dhcp_options` and `sb.dhcpv6_options`.
pub fn build(sb: &mut SbDesired) {
    let rows = |t: &[Opt]| {
        t.iter()
            .map(|(name, code, type_)| ((*name).to_string(), DhcpOptRow { code: *code, type_ }))
            .collect()
    };
    sb.dhcp_options = rows(DHCPV4);
    sb.dhcpv6_options = rows(DHCPV6);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_types_are_the_schemas() {
        use hf_model::sb::{DhcpOptionsType, Dhcpv6OptionsType};
        for t in [DHCPV4, DHCPV6] {
            let names: std::collections::BTreeSet<&str> = t.iter().map(|o| o.0).collect();
            assert_eq!(names.len(), t.len(), "duplicate option names");
        }
        for (n, _, ty) in DHCPV4 {
            let parsed = DhcpOptionsType::from_wire(ty);
            assert!(
                !matches!(parsed, DhcpOptionsType::Other(_)),
                "{n}: type {ty} is not in SB's schema"
            );
        }
        for (n, _, ty) in DHCPV6 {
            let parsed = Dhcpv6OptionsType::from_wire(ty);
            assert!(
                !matches!(parsed, Dhcpv6OptionsType::Other(_)),
                "{n}: type {ty} is not in SB's schema"
            );
        }
        let mut sb = SbDesired::default();
        build(&mut sb);
        assert_eq!(sb.dhcp_options.len(), DHCPV4.len());
        assert_eq!(sb.dhcpv6_options["server_id"].type_, "mac");
        assert!(known(false, "T1") && !known(true, "T1") && !known(false, "server_mac"));
    }
}
