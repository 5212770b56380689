//! [`Lab`], [`Netns`] and [`Veth`]: the namespaces and links of one test, and their cleanup.
//!
//! Every lab is listed in a process-wide registry while it lives, so the signal handler can
//! clean all of them. What a lab owns is kept in its shared state, not in the handles the test
//! holds: a [`Netns`] or [`Proc`] may outlive its lab (its namespace is gone by then).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::cmd::{self, DEFAULT_TIMEOUT, lossy};
use crate::proc::{Proc, ProcEntry};
use crate::{KitError, Result};

/// Every tag starts with this: `hf<pid>x<n>`.
const TAG_PREFIX: &str = "hf";
/// Longest interface name Linux takes (IFNAMSIZ - 1).
const IFNAME_MAX: usize = 15;

/// The labs alive in this process, for the signal handler.
static LABS: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());
static NEXT_LAB: AtomicU64 = AtomicU64::new(0);
static STARTED: OnceLock<()> = OnceLock::new();

/// What one lab owns, shared by its handles and the registry.
#[derive(Debug)]
pub(crate) struct Shared {
    /// `hf<pid>x<n>`.
    pub(crate) tag: String,
    /// The lab's directory (process logs, files tests write).
    pub(crate) dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Full namespace names, in creation order.
    netns: Vec<String>,
    /// Spawned processes not yet reaped by their [`Proc`].
    procs: Vec<ProcEntry>,
    /// Logs of every spawned process not printed yet, for a failing test.
    logs: Vec<(String, PathBuf, PathBuf)>,
    next_proc: u64,
    /// Set once cleaned: later calls do nothing.
    cleaned: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as it was: still usable for cleanup.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register a spawned process (its pid is its process group); its entry's id.
    pub(crate) fn add_proc(&self, pgid: i32, name: &str, out: &Path, err: &Path) -> u64 {
        let mut st = self.state();
        st.next_proc += 1;
        let id = st.next_proc;
        st.procs.push(ProcEntry { id, pgid });
        st.logs
            .push((name.to_string(), out.to_path_buf(), err.to_path_buf()));
        id
    }

    /// Forget process `id` (its [`Proc`] reaps it now): the lab must not signal its group,
    /// whose number may be reused.
    pub(crate) fn forget_proc(&self, id: u64) {
        self.state().procs.retain(|p| p.id != id);
    }

    /// Forget the log of `name` (its [`Proc`] printed it).
    pub(crate) fn forget_log(&self, out: &Path) {
        self.state().logs.retain(|(_, o, _)| o != out);
    }

    /// A file name in the lab's directory not used yet, from `name`.
    pub(crate) fn unique_file(&self, name: &str, ext: &str) -> PathBuf {
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut p = self.dir.join(format!("{clean}.{ext}"));
        let mut i = 1;
        while p.exists() {
            i += 1;
            p = self.dir.join(format!("{clean}-{i}.{ext}"));
        }
        p
    }

