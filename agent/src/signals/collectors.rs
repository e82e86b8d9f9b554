//! Which signals run: `--collector.<name>` and `--no-collector.<name>` for
//! each signal of [`SIGNALS`], in node_exporter's convention, all on by
//! default. A signal switched off asks nothing of the kernel side (its
//! [`KernelNeeds`](super::KernelNeeds) are left out of
//! [`kernel_setup`](super::kernel_setup): no hook, fentry program, rodata
//! switch or map size of its own), exports none of its families, reads or
//! checks nothing about the node for itself and runs no doctor rule.
//!
//! The flags are made from [`SIGNALS`], so a new signal gets its pair with
//! its line there. `SLOWPATH_COLLECTOR_<NAME>` (`true` or `false`) sets a
//! collector from the environment; either flag on the command line wins
//! over it, and of the two flags the last one given wins.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use tracing::info;

use super::{Signal, SIGNALS};

/// Whether each signal of [`SIGNALS`] runs, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collectors {
    on: [bool; SIGNALS.len()],
}

impl Default for Collectors {
    /// Every collector on.
    fn default() -> Self {
        Self {
            on: [true; SIGNALS.len()],
        }
    }
}

impl Collectors {
    /// The signals switched on, in [`SIGNALS`] order.
    pub fn enabled(&self) -> impl Iterator<Item = &'static Signal> + '_ {
        SIGNALS
            .into_iter()
            .zip(self.on)
            .filter_map(|(s, on)| on.then_some(s))
    }

    /// The signals switched off, in [`SIGNALS`] order.
    pub fn disabled(&self) -> impl Iterator<Item = &'static Signal> + '_ {
        SIGNALS
            .into_iter()
            .zip(self.on)
            .filter_map(|(s, on)| (!on).then_some(s))
    }

    /// Whether the signal named `name` runs (false for a name no signal has).
    #[cfg(test)]
    pub fn is_on(&self, name: &str) -> bool {
        self.enabled().any(|s| s.name == name)
    }

    /// These flags with the signal named `name` switched `on` (tests).
    #[cfg(test)]
    pub fn with(mut self, name: &str, on: bool) -> Self {
        let idx = SIGNALS.iter().position(|s| s.name == name);
        self.on[idx.unwrap_or_else(|| panic!("no signal {name}"))] = on;
        self
    }
}

/// The id and long name of the flag that switches `name` on.
fn on_flag(name: &str) -> String {
    format!("collector.{name}")
}

/// The id and long name of the flag that switches `name` off.
fn off_flag(name: &str) -> String {
    format!("no-collector.{name}")
}

/// The environment variable of collector `name`.
fn env_var(name: &str) -> String {
    format!("SLOWPATH_COLLECTOR_{}", name.to_uppercase())
}

/// `SLOWPATH_COLLECTOR_<NAME>`: the words clap's `BoolishValueParser`
/// takes, refused with the fix.
fn parse_switch(s: &str) -> Result<bool, &'static str> {
    match s.to_ascii_lowercase().as_str() {
        "y" | "yes" | "t" | "true" | "on" | "1" => Ok(true),
        "n" | "no" | "f" | "false" | "off" | "0" => Ok(false),
        _ => Err("expected true or false"),
    }
}

