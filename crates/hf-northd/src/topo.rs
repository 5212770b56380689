//! The NB digested once per compile: datapaths and ports indexed, addresses parsed, router
//! peers resolved, tunnel keys assigned. Every stage reads a [`Topo`]; nothing here emits flows.
//!
//! Bad rows become [`crate::diag::Diagnostic`]s here (unparsable addresses, dangling peers,
//! duplicate names) and are left out or reduced; the rest of the topology is complete.

use std::collections::BTreeMap;

// foldhash, not SipHash: the port maps hold 20k names at 500x40 and every port add looks
// each topology port up once.
use hashbrown::HashMap;

use hf_expr::FeatureSet;
use hf_model::NbSnapshot;
use hf_model::nb;
use ipnet::IpNet;
use uuid::Uuid;

use crate::addr::{LportAddresses, Mac, parse_net};
use crate::diag::Diags;
use crate::flow::DpIdx;
use crate::stage::DpKind;

/// Index of a port in [`Topo::ports`].
pub type PortIdx = usize;

/// Tunnel keys already in use, by name: what SB holds (so keys survive restarts and NB
/// rebuilds with new UUIDs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keys {
    /// Datapath name → tunnel key.
    pub datapaths: HashMap<String, u32>,
    /// Port name → tunnel key (within its datapath).
    pub ports: HashMap<String, u32>,
    /// `SB_Global.options` SB holds: `mac_prefix` and `svc_monitor_mac` are kept from here
    /// when NB does not set them (see `tables::global`).
    pub sb_options: BTreeMap<String, String>,
    /// Datapath name → the NB row SB's `Datapath_Binding` was written for
    /// (`external_ids:logical-switch`/`logical-router`): when two NB rows share a name, that
    /// one keeps it (a duplicate added later never displaces the switch SB has).
    pub nb_rows: HashMap<String, Uuid>,
    /// Port name → `Port_Binding.tag` SB holds: a container port with `tag_request=0` keeps
    /// the tag it was given (ovn-northd keeps it by writing NB's `tag`; compile is pure).
    pub tags: HashMap<String, i64>,
    /// Port name → the chassis `Port_Binding.chassis` names (where SB says it is bound):
    /// what `HA_Chassis_Group.ref_chassis` is made of.
    pub bound_chassis: HashMap<String, String>,
    /// Port name → `Port_Binding.options:qdisc_queue_id` SB holds (kept, as ovn-northd keeps
    /// it).
    pub queue_ids: HashMap<String, u32>,
    /// NB `ACL` row → the last text of its match that parsed, in this northd's run: a later
    /// edit that breaks the match keeps this version (`Compiled::acl_last_good` gives the map
    /// for the next compile). Not read from SB: a restarted northd has none, and a broken
    /// drop or reject ACL then fails closed (see [`crate::ls::index`]).
    pub acl_last_good: BTreeMap<Uuid, String>,
    /// `Service_Monitor` rows SB holds: status and whether the port is up (what the health
    /// checks' [`crate::svc::plan`] reads).
    pub svc: BTreeMap<crate::svc::SvcKey, crate::svc::SvcSeen>,
    /// The controllers' `IGMP_Group` rows, resolved to names and sorted (what
    /// [`crate::tables::igmp`] turns into learned `Multicast_Group` rows and flows).
    pub igmp: Vec<crate::tables::igmp::IgmpSeen>,
    /// Learned `Multicast_Group` rows SB holds: (datapath name, group name) → tunnel key
    /// (kept, as ovn-northd keeps a group's key).
    pub mc_keys: BTreeMap<(String, String), u32>,
    /// SB `BFD` rows (what [`crate::bfd::plan`] reads).
    pub bfd: Vec<crate::bfd::BfdSeen>,
}

