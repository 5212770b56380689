//! What the switch stages need from NB beyond [`crate::topo::Topo`], digested once per compile:
//! the ACLs that apply to each switch (its own and those of port groups with ports on it),
//! parsed once; the load balancers of each switch (direct and through load balancer groups),
//! parsed once; and, per router, the addresses its switch-side ports answer ARP/ND for (router
//! load-balancer VIPs, NAT external IPs and MACs).
//!
//! Bad rows become diagnostics here, once per row: an unparsable ACL match, an ACL action or direction 23.03 does not know, an unparsable VIP or backend (that
//! VIP is left out), load-balancer options holdfast does not compile. Nothing emits flows.
//!
//! An ACL whose match does not parse (a typo in an edit, or a construct this northd does not
//! know) is never simply left out when that would open traffic (docs/acl-broken.md):
//! - when this northd parsed an earlier version of the row's match (`Keys::acl_last_good`),
//!   that version stays in force, whatever the verdict;
//! - else a `drop` or `reject` ACL fails closed: its verdict applies to everything its holder
//!   covers in its direction (`inport == @pg` / `outport == @pg` for a port group's ACL,
//!   every packet for a switch's own ACL), at its priority;
//! - else (an allow verdict) it is left out: what it would allow meets the lower-priority ACLs
//!   and the default, as if it did not exist.
//!
//! Each case is a diagnostic naming the row, and its flows carry
//! `external_ids:hf-acl-broken` ([`crate::render::ACL_BROKEN_KEY`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hf_expr::SymbolTable;
use hf_expr::ast::Expr;
use hf_model::nb;
use uuid::Uuid;

use crate::addr::{Mac, parse_ip_port};
use crate::diag::Diags;
use crate::flow::DpIdx;
use crate::stage::DpKind;
use crate::topo::{PortKind, Topo};

/// What an ACL does, as 23.03 names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclVerdict {
    /// `allow`.
    Allow,
    /// `allow-related`.
    AllowRelated,
    /// `allow-stateless`.
    AllowStateless,
    /// `drop`.
    Drop,
    /// `reject`.
    Reject,
}

/// What stands in for an ACL whose match does not parse (the flows' mark,
/// `external_ids:hf-acl-broken`, [`crate::render::ACL_BROKEN_KEY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclBroken {
    /// Its last version that parsed in this northd's run (`last-good`).
    LastGood,
    /// Its verdict on everything its holder covers in its direction (`fail-closed`).
    FailClosed,
}

impl AclBroken {
    /// The mark's value: `last-good` or `fail-closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            AclBroken::LastGood => "last-good",
            AclBroken::FailClosed => "fail-closed",
        }
    }
}

/// One ACL as the switch stages use it.
#[derive(Clone, Debug)]
pub struct AclInfo {
    /// The NB row.
    pub uuid: Uuid,
    /// The switch or port group holding it (its name).
    pub holder: String,
    /// `from-lport`.
    pub ingress: bool,
    /// NB priority (0..=32767).
    pub priority: u16,
    /// What it does.
    pub verdict: AclVerdict,
    /// The parsed NB match.
    pub matches: Expr,
    /// The NB match text (for the flow owner).
    pub nb_match: String,
    /// `label` (0: none).
    pub label: u32,
    /// `options:apply-after-lb=true` (from-lport only).
    pub after_lb: bool,
    /// The NB match does not parse: what stands in for it (the flows' mark).
    pub broken: Option<AclBroken>,
    /// `log(...)` arguments when `log` is true.
    pub log: Option<hf_expr::actions::LogArgs>,
    /// `options:log-related=true`.
    pub log_related: bool,
}

/// One VIP of a load balancer.
#[derive(Clone, Debug)]
pub struct LbVip {
    /// The VIP address.
    pub ip: IpAddr,
    /// The VIP port.
    pub port: Option<u16>,
    /// The backends.
    pub backends: Vec<(IpAddr, Option<u16>)>,
    /// The NB key (`10.0.0.200:80`), the flow discriminator.
    pub key: String,
}