    /// Stop everything the lab owns; `print_logs` prints the logs of its processes first.
    fn cleanup(&self, print_logs: bool, keep_dir: bool) {
        let (procs, netns, logs) = {
            let mut st = self.state();
            if st.cleaned {
                return;
            }
            st.cleaned = true;
            (
                std::mem::take(&mut st.procs),
                std::mem::take(&mut st.netns),
                std::mem::take(&mut st.logs),
            )
        };
        if print_logs {
            for (name, out, err) in &logs {
                eprint!("{}", crate::proc::log_tail(name, out, err));
            }
        }
        stop_groups(&procs.iter().map(|p| p.pgid).collect::<Vec<_>>());
        for ns in netns.iter().rev() {
            remove_netns(ns);
        }
        if keep_dir {
            eprintln!("hf-testkit: kept {} (HF_TESTKIT_KEEP)", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// SIGTERM every group, give them up to 2 s to exit, then SIGKILL what is left.
fn stop_groups(pgids: &[i32]) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    if pgids.is_empty() {
        return;
    }
    for &g in pgids {
        let _ = killpg(Pid::from_raw(g), Signal::SIGTERM);
    }
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end && pgids.iter().any(|&g| cmd::alive(g)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for &g in pgids {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
}

/// Kill every process inside namespace `ns` (daemons a test started there with `--detach`
/// included), then delete it: its veths go with it.
fn remove_netns(ns: &str) {
    if let Ok(out) = cmd::output(
        Command::new("ip").args(["netns", "pids", ns]),
        None,
        DEFAULT_TIMEOUT,
    ) {
        for pid in lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    let _ = cmd::output(
        Command::new("ip").args(["netns", "delete", ns]),
        None,
        DEFAULT_TIMEOUT,
    );
}

/// `(pid, n)` of a tag-prefixed name `hf<pid>x<n>-...` (or the bare tag).
fn parse_tag(name: &str) -> Option<(i32, u64)> {
    let rest = name.strip_prefix(TAG_PREFIX)?;
    let tag = rest.split('-').next()?;
    let (pid, n) = tag.split_once('x')?;
    Some((pid.parse().ok()?, n.parse().ok()?))
}

/// Where labs keep their directories: `$TMPDIR/hf-testkit/<tag>`.
fn labs_root() -> PathBuf {
    std::env::temp_dir().join("hf-testkit")
}

/// Remove what labs of dead processes left behind (their process was SIGKILLed or aborted):
/// the processes inside their namespaces, the namespaces, and their directories. A name's tag
/// holds its process's pid; a lab whose pid is alive is never touched. Returns how many
/// namespaces and directories it removed. Needs root for namespaces; does nothing without it.
pub fn sweep_stale() -> usize {
    let me = std::process::id();
    let dead = |name: &str| {
        parse_tag(name).is_some_and(|(pid, _)| u32::try_from(pid) != Ok(me) && !cmd::alive(pid))
    };
    let mut removed = 0;
    if nix::unistd::geteuid().is_root()
        && let Ok(out) = cmd::output(
            Command::new("ip").args(["netns", "list"]),
            None,
            DEFAULT_TIMEOUT,
        )
    {
        // Lines are `NAME` or `NAME (id: N)`.
        for ns in lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| dead(n))
        {
            remove_netns(ns);
            removed += 1;
        }
    }
    if let Ok(entries) = std::fs::read_dir(labs_root()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if dead(&name) && std::fs::remove_dir_all(e.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Install the SIGINT/SIGTERM/SIGHUP handler (once per process): it cleans every live lab,
/// then exits with 128 + the signal, as the shell reports a death by that signal.
fn install_signal_handler() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| KitError::io("installing the SIGINT/SIGTERM handler", e))?;
    std::thread::Builder::new()
        .name("hf-testkit-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let labs: Vec<Arc<Shared>> = LABS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .drain(..)
                    .collect();
                eprintln!(
                    "hf-testkit: signal {sig}: removing {} lab(s) before exiting",
                    labs.len()
                );
                for lab in labs.iter().rev() {
                    lab.cleanup(false, false);
                }
                std::process::exit(128 + sig);
            }
        })
        .map_err(|e| KitError::io("starting the signal thread", e))?;
    Ok(())
}

/// Everything one test creates on the real kernel: network namespaces, veth pairs, processes,
/// a directory. Dropping it (also while a failing test unwinds) removes all of it: processes
/// first (SIGTERM, then SIGKILL, by process group; then whatever still runs inside its
/// namespaces), then the namespaces in reverse order (their veths with them), then the
/// directory. When the test is failing, the logs of its processes are printed first.
///
/// Set `HF_TESTKIT_KEEP=1` to keep the directory (its path is printed) for a post-mortem.
#[derive(Debug)]
pub struct Lab {
    shared: Arc<Shared>,
}

impl Lab {
    /// A new, empty lab. Needs root. The first lab of a process removes the leftovers of dead
    /// processes ([`sweep_stale`]; not with `HF_TESTKIT_SWEEP=0`) and installs the signal
    /// handler.
    pub fn new() -> Result<Lab> {
        if !nix::unistd::geteuid().is_root() {
            return Err(KitError::NotRoot("hf_testkit::Lab".into()));
        }
        if STARTED.get().is_none() {
            if std::env::var_os("HF_TESTKIT_SWEEP").is_none_or(|v| v != "0") {
                sweep_stale();
            }
            install_signal_handler()?;
            let _ = STARTED.set(());
        }
        let tag = format!(
            "{TAG_PREFIX}{}x{}",
            std::process::id(),
            NEXT_LAB.fetch_add(1, Ordering::Relaxed)
        );
        let dir = labs_root().join(&tag);
        std::fs::create_dir_all(&dir)
            .map_err(|e| KitError::io(format!("creating {}", dir.display()), e))?;
        let shared = Arc::new(Shared {
            tag,
            dir,
            state: Mutex::new(State::default()),
        });
        LABS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(shared.clone());
        Ok(Lab { shared })
    }

    /// `hf<pid>x<n>`: the prefix of every namespace name of this lab.
    pub fn tag(&self) -> &str {
        &self.shared.tag
    }

    /// The lab's directory: process logs, and files a test wants removed with the lab.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// A new network namespace `<tag>-<name>` with its loopback up and nothing else: no
    /// route leads out of it.
    pub fn netns(&self, name: &str) -> Result<Netns> {
        if name.is_empty()
            || name.len() > 40
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(KitError::Invalid(format!(
                "namespace name {name:?}: use 1 to 40 of [A-Za-z0-9_-]"
            )));
        }
        let full = format!("{}-{name}", self.shared.tag);
        {
            let mut st = self.shared.state();
            if st.netns.contains(&full) {
                return Err(KitError::Invalid(format!(
                    "namespace {name:?} already exists in this lab"
                )));
            }
            // Listed before it exists: a failure half-way still removes it.
            st.netns.push(full.clone());
        }
        cmd::run(
            Command::new("ip").args(["netns", "add", &full]),
            DEFAULT_TIMEOUT,
        )?;
        let ns = Netns {
            name: full,
            short: name.to_string(),
            lab: self.shared.clone(),
        };
        ns.link_up("lo")?;
        Ok(ns)
    }

    /// A veth pair between `a` and `b` (names inside each namespace), both ends up. The ends
    /// are created directly in their namespaces: no interface ever appears on the host.
    pub fn veth(&self, a: (&Netns, &str), b: (&Netns, &str)) -> Result<Veth> {
        self.veth_with(a, b, &VethOpts::default())
    }

    /// [`Lab::veth`] with MACs, MTU, offloads and whether to bring the ends up.
    pub fn veth_with(&self, a: (&Netns, &str), b: (&Netns, &str), o: &VethOpts) -> Result<Veth> {
        for (ns, ifname) in [a, b] {
            check_ifname(ifname)?;
            if !Arc::ptr_eq(&ns.lab, &self.shared) {
                return Err(KitError::Invalid(format!(
                    "namespace {} belongs to another lab",
                    ns.name
                )));
            }
        }
        let mut c = Command::new("ip");
        c.args(["-n", &a.0.name, "link", "add", "name", a.1]);
        end_opts(&mut c, o.mac_a.as_deref(), o.mtu);
        c.args(["type", "veth", "peer", "name", b.1]);
        end_opts(&mut c, o.mac_b.as_deref(), o.mtu);
        c.args(["netns", &b.0.name]);
        cmd::run(&mut c, DEFAULT_TIMEOUT)?;
        let veth = Veth {
            a: VethEnd {
                ns: a.0.clone(),
                ifname: a.1.to_string(),
            },
            b: VethEnd {
                ns: b.0.clone(),
                ifname: b.1.to_string(),
            },
        };
        for end in [&veth.a, &veth.b] {
            if let Some(on) = o.offloads {
                end.ns.offloads(&end.ifname, on)?;
            }
            if o.up {
                end.ns.link_up(&end.ifname)?;
            }
        }
        Ok(veth)
    }

    /// A VM: a new namespace `name` attached to `chassis` by a veth pair (`tap` on the
    /// chassis side, `iface.ifname` in the VM), configured as [`Lab::attach`] does.
    pub fn vm(&self, name: &str, chassis: &Netns, tap: &str, iface: &VmIface) -> Result<Netns> {
        let vm = self.netns(name)?;
        self.attach(&vm, chassis, tap, iface)?;
        Ok(vm)
    }

    /// Attach namespace `vm` to `chassis` with a new veth pair: in the VM `iface.ifname` with
    /// its MAC, MTU, addresses and default route; on the chassis `tap`, up and without
    /// addresses (the datapath under test takes it). Also for a second attachment of the same
    /// VM (a live migration: a new pair with the same MAC and IP, then the old one removed).
    pub fn attach(&self, vm: &Netns, chassis: &Netns, tap: &str, iface: &VmIface) -> Result<Veth> {
        let veth = self.veth_with(
            (vm, &iface.ifname),
            (chassis, tap),
            &VethOpts {
                mac_a: iface.mac.clone(),
                mtu: iface.mtu,
                offloads: iface.offloads,
                ..VethOpts::default()
            },
        )?;
        for a in &iface.addrs {
            vm.addr_add(&iface.ifname, a)?;
        }
        if let Some(gw) = &iface.gateway {
            let default = if gw.contains(':') {
                "::/0"
            } else {
                "0.0.0.0/0"
            };
            vm.route_add(default, gw)?;
        }
        Ok(veth)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        LABS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|l| !Arc::ptr_eq(l, &self.shared));
        let keep = std::env::var_os("HF_TESTKIT_KEEP").is_some_and(|v| v == "1");
        self.shared.cleanup(std::thread::panicking(), keep);
    }
}

fn end_opts(c: &mut Command, mac: Option<&str>, mtu: Option<u32>) {
    if let Some(m) = mac {
        c.args(["address", m]);
    }
    if let Some(m) = mtu {
        c.args(["mtu", &m.to_string()]);
    }
}

fn check_ifname(ifname: &str) -> Result<()> {
    if ifname.is_empty()
        || ifname.len() > IFNAME_MAX
        || ifname
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(KitError::Invalid(format!(
            "interface name {ifname:?}: Linux takes 1 to {IFNAME_MAX} bytes without '/', ':' \
             or spaces"
        )));
    }
    Ok(())
}

/// Options of [`Lab::veth_with`].
#[derive(Debug, Clone)]
pub struct VethOpts {
    /// The `a` end's MAC (`aa:bb:cc:dd:ee:ff`); the kernel picks one otherwise.
    pub mac_a: Option<String>,
    /// The `b` end's MAC.
    pub mac_b: Option<String>,
    /// Both ends' MTU.
    pub mtu: Option<u32>,
    /// Both ends' offloads on or off ([`Netns::offloads`]); the kernel's defaults otherwise.
    pub offloads: Option<bool>,
    /// Bring both ends up (default: true).
    pub up: bool,
}

impl Default for VethOpts {
    fn default() -> Self {
        VethOpts {
            mac_a: None,
            mac_b: None,
            mtu: None,
            offloads: None,
            up: true,
        }
    }
}

/// The VM side of [`Lab::vm`] and [`Lab::attach`].
#[derive(Debug, Clone)]
pub struct VmIface {
    /// The interface name inside the VM (default `eth0`).
    pub ifname: String,
    /// Its MAC (the logical port's); the kernel picks one otherwise.
    pub mac: Option<String>,
    /// Addresses with prefix length (`10.0.0.11/24`).
    pub addrs: Vec<String>,
    /// The default route's next hop.
    pub gateway: Option<String>,
    /// The MTU of both ends.
    pub mtu: Option<u32>,
    /// Offloads of both ends on or off; the kernel's defaults otherwise.
    pub offloads: Option<bool>,
}

impl Default for VmIface {
    fn default() -> Self {
        VmIface {
            ifname: "eth0".into(),
            mac: None,
            addrs: Vec::new(),
            gateway: None,
            mtu: None,
            offloads: None,
        }
    }
}

/// One end of a [`Veth`].
#[derive(Debug, Clone)]
pub struct VethEnd {
    /// Its namespace.
    pub ns: Netns,
    /// Its name there.
    pub ifname: String,
}

/// A veth pair made by [`Lab::veth`]. It goes with its namespaces; [`Veth::remove`] removes
/// it before (a VM's old attachment after a migration).
#[derive(Debug, Clone)]
pub struct Veth {
    /// The first end.
    pub a: VethEnd,
    /// The second end.
    pub b: VethEnd,
}

impl Veth {
    /// Delete the pair (deleting one end deletes both).
    pub fn remove(&self) -> Result<()> {
        self.a.ns.ip(&["link", "del", &self.a.ifname]).map(drop)
    }
}

/// A network namespace of a [`Lab`]. Cheap to clone; it does not keep the namespace alive:
/// the lab removes it when it drops.
#[derive(Debug, Clone)]
pub struct Netns {
    name: String,
    short: String,
    pub(crate) lab: Arc<Shared>,
}

impl Netns {
    /// The full name (`hf<pid>x<n>-<name>`), as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name it was given in [`Lab::netns`].
    pub fn short_name(&self) -> &str {
        &self.short
    }