impl clap::Args for Collectors {
    fn augment_args(cmd: Command) -> Command {
        SIGNALS.iter().fold(cmd, |cmd, signal| {
            let (on, off) = (on_flag(signal.name), off_flag(signal.name));
            cmd.arg(
                Arg::new(on.clone())
                    .long(on.clone())
                    .help(format!(
                        "Run the {} collector (on by default; --{off} switches it off)",
                        signal.name
                    ))
                    .action(ArgAction::SetTrue)
                    .value_parser(parse_switch)
                    .default_value("true")
                    .env(env_var(signal.name))
                    .overrides_with(on.clone()) // given twice: the last one
                    .global(true),
            )
            .arg(
                Arg::new(off.clone())
                    .long(off.clone())
                    .help(format!(
                        "Switch the {} collector off: none of its kernel hooks or syscalls \
                         traced, none of its metrics exported, none of its doctor rules run",
                        signal.name
                    ))
                    .action(ArgAction::SetTrue)
                    .overrides_with(off)
                    .global(true),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for Collectors {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut collectors = Self::default();
        collectors.update_from_arg_matches(matches)?;
        Ok(collectors)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for (on, signal) in self.on.iter_mut().zip(SIGNALS) {
            let (on_id, off_id) = (on_flag(signal.name), off_flag(signal.name));
            // Not clap's overrides_with between the two: it would take the
            // environment's value of one for a conflict with the other.
            let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
            *on = match (given(&on_id), given(&off_id)) {
                (true, true) => matches.index_of(&on_id) > matches.index_of(&off_id),
                (true, false) => true,
                (false, true) => false,
                // the environment, or the default
                (false, false) => matches.get_one::<bool>(&on_id).copied().unwrap_or(true),
            };
        }
        Ok(())
    }
}

/// The syscalls `signal` counts on this architecture (its groups').
fn syscalls(signal: &Signal) -> Vec<&'static str> {
    crate::bpf::syscalls_of(signal.kernel.syscall_groups)
}

/// What switching collectors off leaves out of the kernel side, one line
/// each: the hooks and syscalls of a disabled collector that no enabled
/// one needs, those it shares with an enabled one, and the syscall hook
/// (`sys_enter`) when no enabled collector counts syscalls.
pub fn left_out(collectors: &Collectors) -> Vec<String> {
    let mut lines = Vec::new();
    let needed_by = |what: &dyn Fn(&Signal) -> bool| {
        collectors
            .enabled()
            .filter(|s| what(s))
            .map(|s| s.name)
            .collect::<Vec<_>>()
    };
    for signal in collectors.disabled() {
        let kernel = &signal.kernel;
        let hooks: Vec<&str> = kernel.hooks.iter().map(|h| h.name).collect();
        let (shared, own): (Vec<&str>, Vec<&str>) = syscalls(signal)
            .into_iter()
            .partition(|call| !needed_by(&|s: &Signal| syscalls(s).contains(call)).is_empty());
        let mut parts = Vec::new();
        if !hooks.is_empty() {
            parts.push(format!("hooks {} not attached", hooks.join(", ")));
        }
        if !own.is_empty() {
            parts.push(format!("syscalls {} not counted", own.join(", ")));
        }
        if !shared.is_empty() {
            let by = needed_by(&|s: &Signal| shared.iter().any(|c| syscalls(s).contains(c)));
            parts.push(format!(
                "syscalls {} still hooked for collector {}",
                shared.join(", "),
                by.join(", ")
            ));
        }
        let what = match parts.is_empty() {
            true => String::new(),
            false => format!(": {}", parts.join("; ")),
        };
        lines.push(format!("collector {} disabled{what}", signal.name));
    }
    if collectors.disabled().next().is_some()
        && needed_by(&|s: &Signal| !s.kernel.syscall_groups.is_empty()).is_empty()
    {
        lines.push(format!(
            "no enabled collector counts syscalls: hook {} not attached",
            crate::bpf::SYS_ENTER
        ));
    }
    lines
}

/// Log what the disabled collectors leave out (see [`left_out`]).
pub fn log_left_out(collectors: &Collectors) {
    for line in left_out(collectors) {
        info!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        collectors: Collectors,
    }

    /// The collectors of `args`, with the environment's SLOWPATH_COLLECTOR_*
    /// taken from `env` instead of the process's.
    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Collectors, clap::Error> {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cmd = Flags::command();
        let vars: Vec<(String, String)> = cmd
            .get_arguments()
            .filter_map(|a| Some((a.get_id().to_string(), a.get_env()?.to_str()?.to_string())))
            .collect();
        for (id, var) in vars {
            // clap reads the process environment: re-point each variable at
            // a fresh name only this call sets (tests run in parallel
            // threads; std serializes this write with clap's reads).
            let test_var = format!("{var}_TEST_{call}");
            if let Some((_, value)) = env.iter().find(|(k, _)| *k == var) {
                std::env::set_var(&test_var, value);
            }
            cmd = cmd.mut_arg(id, |a| a.env(test_var));
        }
        let mut full = vec!["slowpath"];
        full.extend(args);
        let matches = cmd.try_get_matches_from(full)?;
        Ok(Flags::from_arg_matches(&matches)?.collectors)
    }

    use crate::signals::test_support::signal_names_but as but;

    fn on(c: &Collectors) -> Vec<&'static str> {
        c.enabled().map(|s| s.name).collect()
    }

    #[test]
    fn every_collector_is_on_by_default() {
        let c = parse(&[], &[]).unwrap();
        assert_eq!(c, Collectors::default());
        assert_eq!(on(&c), but(&[]));
        assert!(on(&c).len() >= 6 && left_out(&c).is_empty());
    }

    #[test]
    fn no_collector_switches_one_off_and_the_last_flag_wins() {
        let c = parse(&["--no-collector.timer"], &[]).unwrap();
        assert_eq!(on(&c), but(&["timer"]));
        assert!(!c.is_on("timer") && c.is_on("clock"));
        let c = parse(&["--no-collector.timer", "--collector.timer"], &[]).unwrap();
        assert!(c.is_on("timer"));
        let c = parse(&["--collector.timer", "--no-collector.timer"], &[]).unwrap();
        assert!(!c.is_on("timer"));
        let c = parse(&["--no-collector.clock", "--no-collector.memory"], &[]).unwrap();
        assert_eq!(on(&c), but(&["clock", "memory"]));
        for twice in ["--collector.sleep", "--no-collector.sleep"] {
            let c = parse(&[twice, twice], &[]).unwrap();
            assert_eq!(c.is_on("sleep"), twice == "--collector.sleep");
        }
        assert!(parse(&["--no-collector.nosuch"], &[]).is_err());
        assert!(parse(&["--collector.timer=false"], &[]).is_err());
    }

    #[test]
    fn the_environment_sets_a_collector_and_a_flag_wins_over_it() {
        let env = [("SLOWPATH_COLLECTOR_MEMORY", "false")];
        assert!(!parse(&[], &env).unwrap().is_on("memory"));
        assert!(parse(&["--collector.memory"], &env)
            .unwrap()
            .is_on("memory"));
        let on = [("SLOWPATH_COLLECTOR_MEMORY", "true")];
        assert!(parse(&[], &on).unwrap().is_on("memory"));
        assert!(!parse(&["--no-collector.memory"], &on)
            .unwrap()
            .is_on("memory"));
        let off = [("SLOWPATH_COLLECTOR_MEMORY", "false")];
        assert!(!parse(&["--no-collector.memory"], &off)
            .unwrap()
            .is_on("memory"));
        let bad = [("SLOWPATH_COLLECTOR_MEMORY", "maybe")];
        let err = parse(&[], &bad).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("expected true or false"), "{err}");
        for (word, on) in [
            ("yes", true),
            ("ON", true),
            ("1", true),
            ("off", false),
            ("0", false),
        ] {
            let env = [("SLOWPATH_COLLECTOR_MEMORY", word)];
            assert_eq!(parse(&[], &env).unwrap().is_on("memory"), on, "{word}");
        }
    }

    #[test]
    fn the_log_names_what_a_disabled_collector_leaves_out() {
        let c = Collectors::default().with("timer", false);
        let lines = left_out(&c);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with(
            "collector timer disabled: hooks hrtimer_expire_entry, hrtimer_expire_exit, \
             sched_waking not attached; syscalls futex, futex_waitv, "
        ));
        assert!(
            lines[0].ends_with(
                "pselect6 not counted; syscalls nanosleep, clock_nanosleep still hooked for \
                 collector sleep"
            ),
            "{}",
            lines[0]
        );
        let sleep = left_out(&Collectors::default().with("sleep", false));
        assert_eq!(
            sleep,
            [
                "collector sleep disabled: syscalls nanosleep, clock_nanosleep still hooked for \
              collector timer"
            ]
        );
        let off = but(&["memory"]);
        let only_memory = off
            .iter()
            .fold(Collectors::default(), |c, name| c.with(name, false));
        let lines = left_out(&only_memory);
        assert_eq!(lines.len(), off.len() + 1, "one line each, then the hook");
        assert_eq!(
            lines[off.len()],
            "no enabled collector counts syscalls: hook sys_enter not attached"
        );
    }
}