/// One load balancer.
#[derive(Clone, Debug)]
pub struct LbInfo {
    /// The NB row.
    pub uuid: Uuid,
    /// Its name.
    pub name: String,
    /// `tcp`, `udp` or `sctp`.
    pub proto: &'static str,
    /// Parsed VIPs, in NB key order.
    pub vips: Vec<LbVip>,
    /// `selection_fields`, comma-joined, as `hash_fields`.
    pub hash_fields: Option<String>,
    /// `options:reject=true`: a VIP without backends rejects.
    pub reject_empty: bool,
    /// A VIP without backends raises an event ([`crate::lb_event`]).
    pub event: bool,
    /// The VIPs of a template load balancer ([`crate::lb_template`]; `vips` is then empty).
    pub templates: Vec<crate::lb_template::TemplateVip>,
}

/// What a router's switch-side ports answer or forward ARP/ND for.
#[derive(Clone, Debug, Default)]
pub struct RouterAddrs {
    /// IPv4 load-balancer VIPs of the router.
    pub lb_v4: BTreeSet<Ipv4Addr>,
    /// IPv6 load-balancer VIPs of the router.
    pub lb_v6: BTreeSet<Ipv6Addr>,
    /// External IPs of its `dnat` / `dnat_and_snat` rows.
    pub nat_ips: BTreeSet<IpAddr>,
    /// External MACs of its `dnat`/`dnat_and_snat` rows.
    pub nat_macs: BTreeSet<Mac>,
    /// Distributed NAT: (external MAC, logical port) of `dnat_and_snat` rows with both.
    pub distributed: BTreeSet<(Mac, String)>,
}

/// The switch stages' index.
#[derive(Debug, Default)]
pub struct LsIndex {
    /// Every ACL that applies somewhere.
    pub acls: Vec<AclInfo>,
    /// Per datapath: indices into `acls` (the switch's own, then its port groups' by name).
    pub switch_acls: Vec<Vec<usize>>,
    /// Per datapath: how many ACLs apply, including the ones left out as unparsable (OVN's
    /// `has_acls` counts rows, not valid rows).
    pub switch_acl_rows: Vec<usize>,
    /// Per datapath: some ACL row is `allow-related`.
    pub switch_stateful: Vec<bool>,
    /// Every load balancer attached to a switch.
    pub lbs: Vec<LbInfo>,
    /// Per datapath: indices into `lbs`.
    pub switch_lbs: Vec<Vec<usize>>,
    /// Per datapath: some attached load balancer has a VIP (OVN's `has_lb_vip`).
    pub switch_has_vip: Vec<bool>,
    /// Per router datapath.
    pub router: HashMap<DpIdx, RouterAddrs>,
    /// NB `ACL` row → the match text in force (the row's own when it parses, else its last
    /// good one): the next compile's `Keys::acl_last_good`.
    pub acl_good: BTreeMap<Uuid, String>,
}

fn verdict(a: &nb::AclAction) -> Option<AclVerdict> {
    Some(match a {
        nb::AclAction::Allow => AclVerdict::Allow,
        nb::AclAction::AllowRelated => AclVerdict::AllowRelated,
        nb::AclAction::AllowStateless => AclVerdict::AllowStateless,
        nb::AclAction::Drop => AclVerdict::Drop,
        nb::AclAction::Reject => AclVerdict::Reject,
        _ => return None,
    })
}

impl LsIndex {
    /// Builds the index for `topo`.
    pub fn build(
        topo: &Topo<'_>,
        last_good: &BTreeMap<Uuid, String>,
        diags: &mut Diags,
    ) -> LsIndex {
        let n = topo.datapaths.len();
        let mut ix = LsIndex {
            switch_acls: vec![Vec::new(); n],
            switch_acl_rows: vec![0; n],
            switch_stateful: vec![false; n],
            switch_lbs: vec![Vec::new(); n],
            switch_has_vip: vec![false; n],
            ..Default::default()
        };
        ix.index_acls(topo, last_good, diags);
        ix.index_lbs(topo, diags);
        ix.index_routers(topo);
        ix
    }