impl Keys {
    /// A copy without the port keys (the one part as large as the topology).
    pub(crate) fn without_ports(&self) -> Keys {
        Keys {
            datapaths: self.datapaths.clone(),
            ports: HashMap::new(),
            sb_options: self.sb_options.clone(),
            nb_rows: self.nb_rows.clone(),
            tags: self.tags.clone(),
            bound_chassis: self.bound_chassis.clone(),
            queue_ids: self.queue_ids.clone(),
            acl_last_good: self.acl_last_good.clone(),
            svc: self.svc.clone(),
            igmp: self.igmp.clone(),
            mc_keys: self.mc_keys.clone(),
            bfd: self.bfd.clone(),
        }
    }
}

/// What kind of port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// A VIF (`type=""`).
    Vif,
    /// `type=router`: the switch side of a router port (`options:router-port`).
    SwitchRouter {
        /// The LRP it connects to, if it exists.
        lrp: Option<PortIdx>,
    },
    /// `type=localnet` with `options:network_name`.
    Localnet,
    /// `type=localport`.
    Localport,
    /// Another LSP type (`external`, `virtual`, `vtep`, `l2gateway`, ...), kept by name.
    OtherLsp(String),
    /// A logical router port.
    RouterPort {
        /// The LRP at the other end (`peer`), for router-to-router links.
        peer: Option<PortIdx>,
        /// The LSP of type router that points at it.
        switch_peer: Option<PortIdx>,
    },
    /// The chassis-redirect port `cr-<lrp>` of a distributed gateway port.
    ChassisRedirect {
        /// The distributed gateway port.
        of: PortIdx,
    },
}

/// One logical port.
#[derive(Clone, Debug)]
pub struct Port {
    /// `logical_port` name.
    pub name: String,
    /// Its datapath.
    pub dp: DpIdx,
    /// Kind.
    pub kind: PortKind,
    /// The NB row (the LSP or LRP; for a chassis-redirect port, its LRP).
    pub nb: Uuid,
    /// Tunnel key within the datapath.
    pub tunnel_key: u32,
    /// `enabled` (absent means enabled).
    pub enabled: bool,
    /// Parsed `addresses` entries with a MAC.
    pub addresses: Vec<LportAddresses>,
    /// `addresses` has `unknown`.
    pub unknown: bool,
    /// `addresses` has `router` (a switch-side router port taking the LRP's addresses).
    pub router_addresses: bool,
    /// `addresses` has a dynamic entry (`dynamic`, `MAC dynamic`, ...): the switch's IPAM
    /// assigns it ([`crate::ipam`]) and `addresses` ends with what `dynamic_addresses` holds.
    pub dynamic: bool,
    /// Parsed `port_security` entries.
    pub port_security: Vec<LportAddresses>,
    /// LRP: `mac`.
    pub mac: Option<Mac>,
    /// LRP: `networks`, with host bits.
    pub networks: Vec<IpNet>,
    /// LRP: gateway chassis (name, priority), highest priority first.
    pub gateway_chassis: Vec<(String, i64)>,
    /// LSP/LRP `options`.
    pub options: BTreeMap<String, String>,
}

impl Port {
    /// An LRP (not its chassis-redirect port).
    pub fn is_lrp(&self) -> bool {
        matches!(self.kind, PortKind::RouterPort { .. })
    }

    /// A distributed gateway port (an LRP with gateway chassis on a distributed router).
    pub fn is_dgp(&self) -> bool {
        self.is_lrp() && !self.gateway_chassis.is_empty()
    }
}

/// One datapath.
#[derive(Clone, Debug)]
pub struct Datapath {
    /// The NB name (`Datapath_Binding.external_ids:name`).
    pub name: String,
    /// Switch or router.
    pub kind: DpKind,
    /// The NB row.
    pub nb: Uuid,
    /// Tunnel key.
    pub tunnel_key: u32,
    /// Its ports, by name order.
    pub ports: Vec<PortIdx>,
    /// Router: `options:chassis` (a gateway router bound to that chassis).
    pub gateway_chassis: Option<String>,
    /// Router: its distributed gateway ports.
    pub dgps: Vec<PortIdx>,
}