    /// `/run/netns/<name>`: for `nsenter --net=` or `setns(2)`.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// `program` to run inside the namespace (`ip netns exec <name> program`): add arguments,
    /// environment or a directory, then [`Netns::spawn_command`] it or run it with
    /// [`cmd::run`].
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Run `args` (program first) inside the namespace and require success; its stdout. The
    /// error names the command, its status and its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.run_for(DEFAULT_TIMEOUT, args)
    }

    /// [`Netns::run`] with its own timeout.
    pub fn run_for(&self, timeout: Duration, args: &[&str]) -> Result<String> {
        let mut c = self.argv(args)?;
        cmd::run(&mut c, timeout)
    }

    /// Run `args` inside the namespace whatever its exit status (a ping that loses every
    /// packet, a connection expected to fail).
    pub fn output(&self, args: &[&str], timeout: Duration) -> Result<std::process::Output> {
        let mut c = self.argv(args)?;
        cmd::output(&mut c, None, timeout)
    }

    fn argv(&self, args: &[&str]) -> Result<Command> {
        let (prog, rest) = args
            .split_first()
            .ok_or_else(|| KitError::Invalid("an empty command line".into()))?;
        let mut c = self.command(prog);
        c.args(rest);
        Ok(c)
    }

    /// Start `args` (program first) inside the namespace as process `name`: its own process
    /// group, stdout and stderr to `<name>.out`/`.err` in the lab's directory. Stopped when
    /// the [`Proc`] drops or the lab does.
    pub fn spawn(&self, name: &str, args: &[&str]) -> Result<Proc> {
        let c = self.argv(args)?;
        self.spawn_command(name, c)
    }