    fn index_acls(
        &mut self,
        topo: &Topo<'_>,
        last_good: &BTreeMap<Uuid, String>,
        diags: &mut Diags,
    ) {
        let nb = topo.nb;
        let symtab = SymbolTable::shared();
        let fair = fair_meters(topo);
        let mut parsed: HashMap<(Uuid, String), Option<usize>> = HashMap::new();
        let mut add =
            |ix: &mut LsIndex, dp: DpIdx, acl: &nb::Acl, holder: Holder<'_>, diags: &mut Diags| {
                ix.switch_acl_rows[dp] += 1;
                if acl.action == nb::AclAction::AllowRelated {
                    ix.switch_stateful[dp] = true;
                }
                let key = (acl.uuid, holder.name().to_string());
                let slot = match parsed.get(&key) {
                    Some(s) => *s,
                    None => {
                        let good = last_good.get(&acl.uuid).map(String::as_str);
                        let s = parse_acl(acl, holder, good, symtab, &fair, diags).map(|a| {
                            if a.broken != Some(AclBroken::FailClosed) {
                                ix.acl_good.insert(a.uuid, a.nb_match.clone());
                            }
                            ix.acls.push(a);
                            ix.acls.len() - 1
                        });
                        parsed.insert(key, s);
                        s
                    }
                };
                if let Some(i) = slot {
                    ix.switch_acls[dp].push(i);
                }
            };
        // Port groups, by name, with the switches their ports are on.
        let mut pgs: Vec<&nb::PortGroup> = nb.port_group().values().collect();
        pgs.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
        let mut pg_switches: Vec<(&nb::PortGroup, BTreeSet<DpIdx>)> = Vec::new();
        for pg in pgs {
            let mut dps = BTreeSet::new();
            for r in &pg.ports {
                let Some(lsp) = nb.get(*r) else { continue };
                if let Some(p) = topo.port_by_name.get(&lsp.name) {
                    let dp = topo.ports[*p].dp;
                    if topo.datapaths[dp].kind == DpKind::Switch {
                        dps.insert(dp);
                    }
                }
            }
            if !pg.acls.is_empty() && !dps.is_empty() {
                pg_switches.push((pg, dps));
            }
        }
        for dp in 0..topo.datapaths.len() {
            if topo.datapaths[dp].kind != DpKind::Switch {
                continue;
            }
            let Some(ls) = nb.logical_switch().get(&topo.datapaths[dp].nb) else {
                continue;
            };
            let mut acls: Vec<&nb::Acl> = ls.acls.iter().filter_map(|r| nb.get(*r)).collect();
            acls.sort_by_key(|a| a.uuid);
            for acl in acls {
                add(self, dp, acl, Holder::Switch(&ls.name), diags);
            }
        }
        for (pg, dps) in &pg_switches {
            let mut acls: Vec<&nb::Acl> = pg.acls.iter().filter_map(|r| nb.get(*r)).collect();
            acls.sort_by_key(|a| a.uuid);
            for dp in dps {
                for acl in &acls {
                    add(self, *dp, acl, Holder::PortGroup(&pg.name), diags);
                }
            }
        }
    }

    fn index_lbs(&mut self, topo: &Topo<'_>, diags: &mut Diags) {
        let nb = topo.nb;
        let mut parsed: HashMap<Uuid, usize> = HashMap::new();
        for dp in 0..topo.datapaths.len() {
            if topo.datapaths[dp].kind != DpKind::Switch {
                continue;
            }
            let Some(ls) = nb.logical_switch().get(&topo.datapaths[dp].nb) else {
                continue;
            };
            let mut rows: BTreeMap<Uuid, &nb::LoadBalancer> = BTreeMap::new();
            for r in &ls.load_balancer {
                if let Some(lb) = nb.get(*r) {
                    rows.insert(lb.uuid, lb);
                }
            }
            for g in &ls.load_balancer_group {
                if let Some(g) = nb.get(*g) {
                    for r in &g.load_balancer {
                        if let Some(lb) = nb.get(*r) {
                            rows.insert(lb.uuid, lb);
                        }
                    }
                }
            }
            let mut mine: Vec<usize> = Vec::with_capacity(rows.len());
            for (uuid, lb) in rows {
                // Template load balancers count too (23.03's `lb_has_vip` looks at NB).
                if !lb.vips.is_empty() {
                    self.switch_has_vip[dp] = true;
                }
                let i = *parsed.entry(uuid).or_insert_with(|| {
                    let info = parse_lb(lb, crate::lb_event::enabled(topo, lb), diags);
                    self.lbs.push(info);
                    self.lbs.len() - 1
                });
                mine.push(i);
            }
            mine.sort_by(|a, b| self.lbs[*a].name.cmp(&self.lbs[*b].name));
            self.switch_lbs[dp] = mine;
        }
    }

    fn index_routers(&mut self, topo: &Topo<'_>) {
        let nb = topo.nb;
        for dp in 0..topo.datapaths.len() {
            if topo.datapaths[dp].kind != DpKind::Router {
                continue;
            }
            // Only routers with a switch attached need this.
            let attached = topo.datapaths[dp].ports.iter().any(|p| {
                matches!(
                    topo.ports[*p].kind,
                    PortKind::RouterPort {
                        switch_peer: Some(_),
                        ..
                    }
                )
            });
            if !attached {
                continue;
            }
            let Some(lr) = nb.logical_router().get(&topo.datapaths[dp].nb) else {
                continue;
            };
            let mut ra = RouterAddrs::default();
            let mut lbs: Vec<&nb::LoadBalancer> =
                lr.load_balancer.iter().filter_map(|r| nb.get(*r)).collect();
            for g in &lr.load_balancer_group {
                if let Some(g) = nb.get(*g) {
                    lbs.extend(g.load_balancer.iter().filter_map(|r| nb.get(*r)));
                }
            }
            for lb in lbs
                .into_iter()
                .filter(|l| !crate::lb_template::is_template(l))
            {
                for k in lb.vips.keys() {
                    match parse_ip_port(k) {
                        Some((IpAddr::V4(a), _)) => {
                            ra.lb_v4.insert(a);
                        }
                        Some((IpAddr::V6(a), _)) => {
                            ra.lb_v6.insert(a);
                        }
                        None => {}
                    }
                }
            }
            for r in &lr.nat {
                let Some(nat) = nb.get(*r) else { continue };
                if nat.type_ == nb::NatType::Snat {
                    continue;
                }
                let Ok(ip) = nat.external_ip.parse::<IpAddr>() else {
                    continue;
                };
                ra.nat_ips.insert(ip);
                if let Some(m) = nat.external_mac.as_deref().and_then(Mac::parse) {
                    ra.nat_macs.insert(m);
                    if nat.type_ == nb::NatType::DnatAndSnat
                        && let Some(lp) = nat.logical_port.as_ref().filter(|l| !l.is_empty())
                    {
                        ra.distributed.insert((m, lp.clone()));
                    }
                }
            }
            self.router.insert(dp, ra);
        }
    }
}