/// The digested NB.
#[derive(Debug)]
pub struct Topo<'a> {
    /// The NB it came from (stages read rows through it).
    pub nb: &'a NbSnapshot,
    /// Every datapath: switches first, then routers, each by name.
    pub datapaths: Vec<Datapath>,
    /// Every port: per datapath, by name; chassis-redirect ports after their router's ports.
    pub ports: Vec<Port>,
    /// Datapath by name.
    pub dp_by_name: HashMap<String, DpIdx>,
    /// Port by name.
    pub port_by_name: HashMap<String, PortIdx>,
    /// Datapath by NB UUID.
    pub dp_by_nb: HashMap<Uuid, DpIdx>,
    /// `NB_Global.options`.
    pub global_options: BTreeMap<String, String>,
    /// The features every chassis has (what flows may use). Stages that have an older
    /// formulation for a feature outside this set emit it; see `render` for the rest.
    pub features: FeatureSet,
    /// What the switch stages need beyond this (ACLs, load balancers, router addresses per
    /// switch), digested once.
    pub ls: crate::ls::index::LsIndex,
    /// The health checks' plan ([`crate::svc`]).
    pub svc: std::sync::Arc<crate::svc::SvcPlan>,
    /// The controllers' `IGMP_Group` rows ([`Keys::igmp`]).
    pub igmp: std::sync::Arc<Vec<crate::tables::igmp::IgmpSeen>>,
    /// BFD: SB rows, NB statuses, ports with BFD, routes down ([`crate::bfd`]).
    pub bfd: std::sync::Arc<crate::bfd::BfdPlan>,
}

/// A [`Topo`] without its NB: what the incremental compiler keeps between compiles
/// ([`crate::incremental`]), to patch for the next NB rather than build anew.
#[derive(Debug)]
pub(crate) struct TopoParts {
    pub(crate) datapaths: Vec<Datapath>,
    pub(crate) ports: Vec<Port>,
    pub(crate) dp_by_name: HashMap<String, DpIdx>,
    pub(crate) port_by_name: HashMap<String, PortIdx>,
    pub(crate) dp_by_nb: HashMap<Uuid, DpIdx>,
    pub(crate) global_options: BTreeMap<String, String>,
    pub(crate) features: FeatureSet,
    pub(crate) ls: crate::ls::index::LsIndex,
    pub(crate) svc: std::sync::Arc<crate::svc::SvcPlan>,
    pub(crate) igmp: std::sync::Arc<Vec<crate::tables::igmp::IgmpSeen>>,
    pub(crate) bfd: std::sync::Arc<crate::bfd::BfdPlan>,
}

impl<'a> Topo<'a> {
    /// Splits off the NB.
    pub(crate) fn into_parts(self) -> TopoParts {
        TopoParts {
            datapaths: self.datapaths,
            ports: self.ports,
            dp_by_name: self.dp_by_name,
            port_by_name: self.port_by_name,
            dp_by_nb: self.dp_by_nb,
            global_options: self.global_options,
            features: self.features,
            ls: self.ls,
            svc: self.svc,
            igmp: self.igmp,
            bfd: self.bfd,
        }
    }