    /// [`Netns::spawn`] for a command built with [`Netns::command`] (or any command: it runs
    /// in the namespace only if it was built so). Its stdin is empty unless the command sets
    /// one; stdout and stderr are always the log files.
    pub fn spawn_command(&self, name: &str, c: Command) -> Result<Proc> {
        Proc::spawn(&self.lab, name, c)
    }

    /// `ip -n <name> ARGS...`; its stdout.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        cmd::run(
            Command::new("ip").args(["-n", &self.name]).args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// Add address `cidr` (`192.0.2.1/24`, `2001:db8::1/64`) to `ifname`. IPv6 addresses skip
    /// duplicate address detection, so they are usable at once.
    pub fn addr_add(&self, ifname: &str, cidr: &str) -> Result<()> {
        let mut args = vec!["addr", "add", cidr, "dev", ifname];
        if cidr.contains(':') {
            args.push("nodad");
        }
        self.ip(&args).map(drop)
    }

    /// Bring `ifname` up.
    pub fn link_up(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "up"]).map(drop)
    }

    /// Bring `ifname` down.
    pub fn link_down(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "down"]).map(drop)
    }

    /// Route `dst` (`0.0.0.0/0`, `10.0.2.0/24`, `::/0`) via `gateway`.
    pub fn route_add(&self, dst: &str, gateway: &str) -> Result<()> {
        self.ip(&["route", "add", dst, "via", gateway]).map(drop)
    }

    /// Route `dst` straight out of `ifname` (on-link).
    pub fn route_add_dev(&self, dst: &str, ifname: &str) -> Result<()> {
        self.ip(&["route", "add", dst, "dev", ifname]).map(drop)
    }

    /// Set `ifname`'s MAC.
    pub fn set_mac(&self, ifname: &str, mac: &str) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "address", mac])
            .map(drop)
    }

    /// Set `ifname`'s MTU.
    pub fn set_mtu(&self, ifname: &str, mtu: u32) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string()])
            .map(drop)
    }

    /// `ifname`'s MAC, as the kernel reports it (lower case).
    pub fn mac(&self, ifname: &str) -> Result<String> {
        let json = self.ip(&["-j", "link", "show", "dev", ifname])?;
        let v: serde_json::Value = serde_json::from_str(&json).map_err(|e| KitError::Parse {
            what: format!("`ip -j link show dev {ifname}`"),
            detail: format!("{e}: {json}"),
        })?;
        v.get(0)
            .and_then(|l| l.get("address"))
            .and_then(|a| a.as_str())
            .map(str::to_string)
            .ok_or_else(|| KitError::Parse {
                what: format!("`ip -j link show dev {ifname}`"),
                detail: format!("no address in {json}"),
            })
    }

    /// Whether `ifname` exists in the namespace.
    pub fn has_link(&self, ifname: &str) -> bool {
        self.ip(&["link", "show", "dev", ifname]).is_ok()
    }

    /// Set sysctl `key` (`net.ipv4.ip_forward`) to `value` for this namespace (it writes
    /// `/proc/sys/...` from inside the namespace; `net.*` keys are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(KitError::Invalid(format!("sysctl key {key:?}")));
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run(&[
            "sh",
            "-c",
            r#"printf '%s\n' "$1" > "$2""#,
            "sh",
            value,
            &path,
        ])
        .map(drop)
    }

    /// Turn `ifname`'s offloads (checksums, scatter-gather, TSO, GSO, GRO) on or off with
    /// `ethtool -K`: off makes the kernel hand the datapath whole, checksummed frames.
    pub fn offloads(&self, ifname: &str, on: bool) -> Result<()> {
        let v = if on { "on" } else { "off" };
        self.run(&[
            "ethtool", "-K", ifname, "rx", v, "tx", v, "sg", v, "tso", v, "gso", v, "gro", v,
        ])
        .map(drop)
    }

    /// Wait until something listens on TCP `port` in the namespace (`ss -ltn`).
    pub fn wait_listening(&self, port: u16, timeout: Duration) -> Result<()> {
        let filter = format!("sport = :{port}");
        cmd::wait_until(
            timeout,
            || format!("a TCP listener on port {port} in {}", self.name),
            || {
                self.run(&["ss", "-Hltn", &filter])
                    .is_ok_and(|s| !s.trim().is_empty())
            },
        )
    }

    /// Send one gratuitous ARP for `ip` out of `ifname` (`busybox arping -U`), as a VM does
    /// after it moved.
    pub fn garp(&self, ifname: &str, ip: &str) -> Result<()> {
        self.run(&["busybox", "arping", "-U", "-c", "1", "-I", ifname, ip])
            .map(drop)
    }

    /// The lab this namespace belongs to has not been dropped yet.
    pub fn exists(&self) -> bool {
        self.path().exists()
    }

    /// The lab's directory.
    pub fn lab_dir(&self) -> &Path {
        &self.lab.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_parse() {
        assert_eq!(parse_tag("hf123x4-chassis1"), Some((123, 4)));
        assert_eq!(parse_tag("hf123x4"), Some((123, 4)));
        assert_eq!(parse_tag("hf123-x"), None);
        assert_eq!(parse_tag("ovn-thing"), None);
        assert_eq!(parse_tag("hfx1-a"), None);
    }

    #[test]
    fn interface_names_are_checked() {
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("fifteen-bytes-x").is_ok());
        assert!(check_ifname("sixteen-bytes-xx").is_err());
        assert!(check_ifname("").is_err());
        assert!(check_ifname("a/b").is_err());
    }
}
