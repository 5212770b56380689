#!/usr/bin/env bash
# The one test command: installs what the tests need when it is missing, then runs every check
# CI runs: formatting, clippy, the whole test suite, fuzz-corpus replays and every benchmark suite
# once in its tiny mode. `.ci/run` calls exactly this script.
#
# Environment:
#   CI=true          a missing dependency is a failure, never a skip
#   HF_SKIP_INSTALL=1  do not try to install Debian packages (report what is missing instead)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# --- Debian packages the tests drive as oracles and clients -------------------------------------
need_pkgs=()
command -v ovsdb-server >/dev/null 2>&1 || need_pkgs+=(openvswitch-common)
command -v ovsdb-tool >/dev/null 2>&1 || need_pkgs+=(openvswitch-common)
command -v ovn-nbctl >/dev/null 2>&1 || need_pkgs+=(ovn-common)
command -v ovn-northd >/dev/null 2>&1 || need_pkgs+=(ovn-central)
command -v ovn-controller >/dev/null 2>&1 || need_pkgs+=(ovn-host)
# ovs-vswitchd --enable-dummy=override under real ovn-controller (tests/northd_controller.rs).
command -v ovs-vswitchd >/dev/null 2>&1 || need_pkgs+=(openvswitch-switch)
[ -f /usr/share/openvswitch/vswitch.ovsschema ] || need_pkgs+=(openvswitch-switch)
[ -f /usr/share/ovn/ovn-nb.ovsschema ] || need_pkgs+=(ovn-common)
/usr/bin/python3 -c 'import ovs.db.idl' >/dev/null 2>&1 || need_pkgs+=(python3-openvswitch)
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
# The real-network harness (crates/hf-testkit): traffic, offloads, the kernel's conntrack.
command -v iperf3 >/dev/null 2>&1 || need_pkgs+=(iperf3)
nc -h 2>&1 | grep -q OpenBSD || need_pkgs+=(netcat-openbsd)
command -v busybox >/dev/null 2>&1 || need_pkgs+=(busybox)
command -v ethtool >/dev/null 2>&1 || command -v /usr/sbin/ethtool >/dev/null 2>&1 || need_pkgs+=(ethtool)
command -v conntrack >/dev/null 2>&1 || command -v /usr/sbin/conntrack >/dev/null 2>&1 || need_pkgs+=(conntrack)
command -v nft >/dev/null 2>&1 || command -v /usr/sbin/nft >/dev/null 2>&1 || need_pkgs+=(nftables)
command -v ping >/dev/null 2>&1 || need_pkgs+=(iputils-ping)
# Mirror copies read back by an independent decoder (tests/datapath/mirror_format.rs).
command -v tcpdump >/dev/null 2>&1 || command -v /usr/bin/tcpdump >/dev/null 2>&1 || need_pkgs+=(tcpdump)
# A real BFD peer for next-hop BFD (tests/real/gateway.rs).
command -v bird >/dev/null 2>&1 || command -v /usr/sbin/bird >/dev/null 2>&1 || need_pkgs+=(bird2)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  # Deduplicate.
  mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
  if [ "${HF_SKIP_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing ${need_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${need_pkgs[@]}" >/dev/null
  elif [ "${CI:-}" = true ]; then
    echo "error: missing packages ${need_pkgs[*]} and cannot install them (need root and apt-get)" >&2
    exit 1
  else
    echo "warning: missing packages ${need_pkgs[*]}; tests that need them will say so" >&2
  fi
fi

# --- Rust checks ---------------------------------------------------------------------------------
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A one-off build gains nothing from incremental state, which would double the target dir.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi
step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
# Integration tests start real ovsdb-server/ovn-northd processes; the suite runs them in parallel
# (each uses its own temporary directory and ephemeral loopback ports).
cargo test --workspace --locked

step "benchmarks (tiny mode: they must keep working; real figures come from --release runs)"
cargo run --locked -q -p hf-bench -- all --tiny

step "all checks passed"