/// What holds an ACL.
#[derive(Clone, Copy, Debug)]
enum Holder<'a> {
    /// A switch's own `acls`.
    Switch(&'a str),
    /// A port group's `acls`.
    PortGroup(&'a str),
}

impl Holder<'_> {
    fn name(&self) -> &str {
        match self {
            Holder::Switch(n) | Holder::PortGroup(n) => n,
        }
    }
}

/// The names of the `fair` meters: an ACL logging through one gets a copy of its own
/// ([`acl_log_meter`]).
pub fn fair_meters<'a>(topo: &Topo<'a>) -> BTreeSet<&'a str> {
    topo.nb
        .meter()
        .values()
        .filter(|m| m.fair == Some(true))
        .map(|m| m.name.as_str())
        .collect()
}

/// The meter an ACL's `log()` names: its `meter`, or for a `fair` meter the ACL's own copy
/// `<meter>__<ACL UUID>` (a row of its own in SB `Meter`, as ovn-northd 23.03 makes it).
pub fn acl_log_meter(acl: &nb::Acl, fair: &BTreeSet<&str>) -> Option<String> {
    let m = acl.meter.as_ref()?;
    Some(if fair.contains(m.as_str()) {
        format!("{m}__{}", acl.uuid)
    } else {
        m.clone()
    })
}

