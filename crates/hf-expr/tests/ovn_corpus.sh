#!/usr/bin/env bash
# Builds a realistic northbound database in real OVN (Debian's ovsdb-server and ovn-northd, run
# without systemd in a temporary directory) and prints `ovn-sbctl lflow-list` on stdout.
# Every daemon is stopped by pid on exit, also on failure. Used by the hf-expr corpus test and by
# `hf-bench expr`; the committed fixture tests/data/ovn-23.03-lflows.txt is its output.
set -euo pipefail
for b in ovsdb-tool ovsdb-server ovn-northd ovn-nbctl ovn-sbctl; do
  command -v "$b" >/dev/null 2>&1 || { echo "missing $b" >&2; exit 77; }
done
D=$(mktemp -d /tmp/hf-expr-ovn.XXXXXX)
cleanup() {
  for p in northd sb nb; do
    if [ -f "$D/$p.pid" ]; then kill "$(cat "$D/$p.pid")" 2>/dev/null || true; fi
  done
  sleep 0.2
  rm -rf "$D"
}
trap cleanup EXIT
cd "$D"
ovsdb-tool create nb.db /usr/share/ovn/ovn-nb.ovsschema
ovsdb-tool create sb.db /usr/share/ovn/ovn-sb.ovsschema
for x in nb sb; do
  ovsdb-server --detach --no-chdir --pidfile="$D/$x.pid" --log-file="$D/$x.log" \
    --remote="punix:$D/$x.sock" --unixctl="$D/$x.ctl" "$D/$x.db"
done
ovn-northd --detach --no-chdir --pidfile="$D/northd.pid" --log-file="$D/northd.log" \
  --unixctl="$D/northd.ctl" --ovnnb-db="unix:$D/nb.sock" --ovnsb-db="unix:$D/sb.sock"
nb() { ovn-nbctl --db="unix:$D/nb.sock" "$@"; }
sb() { ovn-sbctl --db="unix:$D/sb.sock" "$@"; }

# Two gateway chassis (so the distributed gateway port has somewhere to live) and a hypervisor.
# With `legacy` as the first argument the chassis advertise no features, so northd falls back to
# the spellings older controllers understand (ct_lb, ct_label.blocked); otherwise they advertise
# what ovn-controller 23.03 does.
n=2
for c in gw1 gw2 hv1; do
  sb chassis-add "$c" geneve "127.0.0.$n"
  n=$((n + 1))
  if [ "${1:-}" != legacy ]; then
    sb set chassis "$c" other_config:ct-no-masked-label=true \
      other_config:mac-binding-timestamp=true other_config:ovn-ct-lb-related=true \
      other_config:fdb-timestamp=true other_config:ls-dpg-column=true
  fi
done

# Switches: IPv4+IPv6 ports, port security, unknown addresses, localnet.
nb ls-add sw0 -- set logical_switch sw0 other_config:subnet=10.0.0.0/24 \
  other_config:ipv6_prefix=aef0::
nb ls-add sw1
nb ls-add public
nb lsp-add sw0 vm1 -- lsp-set-addresses vm1 "50:54:00:00:00:01 10.0.0.11 aef0::11" \
  -- lsp-set-port-security vm1 "50:54:00:00:00:01 10.0.0.11 aef0::11"
nb lsp-add sw0 vm2 -- lsp-set-addresses vm2 "50:54:00:00:00:02 10.0.0.12" unknown
nb lsp-add sw0 vm3 -- lsp-set-addresses vm3 "50:54:00:00:00:03 dynamic"
nb lsp-add sw1 vm4 -- lsp-set-addresses vm4 "50:54:00:00:01:04 20.0.0.14 bef0::14" \
  -- lsp-set-port-security vm4 "50:54:00:00:01:04 20.0.0.14 bef0::14"
nb lsp-add sw1 vm5 -- lsp-set-addresses vm5 "50:54:00:00:01:05 20.0.0.15" \
  -- lsp-set-options vm5 requested-chassis=hv1
nb lsp-add public ln-public -- lsp-set-type ln-public localnet \
  -- lsp-set-addresses ln-public unknown -- lsp-set-options ln-public network_name=phys
nb lsp-add sw1 ln-sw1 -- lsp-set-type ln-sw1 localnet -- lsp-set-addresses ln-sw1 unknown \
  -- lsp-set-options ln-sw1 network_name=phys2 -- set logical_switch_port ln-sw1 tag=100
