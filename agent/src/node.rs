//! What the signals know about the node as a whole, beside the per-process
//! counters: settings read from sysfs (the clocksource, the THP policy),
//! checks the agent runs on itself (the vDSO canary) and measurements the
//! doctor makes (clock read costs, the cost of one wakeup). Each is a
//! [`NodeFact`], a type owned by one signal; this module only holds them,
//! reads settings files on the signals' behalf and finds a fact by type.
//! It knows no signal.

use std::any::Any;
use std::fmt::Debug;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One thing a signal knows about the node. A signal reads its own facts
/// back by type ([`NodeFacts::get`]); the doctor shows each fact through the
/// optional methods, in the order the facts were gathered.
pub trait NodeFact: Any + Send + Sync + Debug {
    /// The key and value of this fact in the doctor's JSON report (between
    /// `attach` and `findings`), or `None` when the report does not show it.
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        None
    }
    /// Its part of the text report's second line (parts joined by `; `).
    fn headline(&self) -> Option<String> {
        None
    }
    /// A block of lines after the findings in the text report.
    fn table(&self) -> Option<String> {
        None
    }
}

/// A fact shared between the worker, the scrapes and the doctor.
pub type Fact = Arc<dyn NodeFact>;

/// A settings file under `--path.sysfs` that could not be read: its path and
/// the error.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: io::Error,
}

/// How a signal reads its node settings on every scrape and report: under
/// a sysfs root, pushing every file it could not read to the list (a
/// missing file leaves a gap in the fact, not an error).
pub type SettingsReader = fn(&Path, &mut Vec<Unreadable>) -> Fact;

/// The node facts of one scrape or report, in the order they were gathered.
#[derive(Debug, Default, Clone)]
pub struct NodeFacts {
    facts: Vec<Fact>,
    /// Settings files that could not be read (a wrong `--path.sysfs`, a
    /// container without the host's /sys, a kernel without THP): their
    /// metrics are missing, and the scrape counts an error. Shared so that
    /// facts can be cloned cheaply.
    pub unreadable: Arc<Vec<Unreadable>>,
}

impl NodeFacts {
    /// The settings of every reader, read from the sysfs tree at `sysfs`.
    pub fn read_settings(sysfs: &Path, readers: impl IntoIterator<Item = SettingsReader>) -> Self {
        let mut unreadable = Vec::new();
        let facts = readers
            .into_iter()
            .map(|read| read(sysfs, &mut unreadable))
            .collect();
        Self {
            facts,
            unreadable: Arc::new(unreadable),
        }
    }

    /// Add facts gathered elsewhere (the worker's checks, the doctor's
    /// measurements), after those already held.
    pub fn extend(&mut self, facts: impl IntoIterator<Item = Fact>) {
        self.facts.extend(facts);
    }

    /// The first fact of type `T`, if gathered.
    pub fn get<T: NodeFact>(&self) -> Option<&T> {
        self.facts
            .iter()
            .find_map(|f| (f.as_ref() as &dyn Any).downcast_ref::<T>())
    }

    /// Every fact, in the order gathered.
    pub fn iter(&self) -> impl Iterator<Item = &dyn NodeFact> {
        self.facts.iter().map(|f| f.as_ref())
    }
}

/// Read one settings file under `sysfs`, noting a failure in `unreadable`.
pub fn read_setting(sysfs: &Path, file: &str, unreadable: &mut Vec<Unreadable>) -> Option<String> {
    let path = sysfs.join(file);
    match fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) => {
            unreadable.push(Unreadable { path, error });
            None
        }
    }
}

/// The bracketed choice of a sysfs policy file: `always [madvise] never` ->
/// `madvise`.
pub fn selected_choice(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(text[start..start + len].to_string())
}

/// Seconds one call of `call` takes: `slices` timed slices of `per_slice`
/// calls each, the median of the slices' means, so that one slice that lost
/// the CPU does not raise the figure (the signals' own small measurements
/// of a syscall, taken off the scrape path).
pub fn median_seconds_per_call(slices: u32, per_slice: u32, mut call: impl FnMut()) -> f64 {
    let mut means: Vec<f64> = (0..slices.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..per_slice {
                call();
            }
            start.elapsed().as_secs_f64() / f64::from(per_slice.max(1))
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[means.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_choice_is_selected() {
        assert_eq!(
            selected_choice("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_choice("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_choice("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(selected_choice("garbage"), None);
    }

    #[derive(Debug, PartialEq)]
    struct Answer(Option<String>);
    impl NodeFact for Answer {}
    #[derive(Debug)]
    struct Other;
    impl NodeFact for Other {}

    fn read_answer(sysfs: &Path, unreadable: &mut Vec<Unreadable>) -> Fact {
        Arc::new(Answer(read_setting(sysfs, "answer", unreadable)))
    }

    #[test]
    fn settings_are_read_and_found_by_type_and_gaps_are_listed() {
        let root = std::env::temp_dir().join(format!("slowpath-node-{}", std::process::id()));
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("answer"), "42").unwrap();
        let reader: SettingsReader = read_answer;
        let mut facts = NodeFacts::read_settings(&root, [reader]);
        assert_eq!(facts.get::<Answer>(), Some(&Answer(Some("42".into()))));
        assert!(facts.get::<Other>().is_none());
        assert!(facts.unreadable.is_empty());
        facts.extend([Arc::new(Other) as Fact]);
        assert!(facts.get::<Other>().is_some());
        assert_eq!(facts.iter().count(), 2);

        let missing = NodeFacts::read_settings(&root.join("missing"), [reader]);
        assert_eq!(missing.get::<Answer>(), Some(&Answer(None)));
        assert_eq!(missing.unreadable.len(), 1);
        assert!(missing.unreadable[0].path.ends_with("missing/answer"));
        fs::remove_dir_all(&root).unwrap();
    }
}