fn parse_acl(
    acl: &nb::Acl,
    holder: Holder<'_>,
    last_good: Option<&str>,
    symtab: &SymbolTable,
    fair: &BTreeSet<&str>,
    diags: &mut Diags,
) -> Option<AclInfo> {
    let who = format!("{} of {}", acl.direction.as_str(), holder.name());
    let Some(v) = verdict(&acl.action) else {
        diags.push(
            "ACL",
            acl.uuid,
            who,
            format!(
                "action {:?} is not one OVN 23.03 knows; the ACL is left out",
                acl.action.as_str()
            ),
        );
        return None;
    };
    let ingress = match acl.direction {
        nb::AclDirection::FromLport => true,
        nb::AclDirection::ToLport => false,
        ref d => {
            diags.push(
                "ACL",
                acl.uuid,
                who,
                format!(
                    "direction {:?} is neither from-lport nor to-lport; the ACL is left out",
                    d.as_str()
                ),
            );
            return None;
        }
    };
    let Some(priority) = u16::try_from(acl.priority).ok().filter(|p| *p <= 32767) else {
        diags.push(
            "ACL",
            acl.uuid,
            who,
            format!(
                "priority {} is outside 0..32767; the ACL is left out",
                acl.priority
            ),
        );
        return None;
    };
    let (matches, nb_match, broken) = match hf_expr::parse_match(symtab, &acl.match_) {
        Ok(e) => (e, acl.match_.clone(), None),
        Err(e) => {
            let (standin, done) = broken_acl(acl, holder, ingress, v, last_good, symtab);
            diags.push(
                "ACL",
                acl.uuid,
                who,
                format!("match {:?} does not parse ({e}); {done}", acl.match_),
            );
            let (m, text, mark) = standin?;
            (m, text, Some(mark))
        }
    };
    let log = acl.log.then(|| hf_expr::actions::LogArgs {
        name: acl.name.clone(),
        severity: Some(
            acl.severity
                .as_ref()
                .map_or("info".to_string(), |s| s.as_str().to_string()),
        ),
        verdict: Some(
            match v {
                AclVerdict::Drop => "drop",
                AclVerdict::Reject => "reject",
                _ => "allow",
            }
            .to_string(),
        ),
        meter: acl_log_meter(acl, fair),
    });
    Some(AclInfo {
        uuid: acl.uuid,
        holder: holder.name().to_string(),
        ingress,
        priority,
        verdict: v,
        matches,
        nb_match,
        label: u32::try_from(acl.label).unwrap_or(0),
        after_lb: ingress
            && acl
                .options
                .get("apply-after-lb")
                .is_some_and(|v| v == "true"),
        log,
        log_related: acl.options.get("log-related").is_some_and(|v| v == "true"),
        broken,
    })
}