    /// A topology of `parts` reading rows from `nb` (which the caller has made agree with
    /// them).
    pub(crate) fn from_parts(nb: &'a NbSnapshot, p: TopoParts) -> Topo<'a> {
        Topo {
            nb,
            datapaths: p.datapaths,
            ports: p.ports,
            dp_by_name: p.dp_by_name,
            port_by_name: p.port_by_name,
            dp_by_nb: p.dp_by_nb,
            global_options: p.global_options,
            features: p.features,
            ls: p.ls,
            svc: p.svc,
            igmp: p.igmp,
            bfd: p.bfd,
        }
    }
}

impl<'a> Topo<'a> {
    /// Digests `nb`, keeping the tunnel keys in `keys` where they are still valid.
    pub fn build(
        nb: &'a NbSnapshot,
        keys: &Keys,
        features: FeatureSet,
        diags: &mut Diags,
    ) -> Topo<'a> {
        let mut t = Topo {
            nb,
            datapaths: Vec::new(),
            ports: Vec::new(),
            dp_by_name: HashMap::new(),
            port_by_name: HashMap::new(),
            dp_by_nb: HashMap::new(),
            global_options: nb
                .nb_global()
                .values()
                .next()
                .map(|g| g.options.clone())
                .unwrap_or_default()
                .into(),
            features,
            ls: Default::default(),
            svc: Default::default(),
            igmp: std::sync::Arc::new(keys.igmp.clone()),
            bfd: std::sync::Arc::new(crate::bfd::plan(nb, &keys.bfd)),
        };
        // Datapaths, by name; a second row with a name already taken is refused.
        let mut switches: Vec<&nb::LogicalSwitch> = nb.logical_switch().values().collect();
        // Among rows sharing a name, the one SB has wins, then the one with more ports.
        let known = |name: &str, u: Uuid| keys.nb_rows.get(name) != Some(&u);
        switches.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(known(&a.name, a.uuid).cmp(&known(&b.name, b.uuid)))
                .then(b.ports.len().cmp(&a.ports.len()))
                .then(a.uuid.cmp(&b.uuid))
        });
        let mut routers: Vec<&nb::LogicalRouter> = nb.logical_router().values().collect();
        routers.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(known(&a.name, a.uuid).cmp(&known(&b.name, b.uuid)))
                .then(b.ports.len().cmp(&a.ports.len()))
                .then(a.uuid.cmp(&b.uuid))
        });
        for g in nb.nb_global().values().filter(|g| g.ipsec) {
            diags.push(
                "NB_Global",
                g.uuid,
                ".",
                "ipsec=true: IPsec is not built by holdfast (SB_Global.ipsec is not written; tunnels between chassis stay unencrypted)",
            );
        }
        for ls in switches {
            if ls.other_config.get("interconn-ts").is_some() {
                diags.push(
                    "Logical_Switch",
                    ls.uuid,
                    &ls.name,
                    "other_config:interconn-ts: OVN interconnection is not built by holdfast; the transit switch is compiled as a plain switch (no IGMP relay to remote availability zones)",
                );
            }
            t.add_datapath(&ls.name, DpKind::Switch, ls.uuid, "Logical_Switch", diags);
        }
        for lr in &routers {
            let before = t.datapaths.len();
            t.add_datapath(&lr.name, DpKind::Router, lr.uuid, "Logical_Router", diags);
            if t.datapaths.len() > before
                && let Some(c) = lr.options.get("chassis").filter(|c| !c.is_empty())
                && let Some(d) = t.datapaths.last_mut()
            {
                d.gateway_chassis = Some(c.clone());
            }
        }
        t.add_switch_ports(diags);
        t.add_router_ports(diags);
        t.resolve_peers(diags);
        t.assign_keys(keys);
        t.ls = crate::ls::index::LsIndex::build(&t, &keys.acl_last_good, diags);
        let svc = crate::svc::plan(nb, &keys.svc, &keys.sb_options);
        diags.0.extend(svc.diags.iter().cloned());
        t.svc = std::sync::Arc::new(svc);
        t
    }

    fn add_datapath(
        &mut self,
        name: &str,
        kind: DpKind,
        uuid: Uuid,
        table: &'static str,
        diags: &mut Diags,
    ) {
        if name.is_empty() {
            diags.push(
                table,
                uuid,
                name,
                "has no name; northd derives SB rows from names, so it is left out",
            );
            return;
        }
        if self.dp_by_name.contains_key(name) {
            diags.push(
                table,
                uuid,
                name,
                "duplicate name: another switch or router already has it; this one is left out",
            );
            return;
        }
        let idx = self.datapaths.len();
        self.dp_by_name.insert(name.to_string(), idx);
        self.dp_by_nb.insert(uuid, idx);
        self.datapaths.push(Datapath {
            name: name.to_string(),
            kind,
            nb: uuid,
            tunnel_key: 0,
            ports: Vec::new(),
            gateway_chassis: None,
            dgps: Vec::new(),
        });
    }

    pub(crate) fn add_port(
        &mut self,
        p: Port,
        table: &'static str,
        diags: &mut Diags,
    ) -> Option<PortIdx> {
        if p.name.is_empty() {
            diags.push(table, p.nb, "", "has no name; it is left out");
            return None;
        }
        if !matches!(p.kind, PortKind::ChassisRedirect { .. })
            && let Some(what) = self.derived_by(&p.name)
        {
            diags.push(
                table,
                p.nb,
                &p.name,
                format!("the name is the one northd derives for {what}; this port is left out"),
            );
            return None;
        }
        if self.port_by_name.contains_key(&p.name) {
            diags.push(
                table,
                p.nb,
                &p.name,
                "duplicate port name (switch and router ports share one name space); this one is left out",
            );
            return None;
        }
        let idx = self.ports.len();
        self.port_by_name.insert(p.name.clone(), idx);
        self.datapaths[p.dp].ports.push(idx);
        self.ports.push(p);
        Some(idx)
    }

    fn add_switch_ports(&mut self, diags: &mut Diags) {
        let nb = self.nb;
        for dp in 0..self.datapaths.len() {
            if self.datapaths[dp].kind != DpKind::Switch {
                continue;
            }
            let Some(ls) = nb.logical_switch().get(&self.datapaths[dp].nb) else {
                continue;
            };
            crate::ipam::diagnose(ls, diags);
            let mut lsps: Vec<&nb::LogicalSwitchPort> =
                ls.ports.iter().filter_map(|r| nb.get(*r)).collect();
            lsps.sort_by(|a, b| a.name.cmp(&b.name));
            for lsp in lsps {
                let p = lsp_port(lsp, dp, Some(ls), diags);
                self.add_port(p, "Logical_Switch_Port", diags);
            }
        }
    }

    fn add_router_ports(&mut self, diags: &mut Diags) {
        let nb = self.nb;
        for dp in 0..self.datapaths.len() {
            if self.datapaths[dp].kind != DpKind::Router {
                continue;
            }
            let Some(lr) = nb.logical_router().get(&self.datapaths[dp].nb) else {
                continue;
            };
            let mut lrps: Vec<&nb::LogicalRouterPort> =
                lr.ports.iter().filter_map(|r| nb.get(*r)).collect();
            lrps.sort_by(|a, b| a.name.cmp(&b.name));
            let mut dgps = Vec::new();
            // Networks already taken on this router, with the port holding each.
            let mut taken: Vec<(IpNet, String)> = Vec::new();
            for lrp in lrps {
                let Some(mac) = Mac::parse(&lrp.mac) else {
                    diags.push(
                        "Logical_Router_Port",
                        lrp.uuid,
                        &lrp.name,
                        format!(
                            "mac {:?} is not an Ethernet address; the port is left out",
                            lrp.mac
                        ),
                    );
                    continue;
                };
                let mut networks = Vec::new();
                for n in &lrp.networks {
                    match n.parse::<IpNet>() {
                        Ok(net) => networks.push(net),
                        Err(_) => diags.push(
                            "Logical_Router_Port",
                            lrp.uuid,
                            &lrp.name,
                            format!("network {n:?} is not IP/PLEN; it is ignored"),
                        ),
                    }
                }
                networks = drop_overlapping(networks, &mut taken, lrp, diags);
                let mut gws: Vec<(String, i64)> = lrp
                    .gateway_chassis
                    .iter()
                    .filter_map(|r| nb.get(*r))
                    .map(|g| (g.chassis_name.clone(), g.priority))
                    .collect();
                // 23.03: an LRP with an HA chassis group is a distributed gateway port
                // too (the group wins over `gateway_chassis`).
                if let Some(g) = lrp.ha_chassis_group.and_then(|g| nb.get(g)) {
                    gws = g
                        .ha_chassis
                        .iter()
                        .filter_map(|c| nb.get(*c))
                        .map(|c| (c.chassis_name.clone(), c.priority))
                        .collect();
                }
                gws.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let p = Port {
                    name: lrp.name.clone(),
                    dp,
                    kind: PortKind::RouterPort {
                        peer: None,
                        switch_peer: None,
                    },
                    nb: lrp.uuid,
                    tunnel_key: 0,
                    enabled: lrp.enabled.unwrap_or(true),
                    addresses: Vec::new(),
                    unknown: false,
                    router_addresses: false,
                    dynamic: false,
                    port_security: Vec::new(),
                    mac: Some(mac),
                    networks,
                    gateway_chassis: gws,
                    options: lrp.options.clone().into(),
                };
                let is_dgp = p.is_dgp() && self.datapaths[dp].gateway_chassis.is_none();
                if let Some(idx) = self.add_port(p, "Logical_Router_Port", diags)
                    && is_dgp
                {
                    dgps.push(idx);
                }
            }
            for of in dgps {
                let lrp = &self.ports[of];
                let cr = Port {
                    name: format!("cr-{}", lrp.name),
                    kind: PortKind::ChassisRedirect { of },
                    ..lrp.clone()
                };
                if let Some(idx) = self.add_port(cr, "Logical_Router_Port", diags) {
                    let _ = idx;
                    self.datapaths[dp].dgps.push(of);
                }
            }
        }
    }

    fn resolve_peers(&mut self, diags: &mut Diags) {
        let nb = self.nb;
        for i in 0..self.ports.len() {
            match self.ports[i].kind.clone() {
                PortKind::SwitchRouter { .. } => {
                    let target = self.ports[i].options.get("router-port").cloned();
                    let lrp = target
                        .as_ref()
                        .and_then(|n| self.port_by_name.get(n).copied());
                    let lrp = lrp.filter(|l| self.ports[*l].is_lrp());
                    if lrp.is_none() {
                        diags.push(
                            "Logical_Switch_Port",
                            self.ports[i].nb,
                            &self.ports[i].name,
                            format!(
                                "type router with options:router-port={:?}, which is not a logical router port; the port forwards nothing",
                                target.unwrap_or_default()
                            ),
                        );
                    }
                    self.ports[i].kind = PortKind::SwitchRouter { lrp };
                    if let Some(l) = lrp
                        && let PortKind::RouterPort { switch_peer, .. } = &mut self.ports[l].kind
                    {
                        if switch_peer.is_some() {
                            diags.push(
                                "Logical_Switch_Port",
                                self.ports[i].nb,
                                &self.ports[i].name,
                                "a second switch port points at the same router port; the router uses the first",
                            );
                        } else {
                            *switch_peer = Some(i);
                        }
                    }
                }
                PortKind::RouterPort { .. } => {
                    let Some(lrp) = nb.logical_router_port().get(&self.ports[i].nb) else {
                        continue;
                    };
                    if let Some(peer) = &lrp.peer {
                        let p = self
                            .port_by_name
                            .get(peer)
                            .copied()
                            .filter(|p| self.ports[*p].is_lrp());
                        if p.is_none() {
                            diags.push(
                                "Logical_Router_Port",
                                lrp.uuid,
                                &lrp.name,
                                format!("peer {peer:?} is not a logical router port; the link is left out"),
                            );
                        }
                        if let PortKind::RouterPort { peer, .. } = &mut self.ports[i].kind {
                            *peer = p;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Tunnel keys: datapaths 1..2^24-1, ports 1..32767 within their datapath. Requested keys
    /// first, then the keys SB already has, then the lowest free key in name order, so a
    /// rebuilt NB (new UUIDs, same names) gets the same keys.
    fn assign_keys(&mut self, keys: &Keys) {
        // Datapaths: `requested-tnl-key` (switch other_config, router options; what ovn-ic
        // uses so both zones agree) first, then SB's keys, then the lowest free key.
        let nb = self.nb;
        let requested: Vec<Option<u32>> = self
            .datapaths
            .iter()
            .map(|d| {
                let v = match d.kind {
                    DpKind::Switch => nb
                        .logical_switch()
                        .get(&d.nb)
                        .and_then(|l| l.other_config.get("requested-tnl-key")),
                    DpKind::Router => nb
                        .logical_router()
                        .get(&d.nb)
                        .and_then(|l| l.options.get("requested-tnl-key")),
                };
                v.and_then(|k| k.parse::<u32>().ok())
                    .filter(|k| (1..=crate::tables::global::MAX_TUNID).contains(k))
            })
            .collect();
        let mut used = std::collections::HashSet::new();
        let mut pending = Vec::new();
        for (i, d) in self.datapaths.iter_mut().enumerate() {
            match requested[i] {
                Some(k) if used.insert(k) => d.tunnel_key = k,
                _ => pending.push(i),
            }
        }
        let mut rest = Vec::new();
        for i in pending {
            match keys.datapaths.get(&self.datapaths[i].name) {
                Some(k) if *k > 0 && used.insert(*k) => self.datapaths[i].tunnel_key = *k,
                _ => rest.push(i),
            }
        }
        let mut next = 1u32;
        for i in rest {
            while used.contains(&next) {
                next += 1;
            }
            used.insert(next);
            self.datapaths[i].tunnel_key = next;
        }
        // Ports: the same order, within their datapath (1..32767).
        for dp in 0..self.datapaths.len() {
            self.assign_port_keys(dp, keys);
        }
    }

    /// The tunnel keys of datapath `dp`'s ports (1..32767): requested keys first, then the
    /// keys SB has, then the lowest free key in name order. Depends on that datapath's ports
    /// and `keys.ports` alone, so the incremental path redoes it per datapath.
    pub(crate) fn assign_port_keys(&mut self, dp: DpIdx, keys: &Keys) {
        let ports = self.datapaths[dp].ports.clone();
        let mut used = std::collections::HashSet::new();
        let mut pending = Vec::new();
        for p in &ports {
            let port = &mut self.ports[*p];
            let requested = port
                .options
                .get("requested-tnl-key")
                .and_then(|k| k.parse::<u32>().ok())
                .filter(|k| (1..=32767).contains(k));
            match requested {
                Some(k) if used.insert(k) => port.tunnel_key = k,
                _ => pending.push(*p),
            }
        }
        let mut rest = Vec::new();
        for p in pending {
            let port = &mut self.ports[p];
            match keys.ports.get(&port.name).copied() {
                Some(k) if (1..=32767).contains(&k) && used.insert(k) => port.tunnel_key = k,
                _ => rest.push(p),
            }
        }
        let mut next = 1u32;
        for p in rest {
            while used.contains(&next) {
                next += 1;
            }
            used.insert(next);
            self.ports[p].tunnel_key = next;
        }
    }

    /// The datapath named `name`.
    pub fn dp(&self, name: &str) -> Option<&Datapath> {
        self.dp_by_name.get(name).map(|i| &self.datapaths[*i])
    }

    /// The port named `name`.
    pub fn port(&self, name: &str) -> Option<&Port> {
        self.port_by_name.get(name).map(|i| &self.ports[*i])
    }

    /// `NB_Global options:KEY` is `true`.
    pub fn option_true(&self, key: &str) -> bool {
        self.global_options.get(key).is_some_and(|v| v == "true")
    }
}

impl Topo<'_> {
    /// What derives `name` (a chassis-redirect port `cr-<dgp>` of a distributed gateway
    /// port), if northd derives it for another row.
    fn derived_by(&self, name: &str) -> Option<String> {
        let base = name.strip_prefix("cr-")?;
        self.nb
            .logical_router_port_all_by_name(base)
            .find(|l| {
                !l.gateway_chassis.is_empty()
                    && self
                        .nb
                        .logical_router_all_by_ports(hf_model::RowRef::new(l.uuid))
                        .any(|r| r.options.get("chassis").is_none_or(|c| c.is_empty()))
            })
            .map(|_| format!("the chassis-redirect port of distributed gateway port {base:?}"))
    }
}

/// One logical switch port of datapath `dp` (switch row `ls`) as the topology holds it
/// (tunnel key not yet assigned, router peer not yet resolved), with the diagnostics about
/// the row itself. A port with a dynamic entry on a switch that assigns addresses gets what
/// `dynamic_addresses` holds as its last address entry (as ovn-northd appends it).
pub(crate) fn lsp_port(
    lsp: &nb::LogicalSwitchPort,
    dp: DpIdx,
    ls: Option<&nb::LogicalSwitch>,
    diags: &mut Diags,
) -> Port {
    let kind = match lsp.type_.as_str() {
        "" => PortKind::Vif,
        "router" => PortKind::SwitchRouter { lrp: None },
        "localnet" => PortKind::Localnet,
        "localport" => PortKind::Localport,
        other => PortKind::OtherLsp(other.to_string()),
    };
    let mut p = Port {
        name: lsp.name.clone(),
        dp,
        kind,
        nb: lsp.uuid,
        tunnel_key: 0,
        enabled: lsp.enabled.unwrap_or(true),
        addresses: Vec::new(),
        unknown: false,
        router_addresses: false,
        dynamic: false,
        port_security: Vec::new(),
        mac: None,
        networks: Vec::new(),
        gateway_chassis: Vec::new(),
        options: lsp.options.clone().into(),
    };
    for a in &lsp.addresses {
        match a.trim() {
            "unknown" => p.unknown = true,
            "router" => p.router_addresses = true,
            s if crate::ipam::is_dynamic(s) => p.dynamic = true,
            s => match LportAddresses::parse(s) {
                Ok(x) => p.addresses.push(x),
                Err(e) => diags.push(
                    "Logical_Switch_Port",
                    lsp.uuid,
                    &lsp.name,
                    format!("addresses entry {s:?}: {e}; the entry is ignored"),
                ),
            },
        }
    }
    crate::ipam::diagnose_port(lsp, ls, diags);
    if p.dynamic
        && let Some(d) = &lsp.dynamic_addresses
        && ls.is_some_and(|ls| {
            crate::ipam::SwitchConfig::parse(&ls.other_config)
                .0
                .enabled()
        })
    {
        match LportAddresses::parse(d) {
            Ok(x) => p.addresses.push(x),
            Err(e) => diags.push(
                "Logical_Switch_Port",
                lsp.uuid,
                &lsp.name,
                format!("dynamic_addresses {d:?}: {e}; the port has no dynamic address until northd assigns one"),
            ),
        }
    }
    for a in &lsp.port_security {
        match LportAddresses::parse(a) {
            Ok(x) => p.port_security.push(x),
            Err(e) => diags.push(
                "Logical_Switch_Port",
                lsp.uuid,
                &lsp.name,
                format!(
                    "port_security entry {a:?}: {e}; the port drops all traffic until it is fixed (fail closed)"
                ),
            ),
        }
    }
    p
}

/// `networks` without those overlapping a network another port of the router already has
/// (`taken`, updated), each dropped network with a diagnostic.
fn drop_overlapping(
    networks: Vec<IpNet>,
    taken: &mut Vec<(IpNet, String)>,
    lrp: &nb::LogicalRouterPort,
    diags: &mut Diags,
) -> Vec<IpNet> {
    let mut kept = Vec::with_capacity(networks.len());
    for n in networks {
        let clash = taken.iter().find(|(t, owner)| {
            owner != &lrp.name && (t.contains(&n.network()) || n.contains(&t.network()))
        });
        match clash {
            Some((t, owner)) => diags.push(
                "Logical_Router_Port",
                lrp.uuid,
                &lrp.name,
                format!(
                    "network {n} overlaps {t} of port {owner:?} on the same router; the network is ignored"
                ),
            ),
            None => kept.push(n),
        }
    }
    taken.extend(kept.iter().map(|n| (*n, lrp.name.clone())));
    kept
}

/// Parses a network written with or without a prefix (re-exported for stages).
pub fn net(s: &str) -> Option<IpNet> {
    parse_net(s)
}
