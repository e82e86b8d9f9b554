//! Tables fitted to the locked-memory limit, on kernels that charge BPF
//! memory to it (before 5.11: `crate::memlock`) when the agent may not lift
//! it. The budget is per uid and shared with every other process of that
//! uid on the node, so it cannot be computed in advance: the loader starts
//! with the sizes the flags ask for and halves the shrinkable tables each
//! time the kernel refuses `bpf()` with EPERM, down to a floor below which
//! the agent would be of little use. What the smaller tables hold stays
//! exact: a process the full process table cannot take is counted in
//! `slowpath_lost_events_total{reason="process_table_full"}`, as always.

/// The smallest process table worth running with: thread groups that made a
/// counted call at the same time (a busy node has a few hundred).
const MIN_PROCESSES: u32 = 256;
/// The smallest call-site tables (distinct stacks, call sites, stack
/// copies): enough for the findings' few sampled processes at a time.
const MIN_STACK_ENTRIES: u32 = 16;
const MIN_STACK_COPIES: u32 = 4;
/// At most this many halvings (16384 processes -> 256 takes 6).
const MAX_STEPS: u32 = 8;

/// The sizes the flags ask for, and how far they were halved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    /// Whether shrinking is allowed at all (`Memlock::fit_tables`).
    active: bool,
    /// Halvings so far.
    step: u32,
    /// The process table's requested capacity (`--bpf.max-processes`).
    processes: u32,
}

impl Fit {
    /// No halving yet; `active`: whether an EPERM from `bpf()` may shrink
    /// the tables (a finite locked-memory limit that the kernel charges).
    pub fn new(processes: u32, active: bool) -> Self {
        Fit {
            active,
            step: 0,
            processes,
        }
    }

    /// The process table's capacity at this step (entries).
    pub fn processes(&self) -> u32 {
        self.scaled(self.processes, MIN_PROCESSES)
    }

    /// A call-site table of `requested` entries at this step.
    pub fn stack_entries(&self, requested: u32) -> u32 {
        self.scaled(requested, MIN_STACK_ENTRIES)
    }

    /// The stack-copy table of `requested` entries at this step.
    pub fn stack_copies(&self, requested: u32) -> u32 {
        self.scaled(requested, MIN_STACK_COPIES)
    }

    /// `requested` halved `step` times, never below `floor` (nor above
    /// `requested`).
    fn scaled(&self, requested: u32, floor: u32) -> u32 {
        (requested >> self.step).max(floor.min(requested))
    }

    /// Halve the tables once more after an EPERM; `false` when fitting is
    /// off or the process table is already at its floor (the refusal then
    /// goes on as any other).
    pub fn shrink(&mut self) -> bool {
        let more = self.active && self.step < MAX_STEPS && self.processes() > MIN_PROCESSES;
        if more {
            self.step += 1;
        }
        more
    }

    /// Whether the tables are smaller than the flags asked for.
    pub fn reduced(&self) -> bool {
        self.step > 0
    }

    /// How many shrink steps a load may take, for its attempt budget.
    pub const fn max_steps() -> usize {
        MAX_STEPS as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shrink_halves_the_tables_down_to_their_floors() {
        let mut fit = Fit::new(16384, true);
        assert_eq!((fit.processes(), fit.reduced()), (16384, false));
        assert_eq!(fit.stack_entries(256), 256);
        let mut seen = vec![];
        while fit.shrink() {
            seen.push(fit.processes());
        }
        assert_eq!(seen, [8192, 4096, 2048, 1024, 512, 256]);
        assert!(fit.reduced());
        assert_eq!(fit.stack_entries(256), 16);
        assert_eq!(fit.stack_entries(1024), 16);
        assert_eq!(fit.stack_copies(64), 4);
        assert_eq!(fit.stack_entries(1), 1, "a one-entry table stays one entry");
    }

    #[test]
    fn without_a_finite_limit_or_below_the_floor_nothing_shrinks() {
        let mut off = Fit::new(16384, false);
        assert!(!off.shrink());
        assert_eq!(off.processes(), 16384);
        let mut small = Fit::new(100, true);
        assert!(!small.shrink(), "a table the user made small is not shrunk");
        assert_eq!(small.processes(), 100);
    }
}