/// What stands in for an ACL whose match does not parse: the match in force, its text and
/// the flows' mark (`None`: the ACL is left out), and what was done, for the diagnostic. See
/// the module doc.
fn broken_acl(
    acl: &nb::Acl,
    holder: Holder<'_>,
    ingress: bool,
    v: AclVerdict,
    last_good: Option<&str>,
    symtab: &SymbolTable,
) -> (Option<(Expr, String, AclBroken)>, String) {
    if let Some(text) = last_good
        && let Ok(m) = hf_expr::parse_match(symtab, text)
    {
        return (
            Some((m, text.to_string(), AclBroken::LastGood)),
            format!(
                "its last version that parsed, {text:?}, stays in force until the match is fixed \
                 (a restarted northd no longer knows it)"
            ),
        );
    }
    let verdict = match v {
        AclVerdict::Drop => "drop",
        AclVerdict::Reject => "reject",
        AclVerdict::Allow | AclVerdict::AllowRelated | AclVerdict::AllowStateless => {
            return (
                None,
                "the ACL is left out: what it would allow meets the lower-priority ACLs and the \
                 default"
                    .to_string(),
            );
        }
    };
    let toward = if ingress { "from" } else { "to" };
    let (scope, what) = match holder {
        Holder::PortGroup(pg) => (
            format!("{} == @{pg}", if ingress { "inport" } else { "outport" }),
            format!("every packet {toward} the ports of port group {pg}"),
        ),
        Holder::Switch(ls) => (
            "1".to_string(),
            format!("every packet {toward} the ports of switch {ls}"),
        ),
    };
    // A port group name the parser rejects cannot happen for a group northd emits flows for;
    // should it, every packet of the switch is dropped rather than none.
    match hf_expr::parse_match(symtab, &scope).or_else(|_| hf_expr::parse_match(symtab, "1")) {
        Ok(m) => (
            Some((m, acl.match_.clone(), AclBroken::FailClosed)),
            format!(
                "no earlier version parsed, so the ACL fails closed: its {verdict} applies to \
                 {what} at its priority until the match is fixed"
            ),
        ),
        Err(e) => (
            None,
            format!("the ACL is left out: its fail-closed match {scope:?} does not parse ({e})"),
        ),
    }
}

fn parse_lb(lb: &nb::LoadBalancer, event: bool, diags: &mut Diags) -> LbInfo {
    let proto = match &lb.protocol {
        None | Some(nb::LoadBalancerProtocol::Tcp) => "tcp",
        Some(nb::LoadBalancerProtocol::Udp) => "udp",
        Some(nb::LoadBalancerProtocol::Sctp) => "sctp",
        Some(p) => {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!(
                    "protocol {:?} is not tcp, udp or sctp; tcp is used",
                    p.as_str()
                ),
            );
            "tcp"
        }
    };
    let mut vips = Vec::new();
    let template = crate::lb_template::is_template(lb);
    let templates = if template {
        crate::lb_template::parse(lb, proto, event, diags)
    } else {
        Vec::new()
    };
    for (k, v) in lb.vips.iter().filter(|_| !template) {
        let Some((ip, port)) = parse_ip_port(k) else {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!("VIP {k:?} is not IP[:PORT]; the VIP is left out"),
            );
            continue;
        };
        let mut backends = Vec::new();
        let mut bad = false;
        for b in v.split(',').map(str::trim).filter(|b| !b.is_empty()) {
            match parse_ip_port(b) {
                Some((bip, bport))
                    if bip.is_ipv4() == ip.is_ipv4() && bport.is_some() == port.is_some() =>
                {
                    backends.push((bip, bport))
                }
                _ => {
                    diags.push(
                        "Load_Balancer",
                        lb.uuid,
                        &lb.name,
                        format!(
                            "backend {b:?} of VIP {k:?} is not an address of the VIP's family (with a port exactly when the VIP has one); the VIP is left out"
                        ),
                    );
                    bad = true;
                    break;
                }
            }
        }
        if !bad {
            vips.push(LbVip {
                ip,
                port,
                backends,
                key: k.clone(),
            });
        }
    }
    for opt in ["affinity_timeout"] {
        if lb.options.contains_key(opt) && !template {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!(
                    "options:{opt} is not compiled by holdfast northd; the VIPs balance without it"
                ),
            );
        }
    }
    let hash_fields = (!lb.selection_fields.is_empty()).then(|| {
        lb.selection_fields
            .iter()
            .map(|f| f.as_str().to_string())
            .collect::<Vec<_>>()
            .join(",")
    });
    LbInfo {
        uuid: lb.uuid,
        name: lb.name.clone(),
        proto,
        vips,
        hash_fields,
        reject_empty: lb.options.get("reject").is_some_and(|v| v == "true"),
        event,
        templates,
    }
}