# DHCP options.
d4=$(nb create dhcp_options cidr=10.0.0.0/24 options='"server_id"="10.0.0.1" "server_mac"="50:54:00:00:00:ff" "lease_time"="3600" "router"="10.0.0.1"')
nb lsp-set-dhcpv4-options vm1 "$d4"
d6=$(nb create dhcp_options cidr="aef0\:\:/64" options='"server_id"="00:00:00:00:10:00"')
nb lsp-set-dhcpv6-options vm1 "$d6"
# DNS.
dns=$(nb create dns records='{"vm1.example"="10.0.0.11 aef0::11"}')
nb add logical_switch sw0 dns_records "$dns"

# Distributed router with a distributed gateway port on two gateway chassis.
nb lr-add lr0
nb lrp-add lr0 lr0-sw0 00:00:00:00:ff:01 10.0.0.1/24 aef0::1/64
nb lrp-add lr0 lr0-sw1 00:00:00:00:ff:02 20.0.0.1/24 bef0::1/64
nb lrp-add lr0 lr0-public 00:00:20:20:12:13 172.168.0.100/24 3000::100/64
nb lrp-set-gateway-chassis lr0-public gw1 20
nb lrp-set-gateway-chassis lr0-public gw2 10
nb set logical_router_port lr0-sw0 ipv6_ra_configs:address_mode=slaac \
  ipv6_ra_configs:send_periodic=true
for p in sw0 sw1; do
  nb lsp-add $p $p-lr0 -- lsp-set-type $p-lr0 router -- lsp-set-addresses $p-lr0 router \
    -- lsp-set-options $p-lr0 router-port=lr0-$p
done
nb lsp-add public public-lr0 -- lsp-set-type public-lr0 router \
  -- lsp-set-addresses public-lr0 router -- lsp-set-options public-lr0 router-port=lr0-public
# Static routes with ECMP, router policies.
nb lr-route-add lr0 0.0.0.0/0 172.168.0.1
nb --ecmp lr-route-add lr0 30.0.0.0/24 172.168.0.10
nb --ecmp lr-route-add lr0 30.0.0.0/24 172.168.0.11
nb --ecmp-symmetric-reply lr-route-add lr0 40.0.0.0/24 172.168.0.12
nb lr-route-add lr0 ::/0 3000::1
nb lr-policy-add lr0 1000 "ip4.src == 10.0.0.11 && ip4.dst == 20.0.0.0/24" drop
nb lr-policy-add lr0 900 "ip4.src == 10.0.0.12" reroute 172.168.0.20
nb lr-policy-add lr0 800 "ip4.src == 10.0.0.0/24 && tcp.dst == 8080" allow pkt_mark=100
# NAT on the distributed router: SNAT, DNAT, dnat_and_snat distributed and centralised,
# with exempted_ext_ips.
nb lr-nat-add lr0 snat 172.168.0.100 10.0.0.0/24
nb lr-nat-add lr0 dnat 172.168.0.110 10.0.0.12
nb lr-nat-add lr0 dnat_and_snat 172.168.0.120 10.0.0.11 vm1 30:54:00:00:00:03
nb lr-nat-add lr0 dnat_and_snat 172.168.0.130 20.0.0.14
nb lr-nat-add lr0 dnat_and_snat 3000::130 aef0::11
nb create address_set name=ext_exempt addresses='"172.168.0.50", "172.168.0.51"' >/dev/null
ex=$(nb --bare --columns=_uuid find address_set name=ext_exempt)
natu=$(nb --bare --columns=_uuid find nat external_ip=172.168.0.130)
nb set nat "$natu" exempted_ext_ips="$ex"
natu2=$(nb --bare --columns=_uuid find nat type=snat)
nb create address_set name=ext_allowed addresses='"172.168.0.60"' >/dev/null
al=$(nb --bare --columns=_uuid find address_set name=ext_allowed)
nb lr-nat-add lr0 snat 172.168.0.101 20.0.0.0/24
natu3=$(nb --bare --columns=_uuid find nat logical_ip=\"20.0.0.0/24\")
nb set nat "$natu3" allowed_ext_ips="$al"
: "$natu2"

# Gateway router with lb_force_snat_ip, its own SNAT/DNAT.
nb lr-add gr0 -- set logical_router gr0 options:chassis=gw1 \
  options:lb_force_snat_ip=router_ip options:dynamic_neigh_routers=true
nb ls-add join
nb lrp-add gr0 gr0-join 00:00:00:00:ee:01 100.64.0.2/16
nb lrp-add gr0 gr0-ext 00:00:00:00:ee:02 172.169.0.2/24
nb lsp-add join join-gr0 -- lsp-set-type join-gr0 router -- lsp-set-addresses join-gr0 router \
  -- lsp-set-options join-gr0 router-port=gr0-join
nb lr-route-add gr0 10.0.0.0/24 100.64.0.1
nb lr-nat-add gr0 snat 172.169.0.2 10.0.0.0/8
nb lr-nat-add gr0 dnat 172.169.0.110 10.0.0.13
nb lr-nat-add gr0 dnat_and_snat 172.169.0.120 10.0.0.14

# Load balancers: TCP and UDP, on the switch, the distributed router and the gateway router.
nb lb-add lb-tcp 10.0.0.100:80 "10.0.0.11:8080,10.0.0.12:8080" tcp
nb lb-add lb-udp 10.0.0.101:53 "10.0.0.11:5353,20.0.0.14:5353" udp
nb lb-add lb-v6 "[aef0::100]:80" "[aef0::11]:8080" tcp
nb lb-add lb-gw 172.169.0.200:443 "10.0.0.11:443,10.0.0.12:443" tcp
nb lb-add lb-noport 10.0.0.102 "10.0.0.11,10.0.0.12"
nb set load_balancer lb-tcp options:hairpin_snat_ip=10.0.0.254 selection_fields=ip_src,ip_dst
nb set load_balancer lb-udp options:affinity_timeout=60
nb ls-lb-add sw0 lb-tcp
nb ls-lb-add sw0 lb-udp
nb ls-lb-add sw0 lb-v6
nb ls-lb-add sw0 lb-noport
nb lr-lb-add lr0 lb-tcp
nb lr-lb-add lr0 lb-udp
nb lr-lb-add gr0 lb-gw
nb lr-lb-add gr0 lb-tcp
nb lb-add lb-rej 10.0.0.103:80 "" tcp
nb set load_balancer lb-rej options:reject=true
nb ls-lb-add sw1 lb-rej
# Health check on one LB.
nb set load_balancer lb-udp ip_port_mappings:10.0.0.11=vm1:10.0.0.1
nb -- --id=@hc create load_balancer_health_check vip="10.0.0.101\:53" \
  -- add load_balancer lb-udp health_check @hc >/dev/null

# ACLs: allow-related, allow-stateless, drop, reject, on switches and port groups, address sets.
nb create address_set name=web_clients addresses='"10.0.0.11", "10.0.0.12", "20.0.0.0/24"' >/dev/null
nb create address_set name=web6 addresses='"aef0::11", "bef0::/64"' >/dev/null
nb pg-add pg_web vm1 vm4
nb pg-add pg_db vm2 vm5
nb acl-add pg_web to-lport 1002 'outport == @pg_web && ip4 && ip4.src == $web_clients && tcp.dst == 80' allow-related
nb acl-add pg_web to-lport 1001 'outport == @pg_web && ip6 && ip6.src == $web6 && tcp.dst == {80, 443}' allow-related
nb acl-add pg_web to-lport 1000 'outport == @pg_web && ip' drop
nb --log --severity=alert --name=rej-db acl-add pg_db from-lport 1003 'inport == @pg_db && udp.dst == 53' reject
nb acl-add pg_db to-lport 1001 'outport == @pg_db && ip4.src == $pg_web_ip4 && tcp.dst >= 5432 && tcp.dst <= 5440' allow
nb acl-add sw0 from-lport 1000 'ip4.dst == 10.0.0.0/24 && icmp4' allow-stateless
nb acl-add sw0 to-lport 900 'ip4 && ip4.src == 172.168.0.0/16' drop
nb --apply-after-lb acl-add sw0 from-lport 950 'ip4.dst == 10.0.0.100 && tcp' allow-related
nb --label=1234 acl-add sw1 to-lport 1000 'ip6 && icmp6' allow-related
nb acl-add sw1 from-lport 1000 'ip4 && udp.dst == 67' allow-stateless
nb --log --meter=acl-meter acl-add sw1 to-lport 800 'ip4 && tcp.flags == 0x2' reject
nb meter-add acl-meter drop 10 pktps
# QoS, port mirror-ish extras that change the flows.
nb qos-add sw0 from-lport 100 'ip4.src == 10.0.0.11' dscp=10 rate=1000 burst=100
nb set nb_global . options:svc_monitor_mac=00:00:00:00:aa:aa
nb set logical_switch sw0 other_config:mcast_snoop=true other_config:mcast_querier=true \
  other_config:mcast_ip4_src=10.0.0.254 other_config:mcast_eth_src=00:00:00:00:10:10
nb set logical_router lr0 options:mcast_relay=true
nb set logical_switch_port vm2 options:qos_max_rate=10000
nb lsp-add sw1 vm6 -- lsp-set-type vm6 virtual -- lsp-set-addresses vm6 "50:54:00:00:01:06 20.0.0.16" \
  -- lsp-set-options vm6 virtual-ip=20.0.0.16 virtual-parents=vm4,vm5
nb set logical_switch sw1 other_config:vlan-passthru=false
nb lsp-add sw1 vm7 -- lsp-set-addresses vm7 "50:54:00:00:01:07 20.0.0.17" \
  -- lsp-set-options vm7 pkt_clone_type=mc_unknown
nb set logical_router_port lr0-public options:gateway_mtu=1400
nb set logical_router lr0 options:always_learn_from_arp_request=false
# Gateway router: ECMP with symmetric replies, stateless dnat_and_snat, SNAT with a port range.
nb --ecmp-symmetric-reply lr-route-add gr0 50.0.0.0/24 172.169.0.10
nb --ecmp-symmetric-reply lr-route-add gr0 50.0.0.0/24 172.169.0.11
nb create bfd logical_port=gr0-ext dst_ip=172.169.0.12 >/dev/null
nb --bfd lr-route-add gr0 60.0.0.0/24 172.169.0.12
nb --stateless lr-nat-add gr0 dnat_and_snat 172.169.0.130 10.0.0.15
nb --portrange lr-nat-add gr0 snat 172.169.0.3 10.1.0.0/16 1000-2000
# ECMP reroute policy.
nb lr-policy-add lr0 700 "ip4.src == 10.0.0.13" reroute 172.168.0.21,172.168.0.22
# Controller events for load balancers without backends; a skip_snat load balancer.
nb set nb_global . options:controller_event=true
nb lb-add lb-empty 10.0.0.104:80 "" tcp
nb ls-lb-add sw0 lb-empty
nb lb-add lb-skip 172.169.0.201:80 "10.0.0.11:80" tcp
nb set load_balancer lb-skip options:skip_snat=true
nb lr-lb-add gr0 lb-skip
# A forwarding group, a port bound on two chassis with RARP activation, prefix delegation.
nb --liveness fwd-group-add fg1 sw1 20.0.0.50 00:00:00:00:01:50 vm4 vm5
nb set logical_switch_port vm7 options:requested-chassis=hv1,gw1 options:activation-strategy=rarp
nb set logical_router_port lr0-public options:prefix_delegation=true
nb set logical_router_port lr0-sw1 options:prefix=true
# An external port behind an HA chassis group, a source-IP route, a route table, a load
# balancer group, IPv6 reject ACLs, SNAT for a router with several gateways' worth of options.
nb ha-chassis-group-add hagrp
nb ha-chassis-group-add-chassis hagrp gw1 30
nb ha-chassis-group-add-chassis hagrp gw2 20
hag=$(nb --bare --columns=_uuid find ha_chassis_group name=hagrp)
nb lsp-add sw1 ext1 -- lsp-set-type ext1 external \
  -- lsp-set-addresses ext1 "50:54:00:00:01:08 20.0.0.18" \
  -- set logical_switch_port ext1 ha_chassis_group="$hag"
nb --policy=src-ip lr-route-add lr0 20.0.0.64/26 172.168.0.30
nb lr-route-add lr0 70.0.0.0/24 172.168.0.31 -- set logical_router_port lr0-sw1 options:route_table=rtb1
nb --route-table=rtb1 lr-route-add lr0 80.0.0.0/24 172.168.0.32
nb lb-add lb-grp 10.0.0.105:8443 "10.0.0.11:8443" tcp
lbgrp=$(nb --bare --columns=_uuid find load_balancer name=lb-grp)
lbg=$(nb create load_balancer_group name=lbg1 load_balancer="$lbgrp")
nb add logical_switch sw1 load_balancer_group "$lbg"
nb add logical_router gr0 load_balancer_group "$lbg"
nb acl-add sw1 from-lport 1100 'ip6 && tcp.dst == 22' reject
nb acl-add sw1 to-lport 1100 'ip6 && udp' reject
nb lsp-add sw0 vm8 -- lsp-set-addresses vm8 "50:54:00:00:00:08 10.0.0.18 aef0::18" \
  -- lsp-set-port-security vm8 "50:54:00:00:00:08 10.0.0.18/24 aef0::/64"
nb --wait=sb sync
sb lflow-list
# For tests that need the SB itself (tests/trace_parity.rs): a copy of the database file.
if [ -n "${HF_CORPUS_SB_COPY:-}" ]; then cp "$D/sb.db" "$HF_CORPUS_SB_COPY"; fi
